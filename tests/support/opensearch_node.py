"""The real OpenSearch node the tests run against (`make test` always has one; `make opensearch` starts one for
your own `pytest` runs).

`KINDEX_TEST_OPENSEARCH_URL` names the node; a node that is named but unusable fails the tests. `make test` (and so
CI) always sets it, to the node scripts/opensearch.py starts for the run, so a dead node never turns into skipped
tests there. Only a bare `pytest` without it probes 127.0.0.1:$OPENSEARCH_PORT (9200) and skips the tests that need
a node, with the reason in pytest's `-ra` summary, when nothing usable answers.
Every test gets its own index prefix under one per-run prefix, so runs and tests never see each other's indices.
"""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass, field

import requests

ENV_URL = "KINDEX_TEST_OPENSEARCH_URL"
# The Maven-assembled node has no faiss native library (and loading faiss there is fatal to the node).
ENGINE = "lucene"


@dataclass
class OpenSearchNode:
    url: str
    version: str
    run_prefix: str = field(default_factory=lambda: f"kindex-test-{uuid.uuid4().hex[:10]}")
    _counter: itertools.count = field(default_factory=itertools.count)

    def new_prefix(self) -> str:
        """An index prefix no other test of any run uses."""
        return f"{self.run_prefix}-{next(self._counter)}"

    def delete_indices(self, prefix: str) -> None:
        """Drop every index under `prefix` (the trailing dash keeps `x-1` from matching `x-10`)."""
        response = requests.delete(f"{self.url}/{prefix}-*", params={"expand_wildcards": "all"}, timeout=60)
        response.raise_for_status()


def probe(url: str) -> tuple[OpenSearchNode | None, str]:
    """The node at `url` if it is an OpenSearch with the k-NN plugin, else why not."""
    try:
        info = requests.get(url, timeout=2).json()
        plugins = requests.get(f"{url}/_cat/plugins", params={"format": "json"}, timeout=5).json()
    except (requests.RequestException, ValueError) as error:
        return None, f"nothing usable answers at {url} ({type(error).__name__})"
    version = info.get("version", {}) if isinstance(info, dict) else {}
    if version.get("distribution") != "opensearch":
        return None, f"{url} answers but is not OpenSearch"
    if not any(isinstance(p, dict) and p.get("component") == "opensearch-knn" for p in plugins):
        return None, f"OpenSearch at {url} has no opensearch-knn plugin"
    return OpenSearchNode(url=url.rstrip("/"), version=str(version.get("number"))), ""


def find_node() -> tuple[OpenSearchNode | None, str, bool]:
    """(node, reason when there is none, whether the node was required by the environment)."""
    named = os.environ.get(ENV_URL, "").strip()
    if named:
        node, reason = probe(named)
        return node, reason, True
    url = f"http://127.0.0.1:{os.environ.get('OPENSEARCH_PORT', '9200')}"
    node, reason = probe(url)
    return node, f"{reason}: start a node with `make opensearch` or set {ENV_URL}", False
