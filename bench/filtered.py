"""Filtered search in the embedded index (issue 23, the embedded half of item 10): a user who may see 100 %, 10 %,
1 % or 0.1 % of a collection's chunks, once through access lists and once through an attribute filter, beside the
unfiltered query in the same run.

    python -m bench.filtered [--chunks 100000] [--queries 100] [--random]

- 100k chunks, ten a document (10,000 documents). Document d has `bucket` = d % 1000 and the access list
  `groups: ["g<bucket>", "all"]`, so the groups `all`, `g0..g99`, `g0..g9`, `g0` see 100 / 10 / 1 / 0.1 %, and
  `bucket < 1000 / 100 / 10 / 1` keeps the same shares. The chunks are indexed twice, in a collection without
  access lists (the unfiltered reference and the attribute filters: a query that names nobody sees only documents
  without a list) and in one with them (the access-list rows).
- Vectors: `bench.model_vectors` (cached on disk): chunks of 8 real sentences, each vector the normalised sum of
  its sentences' vectors from the default local model, queries embedded by the same model.
  `--random`: random unit vectors instead (no model run; a smoke test).
- In process, through `LocalSearchIndex` (the adapter the local server uses): `knn_search` and `keyword_search`
  with k = 10, one client: the index alone, without the query service, embedding or HTTP. `make bench`'s
  `filtered` section measures the same data over HTTP instead (bench/filtered_http.py); run this by hand.
Each row: results returned, p50 and p99 of the wall time per call. Every query must return k results whenever k
exist: `short` counts the queries that returned fewer than the same search with k = 200 (untimed) finds, capped at
k - a keyword query whose words occur in fewer than k visible chunks has fewer than k answers (at 0.1 % often).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import model_vectors
from bench.common import Figure, SyntheticCorpus, log, median, percentile
from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.domain.filters import Access, parse_filter
from kindex.domain.types import IndexRecord, Principals, SearchFilters
from kindex.settings import LOCAL_DEFAULT_MODEL

TENANT = "bench"
# The same chunks twice: without access lists (the unfiltered query and the attribute filters, which a query that
# names nobody may see) and with them (the access-list rows, whose principals see their share). A query with no
# principals sees only documents without an access list, so the unfiltered reference needs documents without one.
OPEN, LISTED = "filtered-open", "filtered-listed"
K = 10
CHUNKS_PER_DOCUMENT = 10
BUCKETS = 1_000
SHARES = {"100": BUCKETS, "10": 100, "1": 10, "0.1": 1}  # percent -> buckets visible


def _corpus(
    chunks: int, queries: int, random: bool, dims: int = 384
) -> tuple[np.ndarray, list[str], np.ndarray, list[str], str]:
    """(chunk vectors, chunk texts, query vectors, query texts, model name)."""
    if random:
        corpus = SyntheticCorpus(seed=6)
        rng = np.random.default_rng(6)
        texts = [" ".join(corpus.sentences[i] for i in plan) for plan in model_vectors.chunk_plans(chunks)]
        query_texts = model_vectors.query_texts(queries)
        vectors = rng.standard_normal((chunks, dims)).astype(np.float32)
        asked = rng.standard_normal((queries, dims)).astype(np.float32)
        model = f"bench:random{dims}"
    else:
        # The shared, cached builder (bench.model_vectors): the same chunks the other index sections search.
        texts, query_texts = model_vectors.chunk_texts(chunks), model_vectors.query_texts(queries)
        vectors, asked = model_vectors.chunks(chunks), model_vectors.queries(queries)
        model = LOCAL_DEFAULT_MODEL
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    asked /= np.linalg.norm(asked, axis=1, keepdims=True)
    return vectors, texts, asked, query_texts, model


def _configurations() -> dict[str, tuple[str, SearchFilters | None]]:
    """name -> (collection, filters)."""
    found: dict[str, tuple[str, SearchFilters | None]] = {"unfiltered": (OPEN, None)}
    for share, buckets in SHARES.items():
        groups = ("all",) if buckets == BUCKETS else tuple(f"g{b}" for b in range(buckets))
        found[f"access_{share}"] = (LISTED, SearchFilters(principals=Principals(user="bench-user", groups=groups)))
        found[f"attribute_{share}"] = (OPEN, SearchFilters(attributes=parse_filter({"bucket": {"$lt": buckets}})))
    return found


def records(vectors: np.ndarray, texts: list[str], collection: str, start: int, stop: int) -> list[IndexRecord]:
    """Chunks `start..stop` of `collection`: document d = chunk // 10 has `bucket` d % 1000 and, in LISTED, the
    access list `g<bucket>, all`."""
    found = []
    for i in range(start, stop):
        document = i // CHUNKS_PER_DOCUMENT
        bucket = document % BUCKETS
        found.append(
            IndexRecord(
                tenant=TENANT,
                collection=collection,
                document_id=f"doc-{document:06d}",
                chunk_id=f"chunk-{i:07d}",
                vector=vectors[i],
                text=texts[i],
                attributes={"bucket": bucket},
                access=Access(groups=(f"g{bucket}", "all")) if collection == LISTED else None,
            )
        )
    return found


def run(chunks: int = 100_000, queries: int = 100, random: bool = False) -> tuple[list[Figure], dict]:
    started = time.perf_counter()
    vectors, texts, asked, query_texts, model = _corpus(chunks, queries, random)
    log(
        f"filtered: corpus of {chunks} chunks ready in {time.perf_counter() - started:.0f} s "
        f"({'random unit vectors' if random else LOCAL_DEFAULT_MODEL + ' sentence-sum vectors'})"
    )
    figures: list[Figure] = []
    raw: dict = {"chunks": chunks, "queries": queries, "vectors": "random" if random else LOCAL_DEFAULT_MODEL}
    with tempfile.TemporaryDirectory(prefix="kindex-bench-filtered-") as tmp:
        index = LocalSearchIndex(Path(tmp) / "index")
        try:
            for collection in (OPEN, LISTED):
                for start in range(0, chunks, 20_000):
                    index.upsert(model, records(vectors, texts, collection, start, min(chunks, start + 20_000)))
            load = [round(x, 2) for x in os.getloadavg()]
            configurations = _configurations()
            cases = [(name, mode) for name in configurations for mode in ("vector", "keyword")]
            samples: dict = {case: [] for case in cases}
            counts: dict = {case: [] for case in cases}
            short = dict.fromkeys(cases, 0)

            def search(case: tuple[str, str], query: int, k: int) -> list:
                (collection, filters), mode = configurations[case[0]], case[1]
                if mode == "vector":
                    return index.knn_search(model, TENANT, [collection], asked[query], k, filters)
                return index.keyword_search(model, TENANT, [collection], query_texts[query], k, filters)

            # Every configuration answers each query in turn (three warm-up queries first), so a change in the
            # machine's load while the run goes on falls on all of them alike: the ratios compare like with like.
            for q in range(-3, queries):
                query = q % queries
                for case in cases:
                    begun = time.perf_counter()
                    hits = search(case, query, K)
                    if q >= 0:
                        samples[case].append((time.perf_counter() - begun) * 1000)
                        counts[case].append(len(hits))
                        short[case] += len(hits) < min(K, len(search(case, query, 200)))
            for name, mode in cases:
                case = (name, mode)
                row = {
                    "p50_ms": round(median(samples[case]), 2),
                    "p99_ms": round(percentile(samples[case], 99), 2),
                    "min_results": min(counts[case]),
                    "mean_results": round(sum(counts[case]) / len(counts[case]), 2),
                    "short": short[case],
                }
                raw[f"{mode}/{name}"] = row
                log(f"filtered {mode} {name}: {row}")
            # The goal (issue 23 item 10): filtered p50 <= 1.5x the unfiltered p50 of the same mode, same run.
            raw["p50_ratios"] = {
                f"{mode}/{name}": round(raw[f"{mode}/{name}"]["p50_ms"] / raw[f"{mode}/unfiltered"]["p50_ms"], 2)
                for mode in ("vector", "keyword")
                for name in _configurations()
                if name != "unfiltered"
            }
            log(f"filtered p50 ratios: {raw['p50_ratios']}")
            raw["load_average_during"] = [load, [round(x, 2) for x in os.getloadavg()]]
        finally:
            index.close()
    how = (
        f"{chunks} chunks a partition ({raw['vectors']} vectors; with and without access lists), in process "
        f"through LocalSearchIndex, k={K}, {queries} queries, one client; "
        "selectivity via access lists (groups) or `bucket < n`"
    )
    for mode in ("vector", "keyword"):
        reference = raw[f"{mode}/unfiltered"]
        for name in _configurations():
            row = raw[f"{mode}/{name}"]
            suffix = f"{mode}_{name.replace('.', '')}"
            figures.append(
                Figure(
                    f"filtered_p50_ms_{suffix}",
                    row["p50_ms"],
                    "ms",
                    section="filtered search",
                    reference_name=f"filtered_p50_ms_{mode}_unfiltered",
                    reference_value=reference["p50_ms"],
                    notes=how,
                    details={
                        "p99_ms": row["p99_ms"],
                        "min_results": row["min_results"],
                        "mean_results": row["mean_results"],
                        "short": row["short"],
                    },
                )
                .invalid_unless(
                    row["short"] == 0, f"{row['short']} queries returned fewer than k results although more existed"
                )
                # Every share keeps >= 100 chunks: a vector query always has k answers (an empty reference would
                # make every ratio meaningless, as an unfiltered query over access-listed chunks once did).
                .invalid_unless(mode == "keyword" or row["min_results"] == K, f"a vector query returned fewer than {K}")
            )
    return figures, raw


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--random", action="store_true", help="random unit vectors instead of the model's")
    args = parser.parse_args()
    _, raw = run(args.chunks, args.queries, args.random)
    print(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
