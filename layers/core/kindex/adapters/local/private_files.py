"""Owner-only files for the local adapters: the data directory holds every tenant's texts, vectors and secrets.

Folders are 0700 and files 0600 whatever the process umask, so this holds when the adapters are used as a library
too. `kindex serve` and the CLI also set umask 077 (for anything else they write) and narrow a data directory made
by an older version once (`private_data_dir`). Modes only ever narrow here: the umask may take away more, never add.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
PRIVATE_UMASK = 0o077
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def private_dir(path: Path | str) -> Path:
    """`path` as a folder only its owner can enter: missing levels are created 0700 (`Path.mkdir(parents=True)`
    gives parents the default mode instead), and the folder itself is narrowed to 0700 if it is wider."""
    path = Path(path)
    for attempt in range(8):
        missing = []
        current = path
        while not current.exists():
            missing.append(current)
            current = current.parent
        try:
            for directory in reversed(missing):
                try:
                    directory.mkdir(mode=DIR_MODE)
                except FileExistsError:  # created meanwhile by another thread or process: still checked below
                    pass
            break
        except FileNotFoundError:
            # A delete pruned a level we found (empty) between our look and our mkdir: look again.
            if attempt == 7:
                raise
    _narrow(path, DIR_MODE)
    return path


def restrict(path: Path | str) -> None:
    """Narrow an existing file to 0600 (a missing one is fine: nothing to protect)."""
    _narrow(Path(path), FILE_MODE)


def restrict_sqlite(path: Path | str) -> None:
    """A SQLite database and its side files to 0600. Only ever by path (chmod), never by opening the file: closing
    any descriptor of a database releases every POSIX lock this process holds on it, including SQLite's own.
    SQLite creates `-wal`/`-shm` with the database file's mode, so a 0600 database keeps its later side files 0600."""
    path = Path(path)
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_SIDE_FILES)):
        restrict(candidate)


def restrict_tree(root: Path | str) -> int:
    """Narrow every folder under `root` to 0700 and every file to 0600 (symbolic links are left alone, and are not
    followed). Returns how many entries changed. For data directories written before modes were enforced."""
    changed = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            entry = Path(dirpath, name)
            if entry.is_symlink():
                continue
            changed += _narrow(entry, DIR_MODE if entry.is_dir() else FILE_MODE)
    return changed + _narrow(Path(root), DIR_MODE)


def _narrow(path: Path, mode: int) -> int:
    try:
        current = path.stat().st_mode & 0o777
        if current & ~mode:
            os.chmod(path, current & mode)
            return 1
    except FileNotFoundError:
        pass
    except PermissionError:  # not ours (a shared parent folder, say): say so, the data is no safer for failing
        logger.warning("cannot narrow the mode of a data path", extra={"path": str(path)})
    return 0


# What kindex itself keeps in a data directory. Only these are narrowed: `--data-dir .` pointed at a project folder
# must not strip the execute bits off its scripts. Anything else in a 0700 directory is out of others' reach anyway.
DATA_DIR_ENTRIES = ("kindex.sqlite3", "admin-key", "upload-secret", "worker.lock", "blobs", "index", "secrets")


def private_data_dir(path: Path | str) -> Path:
    """A local data directory, 0700. One made by an older version (still wider) has kindex's own entries narrowed
    (folders 0700, files 0600); its own mode changes last, so an interrupted pass runs again at the next start."""
    path = Path(path)
    if path.is_dir() and path.stat().st_mode & 0o077:
        changed = 0
        for name in DATA_DIR_ENTRIES:
            entry = path / name
            if entry.is_symlink():
                continue
            if entry.is_dir():
                changed += restrict_tree(entry)
            elif name == "kindex.sqlite3":
                restrict_sqlite(entry)
            else:
                restrict(entry)
        logger.info("data directory narrowed to owner-only", extra={"path": str(path), "entries": changed})
    return private_dir(path)
