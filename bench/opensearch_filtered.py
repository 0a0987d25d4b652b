"""Filtered search through the OpenSearch adapter on a real node (issue 23 item 10, the OpenSearch half).

    python -m bench.opensearch_filtered [--count 10000] [--queries 30] [--min-seconds 2]

`count` random 384-d vectors (the seed of bench/opensearch_index.py) written twice through `OpenSearchIndex` into
one lucene index (one shard, no replica, a backfill with one refresh): once for a tenant whose chunk i carries the
access list `groups: [g<i % 1000>]`, once for a tenant whose chunk i carries the attribute `bucket: i % 1000`. Both
legs (k-NN with its efficient filter, BM25 on a word every chunk holds) are asked for k = 10 at selectivity 100 %,
10 %, 1 % and 0.1 %: through the access lists a user in groups g0..g<n-1> (n = 1,000 / 100 / 10 / 1: the 100 %
row is a user in 1,000 groups), through the attribute filter `{"bucket": {"$lt": n}}` with no principals. Beside
them, the unfiltered query (the attribute tenant without a filter) in the same run: every configuration runs all
queries once a round, rounds alternate (`alternate`) until each has worked `min_seconds`. Reported: results
returned (the minimum over all queries: it must be k), p50 / p99 over the adapter (HTTP to the node included),
and the k-NN leg's recall@10 against the exact top 10 of the filtered set.

`--access-variants` instead measures other shapes of the keyword leg's access clause for the user in 1,000 groups
(`ACCESS_VARIANTS`, docs/decisions.md 2026-12-02 "A user in 1,000 groups on the node"), each body sent straight to
the node beside the unfiltered query in the same rounds: p50, the median of the per-round ratios, and the node's
`took`; `--force-merge` merges the index to one segment first (the per-segment cost of a 1,000-term set).

Skipped, with a log line, when no node answers at KINDEX_BENCH_OPENSEARCH_URL (default http://127.0.0.1:9200).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from bench import model_vectors
from bench.common import Figure, alternate, log, median, percentile
from kindex.adapters.aws.opensearch_filters import ACCESS_FIELDS, HAS_ACCESS

MODEL = "bench:filtered384"
COLLECTION = "c"
K = 10
BUCKETS = 1000
SELECTIVITIES = {"100": 1000, "10": 100, "1": 10, "0.1": 1}  # percent -> buckets kept
ACCESS_TENANT, ATTRIBUTE_TENANT = "acl", "attr"
SECTION = "opensearch"
BATCH = 5_000
# Chunks per tenant when `make bench`'s filtered section runs this (two tenants written, then every configuration
# alternated): what fits the section's ~6 minutes beside the HTTP half.
FILTERED_SECTION_COUNT = 10_000


def _records(vectors: np.ndarray, tenant: str) -> list:
    from kindex.domain.filters import Access
    from kindex.domain.types import IndexRecord

    def fields(i: int) -> dict:
        if tenant == ACCESS_TENANT:
            return {"access": Access(groups=(f"g{i % BUCKETS}",))}
        return {"attributes": {"bucket": i % BUCKETS}}

    return [
        IndexRecord(
            tenant=tenant,
            collection=COLLECTION,
            document_id=f"d{i}",
            chunk_id=str(i),
            vector=vector.tolist(),
            text=f"common words w{i % 50}",
            language="en",
            mimetype="text/plain",
            **fields(i),
        )
        for i, vector in enumerate(vectors)
    ]


def _write_tenants(index, vectors: np.ndarray) -> None:
    """Both tenants' chunks through the adapter, then one refresh."""
    started = time.perf_counter()
    for tenant in (ACCESS_TENANT, ATTRIBUTE_TENANT):
        records = _records(vectors, tenant)
        for start in range(0, len(records), BATCH):
            index.upsert(MODEL, records[start : start + BATCH])
    index.refresh(MODEL)
    log(f"opensearch filtered: written in {time.perf_counter() - started:.0f} s")


def _configurations() -> dict[str, tuple[str, object]]:
    """name -> (tenant, SearchFilters or None)."""
    from kindex.domain.filters import parse_filter
    from kindex.domain.types import Principals, SearchFilters

    found: dict[str, tuple[str, object]] = {"unfiltered": (ATTRIBUTE_TENANT, None)}
    for percent, kept in SELECTIVITIES.items():
        groups = tuple(f"g{b}" for b in range(kept))
        found[f"access_{percent}"] = (ACCESS_TENANT, SearchFilters(principals=Principals("bench-user", groups)))
        found[f"attribute_{percent}"] = (
            ATTRIBUTE_TENANT,
            SearchFilters(attributes=parse_filter({"bucket": {"$lt": kept}})),
        )
    return found


def _truth(vectors: np.ndarray, queries: np.ndarray, kept: int) -> np.ndarray:
    """The exact top K ids among chunks whose bucket is below `kept`, per query (cosine, float64)."""
    ids = np.flatnonzero(np.arange(len(vectors)) % BUCKETS < kept)
    subset = vectors[ids].astype(np.float64)
    subset /= np.linalg.norm(subset, axis=1, keepdims=True)
    normed = queries.astype(np.float64) / np.linalg.norm(queries, axis=1, keepdims=True)
    return ids[np.argsort(-(normed @ subset.T), axis=1)[:, :K]]


def run(
    count: int = 100_000,
    dims: int = 384,
    queries: int = 100,
    min_seconds: float = 10.0,
    *,
    model: bool = False,
    section: str = SECTION,
) -> list[Figure]:
    """`model`: the default local model's chunk and query vectors (bench.model_vectors) instead of random ones."""
    from bench.opensearch_index import node_url

    url = node_url()
    if url is None:
        log("opensearch filtered: no node answers (make opensearch); skipped")
        return []
    from kindex.adapters.aws.opensearch_index import OpenSearchIndex, opensearch_client

    if model:
        vectors, query_vectors = model_vectors.chunks(count), model_vectors.queries(queries)
    else:
        rng = np.random.default_rng(384)
        vectors = rng.standard_normal((count, dims), dtype=np.float32)
        query_vectors = rng.standard_normal((queries, dims), dtype=np.float32)
    client = opensearch_client(url, sigv4=False)
    prefix = f"kindex-bench-filtered-{os.getpid()}"
    index = OpenSearchIndex(
        client, index_prefix=prefix, engine="lucene", number_of_shards=1, number_of_replicas=0, refresh="false"
    )
    configurations = _configurations()
    log(
        f"opensearch filtered: {count} chunks written for each of two tenants, then {len(configurations)} "
        f"configurations x 2 legs x {queries} queries a round, >= {min_seconds:.0f} s each"
    )
    try:
        _write_tenants(index, vectors)

        def side(name: str, leg: str):
            tenant, filters = configurations[name]

            def one_round() -> dict:
                found, ms = [], []
                for query in query_vectors:
                    began = time.perf_counter()
                    if leg == "knn":
                        hits = index.knn_search(MODEL, tenant, [COLLECTION], query, K, filters)
                    else:
                        hits = index.keyword_search(MODEL, tenant, [COLLECTION], "common", K, filters)
                    ms.append((time.perf_counter() - began) * 1000)
                    found.append([int(hit.chunk_id) for hit in hits])
                return {"found": found, "ms": ms}

            return one_round

        for name in configurations:  # warm each filter's caches and the graph once
            side(name, "knn")()
        runs = alternate(
            {f"{leg}:{name}": side(name, leg) for name in configurations for leg in ("knn", "keyword")},
            min_seconds=min_seconds,
            min_rounds=2,
        )
    finally:
        client.indices.delete(index=f"{prefix}-*")
    described = f"{model_vectors.MODEL} sentence-sum" if model else "random 384-d"
    return _figures(runs, vectors, query_vectors, count, queries, described, section)


def _figures(
    runs: dict,
    vectors: np.ndarray,
    query_vectors: np.ndarray,
    count: int,
    queries: int,
    described: str = "random 384-d",
    section: str = SECTION,
) -> list[Figure]:
    def samples(key: str) -> list[float]:
        return [ms for found in runs[key] for ms in found["ms"]]

    def returned(key: str) -> list[int]:
        return [len(hits) for found in runs[key] for hits in found["found"]]

    notes = (
        f"{count} {described} chunks per tenant (one tenant with access lists groups=[g<i % 1000>], one with "
        f"the attribute bucket=i % 1000), OpenSearch 2.19 node on this machine, lucene HNSW, one shard, no "
        f"replica; {queries} queries a round through OpenSearchIndex, k={K}, configurations alternated "
        f"({len(runs['knn:unfiltered'])} rounds); access path: a user in groups g0..g<n-1>; attribute path: "
        f"bucket < n; the 100 % access row is a user in 1,000 groups"
    )
    figures: list[Figure] = []
    smallest = min(min(returned(key)) for key in runs if key.split(":")[1] != "unfiltered")
    figures.append(
        Figure(
            "opensearch_filtered_results_min",
            smallest,
            "results",
            "k",
            K,
            section=section,
            notes=notes + "; the fewest results any filtered query of either leg returned",
        )
    )
    lines = []
    for leg in ("knn", "keyword"):
        base = samples(f"{leg}:unfiltered")
        for path in ("access", "attribute"):
            for percent, kept in SELECTIVITIES.items():
                key = f"{leg}:{path}_{percent}"
                details = {
                    "results_min": min(returned(key)),
                    "results_mean": float(np.mean(returned(key))),
                    "p99_ms": percentile(samples(key), 99),
                    "unfiltered_p99_ms": percentile(base, 99),
                }
                if leg == "knn":
                    truth = _truth(vectors, query_vectors, kept)
                    last = runs[key][-1]["found"]
                    details["recall10"] = float(
                        np.mean([len(set(found) & set(row.tolist())) / K for found, row in zip(last, truth)])
                    )
                name = f"opensearch_filtered_{leg}_p50_ms_{path}_{percent.replace('.', '_')}pct"
                figures.append(
                    Figure(
                        name,
                        median(samples(key)),
                        "ms",
                        f"unfiltered {leg} p50",
                        median(base),
                        section=section,
                        notes=notes,
                        details=details,
                    )
                )
                lines.append(
                    f"{leg:7s} {path:9s} {percent:>4s} %: results min {details['results_min']}, "
                    f"p50 {median(samples(key)):.1f} ms (unfiltered {median(base):.1f}), p99 "
                    f"{details['p99_ms']:.1f} ms"
                    + (f", recall@10 {details['recall10']:.3f}" if "recall10" in details else "")
                )
    log("opensearch filtered:\n  " + "\n  ".join(lines))
    return figures


# -- the keyword leg's access clause for a user in 1,000 groups, in other shapes ---------------------------------


# The chunk fields the shipped clause reads (opensearch_filters.ACCESS_FIELDS, HAS_ACCESS), in that order.
_USERS, _GROUPS, _DENY_USERS, _DENY_GROUPS = ACCESS_FIELDS


def _grant(user: str, groups: list[str]) -> list[dict]:
    return [{"term": {_USERS: user}}, {"terms": {_GROUPS: groups}}]


def _deny(user: str, groups: list[str]) -> list[dict]:
    return [{"term": {_DENY_USERS: user}}, {"terms": {_DENY_GROUPS: groups}}]


_HAS_LIST = {"term": {HAS_ACCESS: True}}
_NO_LIST = {"bool": {"must_not": [_HAS_LIST]}}

# name -> the clause that replaces the access clause (None: no access clause at all). The first two admit exactly
# what `kindex.domain.filters.admits` does for a user with groups (listed and not denied, or no list; a granted or
# denied chunk always has a list; checked on the node, docs/decisions.md); the others are costs or lower bounds.
ACCESS_VARIANTS: dict[str, Any] = {
    "flat one bool": lambda user, groups: {
        "bool": {
            "should": [*_grant(user, groups), _NO_LIST],
            "minimum_should_match": 1,
            "must_not": _deny(user, groups),
        }
    },
    "must_not form": lambda user, groups: {
        "bool": {
            "must_not": [*_deny(user, groups), {"bool": {"filter": [_HAS_LIST], "must_not": _grant(user, groups)}}]
        }
    },
    "cost: one set each way (a principals field)": lambda user, groups: {
        "bool": {
            "should": [_grant(user, groups)[1], _NO_LIST],
            "minimum_should_match": 1,
            "must_not": [_deny(user, groups)[1]],
        }
    },
    "bound: the groups set alone": lambda user, groups: _grant(user, groups)[1],
    "bound: the deny clauses alone": lambda user, groups: {"bool": {"must_not": _deny(user, groups)}},
    "bound: no access clause": lambda user, groups: None,
}


def run_access_variants(
    count: int = 10_000, rounds_of: int = 10, min_seconds: float = 20.0, *, merge: bool = False
) -> None:
    """Write the two tenants as `run` does, then alternate the unfiltered keyword query, the shipped access clause
    for a user in 1,000 groups and every `ACCESS_VARIANTS` shape, `rounds_of` queries of each a round; print p50,
    the median per-round ratio to the unfiltered p50, the node's mean `took`, and the body's size."""
    import json

    from bench.opensearch_index import node_url

    url = node_url()
    if url is None:
        log("opensearch access variants: no node answers (make opensearch); skipped")
        return
    from kindex.adapters.aws.opensearch_filters import build_access_filter
    from kindex.adapters.aws.opensearch_index import OpenSearchIndex, opensearch_client
    from kindex.adapters.aws.opensearch_requests import build_keyword_query, index_alias, routing_key
    from kindex.domain.types import Principals, SearchFilters

    client = opensearch_client(url, sigv4=False)
    prefix = f"kindex-bench-access-variants-{os.getpid()}"
    index = OpenSearchIndex(
        client, index_prefix=prefix, engine="lucene", number_of_shards=1, number_of_replicas=0, refresh="false"
    )
    user, groups = "bench-user", [f"g{b}" for b in range(BUCKETS)]

    def body(tenant: str, clause: Any) -> dict:
        built = build_keyword_query(tenant, [COLLECTION], "common", K)
        filters = built["query"]["bool"]["filter"]
        assert filters[-1] == build_access_filter(None, (), required=False)  # the clause a query without principals has
        filters.pop()
        if clause is not None:
            filters.append(clause)
        return built

    shipped = SearchFilters(principals=Principals(user, tuple(groups)))
    bodies = {
        "unfiltered": (ATTRIBUTE_TENANT, build_keyword_query(ATTRIBUTE_TENANT, [COLLECTION], "common", K)),
        "shipped": (ACCESS_TENANT, build_keyword_query(ACCESS_TENANT, [COLLECTION], "common", K, shipped)),
        **{name: (ACCESS_TENANT, body(ACCESS_TENANT, shape(user, groups))) for name, shape in ACCESS_VARIANTS.items()},
    }
    rng = np.random.default_rng(384)
    try:
        _write_tenants(index, rng.standard_normal((count, 384), dtype=np.float32))
        alias = index_alias(prefix, MODEL, 384)
        if merge:
            client.indices.forcemerge(index=alias, max_num_segments=1, request_timeout=600)
            client.indices.refresh(index=alias)
        segments = len(client.cat.segments(index=alias, format="json"))

        def side(tenant: str, sent: dict):
            def one_round() -> dict:
                ms, took = [], []
                for _ in range(rounds_of):
                    began = time.perf_counter()
                    response = client.search(index=alias, body=sent, routing=routing_key(tenant))
                    ms.append((time.perf_counter() - began) * 1000)
                    took.append(response["took"])
                    assert len(response["hits"]["hits"]) == K
                return {"ms": ms, "took": took}

            return one_round

        for tenant, sent in bodies.values():  # warm every shape once
            side(tenant, sent)()
        load = os.getloadavg()[0]
        runs = alternate(
            {name: side(tenant, sent) for name, (tenant, sent) in bodies.items()}, min_seconds=min_seconds, min_rounds=3
        )
        # Lucene caches filters only on segments of 10,000 documents or more: say whether it did here.
        cache = client.indices.stats(index=alias, metric="query_cache")["_all"]["primaries"]["query_cache"]
    finally:
        client.indices.delete(index=f"{prefix}-*")
    base = [median(found["ms"]) for found in runs["unfiltered"]]
    lines = []
    for name, found in runs.items():
        p50 = median([ms for one in found for ms in one["ms"]])
        paired = median([median(one["ms"]) / reference for one, reference in zip(found, base)])
        took = float(np.mean([t for one in found for t in one["took"]]))
        lines.append(
            f"{name:45s} p50 {p50:5.2f} ms, per-round ratio {paired:4.2f}x, took {took:4.2f} ms, "
            f"body {len(json.dumps(bodies[name][1]))} B"
        )
    log(
        f"opensearch access variants ({count} chunks a tenant, {segments} segments, {len(base)} rounds of "
        f"{rounds_of}, load {load:.1f} -> {os.getloadavg()[0]:.1f}; query cache hits {cache['hit_count']}, misses "
        f"{cache['miss_count']}, entries {cache['cache_count']}):\n  " + "\n  ".join(lines)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--min-seconds", type=float, default=2.0)
    parser.add_argument("--model", action="store_true", help="the default local model's vectors (bench.model_vectors)")
    parser.add_argument("--access-variants", action="store_true", help="other shapes of the 1,000-group access clause")
    parser.add_argument("--force-merge", action="store_true", help="with --access-variants: one segment first")
    options = parser.parse_args()
    if options.access_variants:
        run_access_variants(options.count, min_seconds=options.min_seconds, merge=options.force_merge)
        return
    for figure in run(
        count=options.count, queries=options.queries, min_seconds=options.min_seconds, model=options.model
    ):
        print(
            f"{figure.name}: {figure.value} {figure.unit} (reference {figure.reference_value}, ratio "
            f"{figure.ratio}) {figure.details or ''}"
        )


if __name__ == "__main__":
    main()
