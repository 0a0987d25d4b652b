"""The README's benchmark block is the one bench/results.json gives (generated, never typed)."""

from __future__ import annotations

import json

import pytest

from bench import readme
from bench.common import RESULTS_PATH, Figure, alternate, cpu_vector_flags, spread

pytestmark = pytest.mark.unit


def test_readme_shows_what_the_results_file_says():
    text = readme.README.read_text(encoding="utf-8")
    shown = text[text.index(readme.START) : text.index(readme.END) + len(readme.END)]
    assert shown == readme.block(json.loads(RESULTS_PATH.read_text()))


def test_the_block_names_the_cpu_vector_extensions_a_run_recorded():
    # Given /proc/cpuinfo of an AVX2-only machine and of one with AVX-512 VNNI
    avx2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 fma bmi2\n"
    vnni = "flags\t\t: avx avx2 avx512f avx512bw avx512_vnni\nflags\t\t: other\n"
    # Then the recorded flags are those of the first flags line, in VECTOR_FLAGS order, none without a flags line
    assert cpu_vector_flags(avx2) == ["avx2"]
    assert cpu_vector_flags(vnni) == ["avx2", "avx512f", "avx512bw", "avx512_vnni"]
    assert cpu_vector_flags("model name\t: something\n") == []
    # And the README block names them beside the cores, and says nothing for a run made before they were recorded
    run = {"machine": {"cpu_model": "AMD EPYC", "cores": 2, "cpu_vector_flags": ["avx2"]}, "versions": {}}
    assert "on AMD EPYC (2 cores, avx2," in readme.block(run)
    assert "on AMD EPYC (2 cores," in readme.block({**run, "machine": {"cpu_model": "AMD EPYC", "cores": 2}})


def test_an_invalid_figure_is_struck_through_with_its_reason_and_spreads_are_shown():
    figure = Figure(
        "ingest_chunks_per_s_x",
        120.0,
        "chunks/s",
        "raw embedder x",
        100.0,
        spread=spread([110.0, 120.0, 130.0]),
        ratio_spread=spread([1.1, 1.2, 1.3]),
    )
    figure.invalid_unless(figure.ratio <= 1.05, "faster than its own embedder")
    table = readme.markdown_table([figure.to_json()])
    assert "~~`ingest_chunks_per_s_x`~~ invalid: faster than its own embedder" in table
    assert "110 – 130 (n=3)" in table and "1.100 – 1.300 (n=3)" in table
    assert figure.load_average is not None


def test_alternate_reverses_the_order_each_round_until_both_sides_did_enough_work():
    order: list[str] = []
    runs = alternate(
        {"a": lambda: order.append("a") or {"x": 1}, "b": lambda: order.append("b") or {"x": 2}},
        min_seconds=0.0,
        min_rounds=4,
    )
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [r["x"] for r in runs["a"]] == [1] * 4 and all("seconds" in r for r in runs["b"])


def test_figures_kept_from_other_runs_say_their_own_commit_flat_never_nested():
    from bench.run import carry_over

    def run(commit: str, at: str, names: list[str], previous: dict | None = None) -> dict:
        results = {
            "produced_by": f"make bench at {commit}",
            "generated_at": at,
            "versions": {"git_commit": commit},
            "section_seconds": {},
            "raw": {},
            "figures": [
                {"name": n, "value": 1.0, "unit": "x", "reference_name": None, "reference_value": None, "ratio": None}
                | {"commit": commit, "measured_at": at}
                for n in names
            ],
        }
        return carry_over(results, previous) if previous else results

    # Given a vector1m run at c1, a full run at c2 that kept it, and a third run at c3 that measured only `a`
    first = run("c1", "day1", ["vector_recall10_1m"])
    # (an old file whose figures carry no stamps of their own is stamped from its run)
    del first["figures"][0]["commit"], first["figures"][0]["measured_at"]
    second = run("c2", "day2", ["a", "b"], first)
    third = run("c3", "day3", ["a"], second)

    # Then each figure names the run that measured it, and carried_over is one flat entry per kept figure
    by_name = {f["name"]: f for f in third["figures"]}
    assert (by_name["a"]["commit"], by_name["b"]["commit"], by_name["vector_recall10_1m"]["commit"]) == (
        "c3",
        "c2",
        "c1",
    )
    assert by_name["vector_recall10_1m"]["measured_at"] == "day1"
    assert sorted((e["figure"], e["commit"]) for e in third["carried_over"]) == [
        ("b", "c2"),
        ("vector_recall10_1m", "c1"),
    ]
    assert all(set(e) == {"figure", "commit", "measured_at", "produced_by"} for e in third["carried_over"])
    # and the README table names the commit of every figure that is not the run's own
    table = readme.markdown_table(third["figures"], run_commit="c3")
    assert "`b` (at c2, day2)" in table and "`vector_recall10_1m` (at c1, day1)" in table
    assert "`a` (at" not in table


def test_a_full_run_keeps_only_what_other_commands_measured_with_their_true_origin():
    from bench.run import DEFAULT_SECTIONS, carry_over

    def figure(name: str, **stamp) -> dict:
        return {"name": name, "value": 1.0, "unit": "x", "reference_name": None, "reference_value": None} | stamp

    # Given a file of the old layout: figures without stamps, their origins in nested run records
    previous = {
        "generated_at": "day3",
        "produced_by": "make bench (python -m bench.run --only ingest,embedding)",
        "versions": {"git_commit": "c3"},
        "figures": [
            figure("vector_recall10_1m"),
            figure("opensearch_recall10_100k"),  # a name the opensearch section no longer writes
            figure("scifact_ndcg10_hybrid_minilm"),  # folded by an old make eval, listed nowhere
            figure("docs_top3_hybrid_both", commit="c4", measured_at="day4", produced_by="python -m bench.eval_docs"),
            figure("query_p50_ms_10k_hybrid"),
        ],
        "carried_over": [
            {
                "from_commit": "c1",
                "from_generated_at": "day1",
                "from_produced_by": "make bench (python -m bench.run --only vector1m)",
                "figures": ["vector_recall10_1m"],
            },
            {
                "from_commit": "c2",
                "from_generated_at": "day2",
                "from_produced_by": "make bench (python -m bench.run --only chunking,opensearch)",
                "figures": ["vector_recall10_1m", "opensearch_recall10_100k"],
            },
        ],
    }
    results = {"figures": [figure("query_p50_ms_10k_hybrid", commit="c5")], "section_seconds": {}, "raw": {}}
    # When a run of every default section carries it over
    merged = carry_over(results, previous, DEFAULT_SECTIONS)
    # Then the one-million figure keeps its own run (the oldest record listing it), make eval-docs' figure its stamp,
    # and the figures no command of today writes are gone
    by_name = {f["name"]: f for f in merged["figures"]}
    assert set(by_name) == {"query_p50_ms_10k_hybrid", "vector_recall10_1m", "docs_top3_hybrid_both"}
    assert (by_name["vector_recall10_1m"]["commit"], by_name["vector_recall10_1m"]["measured_at"]) == ("c1", "day1")
    assert by_name["docs_top3_hybrid_both"]["commit"] == "c4"
    assert [e["figure"] for e in merged["carried_over"]] == ["vector_recall10_1m", "docs_top3_hybrid_both"]
    # And a partial run keeps everything it did not measure (it cannot tell stale from not run)
    partial = carry_over(results, previous, ("query",))
    assert len(partial["figures"]) == 5
