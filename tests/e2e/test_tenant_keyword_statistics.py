"""A tenant's keyword scores over HTTP depend on its own documents only (issue 26, item 2): in one shared BM25 index
evil's score for its own term fell from 10.870 to 7.465 once acme indexed ten chunks holding it, which told evil how
many chunks in the whole deployment held the word."""

import time

import pytest

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
    evil_documents = {"d0": f"{TERM} nonce 4471", "d1": f"{TERM} with a much longer text around it, nonce 4471",
                      "d2": "nothing of the word here, only a nonce"}
    for doc_id, text in evil_documents.items():
        assert evil.put(f"{url}/documents/{doc_id}", json={"content": text}).status_code in (201, 202)
    wait_for(lambda: indexed(evil, url, evil_documents))
    before = keyword_ranking(evil, url)
    assert [document for document, _, _ in before][:2] == ["d0", "d1"] and len(before) == 3
    # When acme indexes ten documents holding the term, in a collection and under document ids that are evil's too
    acme_ids = [f"d{i}" for i in range(10)]
    for doc_id in acme_ids:
        assert acme.put(f"{url}/documents/{doc_id}", json={"content": f"{TERM} {TERM} acme {doc_id}"}
                        ).status_code in (201, 202)
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
