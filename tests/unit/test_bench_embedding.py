"""The embedding bench's own pieces: pairing rounds, the vector check, bca827d's way, and when a figure is invalid."""

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


@pytest.mark.parametrize("model", [embedding.BGE_Q, embedding.MINILM])
def test_the_before_side_is_one_session_over_all_cores_in_sorted_batches_of_8(model):
    before = embedding.before_embedder(model)
    assert (before.workers, before.batch_size, before.bucketed) == (1, 8, True)
    assert embedding.session_threads(model, before) == available_cores()


def _found(after_e2e, after_raw, before_e2e, before_raw, cosine_after=1.0):
    speeds = {"after_e2e": after_e2e, "after_raw": after_raw, "before_e2e": before_e2e, "before_raw": before_raw}
    return {"chunks": 100, "speeds": speeds, "seconds": {side: 21.0 for side in speeds},
            "paired_e2e": paired_ratios(after_e2e, before_e2e), "paired_raw": paired_ratios(after_raw, before_raw),
            "e2e_over_raw": {side: paired_ratios(speeds[f"{side}_e2e"], speeds[f"{side}_raw"])
                             for side in ("before", "after")},
            "min_cosine": {"after": cosine_after, "before": 0.995}, "median_cosine": {"after": 1.0, "before": 0.998}}


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
