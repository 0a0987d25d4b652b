"""The embedded index's approximate path (an HNSW graph per large partition): deletes never returned, tenants with
the same ids, graph files tied to their snapshot, a writer killed mid-write, filtered searches falling back to exact.
The size threshold is lowered so that small partitions get a graph."""

from __future__ import annotations

import numpy as np
import pytest

from kindex.adapters.local.search import ann
from kindex.adapters.local.search import log as search_log
from kindex.adapters.local.search import partition as partition_module
from kindex.adapters.local.search.ann import AnnGraph
from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.domain.types import IndexRecord, SearchFilters
from tests.support.crash import kill_writer_after

pytestmark = pytest.mark.unit

MODEL = "hash:24"
DIMS = 24
THRESHOLD = 300


def vectors(count: int, seed: int) -> np.ndarray:
    found = np.random.default_rng(seed).standard_normal((count, DIMS)).astype(np.float32)
    return found / np.linalg.norm(found, axis=1, keepdims=True)


def records(
    matrix: np.ndarray, *, tenant: str = "acme", prefix: str = "c", documents: int = 10, start: int = 0
) -> list[IndexRecord]:
    return [
        IndexRecord(
            tenant=tenant,
            collection="col",
            document_id=f"d{(start + i) % documents}",
            chunk_id=f"{prefix}{start + i}",
            vector=tuple(row),
            text="",
            language="en",
        )
        for i, row in enumerate(matrix)
    ]


def exact(stored: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[str]:
    names = list(stored)
    scores = np.array([stored[name] @ query for name in names])
    return [names[i] for i in np.argsort(-scores)[:k]]


def hits(index, query, k=10, tenant="acme", filters=None) -> list[str]:
    return [hit.chunk_id for hit in index.knn_search(MODEL, tenant, ["col"], query.tolist(), k, filters)]


def graph_of(index: LocalSearchIndex, tenant: str = "acme"):
    return index._partition(MODEL, tenant, "col").graph


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    monkeypatch.setattr(ann, "MIN_ROWS", THRESHOLD)
    # and filtered searches go to the graph above as many matching rows (20,000 in production)
    monkeypatch.setattr(partition_module, "EXACT_MAX_ROWS", THRESHOLD)
    # Reproducible graphs: a two-thread HNSW build differs from run to run, and on random 24-d vectors any usearch
    # graph misses ~0.2% of self-queries (measured with usearch alone, int8 and float32 alike), so a test asking that
    # every kept vector finds itself first failed ~1 run in 10. One thread builds the same graph every time.
    monkeypatch.setattr(ann, "BUILD_THREADS", 1)


@pytest.fixture
def index(tmp_path):
    adapter = LocalSearchIndex(tmp_path / "index")
    yield adapter
    adapter.close()


@pytest.mark.slow
def test_a_partition_gets_a_graph_at_the_threshold_and_finds_what_exact_search_finds(index):
    base = vectors(600, 1)
    index.upsert(MODEL, records(base[: THRESHOLD - 1]))
    assert graph_of(index) is None
    index.upsert(MODEL, records(base[THRESHOLD - 1 :], start=THRESHOLD - 1))
    assert graph_of(index) is not None and len(graph_of(index)) == 600
    stored = {f"c{i}": row for i, row in enumerate(base)}
    queries = vectors(50, 2)
    agreement = np.mean([len(set(hits(index, q)) & set(exact(stored, q, 10))) / 10 for q in queries])
    assert agreement >= 0.98
    # And each hit carries its cosine, from the partition's float16 rows: within float16 rounding of the exact one
    # (each unit-vector component rounded by at most 2**-11 of itself moves a cosine by at most 2**-11)
    top = index.knn_search(MODEL, "acme", ["col"], queries[0].tolist(), 3)
    assert [h.score for h in top] == pytest.approx([float(stored[h.chunk_id] @ queries[0]) for h in top], abs=2**-11)


def test_a_partition_keeps_float16_rows_only_while_it_has_a_graph_and_small_ones_score_exactly(index, tmp_path):
    # Below the threshold: float32 rows, exact float32 cosines
    base = vectors(THRESHOLD - 1, 30)
    index.upsert(MODEL, records(base))
    partition = index._partition(MODEL, "acme", "col")
    query = vectors(1, 31)[0]
    (hit,) = index.knn_search(MODEL, "acme", ["col"], query.tolist(), 1)
    assert partition.vectors.dtype == np.float32
    assert hit.score == pytest.approx(float(base[int(hit.chunk_id[1:])] @ query), abs=1e-6)
    # At the threshold the rows become float16 (half the memory), in memory and in the snapshot saved with the graph
    index.upsert(MODEL, records(vectors(1, 32), start=THRESHOLD - 1))
    assert partition.graph is not None and partition.vectors.dtype == np.float16
    with np.load(next((tmp_path / "index" / "vectors").glob("*.npz"))) as snapshot:
        assert snapshot["vectors"].dtype == np.float16 and len(snapshot["vectors"]) == THRESHOLD
    # A whole scan of the float16 rows (a filter the graph cannot serve) agrees with float32 exact search
    everything = np.concatenate([base, vectors(1, 32)])
    assert np.allclose(partition.scores(None, query), everything @ query, atol=2**-11)
    # Reopened, it is float16 again, with its graph
    index.close()
    reopened = LocalSearchIndex(tmp_path / "index")
    again = reopened._partition(MODEL, "acme", "col")
    assert again.graph is not None and again.vectors.dtype == np.float16
    # Once deletes bring it below half the threshold, the graph goes and the rows are float32 again
    reopened.delete(MODEL, "acme", "col", chunk_ids=[f"c{i}" for i in range(THRESHOLD // 2 + 1)])
    assert again.graph is None and again.vectors.dtype == np.float32
    left = {f"c{i}": row for i, row in enumerate(base) if i > THRESHOLD // 2}
    found = reopened.knn_search(MODEL, "acme", ["col"], query.tolist(), 3)
    assert [h.chunk_id for h in found] == exact(left | {f"c{THRESHOLD - 1}": vectors(1, 32)[0]}, query, 3)
    reopened.close()


@pytest.mark.slow
@pytest.mark.parametrize("deleted", [5, 200], ids=["row-by-row", "bulk"])
def test_deleted_chunks_are_never_returned_after_the_graph_was_used(index, deleted):
    # Given a partition with a graph, searched once
    base = vectors(600, 3)
    index.upsert(MODEL, records(base))
    assert hits(index, base[0], 1) == ["c0"]
    # When some chunks are deleted (a few: rows refilled from the end; many: the partition is renumbered)
    doomed = [f"c{i}" for i in range(0, 600, 600 // deleted)][:deleted]
    index.delete(MODEL, "acme", "col", chunk_ids=doomed)
    # Then searching right at a deleted vector never returns it, and every kept vector still finds itself first
    stored = {f"c{i}": row for i, row in enumerate(base) if f"c{i}" not in doomed}
    for i in range(0, 600, 7):
        found = hits(index, base[i], 10)
        assert not set(found) & set(doomed)
        if f"c{i}" in stored:
            assert found[0] == f"c{i}"
    assert len(graph_of(index)) == len(stored)


def test_a_replaced_vector_is_found_at_its_new_place_only(index):
    base = vectors(400, 4)
    index.upsert(MODEL, records(base))
    moved = vectors(1, 99)[0]
    index.upsert(
        MODEL,
        [IndexRecord(tenant="acme", collection="col", document_id="d0", chunk_id="c10", vector=tuple(moved), text="")],
    )
    assert hits(index, moved, 1) == ["c10"]
    assert "c10" not in hits(index, base[10], 3)


@pytest.mark.slow
def test_two_tenants_with_the_same_ids_each_search_their_own_graph(index):
    first, second = vectors(400, 5), vectors(400, 6)
    index.upsert(MODEL, records(first, tenant="acme") + records(second, tenant="globex"))
    assert graph_of(index, "acme") is not graph_of(index, "globex")
    for i in range(0, 400, 37):
        assert hits(index, first[i], 1, tenant="acme") == [f"c{i}"]
        assert hits(index, second[i], 1, tenant="globex") == [f"c{i}"]
        hit = index.knn_search(MODEL, "globex", ["col"], first[i].tolist(), 1)[0]
        assert hit.score == pytest.approx(float(second[int(hit.chunk_id[1:])] @ first[i]), abs=2**-11)
    index.delete(MODEL, "acme", "col", document_ids=["d3"])
    assert len(hits(index, first[3], 400, tenant="globex")) == 400


def test_filtered_searches_that_keep_few_rows_are_exact_and_never_ask_the_graph(index, monkeypatch):
    base = vectors(900, 7)
    index.upsert(MODEL, records(base, documents=30))
    asked = []
    original = AnnGraph.candidates
    monkeypatch.setattr(AnnGraph, "candidates", lambda self, q, n: asked.append(n) or original(self, q, n))
    stored = {f"c{i}": row for i, row in enumerate(base)}
    # When filtering to one document of thirty (30 rows)
    query = vectors(1, 8)[0]
    found = hits(index, query, 5, filters=SearchFilters(document_ids=("d4",)))
    # Then the answer is the exact top 5 of that document, and the graph was not consulted
    assert found == exact({n: v for n, v in stored.items() if int(n[1:]) % 30 == 4}, query, 5)
    assert asked == []
    # While an unfiltered and a broad filter (all but one document) go through the graph, filters respected
    hits(index, query, 5)
    broad = hits(index, query, 10, filters=SearchFilters(document_ids=tuple(f"d{i}" for i in range(29))))
    assert len(asked) == 2 and all(int(n[1:]) % 30 != 29 for n in broad)
    assert len(set(broad) & set(exact({n: v for n, v in stored.items() if int(n[1:]) % 30 != 29}, query, 10))) >= 9


@pytest.mark.slow
def test_a_filter_the_graph_cannot_satisfy_falls_back_to_exact(index, monkeypatch):
    base = vectors(900, 9)
    index.upsert(MODEL, records(base, documents=2))
    # A graph that proposes only rows the filter drops (as a stale or unlucky graph might)
    monkeypatch.setattr(AnnGraph, "candidates", lambda self, q, n: np.arange(0, 40, 2))
    query = vectors(1, 10)[0]
    found = hits(index, query, 5, filters=SearchFilters(document_ids=("d1",)))
    stored = {f"c{i}": row for i, row in enumerate(base) if i % 2 == 1}
    assert found == exact(stored, query, 5)


def test_the_graph_is_saved_with_its_snapshot_and_reloaded_not_rebuilt(tmp_path, monkeypatch):
    base = vectors(500, 11)
    first = LocalSearchIndex(tmp_path / "index")
    first.upsert(MODEL, records(base))
    first.delete(MODEL, "acme", "col", chunk_ids=["c1", "c2"])
    first.close()
    graphs = list((tmp_path / "index" / "vectors").glob("*.usearch"))
    assert len(graphs) == 1
    builds = []
    monkeypatch.setattr(AnnGraph, "build", classmethod(lambda cls, v: builds.append(len(v))))
    second = LocalSearchIndex(tmp_path / "index")
    assert hits(second, base[7], 1) == ["c7"] and "c1" not in hits(second, base[1], 5)
    assert builds == [] and len(graph_of(second)) == 498
    second.close()


@pytest.mark.slow
def test_close_compacts_graph_partitions_so_the_next_open_replays_no_log(tmp_path, monkeypatch):
    # Given a graph partition with writes in its log since its last snapshot, and a small one without a graph
    base, more = vectors(500, 21), vectors(40, 22)
    first = LocalSearchIndex(tmp_path / "index")
    first.upsert(MODEL, records(base))
    first.upsert(MODEL, records(more, start=500))
    first.delete(MODEL, "acme", "col", chunk_ids=["c3"])
    first.upsert(MODEL, records(vectors(20, 23), tenant="other"))
    folder = tmp_path / "index" / "vectors"
    logs_before = sorted(path.name for path in folder.glob("*.log"))
    assert len(logs_before) == 2  # the graph partition's writes since its snapshot, and the small partition's
    # When the index is closed (a clean shutdown)
    first.close()
    # Then the graph partition is compacted (no log left, one graph), the small one keeps its log (cheap to replay)
    logs_after = sorted(path.name for path in folder.glob("*.log"))
    assert len(logs_after) == 1 and logs_after[0] in logs_before
    assert len(list(folder.glob("*.usearch"))) == 1
    # And the next open reads the saved graph with every write in it, building and replaying nothing for it
    builds, replayed = [], []
    monkeypatch.setattr(AnnGraph, "build", classmethod(lambda cls, v: builds.append(len(v))))
    original = LocalSearchIndex._replay
    monkeypatch.setattr(
        LocalSearchIndex,
        "_replay",
        lambda self, key, log, partition: replayed.append(key[1]) or original(self, key, log, partition),
    )
    second = LocalSearchIndex(tmp_path / "index")
    assert hits(second, more[5], 1) == ["c505"] and "c3" not in hits(second, base[3], 5)
    assert builds == [] and replayed == [] and len(graph_of(second)) == 539
    assert hits(second, vectors(20, 23)[4], 1, tenant="other") == ["c4"] and replayed == ["other"]
    # And an index stays usable after a close: a later write reopens what it needs
    second.close()
    second.upsert(MODEL, records(vectors(3, 24), start=900))
    assert hits(second, vectors(3, 24)[1], 1) == ["c901"]
    second.close()


def test_a_graph_file_without_its_snapshot_is_never_used_and_a_missing_one_is_rebuilt(tmp_path):
    base = vectors(500, 12)
    first = LocalSearchIndex(tmp_path / "index")
    first.upsert(MODEL, records(base))
    first.close()
    folder = tmp_path / "index" / "vectors"
    (graph,) = folder.glob("*.usearch")
    # Given a crash after a new graph was saved but before its snapshot: a graph of another generation,
    # built from other vectors, and the snapshot's own graph lost
    stem = graph.name.split(".")[0]
    AnnGraph.build(vectors(500, 13)).save(folder / f"{stem}.0123456789abcdef.usearch")
    graph.unlink()
    # When reopened, the graph is rebuilt from the vectors (and saved), never taken from the stray file
    second = LocalSearchIndex(tmp_path / "index")
    for i in range(0, 500, 50):
        assert hits(second, base[i], 1) == [f"c{i}"]
    assert [p.name for p in folder.glob("*.usearch")] != [f"{stem}.0123456789abcdef.usearch"]
    assert len(list(folder.glob("*.usearch"))) == 1
    second.close()


def test_deleting_the_collection_removes_the_graph_files(index, tmp_path):
    index.upsert(MODEL, records(vectors(400, 14)))
    assert list((tmp_path / "index" / "vectors").glob("*.usearch"))
    index.delete(MODEL, "acme", "col")
    assert not list((tmp_path / "index" / "vectors").iterdir())
    assert index.knn_search(MODEL, "acme", ["col"], vectors(1, 1)[0].tolist(), 5) == []


def _write_forever(root: str, ready) -> None:
    ann.MIN_ROWS = THRESHOLD
    search_log.COMPACT_MAX_RECORDS = 7  # compactions, hence graph saves, all the time
    index = LocalSearchIndex(root)
    index.upsert(MODEL, records(vectors(THRESHOLD, 20)))
    ready.set()
    i = 0
    while True:  # killed from outside, at any point of a write, a compaction or a graph save
        batch = vectors(40, 100 + i)
        index.upsert(MODEL, records(batch, prefix=f"b{i}-", documents=1))
        index.delete(MODEL, "acme", "col", chunk_ids=[f"b{i}-{j}" for j in range(0, 40, 2)])
        i += 1


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.5, 1.3, 2.1])
def test_a_writer_killed_mid_write_leaves_a_consistent_partition_and_graph(tmp_path, delay):
    root = tmp_path / "index"
    kill_writer_after(_write_forever, root, delay, ready_timeout=120)
    # When reopened
    index = LocalSearchIndex(root)
    partition = index._partition(MODEL, "acme", "col")
    # Then each batch is whole (its upsert, or its upsert and its delete), the graph covers exactly the rows,
    # and every stored vector is found first by its own query, deleted ones never
    batches: dict[str, set[int]] = {}
    for chunk_id in partition.chunk_ids:
        if chunk_id.startswith("b"):
            batch, j = chunk_id[1:].split("-")
            batches.setdefault(batch, set()).add(int(j))
    for batch, members in batches.items():
        assert members in (set(range(40)), set(range(1, 40, 2))), (batch, sorted(members))
    assert partition.graph is not None and len(partition.graph) == len(partition)
    live = set(partition.chunk_ids)
    firsts = []
    for row in range(0, len(partition), 5):
        found = hits(index, partition.vectors[row], 3)
        assert set(found) <= live
        firsts.append(found[0] == partition.chunk_ids[row])
    # The graph is approximate: one run in the full suite missed one row of ~140 here (not reproduced since;
    # open question whether usearch's tombstones after a restore cause it), so recall is asserted, not perfection
    assert np.mean(firsts) >= 0.97, np.mean(firsts)
    # And it takes writes again
    index.upsert(MODEL, records(vectors(5, 999), prefix="after"))
    assert hits(index, vectors(5, 999)[2], 1) == ["after2"]
    index.close()


@pytest.mark.slow
@pytest.mark.parametrize("first, second", [("usearch.index", "onnxruntime"), ("onnxruntime", "usearch.index")])
def test_the_graph_library_and_the_embedding_runtime_load_into_one_process_in_either_order(first, second):
    # usearch 2.26.2-2.26.6 made a process that imported onnxruntime after it crash with SIGSEGV: the local server
    # loads both (the index at start, the MiniLM model at the first embedding)
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", f"import {first}; import {second}"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
