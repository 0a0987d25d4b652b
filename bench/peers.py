"""kindex's embedded index beside an embedded vector store a user would pick instead (issue 27 item 5): LanceDB, in
process, on the same vectors and queries in the same run.

    python -m bench.peers [--count 100000] [--queries 200]

- Vectors: the default local model's, as the latency section writes them (bench/model_vectors.py: each chunk 8 real
  sentences, its vector the normalised sum of theirs); queries of real words embedded by the same model.
- Every chunk i carries `bucket = i % 100`; the filtered query keeps `bucket == 0` (1 % of the chunks) - in kindex an
  attribute filter (`{"bucket": {"$eq": 0}}`), in LanceDB a prefilter (`where("bucket = 0", prefilter=True)`).
- Engines: kindex's `LocalSearchIndex` as shipped (a 100k partition searches exactly: the HNSW graph starts at 150k
  rows); LanceDB without a vector index (flat: exact), and LanceDB with its default vector index (IVF_PQ, cosine,
  its default partitions and sub-vectors, plus a BTREE index on `bucket`) as its docs suggest for a table this size.
- Each engine runs in a fresh process of its own (spawned), one after the other: insert rate (rows written in
  batches of 5,000, plus the vector index build where there is one), query p50/p99 (one client, k = 10, after
  warm-up), recall@10 against exact cosine (float64) unfiltered and with the 1 % filter, and memory: the process's
  resident set once the engine holds the data and the input arrays are freed, less the same process's before the
  engine was opened (both with the engine's library imported). The engines write to a temporary directory each.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import Figure, log, median, percentile

K = 10
BATCH = 5_000
BUCKETS = 100  # bucket == 0 keeps 1 %
SECTION = "peers"
ENGINES = ("kindex", "lancedb_flat", "lancedb_ivf_pq")
LOCAL_MODEL = "bench:peers384"
TENANT, COLLECTION = "bench", "peers"


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _kindex(root: Path, vectors: np.ndarray, buckets: np.ndarray):
    """(insert seconds, search(query, filtered) -> ids, index build seconds, engine to keep alive)."""
    from kindex.adapters.local.search.index import LocalSearchIndex
    from kindex.domain.filters import parse_filter
    from kindex.domain.types import IndexRecord, SearchFilters

    index = LocalSearchIndex(root)
    started = time.perf_counter()
    for start in range(0, len(vectors), BATCH):
        index.upsert(
            LOCAL_MODEL,
            [
                IndexRecord(
                    tenant=TENANT,
                    collection=COLLECTION,
                    document_id=f"d{i}",
                    chunk_id=str(i),
                    vector=vectors[i],
                    text="",
                    attributes={"bucket": int(buckets[i])},
                )
                for i in range(start, min(start + BATCH, len(vectors)))
            ],
        )
    inserted = time.perf_counter() - started
    only = SearchFilters(attributes=parse_filter({"bucket": {"$eq": 0}}))

    def search(query: np.ndarray, filtered: bool) -> list[int]:
        hits = index.knn_search(LOCAL_MODEL, TENANT, [COLLECTION], query, K, only if filtered else None)
        return [int(hit.chunk_id) for hit in hits]

    return inserted, search, 0.0, index


def _lancedb(root: Path, vectors: np.ndarray, buckets: np.ndarray, indexed: bool):
    import lancedb
    import pyarrow as pa

    db = lancedb.connect(str(root))
    dims = vectors.shape[1]
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("bucket", pa.int32()), pa.field("vector", pa.list_(pa.float32(), dims))]
    )
    table = db.create_table("chunks", schema=schema)
    started = time.perf_counter()
    for start in range(0, len(vectors), BATCH):
        stop = min(start + BATCH, len(vectors))
        table.add(
            pa.table(
                {
                    "id": pa.array(np.arange(start, stop, dtype=np.int64)),
                    "bucket": pa.array(buckets[start:stop].astype(np.int32)),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors[start:stop].reshape(-1)), dims),
                },
                schema=schema,
            )
        )
    inserted = time.perf_counter() - started
    built = 0.0
    if indexed:
        started = time.perf_counter()
        table.create_index(metric="cosine", vector_column_name="vector")
        table.create_scalar_index("bucket")
        built = time.perf_counter() - started

    def search(query: np.ndarray, filtered: bool) -> list[int]:
        builder = table.search(query).distance_type("cosine").limit(K).select(["id", "_distance"])
        if filtered:
            builder = builder.where("bucket = 0", prefilter=True)
        return [int(i) for i in builder.to_arrow()["id"].to_pylist()]

    return inserted, search, built, (db, table)


def measure(engine: str, vectors_path: str, queries_path: str, root: str) -> dict:
    """One engine in this (fresh) process: see the module docstring."""
    if engine == "kindex":
        import kindex.adapters.local.search.index  # noqa: F401  (imported before the baseline, like lancedb below)
    else:
        import lancedb  # noqa: F401
    gc.collect()
    baseline = _rss_mib()
    vectors = np.load(vectors_path)
    query_vectors = np.load(queries_path)
    buckets = np.arange(len(vectors)) % BUCKETS
    if engine == "kindex":
        inserted, search, built, keep = _kindex(Path(root), vectors, buckets)
    else:
        inserted, search, built, keep = _lancedb(Path(root), vectors, buckets, indexed=engine == "lancedb_ivf_pq")
    del vectors
    gc.collect()
    measured: dict = {"insert_seconds": inserted, "index_build_seconds": built}
    for filtered in (False, True):
        for query in query_vectors[:10]:
            search(query, filtered)  # warm-up
        found, latencies = [], []
        for query in query_vectors:
            started = time.perf_counter()
            found.append(search(query, filtered))
            latencies.append((time.perf_counter() - started) * 1000)
        label = "filtered" if filtered else "unfiltered"
        measured[label] = {"found": found, "ms": latencies}
    measured["memory_mib"] = _rss_mib() - baseline
    del keep
    return measured


def _truth(vectors: np.ndarray, queries: np.ndarray, rows: np.ndarray) -> list[list[int]]:
    base = vectors[rows].astype(np.float64)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    q = queries.astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    order = np.argsort(-(q @ base.T), axis=1, kind="stable")[:, :K]
    return [[int(rows[i]) for i in row] for row in order]


def _recall(found: list[list[int]], truth: list[list[int]]) -> float:
    return float(np.mean([len(set(f[:K]) & set(t)) / K for f, t in zip(found, truth)]))


def run(count: int = 100_000, queries: int = 200) -> tuple[list[Figure], dict]:
    from bench import model_vectors

    vectors = model_vectors.chunks(count)
    query_vectors = model_vectors.queries(queries)
    everything = np.arange(count)
    truth = {
        "unfiltered": _truth(vectors, query_vectors, everything),
        "filtered": _truth(vectors, query_vectors, everything[everything % BUCKETS == 0]),
    }
    results: dict[str, dict] = {}
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="kindex-bench-peers-") as tmp:
        vectors_path, queries_path = f"{tmp}/vectors.npy", f"{tmp}/queries.npy"
        np.save(vectors_path, vectors)
        np.save(queries_path, query_vectors)
        for engine in ENGINES:
            log(f"peers: {engine}, {count} vectors")
            with context.Pool(1) as pool:
                measured = pool.apply(measure, (engine, vectors_path, queries_path, f"{tmp}/{engine}"))
            row = {
                "insert_docs_per_s": count / (measured["insert_seconds"] + measured["index_build_seconds"]),
                "insert_seconds": round(measured["insert_seconds"], 2),
                "index_build_seconds": round(measured["index_build_seconds"], 2),
                "memory_mib": round(measured["memory_mib"], 1),
            }
            for label in ("unfiltered", "filtered"):
                ms = measured[label]["ms"]
                row[label] = {
                    "p50_ms": round(median(ms), 3),
                    "p99_ms": round(percentile(ms, 99), 3),
                    "recall10": round(_recall(measured[label]["found"], truth[label]), 4),
                    "min_results": min(len(f) for f in measured[label]["found"]),
                }
            results[engine] = row
            log(f"peers {engine}: {row}")
    return _figures(results, count, queries), results


def _figures(results: dict, count: int, queries: int) -> list[Figure]:
    from bench.model_vectors import MODEL

    notes = (
        f"{count} {MODEL} chunk vectors (bench/model_vectors.py), {queries} real-word queries, k={K}, one client, "
        f"each engine in a fresh process, one after the other; filtered: bucket == 0 (1 %); kindex: LocalSearchIndex "
        f"as shipped (exact below 150k rows); LanceDB 0.40 flat (no vector index) and with its default IVF_PQ index "
        f"(cosine) + a BTREE index on bucket; memory: resident set with the data loaded, input freed, less the "
        f"process before; insert: rows / (writes + index build)"
    )
    kindex = results["kindex"]
    figures = []
    for engine in ENGINES:
        row = results[engine]
        name = engine
        figures += [
            Figure(
                f"peers_insert_docs_per_s_{name}",
                row["insert_docs_per_s"],
                "docs/s",
                "kindex embedded index",
                kindex["insert_docs_per_s"],
                section=SECTION,
                notes=notes,
                details={"insert_seconds": row["insert_seconds"], "index_build_seconds": row["index_build_seconds"]},
            ),
            Figure(
                f"peers_memory_mib_{name}",
                row["memory_mib"],
                "MiB",
                "kindex embedded index",
                kindex["memory_mib"],
                section=SECTION,
                notes=notes,
            ),
        ]
        for label in ("unfiltered", "filtered"):
            measured, reference = row[label], kindex[label]
            suffix = f"{name}" if label == "unfiltered" else f"{name}_filter1pct"
            details = {"p99_ms": measured["p99_ms"], "min_results": measured["min_results"]}
            figures += [
                Figure(
                    f"peers_query_p50_ms_{suffix}",
                    measured["p50_ms"],
                    "ms",
                    "kindex embedded index",
                    reference["p50_ms"],
                    section=SECTION,
                    notes=notes,
                    details=details,
                ),
                Figure(
                    f"peers_query_p99_ms_{suffix}",
                    measured["p99_ms"],
                    "ms",
                    "kindex embedded index",
                    reference["p99_ms"],
                    section=SECTION,
                    notes=notes,
                ),
                Figure(
                    f"peers_recall10_{suffix}",
                    measured["recall10"],
                    "recall",
                    "kindex embedded index",
                    reference["recall10"],
                    section=SECTION,
                    notes=notes + "; truth: exact cosine (float64) over the rows the filter keeps",
                    details=details,
                ),
            ]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    _, results = run(args.count, args.queries)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
