"""A file to upload through a presigned URL, readable again for each attempt (the sync and the async client)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

BLOCK = 1 << 20


class UploadSource:
    """What to upload: a path (streamed from disk, read again for each attempt) or bytes, with its name and size;
    without `mimetype` the server tells the type from the name (and checks it against the content)."""

    def __init__(self, filename: str, size: int, mimetype: str | None, path: Path | None, data: bytes | None):
        self.filename, self.size, self.mimetype, self.path, self.data = filename, size, mimetype, path, data

    @classmethod
    def of(cls, file: str | Path | bytes, filename: str | None, mimetype: str | None) -> "UploadSource":
        if isinstance(file, bytes | bytearray | memoryview):
            if not filename:
                raise ValueError("give filename= with bytes: the server reads the file's type from its name")
            data = bytes(file)
            return cls(filename, len(data), mimetype, None, data)
        path = Path(file)
        name = filename or path.name
        return cls(name, path.stat().st_size, mimetype, path, None)

    def chunks(self, size: int = BLOCK) -> Iterator[bytes]:
        if self.data is not None:
            yield self.data
            return
        assert self.path is not None  # the constructor sets one of data and path
        with self.path.open("rb") as handle:
            while block := handle.read(size):
                yield block

    async def async_chunks(self, size: int = BLOCK) -> AsyncIterator[bytes]:
        # Local file reads of one block do not stall the loop noticeably; the network side is what is awaited.
        for block in self.chunks(size):
            yield block
