"""`GET /v1/collections/{c}/documents` over real HTTP: each page carries a summary per document (what its GET shows,
minus the source key and index internals), only the caller's tenant's, paged exactly once per document, and hostile
paging parameters get a 4xx JSON answer. The SDK and the CLI read documents through these summaries."""

import json
import subprocess
import sys
import threading

import httpx
import pytest

from kindex.client import Kindex
from kindex.domain import keys
from kindex.domain.models import DocumentSummary

pytestmark = pytest.mark.e2e

SUMMARY_FIELDS = set(DocumentSummary.model_fields)
MANY = 250
NOT_TEXT = b"%PDF-1.4 not text at all \x00\x01"


@pytest.fixture(scope="module")
def tenants(server):
    """Two tenants with the same collection id and the same document ids, holding different documents; settled."""
    clients = {
        "default": Kindex(server.base_url, server.admin_key),
        "other": Kindex(server.base_url, server.create_key("other", "admin")),
    }
    for name, client in clients.items():
        client.put_collection("shared", title=f"{name}'s")
        client.put_document("shared", "same-1", title=f"{name} one", content=f"{name} writes this text.")
    clients["default"].upload_file("shared", "same-2", NOT_TEXT, filename="x.txt")
    clients["other"].put_document("shared", "only-other", content="Only the other tenant has this.")
    for name, ids in (("default", ["same-1", "same-2"]), ("other", ["same-1", "only-other"])):
        settled = clients[name].wait_for_documents("shared", ids, timeout=120)
        assert all(settled.values()), settled
    yield clients
    for client in clients.values():
        client.close()


@pytest.fixture(scope="module")
def many(server):
    """A collection of MANY documents, listed while the worker is still indexing some of them."""
    session = server.session(server.admin_key)
    assert session.put(server.url("/v1/collections/many"), json={}).status_code == 201
    for i in range(MANY):
        response = session.put(server.url(f"/v1/collections/many/documents/d{i:03d}"), json={"content": f"text {i}"})
        assert response.status_code == 201, response.text
    return session


def test_each_tenant_lists_only_its_own_summaries_and_they_say_what_get_says(server, tenants):
    for name, client in tenants.items():
        # When a tenant lists the shared collection id
        page = client.list_documents("shared")
        # Then it sees its own documents only, ids and summaries in the same order
        assert page.documents == (["same-1", "same-2"] if name == "default" else ["only-other", "same-1"])
        assert [s.id for s in page.items] == page.documents
        assert page.next_cursor is None
        for summary in page.items:
            # And each summary is exactly what a GET of the document says, field for field
            stored = client.get_document("shared", summary.id)
            assert summary.model_dump() == stored.model_dump(include=SUMMARY_FIELDS)
        titles = {s.id: s.title for s in page.items}
        assert titles["same-1"] == f"{name} one"
    failed = tenants["default"].list_documents("shared").items[1]
    assert failed.status.value == "failed" and failed.failure_reason.startswith("UnsupportedType")
    assert failed.content_sha256 and failed.content_length == len(NOT_TEXT) and failed.mimetype == "text/plain"
    indexed = tenants["default"].list_documents("shared").items[0]
    assert indexed.status.value == "indexed" and indexed.chunk_count == indexed.chunks_done == 1
    assert indexed.indexed_at is not None and indexed.version == 1


def test_the_raw_answer_keeps_the_ids_and_shows_no_source_key(server, tenants):
    # When listing over plain HTTP
    body = server.session(server.admin_key).get(server.url("/v1/collections/shared/documents")).json()
    # Then `documents` is still the list of ids (clients of the ids-only answer keep working), `items` the summaries
    assert body["documents"] == ["same-1", "same-2"]
    assert set(body["items"][0]) == SUMMARY_FIELDS
    assert "source" not in json.dumps(body) and "blobs" not in json.dumps(body)
    # And the OpenAPI document describes both
    schemas = server.session().get(server.url("/v1/openapi.json")).json()["components"]["schemas"]
    assert schemas["DocumentList"]["properties"]["items"]["items"] == {"$ref": "#/components/schemas/DocumentSummary"}
    assert set(schemas["DocumentSummary"]["properties"]) == SUMMARY_FIELDS


def test_a_reader_sees_the_same_list_and_a_query_key_none(server, tenants):
    url = server.url("/v1/collections/shared/documents")
    admin = server.session(server.admin_key).get(url).json()
    assert server.session(server.create_key("default", "reader")).get(url).json() == admin
    refused = server.session(server.create_key("default", "query")).get(url)
    assert refused.status_code == 403 and set(refused.json()) == {"error", "message"}
    missing = server.session(server.admin_key).get(server.url("/v1/collections/nope/documents"))
    assert missing.status_code == 404 and set(missing.json()) == {"error", "message"}


def test_paging_over_many_documents_returns_each_exactly_once(server, many):
    url = server.url("/v1/collections/many/documents")
    expected = [f"d{i:03d}" for i in range(MANY)]
    # When following next_cursor with a page size that does not divide the total (while indexing goes on)
    seen, cursor = [], None
    while True:
        body = many.get(url, params={"number": 7, **({"cursor": cursor} if cursor else {})}).json()
        assert [s["id"] for s in body["items"]] == body["documents"] and len(body["documents"]) <= 7
        seen += body["documents"]
        cursor = body["next_cursor"]
        if not cursor:
            break
    # Then every document comes exactly once, in id order
    assert seen == expected
    # And XWiki's start/number pages cut the same list
    by_offset = []
    for start in range(0, MANY, 60):
        by_offset += many.get(url, params={"start": start, "number": 60}).json()["documents"]
    assert by_offset == expected
    # And number=-1 ("all") is the largest page, which holds them all
    everything = many.get(url, params={"number": -1}).json()
    assert everything["documents"] == expected and everything["next_cursor"] is None
    assert len(everything["items"]) == MANY


@pytest.mark.parametrize(
    "params",
    [
        {"number": "-2"},
        {"number": "0"},
        {"number": str(10**9)},
        {"number": "1001"},
        {"number": "ten"},
        {"start": "-1"},
        {"start": str(10**10)},
        {"start": "1.5"},
        {"cursor": "garbage!!"},
        {"cursor": "e30"},
        {"cursor": keys.encode_cursor("x")[:-3] + "%%%"},
        {"cursor": "eyJhZnRlciI6IDV9"},  # {"after": 5}
        {"cursor": "A" * 8193},
    ],
)
def test_hostile_paging_parameters_get_a_4xx_json_answer(server, many, params):
    response = many.get(server.url("/v1/collections/many/documents"), params=params)
    assert 400 <= response.status_code < 500, (params, response.status_code, response.text[:300])
    assert set(response.json()) == {"error", "message"}


@pytest.mark.parametrize("after", ["\ud800", "\x00", "z" * 4000, "", "d100\U0010ffff"])
def test_cursors_after_odd_ids_page_on_or_are_refused_but_never_fail(server, many, after):
    cursor = keys.encode_cursor(after)
    response = many.get(server.url("/v1/collections/many/documents"), params={"cursor": cursor})
    assert response.status_code < 500, response.text[:300]
    body = response.json()
    if response.status_code == 200:
        assert body["documents"] == [f"d{i:03d}" for i in range(MANY) if f"d{i:03d}" > after][:100]
    else:
        assert set(body) == {"error", "message"}


def test_the_sdk_reads_named_documents_in_whichever_takes_fewer_requests(server, many):
    sent = []
    http = httpx.Client(event_hooks={"request": [lambda request: sent.append(request.url.path)]})
    with Kindex(server.base_url, server.admin_key, http_client=http) as client:
        # When asking for two documents of 250 (one list page) / Then the collection and one page are read
        found = client.document_summaries("many", ["d007", "d200", "nope"])
        assert sent == ["/v1/collections/many", "/v1/collections/many/documents"]
        assert found["d007"].id == "d007" and found["d200"].id == "d200" and found["nope"] is None
        # When asking for one / Then its GET is cheaper than the listing
        sent.clear()
        assert client.document_summaries("many", ["d042"])["d042"].id == "d042"
        assert sent == ["/v1/collections/many", "/v1/collections/many/documents/d042"]
        # And every summary is reachable by iterating
        assert sum(1 for _ in client.iter_document_summaries("many", page_size=99)) == MANY
        # And waiting for all of them settles once the worker has indexed them, polling the listing
        settled = client.wait_for_documents("many", [f"d{i:03d}" for i in range(MANY)], timeout=120)
        assert {s.status.value for s in settled.values()} == {"indexed"}
    http.close()


def test_the_cli_lists_summaries_and_filters_by_status(server, tenants):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "kindex_local.cli",
                "documents",
                "list",
                "shared",
                *args,
                "--url",
                server.base_url,
                "--key",
                server.admin_key,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert cli().stdout.split() == ["same-1", "same-2"]
    long = cli("--long").stdout.splitlines()
    assert [line.split("\t")[:3] for line in long] == [["same-1", "indexed", "1"], ["same-2", "failed", "0"]]
    assert long[1].split("\t")[5].startswith("UnsupportedType")
    assert cli("--status", "failed").stdout.split() == ["same-2"]
    as_json = json.loads(cli("--long", "--json", "--status", "indexed").stdout)
    assert [d["id"] for d in as_json] == ["same-1"] and set(as_json[0]) == SUMMARY_FIELDS
    refused = cli("--status", "bogus")
    assert refused.returncode == 2 and "invalid choice" in refused.stderr


def test_paging_while_documents_come_and_go_lists_each_steady_one_exactly_once(server):
    # Given 120 documents, of which the odd ones get deleted and new ones get written while a client pages
    session = server.session(server.admin_key)
    base = server.url("/v1/collections/churn")
    assert session.put(base, json={}).status_code == 201
    for i in range(120):
        assert session.put(f"{base}/documents/k{i:03d}", json={"content": f"text {i}"}).status_code == 201
    stop = threading.Event()

    def churn():
        writer = server.session(server.admin_key)
        for i in range(1, 120, 2):
            if stop.is_set():
                return
            writer.delete(f"{base}/documents/k{i:03d}")
            writer.put(f"{base}/documents/k{i:03d}x", json={"content": "new"})

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        # When walking small pages meanwhile
        seen, cursor = [], None
        while True:
            body = session.get(f"{base}/documents", params={"number": 3, **({"cursor": cursor} if cursor else {})})
            assert body.status_code == 200, body.text
            page = body.json()
            assert [s["id"] for s in page["items"]] == page["documents"]
            seen += page["documents"]
            cursor = page["next_cursor"]
            if not cursor:
                break
    finally:
        stop.set()
        thread.join()
    # Then no document comes twice, the list stays in id order, and every document never touched is there
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
    assert {f"k{i:03d}" for i in range(0, 120, 2)} <= set(seen)
