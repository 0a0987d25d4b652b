"""docs/scale.md quotes the reindex's read units per pass exactly as scripts/reindex_reads.py computes them from the
code's limits and the adapters' item layouts (tests/integration/test_reindex_incremental_aws.py checks the model's
request counts against a real pass)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]


def reads_model():
    spec = importlib.util.spec_from_file_location("reindex_reads", REPO_ROOT / "scripts" / "reindex_reads.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up by name
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_docs_scale_holds_the_computed_read_units():
    model = reads_model()
    docs = (REPO_ROOT / "docs" / "scale.md").read_text()
    # refresh: scripts/reindex_reads.py --write docs/scale.md
    assert model.replace_block(docs, model.render()) == docs


def test_a_steady_pass_reads_no_chunk_and_far_less_than_a_full_read():
    model = reads_model()
    limits = model.ReindexLimits()
    for workload in model.WORKLOADS:
        sizes = model.sample_items(workload.chunk_chars)
        rows = model.rows(workload, limits, sizes)
        assert [r.units for r in rows if r.request == "Query chunks"] == [0]
        assert sum(r.units for r in rows) < model.full_read_units(workload, sizes) / 50


def test_item_sizes_follow_dynamodb_rules():
    model = reads_model()
    # name bytes + value bytes for strings; numbers: name + one byte per two significant digits + one
    assert model.item_size({"pk": {"S": "T#é"}, "version": {"N": "1200"}}) == (2 + 4) + (7 + 1 + 1)
    assert model.get_units(4096) == 1 and model.get_units(4097) == 2
    assert model.query_units(10, 1000) == 3 and model.query_units(0, 1000, consistent=False) == 0.5
