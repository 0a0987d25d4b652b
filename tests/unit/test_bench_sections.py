"""The bench sections' own pieces: pairing rounds, the vector check, bca827d's way, invalid figures, and how each
section alternates its sides (chunking, OpenSearch builds, cold start, concurrency)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import embedding
from bench.common import paired_ratios
from kindex.adapters.embedders.windows import available_cores

pytestmark = pytest.mark.unit


def test_paired_ratios_pair_round_i_with_round_i_and_refuse_unequal_rounds():
    assert paired_ratios([30.0, 60.0, 45.0], [20.0, 30.0, 45.0]) == [1.5, 2.0, 1.0]
    with pytest.raises(ValueError):
        paired_ratios([1.0, 2.0], [1.0])


def test_row_cosines_compare_row_i_with_row_i():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    b = np.array([[2.0, 0.0], [1.0, 0.0], [-3.0, -4.0]])
    np.testing.assert_allclose(embedding.row_cosines(a, b), [1.0, 0.0, -1.0], atol=1e-12)
    with pytest.raises(ValueError):
        embedding.row_cosines(a, b[:2])


@pytest.mark.slow
@pytest.mark.parametrize("model", [embedding.BGE_Q, embedding.MINILM])
def test_the_before_side_is_one_session_over_all_cores_in_sorted_batches_of_8(model):
    before = embedding.before_embedder(model)
    assert (before.workers, before.batch_size, before.bucketed) == (1, 8, True)
    # bca827d's session: all cores, onnxruntime's memory arena on (its default)
    assert embedding.session_settings(model, before) == (available_cores(), True)


def _found(after_e2e, after_raw, before_e2e, before_raw, cosine_after=1.0):
    speeds = {"after_e2e": after_e2e, "after_raw": after_raw, "before_e2e": before_e2e, "before_raw": before_raw}
    return {
        "chunks": 100,
        "speeds": speeds,
        "seconds": {side: 21.0 for side in speeds},
        "first_pass": {"before": 40.0, "after": 50.0},
        "paired_e2e": paired_ratios(after_e2e, before_e2e),
        "paired_raw": paired_ratios(after_raw, before_raw),
        "e2e_over_raw": {
            side: paired_ratios(speeds[f"{side}_e2e"], speeds[f"{side}_raw"]) for side in ("before", "after")
        },
        "min_cosine": {"after": cosine_after, "before": 0.995},
        "median_cosine": {"after": 1.0, "before": 0.998},
    }


def test_figures_report_the_paired_speedup_against_the_goal():
    # Given three rounds where after ran 1.6, 2.0 and 1.8x faster than before end to end
    found = _found([48.0, 60.0, 54.0], [60.0, 70.0, 65.0], [30.0, 30.0, 30.0], [35.0, 36.0, 34.0])
    figures = {f.name: f for f in embedding.figures_for(embedding.BGE_Q, found, 16)}
    tuned = figures["ingest_chunks_per_s_bge_small_q_tuned"]
    speedup = figures["ingest_chunks_per_s_bge_small_q_speedup"]
    # Then the tuned figure is the median after, its ratio the median paired ratio, and the goal is met
    assert (tuned.value, tuned.reference_value, tuned.ratio) == (54.0, 30.0, 1.8)
    assert tuned.ratio_spread == {"min": 1.6, "median": 1.8, "max": 2.0, "n": 3} and tuned.valid
    assert (speedup.value, speedup.reference_value, speedup.ratio) == (1.8, 1.5, 1.2)
    assert figures["embed_min_cosine_bge_small_q_tuned"].ratio >= 1.0
    assert "quantises" in figures["embed_min_cosine_bge_small_q_before"].notes


def test_an_ingest_faster_than_its_own_embedder_marks_the_figures_invalid():
    # Given one round where the before side's ingest beat its own raw embedder by 20 %
    found = _found([48.0, 60.0, 54.0], [60.0, 70.0, 65.0], [30.0, 42.0, 30.0], [35.0, 35.0, 34.0])
    figures = {f.name: f for f in embedding.figures_for(embedding.MINILM, found, 16)}
    # Then the ingest and speedup figures say they cannot be right, and why
    for name in ("ingest_chunks_per_s_minilm_tuned", "ingest_chunks_per_s_minilm_speedup"):
        assert not figures[name].valid and "before 1.200" in figures[name].invalid_reason
    assert figures["embed_chunks_per_s_minilm_tuned"].valid


def test_chunking_candidates_alternate_and_each_round_makes_its_passes():
    # Given two fake splitters that record when they run
    from bench import chunking

    calls: list[str] = []
    candidates = {
        "kindex": lambda text: calls.append("k") or text.split("."),
        "other": lambda text: calls.append("o") or text.split(" "),
    }
    # When they are measured on a small text with no time floor
    found = chunking.measure(candidates, "a b. c d. e f." * 50, min_seconds=0.0, min_rounds=3)
    # Then each has three rounds of MB/s, and its chunk count is that of the whole text
    assert [len(found["speeds"][name]) for name in candidates] == [3, 3]
    assert found["counts"] == {"kindex": 151, "other": 251} and found["passes"] == {"kindex": 1, "other": 1}
    # And after the warm-up and two calibration passes each, the rounds run k o, o k, k o
    assert calls[6:] == ["k", "o", "o", "k", "k", "o"]


def test_opensearch_and_embedded_builds_take_turns_batch_by_batch():
    from bench import opensearch_index

    order: list[tuple[str, int]] = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def upsert(self, model, batch):
            order.append((self.name, len(batch)))

    records = list(range(3 * opensearch_index.BATCH))
    sides = {"os": (Recorder("os"), "m"), "embedded": (Recorder("embedded"), "m")}
    built = opensearch_index.build_all(sides, records, exact_side="embedded")
    assert order == [
        ("os", opensearch_index.BATCH),
        ("embedded", opensearch_index.BATCH),
        ("embedded", opensearch_index.BATCH),
        ("os", opensearch_index.BATCH),
        ("os", opensearch_index.BATCH),
        ("embedded", opensearch_index.BATCH),
    ]
    assert all(len(built["rates"][name]) == 3 and built["seconds"][name] > 0 for name in sides)


def test_cold_start_samples_interleave_functions_and_references(monkeypatch):
    from bench import cold_start

    sampled: list[str] = []

    def profile(module):
        sampled.append(module)
        # api loads Powertools yet "imports" faster than a bare Powertools import: impossible
        ms = {"functions.api": 10.0, "aws_lambda_powertools": 30.0}.get(module, 100.0 + len(sampled))
        return ms, frozenset({module, "aws_lambda_powertools"} if module != "boto3" else {module})

    monkeypatch.setattr(cold_start, "import_profile", profile)
    figures = {f.name: f for f in cold_start.run(repeats=2)}
    modules = [f"functions.{name}" for name in cold_start.FUNCTIONS] + list(cold_start.REFERENCES)
    assert sampled == modules + modules[::-1]
    api, query = figures["cold_import_ms_api"], figures["cold_import_ms_query"]
    assert query.spread["n"] == 2 and query.ratio_spread["n"] == 2 and query.reference_name == "import boto3"
    assert query.valid and not api.valid and "aws_lambda_powertools" in api.invalid_reason


def test_importtime_output_is_read_as_the_statement_s_cumulative_time_and_every_module_loaded():
    from bench.cold_start import parse_importtime

    stderr = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 |   aws_lambda_powertools.shared",
            "import time:       200 |        300 | aws_lambda_powertools",
            "import time:       500 |       1500 |   kindex",
            "import time:       400 |       2400 | functions",
            "import time:      1000 |       4000 | functions.api",
        ]
    )
    ms, loaded = parse_importtime(stderr, "functions.api")
    assert ms == 6.4  # functions.api 4,000 us + its parent package functions 2,400 us
    assert {"aws_lambda_powertools", "aws_lambda_powertools.shared", "kindex"} <= loaded
    with pytest.raises(RuntimeError):
        parse_importtime(stderr, "functions.query")


def test_concurrency_figures_pair_the_rounds_of_both_phases():
    from bench import concurrency

    result = {
        "one": {"ms": [[10.0] * 4, [20.0] * 4], "seconds": [0.04, 0.08]},
        "many": {"ms": [[100.0] * 8, [100.0] * 8], "seconds": [0.04, 0.04]},
    }
    figures = {f.name: f for f in concurrency._figures(concurrency.MINILM, {"chunks": 10}, result)}
    qps = figures["queries_per_s_concurrent16_minilm"]
    # one client: 100 then 50 queries/s; sixteen: 200 and 200 -> paired ratios 2 and 4
    assert (qps.value, qps.reference_value, qps.ratio) == (200.0, 75.0, 3.0)
    assert qps.ratio_spread == {"min": 2.0, "median": 3.0, "max": 4.0, "n": 2}
    assert figures["query_p50_ms_concurrent16_minilm"].ratio_spread["median"] == 7.5
    assert "query_p50_ms_10k_hybrid_minilm" in figures
    default = {f.name for f in concurrency._figures(concurrency.DEFAULT_MODEL, {"chunks": 10}, result)}
    assert "queries_per_s_concurrent16" in default and "query_p50_ms_10k_hybrid_minilm" not in default


def test_concurrency_compares_with_the_way_before_round_by_round():
    from bench import concurrency

    result = {
        "one": {"ms": [[10.0] * 4, [20.0] * 4], "seconds": [0.04, 0.08]},
        "many": {"ms": [[100.0] * 8, [100.0] * 8], "seconds": [0.04, 0.04]},
        "one_unbatched": {"ms": [[20.0] * 4, [20.0] * 4], "seconds": [0.08, 0.08]},
        "many_unbatched": {"ms": [[200.0] * 8, [300.0] * 8], "seconds": [0.08, 0.16]},
    }
    figures = {f.name: f for f in concurrency._figures(concurrency.DEFAULT_MODEL, {"chunks": 10}, result)}
    qps = figures["queries_per_s_concurrent16_batching"]
    # batched: 200 and 200 queries/s; the way before: 100 then 50 -> paired ratios 2 and 4
    assert (qps.value, qps.reference_value, qps.ratio) == (200.0, 75.0, 3.0)
    assert qps.ratio_spread == {"min": 2.0, "median": 3.0, "max": 4.0, "n": 2}
    one = figures["query_p50_ms_one_client_batching"]
    assert (one.value, one.reference_value) == (15.0, 20.0) and one.ratio_spread["max"] == 1.0
    assert figures["query_p99_ms_concurrent16_batching"].reference_value == 300.0
    without = {
        f.name for f in concurrency._figures(concurrency.DEFAULT_MODEL, {"chunks": 10}, dict(list(result.items())[:2]))
    }
    assert "queries_per_s_concurrent16_batching" not in without


def test_alternate_can_wait_for_the_timed_sides_only():
    import time

    from bench.common import alternate

    sides = {"slow": lambda: time.sleep(0.02) or {}, "fast": dict}
    # Given a fast yardstick that would need forever to work 0.05 s: only the slow side is timed
    runs = alternate(sides, min_seconds=0.05, min_rounds=3, max_rounds=10, timed=("slow",))
    assert [len(runs[name]) for name in sides] == [3, 3]
    # Without `timed` every side must reach the floor, here up to the round cap
    assert len(alternate(sides, min_seconds=0.05, min_rounds=3, max_rounds=10)["fast"]) == 10
    with pytest.raises(ValueError):
        alternate(sides, timed=("other",))


def _filtered_raw() -> dict:
    from bench import filtered_http

    def row(p50: float, **more) -> dict:
        return {
            "p50_ms": p50,
            "p99_ms": p50 * 2,
            "min_results": 10,
            "mean_results": 10.0,
            "short": 0,
            "unexplained": 0,
            "warnings": {},
            "server_timing_ms_p50": {"search": p50 / 4},
            **more,
        }

    raw: dict = {
        "chunks_per_collection": 100,
        "vectors": "random",
        "engine": "embedded index",
        "queries": 5,
        "prefill": {"fields_prefilled_documents": 9},
        "fields": {"documents_put": 2, "documents_rewritten_per_s": 1.0},
        "rights": {},
    }
    for mode in filtered_http.MODES:
        raw[f"{mode}/unfiltered"] = row(10.0)
        raw[f"{mode}/access_1"] = row(12.0)
        raw["rights"][f"{mode}/unfiltered"] = row(10.0)
        raw["rights"][f"{mode}/rights_1"] = row(30.0, rights_calls_mean=2.0)
    raw["p50_ratios"] = {f"{mode}/access_1": 1.2 for mode in filtered_http.MODES}
    return raw


def test_filtered_http_figures_carry_the_ratio_to_the_unfiltered_query_and_are_valid_when_every_query_got_k():
    from bench import filtered_http

    figures = {f.name: f for f in filtered_http._figures(_filtered_raw())}
    figure = figures["filtered_http_p50_ms_vector_access_1"]
    assert (figure.value, figure.reference_value, figure.ratio, figure.valid) == (12.0, 10.0, 1.2, True)
    assert figures["filtered_http_p50_ms_hybrid_rights_1"].ratio == 3.0
    assert all(f.valid for f in figures.values())


def test_filtered_http_figures_of_the_server_on_the_node_are_named_apart_and_say_so():
    from bench import filtered_http

    raw = _filtered_raw()
    raw["engine"] = "OpenSearch node (KINDEX_SEARCH_URL)"
    figures = {f.name: f for f in filtered_http._figures(raw)}
    assert not any(name.startswith("filtered_http_p50") for name in figures)
    figure = figures["filtered_http_node_p50_ms_keyword_access_1"]
    assert figure.reference_name == "filtered_http_node_p50_ms_keyword_unfiltered" and figure.ratio == 1.2
    assert "on the OpenSearch node" in figure.notes
    assert "filtered_http_node_p50_ms_hybrid_rights_1" in figures


def test_filtered_http_figures_are_invalid_when_a_query_came_back_short():
    from bench import filtered_http

    # Given a keyword row with one query short of k although more existed, and a vector row with 9 results
    raw = _filtered_raw()
    raw["keyword/access_1"]["short"] = 1
    raw["vector/access_1"]["min_results"] = 9
    # And a rights row short of k without a stopped_early warning
    raw["rights"]["hybrid/rights_1"]["unexplained"] = 1
    figures = {f.name: f for f in filtered_http._figures(raw)}
    # Then each says why it cannot stand, and the others stay valid
    assert "although more existed" in figures["filtered_http_p50_ms_keyword_access_1"].invalid_reason
    assert "fewer than 10" in figures["filtered_http_p50_ms_vector_access_1"].invalid_reason
    assert "without a warning" in figures["filtered_http_p50_ms_hybrid_rights_1"].invalid_reason
    assert figures["filtered_http_p50_ms_hybrid_access_1"].valid
    # A rights row short of k *with* the warning is what the issue allows
    assert figures["filtered_http_p50_ms_vector_rights_1"].valid
