"""Document writes that never lose another write: every update commits over the revision it read, and one that finds
the record changed since reads it again and applies its own change on top (`record_writes.write_record`), so two
writes of different fields (a title PUT and an ingest's status, say) both land."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from kindex.app.record_writes import WRITE_ATTEMPTS, write_record
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.filters import canonical_json
from kindex.domain.models import FILTER_FIELDS, Document, DocumentStatus, utc_now
from kindex.domain.ports import DocumentStore
from kindex.domain.quotas import QuotaLimits

#: What a write does to the record it read (None: no record): the document to commit, without its revision (the
#: writer numbers it). It decides on the record it is given: raising (Conflict, NotFound, InvalidInput ...) ends the
#: write with that error, never retried.
Change = Callable[[Document | None], Document]


def write_document(
    documents: DocumentStore,
    tenant: str,
    collection_id: str,
    document_id: str,
    read: Document | None,
    change: Change,
    *,
    attempts: int = WRITE_ATTEMPTS,
    limits: QuotaLimits | None = None,
) -> tuple[Document, bool]:
    """Commit `change(read)` over `read`'s revision (a create when `read` is None); after each Conflict (another
    write committed first), read the record again and commit `change` of that. Returns (what was written, whether it
    was a create). Conflict when every attempt lost. A record deleted meanwhile is read again as None too: `change`
    decides whether that creates it or ends the write (NotFound). With `limits`, a write that would take the
    tenant's usage past its plan's quotas is QuotaExceeded (never retried: a count does not fall by waiting)."""
    return write_record(
        lambda: documents.get_document(tenant, collection_id, document_id),
        lambda document, replaced: documents.put_document(
            tenant, document, create=replaced is None, previous=replaced, limits=limits
        ),
        read,
        change,
        what=f"document {document_id!r}",
        log={"tenant": tenant, "collection": collection_id, "document": document_id},
        attempts=attempts,
    )


@overload
def same_content(read: Document, current: Document | None, document_id: str) -> Document: ...
@overload
def same_content(read: Document | None, current: Document | None, document_id: str) -> Document | None: ...
def same_content(read: Document | None, current: Document | None, document_id: str) -> Document | None:
    """For a write that replaces the content (or works on it): the record must still hold the content it read
    (version and source): NotFound when the document went away, Conflict when other content committed since.
    Returns `current` (never None when `read` is a record: the typed form of "it is still there")."""
    if current is None and read is not None:
        raise NotFound(f"document {document_id!r} does not exist")
    if _content(current) != _content(read):
        raise Conflict(f"document {document_id!r} changed meanwhile")
    return current


def _content(document: Document | None) -> tuple[int, str | None]:
    return (document.version, document.source) if document is not None else (0, None)


def _comparable(name: str, value: Any) -> Any:
    """A filter field's value as compared for "did it change": attributes as canonical JSON (Python's `1 == True`
    would take {"a": 1} for {"a": true})."""
    if name == "attributes" and value is not None:
        return canonical_json(value)
    return value


def filter_fields_change(current: Document, changes: dict[str, Any]) -> bool:
    """Whether applying `changes` changes a filter field (FILTER_FIELDS) of `current`."""
    return any(
        _comparable(name, value) != _comparable(name, getattr(current, name))
        for name, value in changes.items()
        if name in FILTER_FIELDS
    )


def with_filter_fields(current: Document, changes: dict[str, Any]) -> Document:
    """`current` with `changes` applied; when a filter field (FILTER_FIELDS) changes, `fields_version` is bumped, and
    an indexed document shows `in_progress` until the ingest has rewritten its index entries (see IngestService)."""
    update = {**changes, "updated_at": utc_now()}
    if filter_fields_change(current, changes):
        update["fields_version"] = current.fields_version + 1
        if current.status is DocumentStatus.INDEXED:
            update["status"] = DocumentStatus.IN_PROGRESS
    return current.model_copy(update=update)
