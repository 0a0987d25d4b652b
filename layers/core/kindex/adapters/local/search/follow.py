"""How a follower keeps a vector partition in step with the files another process writes (index.py, `follower`).

The writer (the server's process) appends a record to a partition's log and fsyncs it before a write returns, and
compacts by writing a new snapshot, renaming it over the old one, and only then removing the log. A follower (a query
process) therefore sees every acknowledged write if, before it searches a partition, it looks at the two files:

- the snapshot is another file than the one it loaded (a compaction, or the partition removed): load it all again;
- the log is another file, or shorter, or the last record it read is no longer where it read it: load it all again;
- the log is longer: replay the records after the last one it read. A record being appended (not complete, or not
  yet matching its CRC) is not read, and the log is never truncated: that is the writer's business at its own load.

A follower tells snapshots apart by device, inode, size and modification time (a new snapshot is written only by a
compaction, far more than a clock tick after the last one), and holds the log it read open: its inode cannot then be
reused by a new log while the follower compares them, and the tail is read from the very file the earlier records
came from. A log that is gone is let go by `sweep` (LocalSearchIndex.sweep), so a deleted collection's bytes do not
stay on disk behind an open descriptor. It never writes a file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kindex.adapters.local.search.log import FRAME

# A compaction racing the look at the two files makes the follower look again; after this many tries it gives up
# (the caller's search fails, and the next one tries again).
ATTEMPTS = 8


Identity = tuple[int, int, int, int]


@dataclass
class Followed:
    """What a follower read of one partition: the snapshot's identity (None: there was none), the log it read, open
    (None: none), how many bytes of that log it applied, the log's size when it last looked, and where the last record
    it applied starts with its frame's bytes (to notice a log rewritten in place)."""

    snapshot: Identity | None
    log: int | None
    applied: int = 0
    seen_size: int = 0
    last_record: tuple[int, bytes] | None = None

    def close(self) -> None:
        if self.log is not None:
            try:
                os.close(self.log)
            except OSError:
                pass
            self.log = None


def identity(path: Path) -> Identity | None:
    """(device, inode, size, mtime in ns) of the file at `path`; None when there is none."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def same_file(fd: int | None, path: Path) -> bool:
    """Is `path` the file open as `fd` (both absent counts as the same)?"""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return fd is None
    if fd is None:
        return False
    held = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


def current(followed: Followed | None, snapshot: Path, log: Path) -> str:
    """ "same" (nothing to read), "tail" (the log grew: replay what follows) or "reload" (read both files again)."""
    if followed is None or identity(snapshot) != followed.snapshot or not same_file(followed.log, log):
        return "reload"
    if followed.log is None:
        return "same"
    size = os.fstat(followed.log).st_size
    if size < followed.applied or not _last_record_intact(followed):
        return "reload"
    return "same" if size == followed.seen_size else "tail"


def _last_record_intact(followed: Followed) -> bool:
    if followed.last_record is None or followed.log is None:
        return True
    start, frame = followed.last_record
    return os.pread(followed.log, FRAME.size, start) == frame


def open_pair(snapshot: Path, log: Path) -> tuple[Followed, int | None]:
    """The snapshot (open: the caller closes it) and the log (held by the Followed returned) as one consistent pair:
    the log opened is the one that follows the snapshot opened (a compaction renames the new snapshot into place
    before it removes the log, so if the snapshot is still the one opened after the log was opened, the log belongs
    to it)."""
    for _ in range(ATTEMPTS):
        snapshot_fd, log_fd = _open(snapshot), _open(log)
        held = _identity_of(snapshot_fd)
        if identity(snapshot) == held:
            return Followed(held, log_fd), snapshot_fd
        for fd in (snapshot_fd, log_fd):
            if fd is not None:
                os.close(fd)
    raise RuntimeError(f"vector partition {snapshot.name} kept changing while it was opened")


def read_from(fd: int, offset: int) -> bytes:
    """The bytes of the open file `fd` from `offset` to its current end."""
    size = os.fstat(fd).st_size
    pieces = []
    while offset < size:
        piece = os.pread(fd, size - offset, offset)
        if not piece:
            break
        pieces.append(piece)
        offset += len(piece)
    return b"".join(pieces)


def _identity_of(fd: int | None) -> Identity | None:
    if fd is None:
        return None
    found = os.fstat(fd)
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def _open(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
