"""`kindex serve`'s clean stop (Ctrl-C / SIGTERM): the worker and scheduler stop first, then the embedded index is
closed, which compacts its graph partitions so the next start loads the saved graph instead of replaying the log."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kindex.adapters.local.search import ann
from kindex.domain.types import IndexRecord

pytestmark = pytest.mark.integration

MODEL = "hash:24"


def _records(count: int, seed: int, start: int = 0) -> list[IndexRecord]:
    rows = np.random.default_rng(seed).standard_normal((count, 24)).astype(np.float32)
    return [
        IndexRecord(
            tenant="acme",
            collection="col",
            document_id=f"d{i % 7}",
            chunk_id=f"c{start + i}",
            vector=tuple(row),
            text="",
            language="en",
        )
        for i, row in enumerate(rows)
    ]


def test_a_server_stop_compacts_the_embedded_index_after_its_background_threads_stopped(tmp_path, monkeypatch):
    from kindex.compose import container
    from kindex.settings import load_settings
    from kindex_local.deployment import start

    monkeypatch.setattr(ann, "MIN_ROWS", 300)
    saved = dict(os.environ)  # start() hands its settings to the functions through the environment
    try:
        os.environ["KINDEX_DEFAULT_EMBEDDING_MODEL"] = "hash:384"
        server = start(load_settings(data_dir=tmp_path / "data", port=0, host="127.0.0.1"))
        index = container().adapters.search_index
        # Given a graph partition with writes in its log
        index.upsert(MODEL, _records(500, 1))
        index.upsert(MODEL, _records(30, 2, start=500))
        folder = tmp_path / "data" / "index" / "vectors"
        assert len(list(folder.glob("*.log"))) == 1
        threads = [thread for item in server.background for thread in item._threads]
        assert threads and all(thread.is_alive() for thread in threads)
        seen: list[bool] = []
        (close,) = server.closing
        server.closing[0] = lambda: seen.append(any(thread.is_alive() for thread in threads)) or close()
        # When the server stops
        server.shutdown()
        # Then the index was closed once no background thread ran any more, and its graph partition compacted
        assert seen == [False]
        assert list(folder.glob("*.log")) == [] and len(list(folder.glob("*.usearch"))) == 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
        container.cache_clear()
