"""The layer build the synth runs (infra/layers.py): rebuilt only when its inputs change, never left half-built.

pip itself is replaced by a function that writes one file per call (the real build takes ~10 s with a warm pip
cache and needs PyPI otherwise); everything else (fingerprints, stamps, staging, the size limit) is the real code.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra import layers

pytestmark = pytest.mark.infra


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """Given a copy of the core package as the core source, and a pip that records its calls."""
    core = tmp_path / "src" / "kindex"
    shutil.copytree(layers.CORE_SOURCE, core, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    monkeypatch.setattr(layers, "CORE_SOURCE", core)
    calls: list[list[str]] = []

    def fake_pip(target: Path, requirements: list[str]) -> None:
        calls.append(requirements)
        target.mkdir(parents=True)
        (target / "some_dependency.py").write_text("VALUE = 1\n")

    monkeypatch.setattr(layers, "build_deps", fake_pip)
    return calls, core, tmp_path / "out"


def test_second_build_runs_no_pip_and_copies_nothing(builds):
    calls, _, out = builds
    # When the layers are ensured twice
    first = layers.ensure_layers(out, log=lambda _: None)
    second = layers.ensure_layers(out, log=lambda _: None)
    # Then pip ran once, both layers were built once, and the second call found them up to date
    assert len(calls) == 1 and first.rebuilt == ("deps", "core") and second.rebuilt == ()
    assert (out / "core" / "python" / "kindex" / "__init__.py").is_file()
    assert (out / "deps" / "python" / "some_dependency.py").is_file()
    # And the stamps sit beside the layer directories, never inside what is zipped
    assert sorted(p.name for p in out.iterdir()) == ["core", "core.inputs-sha256", "deps", "deps.inputs-sha256"]


def test_a_changed_source_file_rebuilds_only_the_core_layer(builds):
    calls, core, out = builds
    layers.ensure_layers(out, log=lambda _: None)
    # When one module of the package changes
    (core / "domain" / "errors.py").write_text((core / "domain" / "errors.py").read_text() + "\n# changed\n")
    build = layers.ensure_layers(out, log=lambda _: None)
    # Then only core is rebuilt, and it holds the new bytes
    assert build.rebuilt == ("core",) and len(calls) == 1
    assert (out / "core" / "python" / "kindex" / "domain" / "errors.py").read_text().endswith("# changed\n")


def test_changed_requirements_rebuild_the_deps_layer(builds, monkeypatch):
    calls, _, out = builds
    layers.ensure_layers(out, log=lambda _: None)
    # When the runtime requirements change (a new pin in pyproject.toml)
    monkeypatch.setattr(layers, "runtime_requirements", lambda: ["pydantic==2.11.0"])
    build = layers.ensure_layers(out, log=lambda _: None)
    # Then pip runs again with the new requirements
    assert build.rebuilt == ("deps",) and calls[-1] == ["pydantic==2.11.0"]


def test_a_failed_build_keeps_the_previous_layer_and_is_retried(builds, monkeypatch):
    calls, _, out = builds
    layers.ensure_layers(out, log=lambda _: None)
    monkeypatch.setattr(layers, "runtime_requirements", lambda: ["pydantic==2.11.0"])

    def offline_pip(target: Path, requirements: list[str]) -> None:
        target.mkdir(parents=True)
        (target / "half_written.py").write_text("")
        raise layers.LayerBuildFailed("pip could not reach PyPI")

    monkeypatch.setattr(layers, "build_deps", offline_pip)
    # When the rebuild fails half way
    with pytest.raises(layers.LayerBuildFailed):
        layers.ensure_layers(out, log=lambda _: None)
    # Then the previous layer is intact, no staging directory is left, and the layer is still stale
    assert (out / "deps" / "python" / "some_dependency.py").is_file()
    assert not (out / "deps" / "python" / "half_written.py").exists()
    assert not list(out.glob(".*.building"))
    assert layers._stale(out, "deps", layers.deps_fingerprint(["pydantic==2.11.0"]))


def test_a_layer_directory_without_its_stamp_is_rebuilt(builds):
    calls, _, out = builds
    # Given a deps directory left by an older build script (no stamp)
    (out / "deps" / "python").mkdir(parents=True)
    # When ensured, it is rebuilt rather than trusted
    assert "deps" in layers.ensure_layers(out, log=lambda _: None).rebuilt and len(calls) == 1


def test_layers_over_lambdas_unzipped_limit_are_refused(builds, monkeypatch):
    _, _, out = builds
    monkeypatch.setattr(layers, "LAMBDA_UNZIPPED_LIMIT", 1000)
    with pytest.raises(layers.LayerBuildFailed, match="unzipped"):
        layers.ensure_layers(out, log=lambda _: None)


def test_runtime_requirements_leave_out_the_sdk_and_the_local_model(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["pydantic>=2", "boto3>=1.34", "onnxruntime"]\n'
        '[project.optional-dependencies]\naws = ["opensearch-py>=2.4", "botocore"]\n'
    )
    assert layers.runtime_requirements(pyproject) == ["pydantic>=2", "opensearch-py>=2.4"]


def test_the_local_ocr_packages_stay_out_of_the_lambda_layer_and_the_textract_path_needs_none_of_them():
    # Given the project's own requirements (local OCR renders with PDFium and reads with tesserocr)
    names = {layers.requirement_name(r) for r in layers.runtime_requirements()}
    # Then none of the local OCR packages goes into the layer, while pypdf (which writes Textract's page PDFs) does
    assert names & {"pypdfium2", "pillow", "tesserocr"} == set()
    assert "pypdf" in names


def test_the_core_layer_ships_the_console_and_a_changed_console_file_rebuilds_it(builds):
    # Given built layers: the API function serves the console from the core layer on AWS (no separate hosting)
    calls, core, out = builds
    layers.ensure_layers(out, log=lambda _: None)
    shipped = out / "core" / "python" / "kindex" / "console"
    assert {"index.html", "app.js", "style.css"} <= {p.name for p in shipped.iterdir()}
    # When a console file changes / Then the next synth rebuilds the core layer with the new bytes
    (core / "console" / "style.css").write_text("body { color: black; }\n")
    assert layers.ensure_layers(out, log=lambda _: None).rebuilt == ("core",)
    assert (shipped / "style.css").read_text() == "body { color: black; }\n"


def test_the_layers_carry_no_local_model_files(builds):
    # Given the local models' files fetched at install time (bge-small-en-v1.5: 133 MB of ONNX)
    from kindex.adapters.embedders.model_files import models_dir

    _, _, out = builds
    layers.ensure_layers(out, log=lambda _: None)
    # Then they live outside the core package the layer copies, and no built layer holds a model file
    assert not models_dir().resolve().is_relative_to((layers.REPO_ROOT / "layers").resolve())
    shipped = [p.name for p in out.rglob("*") if p.is_file()]
    assert not [name for name in shipped if name.endswith(".onnx") or name == "tokenizer.json"]
    assert {"bge.py", "model_files.py"} <= set(shipped)  # the code ships (it is cheap); the weights do not
