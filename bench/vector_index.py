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
    records = [IndexRecord(tenant=TENANT, collection=COLLECTION, document_id=f"d{i}", chunk_id=f"{i}", vector=v,
                           text="") for i, v in enumerate(vectors)]
    for start in range(0, len(records), 25_000):
        index.upsert(model, records[start:start + 25_000])
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
    return float(np.mean([len(set(f[:K]) & set(int(t) for t in truth_row[:K])) / K
                          for f, truth_row in zip(found, truth)]))


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
    notes = (f"OpenSearch k-NN test data, {len(vectors)} x {vectors.shape[1]}, {len(queries)} queries; the local "
             "index ranks by cosine, the shipped ground truth by L2 (these vectors are far from unit length)")
    log(f"vector index knn-testdata: recall@10 vs exact cosine {recall_cos:.3f}, vs shipped L2 {recall_l2:.3f}")
    return [
        Figure("vector_recall10_knn_testdata", recall_cos, "recall", "exact cosine (brute force, float64)", 1.0,
               section="vector index", notes=notes),
        Figure("vector_recall10_knn_testdata_l2_truth", recall_l2, "recall", "shipped exact-L2 ground truth", 1.0,
               section="vector index", notes=notes),
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
    notes = (f"{count} random standard-normal {dims}-d vectors in one partition, {queries} queries, k={K}; "
             f"index built in {build_seconds:.1f} s; reference: bare numpy matmul + argpartition on the same matrix")
    log(f"vector index 100k: recall@10 {recall:.3f}, p50 {median(latencies):.2f} ms (bare numpy {median(bare):.2f} ms)")
    return [
        Figure("vector_recall10_100k", recall, "recall", "exact cosine (brute force, float64)", 1.0,
               section="vector index", notes=notes),
        Figure("vector_p50_ms_100k", median(latencies), "ms", "bare numpy exact search", median(bare),
               section="vector index", notes=notes),
        Figure("vector_p99_ms_100k", percentile(latencies, 99), "ms", "bare numpy exact search",
               percentile(bare, 99), section="vector index", notes=notes),
    ]


def run() -> list[Figure]:
    return knn_testdata() + random_100k()
