"""What one ingest invocation learns and holds while its records run: `IngestBatch`, owned by the invocation's
`IngestRun` (app/ingest_run.py) and handed to the stateless `IngestService` with each call. It never calls the
service."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from kindex.domain.errors import IngestError
from kindex.domain.ports import DeferredKeywordCommits, SearchIndex
from kindex.domain.types import IndexRecord

logger = logging.getLogger(__name__)

# (blob key, sha256 of its bytes, collection config version, mimetype): what a chunking result depends on.
Memo = tuple[str, str, int, "str | None"]
UNKNOWN_COST = 1 << 40  # work not measured ahead (a big object, or one whose preparation failed unexpectedly)


class IngestBatch:
    """One invocation's batch of events, never shared with another invocation or thread. What was learnt before the
    per-record pass, so each record reuses it:

    - the bytes read (one GET per object per batch) and each small object's chunks (or its extraction failure);
    - each object's cost in chunks, so the run handles the cheap records first;
    - the chunk texts of small documents still to embed: the first of them takes its followers' texts along, so a
      batch of small documents makes one embedding call per model (up to `embed_slice` texts);
    - the models whose embedding failed in this batch: the provider already had its retries, so the batch's other
      documents fail with that error instead of each trying again (one retry sequence per batch, not per document).

    - with `defer_keyword_commits` (the ingest function's batches) and an index that can defer them (the embedded
      one and OpenSearch, see `DeferredKeywordCommits`): the chunk writes whose commit (OpenSearch: refresh) waits
      for the end of the run, and what each written document still has to do once they are committed (its
      `indexed` status write), by the record that wrote it (`record`, set by the run before each record). A document
      is marked indexed only after that commit."""

    def __init__(self, index: SearchIndex, defer_keyword_commits: bool = False):
        self.index = index
        self.fetched: dict[str, bytes] = {}
        self.prepared: dict[Memo, list | IngestError] = {}
        self.warnings: dict[Memo, str] = {}  # what a prepared text lacks (scanned pages left unread)
        self.failed_models: dict[str, Exception] = {}
        self.costs: dict[str, int] = {}
        # Per model: (memo, tenant, texts) of the small documents whose texts may ride along another's call.
        self._waiting: dict[str, list[tuple[Memo, str, list[str]]]] = {}
        self.deferring = index if defer_keyword_commits and isinstance(index, DeferredKeywordCommits) else None
        self.record: str | None = None  # the record being handled, which owns what is deferred now
        self._deferred: list[tuple[str | None, list[int], Callable[[], None]]] = []
        self._written: list[int] = []  # every deferred write, also those of documents that failed after writing

    def cost(self, created_keys: Iterable[str]) -> int:
        """The chunks a record's created objects are expected to embed; UNKNOWN_COST for anything not measured."""
        return sum(self.costs.get(key, UNKNOWN_COST) for key in created_keys)

    def wait_for_embedding(self, memo: Memo, tenant: str, models: Iterable[str], texts: list[str]) -> None:
        for model in models:
            self._waiting.setdefault(model, []).append((memo, tenant, texts))

    def order_waiting(self) -> None:
        """Waiting texts in the order the records will run (cheapest first, as the run orders them)."""
        for entries in self._waiting.values():
            entries.sort(key=lambda entry: self.costs.get(entry[0][0], UNKNOWN_COST))

    def riders(self, model: str, memo: Memo | None, room: int) -> list[tuple[str, str]]:
        """(tenant, text) of waiting small documents to embed with `memo`'s own call, at most `room` of them; they
        (and `memo`'s own entry) stop waiting. Each keeps its tenant: its vector is cached for that tenant only."""
        entries = self._waiting.get(model, [])
        entries[:] = [entry for entry in entries if entry[0] != memo]
        taken: list[tuple[str, str]] = []
        while entries and len(taken) + len(entries[0][2]) <= room:
            _, tenant, texts = entries.pop(0)
            taken.extend((tenant, text) for text in texts)
        return taken

    def upsert(self, model: str, records: Sequence[IndexRecord]) -> int | None:
        """Write chunks to the index: with their keyword commit deferred (returns the write's number for `defer`)
        when this batch defers them, else durable and visible at once (returns None)."""
        if self.deferring is None:
            self.index.upsert(model, records)
            return None
        write = self.deferring.upsert_deferred(model, records)
        self._written.append(write)
        return write

    def defer(self, writes: list[int], complete: Callable[[], None]) -> None:
        """Run `complete` once `writes` are committed, at the end of the run; its failure fails the current record."""
        self._deferred.append((self.record, writes, complete))

    def take_deferred(self) -> tuple[list[int], list[tuple[str | None, list[int], Callable[[], None]]]]:
        """Every deferred write so far, and the completions waiting for them (by record); the batch forgets both."""
        written, self._written = self._written, []
        deferred, self._deferred = self._deferred, []
        return written, deferred
