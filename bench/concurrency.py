"""Queries from 16 concurrent clients against `kindex serve`, beside one client, in the same run.

10k chunks (1,000 documents of 10) in one collection, written straight into the stores (as the 100k query
benchmark does) with vectors from the default local model (`local:all-MiniLM-L6-v2`): each distinct sentence of a
2,000-sentence pool is embedded once and a chunk's vector is the sum of its sentences' vectors, so building takes
seconds instead of the ~6 minutes that embedding 10k whole chunks would. Every query is embedded by the server with
that model, which is the point: the query embedding is part of every latency figure here.

One client: warm-up, then REQUESTS hybrid queries in sequence over a kept-alive connection. Sixteen clients: each on
its own kept-alive connection, REQUESTS_PER_CLIENT hybrid queries each, all at once. Latency is per request (wall
time at the client); throughput is requests divided by the wall time of the whole phase.
"""

from __future__ import annotations

import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import Figure, SyntheticCorpus, log, median, percentile, running_server

MODEL = "local:all-MiniLM-L6-v2"
COLLECTION = "bench"
DOCUMENTS = 1_000
SENTENCE_POOL = 2_000
CLIENTS = 16
REQUESTS = 200
REQUESTS_PER_CLIENT = 25
WARMUP = 10


def _ask(session, url: str, query: str) -> float:
    started = time.perf_counter()
    response = session.post(url, json={"query": query, "k": 10, "mode": "hybrid", "user": "ann"})
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200 or not response.json()["results"]:
        raise RuntimeError(f"query failed: {response.status_code} {response.text[:300]}")
    return elapsed


def measure(server, queries: list[str]) -> dict:
    url = server.url(f"/v1/collections/{COLLECTION}/query")
    single = server.session(server.admin_key)
    for query in queries[:WARMUP]:
        _ask(single, url, query)
    started = time.perf_counter()
    one = [_ask(single, url, q) for q in queries[WARMUP:WARMUP + REQUESTS]]
    one_seconds = time.perf_counter() - started

    local = threading.local()

    def client_session():
        if not hasattr(local, "session"):
            local.session = server.session(server.admin_key)
            _ask(local.session, url, queries[0])  # open the connection before the clock starts
        return local.session

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(lambda _: client_session(), range(CLIENTS * 4)))
        work = [queries[(i * 7) % len(queries)] for i in range(CLIENTS * REQUESTS_PER_CLIENT)]
        started = time.perf_counter()
        many = list(pool.map(lambda q: _ask(client_session(), url, q), work))
        many_seconds = time.perf_counter() - started
    return {"one": one, "one_seconds": one_seconds, "many": many, "many_seconds": many_seconds}


def run() -> tuple[list[Figure], dict]:
    from bench.query_latency import write_directly

    corpus = SyntheticCorpus(seed=31)
    queries = [corpus.query() for _ in range(WARMUP + REQUESTS)]
    with tempfile.TemporaryDirectory(prefix="kindex-bench-concurrency-") as tmp:
        data_dir = Path(tmp) / "data"
        build = write_directly(data_dir, DOCUMENTS, model=MODEL, sentence_pool=SENTENCE_POOL)
        log(f"concurrency: built {build}")
        with running_server(data_dir, {"KINDEX_DEFAULT_EMBEDDING_MODEL": MODEL}) as server:
            result = measure(server, queries)
    one, many = result["one"], result["many"]
    one_qps = len(one) / result["one_seconds"]
    many_qps = len(many) / result["many_seconds"]
    log(f"concurrency: one client p50 {median(one):.1f} ms p99 {percentile(one, 99):.1f} ms {one_qps:.1f}/s; "
        f"{CLIENTS} clients p50 {median(many):.1f} ms p99 {percentile(many, 99):.1f} ms {many_qps:.1f}/s")
    notes = (f"{build['chunks']} chunks written into the stores with {MODEL} vectors (sentence sums); hybrid, k=10, "
             f"every query embedded by the server with {MODEL}; {CLIENTS} clients x {REQUESTS_PER_CLIENT} requests "
             f"on kept-alive connections, beside {REQUESTS} sequential requests from one client in the same run")
    section = "query concurrency"
    figures = [
        Figure("query_p50_ms_concurrent16", median(many), "ms", "one client p50", median(one), section=section,
               notes=notes),
        Figure("query_p99_ms_concurrent16", percentile(many, 99), "ms", "one client p99", percentile(one, 99),
               section=section, notes=notes),
        Figure("queries_per_s_concurrent16", many_qps, "queries/s", "one client", one_qps, section=section,
               notes=notes),
        Figure("query_p50_ms_10k_hybrid_minilm", median(one), "ms", section=section, notes=notes),
        Figure("query_p99_ms_10k_hybrid_minilm", percentile(one, 99), "ms", section=section, notes=notes),
    ]
    raw = {"build": build, "one_ms": [round(x, 3) for x in one], "many_ms": [round(x, 3) for x in many]}
    return figures, raw
