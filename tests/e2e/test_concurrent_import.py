"""Imports, content PUTs and DELETEs of one document id racing over HTTP against `kindex serve` (issue 26.7): every
interleaving ends in a state one of the writes would have produced alone - the record, its chunks, the chunk store
and the search hits agree, and nothing is left of the writes that lost."""

from __future__ import annotations

import sqlite3
import time

import pytest
import requests

from tests.support.import_bodies import two_chunk_import
from tests.support.together import run_together

pytestmark = pytest.mark.e2e

COLLECTION = "race"
ROUNDS = 10


def import_body(round_: int, writer: int) -> dict:
    return two_chunk_import(f"imported r{round_} w{writer} part one. ", f"imported r{round_} w{writer} part two.")


def stored_chunk_rows(server) -> list[str]:
    db = sqlite3.connect(server.data_dir / "kindex.sqlite3")
    try:
        return [
            row[0]
            for row in db.execute(
                "SELECT text FROM chunks WHERE tenant = 'default' AND collection = ? AND document_id = 'd'",
                (COLLECTION,),
            )
        ]
    finally:
        db.close()


def settled(session, server, timeout: float = 60.0) -> dict | None:
    """The document once no write of it is still being indexed (None when it does not exist): neither pending nor
    in progress, and, once indexed, cut by the collection's chunking. These imports name no chunking, so the ingest
    of an import's content blob re-chunks it under the collection's rules while the document stays `indexed`."""
    config_version = session.get(server.url(f"/v1/collections/{COLLECTION}")).json()["config_version"]
    deadline = time.monotonic() + timeout
    while True:
        response = session.get(server.url(f"/v1/collections/{COLLECTION}/documents/d"))
        if response.status_code == 404:
            return None
        document = response.json()
        working = document["status"] in ("pending", "in_progress") or (
            document["status"] == "indexed" and document["indexed_config_version"] != config_version
        )
        if not working or time.monotonic() > deadline:
            return document
        time.sleep(0.1)


def hits(session, server) -> list[dict]:
    response = session.post(
        server.url(f"/v1/collections/{COLLECTION}/query"),
        json={"query": "imported part content written", "k": 20, "mode": "keyword", "user": "ann", "groups": ["staff"]},
    )
    assert response.status_code == 200, response.text
    return [r for r in response.json()["results"] if r["document_id"] == "d"]


def test_racing_imports_puts_and_deletes_of_one_document_end_as_one_of_them(server):
    admin = server.session(server.admin_key)
    assert admin.put(
        server.url(f"/v1/collections/{COLLECTION}"), json={"embedding_model": "hash:8", "query_groups": ["staff"]}
    ).ok
    sessions = [server.session(server.admin_key) for _ in range(16)]
    path = server.url(f"/v1/collections/{COLLECTION}/documents/d")
    for round_ in range(ROUNDS):
        # Given 8 imports of 2-chunk documents, 4 content PUTs and 4 DELETEs of document d
        calls = []
        for writer in range(16):
            session = sessions[writer]
            if writer < 8:
                calls.append(
                    lambda s=session, w=writer, r=round_: s.post(
                        server.url(f"/v1/collections/{COLLECTION}/import"), json=import_body(r, w)
                    )
                )
            elif writer < 12:
                calls.append(
                    lambda s=session, w=writer, r=round_: s.put(path, json={"content": f"content written r{r} w{w}."})
                )
            else:
                calls.append(lambda s=session: s.delete(path))
        # When they run at once
        outcomes = run_together(calls)
        for outcome in outcomes:
            assert isinstance(outcome, requests.Response), outcome
            assert outcome.status_code in (200, 201, 204, 404, 409), (outcome.status_code, outcome.text)
        # Then the document is what one write alone would have left
        document = settled(admin, server)
        rows = stored_chunk_rows(server)
        found = hits(admin, server)
        if document is None:
            assert rows == [] and found == [], (round_, rows, found)
            continue
        assert document["status"] == "indexed", (round_, document)
        chunks = admin.get(path + "/chunks").json()["chunks"]
        texts = [c["text"] for c in chunks]
        assert len(chunks) == document["chunk_count"] and sorted(rows) == sorted(texts), (round_, document, rows)
        assert "".join(texts).strip() == document["content"].strip()
        writers = {text.split(" w")[1].split(" ")[0].rstrip(".") for text in texts}
        assert len(writers) == 1, (round_, texts)  # every chunk from one and the same write
        assert {h["chunk_id"] for h in found} <= {c["chunk_id"] for c in chunks}, (round_, found, chunks)
        assert found, (round_, document)
