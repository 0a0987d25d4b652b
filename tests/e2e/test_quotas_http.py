"""Per-tenant quotas and usage through `kindex serve` over HTTP (issue 25, items 1, 2 and 5).

The server runs with usage plans whose quotas are small enough to reach: writes exactly at a limit pass, one over is
refused (403 `quota_exceeded`, naming the limit, the use and the plan) with nothing stored; 16 writers at the limit
never pass it; deletes give the quota back; two tenants with the same ids count apart; a document whose chunks would
pass the chunk quota fails with that reason and nothing of it indexed; import and reindex count once; a plan lowered
below the current use refuses writes while reads and deletes still work; `GET /v1/usage` shows all of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import start_server
from tests.support.together import run_together
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

FAST = {"rate_limit": 1000, "burst_limit": 1000}
PLANS = {
    "default": {**FAST, "quotas": {"documents": 5, "chunks": 40, "bytes": 2000, "collections": 3}},
    "plans": {
        "race": {**FAST, "quotas": {"documents": 10}, "tenants": ["racer"]},
        "roomy": {**FAST, "quotas": {"documents": 50, "chunks": 10_000}, "tenants": ["mover"]},
    },
}
WRITERS = 16


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("kindex-quotas"), {"KINDEX_USAGE_PLANS": json.dumps(PLANS)})
    yield server
    server.stop()


def admin(running, tenant: str):
    session = running.session(running.create_key(tenant, "admin"))
    return session


def usage(running, session) -> dict:
    response = session.get(running.url("/v1/usage"))
    assert response.status_code == 200, response.text
    return response.json()


def doc_url(running, collection: str, document: str) -> str:
    return running.url(f"/v1/collections/{collection}/documents/{document}")


def settled(running, session, collection: str, document: str) -> dict:
    return wait_until(
        lambda: session.get(doc_url(running, collection, document)).json(),
        until=lambda body: body.get("status") in ("indexed", "failed"),
        message=f"{document} did not settle",
    )


def refused(response, limit: str, used: int, maximum: int, plan: str = "default") -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["error"] == "quota_exceeded"
    assert (body["limit"], body["used"], body["max"], body["plan"]) == (limit, used, maximum, plan)
    assert limit in body["message"] and plan in body["message"]


def test_writes_exactly_at_each_limit_pass_and_one_over_is_refused_with_nothing_stored(running):
    # Given a tenant on the default plan (5 documents, 2,000 bytes, 3 collections)
    edge = admin(running, "edge")
    assert edge.put(running.url("/v1/collections/docs"), json={}).status_code == 201
    # When it writes five documents of 100 bytes / Then each is stored: exactly at the documents limit
    for n in range(5):
        put = edge.put(doc_url(running, "docs", f"d{n}"), json={"content": "x" * 99 + str(n)})
        assert put.status_code == 201, put.text
    # When it writes a sixth / Then 403 quota_exceeded naming the limit, and no record or blob of it exists
    refused(edge.put(doc_url(running, "docs", "d5"), json={"content": "more"}), "documents", 5, 5)
    assert edge.get(doc_url(running, "docs", "d5")).status_code == 404
    blobs = running.data_dir / "blobs" / "tenants" / "edge" / "collections" / "docs" / "documents"
    assert not (blobs / "d5").exists()
    # And a title-only record is refused as well (it would be a sixth document)
    refused(edge.put(doc_url(running, "docs", "d5"), json={"title": "t"}), "documents", 5, 5)
    # And a change to a stored document that adds no document passes
    assert edge.put(doc_url(running, "docs", "d0"), json={"title": "renamed"}).status_code == 200
    # When an upload ticket would replace d0's 100 bytes with exactly what is left of 2,000 / Then it is signed
    ticket = {"filename": "a.txt", "size": 2000 - 400}
    assert edge.post(doc_url(running, "docs", "d0") + "/upload", json=ticket).status_code == 200
    # And one byte more is refused before anything changes
    over = edge.post(doc_url(running, "docs", "d1") + "/upload", json={"filename": "b.txt", "size": 101})
    refused(over, "bytes", 2000, 2000)
    assert edge.get(doc_url(running, "docs", "d1")).json()["mimetype"] == "text/plain"
    # When it creates collections up to 3 / Then the fourth is refused, and does not exist
    for name in ("c2", "c3"):
        assert edge.put(running.url(f"/v1/collections/{name}"), json={}).status_code == 201
    refused(edge.put(running.url("/v1/collections/c4"), json={}), "collections", 3, 3)
    assert edge.get(running.url("/v1/collections/c4")).status_code == 404
    # And GET /v1/usage shows the tenant its use and its plan's limits
    shown = usage(running, edge)
    assert {k: shown[k] for k in ("plan", "documents", "bytes", "collections")} == {
        "plan": "default",
        "documents": 5,
        "bytes": 2000,
        "collections": 3,
    }
    assert shown["limits"] == {"documents": 5, "chunks": 40, "bytes": 2000, "collections": 3}


def test_deletes_give_the_quota_back_and_two_tenants_with_the_same_ids_count_apart(running):
    # Given two tenants writing the same collection and document ids, the first up to its documents limit
    first, second = admin(running, "one"), admin(running, "two")
    for session in (first, second):
        assert session.put(running.url("/v1/collections/docs"), json={}).status_code == 201
    for n in range(5):
        assert first.put(doc_url(running, "docs", f"d{n}"), json={"content": f"first {n}"}).status_code == 201
    # When the second writes the same ids / Then its own count admits them, whatever the first holds
    for n in range(3):
        assert second.put(doc_url(running, "docs", f"d{n}"), json={"content": f"second {n}"}).status_code == 201
    assert usage(running, first)["documents"] == 5 and usage(running, second)["documents"] == 3
    refused(first.put(doc_url(running, "docs", "d9"), json={"content": "x"}), "documents", 5, 5)
    # When the first deletes a document / Then the quota is given back and a new document fits again
    assert first.delete(doc_url(running, "docs", "d4")).status_code == 204
    assert usage(running, first)["documents"] == 4
    assert first.put(doc_url(running, "docs", "d9"), json={"content": "x"}).status_code == 201
    # And the second tenant's documents and counters never moved
    assert usage(running, second)["documents"] == 3
    assert second.get(doc_url(running, "docs", "d0")).json()["content"] == "second 0"


def test_sixteen_concurrent_writers_at_the_limit_never_pass_it(running):
    # Given a tenant on a plan of 10 documents holding 9
    racer = admin(running, "racer")
    assert racer.put(running.url("/v1/collections/docs"), json={}).status_code == 201
    for n in range(9):
        assert racer.put(doc_url(running, "docs", f"d{n}"), json={"content": f"doc {n}"}).status_code == 201
    sessions = [running.session(racer.headers["Authorization"].split(" ", 1)[1]) for _ in range(WRITERS)]

    def put(i: int):
        response = sessions[i].put(doc_url(running, "docs", f"new{i}"), json={"content": f"new {i}"}, timeout=60)
        return response.status_code, response.json()

    # When 16 clients each create a new document at the same instant
    answers = run_together(
        [lambda i=i: put(i) for i in range(WRITERS)], ready=lambda i: sessions[i].get(running.url("/v1/usage"))
    )
    # Then exactly one is stored and every other is refused with quota_exceeded (the limit is never passed)
    statuses = sorted(status for status, _ in answers)
    assert statuses == [201] + [403] * (WRITERS - 1), answers
    assert all(body["error"] == "quota_exceeded" for status, body in answers if status == 403)
    listed = racer.get(running.url("/v1/collections/docs/documents?number=100")).json()["documents"]
    assert len(listed) == 10
    assert usage(running, racer)["documents"] == 10 and usage(running, racer)["plan"] == "race"


def test_a_document_past_the_chunk_quota_fails_with_that_reason_and_nothing_of_it_indexed(running):
    # Given a tenant (40 chunks) with a collection cutting 20-character chunks, holding a document of 30 chunks
    chunky = admin(running, "chunky")
    put = chunky.put(running.url("/v1/collections/docs"), json={"chunking_max_size": 20, "allow_guests": True})
    assert put.status_code == 201, put.text
    small = " ".join(f"w{n:03d}" for n in range(120))  # 600 characters: about 30 chunks
    assert chunky.put(doc_url(running, "docs", "small"), json={"content": small}).status_code == 201
    first = settled(running, chunky, "docs", "small")
    assert first["status"] == "indexed" and 10 < first["chunk_count"] <= 40, first
    # When a document whose chunks would take the tenant past 40 is written
    big = " ".join(f"b{n:03d}" for n in range(100))
    assert chunky.put(doc_url(running, "docs", "big"), json={"content": big}).status_code == 201
    # Then it fails, saying which quota, and no chunk of it is stored or searchable
    failed = settled(running, chunky, "docs", "big")
    assert failed["status"] == "failed", failed
    assert failed["failure_reason"].startswith("QuotaExceeded: chunks quota exceeded"), failed
    assert chunky.get(doc_url(running, "docs", "big") + "/chunks").json()["chunks"] == []

    def found(word: str) -> set[str]:
        response = chunky.post(running.url("/v1/collections/docs/query"), json={"query": word, "mode": "keyword"})
        assert response.status_code == 200, response.text
        return {result["document_id"] for result in response.json()["results"]}

    assert found("b001") == set() and found("w001") == {"small"}
    # And the chunk counter holds the first document's chunks only
    assert usage(running, chunky)["chunks"] == first["chunk_count"]


def test_queries_and_their_embedding_tokens_are_metered_per_tenant(running):
    # Given a tenant with an indexed document
    asker = admin(running, "asker")
    assert asker.put(running.url("/v1/collections/docs"), json={"allow_guests": True}).status_code == 201
    assert asker.put(doc_url(running, "docs", "d"), json={"content": "what the handbook says"}).status_code == 201
    settled(running, asker, "docs", "d")
    before = usage(running, asker)
    # When it runs two hybrid queries and one keyword query
    for mode in ("hybrid", "hybrid", "keyword"):
        response = asker.post(running.url("/v1/collections/docs/query"), json={"query": "handbook", "mode": mode})
        assert response.status_code == 200, response.text
    # Then three queries are counted today, and the tokens of the two embedded query texts on top of its ingest's
    after = usage(running, asker)
    assert after["queries_today"] == before["queries_today"] + 3
    assert after["embedding_tokens_month"] == before["embedding_tokens_month"] + 2 * 2  # "handbook": 8 chars
    assert before["embedding_tokens_month"] > 0  # the document's own chunk was embedded
    # And no other tenant's counts moved
    assert usage(running, admin(running, "quiet"))["queries_today"] == 0


def test_import_and_reindex_count_each_document_once(running):
    # Given a tenant importing a batch of two documents with their chunks
    mover = admin(running, "mover")
    assert mover.put(running.url("/v1/collections/docs"), json={}).status_code == 201
    texts = {"a": ["alpha one", "alpha two"], "b": ["beta one", "beta two"]}
    batch = {
        "format_version": 1,
        "embedding_model": "hash:384",
        "dimensions": 384,
        "documents": [{"id": d, "chunk_count": 2} for d in texts],
        "chunks": [
            {"document_id": d, "index": i, "start": 10 * i, "end": 10 * i + len(t), "text": t}
            for d, chunks in texts.items()
            for i, t in enumerate(chunks)
        ],
    }
    for _ in range(2):  # the same batch twice: the second replaces the first's documents
        response = mover.post(running.url("/v1/collections/docs/import"), json=batch)
        assert response.status_code == 200, response.text

    def records() -> list[dict]:
        return mover.get(running.url("/v1/collections/docs/documents?number=100")).json()["items"]

    def counted_once(shown: dict) -> bool:
        listed = records()
        return (shown["documents"], shown["chunks"], shown["bytes"]) == (
            len(listed),
            sum(d["chunk_count"] for d in listed),
            sum(d["content_length"] for d in listed),
        )

    # Then the counters are exactly what the records count: two documents, four chunks
    shown = usage(running, mover)
    assert (shown["documents"], shown["chunks"]) == (2, 4) and counted_once(shown), (shown, records())
    # When a clean reindex rebuilds both (the import's chunking is unknown, so it re-chunks them)
    job = mover.post(running.url("/v1/collections/docs/reindex"), json={"clean": True}).json()
    wait_until(
        lambda: mover.get(running.url(f"/v1/jobs/{job['id']}")).json(),
        until=lambda body: body["status"] == "completed",
        message="the reindex job did not complete",
    )
    for document in texts:
        settled(running, mover, "docs", document)
    # Then every document is still counted once, with the chunks its record now has (a count that was added twice
    # would never meet the records again)
    shown = wait_until(
        lambda: usage(running, mover), until=counted_once, message="usage did not match the records after reindex"
    )
    assert shown["documents"] == 2


def test_a_plan_lowered_below_current_use_refuses_growth_while_reads_and_deletes_work(tmp_path):
    # Given a tenant with four documents on a plan of ten
    data_dir = tmp_path / "data"
    roomy = {"default": {**FAST, "quotas": {"documents": 10}}}
    server = start_server(data_dir, {"KINDEX_USAGE_PLANS": json.dumps(roomy)})
    try:
        key = server.create_key("shrink", "admin")
        session = server.session(key)
        assert session.put(server.url("/v1/collections/docs"), json={"allow_guests": True}).status_code == 201
        for n in range(4):
            assert session.put(doc_url(server, "docs", f"d{n}"), json={"content": f"doc {n}"}).status_code == 201
        settled(server, session, "docs", "d3")
    finally:
        server.stop()
    # When the server comes back with a plan of two documents
    server = start_server(
        data_dir, {"KINDEX_USAGE_PLANS": json.dumps({"default": {**FAST, "quotas": {"documents": 2}}})}
    )
    try:
        session = server.session(key)
        # Then a new document is refused, naming the use above the limit
        refused(session.put(doc_url(server, "docs", "new"), json={"content": "x"}), "documents", 4, 2)
        # And reads, queries, changes that add nothing and deletes all work
        assert session.get(doc_url(server, "docs", "d0")).json()["content"] == "doc 0"
        assert session.post(server.url("/v1/collections/docs/query"), json={"query": "doc"}).status_code == 200
        assert session.put(doc_url(server, "docs", "d0"), json={"title": "kept"}).status_code == 200
        for n in (1, 2, 3):
            assert session.delete(doc_url(server, "docs", f"d{n}")).status_code == 204
        # And once the use is under the new limit, a new document fits again
        assert session.put(doc_url(server, "docs", "new"), json={"content": "x"}).status_code == 201
        refused(session.put(doc_url(server, "docs", "newer"), json={"content": "y"}), "documents", 2, 2)
        assert usage(server, session)["documents"] == 2
    finally:
        server.stop()


def test_kindex_usage_shows_the_same_usage_from_the_deployment_and_from_the_data_directory(running):
    # Given a tenant with a collection and a document
    key = running.create_key("cli", "admin")
    session = running.session(key)
    assert session.put(running.url("/v1/collections/docs"), json={}).status_code == 201
    assert session.put(doc_url(running, "docs", "d"), json={"content": "twelve bytes"}).status_code == 201
    env = {**os.environ, "KINDEX_USAGE_PLANS": json.dumps(PLANS)}
    for name in ("KINDEX_URL", "KINDEX_PROFILE", "KINDEX_API_KEY"):
        env.pop(name, None)  # the deployment is named by the arguments, or not at all

    def kindex(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "kindex_local.cli", "usage", *args], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # When `kindex usage` asks the deployment (JSON) and reads the data directory (readable form)
    remote = json.loads(kindex("--url", running.base_url, "--key", key, "--json"))
    local = kindex("--data-dir", str(running.data_dir), "--tenant", "cli")
    # Then both show the tenant's use against its plan's limits
    assert (remote["plan"], remote["documents"], remote["bytes"], remote["collections"]) == ("default", 1, 12, 1)
    assert remote["limits"]["documents"] == 5
    assert "plan: default" in local
    assert [line.split() for line in local.splitlines() if line.startswith(("documents", "bytes"))] == [
        ["documents", "1", "5"],
        ["bytes", "12", "2,000"],
    ]
