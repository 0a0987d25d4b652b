"""DynamoDB adapter of ChunkStore, in the metadata table (`pk`/`sk` strings); the layout table below also lists
the embedding cache (dynamodb_embedding_cache) and the query log (dynamodb_query_log) items that share it.

Item layout (key parts escaped with `dynamodb_store.escape_part`, sort keys raw; see that module's docstring):

| item                      | pk                                       | sk              | attributes             |
|---------------------------|------------------------------------------|-----------------|------------------------|
| chunk                     | `T#{tenant}#C#{collection}#D#{document}` | `{chunk_id}`    | idx, start, end, text¹ |
| chunked document (marker) | `T#{tenant}#C#{collection}#CHUNKDOCS`    | `{document_id}` | -                      |
| cached vector             | `T#{tenant}#EMB#{model}`                 | `{sha256}`      | vector (float32 LE)    |
| query log entry           | `T#{tenant}#Q#{query_id}`                | `Q`             | body, expires_at (TTL) |

¹ and, when the chunk has them, page_start, page_end, section and table_header (items written before chunks had a
section or table header read as None).

Chunks. One partition per document, so listing a document's chunks is one Query and a read by (collection,
document, chunk id) is a direct key: search hits carry exactly those, so `get_chunks` is one BatchGetItem per 100
refs. The sort key is the chunk id (not the index) for that reason; `list_chunks` sorts by the `idx` attribute.
Escaped ids can make a key longer than DynamoDB's 2,048-byte partition key limit (a 255-character id of 4-byte
characters is 1,020 bytes), so a partition key that would be too long is replaced by `H#{sha256 of it}`; every
readable key starts with `T#`, so the two forms never meet. Each chunk item also carries its collection
and document id (and its pages when it has them), so an item read back never depends on decoding its key.

Deleting a collection's chunks must find every chunked document without a Scan: `put_chunks` first writes one
marker item per document into the collection's `CHUNKDOCS` partition, and deletes remove the marker last. Markers
are kept by the chunk store itself rather than derived from the document records, so chunks whose document record
is already gone (or not yet written) are still found.

Embedding cache. One partition per tenant and model; sha256 sort keys spread evenly, which lets DynamoDB split a hot
partition.

Query log. One item per query (its own partition, so a tenant's busy query traffic spreads). `expires_at` is the
table's TTL attribute; TTL deletion is lazy (up to days late), so reads check the expiry themselves.

Requests are built by the pure functions below; `DynamoDbTable._call` is the one place where botocore errors
become domain errors (as in `DynamoDbMetadataStore._call`).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from kindex.adapters.aws.dynamodb_table import (
    MAX_PK_BYTES,
    DynamoDbTable,
    addressable,
    escape_part,
    item_key,
)
from kindex.domain.types import ChunkRange, ChunkRef, StoredChunk

logger = logging.getLogger(__name__)

ITER_BATCH = 100  # BatchGetItem's limit


# Pure key and request building
def fit_partition_key(readable: str) -> str:
    """`readable`, or `H#{its sha256}` when it is longer than DynamoDB accepts (readable keys start with `T#`, older
    versions' cache items with `EMB#`, never `H#`, and different readable keys hash differently, so no two partitions
    can meet)."""
    if len(readable.encode("utf-8")) <= MAX_PK_BYTES:
        return readable
    return "H#" + hashlib.sha256(readable.encode("utf-8")).hexdigest()


def chunks_pk(tenant: str, collection: str, document_id: str) -> str:
    """The partition holding one document's chunks."""
    return fit_partition_key(f"T#{escape_part(tenant)}#C#{escape_part(collection)}#D#{escape_part(document_id)}")


def chunked_documents_pk(tenant: str, collection: str) -> str:
    """The partition of marker items naming every document of the collection that has chunks."""
    return fit_partition_key(f"T#{escape_part(tenant)}#C#{escape_part(collection)}#CHUNKDOCS")


def build_chunk_item(tenant: str, chunk: StoredChunk) -> dict[str, dict[str, Any]]:
    item: dict[str, dict[str, Any]] = {
        **item_key(chunks_pk(tenant, chunk.collection, chunk.document_id), chunk.chunk_id),
        "collection": {"S": chunk.collection},
        "document_id": {"S": chunk.document_id},
        "idx": {"N": str(chunk.index)},
        "start": {"N": str(chunk.start)},
        "end": {"N": str(chunk.end)},
        "text": {"S": chunk.text},
    }
    if chunk.page_start is not None:
        item["page_start"] = {"N": str(chunk.page_start)}
    if chunk.page_end is not None:
        item["page_end"] = {"N": str(chunk.page_end)}
    if chunk.section:
        item["section"] = {"S": chunk.section}
    if chunk.table_header:
        item["table_header"] = {"S": chunk.table_header}
    return item


def parse_chunk_item(item: dict[str, dict[str, Any]]) -> StoredChunk:
    def number(name: str) -> int | None:
        return int(item[name]["N"]) if name in item else None

    return StoredChunk(
        chunk_id=item["sk"]["S"],
        collection=item["collection"]["S"],
        document_id=item["document_id"]["S"],
        index=int(item["idx"]["N"]),
        start=int(item["start"]["N"]),
        end=int(item["end"]["N"]),
        text=item["text"]["S"],
        page_start=number("page_start"),
        page_end=number("page_end"),
        section=item["section"]["S"] if "section" in item else None,
        table_header=item["table_header"]["S"] if "table_header" in item else None,
    )


def _unique(values: Iterable[Any], key: Callable[[Any], Any]) -> list[Any]:
    """First occurrence of each key, in order: a batch request must not name one item twice."""
    seen: dict[Any, Any] = {}
    for value in values:
        seen.setdefault(key(value), value)
    return list(seen.values())


class DynamoDbChunkStore(DynamoDbTable):
    """Implements ChunkStore in the metadata table (layout in the module docstring).

    `get_chunks` reads eventually consistently: it serves queries, whose hits come from vectors written after the
    chunk texts (and made searchable only after an index refresh), so the texts are older than any hit. Listing,
    which ingestion uses to find the chunks that are gone, reads strongly consistently.
    """

    def put_chunks(self, tenant: str, chunks: Sequence[StoredChunk]) -> None:
        chunks = _unique(chunks, key=lambda c: (c.collection, c.document_id, c.chunk_id))
        if not chunks:
            return
        documents = _unique(((c.collection, c.document_id) for c in chunks), key=lambda pair: pair)
        # Markers first: chunks must never exist without the marker that lets a collection delete find them.
        self._batch_write(
            puts=[
                item_key(chunked_documents_pk(tenant, collection), document_id) for collection, document_id in documents
            ]
        )
        self._batch_write(puts=[build_chunk_item(tenant, chunk) for chunk in chunks])

    def get_chunks(self, tenant: str, refs: Sequence[ChunkRef]) -> dict[str, StoredChunk]:
        keys = _unique(
            (
                key
                for key in (item_key(chunks_pk(tenant, r.collection, r.document_id), r.chunk_id) for r in refs)
                if addressable(key["pk"]["S"], key["sk"]["S"])
            ),
            key=lambda key: (key["pk"]["S"], key["sk"]["S"]),
        )
        found: dict[str, StoredChunk] = {}
        for item in self._batch_get(keys):
            chunk = parse_chunk_item(item)
            found[chunk.chunk_id] = chunk
        return found

    def get_chunk_ranges(self, tenant: str, ranges: Sequence[ChunkRange]) -> list[StoredChunk]:
        # The sort key is the chunk id, not the index: one keys-and-indexes Query per document finds the ids in its
        # ranges (a few bytes per chunk, never the texts), then one BatchGetItem per 100 chunks reads the texts,
        # eventually consistently as get_chunks does (the hits being expanded are older than the read).
        by_document: dict[tuple[str, str], list[ChunkRange]] = {}
        for each in ranges:
            by_document.setdefault((each.collection, each.document_id), []).append(each)
        keys = []
        for (collection, document_id), wanted in by_document.items():
            pk = chunks_pk(tenant, collection, document_id)
            for item in self._query_items(pk, projection="sk, idx"):
                index = int(item["idx"]["N"])
                if any(r.first <= index <= r.last for r in wanted):
                    keys.append(item_key(pk, item["sk"]["S"]))
        chunks = [parse_chunk_item(item) for item in self._batch_get(keys)]
        return sorted(chunks, key=lambda c: (c.collection, c.document_id, c.index, c.chunk_id))

    def list_chunks(self, tenant: str, collection: str, document_id: str) -> list[StoredChunk]:
        chunks = [parse_chunk_item(item) for item in self._query_items(chunks_pk(tenant, collection, document_id))]
        return sorted(chunks, key=lambda c: (c.index, c.chunk_id))

    def iter_chunks(
        self, tenant: str, collection: str, document_id: str, *, after: tuple[int, str] | None = None, offset: int = 0
    ) -> Iterator[StoredChunk]:
        # The partition is ordered by chunk id, not index: read every position (keys and indexes only, so the
        # Lambda never holds a large document's texts), then fetch the texts of what the caller consumes, one
        # BatchGetItem of ITER_BATCH keys at a time.
        pk = chunks_pk(tenant, collection, document_id)
        positions = sorted(
            (int(item["idx"]["N"]), item["sk"]["S"]) for item in self._query_items(pk, projection="sk, idx")
        )
        start = (bisect.bisect_right(positions, after) if after is not None else 0) + max(offset, 0)
        for first in range(start, len(positions), ITER_BATCH):
            batch = [chunk_id for _, chunk_id in positions[first : first + ITER_BATCH]]
            found = {
                item["sk"]["S"]: item
                for item in self._batch_get([item_key(pk, chunk_id) for chunk_id in batch], consistent=True)
            }
            # A chunk deleted since the positions were read is skipped; the order is the positions' order.
            yield from (parse_chunk_item(found[chunk_id]) for chunk_id in batch if chunk_id in found)

    def delete_chunks(
        self, tenant: str, collection: str, *, document_id: str | None = None, chunk_ids: Sequence[str] | None = None
    ) -> None:
        if document_id is None:
            marker_pk = chunked_documents_pk(tenant, collection)
            documents = [item["sk"]["S"] for item in self._query_items(marker_pk, projection="sk")]
            for each in documents:
                self._delete_document_chunks(tenant, collection, each)
            logger.info(
                "collection chunks deleted",
                extra={"tenant": tenant, "collection": collection, "documents": len(documents)},
            )
        elif chunk_ids is None:
            self._delete_document_chunks(tenant, collection, document_id)
        else:
            pk = chunks_pk(tenant, collection, document_id)
            self._batch_write(deletes=[item_key(pk, cid) for cid in dict.fromkeys(chunk_ids) if addressable(pk, cid)])

    def _delete_document_chunks(self, tenant: str, collection: str, document_id: str) -> None:
        pk = chunks_pk(tenant, collection, document_id)
        keys = [item_key(pk, item["sk"]["S"]) for item in self._query_items(pk, projection="sk")]
        self._batch_write(deletes=keys)
        marker = item_key(chunked_documents_pk(tenant, collection), document_id)
        if addressable(marker["pk"]["S"], document_id):
            self._call("delete_item", {"TableName": self.table_name, "Key": marker})
