"""The README's benchmark block is the one bench/results.json gives (generated, never typed)."""

from __future__ import annotations

import json

import pytest

from bench import readme
from bench.common import RESULTS_PATH, Figure, alternate, spread

pytestmark = pytest.mark.unit


def test_readme_shows_what_the_results_file_says():
    text = readme.README.read_text(encoding="utf-8")
    shown = text[text.index(readme.START) : text.index(readme.END) + len(readme.END)]
    assert shown == readme.block(json.loads(RESULTS_PATH.read_text()))


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
