"""Reindex: keeps every collection's index true to its configuration and its blobs, finding work by change.

One class per job, each over only the ports it uses:

- `ReindexPlanner` (planner.py), the scheduled run: it lists tenants (from their keys) and collection ids (keys
  only) and sends one bounded task per tenant and per collection to the reindex queue, and one per pending
  collection deletion.
- `ReindexWorker` (worker.py) does one task:
  - a collection task reads the collection record and its `ReindexState`. When the collection's configuration or
    model differs from what its last complete sweep covered (or a model switch is under way), it starts a sweep: a
    chain of page tasks, each examining at most `ReindexLimits.sweep_page_documents` documents and sending the next
    page's task. Otherwise it looks only at the documents that need attention (a keys-only query of an index holding
    just the pending, in-progress and retryable failed documents), one bounded drift page from the state's cursor (a
    full drift sweep is spread over many passes) and one bounded page of the collection's blobs from another cursor.
  - a tenant task (`OrphanBlobs`, orphans.py) walks the tenant's collection prefixes in the blob store, one key per
    collection, and deletes the blobs of collections that no longer exist.
  - a delete task is one step of a collection's delete job (kindex/app/collection_deletion.py); the planner sends
    every pending deletion's first step again, so a deletion whose chain was lost (a crash) resumes and ends.
- `PageChecker` (pages.py) examines one page (of a sweep, or the drift page) against the search index for exactly
  its id range: outdated, retryable failed or stuck documents are re-sent to the ingest, documents whose vectors are
  missing are rebuilt, vectors without chunks (of those documents, or of ids in the range with no document) are
  deleted; documents whose content never came (a title-only record, an unused upload URL, a stalled import) fail
  past their bound (NO_CONTENT_AFTER and after), there and among the documents needing attention. A drift page whose
  documents are all indexed and whose chunk counts match the index reads no chunk item. It also reads one page of a
  collection's blobs.
- `ModelSwitch` (switch.py): a model change is built beside the old vectors; when a sweep finds every document done
  under the new model, the collection switches its query model and the old vectors and unreferenced chunks are
  dropped.
- `ReindexJobs` (jobs.py): `POST /v1/collections/{c}/reindex` (`start`) runs the first sweep page inline and chains
  the rest the same way; it first brings a collection of an older chunking version (`Collection.chunking_version`)
  to the current one, which bumps its configuration version, so the sweep rebuilds every document with the current
  chunking (its old chunks serve queries until each document's new ones are written; unchanged chunk texts reuse
  their cached vectors). `get_job` reports progress.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kindex.domain.models import Collection, Document, DocumentStatus
from kindex.domain.ports import DocumentStore, ReindexQueue
from kindex.domain.reindex import ReindexTask


@dataclass(frozen=True)
class ReindexLimits:
    """How much one task may read; docs/scale.md turns these into read units per pass."""

    sweep_page_documents: int = 1000  # documents one sweep page examines (and at most re-sends)
    sweep_page_chunks: int = 20_000  # chunks (by the records' counts) one sweep page reads; it ends early at this
    job_first_page_documents: int = 100  # the page POST .../reindex examines inside its request
    drift_page_documents: int = 200  # documents the per-pass drift page examines (one Query of their records)
    drift_page_chunks: int = 10_000  # chunks (by the records' counts) of the per-pass drift page: the index ids it
    # fetches, and the chunk items it reads when the page is inconsistent
    attention_documents: int = 1000  # documents needing attention examined per collection and pass
    blob_page: int = 100  # blob keys listed per collection and pass (one document read per blob)
    tenant_steps: int = 500  # collection prefixes one tenant task walks before chaining the next
    planner_batch: int = 500  # tasks the planner hands the queue at once


@dataclass
class CollectionReport:
    total: int = 0
    done: int = 0
    enqueued: int = 0
    remaining: int = 0
    switched: bool = False
    complete: bool = True
    repaired: dict[str, int] = field(
        default_factory=lambda: {
            "blobs_without_documents": 0,
            "documents_without_vectors": 0,
            "vectors_without_chunks": 0,
            "abandoned_blobs": 0,
            "documents_without_content": 0,
        }
    )


def up_to_date(document: Document, collection: Collection) -> bool:
    """Indexed under the collection's model and configuration, or failed for good (retrying will not help)."""
    if document.status is DocumentStatus.FAILED:
        return not document.failure_retryable
    return document.is_current(collection)


def all_documents(documents: DocumentStore, tenant: str, collection_id: str) -> Iterator[Document]:
    """Every document record, a page (one Query) at a time."""
    after = None
    while page := documents.list_documents(tenant, collection_id, after=after, offset=0, limit=500):
        yield from page
        after = page[-1].id


def send_tasks(queue: ReindexQueue, tasks: Sequence[ReindexTask]) -> int:
    if tasks:
        queue.send(list(tasks))
    return len(tasks)
