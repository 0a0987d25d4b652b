"""The `kindex-client` distribution (clients/python) installs alone: its wheel holds only the SDK, the domain and
the API's wire models, declares only httpx and pydantic, and works in a fresh virtual environment that has nothing
else - offline: the dependencies it declares are resolved from their metadata and linked in from this environment,
so the interpreter sees exactly them and their own dependencies."""

import importlib.metadata
import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO

pytestmark = pytest.mark.e2e


def build_wheel(out: Path) -> Path:
    # Built from a copy of the project folder (the source itself is linked), so the build leaves nothing in the repo.
    project = out / "src" / "clients" / "python"
    project.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py"):
        (project / name).write_bytes((REPO / "clients" / "python" / name).read_bytes())
    (out / "src" / "layers" / "core").mkdir(parents=True)
    (out / "src" / "layers" / "core" / "kindex").symlink_to(REPO / "layers" / "core" / "kindex")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(project),
            "-w",
            str(out / "wheels"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (wheel,) = (out / "wheels").glob("kindex_client-*.whl")
    return wheel


def closure(requirements: list[str]) -> set[str]:
    """The distributions `requirements` need, transitively (markers evaluated, no extras), as installed here."""
    needed: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = requirement.name.lower().replace("_", "-")
        if name in needed:
            continue
        needed.add(name)
        todo += [Requirement(r) for r in importlib.metadata.distribution(name).requires or []]
    return needed


def link_distributions(names: set[str], target: Path) -> None:
    target.mkdir()
    for name in names:
        dist = importlib.metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            if top.endswith((".dist-info", ".pth")) or top in ("..", "__pycache__", "bin"):
                continue
            source = Path(dist.locate_file(top))
            if source.exists() and not (target / top).exists():
                (target / top).symlink_to(source)
        (target / Path(dist._path).name).symlink_to(dist._path)  # its metadata, for importlib.metadata


def test_the_client_distribution_installs_and_works_alone(server, tmp_path):
    # Given the wheel of clients/python
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    modules = sorted(n for n in names if n.endswith(".py"))
    # Then it holds the SDK, the domain and the wire models, nothing of the server, and needs only httpx and pydantic
    assert "kindex/client/sync.py" in modules and "kindex/api/models.py" in modules
    assert "kindex/client/py.typed" in names  # type checkers read the SDK's annotations
    assert [m for m in modules if not m.startswith(("kindex/client/", "kindex/domain/"))] == [
        "kindex/__init__.py",
        "kindex/api/__init__.py",
        "kindex/api/models.py",
    ]
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert sorted(Requirement(r).name for r in requires) == ["httpx", "pydantic"]
    # When it is installed into a fresh virtual environment that has only what it declares
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    link_distributions(closure(requires), tmp_path / "deps")
    (site / "kindex-client-deps.pth").write_text(str(tmp_path / "deps") + "\n")
    script = """
import json, sys
from kindex.client import Kindex, NotFound
missing = []
for name in ("numpy", "onnxruntime", "pypdf", "boto3", "aws_lambda_powertools", "kindex.adapters", "kindex.settings",
             "kindex_local"):
    try:
        __import__(name)
    except ImportError:
        missing.append(name)
with Kindex() as kx:
    kx.put_collection("from-the-wheel", title="installed alone", allow_guests=True)
    kx.put_document("from-the-wheel", "d", content="The wheel works on its own.")
    document = kx.wait_for_document("from-the-wheel", "d", timeout=60)
    answer = kx.query("from-the-wheel", "Does the wheel work?", mode="keyword")
    try:
        kx.get_collection("absent")
    except NotFound as error:
        not_found = error.status
print(json.dumps({"missing": missing, "status": document.status.value, "first": answer.results[0].document_id,
                  "not_found": not_found, "kindex_file": sys.modules["kindex.client"].__file__}))
"""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KINDEX_", "PYTHON"))}
    run = subprocess.run(
        [str(python), "-I", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "KINDEX_URL": server.base_url, "KINDEX_API_KEY": server.admin_key},
    )
    # Then the SDK works there against a real server, and none of the server's modules can even be imported
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout)
    assert outcome["kindex_file"].startswith(str(site))
    assert outcome["missing"] == [
        "numpy",
        "onnxruntime",
        "pypdf",
        "boto3",
        "aws_lambda_powertools",
        "kindex.adapters",
        "kindex.settings",
        "kindex_local",
    ]
    assert (outcome["status"], outcome["first"], outcome["not_found"]) == ("indexed", "d", 404)
