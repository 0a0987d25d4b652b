"""`scripts/opensearch.py run -- COMMAND`, what `make test` runs pytest with: the command gets the node's URL, its
exit status is the run's, and a SIGTERM to the run reaches the command (so CI's cancel ends pytest, and then the
node). Which node it picks is tested in tests/unit/test_provision.py; the start and stop themselves run in every
`make test`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

RUNNER = [sys.executable, str(REPO / "scripts" / "opensearch.py"), "run", "--"]
NAMED = "http://127.0.0.1:1"  # never contacted: a named node is the command's business, not the runner's


def runner(command: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "KINDEX_TEST_OPENSEARCH_URL": NAMED}
    return subprocess.Popen(
        [*RUNNER, sys.executable, "-c", command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_a_named_node_is_passed_on_and_the_commands_status_is_the_runs():
    # Given KINDEX_TEST_OPENSEARCH_URL set / When the command prints it and exits 3
    process = runner("import os, sys; print('url', os.environ['KINDEX_TEST_OPENSEARCH_URL']); sys.exit(3)")
    output, _ = process.communicate(timeout=60)
    # Then no node is started, the command saw the URL, and the run exits 3
    assert process.returncode == 3, output
    assert f"url {NAMED}" in output and "starting none" in output


def test_a_command_killed_by_a_signal_fails_the_run_as_a_shell_would():
    # When the command dies of SIGTERM
    process = runner("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    output, _ = process.communicate(timeout=60)
    # Then the run fails with 128 + 15, never 0
    assert process.returncode == 128 + signal.SIGTERM, output


def test_sigterm_to_the_run_reaches_the_command_and_the_run_waits_for_it():
    # Given a command that reports SIGTERM and exits 7 when it gets one
    process = runner(
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    print('command got SIGTERM', flush=True)\n"
        "    sys.exit(7)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)"
    )
    assert "starting none" in process.stdout.readline()
    assert process.stdout.readline().strip() == "ready"
    # When the run itself gets SIGTERM (CI cancelling the job)
    time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    # Then the command got it and the run ended with the command's own status
    assert "command got SIGTERM" in output
    assert process.returncode == 7
