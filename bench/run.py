"""`make bench`: every benchmark in one run, a table on stdout, bench/results.json and bench/*.png.

    python -m bench.run [--only ingest,embedding,query,vector,opensearch,chunking,cold,economy,keyword,filtered,
                                peers,vector1m]
                        [--quick] [--keep-others]

`vector1m` (one million vectors, ~12 min on 2 cores) is not in the default run; ask for it with --only.

The `opensearch` section needs a node (`make opensearch`); without one it logs that it skipped and adds nothing.

The SciFact figures come from `make eval` (python -m bench.eval_retrieval), which takes longer than this whole
run on 2 cores: when bench/retrieval_results.json exists its figures are folded in, marked as produced by
`make eval` with that run's date; otherwise they are listed as missing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

from bench.common import RESULTS_PATH, SCIFACT_RESULTS_PATH, Figure, log, machine_info, versions
from bench.readme import SUMMARY, markdown_table

SECTIONS = (
    "ingest",
    "embedding",
    "query",
    "concurrency",
    "vector",
    "opensearch",
    "chunking",
    "cold",
    "economy",
    "keyword",
    "filtered",
    "peers",
    "vector1m",
)
DEFAULT_SECTIONS = SECTIONS[:-1]
# Expected seconds of each section on a quiet 2-core machine (logged before each section; the sections that alternate
# sides run until the fastest side has worked its minimum, so their length follows the speed ratios).
ESTIMATED_SECONDS = {
    "ingest": 215,
    "embedding": 205,
    "query": 105,
    "concurrency": 260,  # two servers (batching on, and the way before) alternated
    "vector": 15,
    "opensearch": 420,
    "chunking": 160,
    "cold": 20,
    "economy": 5,
    "keyword": 85,
    "filtered": 960,  # 613 s at load 7-15 (155 s of it pre-fill, 117 s removing the data dir), + ~600 s on the node
    "peers": 150,
    "vector1m": 710,
}
REQUIRED = (
    "ingest_ratio_minilm",
    "query_p50_ms_100k_hybrid",
    "query_p99_ms_100k_hybrid",
    "vector_recall10_100k",
    "maxchars_mb_per_s",
    "cold_import_ms_query",
    "reembed_calls_unchanged",
    "scifact_ndcg10_hybrid_local",
    "scifact_ndcg10_vector_local",
    "scifact_ndcg10_keyword",
    "ingest_chunks_per_s_bge_small_q_speedup",
    "embed_min_cosine_bge_small_q_tuned",
)


def _quiet() -> None:
    # Benchmarks print their own progress; per-document INFO logs and Powertools' empty-metrics warnings
    # would only bury it (and cost time).
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    warnings.filterwarnings("ignore", message="No application metrics to publish")


def run_sections(sections: tuple[str, ...], quick: bool) -> tuple[list[Figure], dict, dict]:
    figures: list[Figure] = []
    raw: dict = {}
    seconds: dict[str, float] = {}
    loads: dict[str, dict] = {}
    if not quick:
        total = sum(ESTIMATED_SECONDS.get(section, 0) for section in sections)
        log(f"sections {', '.join(sections)}: about {total / 60:.0f} min in all on a quiet 2-core machine")
    for section in sections:
        started = time.perf_counter()
        loads[section] = {"before": _load_average()}
        estimate = "" if quick else f" (about {ESTIMATED_SECONDS.get(section, 0) / 60:.1f} min)"
        log(f"section {section}{estimate}")
        if section in ("ingest", "embedding"):
            figures += _throughput_section(section, quick)
        elif section == "query":
            from bench import query_latency

            if quick:
                query_latency.REQUESTS = {"10k": 20, "100k": 20}
            found, raw["query_latency"] = query_latency.run({"10k": 50, "100k": 500} if quick else None)
            figures += found
        elif section == "concurrency":
            from bench import concurrency

            if quick:
                concurrency.DOCUMENTS, concurrency.REQUESTS, concurrency.REQUESTS_PER_CLIENT = 100, 20, 3
            found, raw["concurrency"] = concurrency.run(min_seconds=0.0 if quick else concurrency.MIN_SECONDS)
            figures += found
        elif section in ("vector", "opensearch", "keyword", "vector1m", "filtered", "peers"):
            figures += _vector_index_section(section, quick)
        elif section == "chunking":
            from bench import chunking

            figures += chunking.run(
                megabytes=0.5 if quick else chunking.MEGABYTES, min_seconds=0.0 if quick else chunking.MIN_SECONDS
            )
        elif section == "cold":
            from bench import cold_start

            figures += cold_start.run(repeats=1 if quick else cold_start.REPEATS)
        elif section == "economy":
            from bench import economy

            figures += economy.run()
        seconds[section] = round(time.perf_counter() - started, 1)
        loads[section]["after"] = _load_average()
        log(f"section {section} took {seconds[section]} s (load average {loads[section]})")
    raw["section_load_average"] = loads
    return figures, raw, seconds


def _load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _throughput_section(section: str, quick: bool) -> list[Figure]:
    """Ingest through the pipeline, or the local embedders' batching before and after tuning."""
    if section == "embedding":
        from bench import embedding

        return embedding.run(
            min_seconds=0.0 if quick else embedding.MIN_SECONDS, documents_count=2 if quick else embedding.DOCUMENTS
        )
    from bench import ingest

    if quick:
        ingest.WORKLOADS["hash:384"].update(documents=30)
        ingest.WORKLOADS["local:all-MiniLM-L6-v2"].update(documents=2)
        ingest.WORKLOADS["local:bge-small-en-v1.5-q"].update(documents=2)
    return ingest.run(min_seconds=0.0 if quick else ingest.MIN_SECONDS)


def _vector_index_section(section: str, quick: bool) -> list[Figure]:
    """The embedded index alone (its keyword half, its vectors at 100k and at 1M), or beside the OpenSearch adapter
    on a node or an embedded peer (LanceDB) on the same vectors and queries."""
    if section == "keyword":
        from bench import keyword_index

        return keyword_index.run(quick)
    if section == "filtered":
        return _filtered_section(quick)
    if section == "peers":
        from bench import peers

        return peers.run(count=10_000 if quick else 100_000, queries=50 if quick else 200)[0]
    if section == "vector1m":
        from bench import vector_index

        return vector_index.million(count=160_000 if quick else 1_000_000, queries=50 if quick else 200)
    if section == "vector":
        from bench import vector_index

        return vector_index.knn_testdata() + vector_index.random_100k(
            count=10_000 if quick else 100_000, queries=50 if quick else 200
        )
    from bench import opensearch_index

    return opensearch_index.run(
        count=10_000 if quick else 100_000, queries=50 if quick else 200, others=1_000 if quick else 10_000
    )


def _filtered_section(quick: bool) -> list[Figure]:
    """Filtered search over HTTP against `kindex serve` (access lists, attribute filters, the external rights check
    at 1 %), on the embedded index and - when a node answers - the same over HTTP with the server on the OpenSearch
    node (`filtered_http_node_*`), then each leg of the OpenSearch adapter alone on the node. The in-process figures
    of the embedded index alone (`python -m bench.filtered`) are not part of it: the section's time goes to the
    HTTP path a user meets, whose per-row server timings show the search part."""
    from bench import filtered_http, opensearch_filtered
    from bench.opensearch_index import node_url

    documents = 300 if quick else filtered_http.DOCUMENTS
    queries = 4 if quick else filtered_http.QUERIES
    figures = filtered_http.run(documents, queries, random=quick)[0]
    url = node_url()
    if url is None:
        log("filtered http: no OpenSearch node answers (make opensearch); the node's figures are skipped")
    else:
        figures += filtered_http.run(documents, queries, random=quick, search_url=url)[0]
    return figures + opensearch_filtered.run(
        count=2_000 if quick else opensearch_filtered.FILTERED_SECTION_COUNT,
        queries=5 if quick else 40,
        min_seconds=0.0 if quick else 2.0,
        model=not quick,
        section=filtered_http.SECTION,
    )


def scifact_figures() -> tuple[list[dict], dict | None]:
    """The last `make eval` results, marked as such and stamped with that run's commit and date; none when it has not
    been run."""
    if not SCIFACT_RESULTS_PATH.exists():
        return [], None
    data = json.loads(SCIFACT_RESULTS_PATH.read_text())
    provenance = {
        "produced_by": data.get("produced_by"),
        "generated_at": data.get("generated_at"),
        "commit": (data.get("versions") or {}).get("git_commit"),
        "wall_seconds": data.get("wall_seconds"),
        "machine": data.get("machine"),
        "details": data.get("details"),
    }
    figures = []
    for figure in data["figures"]:
        figure = dict(figure)
        figure["notes"] = f"from `make eval` at {data.get('generated_at')}; " + figure.get("notes", "")
        figures.append(stamped(figure, provenance["commit"], data.get("generated_at"), data.get("produced_by")))
    return figures, provenance


def stamped(figure: dict, commit: str | None, measured_at: str | None, produced_by: str | None) -> dict:
    """`figure` with the run that measured it (commit, date, command), unless it already names one."""
    figure.setdefault("commit", commit)
    figure.setdefault("measured_at", measured_at)
    figure.setdefault("produced_by", produced_by)
    return figure


def carry_over(results: dict, previous: dict, sections: tuple[str, ...] = ()) -> dict:
    """`results` plus the figures of `previous` it did not measure again. Each kept figure keeps the commit, date and
    command of the run that measured it (from its own stamp; for a file written before figures carried stamps, from
    the oldest of that file's run records that lists it, else from that file's run), and `carried_over` lists them
    flat, one entry per figure: a figure is never nested inside another run's record. After a run of every default
    section, a figure an earlier `make bench` of default sections measured and this run did not is gone from the
    code (renamed or dropped), so it is not kept: what stays is what other commands measure (`--only vector1m`,
    `make eval`, `make eval-docs`)."""
    measured = {figure["name"] for figure in results["figures"]}
    origins: dict[str, tuple] = {}
    for record in previous.get("carried_over", []):
        if "figures" in record:  # a run record of the old, nested layout
            for name in record["figures"]:
                origins.setdefault(
                    name, (record.get("from_commit"), record.get("from_generated_at"), record.get("from_produced_by"))
                )
    fallback = (
        (previous.get("versions") or {}).get("git_commit"),
        previous.get("generated_at"),
        previous.get("produced_by"),
    )
    kept = [
        stamped(dict(figure), *origins.get(figure["name"], fallback))
        for figure in previous["figures"]
        if figure["name"] not in measured
    ]
    if set(DEFAULT_SECTIONS) <= set(sections):
        kept = [figure for figure in kept if not _default_sections_only(figure.get("produced_by"))]
    merged = dict(results, figures=results["figures"] + kept)
    merged["section_seconds"] = dict(results["section_seconds"])
    merged["raw"] = dict(results["raw"])
    merged["carried_over"] = [
        {
            "figure": figure["name"],
            "commit": figure["commit"],
            "measured_at": figure["measured_at"],
            "produced_by": figure["produced_by"],
        }
        for figure in kept
    ]
    merged["missing_required"] = [name for name in REQUIRED if name not in {f["name"] for f in merged["figures"]}]
    return merged


def _default_sections_only(produced_by: str | None) -> bool:
    """Whether a figure's command was `make bench` over default sections only (so a full run would measure it)."""
    if not produced_by or "bench.run" not in produced_by:
        return False
    words = produced_by.replace(")", " ").split()
    if "--only" not in words:
        return True
    asked = words[words.index("--only") + 1].split(",")
    return set(asked) <= set(DEFAULT_SECTIONS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kindex benchmarks")
    parser.add_argument("--only", help="comma-separated sections: " + ",".join(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="tiny workloads (a smoke run; figures not meaningful)")
    parser.add_argument("--output", help="default bench/results.json (with --quick: bench/results-quick.json)")
    parser.add_argument(
        "--keep-others",
        action="store_true",
        help="keep the figures of the existing output that this run does not measure (marked as such)",
    )
    args = parser.parse_args(argv)
    args.output = args.output or str(RESULTS_PATH.with_name("results-quick.json") if args.quick else RESULTS_PATH)
    _quiet()
    sections = tuple(args.only.split(",")) if args.only else DEFAULT_SECTIONS
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}")
    started = time.perf_counter()
    machine = machine_info()
    measured, raw, seconds = run_sections(sections, args.quick)
    generated_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    produced_by = (
        "make bench (python -m bench.run"
        + (" --quick" if args.quick else "")
        + (f" --only {args.only}" if args.only else "")
        + ")"
    )
    run_versions = versions()
    figures = [stamped(f.to_json(), run_versions.get("git_commit"), generated_at, produced_by) for f in measured]
    eval_figures, eval_provenance = scifact_figures()
    figures += eval_figures
    wall = time.perf_counter() - started
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    machine["load_average_at_end"] = [round(x, 2) for x in load] if load else None
    missing = [name for name in REQUIRED if name not in {f["name"] for f in figures}]
    results = {
        "produced_by": produced_by,
        "generated_at": generated_at,
        "wall_seconds": round(wall, 1),
        "section_seconds": seconds,
        "machine": machine,
        "versions": run_versions,
        "figures": figures,
        "scifact_source": eval_provenance,
        "missing_required": missing,
        "raw": raw,
    }
    if args.keep_others and Path(args.output).exists():
        results = carry_over(results, json.loads(Path(args.output).read_text()), sections)
        figures = results["figures"]
    with open(args.output, "w") as handle:
        json.dump(results, handle, indent=2)
        handle.write("\n")
    from bench.plots import write_plots

    plots = write_plots(results, Path(args.output).resolve().parent)
    print(markdown_table(figures, run_commit=run_versions.get("git_commit")))
    print()
    print("Summary (the README table):")
    print(markdown_table(figures, SUMMARY, run_commit=run_versions.get("git_commit")))
    print()
    print(f"wrote {args.output} and {', '.join(p.name for p in plots)} in {wall:.0f} s")
    invalid = [f["name"] for f in figures if f.get("valid") is False]
    if invalid:
        print(f"INVALID figures (their ratio is impossible; see invalid_reason): {', '.join(invalid)}")
    if Path(args.output).resolve() == RESULTS_PATH.resolve():  # the README shows what results.json says
        from bench import readme

        print("README.md benchmark table " + ("regenerated" if readme.update() else "unchanged"))
    missing = results["missing_required"]  # after carrying other runs' figures over, when asked to
    if missing:
        print(
            f"missing required figures: {', '.join(missing)}"
            + (" (run `make eval` for the SciFact ones)" if any(m.startswith("scifact") for m in missing) else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
