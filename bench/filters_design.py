"""Measure candidate OpenSearch mappings for document attributes on a real node (issue 23, item 7).

    python -m bench.filters_design [--url http://127.0.0.1:9200] [--chunks 20000] [--dims 384]

Builds throwaway indices named `filters-design-*` (deleted at the end), one per candidate:

- `kv`: typed key-value keyword terms (kindex.adapters.filter_terms: attr_s / attr_n sortable-hex / ...);
- `flat`: one `flat_object` field holding the attributes as they are;
- `nested`: a nested field of {k, s, n, b} objects, one per attribute value;
- `dynamic`: a plain object with dynamic mapping (what not to do: counts fields, shows the type conflict).

Vectors are random unit vectors (uniform on the sphere): recall is against the exact top 10 of the filtered set,
computed with numpy. Each chunk has `bucket` (an integer 0..999, uniform), so `bucket < 100 / 10 / 1` selects 10 %,
1 %, 0.1 %; the same selectivities are also asked as string terms (`grp` in a set of 100 / 10 / 1 values).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from opensearchpy import OpenSearch, helpers

from kindex.adapters.filter_terms import attribute_terms, number_term, string_term

PREFIX = "filters-design-"
QUERIES = 40
K = 10


def vector_mapping(dims: int, engine: str) -> dict:
    return {
        "type": "knn_vector",
        "dimension": dims,
        "method": {
            "name": "hnsw",
            "engine": engine,
            "space_type": "innerproduct",
            "parameters": {"m": 16, "ef_construction": 128},
        },
    }


def mappings(option: str, dims: int, engine: str) -> dict:
    base = {"tenant": {"type": "keyword"}, "chunk": {"type": "keyword"}, "vector": vector_mapping(dims, engine)}
    if option == "kv":
        base.update({name: {"type": "keyword"} for name in ("attr_k", "attr_s", "attr_l", "attr_n", "attr_b")})
        return {"dynamic": "strict", "properties": base}
    if option == "flat":
        base["attrs"] = {"type": "flat_object"}
        return {"dynamic": "strict", "properties": base}
    if option == "nested":
        base["attr"] = {
            "type": "nested",
            "properties": {
                "k": {"type": "keyword"},
                "s": {"type": "keyword"},
                "n": {"type": "double"},
                "b": {"type": "boolean"},
            },
        }
        return {"dynamic": "strict", "properties": base}
    base["attrs"] = {"type": "object", "dynamic": True}
    return {"properties": base}


def source(option: str, attributes: dict) -> dict:
    if option == "kv":
        return attribute_terms(attributes)
    if option in ("flat", "dynamic"):
        return {"attrs": attributes}
    values = []
    for key, value in attributes.items():
        if isinstance(value, bool):
            values.append({"k": key, "b": value})
        elif isinstance(value, int | float):
            values.append({"k": key, "n": value})
        else:
            values.extend({"k": key, "s": item} for item in (value if isinstance(value, list) else [value]))
    return {"attr": values}


def range_filter(option: str, key: str, below: int) -> dict:
    if option == "kv":
        return {"range": {"attr_n": {"gte": number_term(key, -1e300), "lt": number_term(key, below)}}}
    if option in ("flat", "dynamic"):
        return {"range": {f"attrs.{key}": {"lt": below}}}
    return {
        "nested": {
            "path": "attr",
            "query": {"bool": {"filter": [{"term": {"attr.k": key}}, {"range": {"attr.n": {"lt": below}}}]}},
        }
    }


def terms_filter(option: str, key: str, values: list[str]) -> dict:
    if option == "kv":
        return {"terms": {"attr_s": [string_term(key, v) for v in values]}}
    if option in ("flat", "dynamic"):
        return {"terms": {f"attrs.{key}": values}}
    return {
        "nested": {
            "path": "attr",
            "query": {"bool": {"filter": [{"term": {"attr.k": key}}, {"terms": {"attr.s": values}}]}},
        }
    }


def attributes_of(rng: np.random.Generator, bucket: int, extra_keys: int) -> dict:
    attributes = {
        "bucket": int(bucket),
        "grp": f"g{bucket}",
        "region": ["eu", "us", "apac"][bucket % 3],
        "score": float(rng.random()),
        "tags": [f"t{int(t)}" for t in rng.integers(0, 50, 3)],
        "public": bool(bucket % 2),
    }
    for j in rng.integers(0, extra_keys, 4):  # per-tenant keys: how a dynamic mapping grows
        attributes[f"k{int(j)}"] = f"v{int(j)}"
    return attributes


def field_count(client: OpenSearch, index: str) -> int:
    mapping = client.indices.get_mapping(index=index)[index]["mappings"]

    def count(properties: dict) -> int:
        total = 0
        for value in properties.values():
            total += 1 + count(value.get("properties", {})) + count(value.get("fields", {}))
        return total

    return count(mapping.get("properties", {}))


def load(
    client: OpenSearch, option: str, vectors: np.ndarray, buckets: np.ndarray, engine: str, extra_keys: int
) -> tuple[str, float]:
    index = f"{PREFIX}{option}-{engine}"
    client.indices.delete(index=index, ignore=[404])
    client.indices.create(
        index=index,
        body={
            "settings": {
                "index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"}
            },
            "mappings": mappings(option, vectors.shape[1], engine),
        },
    )
    rng = np.random.default_rng(7)
    started = time.perf_counter()

    def actions():
        for i, (vector, bucket) in enumerate(zip(vectors, buckets)):
            yield {
                "_index": index,
                "_id": str(i),
                "_source": {
                    "tenant": "a",
                    "chunk": str(i),
                    "vector": vector.tolist(),
                    **source(option, attributes_of(rng, int(bucket), extra_keys)),
                },
            }

    helpers.bulk(client, actions(), chunk_size=500, request_timeout=600)
    client.indices.refresh(index=index, request_timeout=600)
    client.indices.forcemerge(index=index, max_num_segments=1, request_timeout=1800)
    client.indices.refresh(index=index, request_timeout=600)
    return index, time.perf_counter() - started


def exact_top(vectors: np.ndarray, allowed: np.ndarray, query: np.ndarray) -> set[str]:
    rows = np.flatnonzero(allowed)
    scores = vectors[rows] @ query
    return {str(rows[i]) for i in np.argsort(-scores)[:K]}


def measure(
    client: OpenSearch, index: str, option: str, vectors: np.ndarray, buckets: np.ndarray, queries: np.ndarray
) -> list[dict]:
    rows = []
    for selectivity, below in (("100%", None), ("10%", 100), ("1%", 10), ("0.1%", 1)):
        for kind in ("range", "terms") if below is not None else ("none",):
            if kind == "range":
                clause = range_filter(option, "bucket", below)
            elif kind == "terms":
                clause = terms_filter(option, "grp", [f"g{b}" for b in range(below)])
            else:
                clause = None
            allowed = buckets < below if below is not None else np.ones(len(buckets), dtype=bool)
            took, wall, recalls, counts = [], [], [], []
            for query in queries:
                knn = {"vector": query.tolist(), "k": K, "method_parameters": {"ef_search": 100}}
                knn["filter"] = {"bool": {"filter": [{"term": {"tenant": "a"}}] + ([clause] if clause else [])}}
                body = {"size": K, "_source": False, "query": {"knn": {"vector": knn}}}
                started = time.perf_counter()
                response = client.search(index=index, body=body, request_timeout=60)
                wall.append((time.perf_counter() - started) * 1000)
                took.append(response["took"])
                found = {hit["_id"] for hit in response["hits"]["hits"]}
                counts.append(len(found))
                truth = exact_top(vectors, allowed, query)
                recalls.append(len(found & truth) / len(truth))
            rows.append(
                {
                    "option": option,
                    "selectivity": selectivity,
                    "filter": kind,
                    "recall@10": round(statistics.mean(recalls), 3),
                    "results_min": min(counts),
                    "took_p50_ms": statistics.median(took),
                    "wall_p50_ms": round(statistics.median(wall), 1),
                    "wall_p95_ms": round(float(np.percentile(wall, 95)), 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def type_conflict(client: OpenSearch) -> dict:
    """What each option does when tenant b writes `bucket` as a string after tenant a wrote numbers."""
    outcome = {}
    for option in ("kv", "flat", "nested", "dynamic"):
        index = f"{PREFIX}conflict-{option}"
        client.indices.delete(index=index, ignore=[404])
        client.indices.create(
            index=index,
            body={
                "settings": {"index": {"knn": True, "number_of_replicas": 0}},
                "mappings": mappings(option, 4, "lucene"),
            },
        )
        client.index(index=index, id="a", body={"tenant": "a", **source(option, {"bucket": 10})}, refresh=True)
        try:
            client.index(
                index=index, id="b", body={"tenant": "b", **source(option, {"bucket": "9 lives"})}, refresh=True
            )
            # Does a numeric range still compare numbers? 9 < 10 must hold, "10" < "9" as strings.
            client.index(index=index, id="c", body={"tenant": "a", **source(option, {"bucket": 9})}, refresh=True)
            found = client.search(
                index=index,
                body={"query": {"bool": {"filter": [{"term": {"tenant": "a"}}, range_filter(option, "bucket", 10)]}}},
            )["hits"]["hits"]
            outcome[option] = {"conflict": False, "range_lt_10_tenant_a": sorted(hit["_id"] for hit in found)}
        except Exception as error:  # noqa: BLE001 - the error is the measurement
            outcome[option] = {"conflict": True, "error": str(error)[:160]}
        client.indices.delete(index=index, ignore=[404])
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:9200")
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--extra-keys", type=int, default=500)
    parser.add_argument("--options", default="kv,flat,nested,dynamic")
    parser.add_argument("--engine", default="lucene")
    args = parser.parse_args()
    client = OpenSearch(args.url, timeout=600)
    print(json.dumps({"type_conflict": type_conflict(client)}), flush=True)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((args.chunks, args.dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((QUERIES, args.dims)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    buckets = rng.integers(0, 1000, args.chunks)
    for option in args.options.split(","):
        try:
            index, seconds = load(client, option, vectors, buckets, args.engine, args.extra_keys)
        except helpers.BulkIndexError as error:
            index = f"{PREFIX}{option}-{args.engine}"
            print(
                json.dumps(
                    {
                        "option": option,
                        "load_failed": error.errors[0]["index"]["error"]["reason"],
                        "fields": field_count(client, index),
                    }
                ),
                flush=True,
            )
            client.indices.delete(index=index, ignore=[404])
            continue
        stats = client.indices.stats(index=index)["indices"][index]["primaries"]
        print(
            json.dumps(
                {
                    "option": option,
                    "load_s": round(seconds, 1),
                    "fields": field_count(client, index),
                    "docs_incl_nested": stats["docs"]["count"],
                    "store_mb": round(stats["store"]["size_in_bytes"] / 1e6, 1),
                }
            ),
            flush=True,
        )
        try:
            measure(client, index, option, vectors, buckets, queries)
        finally:
            client.indices.delete(index=index, ignore=[404])


if __name__ == "__main__":
    main()
