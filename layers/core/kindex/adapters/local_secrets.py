"""Secrets in local mode: one file per secret under the data directory, created with mode 0600."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import quote


class FileSecretStore:
    """Implements SecretStore. Names are URL-encoded into file names so no name can escape the folder."""

    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, name: str) -> Path:
        encoded = quote(name, safe="")
        if len(encoded.encode()) > 200:  # file names are limited to 255 bytes; long names become their digest
            encoded = "sha256-" + hashlib.sha256(name.encode()).hexdigest()
        return self.root / encoded

    def put_secret(self, name: str, value: bytes) -> None:
        path = self._path(name)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(value)
        os.replace(tmp, path)

    def get_secret(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            return None
