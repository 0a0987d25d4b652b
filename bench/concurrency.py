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

Beside it, the same phases against a second server on a copy of the data the way before issue 27 (REFERENCE_ENV:
KINDEX_QUERY_BATCHING=false, each query embedded alone, OpenBLAS's threads in every BLAS call, and no CPU slots:
all 32 request threads compute at once, each hybrid query's keyword leg on a second thread; and no query processes:
the server's one interpreter answers every query), in the same rounds: the `_batching` figures compare the two.
"""

from __future__ import annotations

import contextlib
import shutil
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
from kindex.adapters.embedders.windows import available_cores
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
# The reference server: each query embedded alone, OpenBLAS's own threads (one per core, its default) in every
# BLAS call, which `kindex serve` turned off (cli.py), and every request thread computing at once (no CPU slots, so
# a hybrid query's keyword leg runs on a second thread, as before: QueryService._legs). The query log's expiry index
# serves both (a fix, no switch).
REFERENCE_ENV = {
    "KINDEX_QUERY_BATCHING": "false",
    "OPENBLAS_NUM_THREADS": str(available_cores()),
    "KINDEX_CPU_SLOTS": "0",
    "KINDEX_QUERY_PROCESSES": "0",
}
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


def measure(
    server, queries: list[str], *, reference=None, min_seconds: float = MIN_SECONDS, min_rounds: int = MIN_ROUNDS
) -> dict:
    """The one-client phase and the sixteen-client phase alternated (`alternate`, order reversed each round) on the
    same server and queries, until each has run `min_seconds`; every request's latency and each phase's wall time.
    With `reference` (the same data served with query batching off), its two phases run in the same rounds too
    (`one_unbatched`, `many_unbatched`)."""
    servers = {"": server} if reference is None else {"": server, "_unbatched": reference}
    sides: dict = {}
    pools = []
    for tag, running in servers.items():
        one, many, pool = _phases(running, queries)
        sides[f"one{tag}"], sides[f"many{tag}"] = one, many
        pools.append(pool)
    try:
        runs = alternate(sides, min_seconds=min_seconds, min_rounds=min_rounds)
    finally:
        for pool in pools:
            pool.shutdown()
    return {
        side: {"ms": [[round(x, 3) for x in r["ms"]] for r in found], "seconds": [r["seconds"] for r in found]}
        for side, found in runs.items()
    }


def _phases(server, queries: list[str]):
    """The one-client and the sixteen-client phase of one server (warmed up, connections open), and their pool."""
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
    pool = ThreadPoolExecutor(CLIENTS)
    list(pool.map(lambda _: client_session(), range(CLIENTS * 4)))
    return (
        lambda: {"ms": [_ask(single, url, q) for q in queries[WARMUP : WARMUP + REQUESTS]]},
        lambda: {"ms": list(pool.map(lambda q: _ask(client_session(), url, q), work))},
        pool,
    )


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
    if "many_unbatched" in result:
        figures += _batching_figures(suffix, result, notes)
    return figures


def _batching_figures(suffix: str, result: dict, notes: str) -> list[Figure]:
    """Against the way before (a second server on a copy of the data with REFERENCE_ENV), its phases alternated in
    the same rounds: throughput and p99 under sixteen clients, and one client's p50."""
    reference = "batching off, OpenBLAS threads on, no CPU slots (the way before), same run"
    notes = f"{notes}; against a second server on a copy of the data with {REFERENCE_ENV}"
    section = "query concurrency"

    def qps(side: str) -> list[float]:
        return [len(r) / s for r, s in zip(result[side]["ms"], result[side]["seconds"])]

    def p50s(side: str) -> list[float]:
        return [median(r) for r in result[side]["ms"]]

    def every(side: str) -> list[float]:
        return [x for r in result[side]["ms"] for x in r]

    log(
        f"concurrency batching off: one client p50 {median(every('one_unbatched')):.1f} ms; {CLIENTS} clients "
        f"p99 {percentile(every('many_unbatched'), 99):.1f} ms {median(qps('many_unbatched')):.1f}/s"
    )
    qps_ratios = paired_ratios(qps("many"), qps("many_unbatched"))
    one_ratios = paired_ratios(p50s("one"), p50s("one_unbatched"))
    return [
        Figure(
            f"queries_per_s_concurrent16_batching{suffix}",
            median(qps("many")),
            "queries/s",
            reference,
            median(qps("many_unbatched")),
            ratio=round(median(qps_ratios), 4),
            section=section,
            notes=notes,
            spread=spread(qps("many")),
            ratio_spread=spread(qps_ratios),
        ),
        Figure(
            f"query_p99_ms_concurrent16_batching{suffix}",
            percentile(every("many"), 99),
            "ms",
            reference,
            percentile(every("many_unbatched"), 99),
            section=section,
            notes=notes,
        ),
        Figure(
            f"query_p50_ms_one_client_batching{suffix}",
            median(every("one")),
            "ms",
            reference,
            median(every("one_unbatched")),
            ratio=round(median(one_ratios), 4),
            section=section,
            notes=notes,
            spread=spread(p50s("one")),
            ratio_spread=spread(one_ratios),
        ),
    ]


def run(
    models: tuple[str, ...] = MODELS, min_seconds: float = MIN_SECONDS, reference: bool = True
) -> tuple[list[Figure], dict]:
    """`reference`: beside the server as configured, one on a copy of the data with query batching off."""
    from bench.query_latency import write_directly

    corpus = SyntheticCorpus(seed=31)
    queries = [corpus.query() for _ in range(WARMUP + REQUESTS)]
    figures: list[Figure] = []
    raw: dict = {}
    for model in models:
        sides = 4 if reference else 2
        log(
            f"concurrency {model}: one client and {CLIENTS} clients alternated, >= {min_seconds:.0f} s each "
            f"(about {1.25 * sides * min_seconds + 20:.0f} s with the build)"
        )
        with tempfile.TemporaryDirectory(prefix="kindex-bench-concurrency-") as tmp:
            data_dir = Path(tmp) / "data"
            build = write_directly(data_dir, DOCUMENTS, model=model, sentence_pool=SENTENCE_POOL)
            log(f"concurrency: built {build}")
            env = {"KINDEX_DEFAULT_EMBEDDING_MODEL": model}
            copy = Path(tmp) / "data-unbatched"
            if reference:  # copied before either server opens its data (each then creates its own admin key)
                shutil.copytree(data_dir, copy)
            with contextlib.ExitStack() as stack:
                server = stack.enter_context(running_server(data_dir, env))
                unbatched = None
                if reference:
                    unbatched = stack.enter_context(running_server(copy, {**env, **REFERENCE_ENV}))
                result = measure(server, queries, reference=unbatched, min_seconds=min_seconds)
        figures += _figures(model, build, result)
        raw[SHORT[model]] = {"build": build, **{f"{side}_ms": found["ms"] for side, found in result.items()}}
    return figures, raw
