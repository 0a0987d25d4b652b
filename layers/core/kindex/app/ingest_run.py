"""One ingest invocation from its records to its failures: `IngestRun` owns the invocation's `IngestBatch` and
drives the stateless `IngestService`; the ingest function parses its SQS event into `IngestRecord`s, calls `run`
and returns the failed records as SQS partial batch failures.

Why not Powertools' BatchProcessor: a record's outcome is not known when its own pass returns. Its documents are
marked indexed only after the batch's one keyword commit at the end, and a failed commit (or a failed status write
after it) fails records whose pass had succeeded; the processor's response would have to be patched afterwards. The
run keeps the one rule the processor gave us: a record's exception fails that record only."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kindex.app.ingest import IngestService, RetryableIngestFailure
from kindex.app.ingest_batch import IngestBatch
from kindex.domain.errors import Conflict

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectEvent:
    """One S3 record of a notification: an object created or removed, with the size S3 reported (None when none
    a careful reader would trust)."""

    name: str
    key: str
    size: int | None = None

    @property
    def created(self) -> bool:
        return not self.name.startswith("ObjectRemoved")


@dataclass(frozen=True)
class IngestRecord:
    """One queue message: its id and its object events (empty for S3's test event); `malformed` says why a body
    that is not a notification cannot be handled (the record fails, and is dead-lettered after its retries)."""

    id: str
    events: tuple[ObjectEvent, ...] = ()
    malformed: str | None = None

    @property
    def created(self) -> dict[str, int | None]:
        return {event.key: event.size for event in self.events if event.created}


class IngestRun:
    """One invocation: prepares its small objects ahead, handles its records cheapest first, then commits the batch's
    deferred keyword writes once and marks their documents indexed. `run` never raises for a record: it returns the
    ids of the records to retry."""

    def __init__(self, service: IngestService, *, defer_keyword_commits: bool = True):
        self.service = service
        self.batch = IngestBatch(service.index, defer_keyword_commits)

    def run(self, records: Sequence[IngestRecord]) -> list[str]:
        created = {key: size for record in records for key, size in record.created.items()}
        self.service.prepare(self.batch, created)
        # Cheapest records first: a batch's one-line documents are not held back by a large one in the same batch.
        ordered = sorted(records, key=lambda record: self.batch.cost(record.created))
        failed = [record.id for record in ordered if not self._handle(record)]
        late = self.finish()
        return failed + sorted(r for r in late if r is not None and r not in failed)

    def _handle(self, record: IngestRecord) -> bool:
        if record.malformed is not None:
            logger.error(
                "ingest record is not an S3 notification", extra={"record": record.id, "error": record.malformed}
            )
            return False
        self.batch.record = record.id
        try:
            for event in record.events:
                if event.created:
                    self.service.object_created(event.key, size=event.size, batch=self.batch)
                else:
                    self.service.object_removed(event.key)
        except Exception as error:
            # Expected for retryable failures (the queue retries, then dead-letters); logged with its type only.
            logger.warning(
                "ingest record failed",
                extra={"record": record.id, "error_type": type(error).__name__},
                exc_info=not _expected(error),
            )
            return False
        finally:
            self.batch.record = None
        return True

    def finish(self) -> set[str | None]:
        """After the per-record pass: one keyword commit for every deferred write, then each deferred completion.
        Returns the records to retry: all that deferred anything when the commit failed (their documents stay
        `in_progress`), else those whose completion raised. Never raises: one record's failure is its own."""
        written, deferred = self.batch.take_deferred()
        if not written:
            return set()
        deferring = self.batch.deferring
        assert deferring is not None  # only a batch that defers keyword commits has deferred writes (`upsert`)
        try:
            # All of the batch's writes, those of documents that failed after writing too: none is left pending in
            # the index (the embedded one would carry it into a later commit, OpenSearch would keep its number).
            deferring.commit_deferred(written)
        except Exception as error:
            logger.exception(
                "the batch's keyword commit failed; its documents are redone",
                extra={"documents": len(deferred), "error_type": type(error).__name__},
            )
            return {record for record, _, _ in deferred}
        failed: set[str | None] = set()
        for record, _, complete in deferred:
            try:
                complete()
            except Conflict:
                failed.add(record)  # newer content won meanwhile: this stale message is retried, and ignored
            except Exception as error:
                logger.exception(
                    "a document's status write after the batch commit failed; its record is retried",
                    extra={"record": record, "error_type": type(error).__name__},
                )
                failed.add(record)
        return failed


def _expected(error: Exception) -> bool:
    return isinstance(error, (RetryableIngestFailure, Conflict))
