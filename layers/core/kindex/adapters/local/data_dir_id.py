"""The identity of a data directory: a random id created once and kept in it, so whatever a local server keeps
outside the directory (its indices on a shared OpenSearch cluster) is named after this directory and no other."""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from pathlib import Path

from kindex.adapters.local.private_files import FILE_MODE, private_dir

ID_FILE = "data-dir-id"
_ID = re.compile(r"[0-9a-f]{12}")


def data_dir_id(data_dir: Path) -> str:
    """The directory's id (12 lowercase hex digits), created on first use.

    Several processes open one data directory (the server, `kindex ingest`, `kindex reindex`) and may start at the
    same moment: the id is written to a temporary file and linked into place, which fails if another process got
    there first, so every process reads the one id that won and never a half-written file.
    """
    path = Path(data_dir) / ID_FILE
    existing = _read(path)
    if existing is not None:
        return existing
    private_dir(path.parent)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".data-dir-id-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(6) + "\n")
        os.chmod(temporary, FILE_MODE)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)
    found = _read(path)
    if found is None:
        raise _not_an_id(path)
    return found


def _read(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not _ID.fullmatch(text):
        raise _not_an_id(path)
    return text


def _not_an_id(path: Path) -> ValueError:
    return ValueError(
        f"{path} does not hold a data directory id (12 hex digits): restore it, the names of this "
        "directory's indices on the search cluster derive from it"
    )
