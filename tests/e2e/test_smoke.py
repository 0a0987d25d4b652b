"""`kindex smoke` against a real `kindex serve`: the check a deployment gets after `cdk deploy`, run in CI."""

import subprocess
import sys

import pytest

from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.e2e


def smoke(server, key: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kindex_local.cli",
            "smoke",
            "--url",
            server.base_url,
            "--key",
            key,
            "--timeout",
            "120",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_smoke_check_passes_on_a_working_deployment_and_leaves_nothing(server):
    # Given a running deployment and one of the real documents
    paper = SHARED_DATA / "docs/pdf/docling-multi_page.pdf"
    # When the smoke check runs with an admin key
    done = smoke(server, server.admin_key, "--file", str(paper))
    # Then every step passed, each printed with its time
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith(("ok ", "FAIL"))]
    assert [line.split(" (")[0].split(maxsplit=1)[1] for line in steps] == [
        "create collection",
        "upload a file by presigned URL",
        "wait until indexed",
        "query with a citation",
        "refuse a user outside the collection's groups",
        "delete the collection",
        "nothing is left",
    ]
    assert all(line.startswith("ok ") and " ms)" in line for line in steps)
    # And it left nothing behind
    listed = server.session(server.admin_key).get(server.url("/v1/collections"), params={"number": 1000}).json()
    assert not [c for c in listed["collections"] if c.startswith("kindex-smoke-")]


def test_smoke_check_with_the_built_in_text_passes(server):
    done = smoke(server, server.admin_key)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "smoke check passed" in done.stdout


def test_smoke_check_fails_clearly_and_cleans_up_when_the_key_cannot_write(server):
    # Given a key that may only query
    reader = server.create_key("default", "query")
    # When the smoke check runs with it / Then the first step fails, the exit code says so, and nothing is created
    done = smoke(server, reader)
    assert done.returncode == 1
    assert "FAIL create collection" in done.stdout and "403" in done.stdout
    listed = server.session(server.admin_key).get(server.url("/v1/collections"), params={"number": 1000}).json()
    assert not [c for c in listed["collections"] if c.startswith("kindex-smoke-")]


def test_smoke_check_needs_a_url_and_a_key():
    done = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "smoke"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    )
    assert done.returncode == 2 and "--url and --key" in done.stderr
