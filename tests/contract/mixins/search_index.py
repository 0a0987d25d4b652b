"""Contract of the SearchIndex port: what every adapter (the embedded index, OpenSearch...) must do."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

from kindex.domain.errors import InvalidInput
from kindex.domain.types import IndexRecord, SearchFilters

if TYPE_CHECKING:
    from kindex.domain.ports import SearchIndex

MODEL = "local:all-MiniLM-L6-v2"
OTHER_MODEL = "openai:text-embedding-3-small"
DIMS = 16


def unit(seed: int, dims: int = DIMS) -> np.ndarray:
    vector = np.random.RandomState(seed).normal(size=dims)
    return vector / np.linalg.norm(vector)


def near(vector: np.ndarray, seed: int, noise: float) -> np.ndarray:
    moved = vector + noise * np.random.RandomState(seed).normal(size=len(vector))
    return moved / np.linalg.norm(moved)


def record(
    chunk_id: str,
    vector: np.ndarray,
    *,
    tenant: str = "acme",
    collection: str = "handbook",
    document_id: str = "doc-1",
    text: str = "plain filler words",
    language: str | None = "en",
    mimetype: str | None = "text/plain",
) -> IndexRecord:
    return IndexRecord(
        tenant=tenant,
        collection=collection,
        document_id=document_id,
        chunk_id=chunk_id,
        vector=tuple(float(x) for x in vector),
        text=text,
        language=language,
        mimetype=mimetype,
    )


def corpus(count: int = 12, **fields) -> list[IndexRecord]:
    return [record(f"chunk-{i:02d}", unit(i), document_id=f"doc-{i % 3}", **fields) for i in range(count)]


def ids(hits) -> list[str]:
    return [hit.chunk_id for hit in hits]


class SearchIndexContract:
    """Subclass in a `Test*` class that provides `index`: a fresh, empty SearchIndex."""

    @pytest.fixture
    def index(self) -> SearchIndex:
        raise NotImplementedError(f"{type(self).__name__} must provide the `index` fixture")

    def test_knn_finds_the_nearest_chunks_best_first_with_cosine_scores(self, index):
        # Given a dozen chunks with random vectors
        records = corpus()
        index.upsert(MODEL, records)
        query = near(unit(5), seed=99, noise=0.05)
        # When searching near chunk 5
        hits = index.knn_search(MODEL, "acme", ["handbook"], query.tolist(), 3)
        # Then chunk 5 comes first, scores are the cosine similarities, best first
        vectors = np.array([r.vector for r in records])
        expected = np.argsort(-(vectors @ query))[:3]
        assert ids(hits) == [f"chunk-{i:02d}" for i in expected]
        assert hits[0].chunk_id == "chunk-05"
        assert [round(h.score, 4) for h in hits] == [round(float(vectors[i] @ query), 4) for i in expected]
        assert hits[0].document_id == "doc-2" and hits[0].collection == "handbook"

    def test_k_larger_than_the_collection_returns_everything_once(self, index):
        # Given 4 chunks
        index.upsert(MODEL, corpus(4))
        # When asking for 10
        hits = index.knn_search(MODEL, "acme", ["handbook"], unit(1).tolist(), 10)
        # Then each chunk comes back exactly once
        assert sorted(ids(hits)) == ["chunk-00", "chunk-01", "chunk-02", "chunk-03"]

    def test_upserting_the_same_chunk_id_again_replaces_it(self, index):
        # Given a chunk indexed with an old vector and old text
        index.upsert(MODEL, corpus(6))
        # When the same chunk id is written again with a new vector and text (twice in one batch, last wins)
        fresh = record("chunk-01", unit(500), document_id="doc-1", text="zebra migration")
        index.upsert(MODEL, [replace(fresh, text="stale words"), fresh])
        # Then there is one chunk-01, found by its new vector and new text only
        hits = index.knn_search(MODEL, "acme", ["handbook"], unit(500).tolist(), 10)
        assert ids(hits).count("chunk-01") == 1 and hits[0].chunk_id == "chunk-01"
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)
        assert ids(index.keyword_search(MODEL, "acme", ["handbook"], "zebra", 10)) == ["chunk-01"]
        assert index.keyword_search(MODEL, "acme", ["handbook"], "stale", 10) == []
        assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 6

    def test_delete_by_chunk_ids_removes_only_those(self, index):
        # Given six chunks
        index.upsert(MODEL, corpus(6))
        # When two are deleted (plus one that never existed)
        index.delete(MODEL, "acme", "handbook", chunk_ids=["chunk-01", "chunk-04", "missing"])
        # Then they are gone from the ids, the k-NN and the keyword search
        assert index.chunk_ids(MODEL, "acme", "handbook") == {"chunk-00", "chunk-02", "chunk-03", "chunk-05"}
        assert "chunk-01" not in ids(index.knn_search(MODEL, "acme", ["handbook"], unit(1).tolist(), 6))
        assert index.keyword_search(MODEL, "acme", ["handbook"], "filler", 10) != []
        assert not {"chunk-01", "chunk-04"} & set(ids(index.keyword_search(MODEL, "acme", ["handbook"], "filler", 10)))

    def test_delete_by_documents_removes_all_their_chunks(self, index):
        # Given chunks of doc-0, doc-1 and doc-2
        index.upsert(MODEL, corpus(9))
        # When doc-0 and doc-2 are deleted
        index.delete(MODEL, "acme", "handbook", document_ids=["doc-0", "doc-2"])
        # Then only doc-1's chunks remain
        assert index.chunk_ids(MODEL, "acme", "handbook") == {"chunk-01", "chunk-04", "chunk-07"}
        hits = index.knn_search(MODEL, "acme", ["handbook"], unit(0).tolist(), 9)
        assert {hit.document_id for hit in hits} == {"doc-1"}

    def test_delete_whole_collection_leaves_other_collections(self, index):
        # Given two collections
        index.upsert(MODEL, corpus(4) + corpus(4, collection="wiki"))
        # When the handbook is deleted
        index.delete(MODEL, "acme", "handbook")
        # Then it is empty and the wiki is intact
        assert index.chunk_ids(MODEL, "acme", "handbook") == set()
        assert index.knn_search(MODEL, "acme", ["handbook"], unit(0).tolist(), 4) == []
        assert len(index.chunk_ids(MODEL, "acme", "wiki")) == 4

    def test_empty_id_lists_delete_nothing_and_missing_things_are_not_errors(self, index):
        # Given a collection
        index.upsert(MODEL, corpus(3))
        # When deleting with empty lists, and deleting from things that never existed
        index.delete(MODEL, "acme", "handbook", chunk_ids=[])
        index.delete(MODEL, "acme", "handbook", document_ids=[])
        index.delete(MODEL, "acme", "nowhere")
        index.delete("hash:never-used", "acme", "handbook")
        # Then nothing was removed (an empty list never means "everything")
        assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 3

    def test_tenants_never_see_each_other(self, index):
        # Given two tenants with the same collection and chunk ids but different vectors and texts
        index.upsert(MODEL, [record(f"chunk-{i}", unit(i), tenant="acme", text="acme secret") for i in range(3)])
        index.upsert(
            MODEL, [record(f"chunk-{i}", unit(100 + i), tenant="globex", text="globex secret") for i in range(3)]
        )
        # When each searches
        acme_knn = index.knn_search(MODEL, "acme", ["handbook"], unit(100).tolist(), 10)
        globex_words = index.keyword_search(MODEL, "globex", ["handbook"], "acme secret", 10)
        # Then each sees exactly its own three chunks, with its own vectors
        assert len(acme_knn) == 3 and all(hit.score < 0.99 for hit in acme_knn)
        assert len(globex_words) == 3
        assert index.keyword_search(MODEL, "globex", ["handbook"], "acme", 10) == []
        # And deleting one tenant's collection leaves the other's
        index.delete(MODEL, "acme", "handbook")
        assert index.chunk_ids(MODEL, "acme", "handbook") == set()
        assert index.chunk_ids(MODEL, "globex", "handbook") == {"chunk-0", "chunk-1", "chunk-2"}
        assert index.knn_search(MODEL, "globex", ["handbook"], unit(100).tolist(), 1)[0].score == pytest.approx(
            1, abs=1e-4
        )
        assert index.knn_search(MODEL, "nobody", ["handbook"], unit(100).tolist(), 10) == []

    @pytest.mark.slow
    @pytest.mark.parametrize("tenant", [",", "a,b", "a,", " spaced tenant ", "ünï,cøde"])
    def test_any_valid_tenant_id_finds_and_deletes_its_own_chunks(self, index, tenant):
        # Given chunks of a tenant whose id holds commas or spaces (valid ids), beside those of tenant "a"
        index.upsert(MODEL, corpus(3, tenant=tenant, text="odd tenant words"))
        index.upsert(MODEL, corpus(2, tenant="a", text="plain tenant words"))
        # When it searches and lists / Then it finds its own chunks, and only those
        assert len(index.knn_search(MODEL, tenant, ["handbook"], unit(1).tolist(), 10)) == 3
        assert ids(index.keyword_search(MODEL, tenant, ["handbook"], "odd", 10)) != []
        assert len(index.keyword_search(MODEL, tenant, ["handbook"], "tenant", 10)) == 3
        assert len(index.chunk_ids(MODEL, tenant, "handbook")) == 3
        # And deleting its collection removes all of them and nothing of "a"
        index.delete(MODEL, tenant, "handbook")
        assert index.chunk_ids(MODEL, tenant, "handbook") == set()
        assert index.knn_search(MODEL, tenant, ["handbook"], unit(1).tolist(), 10) == []
        assert len(index.chunk_ids(MODEL, "a", "handbook")) == 2

    def test_search_spans_exactly_the_named_collections(self, index):
        # Given three collections
        index.upsert(
            MODEL,
            [
                record("a", unit(1), collection="alpha", text="shared word"),
                record("b", unit(2), collection="beta", text="shared word"),
                record("c", unit(3), collection="gamma", text="shared word"),
            ],
        )
        # When searching alpha and gamma
        knn = index.knn_search(MODEL, "acme", ["alpha", "gamma"], unit(2).tolist(), 10)
        words = index.keyword_search(MODEL, "acme", ["alpha", "gamma"], "shared", 10)
        # Then hits come from both, and never from beta; each hit names its collection
        assert {(h.chunk_id, h.collection) for h in knn} == {("a", "alpha"), ("c", "gamma")}
        assert {(h.chunk_id, h.collection) for h in words} == {("a", "alpha"), ("c", "gamma")}
        assert index.knn_search(MODEL, "acme", [], unit(2).tolist(), 10) == []

    @pytest.mark.slow
    @pytest.mark.parametrize(
        "filters, expected",
        [
            (SearchFilters(document_ids=("doc-far",)), {"far-1", "far-2"}),
            (SearchFilters(language="de"), {"far-1"}),
            (SearchFilters(mimetype="application/pdf"), {"far-2"}),
            (SearchFilters(document_ids=("doc-far",), language="fr"), set()),
        ],
    )
    def test_filters_apply_before_taking_the_top_k(self, index, filters, expected):
        # Given five chunks right next to the query and two far away that match the filter
        query = unit(7)
        close = [record(f"close-{i}", near(query, i, 0.01), document_id="doc-close") for i in range(5)]
        far = [
            record("far-1", unit(70), document_id="doc-far", language="de", text="alpine lake"),
            record("far-2", unit(71), document_id="doc-far", mimetype="application/pdf", text="alpine lake"),
        ]
        index.upsert(MODEL, close + far)
        # When searching for 2 with the filter
        knn = index.knn_search(MODEL, "acme", ["handbook"], query.tolist(), 2, filters)
        words = index.keyword_search(MODEL, "acme", ["handbook"], "alpine filler", 2, filters)
        # Then the matching chunks come back although closer ones exist (filter first, then top k)
        assert set(ids(knn)) == expected
        assert set(ids(words)) == expected

    def test_deferred_writes_are_searchable_once_committed_and_never_cross_tenants(self, index):
        from kindex.domain.ports import DeferredKeywordCommits

        if not isinstance(index, DeferredKeywordCommits):
            pytest.skip("this index has no deferred commits")
        # Given two tenants' batches written with the same ids, deferred, and an empty write
        first = index.upsert_deferred(MODEL, corpus(6, tenant="acme", text="deferred kestrel sighting"))
        second = index.upsert_deferred(MODEL, corpus(6, tenant="globex", text="deferred kestrel sighting"))
        empty = index.upsert_deferred(MODEL, [])
        assert len({first, second, empty}) == 3
        # When they are committed (twice: the second commit has nothing left to do)
        index.commit_deferred([first, second, empty])
        index.commit_deferred([first, second, empty])
        # Then each tenant finds its own six chunks, by words and by vector, and nothing of the other's
        for tenant in ("acme", "globex"):
            words = index.keyword_search(MODEL, tenant, ["handbook"], "kestrel", 10)
            assert sorted(ids(words)) == [f"chunk-{i:02d}" for i in range(6)]  # six, not twelve
            assert ids(index.knn_search(MODEL, tenant, ["handbook"], unit(2).tolist(), 1)) == ["chunk-02"]
        # And a plain delete afterwards removes them as ever
        index.delete(MODEL, "acme", "handbook", document_ids=["doc-0", "doc-1", "doc-2"])
        assert index.keyword_search(MODEL, "acme", ["handbook"], "kestrel", 10) == []
        assert len(index.keyword_search(MODEL, "globex", ["handbook"], "kestrel", 10)) == 6

    def test_keyword_search_ranks_the_chunk_with_the_query_terms_first(self, index):
        # Given chunks of which one mentions both query terms and one only one of them
        index.upsert(
            MODEL,
            [
                record("c-1", unit(1), text="The quarterly budget review is due on Friday."),
                record("c-2", unit(2), text="Holiday calendar and office opening hours."),
                record("c-3", unit(3), text="Budget templates live in the finance folder."),
                record("c-4", unit(4), text="Parking permits are renewed every spring."),
            ],
        )
        # When searching for both terms
        hits = index.keyword_search(MODEL, "acme", ["handbook"], "quarterly budget", 10)
        # Then the chunk with both comes first, the one with one term next, scores descending
        assert ids(hits) == ["c-1", "c-3"]
        assert hits[0].score > hits[1].score > 0

    @pytest.mark.slow
    @pytest.mark.parametrize(
        "query",
        [
            'budget"',
            '"budget',
            "budget AND",
            "NOT budget",
            "budget OR",
            "NEAR(budget review)",
            "budget*",
            "^budget",
            "text:budget",
            "-budget",
            "(budget",
            "budget)",
            "{budget}",
            "budget's",
            "'budget'",
            "budget; DROP TABLE chunk",
        ],
    )
    def test_keyword_search_treats_operators_quotes_and_punctuation_as_text(self, index, query):
        # Given a chunk about the budget
        index.upsert(MODEL, [record("c-1", unit(1), text="The budget review"), record("c-2", unit(2))])
        # When the query carries FTS or query-string syntax
        hits = index.keyword_search(MODEL, "acme", ["handbook"], query, 10)
        # Then it is just text: the budget chunk is found and nothing fails
        assert ids(hits)[:1] == ["c-1"]

    @pytest.mark.slow
    @pytest.mark.parametrize("query", ["", "   ", "?!", '"" ()', "*", "---"])
    def test_keyword_query_without_words_returns_nothing(self, index, query):
        # Given indexed chunks
        index.upsert(MODEL, corpus(3))
        # When the query has no word at all
        # Then nothing is returned (and nothing fails)
        assert index.keyword_search(MODEL, "acme", ["handbook"], query, 10) == []

    def test_searches_never_return_text(self, index):
        # Given chunks with distinctive text
        secret = "confidential merger codename bluebird"
        index.upsert(MODEL, [record("c-1", unit(1), text=secret), record("c-2", unit(2), text=secret)])
        # When searching both ways
        hits = index.knn_search(MODEL, "acme", ["handbook"], unit(1).tolist(), 5) + index.keyword_search(
            MODEL, "acme", ["handbook"], "bluebird", 5
        )
        # Then hits carry ids and scores only: no text anywhere
        assert len(hits) == 4
        for hit in hits:
            assert set(hit.__slots__) == {"chunk_id", "document_id", "collection", "score"}
            assert "bluebird" not in repr(hit)

    @pytest.mark.slow
    def test_models_with_different_dimensions_are_separate(self, index):
        # Given the same chunk ids under two models of different dimensions
        index.upsert(MODEL, [record(f"c-{i}", unit(i, 16), text="first model") for i in range(3)])
        index.upsert(OTHER_MODEL, [record(f"c-{i}", unit(i, 24), text="second model") for i in range(2)])
        # When searching and listing per model
        # Then each model sees only its own records
        assert len(index.knn_search(MODEL, "acme", ["handbook"], unit(0, 16).tolist(), 10)) == 3
        assert len(index.knn_search(OTHER_MODEL, "acme", ["handbook"], unit(0, 24).tolist(), 10)) == 2
        assert index.keyword_search(OTHER_MODEL, "acme", ["handbook"], "first", 10) == []
        assert index.chunk_ids(OTHER_MODEL, "acme", "handbook") == {"c-0", "c-1"}
        # And deleting under one model leaves the other
        index.delete(MODEL, "acme", "handbook")
        assert index.chunk_ids(OTHER_MODEL, "acme", "handbook") == {"c-0", "c-1"}
        assert index.chunk_ids(MODEL, "acme", "handbook") == set()

    @pytest.mark.slow
    def test_chunk_ids_lists_every_chunk_of_the_collection(self, index):
        # Given 2,500 chunks in one collection (more than one page) and one in another
        records = [record(f"chunk-{i:05d}", unit(i % 50), document_id=f"doc-{i // 10}") for i in range(2500)]
        index.upsert(MODEL, records + [record("elsewhere", unit(1), collection="wiki")])
        # When listing
        found = index.chunk_ids(MODEL, "acme", "handbook")
        # Then every id of that collection is there, once
        assert found == {r.chunk_id for r in records}
        assert index.chunk_ids(MODEL, "acme", "missing") == set()

    def test_chunk_ids_of_a_document_id_range_follow_code_point_order(self, index):
        # Given chunks of documents whose ids sort differently by code point, UTF-16 and case-folded
        documents = ["A", "a", "a b", "b", "\ufb01", "\U0001f600", "z"]
        index.upsert(MODEL, [record(f"c{i}", unit(i), document_id=d) for i, d in enumerate(documents)])
        index.upsert(MODEL, [record("other", unit(9), collection="other", document_id="a")])
        by_document = dict(zip(documents, (f"c{i}" for i in range(len(documents)))))

        def between(after, through):
            return {
                by_document[d] for d in documents if (after is None or d > after) and (through is None or d <= through)
            }

        # When asking for ranges (half-open: after < id <= through) / Then exactly those documents' chunks
        for after, through in [
            (None, "a"),
            ("a", "b"),
            ("b", None),
            ("a b", "\U0001f600"),
            ("zz", None),
            (None, None),
            ("A", "A"),
        ]:
            assert index.chunk_ids(
                MODEL, "acme", "handbook", after_document=after, through_document=through
            ) == between(after, through), (after, through)

    def test_unknown_model_or_collection_searches_return_nothing(self, index):
        # Given nothing indexed for this model
        # When searching
        # Then the answer is empty, not an error
        assert index.knn_search("hash:384", "acme", ["handbook"], unit(1).tolist(), 5) == []
        assert index.keyword_search("hash:384", "acme", ["handbook"], "anything", 5) == []
        assert index.chunk_ids("hash:384", "acme", "handbook") == set()

    def test_mixed_dimensions_in_one_upsert_are_rejected(self, index):
        # Given a batch mixing 16- and 8-dimensional vectors
        batch = [record("a", unit(1, 16)), record("b", unit(2, 8))]
        # When upserting / Then it is invalid input and nothing is written
        with pytest.raises(InvalidInput):
            index.upsert(MODEL, batch)
        assert index.chunk_ids(MODEL, "acme", "handbook") == set()

    def test_a_query_vector_of_the_wrong_dimension_is_invalid_input(self, index):
        # Given a model indexed with 16-dimensional vectors
        index.upsert(MODEL, corpus(3))
        # When querying it with 8 dimensions / Then the caller is told, rather than getting an empty answer
        with pytest.raises(InvalidInput):
            index.knn_search(MODEL, "acme", ["handbook"], unit(1, 8).tolist(), 3)

    @pytest.mark.slow
    def test_concurrent_writers_and_readers_do_not_lose_writes(self, index):
        # Given four threads each writing five batches to their own collection while searching
        def work(worker: int) -> None:
            for batch in range(5):
                index.upsert(
                    MODEL,
                    [
                        record(
                            f"w{worker}-b{batch}-{i}", unit(worker * 100 + batch * 10 + i), collection=f"col-{worker}"
                        )
                        for i in range(10)
                    ],
                )
                index.knn_search(MODEL, "acme", [f"col-{worker}"], unit(worker).tolist(), 3)

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(work, range(4)))
        # Then every write of every thread is there
        for worker in range(4):
            assert len(index.chunk_ids(MODEL, "acme", f"col-{worker}")) == 50
