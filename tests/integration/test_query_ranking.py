"""Neighbouring context (`expand`) and ranking controls (`max_chunks_per_document`, `hybrid` weights) on the local
backend: SQLite chunks, the embedded index, the real query service (issue 28 items 3 and 5)."""

from __future__ import annotations

import threading

import pytest

from kindex.domain.models import CollectionInput, DocumentInput
from kindex.domain.query import QueryRequest
from kindex.domain.validation import validated
from kindex_local.deployment import build_worker

pytestmark = pytest.mark.integration

# One sentence per chunk at chunking_max_size 60: each names its position, so a passage shows which chunks it holds.
SENTENCES = [
    "Alpha opens the manual.",
    "Bravo covers the boiler.",
    "Charlie lists the valves.",
    "Delta names the penguin keeper.",
    "Echo explains the feeding hours.",
    "Foxtrot describes the fence.",
    "Golf closes with the penguin census.",
    "Hotel is the appendix.",
]
TEXT = " ".join(SENTENCES)


@pytest.fixture
def env(local_container):
    services = local_container
    services.worker = build_worker()
    return services


def put(env, collection, document, tenant="t", **fields):
    env.catalog.put_document(tenant, collection, document, validated(lambda: DocumentInput(**fields)))


def ask(env, collections, tenant="t", **request):
    request.setdefault("groups", ["staff"])
    return env.query.query(tenant, collections, validated(lambda: QueryRequest(**request)), multi=len(collections) > 1)


def manual(env, tenant="t", collection="c", **fields):
    env.catalog.put_collection(tenant, collection, CollectionInput(query_groups=["staff"], chunking_max_size=40))
    put(env, collection, "manual", tenant=tenant, content=TEXT, title="Manual", **fields)
    env.worker.drain()
    chunks = env.adapters.chunks.list_chunks(tenant, collection, "manual")
    assert [c.text.strip() for c in chunks] == SENTENCES  # one sentence per chunk, or the test means nothing
    return chunks


def test_expand_returns_the_neighbouring_chunks_as_one_passage_with_true_offsets_and_sections(env):
    # Given a document of 8 one-sentence chunks
    chunks = manual(env)
    # When a keyword query hits the fourth only, with one chunk before and two after
    response = ask(env, ["c"], query="keeper", mode="keyword", expand={"before": 1, "after": 2})
    # Then one passage holds chunks 3-6, its offsets are the document's, and its text is the document's there
    (result,) = response.results
    assert result.chunk_id == chunks[3].chunk_id
    assert result.chunk_ids == [c.chunk_id for c in chunks[2:6]]
    assert (result.start, result.end) == (chunks[2].start, chunks[5].end)
    assert result.content == TEXT[result.start : result.end]
    assert result.content.startswith("Charlie") and result.content.rstrip().endswith("fence.")
    assert "Foxtrot describes the fence." in response.context
    # And without expand the same query returns the chunk alone, with its own offsets
    (alone,) = ask(env, ["c"], query="keeper", mode="keyword").results
    assert (alone.content, alone.start, alone.end, alone.chunk_ids) == (
        chunks[3].text,
        chunks[3].start,
        chunks[3].end,
        None,
    )


def test_expand_stops_at_the_document_edges(env):
    chunks = manual(env)
    (first,) = ask(env, ["c"], query="alpha", mode="keyword", expand={"before": 3, "after": 1}).results
    assert first.chunk_ids == [chunks[0].chunk_id, chunks[1].chunk_id]
    (last,) = ask(env, ["c"], query="appendix", mode="keyword", expand={"before": 1, "after": 3}).results
    assert last.chunk_ids == [chunks[6].chunk_id, chunks[7].chunk_id] and last.end == chunks[7].end


def test_results_that_overlap_after_expansion_are_merged_never_returned_twice(env):
    # Given the 8 chunks; "penguin" is in chunks 3 and 6
    chunks = manual(env)
    # When both hits are expanded by 1 (ranges 2-4 and 5-7 touch) and by 0 (apart)
    merged = ask(env, ["c"], query="penguin", mode="keyword", expand={"before": 1, "after": 1}).results
    apart = ask(env, ["c"], query="penguin", mode="keyword", expand={"before": 0, "after": 0}).results
    # Then touching passages become one passage at the better hit's rank, holding chunks 2-7 once each
    assert len(merged) == 1
    assert merged[0].chunk_ids == [c.chunk_id for c in chunks[2:8]]
    assert merged[0].content == TEXT[chunks[2].start : chunks[7].end]
    assert merged[0].chunk_id == apart[0].chunk_id
    # And with nothing added the two hits stay two results
    assert sorted(r.chunk_id for r in apart) == sorted([chunks[3].chunk_id, chunks[6].chunk_id])


def test_expand_keeps_access_lists_and_a_revocation_applies_at_once(env):
    # Given the manual readable by ann only
    manual(env, access={"users": ["ann"]})
    assert ask(env, ["c"], query="keeper", mode="keyword", user="ann", expand={"before": 1, "after": 1}).results
    # Then bob gets nothing, neither the hit nor its neighbours
    assert ask(env, ["c"], query="keeper", mode="keyword", user="bob", expand={"before": 3, "after": 3}).results == []
    # When the access list changes before the ingest rewrites the index entries
    put(env, "c", "manual", access={"users": ["bob"]})
    # Then ann's expanded query returns nothing at once (the record is checked before any neighbour is read)
    for mode in ("keyword", "vector", "hybrid"):
        response = ask(env, ["c"], query="keeper", mode=mode, user="ann", expand={"before": 3, "after": 3})
        assert response.results == [] and "Alpha" not in response.context


def test_expand_never_reads_another_tenants_chunks_with_the_same_ids(env):
    # Given two tenants with the same collection and document ids and the same structure (u's text in capitals)
    manual(env, tenant="t")
    env.catalog.put_collection("u", "c", CollectionInput(query_groups=["staff"], chunking_max_size=40))
    put(env, "c", "manual", tenant="u", content=TEXT.upper(), title="Manual")
    env.worker.drain()
    # When each asks for the same hit with neighbours
    for tenant in ("t", "u"):
        response = ask(env, ["c"], tenant=tenant, query="keeper", mode="keyword", expand={"before": 2, "after": 2})
        (result,) = response.results
        # Then each passage is made of its own tenant's chunks only
        assert len(result.chunk_ids) == 5
        assert (result.content == result.content.upper()) == (tenant == "u")


def test_16_concurrent_expanded_queries_get_the_same_passages(env):
    manual(env)
    expected = ask(env, ["c"], query="penguin", mode="hybrid", expand={"before": 1, "after": 1}).results
    errors: list[BaseException] = []
    seen: list[list[tuple]] = []

    def client():
        try:
            results = ask(env, ["c"], query="penguin", mode="hybrid", expand={"before": 1, "after": 1}).results
            seen.append([(r.chunk_id, r.content, r.start, r.end) for r in results])
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=client) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert seen == [[(r.chunk_id, r.content, r.start, r.end) for r in expected]] * 16


def test_max_chunks_per_document_lets_other_documents_fill_k(env):
    # Given one long document about penguins (8 matching chunks) and three short ones
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"], chunking_max_size=40))
    put(env, "c", "long", content=" ".join(f"Penguin fact number {i}." for i in range(8)))
    for i in range(3):
        put(env, "c", f"short-{i}", content=f"A penguin note {i}.")
    env.worker.drain()
    unlimited = ask(env, ["c"], query="penguin", mode="keyword", k=6).results
    assert sum(r.document_id == "long" for r in unlimited) > 2
    # When at most 2 results may come from one document
    diverse = ask(env, ["c"], query="penguin", mode="keyword", k=6, max_chunks_per_document=2).results
    # Then no document has more than 2, the short documents all appear, and the order is the unlimited one's
    counts = {doc: sum(r.document_id == doc for r in diverse) for doc in {r.document_id for r in diverse}}
    assert max(counts.values()) == 2 and {"short-0", "short-1", "short-2"} <= set(counts)
    assert len(diverse) == 5
    order = [r.chunk_id for r in unlimited] + [
        r.chunk_id for r in diverse if r.chunk_id not in {u.chunk_id for u in unlimited}
    ]
    assert [r.chunk_id for r in diverse] == [c for c in order if c in {r.chunk_id for r in diverse}]


@pytest.mark.parametrize("fusion", ["scores", "ranks"])
def test_hybrid_weights_move_the_ranking_towards_the_weighted_leg(env, fusion):
    # Given documents that one leg ranks differently from the other
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    put(env, "c", "lexical", content="zebra crossing rules " + "unrelated filler words " * 30)
    put(env, "c", "close", content="zebra crossings and pedestrian rules")
    put(env, "c", "other", content="traffic lights at junctions")
    env.worker.drain()
    query = "zebra crossing rules"
    vector = [r.chunk_id for r in ask(env, ["c"], query=query, mode="vector").results]
    keyword = [r.chunk_id for r in ask(env, ["c"], query=query, mode="keyword").results]
    # When one leg's weight is 0, hybrid ranks that leg's hits as the other leg alone would
    only_vector = ask(env, ["c"], query=query, hybrid={"fusion": fusion, "vector_weight": 1, "keyword_weight": 0})
    only_keyword = ask(env, ["c"], query=query, hybrid={"fusion": fusion, "vector_weight": 0, "keyword_weight": 1})
    assert [r.chunk_id for r in only_vector.results][: len(vector)] == vector
    assert [r.chunk_id for r in only_keyword.results][: len(keyword)] == keyword
    # And the score is linear in the weights: doubling both doubles every score, same order
    base = ask(env, ["c"], query=query, hybrid={"fusion": fusion, "vector_weight": 0.5, "keyword_weight": 0.7})
    doubled = ask(env, ["c"], query=query, hybrid={"fusion": fusion, "vector_weight": 1.0, "keyword_weight": 1.4})
    assert [r.chunk_id for r in doubled.results] == [r.chunk_id for r in base.results]
    assert [r.score for r in doubled.results] == pytest.approx([2 * r.score for r in base.results], abs=2e-6)


def test_min_score_in_hybrid_mode_is_the_weighted_sum_of_the_legs_scaled_scores_by_default(env):
    # Given one document, first (and so best and last) in both legs of any query that finds it
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    put(env, "c", "d", content="penguin colony antarctic")
    env.worker.drain()
    # Then its hybrid score is vector_weight * 1 + keyword_weight * 1: 1.7 with the defaults
    (result,) = ask(env, ["c"], query="penguin colony").results
    assert result.score == pytest.approx(1.7, abs=2e-6)
    weighted = ask(env, ["c"], query="penguin colony", hybrid={"vector_weight": 2, "keyword_weight": 1}).results
    assert weighted[0].score == pytest.approx(3.0, abs=2e-6)
    # And min_score compares against that scale
    assert ask(env, ["c"], query="penguin colony", min_score=1.7 - 1e-4).results
    assert ask(env, ["c"], query="penguin colony", min_score=1.7 + 1e-4).results == []


def test_min_score_in_hybrid_mode_with_fusion_by_ranks_is_the_weighted_fused_rank_score(env):
    # Given one document, first in both legs of any query that finds it
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    put(env, "c", "d", content="penguin colony antarctic")
    env.worker.drain()
    ranks = {"fusion": "ranks"}
    # Then its hybrid score is (vector_weight + keyword_weight) / (RRF k + 1): 1.5 / 11 with the defaults
    (result,) = ask(env, ["c"], query="penguin colony", hybrid=ranks).results
    assert result.score == pytest.approx(1.5 / 11, abs=1e-6)
    weighted = ask(env, ["c"], query="penguin colony", hybrid={**ranks, "vector_weight": 2, "keyword_weight": 1})
    assert weighted.results[0].score == pytest.approx(3 / 11, abs=1e-6)
    # And min_score compares against that scale
    assert ask(env, ["c"], query="penguin colony", hybrid=ranks, min_score=1.5 / 11 - 1e-4).results
    assert ask(env, ["c"], query="penguin colony", hybrid=ranks, min_score=1.5 / 11 + 1e-4).results == []


def test_hybrid_with_max_chunks_per_document_looks_past_a_round_of_one_documents_chunks(env):
    # Given one document whose 12 chunks all lead both legs, and two that mention the word once in other words
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"], chunking_max_size=40))
    put(env, "c", "long", content=" ".join(f"Penguin penguin fact {i}." for i in range(12)))
    for i in range(2):
        put(env, "c", f"short-{i}", content=f"Some unrelated words on paper mention a penguin once, note {i}.")
    env.worker.drain()
    first_round = ask(env, ["c"], query="penguin penguin", k=9).results
    assert {r.document_id for r in first_round} == {"long"}  # what a k = 3 query's first round (3 x 3) holds
    # When a k = 3 hybrid query allows one result per document (the legs, fewer than 100 hits, are read whole)
    diverse = ask(env, ["c"], query="penguin penguin", k=3, max_chunks_per_document=1).results
    # Then later rounds reach the fused candidates past the first 9: every document appears once
    assert sorted(r.document_id for r in diverse) == ["long", "short-0", "short-1"]
