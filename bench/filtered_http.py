"""Filtered search over HTTP against `kindex serve` (issue 23 item 10): a user who may see 100 %, 10 %, 1 % or 0.1 %
of a collection's chunks, once through access lists and once through an attribute filter, beside the unfiltered
query in the same run; then the external rights check allowing 1 % of the documents.

    python -m bench.filtered_http [--documents 10000] [--queries 40] [--random] [--node URL]

- Two collections of `documents` documents, ten chunks each (100k chunks at the default 10,000): document d has the
  attribute `bucket` = d % 1000; in `filtered-listed` also the access list `groups: ["g<bucket>", "all"]`, so the
  groups `all`, `g0..g99`, `g0..g9`, `g0` see 100 / 10 / 1 / 0.1 % (and `g0..g999`, a user in 1,000 groups, 100 %
  again: `access_100_1000groups`) and `bucket < 1000 / 100 / 10 / 1` keeps the same
  shares in `filtered-open` (a query that names nobody sees only documents without an access list, so the
  unfiltered reference and the attribute rows search the collection without them).
- How the data is written: the chunks, their vectors (the index and the embedding cache) and indexed document
  records with their content blobs are pre-filled through the stores the server opens (embedding 100k chunks through
  the pipeline would not fit the section), and so are the filter fields of all documents but every API_EVERY-th
  (in the index entries and the records, as the server's rewrite leaves them). Then the server starts and those
  documents' `attributes` (and `access`) are PUT over HTTP, as a user sets them: the server rewrites their index
  entries with the vectors of its embedding cache (no embedding) and the run waits until every document is
  `indexed` again. All fields through the API would take too long: the rewrite runs one keyword-index commit per
  document (2-6 documents/s on 2 loaded cores, so 20,000 PUTs 1-2 hours); `documents_rewritten_per_s` says what this
  run measured.
- Vectors: `bench.model_vectors` (the default local model's sentence-sum vectors, cached on disk; the same chunks
  bench/filtered.py searches in process). `--random`: random unit vectors (a smoke run; figures not meaningful).
- Queries: question-like texts sent to `POST /v1/collections/{c}/query` with k = 10, embedded by the server with the
  default local model as a user's query is (its time is in every figure), one client over a kept-alive connection,
  modes vector, keyword and hybrid. Every configuration answers each query in turn, so load changes fall on all.
  Reported per row: results returned (min and mean), p50 and p99 of the wall time per request, and `short`: the
  queries that returned fewer than k although the same query with k = 100 (untimed, asked only then) found more.
- The rights path: `filtered-listed` switched to `rights_check_method: "external"` with a RightsServer on 127.0.0.1
  (HMAC verified) that allows 1 % of the documents (`bucket < 10`); a user in group `all` (who may see every
  document by its access list) asks, alternated with the unfiltered query. Reported: results (k, or a
  `stopped_early` warning), p50/p99, and the rights server's requests per query.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bench import model_vectors
from bench.common import (
    REPO,
    Figure,
    SyntheticCorpus,
    document_chunks,
    local_deployment,
    log,
    median,
    percentile,
    running_server,
)
from kindex.settings import LOCAL_DEFAULT_MODEL

TENANT = "default"
OPEN, LISTED = "filtered-open", "filtered-listed"
MODEL = LOCAL_DEFAULT_MODEL
K = 10
CHUNKS_PER_DOCUMENT = 10
BUCKETS = 1_000
SHARES = {"100": BUCKETS, "10": 100, "1": 10, "0.1": 1}  # percent -> buckets visible
MODES = ("vector", "keyword", "hybrid")
RIGHTS_BUCKETS = 10  # the external check allows documents whose bucket is below this: 1 %
WRITERS = 4  # clients PUTting the documents' fields at once
# Every API_EVERY-th document gets its fields by a PUT over HTTP, the others pre-filled: the server rewrites a
# document's index entries at 2-6 documents/s on 2 loaded cores (one keyword commit each), so 20,000 PUTs would take
# the section 1-2 hours; 100 of them measure that path (and its rate) within the section.
API_EVERY = 200
SECTION = "filtered search"
DOCUMENTS, QUERIES = 10_000, 40  # the section's workload: 100k chunks a collection, 40 queries per configuration


def _corpus(chunks: int, random: bool) -> tuple[np.ndarray, list[str]]:
    if random:
        corpus = SyntheticCorpus(seed=6)
        texts = [" ".join(corpus.sentences[i] for i in plan) for plan in model_vectors.chunk_plans(chunks)]
        vectors = np.random.default_rng(6).standard_normal((chunks, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors, texts
    return model_vectors.chunks(chunks), model_vectors.chunk_texts(chunks)


def _document_id(d: int) -> str:
    return f"doc-{d:06d}"


def _fields(collection: str, d: int) -> dict:
    """What a user PUTs on document d: its attributes, and in LISTED its access list."""
    bucket = d % BUCKETS
    body: dict = {"attributes": {"bucket": bucket}}
    if collection == LISTED:
        body["access"] = {"groups": [f"g{bucket}", "all"]}
    return body


def over_http(documents: int) -> list[int]:
    """The documents whose fields are PUT over HTTP (every API_EVERY-th); the others are pre-filled with them."""
    return list(range(0, documents, API_EVERY))


def prefill(data_dir: Path, vectors: np.ndarray, texts: list[str], env: dict[str, str] | None = None) -> dict:
    """Both collections' documents as an ingest leaves them (content blob, chunks, index entries, vectors in the
    embedding cache, `indexed` records). Their filter fields too, as the server's rewrite writes them (in the index
    entries and the record), except the documents of `over_http`, whose fields come over HTTP."""
    from kindex.adapters.local.folder_blobs import FolderBlobStore
    from kindex.app.catalog import CONTENT_FILENAME
    from kindex.app.embedding import text_sha256
    from kindex.domain import keys
    from kindex.domain.filters import Access
    from kindex.domain.models import CollectionInput, Document, DocumentStatus, utc_now
    from kindex.domain.types import IndexRecord, StoredChunk

    started = time.perf_counter()
    documents = len(texts) // CHUNKS_PER_DOCUMENT
    later = set(over_http(documents))
    # On a node the backfill does not wait for a refresh after each bulk request (one refresh interval at most).
    backfill = {**env, "KINDEX_OPENSEARCH_REFRESH": "false"} if env else None
    with local_deployment(data_dir, MODEL, backfill) as services:
        adapters = services.adapters
        # The blobs as an ingest leaves them: written, their events consumed (the store the server opens, without
        # its queue notifier, so the server does not start with 20,000 duplicate events to skip).
        blobs = FolderBlobStore(services.settings.data_dir / "blobs")
        # The rewrite reads each chunk's vector from the tenant's embedding cache, keyed by its text's hash.
        hashes = [text_sha256(text) for text in texts]
        for start in range(0, len(texts), 20_000):
            adapters.embedding_cache.put_vectors(
                TENANT, MODEL, {h: vectors[i] for i, h in enumerate(hashes[start : start + 20_000], start)}
            )
        for collection in (OPEN, LISTED):
            record, _ = services.catalog.put_collection(TENANT, collection, CollectionInput(allow_guests=True))
            pending: list[IndexRecord] = []
            pending_chunks: list[StoredChunk] = []
            for d in range(documents):
                document_id = _document_id(d)
                fields = {} if d in later else _fields(collection, d)
                access = Access(groups=tuple(fields["access"]["groups"])) if "access" in fields else None
                rows = range(d * CHUNKS_PER_DOCUMENT, (d + 1) * CHUNKS_PER_DOCUMENT)
                stored = document_chunks(TENANT, collection, document_id, [texts[row] for row in rows])
                content = "\n\n".join(texts[row] for row in rows).encode("utf-8")
                source = keys.write_blob_key(TENANT, collection, document_id, CONTENT_FILENAME, version=1)
                blobs.put_blob(source, content, "text/plain")
                pending_chunks += stored
                pending += [
                    IndexRecord(
                        tenant=TENANT,
                        collection=collection,
                        document_id=document_id,
                        chunk_id=chunk.chunk_id,
                        vector=vectors[row],
                        text=chunk.text,
                        mimetype="text/plain",
                        attributes=fields.get("attributes"),
                        access=access,
                    )
                    for chunk, row in zip(stored, rows)
                ]
                if len(pending) >= 20_000 or d == documents - 1:
                    # Chunks and index entries go in batches (one store transaction, one keyword commit each).
                    adapters.chunks.put_chunks(TENANT, pending_chunks)
                    adapters.search_index.upsert(MODEL, pending)
                    pending, pending_chunks = [], []
                adapters.metadata.put_document(
                    TENANT,
                    Document(
                        id=document_id,
                        collection=collection,
                        title=f"Document {d}",
                        mimetype="text/plain",
                        status=DocumentStatus.INDEXED,
                        chunk_count=len(stored),
                        chunks_done=len(stored),
                        content_sha256=hashlib.sha256(content).hexdigest(),
                        content_length=len(content),
                        source=source,
                        version=1,
                        indexed_version=1,
                        indexed_model=MODEL,
                        indexed_config_version=record.config_version,
                        indexed_at=utc_now(),
                        attributes=fields.get("attributes"),
                        access=access,
                        fields_version=1 if fields else 0,
                        indexed_fields_version=1 if fields else 0,
                    ),
                    create=True,
                )
    return {
        "documents": documents,
        "chunks_per_collection": len(texts),
        "fields_prefilled_documents": documents - len(later),
        "seconds": round(time.perf_counter() - started),
    }


def put_fields(server, documents: int) -> dict:
    """PUT the `over_http` documents' attributes (and access) over HTTP from WRITERS clients, then wait until every
    document is `indexed` again (its index entries carry the fields)."""
    admin = server.session(server.admin_key)
    started = time.perf_counter()
    jobs = [(collection, d) for d in over_http(documents) for collection in (OPEN, LISTED)]

    def write(part: list[tuple[str, int]]) -> int:
        session = server.session(server.admin_key)
        for collection, d in part:
            url = server.url(f"/v1/collections/{collection}/documents/{_document_id(d)}")
            response = session.put(url, json=_fields(collection, d))
            if response.status_code != 200:
                raise RuntimeError(f"PUT {url}: {response.status_code} {response.text[:300]}")
        return len(part)

    with ThreadPoolExecutor(WRITERS) as pool:
        written = sum(pool.map(write, [jobs[i::WRITERS] for i in range(WRITERS)]))
    put_seconds = time.perf_counter() - started
    deadline = time.monotonic() + 1800
    while True:
        waiting = 0
        for collection in (OPEN, LISTED):
            cursor = None
            while True:
                params: dict = {"number": 1000, **({"cursor": cursor} if cursor else {})}
                page = admin.get(server.url(f"/v1/collections/{collection}/documents"), params=params)
                page.raise_for_status()
                body = page.json()
                waiting += sum(item["status"] != "indexed" for item in body["items"])
                failed = [item for item in body["items"] if item["status"] == "failed"]
                if failed:
                    raise RuntimeError(f"a document failed: {failed[0]}")
                cursor = body.get("next_cursor")
                if not cursor:
                    break
        if not waiting:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{waiting} documents still not indexed")
        time.sleep(1.0)
    seconds = time.perf_counter() - started
    return {
        "documents_put": written,
        "documents_rewritten_per_s": round(written / seconds, 1),
        "put_seconds": round(put_seconds, 1),
        "until_indexed_seconds": round(time.perf_counter() - started, 1),
    }


def _configurations() -> dict[str, tuple[str, dict]]:
    """name -> (collection, the request's filter fields)."""
    found: dict[str, tuple[str, dict]] = {"unfiltered": (OPEN, {})}
    for share, buckets in SHARES.items():
        groups = ["all"] if buckets == BUCKETS else [f"g{b}" for b in range(buckets)]
        found[f"access_{share}"] = (LISTED, {"user": "bench-user", "groups": groups})
        found[f"attribute_{share}"] = (OPEN, {"filters": {"attributes": {"bucket": {"$lt": buckets}}}})
    # The same 100 % through the largest group list a query may carry: a user in 1,000 groups, each of which admits
    # 0.1 % (the OR-chain trap of issue 23; the set's cost is per query and per segment, not per match).
    found["access_100_1000groups"] = (LISTED, {"user": "bench-user", "groups": [f"g{b}" for b in range(BUCKETS)]})
    return found


def _interleaved(
    server, cases: dict[str, tuple[str, str, dict]], queries: list[str], rights_server=None, warmup: int = 3
) -> dict:
    """{case: {"ms", "results", "short", "unexplained", "warnings", "timing", "rights_calls"}}: every case answers
    each query in turn. `unexplained`: queries with fewer than k results and no `stopped_early` warning."""
    session = server.session(server.admin_key)
    found: dict = {
        case: {"ms": [], "results": [], "short": 0, "unexplained": 0, "warnings": {}, "timing": {}, "rights_calls": []}
        for case in cases
    }

    def ask(collection: str, body: dict):
        response = session.post(server.url(f"/v1/collections/{collection}/query"), json=body)
        if response.status_code != 200:
            raise RuntimeError(f"query failed: {response.status_code} {response.text[:300]}")
        return response.json()

    for q in range(-warmup, len(queries)):
        text = queries[q % len(queries)]
        for case, (collection, mode, fields) in cases.items():
            body = {"query": text, "k": K, "mode": mode, **fields}
            calls = len(rights_server.requests) if rights_server is not None else 0
            began = time.perf_counter()
            answer = ask(collection, body)
            ms = (time.perf_counter() - began) * 1000
            if q < 0:
                continue
            row = found[case]
            row["ms"].append(ms)
            row["results"].append(len(answer["results"]))
            if rights_server is not None:
                row["rights_calls"].append(len(rights_server.requests) - calls)
            codes = [warning["code"] for warning in answer["warnings"]]
            for code in codes:
                row["warnings"][code] = row["warnings"].get(code, 0) + 1
            row["unexplained"] += len(answer["results"]) < K and "stopped_early" not in codes
            for part, value in answer["timing_ms"].items():
                row["timing"].setdefault(part, []).append(value)
            if len(answer["results"]) < K:
                # Fewer than k: short only when more exist (a keyword query's words may occur in fewer chunks).
                more = ask(collection, {**body, "k": 100})
                row["short"] += len(more["results"]) > len(answer["results"])
    return found


def _summary(row: dict) -> dict:
    return {
        "p50_ms": round(median(row["ms"]), 2),
        "p99_ms": round(percentile(row["ms"], 99), 2),
        "min_results": min(row["results"]),
        "mean_results": round(sum(row["results"]) / len(row["results"]), 2),
        "short": row["short"],
        "unexplained": row["unexplained"],
        "warnings": row["warnings"],
        **({"rights_calls_mean": round(float(np.mean(row["rights_calls"])), 2)} if any(row["rights_calls"]) else {}),
        "server_timing_ms_p50": {part: round(median(values), 2) for part, values in row["timing"].items()},
    }


def measure_rights(server, rights_server, documents: int, queries: list[str]) -> dict:
    """LISTED behind the external check allowing 1 % of its documents, asked by a user whose access list admits all,
    alternated with the unfiltered query on OPEN (public)."""
    admin = server.session(server.admin_key)
    secret = admin.post(server.url("/v1/rights-check-secret"))
    secret.raise_for_status()
    rights_server.secret = secret.json()["secret"].encode()
    rights_server.allowed = {_document_id(d) for d in range(documents) if d % BUCKETS < RIGHTS_BUCKETS}
    admin.put(
        server.url(f"/v1/collections/{LISTED}"),
        json={
            "rights_check_method": "external",
            "rights_check_method_configuration": {"url": rights_server.url, "timeout": 2},
        },
    ).raise_for_status()
    principal = {"user": "bench-user", "groups": ["all"]}
    cases = {}
    for mode in MODES:
        cases[f"{mode}/unfiltered"] = (OPEN, mode, {})
        cases[f"{mode}/rights_1"] = (LISTED, mode, principal)
    found = _interleaved(server, cases, queries, rights_server)
    if rights_server.bad_signatures:
        raise RuntimeError("the rights server saw bad signatures")
    return {case: _summary(row) for case, row in found.items()}


def node_env(search_url: str) -> dict[str, str]:
    """`kindex serve` on the node at `search_url` (KINDEX_SEARCH_URL) instead of the embedded index, in indices of
    their own (one shard, no replica: a one-node cluster), as a user runs it on a cluster."""
    return {
        "KINDEX_SEARCH_URL": search_url,
        "KINDEX_SEARCH_INDEX_PREFIX": f"kindex-bench-filtered-http-{os.getpid()}",
        "KINDEX_OPENSEARCH_SHARDS": "1",
        "KINDEX_OPENSEARCH_REPLICAS": "0",
    }


def run(
    documents: int = DOCUMENTS, queries: int = QUERIES, random: bool = False, search_url: str | None = None
) -> tuple[list[Figure], dict]:
    """`search_url`: the server searches the OpenSearch node there (the `filtered_http_node_*` figures) instead of
    the embedded index; its indices are deleted afterwards."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.support.rights_server import RightsServer

    started = time.perf_counter()
    chunks = documents * CHUNKS_PER_DOCUMENT
    vectors, texts = _corpus(chunks, random)
    query_texts = model_vectors.query_texts(queries)
    raw: dict = {"documents": documents, "chunks_per_collection": chunks, "queries": queries}
    raw["vectors"] = "random" if random else f"{MODEL} sentence sums (bench.model_vectors)"
    raw["engine"] = "embedded index" if search_url is None else "OpenSearch node (KINDEX_SEARCH_URL)"
    env = node_env(search_url) if search_url else {}
    log(f"filtered http ({raw['engine']}): corpus of {chunks} chunks ready in {time.perf_counter() - started:.0f} s")
    rights_server = RightsServer()
    try:
        with tempfile.TemporaryDirectory(prefix="kindex-bench-filtered-http-") as tmp:
            data_dir = Path(tmp) / "data"
            raw["prefill"] = prefill(data_dir, vectors, texts, env)
            log(f"filtered http: pre-filled {raw['prefill']}")
            with running_server(data_dir, {"KINDEX_DEFAULT_EMBEDDING_MODEL": MODEL, **env}) as server:
                raw["fields"] = put_fields(server, documents)
                log(f"filtered http: attributes and access lists PUT over HTTP: {raw['fields']}")
                load = [round(x, 2) for x in os.getloadavg()]
                configurations = _configurations()
                cases = {
                    f"{mode}/{name}": (collection, mode, fields)
                    for name, (collection, fields) in configurations.items()
                    for mode in MODES
                }
                found = _interleaved(server, cases, query_texts)
                for case, row in found.items():
                    raw[case] = _summary(row)
                    log(f"filtered http {case}: {raw[case]}")
                raw["rights"] = measure_rights(server, rights_server, documents, query_texts)
                log(f"filtered http rights: {raw['rights']}")
                raw["load_average_during"] = [load, [round(x, 2) for x in os.getloadavg()]]
            log("filtered http: server stopped")
        log("filtered http: data dir removed")
    finally:
        rights_server.close()
        if search_url:
            from kindex.adapters.aws.opensearch_index import opensearch_client

            # The pattern names the indices and their aliases, so an index can come up twice: gone is gone.
            client = opensearch_client(search_url, sigv4=False)
            client.indices.delete(index=f"{env['KINDEX_SEARCH_INDEX_PREFIX']}-*", ignore_unavailable=True)
    raw["p50_ratios"] = {
        case: round(raw[case]["p50_ms"] / raw[f"{case.split('/')[0]}/unfiltered"]["p50_ms"], 2)
        for case in cases
        if not case.endswith("/unfiltered")
    }
    # The server's own `search` time (timing_ms), without the query embedding and HTTP every row pays alike.
    raw["search_p50_ratios"] = {
        case: round(
            raw[case]["server_timing_ms_p50"]["search"]
            / max(raw[f"{case.split('/')[0]}/unfiltered"]["server_timing_ms_p50"]["search"], 1e-3),
            2,
        )
        for case in raw["p50_ratios"]
    }
    log(f"filtered http p50 ratios: {raw['p50_ratios']}; server search time only: {raw['search_p50_ratios']}")
    raw["seconds"] = round(time.perf_counter() - started)
    return _figures(raw), raw


def _figures(raw: dict) -> list[Figure]:
    node = raw["engine"] != "embedded index"
    prefix = "filtered_http_node" if node else "filtered_http"
    how = (
        f"over HTTP to kindex serve{' on the OpenSearch node (KINDEX_SEARCH_URL, lucene)' if node else ''}: "
        f"{raw['chunks_per_collection']} chunks a collection ({raw['vectors']}), chunks, "
        f"vectors and the fields of {raw['prefill']['fields_prefilled_documents']} documents a collection pre-filled "
        f"through the server's stores (as its rewrite writes them), the other documents' attributes/access PUT over "
        f"HTTP ({raw['fields']['documents_put']} PUTs, rewritten without embedding at "
        f"{raw['fields']['documents_rewritten_per_s']} documents/s); k={K}, {raw['queries']} queries embedded by the "
        f"server ({MODEL}), one client, "
        "configurations interleaved query by query; selectivity via access lists (user in groups) or `bucket < n`"
    )
    figures: list[Figure] = []

    def add(name: str, row: dict, reference_name: str, reference: dict, notes: str, short_counts: bool = True) -> None:
        figures.append(
            Figure(
                name,
                row["p50_ms"],
                "ms",
                section=SECTION,
                reference_name=reference_name,
                reference_value=reference["p50_ms"],
                notes=notes,
                details={
                    key: row[key]
                    for key in (
                        "p99_ms",
                        "min_results",
                        "mean_results",
                        "short",
                        "unexplained",
                        "warnings",
                        "rights_calls_mean",
                        "server_timing_ms_p50",
                    )
                    if key in row
                }
                | {"reference_p99_ms": reference["p99_ms"]},
            ).invalid_unless(
                not short_counts or row["short"] == 0,
                f"{row['short']} queries returned fewer than k results although more existed",
            )
        )

    for case in raw["p50_ratios"]:
        mode, name = case.split("/")
        add(
            f"{prefix}_p50_ms_{mode}_{name.replace('.', '')}",
            raw[case],
            f"{prefix}_p50_ms_{mode}_unfiltered",
            raw[f"{mode}/unfiltered"],
            how,
        )
        if mode != "keyword" and raw[case]["min_results"] != K:
            figures[-1].invalid_unless(False, f"a {mode} query returned fewer than {K}")
    rights = raw["rights"]
    for mode in MODES:
        add(
            f"{prefix}_p50_ms_{mode}_rights_1",
            rights[f"{mode}/rights_1"],
            f"{prefix}_p50_ms_{mode}_unfiltered (alternated with it)",
            rights[f"{mode}/unfiltered"],
            how + "; external rights check (RightsServer on 127.0.0.1, HMAC verified) allowing 1 % of the "
            "documents, asked by a user whose access list admits all, alternated with the unfiltered query; "
            "fewer than k must come with a stopped_early warning (`unexplained` counts those without)",
            short_counts=False,
        )
        row = rights[f"{mode}/rights_1"]
        figures[-1].invalid_unless(
            row["unexplained"] == 0, f"{row['unexplained']} queries short of k without a warning"
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=DOCUMENTS)
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--random", action="store_true", help="random unit vectors instead of the model's")
    parser.add_argument("--node", metavar="URL", help="kindex serve on the OpenSearch node at URL")
    options = parser.parse_args()
    _, raw = run(options.documents, options.queries, options.random, options.node)
    print(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
