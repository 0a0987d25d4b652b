"""Measure the embedded index's filtered vector search (issue 23): the document table's mask, then exact search over
the matching rows against the graph's over-fetched candidates, to find the crossover.

    python -m bench.filters_embedded [--rows 200000] [--dims 384]

Random unit vectors (uniform on the sphere, not the bge model's: an HNSW graph's recall is at its worst on them,
so the graph's numbers are a lower bound; the exact paths' timings do not depend on the vectors). Ten chunks per
document; each document has `bucket` (0..999) and a group `g<bucket>`, so `bucket < 100 / 10 / 1` keeps 10 %, 1 %,
0.1 % of the rows. The partition is kindex's own (`Partition`, float16 rows and the usearch graph once it has one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from kindex.adapters.local.search import ann
from kindex.adapters.local.search.filters import DocumentTable
from kindex.adapters.local.search.partition import Partition
from kindex.domain.filters import Access, parse_filter

K = 10
QUERIES = 30


def timed(function, repeat: int = QUERIES) -> tuple[float, list]:
    results, times = [], []
    for i in range(repeat):
        started = time.perf_counter()
        results.append(function(i))
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), results


def top_rows(scores: np.ndarray, rows: np.ndarray | None) -> set[int]:
    count = min(K, len(scores))
    best = np.argpartition(scores, len(scores) - count)[len(scores) - count :]
    return {int(rows[i]) if rows is not None else int(i) for i in best}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dims", type=int, default=384)
    args = parser.parse_args()
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((args.rows, args.dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((QUERIES, args.dims)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    documents = args.rows // 10
    partition = Partition(args.dims)
    fields = [(f"c{i}", f"d{rng.integers(documents)}", "", "") for i in range(args.rows)]
    partition.put(fields, vectors)
    started = time.perf_counter()
    built = partition.fit_graph()
    print(
        json.dumps(
            {
                "rows": args.rows,
                "documents": len(partition.documents.values),
                "graph": built,
                "graph_build_s": round(time.perf_counter() - started, 1),
            }
        ),
        flush=True,
    )
    table = DocumentTable()
    started = time.perf_counter()
    for code, document in enumerate(partition.documents.values):
        bucket = int(document[1:]) % 1000
        table.put(
            code,
            {"bucket": bucket, "grp": f"g{bucket}", "region": ["eu", "us"][bucket % 2]},
            Access(groups=(f"g{bucket}",)) if bucket % 2 else None,
        )
    print(json.dumps({"table_build_ms_per_document": round((time.perf_counter() - started) * 1000 / documents, 4)}))
    codes = partition.document_codes[: partition.size]
    unfiltered_ms, _ = timed(lambda i: top_rows(partition.scores(None, queries[i]), None))
    print(json.dumps({"unfiltered_exact_ms": round(unfiltered_ms, 2)}), flush=True)
    for below in (500, 200, 100, 50, 10, 1):
        expression = parse_filter({"bucket": {"$lt": below}})
        mask_ms, masks = timed(lambda i, e=expression: table.mask(e, None, [], required=False)[codes], repeat=10)
        keep = masks[0]
        rows = np.flatnonzero(keep)
        exact_ms, truths = timed(lambda i, r=rows: top_rows(partition.scores(r, queries[i]), r))

        def full_scan(i, k=keep):
            scores = partition.scores(None, queries[i])
            scores[~k] = -np.inf
            return top_rows(scores, None)

        full_ms, _ = timed(full_scan)
        row = {
            "selectivity": f"{len(rows) / partition.size:.3%}",
            "matching_rows": len(rows),
            "mask_ms": round(mask_ms, 2),
            "exact_gather_ms": round(exact_ms, 2),
            "exact_full_scan_ms": round(full_ms, 2),
        }
        if partition.graph is not None:
            for wanted in (ann.CANDIDATES * 4, 4_096, 16_384):

                def overfetch(i, w=wanted, k=keep):
                    candidates = partition.graph.candidates(queries[i], min(w, partition.size))
                    candidates = candidates[(candidates >= 0) & (candidates < partition.size)]
                    candidates = np.unique(candidates[k[candidates]])
                    if not len(candidates):
                        return set()
                    return top_rows(partition.scores(candidates, queries[i]), candidates)

                ms, found = timed(overfetch)
                recall = statistics.mean(len(f & t) / len(t) for f, t in zip(found, truths))
                row[f"graph_{wanted}_ms"] = round(ms, 2)
                row[f"graph_{wanted}_recall"] = round(recall, 3)
        print(json.dumps(row), flush=True)
    groups = [f"g{b}" for b in range(1, 1000, 2)][:500]
    access_ms, _ = timed(lambda i: table.mask(None, "someone", groups, required=True)[codes], repeat=10)
    print(json.dumps({"access_mask_500_groups_ms": round(access_ms, 2)}), flush=True)


if __name__ == "__main__":
    main()
