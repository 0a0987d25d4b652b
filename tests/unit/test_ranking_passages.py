"""The pure parts of ranking and passages (kindex.app.query): the score fusion, weighted RRF, the per-document cap,
passage plans and the text of consecutive chunks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kindex.app.query import (
    fill_passages,
    fuse_legs,
    joined_text,
    per_document,
    plan_passages,
    reciprocal_rank_fusion,
    score_fusion,
)
from kindex.domain.query import Expand, HybridWeights, QueryRequest
from kindex.domain.types import SearchHit, StoredChunk

pytestmark = pytest.mark.unit


def hit(chunk_id: str, document_id: str = "d", score: float = 1.0, collection: str = "c") -> SearchHit:
    return SearchHit(chunk_id=chunk_id, document_id=document_id, collection=collection, score=score)


def stored(index: int, document_id: str = "d", start: int | None = None, text: str | None = None) -> StoredChunk:
    text = text if text is not None else f"<{index}>"
    start = index * len(text) if start is None else start
    return StoredChunk(
        chunk_id=f"{document_id}-{index}",
        collection="c",
        document_id=document_id,
        index=index,
        start=start,
        end=start + len(text),
        text=text,
    )


def test_weighted_rrf_scores_weight_over_k_plus_rank_and_a_zero_weight_leg_only_breaks_no_ties():
    vector = [hit("a"), hit("b"), hit("c")]
    keyword = [hit("c"), hit("b")]
    fused = reciprocal_rank_fusion([vector, keyword], k=10, weights=(1.0, 0.5))
    scores = {h.chunk_id: h.score for h in fused}
    assert scores == pytest.approx({"a": 1 / 11, "b": 1 / 12 + 0.5 / 12, "c": 1 / 13 + 0.5 / 11})
    assert [h.chunk_id for h in fused] == ["b", "c", "a"]
    # Unweighted is weights of 1
    assert reciprocal_rank_fusion([vector, keyword], k=10) == reciprocal_rank_fusion(
        [vector, keyword], k=10, weights=(1, 1)
    )
    # A leg of weight 0 leaves the other's order
    assert [h.chunk_id for h in reciprocal_rank_fusion([vector, keyword], weights=(1, 0))] == ["a", "b", "c"]


def test_score_fusion_adds_the_legs_min_max_scaled_scores_weighted():
    # Given a vector leg of cosines and a keyword leg of BM25 scores on another scale
    vector = [hit("a", score=0.9), hit("b", score=0.8), hit("c", score=0.4)]
    keyword = [hit("c", score=12.0), hit("b", score=6.0), hit("d", score=2.0)]
    # When they are fused with weights 1 and 0.5, each leg scaled over its first 3 hits
    fused = score_fusion(vector, keyword, (1.0, 0.5), window=3)
    # Then each leg's best counts 1 and its last 0, linearly between, and a leg that missed a chunk adds nothing
    scores = {h.chunk_id: h.score for h in fused}
    assert scores == pytest.approx({"a": 1.0, "b": 0.8 + 0.5 * 0.4, "c": 0.0 + 0.5 * 1.0, "d": 0.0})
    assert [h.chunk_id for h in fused] == ["a", "b", "c", "d"]
    # And a vector leg whose scores all tie (one hit, or equal scores) counts 1 for each, never dividing by zero
    tied = score_fusion([hit("a", score=0.5), hit("b", score=0.5)], [], (1.0, 1.0))
    assert {h.chunk_id: h.score for h in tied} == pytest.approx({"a": 1.0, "b": 1.0})
    assert score_fusion([], [], (1.0, 1.0)) == []


def test_a_keyword_leg_shorter_than_the_window_is_scaled_from_bm25s_zero_so_its_last_hit_still_counts():
    # Given a keyword leg that found only 3 chunks (every chunk holding a query word) and a vector leg of 4
    vector = [hit("a", score=0.9), hit("b", score=0.8), hit("c", score=0.4), hit("d", score=0.5)]
    keyword = [hit("c", score=12.0), hit("b", score=6.0), hit("d", score=3.0)]
    # When they are fused with the keyword leg alone weighing
    scores = {h.chunk_id: h.score for h in score_fusion(vector, keyword, (0.0, 1.0), window=100)}
    # Then its scores are BM25 / the best BM25: its last hit, d, still ranks above a, which it did not find
    assert scores == pytest.approx({"a": 0.0, "b": 0.5, "c": 1.0, "d": 0.25})
    # And a single keyword hit counts 1
    assert {h.chunk_id: h.score for h in score_fusion([], [hit("x", score=3.0)], (1.0, 1.0))} == {"x": 1.0}


def test_score_fusion_scales_over_a_fixed_window_so_a_deeper_read_keeps_the_scores():
    # Given a leg read 4 deep and the same leg read 3 deep, scaled over a window of its first 3 hits
    vector = [hit("a", score=0.9), hit("b", score=0.7), hit("c", score=0.5), hit("d", score=0.1)]
    keyword = [hit("b", score=8.0), hit("c", score=4.0), hit("a", score=2.0), hit("d", score=1.0)]
    deep = {h.chunk_id: h.score for h in score_fusion(vector, keyword, (1.0, 1.0), window=3)}
    shallow = {h.chunk_id: h.score for h in score_fusion(vector[:3], keyword[:3], (1.0, 1.0), window=3)}
    # Then the chunks both reads saw score the same, and one past the window scales below 0
    assert {c: deep[c] for c in shallow} == pytest.approx(shallow)
    assert deep["d"] == pytest.approx(-1.0 + -1 / 6)


def test_a_fusion_with_a_limit_returns_the_first_hits_of_the_whole_fusion_ties_included():
    # Given two legs of 60 hits that overlap by half, with tied scores (by chunk id then)
    vector = [hit(f"v{i:02}", score=1.0 - (i // 3) / 20) for i in range(60)]
    keyword = [hit(f"v{i:02}" if i % 2 else f"k{i:02}", score=30.0 - i // 4) for i in range(60)]
    for fuse in (
        lambda limit: score_fusion(vector, keyword, (1.0, 0.7), limit=limit),
        lambda limit: reciprocal_rank_fusion([vector, keyword], weights=(1.0, 0.5), limit=limit),
        lambda limit: fuse_legs(vector, keyword, QueryRequest(query="q"), limit=limit),
        lambda limit: fuse_legs(vector, keyword, QueryRequest(query="q", hybrid=HybridWeights(fusion="ranks")), limit),
    ):
        whole = fuse(None)
        assert len(whole) == 90
        # When each is read with a limit, then it is the same prefix, scores and ties alike
        for limit in (0, 1, 7, 31, 89, 90, 200):
            assert fuse(limit) == whole[:limit]
        assert whole == sorted(whole, key=lambda h: (-h.score, h.chunk_id))


def test_hybrid_fuses_by_scores_by_default_and_by_ranks_when_asked_each_with_its_default_weights():
    vector = [hit("a", score=0.9), hit("b", score=0.5)]
    keyword = [hit("b", score=10.0), hit("a", score=1.0)]
    by_default = fuse_legs(vector, keyword, QueryRequest(query="q"))
    # vector scaled 1 and 0 (min-max), keyword BM25 / 10 (a short leg, from its own 0), weights 1 and 0.7
    assert {h.chunk_id: h.score for h in by_default} == pytest.approx({"a": 1.0 + 0.07, "b": 0.7})
    by_ranks = fuse_legs(vector, keyword, QueryRequest(query="q", hybrid=HybridWeights(fusion="ranks")))
    assert {h.chunk_id: h.score for h in by_ranks} == pytest.approx({"a": 1 / 11 + 0.5 / 12, "b": 1 / 12 + 0.5 / 11})
    # A weight given overrides only that weight's default
    assert HybridWeights(fusion="ranks", keyword_weight=2).weights() == (1.0, 2)
    assert HybridWeights(vector_weight=0.5).weights() == (0.5, 0.7)
    with pytest.raises(ValueError, match="cannot both be 0"):
        HybridWeights(vector_weight=0, keyword_weight=0)


def test_per_document_keeps_the_best_n_of_each_document_in_order():
    hits = [hit("1", "x"), hit("2", "x"), hit("3", "y"), hit("4", "x"), hit("5", "y", collection="other")]
    assert [h.chunk_id for h in per_document(hits, 1)] == ["1", "3", "5"]
    assert [h.chunk_id for h in per_document(hits, 2)] == ["1", "2", "3", "5"]
    assert per_document(hits, None) == hits


def test_passages_merge_ranges_that_overlap_or_touch_at_the_better_hits_rank():
    texts = {c.chunk_id: c for c in (stored(i) for i in range(20))}
    # Hits at 5, 9, 7 and 15 with one chunk on each side: 4-6 and 8-10 touch 6-8 (the third hit), 14-16 stands apart
    hits = [hit("d-5"), hit("d-9"), hit("d-7"), hit("d-15")]
    passages = plan_passages(hits, texts, Expand(before=1, after=1))
    assert [(p.hit.chunk_id, p.first, p.last) for p in passages] == [("d-5", 4, 10), ("d-15", 14, 16)]
    # Apart by a gap of one chunk, they stay two
    passages = plan_passages([hit("d-5"), hit("d-8")], texts, Expand(before=0, after=1))
    assert [(p.first, p.last) for p in passages] == [(5, 6), (8, 9)]
    # Edges clamp at 0; without expand every hit is its own chunk, whatever its neighbours
    assert [(p.first, p.last) for p in plan_passages([hit("d-1")], texts, Expand(before=3))] == [(0, 1)]
    assert len(plan_passages([hit("d-5"), hit("d-6")], texts, None)) == 2
    # A hit whose chunk is gone drops out
    assert plan_passages([hit("gone")], texts, Expand(after=1)) == []


def test_passages_of_different_documents_or_collections_never_merge():
    texts = {c.chunk_id: c for c in (stored(1, "a"), stored(2, "b"))}
    hits = [hit("a-1", "a"), hit("b-2", "b")]
    assert len(plan_passages(hits, texts, Expand(before=3, after=3))) == 2


def test_fill_passages_takes_the_range_and_keeps_the_hit_alone_when_its_document_was_rewritten():
    chunks = [stored(i) for i in range(6)]
    (passage,) = plan_passages([hit("d-2")], {c.chunk_id: c for c in chunks}, Expand(before=1, after=2))
    fill_passages([passage], chunks)
    assert [c.index for c in passage.chunks] == [1, 2, 3, 4]
    # The range read found another version's chunks (not the hit's id): the hit's chunk alone
    (passage,) = plan_passages([hit("d-2")], {c.chunk_id: c for c in chunks}, Expand(before=1, after=2))
    fill_passages([passage], [replace(stored(i, text=f"new {i}"), chunk_id=f"new-{i}") for i in range(6)])
    assert [c.chunk_id for c in passage.chunks] == ["d-2"] and passage.chunks[0].text == "<2>"


def test_joined_text_writes_overlaps_once_and_fills_gaps_so_offsets_stay_true():
    document = "alpha beta gamma delta epsilon"
    # Overlapping chunks (a chunk overlap of 5) and a gap of whitespace the chunker dropped
    first = StoredChunk("1", "c", "d", 0, 0, 11, document[0:11])
    second = StoredChunk("2", "c", "d", 1, 6, 17, document[6:17])
    third = StoredChunk("3", "c", "d", 2, 23, 30, document[23:30])
    text, end = joined_text([first, second, third])
    assert (text[:17], end, len(text)) == (document[:17], 30, 30)
    assert text[23:] == document[23:]
