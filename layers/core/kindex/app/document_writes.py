"""Document writes that never lose another write: every update commits over the revision it read, and one that finds
the record changed since reads it again and applies its own change on top (`record_writes.write_record`), so two
writes of different fields (a title PUT and an ingest's status, say) both land."""

from __future__ import annotations

from collections.abc import Callable

from kindex.app.record_writes import WRITE_ATTEMPTS, write_record
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import Document
from kindex.domain.ports import DocumentStore

#: What a write does to the record it read (None: no record): the document to commit, without its revision (the
#: writer numbers it). It decides on the record it is given: raising (Conflict, NotFound, InvalidInput ...) ends the
#: write with that error, never retried.
Change = Callable[[Document | None], Document]


def write_document(documents: DocumentStore, tenant: str, collection_id: str, document_id: str,
                   read: Document | None, change: Change, *, attempts: int = WRITE_ATTEMPTS) -> tuple[Document, bool]:
    """Commit `change(read)` over `read`'s revision (a create when `read` is None); after each Conflict (another
    write committed first), read the record again and commit `change` of that. Returns (what was written, whether it
    was a create). Conflict when every attempt lost. A record deleted meanwhile is read again as None too: `change`
    decides whether that creates it or ends the write (NotFound)."""
    return write_record(
        lambda: documents.get_document(tenant, collection_id, document_id),
        lambda document, create: documents.put_document(tenant, document, create=create),
        read, change, what=f"document {document_id!r}",
        log={"tenant": tenant, "collection": collection_id, "document": document_id}, attempts=attempts)


def same_content(read: Document | None, current: Document | None, document_id: str) -> None:
    """For a write that replaces the content (or works on it): the record must still hold the content it read
    (version and source): NotFound when the document went away, Conflict when other content committed since."""
    if current is None and read is not None:
        raise NotFound(f"document {document_id!r} does not exist")
    if _content(current) != _content(read):
        raise Conflict(f"document {document_id!r} changed meanwhile")


def _content(document: Document | None) -> tuple[int, str | None]:
    return (document.version, document.source) if document is not None else (0, None)
