"""Blob store on a local folder: each key is a relative path (key parts are URL-encoded, so they are safe names)."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from kindex.domain.errors import InvalidInput, LimitExceeded, NotFound


class FolderBlobStore:
    """Implements BlobStore over a directory. Writes are atomic (temp file + rename) so readers never see half a file.

    `notify(event_name, key, size)` is called after each write and delete, as S3 notifies its bucket's queue."""

    def __init__(self, root: Path | str, notify: Callable[[str, str, int], None] | None = None):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.notify = notify

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise InvalidInput("blob key escapes the store")
        return path

    def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if self.notify:
            self.notify("ObjectCreated:Put", key, len(data))

    def get_blob(self, key: str, *, max_bytes: int | None = None) -> bytes:
        try:
            with self._path(key).open("rb") as handle:
                if max_bytes is None:
                    return handle.read()
                size = os.fstat(handle.fileno()).st_size
                # Read one byte past the limit: a file that grew after the stat still cannot be read whole.
                data = handle.read(max_bytes + 1) if size <= max_bytes else b""
        except (FileNotFoundError, IsADirectoryError) as error:
            raise NotFound(f"blob {key!r} does not exist") from error
        if size > max_bytes or len(data) > max_bytes:
            raise LimitExceeded(f"File is {max(size, len(data))} bytes; the limit is {max_bytes} bytes")
        return data

    def blob_size(self, key: str) -> int | None:
        try:
            status = self._path(key).stat()
        except FileNotFoundError:
            return None
        return status.st_size if stat.S_ISREG(status.st_mode) else None

    def delete_blob(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        self._prune(path.parent)
        if self.notify:
            self.notify("ObjectRemoved:Delete", key, 0)

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list_blobs(prefix)
        for key in keys:
            self.delete_blob(key)
        return len(keys)

    def list_blobs(self, prefix: str) -> list[str]:
        keys = []
        # Walk only the folder the prefix points into, not the whole store.
        start = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        for dirpath, _, filenames in os.walk(start):
            for name in filenames:
                if name.startswith(".tmp-"):
                    continue
                key = Path(dirpath, name).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def _prune(self, directory: Path) -> None:
        """Remove empty parent folders so a deleted document leaves nothing behind."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent
