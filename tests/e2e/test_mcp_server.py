"""`kindex mcp` driven by the official MCP client (stdio and streamable HTTP) against a real `kindex serve`: initialize,
tools/list, tools/call search and cite; the end user is the server's configuration, never a tool argument."""

import os
import socket
import subprocess
import sys

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from tests.support.waiting import wait_settled, wait_until  # noqa: E402

pytestmark = pytest.mark.e2e

LEAVE = "Staff get twenty-five days of paid leave each year. Unused leave carries over until the end of March."


@pytest.fixture(scope="module")
def handbook(server):
    admin = server.session(server.admin_key)
    assert admin.put(server.url("/v1/collections/mcp-handbook"), json={"query_groups": ["staff"]}).status_code == 201
    assert admin.put(
        server.url("/v1/collections/mcp-handbook/documents/leave-policy"),
        json={"content": LEAVE, "title": "Leave policy", "url": "https://example.com/leave"},
    ).ok
    assert wait_settled(admin, server.url("/v1/collections/mcp-handbook"), ["leave-policy"]) == {
        "leave-policy": "indexed"
    }
    return "mcp-handbook"


def mcp_command(server, *flags):
    key = server.create_key("default", "query")
    return [sys.executable, "-m", "kindex_local.cli", "mcp", "--url", server.base_url, "--key", key, *flags]


async def with_stdio_session(command, work):
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={"PYTHONPATH": os.pathsep.join(sys.path), "PATH": os.environ["PATH"]}
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


async def search_and_cite(session, **extra):
    tools = await session.list_tools()
    found = await session.call_tool("search", {"query": "How many days of paid leave?", "k": 3, **extra})
    return tools, found


def test_stdio_session_lists_the_tools_searches_and_cites(server, handbook):
    command = mcp_command(server, "--user", "ann", "--groups", "staff", "--collection", handbook)

    async def work(session):
        tools, found = await search_and_cite(session)
        result = found.structured_content
        cited = await session.call_tool(
            "cite", {"text": "You get twenty-five days <CIT leave-policy />.", "query_id": result["query_id"]}
        )
        return tools, found, cited

    tools, found, cited = anyio.run(with_stdio_session, command, work)
    # tools/list: two tools, and no way to name a user or groups in either schema
    schemas = {tool.name: tool.input_schema for tool in tools.tools}
    assert set(schemas) == {"search", "cite"}
    assert set(schemas["search"]["properties"]) == {
        "query",
        "collections",
        "k",
        "mode",
        "filter",
        "context_before",
        "context_after",
        "max_per_document",
    }
    assert schemas["search"]["properties"]["context_after"]["maximum"] == 3
    assert set(schemas["cite"]["properties"]) == {"text", "query_id"}
    # tools/call search: the known document, with what a citation needs
    assert not found.is_error
    first = found.structured_content["results"][0]
    assert (first["document_id"], first["title"], first["collection"]) == ("leave-policy", "Leave policy", handbook)
    assert "twenty-five days" in first["text"] and first["cite_as"] == "<CIT leave-policy />"
    assert first["citation"] == 1 and first["url"] == "https://example.com/leave"
    # tools/call cite: the tag became a footnote pointing at the document
    assert not cited.is_error
    assert cited.structured_content["markdown"].startswith("You get twenty-five days[^1].")
    assert "[^1]: [Leave policy](https://example.com/leave)" in cited.structured_content["markdown"]


def test_a_user_or_groups_in_the_tool_call_do_not_change_who_asks(server, handbook):
    # Given an MCP server configured for a user outside the collection's groups
    command = mcp_command(server, "--user", "bob", "--groups", "sales", "--collection", handbook)

    async def work(session):
        # When the model (say, led by a prompt) passes a user and groups that would be admitted
        _, found = await search_and_cite(session, user="ann", groups=["staff"])
        missing = await session.call_tool("search", {"query": "leave", "collections": ["no-such-collection"]})
        return found, missing

    found, missing = anyio.run(with_stdio_session, command, work)
    # (a refusal by the deployment is a tool error the model can read, not a crash)
    assert missing.is_error and "404" in missing.content[0].text
    # Then the search still runs for the configured user, and kindex's gate refuses the collection to them
    assert not found.is_error
    assert found.structured_content["results"] == []
    assert found.structured_content["denied_collections"] == [handbook]
    assert "twenty-five" not in found.content[0].text


@pytest.fixture(scope="module")
def regional(server):
    """Two documents told apart by attributes only, one behind an access list naming group `staff`."""
    admin = server.session(server.admin_key)
    assert admin.put(server.url("/v1/collections/mcp-regional"), json={"allow_guests": True}).status_code == 201
    for document, region, access in (("eu-leave", "eu", None), ("us-leave", "us", {"groups": ["staff"]})):
        body = {"content": f"Paid leave in the {region.upper()} region is generous.", "attributes": {"region": region}}
        assert admin.put(
            server.url(f"/v1/collections/mcp-regional/documents/{document}"),
            json={**body, **({"access": access} if access else {})},
        ).ok
    assert wait_settled(admin, server.url("/v1/collections/mcp-regional"), ["eu-leave", "us-leave"]) == {
        "eu-leave": "indexed",
        "us-leave": "indexed",
    }
    return "mcp-regional"


def test_the_model_may_narrow_a_search_by_attributes_never_by_principals(server, regional):
    # Given a server for a user in no group, whose configuration keeps every search to two regions
    command = mcp_command(
        server, "--user", "bob", "--collection", regional, "--filter", '{"region": {"$in": ["eu", "us"]}}'
    )

    async def work(session):
        def ids(result):
            assert not result.is_error, result.content[0].text
            return sorted(r["document_id"] for r in result.structured_content["results"])

        everything = await session.call_tool("search", {"query": "paid leave region", "mode": "keyword"})
        eu = await session.call_tool(
            "search", {"query": "paid leave region", "mode": "keyword", "filter": {"region": "eu"}}
        )
        # A filter that tries to widen the configured one still meets it (AND), and a filter cannot name principals
        widened = await session.call_tool(
            "search",
            {
                "query": "paid leave region",
                "mode": "keyword",
                "filter": {"$or": [{"region": "apac"}, {"region": "us"}]},
                "groups": ["staff"],
            },
        )
        refused = await session.call_tool("search", {"query": "paid leave", "filter": {"year": {"$gte": "2020"}}})
        return ids(everything), ids(eu), ids(widened), refused

    everything, eu, widened, refused = anyio.run(with_stdio_session, command, work)
    # Then the access list hides us-leave from bob whatever the model passes, and the filter narrows the rest
    assert everything == ["eu-leave"] and eu == ["eu-leave"] and widened == []
    # And a filter the API would refuse is a tool error naming the place
    assert refused.is_error and "filter.year.$gte" in refused.content[0].text


def test_a_configured_filter_the_api_would_refuse_stops_the_server_from_starting(server):
    done = subprocess.run(
        mcp_command(server, "--filter", '{"year": {"$gt": "x"}}'),
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
    )
    assert done.returncode == 2 and "filter.year.$gt" in done.stderr


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_transport_serves_the_same_tools(server, handbook):
    port = free_port()
    command = mcp_command(
        server, "--groups", "staff", "--collection", handbook, "--transport", "http", "--port", str(port)
    )
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:

        def listening() -> bool:
            assert process.poll() is None, "kindex mcp exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(listening, timeout=30, interval=0.2, message="kindex mcp did not start")

        async def run():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await search_and_cite(session)

        tools, found = anyio.run(run)
        assert {tool.name for tool in tools.tools} == {"search", "cite"}
        assert found.structured_content["results"][0]["document_id"] == "leave-policy"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_mcp_needs_a_deployment():
    done = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "mcp"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
    )
    assert done.returncode == 2 and "--url and --key" in done.stderr
