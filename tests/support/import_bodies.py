"""The body of an import (`POST .../import`, `ImportRequest`) of one document `d` cut into two chunks, for the
tests that race imports against other writers of that document."""

from __future__ import annotations

from typing import Any

# A hash:8 vector: imports carry their vectors, so the tests choose one and never embed.
VECTOR = [1.0, 0, 0, 0, 0, 0, 0, 0]


def two_chunk_import(first: str, second: str, chunking: dict[str, Any] | None = None) -> dict[str, Any]:
    """Document `d` as the chunks `first` and `second` (offsets back to back), hash:8 vectors; `chunking` the
    collection's chunking fields when the import should match them (none: the import names no chunking)."""
    body: dict[str, Any] = {
        "format_version": 1,
        "embedding_model": "hash:8",
        "dimensions": 8,
        "documents": [{"id": "d", "chunk_count": 2}],
        "chunks": [
            {"document_id": "d", "index": 0, "start": 0, "end": len(first), "text": first, "vector": VECTOR},
            {
                "document_id": "d",
                "index": 1,
                "start": len(first),
                "end": len(first) + len(second),
                "text": second,
                "vector": VECTOR,
            },
        ],
    }
    if chunking is not None:
        body["chunking"] = chunking
    return body
