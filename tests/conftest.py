"""Fixtures shared by every test layer: an isolated local deployment, and the real server over HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from pytest_socket import disable_socket

from tests.support.opensearch_node import ENV_URL, OpenSearchNode, find_node

# The functions build their Powertools Metrics at import; no CloudWatch in tests, as in local mode.
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

REPO = Path(__file__).resolve().parents[1]
EVENTS = Path(__file__).resolve().parent / "events"
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """No network in unit tests (pytest-socket, as serverless-python-demo guards its unit tests): creating an
    internet socket fails, to 127.0.0.1 too (a test that needs a real server is an integration test). Unix sockets
    stay allowed: asyncio's event loop wakes itself through a socket pair. pytest-socket lifts the guard after
    each test."""
    if item.get_closest_marker("unit") is not None:
        disable_socket(allow_unix_socket=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reaches the real OpenSearch node (the `opensearch_node` fixture, asked for directly or by
    another fixture) carries the `node` marker, so `make unit` can leave them out with `-m "not node"`; tryfirst:
    before `-m` deselects."""
    for item in items:
        if "opensearch_node" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.node)


def load_event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def local_container(tmp_path, monkeypatch):
    """A fresh local deployment (SQLite + folder) in a temp dir, wired exactly as `kindex serve` wires it."""
    from kindex.compose import container

    monkeypatch.setenv("KINDEX_BACKEND", "local")
    monkeypatch.setenv("KINDEX_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KINDEX_DEFAULT_EMBEDDING_MODEL", "hash:384")
    container.cache_clear()
    yield container()
    container.cache_clear()


@dataclass
class RunningServer:
    base_url: str
    data_dir: Path
    admin_key: str
    process: subprocess.Popen
    output: list[str]

    def session(self, key: str | None = None) -> requests.Session:
        session = requests.Session()
        if key is not None:
            session.headers["Authorization"] = f"Bearer {key}"
        return session

    def url(self, path: str) -> str:
        return self.base_url + path

    def stop(self) -> None:
        """SIGTERM (the server finishes its requests and stops its worker), then kill if it has not gone in 10 s."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def create_key(self, tenant: str, role: str) -> str:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "kindex_local.cli",
                "keys",
                "create",
                "--tenant",
                tenant,
                "--role",
                role,
                "--data-dir",
                str(self.data_dir),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip().splitlines()[-1]


def start_server(
    data_dir: Path, extra_env: dict[str, str | None] | None = None, *, own_process_group: bool = False
) -> RunningServer:
    """`kindex serve` on a free port; `extra_env` adds variables, and a None value removes one. `own_process_group`:
    the server leads a process group of its own (what a terminal's Ctrl-C reaches), not the tests'."""
    merged = {**os.environ, "KINDEX_DEFAULT_EMBEDDING_MODEL": "hash:384", **(extra_env or {})}
    env = {name: value for name, value in merged.items() if value is not None}
    env.pop("KINDEX_PORT", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "kindex_local.cli", "serve", "--port", "0", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        process_group=0 if own_process_group else None,
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        match = re.search(r"listening on (http://\S+)", line)
        if match:
            break
    else:
        raise RuntimeError("kindex serve did not start:\n" + "".join(lines))
    # Keep draining the server's output so a chatty server can never block on a full pipe.
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
    admin_key = (data_dir / "admin-key").read_text().strip()
    return RunningServer(match.group(1), data_dir, admin_key, process, lines)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    """`kindex serve` on a free port with its own data directory, for the whole test module."""
    running = start_server(tmp_path_factory.mktemp("kindex-data"))
    yield running
    running.stop()


# What the run did about the real node, for the one-line summary at the end.
_node_outcome: list[str] = []


@pytest.fixture(scope="session")
def opensearch_node() -> Iterator[OpenSearchNode]:
    """The real OpenSearch node (see tests/support/opensearch_node.py): skipped with the reason when none is up,
    failed when KINDEX_TEST_OPENSEARCH_URL names one that is not usable. Indices of this run are dropped at the
    end even if a test's own cleanup did not get to run."""
    node, reason, required = find_node()
    if node is None:
        _node_outcome.append(f"NOT USED, its tests were {'errors' if required else 'skipped'}: {reason}")
        if required:
            pytest.fail(f"{ENV_URL} is set but {reason}")
        pytest.skip(f"no real OpenSearch node: {reason}")
    _node_outcome.append(f"used: OpenSearch {node.version} at {node.url}, indices {node.run_prefix}-*")
    yield node
    node.delete_indices(node.run_prefix)


# `make unit` stays under a minute by leaving out the `slow` tests; a test that takes this long without the marker
# is named at the end of a run that left them out, so the fast loop does not slow down unseen.
SLOW_CALL_SECONDS = 1.0
_unmarked_slow: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.duration >= SLOW_CALL_SECONDS and "slow" not in report.keywords:
        _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """One line saying whether the real-node tests ran, so a skip cannot pass unnoticed among the dots."""
    if _node_outcome:
        terminalreporter.write_line(f"real OpenSearch node {_node_outcome[0]}")
    if "not slow" in (config.option.markexpr or "") and _unmarked_slow:
        terminalreporter.write_line(f"over {SLOW_CALL_SECONDS:.0f} s each without the `slow` marker (mark them):")
        for duration, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.write_line(f"  {duration:.1f}s {nodeid}")
