"""The SDK against a tiny scripted HTTP server on 127.0.0.1: 429/503 retried after Retry-After, bounded; uploads
retried with their whole body and without the API key; transport failures typed."""

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kindex.client import AsyncKindex, ConnectionFailed, Kindex, RetryPolicy, ServerError, Throttled

pytestmark = pytest.mark.integration

COLLECTION = {"id": "c", "embedding_model": "hash:384", "title": "T"}


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next scripted (status, headers, body) of its path; records what it got."""

    daemon_threads = True

    def __init__(self, script: dict[str, list[tuple[int, dict, bytes]]]):
        self.script = script
        self.seen: list[dict] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers),
                "body": body,
                "at": time.monotonic(),
            }
        )
        queue = self.server.script[self.path.split("?")[0]]
        status, headers, payload = queue.pop(0) if len(queue) > 1 else queue[0]
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = _answer


@pytest.fixture
def scripted():
    servers = []

    def start(script):
        server = Scripted(script)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def throttled(seconds: str, status: int = 429) -> tuple[int, dict, bytes]:
    return status, {"Retry-After": seconds}, json.dumps({"error": "throttled", "message": "slow down"}).encode()


def ok(body: dict) -> tuple[int, dict, bytes]:
    return 200, {}, json.dumps(body).encode()


def test_a_429_with_retry_after_is_waited_out_then_the_answer_is_returned(scripted):
    # Given a server that throttles once, asking for one second
    server = scripted({"/v1/collections/c": [throttled("1"), ok(COLLECTION)]})
    # When the client reads the collection
    began = time.monotonic()
    with Kindex(server.url, "kdx_test") as client:
        collection = client.get_collection("c")
    # Then it waited the second and got the answer, having asked twice with its key
    assert collection.title == "T"
    assert [s["path"] for s in server.seen] == ["/v1/collections/c"] * 2
    assert server.seen[1]["at"] - server.seen[0]["at"] >= 0.95
    assert time.monotonic() - began < 5
    assert all(s["headers"]["Authorization"] == "Bearer kdx_test" for s in server.seen)


def test_the_async_client_retries_a_503_the_same_way(scripted):
    server = scripted({"/v1/collections/c": [throttled("1", 503), ok(COLLECTION)]})

    async def read():
        async with AsyncKindex(server.url, "kdx_test") as client:
            return await client.get_collection("c")

    assert asyncio.run(read()).id == "c"
    assert len(server.seen) == 2 and server.seen[1]["at"] - server.seen[0]["at"] >= 0.95


def test_retries_are_bounded_and_the_last_answer_raises_throttled_with_its_hint(scripted):
    server = scripted({"/v1/collections": [throttled("0")]})
    with Kindex(server.url, "k", retry=RetryPolicy(max_retries=2)) as client, pytest.raises(Throttled) as raised:
        client.list_collections()
    assert len(server.seen) == 3  # the first attempt and two retries
    assert (raised.value.status, raised.value.error, raised.value.retry_after) == (429, "throttled", 0)


def test_a_retry_after_beyond_the_bound_is_not_waited_for(scripted):
    server = scripted({"/v1/collections": [throttled("120"), ok({"collections": []})]})
    began = time.monotonic()
    with Kindex(server.url, "k", retry=RetryPolicy(max_wait=30)) as client, pytest.raises(Throttled) as raised:
        client.list_collections()
    assert time.monotonic() - began < 5 and len(server.seen) == 1
    assert raised.value.retry_after == 120


def test_other_failures_are_not_retried(scripted):
    server = scripted({"/v1/collections": [(502, {"Content-Type": "text/html"}, b"<h1>Bad Gateway</h1>")]})
    with Kindex(server.url, "k") as client, pytest.raises(ServerError) as raised:
        client.list_collections()
    assert len(server.seen) == 1 and raised.value.status == 502 and raised.value.error == "http_502"


def test_an_upload_is_retried_with_its_whole_body_and_never_carries_the_api_key(scripted, tmp_path):
    # Given a deployment whose blob store is busy once (S3 answers 503 SlowDown)
    content = b"# Notes\n" + b"x" * 3_000_000  # several read blocks
    ticket_for = {}
    server = scripted(
        {
            "/v1/collections/c/documents/d/upload": [ok(ticket_for)],
            "/blob": [(503, {"Retry-After": "0"}, b"<Error>SlowDown</Error>"), (200, {}, b"")],
        }
    )
    ticket_for.update(
        {
            "url": server.url + "/blob?signature=abc",
            "method": "PUT",
            "headers": {"Content-Type": "text/markdown", "Content-Length": str(len(content))},
            "expires_at": "2030-01-01T00:00:00Z",
            "document": {"id": "d", "collection": "c"},
        }
    )
    server.script["/v1/collections/c/documents/d/upload"] = [ok(ticket_for)]
    path = tmp_path / "notes.md"
    path.write_bytes(content)
    # When a file is uploaded
    with Kindex(server.url, "kdx_secret") as client:
        document = client.upload_file("c", "d", path)
    # Then the ticket was asked for with the exact size, and the PUT sent all bytes twice, with a length, no key
    assert document.id == "d"
    asked = next(s for s in server.seen if s["path"].endswith("/upload"))
    assert json.loads(asked["body"]) == {"filename": "notes.md", "size": len(content)}
    puts = [s for s in server.seen if s["path"].startswith("/blob")]
    assert len(puts) == 2 and all(p["body"] == content for p in puts)
    assert all("Authorization" not in p["headers"] and "Transfer-Encoding" not in p["headers"] for p in puts)


def test_an_unreachable_deployment_raises_connection_failed():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with Kindex(f"http://127.0.0.1:{port}", "k") as client, pytest.raises(ConnectionFailed):
        client.list_collections()
