"""`kindex export` and `kindex import`: one collection to a versioned JSON-lines file and back, over HTTP(S) against
any deployment. Both stream: export writes each page as it arrives, import sends bounded batches as it reads, so
memory stays bounded whatever the collection's size.

The file (gzip-compressed when its name ends in `.gz`; import detects gzip by its magic bytes):

    {"format": "kindex-export", "format_version": 1, "collection": {...}, "embedding_model": "hash:384",
     "dimensions": 384, "exported_at": "..."}                       <- the header line
    {"type": "document", "id": ..., "title": ..., "chunk_count": N, ...}
    {"type": "chunk", "document_id": ..., "chunk_id": ..., "index": 0, "start": 0, "end": 57, "page_start": null,
     "page_end": null, "text": "...", "vector": [...]}             <- a document's line comes before its chunks
    ...
    {"type": "end", "documents": D, "chunks": C}                   <- the trailer: a file without it was cut short
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Protocol

from pydantic import ValidationError

from kindex.client import Kindex, NotFound
from kindex.domain.validation import describe

FORMAT = "kindex-export"
FORMAT_VERSION = 1
EXPORT_PAGE_CHUNKS = 500
# One import request: at most this many chunks or documents, and about this many bytes of JSON (the API takes 10 MiB).
BATCH_CHUNKS = 500
BATCH_DOCUMENTS = 1000
BATCH_BYTES = 4 * 1024 * 1024
# The longest line import reads: a 100,000-character chunk escaped to JSON with a 16,384-value vector fits.
MAX_LINE_BYTES = 16 * 1024 * 1024
CHUNKING_FIELDS = ("chunking_method", "chunking_max_size", "chunking_overlap_offset")
# What `kindex import` copies from the header into a collection it creates (the writable fields).
COLLECTION_FIELDS = (
    "title",
    "embedding_model",
    *CHUNKING_FIELDS,
    "document_spaces",
    "allow_guests",
    "query_groups",
    "rights_check_method",
    "rights_check_method_configuration",
)


class TransferFailed(Exception):
    """The file or the deployment did not allow the export or import to finish (the message says why)."""


class _Progress:
    """A progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, description: str, enabled: bool):
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(desc=description, unit=" chunks", file=sys.stderr)

    def add(self, count: int) -> None:
        if self.bar is not None:
            self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def _writer(path: str) -> Iterator[IO[str]]:
    if path == "-":
        yield sys.stdout
        return
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    raw = (
        gzip.open(partial, "wt", encoding="utf-8")
        if target.name.endswith(".gz")
        else open(partial, "w", encoding="utf-8")
    )
    try:
        with raw:
            yield raw
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)  # the file appears only once complete


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def export_collection(client: Kindex, collection: str, output: str, *, progress: bool = True) -> dict[str, Any]:
    """Write the collection to `output` ('-' for stdout); returns what was written."""
    summary: dict[str, Any] = {"documents": 0, "chunks": 0, "skipped": []}
    bar = _Progress(f"export {collection}", progress)
    try:
        with _writer(output) as out:
            cursor = None
            while True:
                page = client.export_collection(collection, cursor, EXPORT_PAGE_CHUNKS)
                if cursor is None:
                    out.write(
                        _line(
                            {
                                "format": FORMAT,
                                "format_version": FORMAT_VERSION,
                                "collection": page.collection.model_dump(mode="json"),
                                "embedding_model": page.embedding_model,
                                "dimensions": page.dimensions,
                                "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            }
                        )
                    )
                for document in page.documents:
                    out.write(_line({"type": "document", **document.model_dump(mode="json")}))
                for chunk in page.chunks:
                    out.write(_line({"type": "chunk", **chunk.model_dump(mode="json")}))
                summary["documents"] += len(page.documents)
                summary["chunks"] += len(page.chunks)
                summary["skipped"] += page.skipped_documents
                bar.add(len(page.chunks))
                cursor = page.next_cursor
                if not cursor:
                    break
            out.write(_line({"type": "end", "documents": summary["documents"], "chunks": summary["chunks"]}))
    finally:
        bar.close()
    return summary


class _Lines(Protocol):
    """What the import reads: a file, stdin or a gzip stream (which typeshed does not type as an IO[bytes])."""

    def readline(self, size: int = -1, /) -> bytes: ...


@contextmanager
def _reader(path: str) -> Iterator[_Lines]:
    """The file's bytes, unpacked when they are gzip (told by the magic bytes, for stdin too)."""
    with nullcontext(sys.stdin.buffer) if path == "-" else open(path, "rb") as raw:
        magic = raw.peek(2)[:2] if isinstance(raw, io.BufferedReader) else b""
        if magic == b"\x1f\x8b":
            with gzip.open(raw, "rb") as unpacked:
                yield unpacked
        else:
            yield raw


def _records(stream: _Lines) -> Iterator[tuple[int, dict[str, Any], int]]:
    """(line number, record, size in bytes) of each non-empty line, never reading more than MAX_LINE_BYTES of one."""
    number = 0
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise TransferFailed(f"line {number} is longer than {MAX_LINE_BYTES} bytes")
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise TransferFailed(f"line {number} is not JSON: {error}") from error
        if not isinstance(record, dict):
            raise TransferFailed(f"line {number} is not a JSON object")
        yield number, record, len(line)


def _check_header(number: int, header: dict[str, Any]) -> None:
    if header.get("format") != FORMAT:
        raise TransferFailed(f'line {number}: not a kindex export (no \'"format": "{FORMAT}"\' header)')
    if header.get("format_version") != FORMAT_VERSION:
        raise TransferFailed(
            f"line {number}: format version {header.get('format_version')!r} is not supported "
            f"(this kindex reads version {FORMAT_VERSION})"
        )
    if not isinstance(header.get("collection"), dict):
        raise TransferFailed(f"line {number}: the header has no collection")


def _ensure_collection(client: Kindex, collection: str, header: dict[str, Any]) -> bool:
    """Create the collection from the header's configuration when it does not exist; True when created."""
    try:
        client.get_collection(collection)
        return False
    except NotFound:
        pass
    config = {name: header["collection"][name] for name in COLLECTION_FIELDS if name in header["collection"]}
    client.put_collection(collection, config)
    return True


class _Batch:
    def __init__(self, header: dict[str, Any]):
        self.base = {
            "format_version": FORMAT_VERSION,
            "embedding_model": header.get("embedding_model"),
            "dimensions": header.get("dimensions"),
            "chunking": {name: header["collection"].get(name) for name in CHUNKING_FIELDS},
        }
        self.documents: list[dict] = []
        self.chunks: list[dict] = []
        self.bytes = 0

    def add(self, number: int, record: dict[str, Any], size: int) -> None:
        kind = record.pop("type", None)
        if kind == "document":
            self.documents.append(record)
        elif kind == "chunk":
            self.chunks.append(record)
        else:
            raise TransferFailed(f"line {number}: unknown record type {kind!r}")
        self.bytes += size

    def full(self) -> bool:
        return len(self.chunks) >= BATCH_CHUNKS or len(self.documents) >= BATCH_DOCUMENTS or self.bytes >= BATCH_BYTES

    def body(self) -> dict[str, Any]:
        body = {**self.base, "documents": self.documents, "chunks": self.chunks}
        self.documents, self.chunks, self.bytes = [], [], 0
        return body


def import_file(client: Kindex, source: str, collection: str, *, progress: bool = True) -> dict[str, Any]:
    """Load an export into `collection` (created from the file's configuration when missing); returns totals."""
    summary: dict[str, Any] = {"collection_created": False, "documents": 0, "chunks": 0, "texts_embedded": 0}
    bar = _Progress(f"import {collection}", progress)

    def send(batch: _Batch, last_line: int) -> None:
        chunks = len(batch.chunks)
        try:
            result = client.import_batch(collection, batch.body())
        except ValidationError as error:  # the API's own model, checked here before the request
            raise TransferFailed(
                f"the records before line {last_line + 1} are not a valid batch: {describe(error)[:500]}"
            ) from error
        summary["documents"] += result.documents_completed
        summary["chunks"] += result.chunks_written
        summary["texts_embedded"] += result.texts_embedded
        bar.add(chunks)

    try:
        with _reader(source) as stream:
            records = _records(stream)
            first = next(records, None)
            if first is None:
                raise TransferFailed(f"{source} is empty")
            _check_header(first[0], first[1])
            header = first[1]
            summary["collection_created"] = _ensure_collection(client, collection, header)
            batch = _Batch(header)
            trailer = None
            number = first[0]
            for number, record, size in records:
                if trailer is not None:
                    raise TransferFailed(f"line {number}: records after the end line")
                if record.get("type") == "end":
                    trailer = record
                    continue
                batch.add(number, record, size)
                if batch.full():
                    send(batch, number)
            if batch.documents or batch.chunks:
                send(batch, number)
    finally:
        bar.close()
    if trailer is None:
        raise TransferFailed(
            f"{source} ends without its end line: the export was cut short (imported "
            f"{summary['chunks']} chunks so far; run the import again with a complete file)"
        )
    if (trailer.get("documents"), trailer.get("chunks")) != (summary["documents"], summary["chunks"]):
        raise TransferFailed(
            f"the file announces {trailer.get('documents')} documents and {trailer.get('chunks')} "
            f"chunks; {summary['documents']} and {summary['chunks']} were imported"
        )
    return summary
