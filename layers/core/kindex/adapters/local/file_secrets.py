"""Secrets in local mode: one file per secret under the data directory, created with mode 0600."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from urllib.parse import quote

from kindex.adapters.local.private_files import private_dir, restrict


class FileSecretStore:
    """Implements SecretStore. Names are URL-encoded into file names so no name can escape the folder; files are
    0600 in a 0700 folder."""

    def __init__(self, root: Path):
        self.root = private_dir(root)
        self.temp = private_dir(root / ".tmp")  # `_path` never gives a name starting with '.': no secret lands here

    def _path(self, name: str) -> Path:
        encoded = quote(name, safe="")
        if encoded.startswith("."):  # '.', '..' and the temp folder are not secrets ('%2E' decodes to the same name)
            encoded = "%2E" + encoded[1:]
        if len(encoded.encode()) > 200:  # file names are limited to 255 bytes; long names become their digest
            encoded = "sha256-" + hashlib.sha256(name.encode()).hexdigest()
        return self.root / encoded

    def put_secret(self, name: str, value: bytes) -> None:
        path = self._path(name)
        # A temp file of its own per write: two names (or two writers of one name) never share one, so a rotation
        # can never publish another tenant's value. mkstemp creates it 0600.
        fd, tmp = tempfile.mkstemp(dir=self.temp)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(value)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        restrict(path)

    def get_secret(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            return None
