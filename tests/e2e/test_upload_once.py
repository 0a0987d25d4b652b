"""An upload URL uploads one file, once, through a real `kindex serve` (issue 26.4): a replay with other bytes gets
412 JSON and changes nothing (no new content, no new ingest), 16 racing PUTs of one URL have exactly one winner,
and a server restart forgets nothing (the decision is the blob itself, not a list in memory)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

from tests.conftest import RunningServer, start_server
from tests.support.together import run_together

pytestmark = pytest.mark.e2e

# The probe's plan: the API answers 429 long before 20 uploads would be allowed as 20 tickets.
PLANS = {"default": {"rate_limit": 2, "burst_limit": 5, "quota_per_day": 60}}
SIZE = 32
RACERS = 16


def body(i: int) -> bytes:
    """A text file of exactly SIZE bytes, different for each i."""
    return f"replay number {i:03d} says hello".ljust(SIZE, ".").encode()


def api(session: requests.Session, method: str, url: str, **kwargs) -> requests.Response:
    """One API call under the usage plan: a 429 is waited out (as the SDK does), anything else returned."""
    for _ in range(30):
        response = session.request(method, url, timeout=30, **kwargs)
        if response.status_code != 429:
            return response
        time.sleep(float(response.headers.get("Retry-After", "1")))
    raise AssertionError(f"{method} {url} still throttled")


def wait_indexed(session: requests.Session, url: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        document = api(session, "GET", url).json()
        if document["status"] in ("indexed", "failed"):
            return document
        time.sleep(0.3)
    raise AssertionError(f"not indexed: {document}")


def on_server(url: str, server: RunningServer) -> str:
    """The ticket's URL on `server` (a restarted server listens on another free port)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=urlsplit(server.base_url).netloc))


def document_blobs(server: RunningServer, document: str) -> list[bytes]:
    folder = server.data_dir / "blobs"
    return [
        p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and ".tmp" not in p.parts and f"/documents/{document}/" in p.as_posix()
    ]


@pytest.fixture(scope="module")
def planned_server(tmp_path_factory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("kindex-upload-once"), {"KINDEX_USAGE_PLANS": json.dumps(PLANS)})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def admin(planned_server) -> requests.Session:
    session = planned_server.session(planned_server.admin_key)
    assert api(session, "PUT", planned_server.url("/v1/collections/up"), json={}).status_code == 201
    return session


def ticket(server: RunningServer, session: requests.Session, document: str) -> dict:
    answer = api(
        session,
        "POST",
        server.url(f"/v1/collections/up/documents/{document}/upload"),
        json={"filename": f"{document}.txt", "size": SIZE},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_ticket_replayed_with_other_bytes_gets_412_and_changes_nothing(planned_server, admin):
    server = planned_server
    doc_url = server.url("/v1/collections/up/documents/replayed")
    # Given one upload ticket, and its first upload indexed
    grant = ticket(server, admin, "replayed")
    assert grant["headers"]["If-None-Match"] == "*"
    first = requests.put(grant["url"], data=body(0), headers=grant["headers"], timeout=30)
    assert first.status_code == 200, first.text
    indexed = wait_indexed(admin, doc_url)
    assert indexed["status"] == "indexed" and indexed["version"] == grant["document"]["version"] + 1
    # When the same URL is PUT 19 more times with other bytes, outside the API's usage plan
    replays = [requests.put(grant["url"], data=body(i), headers=grant["headers"], timeout=30) for i in range(1, 20)]
    # Then every replay is refused with 412 JSON saying why
    assert [r.status_code for r in replays] == [412] * 19
    assert all(r.json()["error"] == "precondition_failed" and "already used" in r.json()["message"] for r in replays)
    # And after a later upload has been ingested (the worker got past anything queued meanwhile), the document
    # is untouched: same version and revision, indexed once, from the first bytes, which are the only blob
    sentinel = ticket(server, admin, "sentinel")
    assert requests.put(sentinel["url"], data=body(99), headers=sentinel["headers"], timeout=30).status_code == 200
    wait_indexed(admin, server.url("/v1/collections/up/documents/sentinel"))
    after = api(admin, "GET", doc_url).json()
    for field in ("version", "revision", "indexed_at", "content_sha256", "status"):
        assert after[field] == indexed[field], field
    chunks = api(admin, "GET", doc_url + "/chunks").json()["chunks"]
    assert [c["text"] for c in chunks] == [body(0).decode()]
    assert document_blobs(server, "replayed") == [body(0)]


def test_sixteen_racing_puts_of_one_ticket_have_exactly_one_winner(planned_server, admin):
    server = planned_server
    grant = ticket(server, admin, "raced")
    sessions = [requests.Session() for _ in range(RACERS)]
    # When 16 clients PUT different bytes to the same URL at once (connections opened before the release)
    outcomes = run_together(
        [
            lambda i=i: sessions[i].put(grant["url"], data=body(i), headers=grant["headers"], timeout=60)
            for i in range(RACERS)
        ],
        ready=lambda i: sessions[i].get(server.url("/console"), timeout=30),
    )
    # Then exactly one is stored; every other one gets 412
    statuses = Counter(getattr(o, "status_code", repr(o)) for o in outcomes)
    assert statuses == {200: 1, 412: RACERS - 1}, statuses
    winner = next(i for i, o in enumerate(outcomes) if o.status_code == 200)
    # And the document holds and indexes the winner's bytes, and nothing else was left on disk
    document = wait_indexed(admin, server.url("/v1/collections/up/documents/raced"))
    assert document["status"] == "indexed"
    assert document_blobs(server, "raced") == [body(winner)]
    assert not [p for p in (server.data_dir / "blobs" / ".tmp").iterdir() if not p.name.startswith("case-probe")]
    chunks = api(admin, "GET", server.url("/v1/collections/up/documents/raced/chunks")).json()["chunks"]
    assert [c["text"] for c in chunks] == [body(winner).decode()]


def test_a_server_restart_keeps_a_used_ticket_used_and_an_unused_one_usable(tmp_path):
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    try:
        admin = server.session(server.admin_key)
        assert admin.put(server.url("/v1/collections/up"), json={}).status_code == 201
        used, unused = ticket(server, admin, "used"), ticket(server, admin, "unused")
        assert requests.put(used["url"], data=body(0), headers=used["headers"], timeout=30).status_code == 200
        wait_indexed(admin, server.url("/v1/collections/up/documents/used"))
    finally:
        server.stop()
    # When the server starts again on the same data directory
    server = start_server(data_dir)
    try:
        admin = server.session(server.admin_key)
        # Then the used ticket is still refused, and the unused one uploads once
        replay = requests.put(on_server(used["url"], server), data=body(1), headers=used["headers"], timeout=30)
        assert replay.status_code == 412 and replay.json()["error"] == "precondition_failed"
        first = requests.put(on_server(unused["url"], server), data=body(2), headers=unused["headers"], timeout=30)
        assert first.status_code == 200
        assert (
            requests.put(
                on_server(unused["url"], server), data=body(3), headers=unused["headers"], timeout=30
            ).status_code
            == 412
        )
        assert wait_indexed(admin, server.url("/v1/collections/up/documents/unused"))["status"] == "indexed"
        assert document_blobs(server, "used") == [body(0)] and document_blobs(server, "unused") == [body(2)]
    finally:
        server.stop()


def test_an_upload_without_the_create_only_header_is_refused_like_a_bad_signature(planned_server, admin):
    # Given a ticket (S3 signs If-None-Match: *, so a PUT without it fails the signature there too)
    grant = ticket(planned_server, admin, "unconditional")
    without = {name: value for name, value in grant["headers"].items() if name != "If-None-Match"}
    # When it is PUT without the header, or with an ETag instead of '*' / Then 403, and nothing is stored
    for headers in (without, {**without, "If-None-Match": '"abc"'}):
        refused = requests.put(grant["url"], data=body(0), headers=headers, timeout=30)
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
        assert "If-None-Match" in refused.json()["message"]
    assert document_blobs(planned_server, "unconditional") == []
    assert requests.put(grant["url"], data=body(0), headers=grant["headers"], timeout=30).status_code == 200
