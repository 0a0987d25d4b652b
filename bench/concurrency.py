"""Queries from 16 concurrent clients against `kindex serve`, beside one client, in the same run.

For the default local model (figures without a suffix) and for MiniLM (`_minilm`): 10k chunks (1,000 documents of
10) in one collection, written straight into the stores (as the 100k query benchmark does) with that model's
vectors: each distinct sentence of a 2,000-sentence pool is embedded once and a chunk's vector is the sum of its
sentences' vectors, so building takes seconds instead of the ~6 minutes that embedding 10k whole chunks would.
Every query is embedded by the server with that model, which is the point: the query embedding is part of every
latency figure here.

One client: warm-up, then REQUESTS hybrid queries in sequence over a kept-alive connection. Sixteen clients: each on
its own kept-alive connection, REQUESTS_PER_CLIENT hybrid queries each, all at once. The two phases alternate round
by round (`alternate`) on the same server. Latency is per request (wall time at the client); throughput is requests
divided by the wall time of the phase, per round.
"""

from __future__ import annotations

import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import (
    Figure,
    SyntheticCorpus,
    alternate,
    log,
    median,
    paired_ratios,
    percentile,
    running_server,
    spread,
)
from kindex.settings import LOCAL_DEFAULT_MODEL

DEFAULT_MODEL = LOCAL_DEFAULT_MODEL  # figures without a suffix
MINILM = "local:all-MiniLM-L6-v2"
MODELS = (DEFAULT_MODEL, MINILM)
SHORT = {DEFAULT_MODEL: "local", MINILM: "minilm"}
COLLECTION = "bench"
DOCUMENTS = 1_000
SENTENCE_POOL = 2_000
CLIENTS = 16
REQUESTS = 100
REQUESTS_PER_CLIENT = 12
WARMUP = 10
# Each phase takes ~2-4 s; 20 s a side (issue 14: >= 20 s of work per measurement) is ~1 min per model.
MIN_SECONDS = 20.0
MIN_ROUNDS = 3


def _ask(session, url: str, query: str) -> float:
    started = time.perf_counter()
    response = session.post(url, json={"query": query, "k": 10, "mode": "hybrid", "user": "ann"})
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200 or not response.json()["results"]:
        raise RuntimeError(f"query failed: {response.status_code} {response.text[:300]}")
    return elapsed


def measure(server, queries: list[str], *, min_seconds: float = MIN_SECONDS, min_rounds: int = MIN_ROUNDS) -> dict:
    """The one-client phase and the sixteen-client phase alternated (`alternate`, order reversed each round) on the
    same server and queries, until each has run `min_seconds`; every request's latency and each phase's wall time."""
    url = server.url(f"/v1/collections/{COLLECTION}/query")
    single = server.session(server.admin_key)
    for query in queries[:WARMUP]:
        _ask(single, url, query)
    local = threading.local()

    def client_session():
        if not hasattr(local, "session"):
            local.session = server.session(server.admin_key)
            _ask(local.session, url, queries[0])  # open the connection before the clock starts
        return local.session

    work = [queries[(i * 7) % len(queries)] for i in range(CLIENTS * REQUESTS_PER_CLIENT)]
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(lambda _: client_session(), range(CLIENTS * 4)))
        runs = alternate(
            {
                "one": lambda: {"ms": [_ask(single, url, q) for q in queries[WARMUP : WARMUP + REQUESTS]]},
                "many": lambda: {"ms": list(pool.map(lambda q: _ask(client_session(), url, q), work))},
            },
            min_seconds=min_seconds,
            min_rounds=min_rounds,
        )
    return {
        side: {"ms": [[round(x, 3) for x in r["ms"]] for r in found], "seconds": [r["seconds"] for r in found]}
        for side, found in runs.items()
    }


def _figures(model: str, build: dict, result: dict) -> list[Figure]:
    one_rounds, many_rounds = result["one"]["ms"], result["many"]["ms"]
    one = [x for r in one_rounds for x in r]
    many = [x for r in many_rounds for x in r]
    one_qps = [len(r) / s for r, s in zip(one_rounds, result["one"]["seconds"])]
    many_qps = [len(r) / s for r, s in zip(many_rounds, result["many"]["seconds"])]
    p50_ratios = paired_ratios([median(r) for r in many_rounds], [median(r) for r in one_rounds])
    qps_ratios = paired_ratios(many_qps, one_qps)
    log(
        f"concurrency {model}: one client p50 {median(one):.1f} ms p99 {percentile(one, 99):.1f} ms "
        f"{median(one_qps):.1f}/s; {CLIENTS} clients p50 {median(many):.1f} ms p99 {percentile(many, 99):.1f} ms "
        f"{median(many_qps):.1f}/s; {len(one_rounds)} rounds"
    )
    notes = (
        f"{build['chunks']} chunks written into the stores with {model} vectors (sentence sums); hybrid, k=10, "
        f"every query embedded by the server with {model}; {CLIENTS} clients x {REQUESTS_PER_CLIENT} requests "
        f"on kept-alive connections, alternated round by round ({len(one_rounds)} rounds, order reversed each "
        f"round) with {REQUESTS} sequential requests from one client on the same server; percentiles over all "
        f"rounds' requests, spreads over the rounds' p50s and queries/s"
    )
    section = "query concurrency"
    suffix = "" if model == DEFAULT_MODEL else f"_{SHORT[model]}"
    figures = [
        Figure(
            f"query_p50_ms_concurrent16{suffix}",
            median(many),
            "ms",
            "one client p50",
            median(one),
            section=section,
            notes=notes,
            spread=spread([median(r) for r in many_rounds]),
            ratio_spread=spread(p50_ratios),
        ),
        Figure(
            f"query_p99_ms_concurrent16{suffix}",
            percentile(many, 99),
            "ms",
            "one client p99",
            percentile(one, 99),
            section=section,
            notes=notes,
        ),
        # No ratio here is impossible: one client leaves the cores idle while its request travels, so sixteen may
        # serve more than cores x its rate; nothing is flagged.
        Figure(
            f"queries_per_s_concurrent16{suffix}",
            median(many_qps),
            "queries/s",
            "one client",
            median(one_qps),
            ratio=round(median(qps_ratios), 4),
            section=section,
            notes=notes,
            spread=spread(many_qps),
            ratio_spread=spread(qps_ratios),
        ),
    ]
    if model != DEFAULT_MODEL:
        figures += [
            Figure(
                f"query_p50_ms_10k_hybrid{suffix}",
                median(one),
                "ms",
                section=section,
                notes=notes,
                spread=spread([median(r) for r in one_rounds]),
            ),
            Figure(f"query_p99_ms_10k_hybrid{suffix}", percentile(one, 99), "ms", section=section, notes=notes),
        ]
    return figures


def run(models: tuple[str, ...] = MODELS, min_seconds: float = MIN_SECONDS) -> tuple[list[Figure], dict]:
    from bench.query_latency import write_directly

    corpus = SyntheticCorpus(seed=31)
    queries = [corpus.query() for _ in range(WARMUP + REQUESTS)]
    figures: list[Figure] = []
    raw: dict = {}
    for model in models:
        log(
            f"concurrency {model}: one client and {CLIENTS} clients alternated, >= {min_seconds:.0f} s each "
            f"(about {2.5 * min_seconds + 20:.0f} s with the build)"
        )
        with tempfile.TemporaryDirectory(prefix="kindex-bench-concurrency-") as tmp:
            data_dir = Path(tmp) / "data"
            build = write_directly(data_dir, DOCUMENTS, model=model, sentence_pool=SENTENCE_POOL)
            log(f"concurrency: built {build}")
            with running_server(data_dir, {"KINDEX_DEFAULT_EMBEDDING_MODEL": model}) as server:
                result = measure(server, queries, min_seconds=min_seconds)
        figures += _figures(model, build, result)
        raw[SHORT[model]] = {"build": build, "one_ms": result["one"]["ms"], "many_ms": result["many"]["ms"]}
    return figures, raw
