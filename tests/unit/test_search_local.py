"""The embedded search index's own storage: snapshot + append-only log per partition (replay, compaction, torn
tails, old snapshots) and the exactness of its k-NN (filters on both scoring paths, multi-collection merge)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kindex.adapters.local.search import log as search_log
from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.domain.types import IndexRecord, SearchFilters

pytestmark = pytest.mark.unit

MODEL = "hash:16"
DIMS = 16


def unit(seed: int) -> np.ndarray:
    vector = np.random.RandomState(seed).normal(size=DIMS)
    return vector / np.linalg.norm(vector)


def record(
    chunk_id: str,
    seed: int,
    *,
    collection: str = "handbook",
    document_id: str = "doc-0",
    language: str | None = "en",
    mimetype: str | None = "text/plain",
) -> IndexRecord:
    return IndexRecord(
        tenant="acme",
        collection=collection,
        document_id=document_id,
        chunk_id=chunk_id,
        vector=tuple(unit(seed)),
        text=f"words of {chunk_id}",
        language=language,
        mimetype=mimetype,
    )


class Reference:
    """What the index should hold, kept as plain dicts: the oracle for exact search."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], IndexRecord] = {}

    def upsert(self, records: list[IndexRecord]) -> None:
        for item in records:
            self.records[(item.collection, item.chunk_id)] = item

    def delete(self, collection: str, document_ids=None, chunk_ids=None) -> None:
        for key, item in list(self.records.items()):
            if (
                key[0] == collection
                and (document_ids is None or item.document_id in document_ids)
                and (chunk_ids is None or item.chunk_id in chunk_ids)
            ):
                del self.records[key]

    def ids(self, collection: str) -> set[str]:
        return {chunk_id for col, chunk_id in self.records if col == collection}

    def knn(self, collections: list[str], query: np.ndarray, k: int, filters: SearchFilters | None = None):
        def keep(item: IndexRecord) -> bool:
            return item.collection in collections and (
                filters is None
                or (
                    (filters.document_ids is None or item.document_id in filters.document_ids)
                    and (filters.language is None or item.language == filters.language)
                    and (filters.mimetype is None or item.mimetype == filters.mimetype)
                )
            )

        scored = [
            (float(np.asarray(item.vector) @ query / np.linalg.norm(item.vector)), item.collection, item.chunk_id)
            for item in self.records.values()
            if keep(item)
        ]
        return [(collection, chunk_id) for _, collection, chunk_id in sorted(scored, key=lambda s: -s[0])[:k]]


def hits(
    index: LocalSearchIndex, collections: list[str], query: np.ndarray, k: int, filters: SearchFilters | None = None
) -> list[tuple[str, str]]:
    return [
        (hit.collection, hit.chunk_id)
        for hit in index.knn_search(MODEL, "acme", collections, query.tolist(), k, filters)
    ]


def random_history(index: LocalSearchIndex, reference: Reference, operations: int, seed: int) -> None:
    """Upserts of new and rewritten chunks, deletes by chunk ids and by documents, one call at a time."""
    rng = np.random.RandomState(seed)
    for step in range(operations):
        roll = rng.rand()
        if roll < 0.7:
            batch = [
                record(
                    f"c-{rng.randint(400)}",
                    seed * 100_000 + step * 10 + i,
                    document_id=f"doc-{rng.randint(40)}",
                    language=["en", "de", None][rng.randint(3)],
                )
                for i in range(rng.randint(1, 6))
            ]
            batch = list({item.chunk_id: item for item in batch}.values())
            index.upsert(MODEL, batch)
            reference.upsert(batch)
        elif roll < 0.85:
            doomed = [f"c-{rng.randint(400)}" for _ in range(rng.randint(1, 4))]
            index.delete(MODEL, "acme", "handbook", chunk_ids=doomed)
            reference.delete("handbook", chunk_ids=doomed)
        else:
            doomed = [f"doc-{rng.randint(40)}"]
            index.delete(MODEL, "acme", "handbook", document_ids=doomed)
            reference.delete("handbook", document_ids=doomed)


def vector_ids(index: LocalSearchIndex) -> set[str]:
    """The chunk ids the vector side holds (`chunk_ids` is the union with the keyword side, for drift repair)."""
    return {chunk_id for _, chunk_id in hits(index, ["handbook"], unit(0), 1_000)}


def files(root: Path, suffix: str) -> list[Path]:
    return sorted((root / "vectors").glob(f"*{suffix}"))


@pytest.mark.slow
def test_many_upserts_and_deletes_replay_to_the_same_index_after_reopen(tmp_path):
    # Given an index that saw a hundred upserts, rewrites and deletes, all still in the log (no compaction)
    root = tmp_path / "search"
    index, reference = LocalSearchIndex(root), Reference()
    random_history(index, reference, 100, seed=1)
    assert files(root, ".npz") == [] and len(files(root, ".log")) == 1
    before = [hits(index, ["handbook"], unit(9000 + q), 7) for q in range(5)]
    index.close()
    # When it is reopened from the folder
    reopened = LocalSearchIndex(root)
    # Then the log replays to exactly the reference state, and searches answer as before
    assert reopened.chunk_ids(MODEL, "acme", "handbook") == reference.ids("handbook")
    for q in range(5):
        assert hits(reopened, ["handbook"], unit(9000 + q), 7) == reference.knn(["handbook"], unit(9000 + q), 7)
        assert hits(reopened, ["handbook"], unit(9000 + q), 7) == before[q]
    reopened.close()


def test_an_upsert_appends_to_the_log_and_leaves_the_snapshot_alone(tmp_path, monkeypatch):
    # Given a partition that was just compacted into a snapshot
    monkeypatch.setattr(search_log, "COMPACT_MAX_RECORDS", 3)
    root = tmp_path / "search"
    index = LocalSearchIndex(root)
    for i in range(2):
        index.upsert(MODEL, [record(f"c-{i}-{j}", i * 10 + j) for j in range(50)])
    [snapshot] = files(root, ".npz")
    assert files(root, ".log") == []
    stat = snapshot.stat()
    # When one small document is upserted
    index.upsert(MODEL, [record(f"new-{j}", 500 + j) for j in range(5)])
    # Then only a small log record was written: the snapshot is the same file, untouched
    [log] = files(root, ".log")
    assert log.stat().st_size < 2_000
    assert (snapshot.stat().st_ino, snapshot.stat().st_mtime_ns, snapshot.stat().st_size) == (
        stat.st_ino,
        stat.st_mtime_ns,
        stat.st_size,
    )
    index.close()


@pytest.mark.slow
def test_compaction_preserves_content_and_empties_the_log(tmp_path, monkeypatch):
    # Given compaction every few records
    monkeypatch.setattr(search_log, "COMPACT_MAX_RECORDS", 7)
    root = tmp_path / "search"
    index, reference = LocalSearchIndex(root), Reference()
    # When a long history of writes goes through several compactions
    random_history(index, reference, 80, seed=2)  # about ten compactions
    # Then a snapshot exists, the log holds only the writes since the last compaction
    assert len(files(root, ".npz")) == 1
    assert all(len(log.read_bytes()) < 7 * 2_000 for log in files(root, ".log"))
    # And the live index and a reopened one both hold exactly the reference content
    assert index.chunk_ids(MODEL, "acme", "handbook") == reference.ids("handbook")
    index.close()
    reopened = LocalSearchIndex(root)
    assert reopened.chunk_ids(MODEL, "acme", "handbook") == reference.ids("handbook")
    for q in range(5):
        assert hits(reopened, ["handbook"], unit(7000 + q), 10) == reference.knn(["handbook"], unit(7000 + q), 10)
    reopened.close()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_torn_or_corrupt_last_record_is_ignored_and_later_writes_survive(tmp_path, damage):
    # Given two acknowledged writes in the log, then a crash that damaged the last one
    root = tmp_path / "search"
    index = LocalSearchIndex(root)
    index.upsert(MODEL, [record("kept", 1)])
    index.upsert(MODEL, [record("torn", 2)])
    index.close()
    [log] = files(root, ".log")
    data = log.read_bytes()
    log.write_bytes(data[:-5] if damage == "truncate" else data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:])
    # When the index is reopened
    reopened = LocalSearchIndex(root)
    # Then the intact write is there and the damaged one is dropped, without an error
    assert vector_ids(reopened) == {"kept"}
    assert hits(reopened, ["handbook"], unit(1), 1) == [("handbook", "kept")]
    # And a write made after the recovery is readable on the next reopen (it did not land behind the garbage)
    reopened.upsert(MODEL, [record("after", 3)])
    reopened.close()
    again = LocalSearchIndex(root)
    assert vector_ids(again) == {"kept", "after"}
    again.close()


def test_a_log_torn_inside_its_first_record_leaves_an_empty_partition_that_accepts_writes(tmp_path):
    # Given a log whose first write was torn by a crash
    root = tmp_path / "search"
    index = LocalSearchIndex(root)
    index.upsert(MODEL, [record("torn", 1)])
    index.close()
    [log] = files(root, ".log")
    log.write_bytes(log.read_bytes()[:10])
    # When reopening and writing again
    reopened = LocalSearchIndex(root)
    assert vector_ids(reopened) == set()
    reopened.upsert(MODEL, [record("fresh", 2)])
    reopened.close()
    # Then only the new write is there
    again = LocalSearchIndex(root)
    assert vector_ids(again) == {"fresh"}
    again.close()


def test_a_snapshot_in_the_previous_single_file_layout_still_loads(tmp_path):
    # Given a partition file as earlier versions wrote it (one npz, no log)
    root = tmp_path / "search"
    LocalSearchIndex(root).close()
    key = (MODEL, "acme", "handbook")
    snapshot = LocalSearchIndex(root)._paths(key)[0]
    vectors = np.array([unit(i) for i in range(3)], dtype=np.float32)
    np.savez(
        snapshot,
        key=np.array(key, dtype=str),
        vectors=vectors,
        chunk_ids=np.array(["a", "b", "c"]),
        document_ids=np.array(["d1", "d1", "d2"]),
        languages=np.array(["en", "", "de"]),
        mimetypes=np.array(["text/plain", "text/plain", ""]),
    )
    # When it is opened, searched and written to
    index = LocalSearchIndex(root)
    assert hits(index, ["handbook"], unit(1), 1) == [("handbook", "b")]
    assert hits(index, ["handbook"], unit(0), 3, SearchFilters(language="de")) == [("handbook", "c")]
    index.delete(MODEL, "acme", "handbook", document_ids=["d1"])
    index.close()
    # Then the snapshot plus the new log replay to the expected content
    again = LocalSearchIndex(root)
    assert vector_ids(again) == {"c"}
    again.close()


def test_deleting_everything_removes_the_files_and_stays_deleted(tmp_path):
    # Given a compacted partition with more writes in its log
    root = tmp_path / "search"
    index = LocalSearchIndex(root)
    index.upsert(MODEL, [record(f"c-{i}", i) for i in range(5)])
    index._maybe_compact((MODEL, "acme", "handbook"), index._partition(MODEL, "acme", "handbook"))
    index.upsert(MODEL, [record("late", 9)])
    # When the whole collection is deleted
    index.delete(MODEL, "acme", "handbook")
    # Then no file is left for it, a reopen finds nothing, and the collection can be written afresh
    assert files(root, ".npz") == [] and files(root, ".log") == []
    index.close()
    reopened = LocalSearchIndex(root)
    assert reopened.chunk_ids(MODEL, "acme", "handbook") == set()
    reopened.upsert(
        MODEL,
        [
            IndexRecord(
                tenant="acme",
                collection="handbook",
                document_id="d",
                chunk_id="x",
                vector=(1.0, 0.0, 0.0),
                text="three dimensions now",
            )
        ],
    )
    assert reopened.chunk_ids(MODEL, "acme", "handbook") == {"x"}
    reopened.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "filters",
    [
        SearchFilters(document_ids=("doc-3",)),  # a few rows: scored after gathering them
        SearchFilters(document_ids=tuple(f"doc-{i}" for i in range(0, 40, 2))),  # half the rows: masked scores
        SearchFilters(language="de"),
        SearchFilters(mimetype="application/pdf"),
        SearchFilters(document_ids=("doc-3", "doc-4", "unknown"), language="en"),
        SearchFilters(language="fr"),
        SearchFilters(document_ids=("unknown",)),
        SearchFilters(),
    ],
)
def test_filtered_knn_is_exact_on_both_scoring_paths(tmp_path, filters):
    # Given 400 chunks over 40 documents, with languages and mimetypes spread over them
    index, reference = LocalSearchIndex(tmp_path / "search"), Reference()
    batch = [
        record(
            f"c-{i}",
            i,
            document_id=f"doc-{i % 40}",
            language=["en", "de", None][i % 3],
            mimetype="application/pdf" if i % 7 == 0 else "text/plain",
        )
        for i in range(400)
    ]
    index.upsert(MODEL, batch)
    reference.upsert(batch)
    # When searching with the filter, for fewer and for more hits than match
    for k in (3, 500):
        for q in range(3):
            query = unit(5000 + q)
            # Then the hits are exactly the best matching chunks, best first
            assert hits(index, ["handbook"], query, k, filters) == reference.knn(["handbook"], query, k, filters)
    index.close()


def test_knn_over_several_collections_merges_each_ones_top_k(tmp_path):
    # Given three collections of different sizes, one of them holding every nearest chunk
    index, reference = LocalSearchIndex(tmp_path / "search"), Reference()
    query = unit(1)
    batch = (
        [record(f"a-{i}", 100 + i, collection="alpha") for i in range(50)]
        + [record(f"b-{i}", 200 + i, collection="beta") for i in range(5)]
        + [
            IndexRecord(
                tenant="acme",
                collection="gamma",
                document_id="g",
                chunk_id=f"g-{i}",
                vector=tuple(query + 0.01 * unit(300 + i)),
                text="near",
            )
            for i in range(8)
        ]
    )
    index.upsert(MODEL, batch)
    reference.upsert(batch)
    # When searching all three (and a collection twice, and one that does not exist) for k = 6 and k = 20
    for k in (6, 20):
        found = index.knn_search(MODEL, "acme", ["alpha", "beta", "gamma", "alpha", "nowhere"], query.tolist(), k)
        # Then the answer is the global top k, best first, each hit naming its collection
        assert [(hit.collection, hit.chunk_id) for hit in found] == reference.knn(["alpha", "beta", "gamma"], query, k)
        assert [hit.score for hit in found] == sorted((hit.score for hit in found), reverse=True)
    assert {
        hit.collection for hit in index.knn_search(MODEL, "acme", ["alpha", "beta", "gamma"], query.tolist(), 6)
    } == {"gamma"}
    index.close()
