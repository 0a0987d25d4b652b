"""A tenant's keyword scores over HTTP depend on its own documents only (issue 26, item 2): in one shared BM25 index
evil's score for its own term fell from 10.870 to 7.465 once acme indexed ten chunks holding it, which told evil how
many chunks in the whole deployment held the word. And a data directory of that shared index is rebuilt per tenant
when the server starts."""

import json
import shutil
import time
from pathlib import Path

import pytest

from kindex.adapters.local.private_files import private_dir
from tests.conftest import start_server

pytestmark = pytest.mark.e2e

TERM = "projectfalcon"


def wait_for(check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def indexed(session, url, ids) -> bool:
    return all(session.get(f"{url}/documents/{d}").json()["status"] == "indexed" for d in ids)


def keyword_ranking(session, url) -> list[tuple[str, str, float]]:
    response = session.post(f"{url}/query", json={"query": f"{TERM} nonce", "mode": "keyword", "k": 20})
    assert response.status_code == 200, response.text
    return [(hit["document_id"], hit["chunk_id"], hit["score"]) for hit in response.json()["results"]]


def test_a_tenants_keyword_scores_do_not_move_when_another_tenant_indexes_or_deletes_its_words(server):
    evil = server.session(server.create_key("evil", "admin"))
    acme = server.session(server.create_key("acme", "admin"))
    # Given evil's collection "kb" with its own term beside a nonce, in a few documents of various lengths
    url = server.url("/v1/collections/kb")
    for session in (evil, acme):
        assert session.put(url, json={"allow_guests": True}).status_code == 201
    evil_documents = {
        "d0": f"{TERM} nonce 4471",
        "d1": f"{TERM} with a much longer text around it, nonce 4471",
        "d2": "nothing of the word here, only a nonce",
    }
    for doc_id, text in evil_documents.items():
        assert evil.put(f"{url}/documents/{doc_id}", json={"content": text}).status_code in (201, 202)
    wait_for(lambda: indexed(evil, url, evil_documents))
    before = keyword_ranking(evil, url)
    assert [document for document, _, _ in before][:2] == ["d0", "d1"] and len(before) == 3
    # When acme indexes ten documents holding the term, in a collection and under document ids that are evil's too
    acme_ids = [f"d{i}" for i in range(10)]
    for doc_id in acme_ids:
        assert acme.put(f"{url}/documents/{doc_id}", json={"content": f"{TERM} {TERM} acme {doc_id}"}).status_code in (
            201,
            202,
        )
    wait_for(lambda: indexed(acme, url, acme_ids))
    assert len(keyword_ranking(acme, url)) == 10  # acme's chunks are in the index
    during = keyword_ranking(evil, url)
    # And then deletes them
    for doc_id in acme_ids:
        assert acme.delete(f"{url}/documents/{doc_id}").status_code == 204
    wait_for(lambda: keyword_ranking(acme, url) == [])
    after = keyword_ranking(evil, url)
    # Then evil's ranking and every score are exactly what they were
    assert during == before
    assert after == before


def rewrite_as_one_shared_keyword_index(index_dir: Path) -> None:
    """Turn a data directory's per-tenant keyword indices into the one index all tenants shared before: the same
    key fields (texts were never stored, so the rebuild must take them from the chunk store)."""
    import tantivy

    from kindex.adapters.local.search.keyword import ANALYZER, build_schema, text_analyzer

    shared = tantivy.Index(build_schema(), path=str(private_dir(index_dir / "keyword")))
    shared.register_tokenizer(ANALYZER, text_analyzer())
    writer = shared.writer(15_000_000, 1)
    for folder in (index_dir / "keywords").iterdir():
        tenant_index = tantivy.Index(build_schema(), path=str(folder), reuse=True)
        searcher = tenant_index.searcher()
        for _, address in searcher.search(tantivy.Query.all_query(), max(searcher.num_docs, 1)).hits:
            stored = searcher.doc(address)
            model, tenant, collection, _ = json.loads(stored["chunk"][0])
            writer.add_document(
                tantivy.Document(
                    text="",
                    partition=json.dumps([model, tenant, collection]),
                    document=stored["document"][0],
                    chunk=stored["chunk"][0],
                )
            )
    writer.commit()
    writer.wait_merging_threads()
    shutil.rmtree(index_dir / "keywords")


def test_a_data_directory_with_the_shared_keyword_index_is_rebuilt_per_tenant_when_the_server_starts(tmp_path):
    # Given a server's data directory with two tenants' documents under the same ids, one of them in French
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    queries = {
        "keyword": {"query": f"{TERM} nonce", "mode": "keyword", "k": 20},
        "french": {"query": TERM, "mode": "keyword", "k": 20, "filters": {"language": "fr"}},
    }
    try:
        sessions = {tenant: server.session(server.create_key(tenant, "admin")) for tenant in ("evil", "acme")}
        url = server.url("/v1/collections/kb")
        for tenant, session in sessions.items():
            assert session.put(url, json={"allow_guests": True}).status_code == 201
            for i in range(4):
                body = {"content": f"{TERM} {tenant} nonce {'word ' * i}", "language": "fr" if i == 1 else "en"}
                assert session.put(f"{url}/documents/d{i}", json=body).status_code in (201, 202)
        for session in sessions.values():
            wait_for(lambda session=session: indexed(session, url, [f"d{i}" for i in range(4)]))
        before = {
            (tenant, name): session.post(f"{url}/query", json=query).json()["results"]
            for tenant, session in sessions.items()
            for name, query in queries.items()
        }
    finally:
        server.stop()
    assert [hit["document_id"] for hit in before[("evil", "french")]] == ["d1"]
    rewrite_as_one_shared_keyword_index(data_dir / "index")
    # When the server starts on it again
    server = start_server(data_dir)
    try:
        sessions = {tenant: server.session(server.create_key(tenant, "query")) for tenant in ("evil", "acme")}
        url = server.url("/v1/collections/kb")
        after = {
            (tenant, name): session.post(f"{url}/query", json=query).json()["results"]
            for tenant, session in sessions.items()
            for name, query in queries.items()
        }
    finally:
        server.stop()
    # Then every tenant's keyword results are what they were, scores and filter fields included, and the shared
    # index is gone
    assert after == before
    assert not (data_dir / "index" / "keyword").exists()
