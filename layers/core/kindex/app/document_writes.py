"""Document writes that never lose another write: every update commits over the revision it read, and one that finds
the record changed since reads it again and applies its own change on top (bounded, with jittered pauses), so two
writes of different fields (a title PUT and an ingest's status, say) both land."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import Document
from kindex.domain.ports import DocumentStore

logger = logging.getLogger(__name__)

#: Commits tried before a write gives up with Conflict. Each lost race means another write committed meanwhile, so
#: with the pauses below 16 writers of one record at the same instant all land (tests/integration/
#: test_concurrent_document_fields.py); what still loses 8 times in a row answers 409, which a client may retry.
WRITE_ATTEMPTS = 8
# Pauses before a retry: random up to FIRST_PAUSE * 2^(attempt - 1) seconds, at most MAX_PAUSE, so that writers that
# lost together do not read and commit together again. A read-modify-write takes about a millisecond on SQLite and a
# few on DynamoDB.
FIRST_PAUSE = 0.004
MAX_PAUSE = 0.25

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
    current = read
    for attempt in range(attempts):
        if attempt:
            time.sleep(random.uniform(0, min(MAX_PAUSE, FIRST_PAUSE * 2 ** (attempt - 1))))
            current = documents.get_document(tenant, collection_id, document_id)
        document = change(current).model_copy(update={"revision": (current.revision if current else 0) + 1})
        try:
            documents.put_document(tenant, document, create=current is None)
        except (Conflict, NotFound):
            continue  # another write committed (or deleted the record) since `current` was read
        return document, current is None
    logger.warning("document write kept losing to other writes", extra={
        "tenant": tenant, "collection": collection_id, "document": document_id, "attempts": attempts})
    raise Conflict(f"document {document_id!r} kept changing while it was written; try again")


def same_content(read: Document | None, current: Document | None, document_id: str) -> None:
    """For a write that replaces the content (or works on it): the record must still hold the content it read
    (version and source): NotFound when the document went away, Conflict when other content committed since."""
    if current is None and read is not None:
        raise NotFound(f"document {document_id!r} does not exist")
    if _content(current) != _content(read):
        raise Conflict(f"document {document_id!r} changed meanwhile")


def _content(document: Document | None) -> tuple[int, str | None]:
    return (document.version, document.source) if document is not None else (0, None)
