"""Writes that never lose another write of the same record (a document or a collection): every update commits over
the revision it read, and one that finds the record changed since reads it again and applies its own change on top
(bounded, with jittered pauses), so two writes of different fields (a title PUT and an ingest's status, a collection's
groups and its chunking) both land. The store's conditional write decides; nothing here locks."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import Collection, Document
from kindex.domain.ports import CollectionStore
from kindex.domain.quotas import QuotaLimits

logger = logging.getLogger(__name__)

#: Commits tried before a write gives up with Conflict. Each lost race means another write committed meanwhile, so
#: with the pauses below 16 writers of one record at the same instant all land (tests/integration/
#: test_concurrent_document_fields.py, test_concurrent_collection_fields.py); what still loses 8 times in a row
#: answers 409, which a client may retry.
WRITE_ATTEMPTS = 8
# Pauses before a retry: random up to FIRST_PAUSE * 2^(attempt - 1) seconds, at most MAX_PAUSE, so that writers that
# lost together do not read and commit together again. A read-modify-write takes about a millisecond on SQLite and a
# few on DynamoDB.
FIRST_PAUSE = 0.004
MAX_PAUSE = 0.25


#: The records that carry a write revision.
Record = TypeVar("Record", Document, Collection)


def write_record(
    read_again: Callable[[], Record | None],
    commit: Callable[[Record, Record | None], None],
    read: Record | None,
    change: Callable[[Record | None], Record],
    *,
    what: str,
    log: dict[str, str],
    attempts: int = WRITE_ATTEMPTS,
) -> tuple[Record, bool]:
    """Commit `change(read)` over `read`'s revision (a create when `read` is None) through `commit(record, replaced)`
    (`replaced`: the record it replaces, None for a create), which must raise Conflict when the stored revision is
    not the one before (or the record exists, for a create) and NotFound when an update finds no record. After each
    of those, read the record again and commit `change` of that.
    `change` gets the record as read (None: no record) and returns the record to commit, without its revision (this
    numbers it); raising (Conflict, NotFound, InvalidInput ...) ends the write with that error, never retried.
    Returns (what was written, whether it was a create); Conflict naming `what` when every attempt lost (logged with
    `log`: tenant and ids)."""
    current = read
    for attempt in range(attempts):
        if attempt:
            time.sleep(random.uniform(0, min(MAX_PAUSE, FIRST_PAUSE * 2 ** (attempt - 1))))
            current = read_again()
        record = change(current).model_copy(update={"revision": (current.revision if current else 0) + 1})
        try:
            commit(record, current)
        except (Conflict, NotFound):
            continue  # another write committed (or deleted the record) since `current` was read
        return record, current is None
    logger.warning("write kept losing to other writes", extra={**log, "attempts": attempts})
    raise Conflict(f"{what} kept changing while it was written; try again")


#: What a collection write does to the record it read (None: no record): the collection to commit.
CollectionChange = Callable[[Collection | None], Collection]


def write_collection(
    collections: CollectionStore,
    tenant: str,
    collection_id: str,
    read: Collection | None,
    change: CollectionChange,
    *,
    attempts: int = WRITE_ATTEMPTS,
    limits: QuotaLimits | None = None,
) -> tuple[Collection, bool]:
    """`write_record` for a collection record: PUTs, model switches, anything that reads a collection and writes it
    back. The change must keep `config_version` meaning what it means (bumped by `merge_collection` for a chunking or
    model change, and only then). With `limits`, a create over the tenant's collection quota is QuotaExceeded."""
    return write_record(
        lambda: collections.get_collection(tenant, collection_id),
        lambda collection, replaced: collections.put_collection(
            tenant, collection, create=replaced is None, limits=limits
        ),
        read,
        change,
        what=f"collection {collection_id!r}",
        log={"tenant": tenant, "collection": collection_id},
        attempts=attempts,
    )
