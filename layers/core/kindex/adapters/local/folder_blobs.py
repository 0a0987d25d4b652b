"""Blob store on a local folder: each key is a relative path (key parts are URL-encoded, so they are safe names).

Temporary files live in `.tmp/` at the root, a name no key can reach (`_path` refuses it), on the same file system
so the final `os.replace` stays atomic; every file name under the other folders is therefore a key, and the listing
skips none. Folders are 0700 and blobs 0600.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kindex.adapters.local.private_files import private_dir
from kindex.domain.errors import Conflict, InvalidInput, LimitExceeded, NotFound

logger = logging.getLogger(__name__)

TEMP_DIR = ".tmp"
LEGACY_TEMP_NAME = re.compile(r"\.tmp-[a-z0-9_]{8}")  # tempfile.mkstemp(prefix=".tmp-") names


class FolderBlobStore:
    """Implements BlobStore over a directory. Writes are atomic (temp file + rename) so readers never see half a file.

    `notify(event_name, key, size)` is called after each write and delete, as S3 notifies its bucket's queue."""

    def __init__(self, root: Path | str, notify: Callable[[str, str, int], None] | None = None):
        self.root = private_dir(Path(root).resolve())
        older_layout = not (self.root / TEMP_DIR).exists()
        self.temp = private_dir(self.root / TEMP_DIR)
        self.notify = notify
        if older_layout:
            self._drop_legacy_temp_files()
        self._warn_if_case_insensitive()

    def _path(self, key: str) -> Path:
        """The file of a key. A key is '/'-separated names: none empty, '.' or '..' (each key has exactly one
        path, and no other key's), the first not the temp folder, and the path must stay inside the root."""
        names = key.split("/")
        if any(name in ("", ".", "..") or "\x00" in name for name in names) or names[0] == TEMP_DIR:
            raise InvalidInput("blob key must be '/'-separated names, none empty, '.', '..' or the temp folder")
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise InvalidInput("blob key escapes the store")
        return path

    def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        writer = self.open_put(key, content_type)
        try:
            writer.write(data)
        except BaseException:
            writer.abort()
            raise
        writer.commit()

    def open_put(self, key: str, content_type: str, *, only_if_absent: bool = False) -> BlobWriter:
        """A blob written piece by piece (the local server streams uploads to disk instead of holding them in
        memory): nothing is visible under `key` until `commit`, and `abort` leaves nothing behind. With
        `only_if_absent`, `commit` refuses (Conflict, nothing written) when the key already holds a blob, as S3
        refuses a PUT with `If-None-Match: *`: of writers racing for one key exactly one commits."""
        return BlobWriter(self, key, only_if_absent=only_if_absent)

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

    def list_blobs(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[str]:
        keys = self._all_blobs(prefix)
        if start_after is not None:
            keys = keys[bisect.bisect_right(keys, start_after) :]
        return keys if limit is None else keys[: max(0, limit)]

    def _all_blobs(self, prefix: str) -> list[str]:
        keys = []
        # Walk only the folder the prefix points into, not the whole store.
        start = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        for dirpath, dirnames, filenames in os.walk(start):
            if dirpath == str(self.root) and TEMP_DIR in dirnames:
                dirnames.remove(TEMP_DIR)  # outside the key space (no key can name it), so not a blob
            for name in filenames:
                key = Path(dirpath, name).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def _move_into_place(self, tmp: str, path: Path, *, only_if_absent: bool = False) -> None:
        # A hard link is the rename that never replaces: it fails with FileExistsError when `path` exists, atomically
        # (two links to one name cannot both succeed), and the file is complete before it has the name.
        place = _link_new if only_if_absent else os.replace
        for _ in range(2):
            private_dir(path.parent)
            try:
                place(tmp, path)
                return
            except FileNotFoundError:
                # A delete in the same folder pruned it, empty, between its creation and the rename: create it again.
                continue
        private_dir(path.parent)
        place(tmp, path)

    def _drop_legacy_temp_files(self) -> None:
        """Before `.tmp/` existed, temp files were written next to the blobs as `.tmp-XXXXXXXX` and hidden from the
        listing; one left by a crash would now list as a blob (and be indexed as a document). Remove those, once,
        when older than an hour (never a write still in progress)."""
        cutoff = time.time() - 3600
        for dirpath, dirnames, filenames in os.walk(self.root):
            if dirpath == str(self.root) and TEMP_DIR in dirnames:
                dirnames.remove(TEMP_DIR)
            for name in filenames:
                path = Path(dirpath, name)
                if LEGACY_TEMP_NAME.fullmatch(name) and path.stat().st_mtime < cutoff:
                    path.unlink(missing_ok=True)
                    self._prune(path.parent)

    def _warn_if_case_insensitive(self) -> None:
        """Blob keys differ in letter case ('Doc' and 'doc' are two ids). A case-insensitive file system (macOS and
        Windows defaults) would give both one file; say so at start rather than mix them silently."""
        fd, probe = tempfile.mkstemp(dir=self.temp, prefix="case-probe-")
        os.close(fd)
        try:
            folded = Path(probe).with_name(Path(probe).name.upper())
            if folded.exists():
                logger.warning(
                    "the blob folder is on a case-insensitive file system: ids that differ only in "
                    "letter case would share files; use a case-sensitive volume",
                    extra={"root": str(self.root)},
                )
        finally:
            Path(probe).unlink(missing_ok=True)

    def _prune(self, directory: Path) -> None:
        """Remove empty parent folders so a deleted document leaves nothing behind."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent


def _link_new(tmp: str, path: Path) -> None:
    os.link(tmp, path)
    os.unlink(tmp)


class BlobWriter:
    """One blob being written into the store's temp folder; `commit` moves it into place and notifies."""

    def __init__(self, store: FolderBlobStore, key: str, *, only_if_absent: bool = False):
        self.store = store
        self.key = key
        self.only_if_absent = only_if_absent
        self.path = store._path(key)
        fd, self.tmp = tempfile.mkstemp(dir=store.temp)  # mkstemp creates the file 0600
        self.handle = os.fdopen(fd, "wb")
        self.size = 0

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.size += len(data)

    def commit(self) -> None:
        try:
            self.handle.close()
            self.store._move_into_place(self.tmp, self.path, only_if_absent=self.only_if_absent)
        except FileExistsError as error:
            self.abort()
            raise Conflict(f"blob {self.key!r} already exists") from error
        except BaseException:
            self.abort()
            raise
        if self.store.notify:
            self.store.notify("ObjectCreated:Put", self.key, self.size)

    def abort(self) -> None:
        self.handle.close()
        Path(self.tmp).unlink(missing_ok=True)
