"""The OpenSearch adapter on a real node (`make opensearch`), beside the embedded index on the same vectors.

100k random 384-dimension vectors (the seed and shapes of bench/vector_index.py's `random_100k`) for one tenant,
plus 10k of another tenant that every query's filter must exclude, written through `OpenSearchIndex` as a bulk
backfill (refresh="false", one refresh at the end) into a one-shard, no-replica lucene index (the node has no
faiss library). Then 200 filtered k-NN queries (tenant + collection, k=10) through the adapter: p50 latency and
recall@10 against exact cosine in float64. The references are the embedded index's figures for the same records
and queries, measured in the same run with the sides alternated: both indexes are written batch by batch in turn
(the order reversed each batch), then query rounds (all queries on one index, then on the other) alternate until
each side has spent MIN_SECONDS; spreads are over batches (bulk) and rounds (p50). Also measured: bytes per chunk
on disk (store size / documents, after a flush; and, on 10k of the vectors, after a force merge to one segment,
beside the same index keeping the vector in `_source`), and recall with the candidate list at ef = k (no
`method_parameters`, what lucene does unless told; the adapter sends the design's ef_search, 100 by default).
Then the filtered figures of bench/opensearch_filtered.py (`opensearch_filtered_*`: k results at every selectivity,
p50 beside the unfiltered query) on an index of their own.

Skipped, with a log line, when no node answers at KINDEX_BENCH_OPENSEARCH_URL (default http://127.0.0.1:9200).
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.common import Figure, alternate, log, median, paired_ratios, percentile, spread
from bench.vector_index import COLLECTION, TENANT, K, _exact_cosine_top, _recall, _search_all

MODEL = "bench:os384"
LOCAL_MODEL = "bench:384"
# Query rounds: the embedded index answers 200 queries in ~1.5 s, OpenSearch in ~6 s; 20 s of the faster side (issue
# 14: >= 20 s of work per measurement) is ~14 rounds, ~90 s of OpenSearch.
MIN_SECONDS = 20.0
OTHER_TENANT = "other"
BATCH = 5_000
SECTION = "opensearch"
# Real sentences each embedded alone for the short-chunk recall figure: ~3 min of the model on 2 quiet cores once,
# cached after (bench/model_vectors.py).
SENTENCES = 10_000


def node_url() -> str | None:
    """The node's URL when one answers, else None."""
    import requests

    url = os.environ.get("KINDEX_BENCH_OPENSEARCH_URL", "http://127.0.0.1:9200").rstrip("/")
    try:
        health = requests.get(f"{url}/_cluster/health", timeout=3).json()
    except (requests.RequestException, ValueError):
        return None
    return url if health.get("status") in ("green", "yellow") else None


def _records(vectors: np.ndarray, tenant: str, offset: int = 0) -> list:
    from kindex.domain.types import IndexRecord

    return [
        IndexRecord(
            tenant=tenant,
            collection=COLLECTION,
            document_id=f"d{i // 20}",
            chunk_id=f"{i}",
            vector=vector.tolist(),
            text="",
            language="en",
            mimetype="text/plain",
        )
        for i, vector in enumerate(vectors, start=offset)
    ]


def _store_bytes(url: str, index: str) -> tuple[int, int]:
    import requests

    # A refresh first: segments a merge replaced stay on disk while a reader still holds them.
    requests.post(f"{url}/{index}/_refresh", timeout=300)
    requests.post(f"{url}/{index}/_flush", timeout=300)
    (row,) = requests.get(
        f"{url}/_cat/indices/{index}?bytes=b&format=json&h=docs.count,pri.store.size", timeout=30
    ).json()
    return int(row["pri.store.size"]), int(row["docs.count"])


def _ef_k_recall(client, alias: str, queries: np.ndarray, truth: np.ndarray) -> float:
    """Recall@10 without `method_parameters` (lucene's ef = k), sent directly, not through the adapter."""
    from kindex.adapters.aws.opensearch_requests import build_knn_query, routing_key

    found = []
    for query in queries:
        body = build_knn_query(TENANT, [COLLECTION], query.tolist(), K)
        hits = client.search(index=alias, body=body, routing=routing_key(TENANT))["hits"]["hits"]
        found.append([int(hit["_source"]["chunk_id"]) for hit in hits])
    return _recall(found, truth)


def run(
    count: int = 100_000,
    dims: int = 384,
    queries: int = 200,
    others: int = 10_000,
    min_seconds: float = MIN_SECONDS,
    sentences: int = SENTENCES,
) -> list[Figure]:
    url = node_url()
    if url is None:
        log("opensearch: no node answers (make opensearch); section skipped")
        return []
    from bench import model_vectors

    vectors = model_vectors.chunks(count)
    query_vectors = model_vectors.queries(queries)
    other_vectors = model_vectors.chunks(others, seed=7)  # another tenant's chunks, excluded by every query's filter
    dims = vectors.shape[1]
    log(
        f"opensearch: {count} {model_vectors.MODEL} chunk vectors written into OpenSearch and the embedded index "
        f"(exact, and with its HNSW graph) batch by batch, then query rounds alternated, >= {min_seconds:.0f} s each"
    )
    figures, found = real_vectors(url, vectors, query_vectors, other_vectors, min_seconds=min_seconds)
    sentence_vectors = model_vectors.sentences(sentences)
    return (
        figures
        + sentences_recall(url, sentence_vectors, query_vectors)
        + gaussian_stress(url, count, dims, queries)
        + bytes_per_chunk(url, opensearch_client_for(url), vectors[:10_000])
        + filtered(count, queries)
    )


def opensearch_client_for(url: str):
    from kindex.adapters.aws.opensearch_index import opensearch_client

    return opensearch_client(url, sigv4=False)


@contextmanager
def graph_from(rows: int):
    """The embedded index's HNSW graph from `rows` rows instead of `ann.MIN_ROWS` (150k): at 100k a partition
    searches exactly, and the graph's recall is what a user with more chunks gets."""
    from kindex.adapters.local.search import ann

    saved = ann.MIN_ROWS
    ann.MIN_ROWS = rows
    try:
        yield
    finally:
        ann.MIN_ROWS = saved


def real_vectors(
    url: str, vectors: np.ndarray, query_vectors: np.ndarray, other_vectors: np.ndarray, *, min_seconds: float
) -> tuple[list[Figure], dict]:
    """OpenSearch beside the embedded index, exact and with its graph, on the default model's chunk vectors."""
    from bench.model_vectors import MODEL as EMBEDDER
    from kindex.adapters.aws.opensearch_index import OpenSearchIndex
    from kindex.adapters.aws.opensearch_requests import index_alias
    from kindex.adapters.local.search.index import LocalSearchIndex

    count, dims = vectors.shape
    queries = len(query_vectors)
    truth = _exact_cosine_top(vectors, query_vectors, K)
    records = _records(vectors, TENANT)
    noise = _records(other_vectors, OTHER_TENANT, offset=count)
    client = opensearch_client_for(url)
    prefix = f"kindex-bench-{os.getpid()}"
    alias = index_alias(prefix, MODEL, dims)
    index = OpenSearchIndex(
        client, index_prefix=prefix, engine="lucene", number_of_shards=1, number_of_replicas=0, refresh="false"
    )
    design = index.design
    with tempfile.TemporaryDirectory(prefix="kindex-bench-opensearch-") as tmp, graph_from(count // 2):
        exact = LocalSearchIndex(Path(tmp) / "exact")
        hnsw = LocalSearchIndex(Path(tmp) / "hnsw")
        try:
            sides = {
                "opensearch": (index, MODEL),
                "embedded": (exact, LOCAL_MODEL),
                "embedded_hnsw": (hnsw, LOCAL_MODEL),
            }
            built = build_all(sides, records, exact_side="embedded")
            started = time.perf_counter()
            index.refresh(MODEL)
            built["seconds"]["opensearch"] += time.perf_counter() - started  # the refresh is part of the bulk load
            index.upsert(MODEL, noise)
            index.refresh(MODEL)
            store_bytes, docs = _store_bytes(url, alias)
            searched = query_rounds(sides, query_vectors, min_seconds=min_seconds)
            recall = {name: _recall(hits, truth) for name, hits in searched["found"].items()}
            recall_ef_k = _ef_k_recall(client, alias, query_vectors, truth)
            sweep = ef_search_sweep(client, alias, query_vectors, truth, (design.ef_search, 200, 400))
        finally:
            exact.close()
            hnsw.close()
            client.indices.delete(index=f"{prefix}-*")

    seconds = built["seconds"]
    rates = {name: count / spent for name, spent in seconds.items()}
    ms, p50s = searched["ms"], searched["round_p50"]
    paired_p50 = paired_ratios(p50s["opensearch"], p50s["embedded"])
    hnsw_p50 = paired_ratios(p50s["embedded_hnsw"], p50s["embedded"])
    notes = (
        f"{count} {EMBEDDER} chunk vectors (each chunk 8 of the first 4,000 SciFact sentences, its vector the "
        f"normalised sum of theirs, as the latency section writes them; bench/model_vectors.py) for one tenant + "
        f"{len(other_vectors)} of another (excluded by every query's filter); {queries} queries of real words "
        f"embedded by the same model; OpenSearch 2.19 node on this machine, lucene HNSW m={design.m} "
        f"ef_construction={design.ef_construction} ef_search={design.ef_search} (the shipped IndexDesign), 1 shard, "
        f"0 replicas; bulk through the adapter with refresh=false ({BATCH} records an upsert, 500 a bulk request), "
        f"one refresh at the end; k={K}, {len(paired_p50)} query rounds alternated with the embedded index "
        f"(exact search) and the embedded index with its HNSW graph (built from {count // 2} rows instead of "
        f"150k for this run; usearch int8, M=16, efSearch 768, candidates re-scored exactly) on the same records "
        f"and queries (order reversed each round; percentiles over all rounds' samples, spreads over the rounds' "
        f"p50s); the indexes written batch by batch in turn ({BATCH} records, the order reversed each batch)"
    )
    log(
        f"opensearch {count}: bulk {rates['opensearch']:.0f} docs/s (embedded {rates['embedded']:.0f}, with graph "
        f"{rates['embedded_hnsw']:.0f}), p50 {median(ms['opensearch']):.2f} ms (embedded {median(ms['embedded']):.2f}"
        f", with graph {median(ms['embedded_hnsw']):.2f}), recall@10 {recall['opensearch']:.3f} (embedded "
        f"{recall['embedded']:.3f}, with graph {recall['embedded_hnsw']:.3f}; ef = k: {recall_ef_k:.3f}; "
        f"ef_search sweep {sweep}), {store_bytes / docs:.0f} bytes a chunk on disk"
    )
    truth_note = "; truth: exact cosine (brute force, float64)"
    figures = [
        Figure(
            "opensearch_bulk_docs_per_s",
            rates["opensearch"],
            "docs/s",
            "embedded index upsert",
            rates["embedded"],
            section=SECTION,
            notes=notes,
            spread=spread(built["rates"]["opensearch"]),
            ratio_spread=spread(paired_ratios(built["rates"]["opensearch"], built["rates"]["embedded"])),
            details={"embedded_hnsw_docs_per_s": rates["embedded_hnsw"]},
        ),
        Figure(
            "opensearch_query_p50_ms_100k",
            median(ms["opensearch"]),
            "ms",
            "embedded index knn_search",
            median(ms["embedded"]),
            section=SECTION,
            notes=notes,
            spread=spread(p50s["opensearch"]),
            ratio_spread=spread(paired_p50),
            details={"round_p50_ms": p50s},
        ),
        Figure(
            "opensearch_query_p99_ms_100k",
            percentile(ms["opensearch"], 99),
            "ms",
            "embedded index knn_search",
            percentile(ms["embedded"], 99),
            section=SECTION,
            notes=notes,
        ),
        Figure(
            "opensearch_recall10_100k",
            recall["opensearch"],
            "recall",
            "embedded index recall@10",
            recall["embedded"],
            section=SECTION,
            notes=notes + truth_note,
            details={
                "embedded_hnsw_recall10": recall["embedded_hnsw"],
                # recall@10 and p50 (ms, one pass, not alternated) at each ef_search, sent as method_parameters
                "ef_search_sweep": sweep,
            },
        ).invalid_unless(recall["embedded"] >= 0.999, "the exact side's recall must be 1 (ties aside)"),
        Figure(
            "opensearch_recall10_100k_ef_k",
            recall_ef_k,
            "recall",
            "embedded index recall@10",
            recall["embedded"],
            section=SECTION,
            notes=notes + "; the same queries without method_parameters (lucene's ef = k)" + truth_note,
        ),
        Figure(
            "embedded_hnsw_recall10_100k",
            recall["embedded_hnsw"],
            "recall",
            "OpenSearch recall@10",
            recall["opensearch"],
            section=SECTION,
            notes=notes + truth_note,
        ),
        Figure(
            "embedded_hnsw_query_p50_ms_100k",
            median(ms["embedded_hnsw"]),
            "ms",
            "embedded index knn_search (exact)",
            median(ms["embedded"]),
            section=SECTION,
            notes=notes,
            spread=spread(p50s["embedded_hnsw"]),
            ratio_spread=spread(hnsw_p50),
            details={"p99_ms": percentile(ms["embedded_hnsw"], 99)},
        ),
        Figure(
            "opensearch_bytes_per_chunk_on_disk",
            store_bytes / docs,
            "bytes",
            "float32 vector alone",
            4 * dims,
            section=SECTION,
            notes=notes + f"; {docs} docs, {store_bytes} bytes primary store after a flush (not force-merged); "
            "text and vector excluded from _source",
        ),
    ]
    return figures, searched["found"]


def ef_search_sweep(client, alias: str, queries: np.ndarray, truth: np.ndarray, values: tuple[int, ...]) -> dict:
    """recall@10 and p50 at each `ef_search` (the query's method_parameters), one pass of the queries each: what a
    higher ef_search would buy and cost on this index."""
    from kindex.adapters.aws.opensearch_requests import build_knn_query, routing_key

    measured = {}
    for ef in dict.fromkeys(values):
        found, latencies = [], []
        for query in queries:
            body = build_knn_query(TENANT, [COLLECTION], query.tolist(), K, ef_search=ef)
            started = time.perf_counter()
            hits = client.search(index=alias, body=body, routing=routing_key(TENANT))["hits"]["hits"]
            latencies.append((time.perf_counter() - started) * 1000)
            found.append([int(hit["_source"]["chunk_id"]) for hit in hits])
        measured[str(ef)] = {"recall10": round(_recall(found, truth), 4), "p50_ms": round(median(latencies), 2)}
    return measured


def _opensearch_only_recall(
    url: str, label: str, vectors: np.ndarray, query_vectors: np.ndarray
) -> tuple[float, float]:
    """recall@10 (and p50 ms) of OpenSearch with the shipped design on `vectors`, in an index of its own."""
    from kindex.adapters.aws.opensearch_index import OpenSearchIndex

    client = opensearch_client_for(url)
    prefix = f"kindex-bench-{label}-{os.getpid()}"
    index = OpenSearchIndex(
        client, index_prefix=prefix, engine="lucene", number_of_shards=1, number_of_replicas=0, refresh="false"
    )
    records = _records(vectors, TENANT)
    try:
        for start in range(0, len(records), BATCH):
            index.upsert(MODEL, records[start : start + BATCH])
        index.refresh(MODEL)
        _search_all(index, MODEL, query_vectors[:10], K)
        found, latencies = _search_all(index, MODEL, query_vectors, K)
    finally:
        client.indices.delete(index=f"{prefix}-*")
    return _recall(found, _exact_cosine_top(vectors, query_vectors, K)), median(latencies)


def sentences_recall(url: str, vectors: np.ndarray, query_vectors: np.ndarray) -> list[Figure]:
    """The same on real sentences each embedded alone (no sums): the vectors of short chunks."""
    from bench.model_vectors import MODEL as EMBEDDER

    recall, p50 = _opensearch_only_recall(url, "sentences", vectors, query_vectors)
    log(f"opensearch {len(vectors)} single sentences: recall@10 {recall:.3f}, p50 {p50:.2f} ms")
    return [
        Figure(
            f"opensearch_recall10_sentences_{len(vectors) // 1000}k",
            recall,
            "recall",
            "exact search",
            1.0,
            section=SECTION,
            notes=f"the first {len(vectors)} SciFact sentences, each embedded alone by {EMBEDDER}; "
            f"{len(query_vectors)} queries; the shipped IndexDesign on lucene, one shard; truth: exact cosine",
            details={"p50_ms": round(p50, 2)},
        )
    ]


def gaussian_stress(url: str, count: int, dims: int, queries: int) -> list[Figure]:
    """A stress case, not what users get: random Gaussian vectors have no neighbourhood structure, HNSW's worst
    case (the seed and shapes of bench/vector_index.py's `random_100k`)."""
    rng = np.random.default_rng(384)
    vectors = rng.standard_normal((count, dims), dtype=np.float32)
    query_vectors = rng.standard_normal((queries, dims), dtype=np.float32)
    recall, p50 = _opensearch_only_recall(url, "gaussian", vectors, query_vectors)
    log(f"opensearch {count} Gaussian vectors (stress case): recall@10 {recall:.3f}, p50 {p50:.2f} ms")
    return [
        Figure(
            "opensearch_recall10_100k_gaussian_stress",
            recall,
            "recall",
            "exact search",
            1.0,
            section=SECTION,
            notes=f"STRESS CASE, not a user's vectors: {count} random standard-normal {dims}-d vectors and "
            f"{queries} random queries (no neighbourhood structure: HNSW's worst case); the shipped IndexDesign on "
            "lucene, one shard; truth: exact cosine",
            details={"p50_ms": round(p50, 2)},
        )
    ]


def filtered(count: int, queries: int) -> list[Figure]:
    """Attribute filters and access lists at 100 / 10 / 1 / 0.1 % beside the unfiltered query
    (bench/opensearch_filtered.py), on as many chunks per tenant as the section's index; a quick run keeps its
    rounds short."""
    from bench import opensearch_filtered

    return opensearch_filtered.run(
        count=count, queries=min(queries, 100), min_seconds=10.0 if count >= 100_000 else 2.0
    )


def build_all(sides: dict, records: list, *, exact_side: str | None = None) -> dict:
    """Every index written with the same batches, in turn (the order reversed each batch), so that load on the
    machine hits every build alike; seconds and per-batch docs/s of each. `exact_side` is written with the graph
    threshold out of reach (`graph_from` lowers it for the others), so it stays exact."""
    from kindex.adapters.local.search import ann

    names = list(sides)
    seconds = dict.fromkeys(names, 0.0)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for number, start in enumerate(range(0, len(records), BATCH)):
        batch = records[start : start + BATCH]
        for name in names if number % 2 == 0 else names[::-1]:
            target, model = sides[name]
            saved = ann.MIN_ROWS
            if name == exact_side:
                ann.MIN_ROWS = 1 << 62  # this side never builds a graph
            try:
                started = time.perf_counter()
                target.upsert(model, batch)
                elapsed = time.perf_counter() - started
            finally:
                ann.MIN_ROWS = saved
            seconds[name] += elapsed
            rates[name].append(len(batch) / elapsed)
    return {"seconds": seconds, "rates": rates}


def query_rounds(sides: dict, query_vectors: np.ndarray, *, min_seconds: float = MIN_SECONDS) -> dict:
    """All queries against one index, then all against the next, alternated (`alternate`) until each has spent
    `min_seconds`; the samples of every round, each round's p50, and the hits of the last round."""
    for target, model in sides.values():
        _search_all(target, model, query_vectors[:10], K)  # warm the graph files / the memory map

    def side(name: str):
        target, model = sides[name]

        def one_round() -> dict:
            found, latencies = _search_all(target, model, query_vectors, K)
            return {"found": found, "ms": latencies}

        return one_round

    runs = alternate({name: side(name) for name in sides}, min_seconds=min_seconds)
    return {
        "ms": {name: [ms for r in found for ms in r["ms"]] for name, found in runs.items()},
        "round_p50": {name: [median(r["ms"]) for r in found] for name, found in runs.items()},
        "found": {name: found[-1]["found"] for name, found in runs.items()},
    }


def bytes_per_chunk(url: str, client, vectors: np.ndarray) -> list[Figure]:
    """Disk a chunk takes once merged, with the vector out of `_source` (the design) and kept in it (before)."""
    import requests

    from kindex.adapters.aws.opensearch_design import IndexDesign
    from kindex.adapters.aws.opensearch_index import OpenSearchIndex
    from kindex.adapters.aws.opensearch_requests import build_index_body, concrete_index, index_alias

    dims = vectors.shape[1]
    records = _records(vectors, TENANT)
    measured = {}
    for label, excludes in (("excluded", ["text", "vector"]), ("in_source", ["text"])):
        prefix = f"kindex-bench-bytes-{os.getpid()}-{label.replace('_', '-')}"
        alias = index_alias(prefix, MODEL, dims)
        # Created here with the _source under test; the adapter finds the alias and writes into it.
        body = build_index_body(dims, alias=alias, design=IndexDesign(engine="lucene", number_of_replicas=0))
        body["mappings"]["_source"] = {"excludes": excludes}
        client.indices.create(index=concrete_index(alias), body=body)
        try:
            index = OpenSearchIndex(client, index_prefix=prefix, engine="lucene", number_of_replicas=0, refresh="false")
            for start in range(0, len(records), BATCH):
                index.upsert(MODEL, records[start : start + BATCH])
            index.refresh(MODEL)
            unmerged, docs = _store_bytes(url, alias)
            requests.post(f"{url}/{alias}/_forcemerge?max_num_segments=1", timeout=1800)
            merged, _ = _store_bytes(url, alias)
            measured[label] = (unmerged / docs, merged / docs)
        finally:
            client.indices.delete(index=f"{prefix}-*")
    log(
        f"opensearch bytes a chunk ({len(vectors)} x {dims}, merged): vector excluded {measured['excluded'][1]:.0f}, "
        f"in _source {measured['in_source'][1]:.0f} (unmerged {measured['excluded'][0]:.0f} / "
        f"{measured['in_source'][0]:.0f})"
    )
    notes = (
        f"{len(vectors)} random {dims}-d chunks, lucene, one shard, flushed and force-merged to one segment; "
        "text never in _source; reference: the same index keeping the vector in _source (the design before)"
    )
    return [
        Figure(
            "opensearch_bytes_per_chunk_merged",
            measured["excluded"][1],
            "bytes",
            "vector kept in _source",
            measured["in_source"][1],
            section=SECTION,
            notes=notes,
        ),
        Figure(
            "opensearch_bytes_per_chunk_unmerged",
            measured["excluded"][0],
            "bytes",
            "vector kept in _source",
            measured["in_source"][0],
            section=SECTION,
            notes=notes.replace("flushed and force-merged to one segment", "flushed, not merged"),
        ),
    ]
