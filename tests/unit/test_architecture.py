"""The layout's walls and the house style, checked on every run: import-linter's contracts (pyproject.toml,
[tool.importlinter]) and ruff's rules (pyproject.toml, [tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

# The whole-tree checks below are what `make lint` and `make typecheck` run (and `make check` runs both): marked
# `tree` so that `make unit` can leave them out (cold mypy alone takes minutes on two busy cores); `make test` and a
# plain `pytest` still run them.
tree = pytest.mark.tree


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is a dev dependency (pip install -e '.[dev]')"
    return found


@pytest.mark.slow
def test_import_contracts_hold():
    """Given the contracts in pyproject.toml: the domain imports no adapter, SDK or numpy; the use cases only the
    domain and text; the api no adapter and no composition root; the Lambda layer nothing of the local server;
    the functions no SDK; no cycles between packages. Then lint-imports keeps every one of them."""
    result = subprocess.run([tool("lint-imports"), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


@tree
def test_ruff_is_clean():
    result = subprocess.run([tool("ruff"), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@tree
def test_ruff_format_is_clean():
    """Given the code base formatted once with ruff format (2026-12-01). Then every file stays formatted."""
    result = subprocess.run(
        [tool("ruff"), "format", "--check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


# A cold run (no .mypy_cache) checks 180 files with the pydantic plugin and numpy's stubs: over a minute on a busy
# machine, where pytest's default timeout would end it half-way; a warm run takes seconds.
@tree
@pytest.mark.timeout(900)
def test_mypy_is_clean():
    """Given [tool.mypy] in pyproject.toml (the production code, pydantic plugin, unused ignores reported). Then mypy
    finds no error: a type that stops matching its use fails here, not in production."""
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
