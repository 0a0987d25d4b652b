"""The vector index alone (LocalSearchIndex.knn_search, in process): latency and recall@10 against exact search.

- knn-plugin-testdata (OpenSearch k-NN's test vectors, 1000 x 128, 100 queries, read in place): recall@10
  against the shipped exact-L2 ground truth, and against exact cosine (the index's metric) by brute force.
- 100k random 384-dimension vectors (standard normal, seeded), 200 random queries: recall@10 against exact
  cosine computed in float64. The latency reference is the bare numpy search (one matrix-vector product and
  argpartition on the same float32 matrix): the ratio is the adapter's own overhead.
"""

from __future__ import annotations

import csv
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import KNN_TESTDATA, Figure, log, median, percentile

TENANT = "t"
COLLECTION = "c"
K = 10


def _index(root: Path, model: str, vectors: np.ndarray):
    from kindex.adapters.local.search.index import LocalSearchIndex
    from kindex.domain.types import IndexRecord

    index = LocalSearchIndex(root)
    records = [
        IndexRecord(tenant=TENANT, collection=COLLECTION, document_id=f"d{i}", chunk_id=f"{i}", vector=v, text="")
        for i, v in enumerate(vectors)
    ]
    for start in range(0, len(records), 25_000):
        index.upsert(model, records[start : start + 25_000])
    return index


def _exact_cosine_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    base = vectors.astype(np.float64)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    q = queries.astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    scores = q @ base.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def _search_all(index, model: str, queries: np.ndarray, k: int) -> tuple[list[list[int]], list[float]]:
    found, latencies = [], []
    for query in queries:
        started = time.perf_counter()
        hits = index.knn_search(model, TENANT, [COLLECTION], query, k)
        latencies.append((time.perf_counter() - started) * 1000)
        found.append([int(hit.chunk_id) for hit in hits])
    return found, latencies


def _recall(found: list[list[int]], truth) -> float:
    return float(
        np.mean([len(set(f[:K]) & set(int(t) for t in truth_row[:K])) / K for f, truth_row in zip(found, truth)])
    )


def knn_testdata() -> list[Figure]:
    lines = (KNN_TESTDATA / "test_vectors_1000x128.json").read_text().splitlines()
    data = [json.loads(line) for line in lines if line.strip()]  # one JSON object per line
    ids = [item["id"] for item in data]
    vectors = np.asarray([item["vector"] for item in data], dtype=np.float32)
    with open(KNN_TESTDATA / "test_queries_100x128.csv") as handle:
        queries = np.asarray([[float(x) for x in row] for row in csv.reader(handle) if row], dtype=np.float32)
    position = {doc_id: row for row, doc_id in enumerate(ids)}
    with open(KNN_TESTDATA / "test_ground_truth_l2_100.csv") as handle:
        truth_l2 = [[position[int(x)] for x in row[:K]] for row in csv.reader(handle) if row]
    with tempfile.TemporaryDirectory() as tmp:
        index = _index(Path(tmp), "bench:128", vectors)
        found, latencies = _search_all(index, "bench:128", queries, K)
        index.close()
    recall_l2 = _recall(found, truth_l2)
    recall_cos = _recall(found, _exact_cosine_top(vectors, queries, K))
    notes = (
        f"OpenSearch k-NN test data, {len(vectors)} x {vectors.shape[1]}, {len(queries)} queries; the local "
        "index ranks by cosine, the shipped ground truth by L2 (these vectors are far from unit length)"
    )
    log(f"vector index knn-testdata: recall@10 vs exact cosine {recall_cos:.3f}, vs shipped L2 {recall_l2:.3f}")
    return [
        Figure(
            "vector_recall10_knn_testdata",
            recall_cos,
            "recall",
            "exact cosine (brute force, float64)",
            1.0,
            section="vector index",
            notes=notes,
        ),
        Figure(
            "vector_recall10_knn_testdata_l2_truth",
            recall_l2,
            "recall",
            "shipped exact-L2 ground truth",
            1.0,
            section="vector index",
            notes=notes,
        ),
        Figure("vector_p50_ms_knn_testdata", median(latencies), "ms", section="vector index", notes=notes),
    ]


def random_100k(count: int = 100_000, dims: int = 384, queries: int = 200) -> list[Figure]:
    rng = np.random.default_rng(384)
    vectors = rng.standard_normal((count, dims), dtype=np.float32)
    query_vectors = rng.standard_normal((queries, dims), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        index = _index(Path(tmp), "bench:384", vectors)
        build_seconds = time.perf_counter() - started
        _search_all(index, "bench:384", query_vectors[:10], K)  # loads the partition
        found, latencies = _search_all(index, "bench:384", query_vectors, K)
        index.close()
    truth = _exact_cosine_top(vectors, query_vectors, K)
    recall = _recall(found, truth)
    # The reference: the bare exact search the adapter wraps, on the same normalised float32 matrix.
    normalised = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    bare = []
    for query in query_vectors:
        started = time.perf_counter()
        q = query / np.linalg.norm(query)
        scores = normalised @ q
        top = np.argpartition(-scores, K - 1)[:K]
        top[np.argsort(-scores[top])]
        bare.append((time.perf_counter() - started) * 1000)
    notes = (
        f"{count} random standard-normal {dims}-d vectors in one partition, {queries} queries, k={K}; "
        f"index built in {build_seconds:.1f} s; reference: bare numpy matmul + argpartition on the same matrix"
    )
    log(f"vector index 100k: recall@10 {recall:.3f}, p50 {median(latencies):.2f} ms (bare numpy {median(bare):.2f} ms)")
    return [
        Figure(
            "vector_recall10_100k",
            recall,
            "recall",
            "exact cosine (brute force, float64)",
            1.0,
            section="vector index",
            notes=notes,
        ),
        Figure(
            "vector_p50_ms_100k",
            median(latencies),
            "ms",
            "bare numpy exact search",
            median(bare),
            section="vector index",
            notes=notes,
        ),
        Figure(
            "vector_p99_ms_100k",
            percentile(latencies, 99),
            "ms",
            "bare numpy exact search",
            percentile(bare, 99),
            section="vector index",
            notes=notes,
        ),
    ]


def run() -> list[Figure]:
    return knn_testdata() + random_100k()


# -- one million vectors: the approximate (HNSW) path ---------------------------------------------------------------

LATENT_DIMS = 32


def clustered_vectors(count: int, dims: int, seed: int, clusters: int = 1_000) -> np.ndarray:
    """Unit vectors in `clusters` clusters, each spread along a shared 32-dimension subspace plus a little isotropic
    noise: like text embeddings, a low intrinsic dimension (random 384-d vectors have none, which no ANN index
    meets and no text has). Deterministic for a seed; written in blocks, so peak memory is the result."""
    rng = np.random.default_rng(seed)
    layout = np.random.default_rng(1_000_000)  # the same clusters and subspace for the base and the queries
    centers = layout.standard_normal((clusters, dims), dtype=np.float32)
    basis = layout.standard_normal((LATENT_DIMS, dims), dtype=np.float32) * 0.5
    out = np.empty((count, dims), dtype=np.float32)
    for start in range(0, count, 50_000):
        n = min(50_000, count - start)
        block = centers[rng.integers(clusters, size=n)]
        block += rng.standard_normal((n, LATENT_DIMS), dtype=np.float32) @ basis
        block += 0.1 * rng.standard_normal((n, dims), dtype=np.float32)
        out[start : start + n] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def _exact_top_float32(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Exact cosine top k of unit `vectors` for unit `queries`, in blocks (the matrix is too big for float64)."""
    best = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 20):
        for i, row in enumerate(queries[start : start + 20] @ vectors.T, start):
            top = np.argpartition(-row, k)[:k]
            best[i] = top[np.argsort(-row[top], kind="stable")]
    return best


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _measure_in_fresh_process(root: str, queries_path: str, result_path: str) -> None:
    """Run in a new interpreter: open the index as a restarted server would, then time and collect searches."""
    from kindex.adapters.local.search.index import LocalSearchIndex

    queries = np.load(queries_path)
    baseline = _rss_mib()
    started = time.perf_counter()
    index = LocalSearchIndex(root)
    index.knn_search("bench:384", TENANT, [COLLECTION], queries[0], K)  # loads the partition and its graph
    load_seconds = time.perf_counter() - started
    for query in queries[:20]:
        index.knn_search("bench:384", TENANT, [COLLECTION], query, K)
    found, latencies = _search_all(index, "bench:384", queries, K)
    rss = _rss_mib()
    index.close()
    Path(result_path).write_text(
        json.dumps(
            {
                "found": found,
                "latencies": latencies,
                "rss_mib": rss,
                "baseline_rss_mib": baseline,
                "load_seconds": load_seconds,
            }
        )
    )


def million(count: int = 1_000_000, dims: int = 384, queries: int = 200) -> list[Figure]:
    import subprocess
    import sys

    from bench.common import REPO

    vectors = clustered_vectors(count, dims, seed=384)
    query_vectors = clustered_vectors(queries, dims, seed=385)
    with tempfile.TemporaryDirectory(prefix="kindex-bench-1m-") as tmp:
        started = time.perf_counter()
        _index(Path(tmp) / "index", "bench:384", vectors).close()
        build_seconds = time.perf_counter() - started
        log(f"vector index {count}: written and indexed in {build_seconds:.0f} s")
        truth = _exact_top_float32(vectors, query_vectors, K)
        bare = []
        for query in query_vectors[:20]:
            started = time.perf_counter()
            scores = vectors @ query
            top = np.argpartition(-scores, K - 1)[:K]
            top[np.argsort(-scores[top])]
            bare.append((time.perf_counter() - started) * 1000)
        del vectors
        np.save(Path(tmp) / "queries.npy", query_vectors)
        script = (
            "import sys; from bench.vector_index import _measure_in_fresh_process as m; "
            "m(sys.argv[1], sys.argv[2], sys.argv[3])"
        )
        subprocess.run(
            [
                sys.executable,
                "-c",
                script,
                str(Path(tmp) / "index"),
                str(Path(tmp) / "queries.npy"),
                str(Path(tmp) / "result.json"),
            ],
            cwd=REPO,
            check=True,
        )
        measured = json.loads((Path(tmp) / "result.json").read_text())
        files = {path.suffix: path.stat().st_size for path in (Path(tmp) / "index" / "vectors").iterdir()}
    recall = _recall(measured["found"], truth)
    latencies = measured["latencies"]
    from kindex.adapters.local.search import ann

    notes = (
        f"{count} clustered {dims}-d unit vectors (1,000 clusters spread along a shared {LATENT_DIMS}-d "
        f"subspace plus isotropic noise, seeded) in one partition, {queries} queries from the same distribution, "
        f"k={K}; written with upsert in batches of 25,000 (log, snapshots and the HNSW graph: usearch int8, "
        f"M={ann.CONNECTIVITY}, efConstruction={ann.EXPANSION_ADD}, efSearch={ann.EXPANSION_SEARCH}, "
        f"{ann.CANDIDATES} candidates re-scored from the partition's float16 rows); searched in a fresh "
        f"process that opened the folder (load {measured['load_seconds']:.1f} s); files (MiB) "
        f"{json.dumps({name: round(size / 2**20) for name, size in files.items()})}"
    )
    log(
        f"vector index {count}: recall@10 {recall:.4f}, p50 {median(latencies):.2f} ms, RSS {measured['rss_mib']:.0f} "
        f"MiB (baseline {measured['baseline_rss_mib']:.0f}), exact numpy p50 {median(bare):.1f} ms"
    )
    suffix = "1m" if count == 1_000_000 else f"{count // 1000}k"
    return [
        Figure(
            f"vector_recall10_{suffix}",
            recall,
            "recall",
            "exact cosine (brute force, float32)",
            1.0,
            section="vector index",
            notes=notes,
        ),
        Figure(
            f"vector_p50_ms_{suffix}",
            median(latencies),
            "ms",
            "bare numpy exact search",
            median(bare),
            section="vector index",
            notes=notes,
        ),
        Figure(f"vector_p99_ms_{suffix}", percentile(latencies, 99), "ms", section="vector index", notes=notes),
        Figure(
            f"index_rss_mib_{suffix}",
            measured["rss_mib"] - measured["baseline_rss_mib"],
            "MiB",
            "float32 vectors alone",
            count * dims * 4 / 2**20,
            section="vector index",
            notes=notes,
            details={
                "process_rss_mib": round(measured["rss_mib"], 1),
                "rss_before_opening_mib": round(measured["baseline_rss_mib"], 1),
            },
        ),
        Figure(f"index_build_s_{suffix}", build_seconds, "s", section="vector index", notes=notes),
        Figure(f"index_load_s_{suffix}", measured["load_seconds"], "s", section="vector index", notes=notes),
    ]
