"""Ports: the small protocols the use cases depend on, with what each promises on duplicates and missing items.
Every adapter of a port runs that port's contract mixin (`tests/contract/mixins/`); a new adapter subclasses it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from kindex.domain.types import (
    ChunkRange,
    ChunkRef,
    IndexRecord,
    OcrOutcome,
    QueueMessage,
    SearchFilters,
    SearchHit,
    StoredChunk,
)

if TYPE_CHECKING:
    import numpy as np

    from kindex.domain.models import ApiKey, Collection, Document, PendingDeletion, ReindexJob
    from kindex.domain.quotas import Metered, QuotaLimits, Usage
    from kindex.domain.reindex import ReindexState, ReindexTask


class Embedder(Protocol):
    """Turns texts into vectors with one fixed model.

    `model` is the collection-facing name (`local:all-MiniLM-L6-v2`, `openai:text-embedding-3-small`,
    `hash:384`); `dimensions` is the vector length. `embed` returns one L2-normalised float32 row per
    input, in input order (a row does not depend on the other texts of the call, up to the rounding of int8
    activations in a batch: cosine 0.999 or more), batching remote calls itself; it raises
    `EmbeddingFailed` when the provider cannot answer after retries. No texts give a (0, dimensions)
    matrix and no call; the same text twice gets the same vector twice. It does no caching: the embedding
    cache wraps it. `embed` is for the texts that get indexed (passages), `embed_queries` for search
    queries: the same for most models, different for those trained with instructions (bge's instruction,
    e5's `query: ` and `passage: `).

    Any Python string is accepted. Surrogates are read as UTF-16 would read them: a high surrogate followed
    by a low one is the character the pair encodes, and any other surrogate is U+FFFD, so `'a\\ud800b'` gets
    the vector of `'a\\ufffdb'`. A text longer than the model's window is never refused: the local models
    read it as consecutive windows whose vectors are averaged by token count; OpenAI's models truncate it
    to their 8,191-token input limit (logged); the hash embedder reads every word.
    Every embedder runs the contract in `tests/contract/mixins/embedder.py`.
    """

    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> "np.ndarray": ...

    def embed_queries(self, texts: Sequence[str]) -> "np.ndarray": ...


class PageReader(Protocol):
    """OCR of PDF pages that have no text layer (scans): Tesseract locally, Amazon Textract on AWS."""

    #: How failure reasons name the engine ("Tesseract", "Amazon Textract").
    name: str

    def read_pages(self, pdf: bytes, pages: Sequence[int]) -> OcrOutcome:
        """The text of each of `pages` (0-based indexes into the PDF file `pdf`, each at most once), every one of
        them in either `texts` or `unread`. A page too large to render within the reader's pixel budget, or one the
        engine fails on, is `unread` with a one-line reason: one bad page never costs the others. Raises
        `DependencyFailed` only when the engine itself is unreachable (a remote service down or throttling), which
        is worth retrying."""
        ...


class SearchIndex(Protocol):
    """Vector (k-NN) and keyword (BM25) search over chunks, partitioned by embedding model.

    Every call names the tenant; no call can reach another tenant's records. Records are keyed by
    `chunk_id`: writing the same chunk id again replaces it (idempotent). Deleting missing records is
    not an error. Searches return ids and scores only, best first.
    """

    #: True when searches compute on this machine's cores (the embedded index), False when they wait on a remote
    #: engine: a hybrid query under a CPU slot runs the two legs of the former one after the other (QueryService).
    computes_locally: bool

    def upsert(self, model: str, records: Sequence[IndexRecord]) -> None:
        """Insert or replace records (one batched write)."""

    def delete(
        self,
        model: str,
        tenant: str,
        collection: str,
        *,
        document_ids: Sequence[str] | None = None,
        chunk_ids: Sequence[str] | None = None,
    ) -> None:
        """Delete the given chunks, or all chunks of the given documents, or (both None) the whole collection."""

    def knn_search(
        self,
        model: str,
        tenant: str,
        collections: Sequence[str],
        vector: Sequence[float],
        k: int,
        filters: SearchFilters | None = None,
    ) -> list[SearchHit]:
        """The k nearest chunks by cosine similarity within the tenant's collections (and filters)."""

    def keyword_search(
        self,
        model: str,
        tenant: str,
        collections: Sequence[str],
        query: str,
        k: int,
        filters: SearchFilters | None = None,
    ) -> list[SearchHit]:
        """The k best chunks by BM25 on their text within the tenant's collections (and filters)."""

    def chunk_ids(
        self,
        model: str,
        tenant: str,
        collection: str,
        *,
        after_document: str | None = None,
        through_document: str | None = None,
    ) -> set[str]:
        """Every chunk id stored for the collection under this model (drift repair and tests); with
        `after_document` / `through_document`, only those of documents whose id is > / <= it (code point order,
        the order documents are listed in), whether or not such a document still exists."""


@runtime_checkable
class DeferredKeywordCommits(Protocol):
    """An optional capability of a SearchIndex whose writes each cost a commit or a wait before they are searchable
    (the embedded index: a tantivy commit, ~17 ms, fsync-bound; OpenSearch with the wait_for policy: a wait for the
    next scheduled refresh, up to the refresh interval): an ingest batch writes its documents' chunks without one,
    then commits them all at once (OpenSearch: one refresh per index) before it reports any of those documents
    indexed. An index without it is written with `upsert` as ever.

    Nothing else changes: `upsert` and `delete` stay durable and visible on return, and a later commit of any of
    them carries the deferred writes along."""

    def upsert_deferred(self, model: str, records: Sequence[IndexRecord]) -> int:
        """`upsert`, but what searches see of it (keyword search at least) may wait for `commit_deferred`; returns
        the write's number."""

    def commit_deferred(self, writes: Sequence[int]) -> None:
        """Return once the numbered writes are durable and searchable; DependencyFailed when that could not be
        made sure (a failed commit rolled them back, a refresh failed): the caller must not report them done, and
        redoes them."""


class CollectionStore(Protocol):
    """Collections of one tenant. Listing is by id (code point order), stable across calls. A collection being
    deleted (`CollectionDeletions`) is no collection to any method here: not read, not listed, not created again."""

    def get_collection(self, tenant: str, collection_id: str) -> "Collection | None":
        """The collection, or None when it does not exist for this tenant (or is being deleted)."""

    def put_collection(
        self, tenant: str, collection: "Collection", *, create: bool, limits: "QuotaLimits | None" = None
    ) -> None:
        """Write the collection. create=True fails with Conflict if it exists, or while a collection of that id is
        being deleted. create=False writes only over the stored revision `collection.revision - 1` (a record without
        one counts as 0): NotFound when there is no record, Conflict when another write committed since that
        revision was read, and nothing changes either way. Every write stores `collection.revision` as given: the
        writer numbers it (the read revision + 1; 1 for a create). A create counts the collection in the tenant's
        usage in the same atomic write (`UsageCounters`); with `limits`, it is QuotaExceeded instead, and nothing
        changes, when the tenant already has its plan's number of collections."""

    def delete_collection(self, tenant: str, collection_id: str) -> bool:
        """Delete the collection's record, all its document records and its reindex state (a pending deletion of it
        stays: `CollectionDeletions.end_deletion` ends that); False when there was no collection record. The tenant's
        usage gives back what the records counted (SQLite: in the same transaction; DynamoDB: batch by batch)."""

    def list_collections(self, tenant: str, *, after: str | None, offset: int, limit: int | None) -> list[str]:
        """Ids in order, strictly after `after` (if given), skipping `offset`, at most `limit` (None = all)."""


class DocumentStore(Protocol):
    """Document records of one tenant's collection. Same ordering and conditional-write rules as collections.

    Six methods, one over the house limit of five: `get_documents` is the batched read a query needs for its
    candidates (one read per document made a query on AWS tens of sequential DynamoDB calls), and no other method
    can answer it without one read per document."""

    def get_document(self, tenant: str, collection_id: str, document_id: str) -> "Document | None":
        """The document, or None when it does not exist."""

    def get_documents(self, tenant: str, refs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], "Document"]:
        """The documents that exist among `refs` ((collection id, document id) pairs, of any collections of the
        tenant), by that pair, read as strongly as `get_document` in batches (DynamoDB: one BatchGetItem per 100
        documents; SQLite: one query): missing ones are absent, a pair given twice is read once, and an empty
        `refs` reads nothing."""

    def put_document(
        self,
        tenant: str,
        document: "Document",
        *,
        create: bool,
        previous: "Document | None" = None,
        limits: "QuotaLimits | None" = None,
    ) -> None:
        """Write the document. create=True fails with Conflict if it exists. create=False writes only over the stored
        revision `document.revision - 1` (a record without one counts as 0): NotFound when there is no record,
        Conflict when another write committed since that revision was read, and nothing changes either way. Every
        write stores `document.revision` as given: the writer numbers it (the read revision + 1; 1 for a create).

        The tenant's usage (`UsageCounters`) changes by `document_usage(document) - document_usage(replaced)` in the
        same atomic write; `previous` is the record the caller read at `document.revision - 1` (the store may use it
        instead of reading that record again). With `limits`, a write that would take a counter it increases past its
        limit is QuotaExceeded, and nothing changes; a write that increases nothing is never refused."""

    def delete_document(
        self, tenant: str, collection_id: str, document_id: str, *, revision: int | None = None
    ) -> bool:
        """Delete the record; False when it did not exist. With `revision`, only the record still at that revision
        (one without a revision counts as 0): Conflict, and nothing deleted, when another write committed since.
        The tenant's usage gives back what the deleted record counted, in the same atomic write."""

    def list_documents(
        self, tenant: str, collection_id: str, *, after: str | None, offset: int, limit: int | None
    ) -> list["Document"]:
        """The records in id order, strictly after `after` (if given), skipping `offset`, at most `limit` (None = all),
        as `list_collections` lists ids; read in one query per page (no read per document)."""

    def count_documents(self, tenant: str, collection_id: str) -> int:
        """How many documents the collection holds."""


class ReindexLedger(Protocol):
    """What the reindex keeps per collection, and the one query that finds work without reading every document.
    Implemented by the metadata store (the documents' own table or partition)."""

    def get_state(self, tenant: str, collection_id: str) -> "ReindexState | None":
        """The collection's reindex state, or None when none was written (or the collection was deleted since)."""

    def put_state(self, tenant: str, state: "ReindexState") -> None:
        """Write the state if the stored one's revision is `state.revision - 1` (a missing one counts as 0);
        Conflict otherwise, and nothing changes."""

    def attention_documents(self, tenant: str, collection_id: str, *, after: str | None, limit: int) -> list[str]:
        """Ids, in order and strictly after `after`, of the collection's documents that `needs_attention` (pending,
        in progress, or failed and retryable), at most `limit`; read from an index of only those documents, so the
        cost follows their number, not the collection's size. May lag a write by a moment (DynamoDB's GSI)."""


class CollectionDeletions(Protocol):
    """Collections being deleted, implemented by the metadata store beside their records: `DELETE
    /v1/collections/{c}` takes the collection out of every read at once (`mark_deleting`), and its delete job
    removes the rest in the background, ending the deletion last (`end_deletion`)."""

    def mark_deleting(self, tenant: str, collection: "Collection", job: str) -> None:
        """In one atomic write, delete the collection's record (only over the stored revision `collection.revision`:
        Conflict when another write committed since, NotFound when there is no record) and keep `collection` with
        `job` as its pending deletion. From then until `end_deletion`, the collection store does not read, list or
        create a collection of that id; its document records stay until `CollectionStore.delete_collection`. The
        tenant's collection count gives the collection back in the same write (its documents count until deleted)."""

    def pending_deletion(self, tenant: str, collection_id: str) -> "PendingDeletion | None":
        """The collection's pending deletion, or None when none is under way."""

    def pending_deletions(self, tenant: str) -> list["PendingDeletion"]:
        """Every pending deletion of the tenant, by collection id (one query: the reindex planner resumes them)."""

    def end_deletion(self, tenant: str, collection_id: str, job: str) -> bool:
        """Delete the pending deletion if it is `job`'s (another job's is left alone); False when it was not there.
        A collection of that id may be created again from then on."""


class UsageCounters(Protocol):
    """A tenant's usage, kept by the metadata store beside its records: the stored counters (documents, chunks, bytes,
    collections), which the record writes change atomically (see `DocumentStore.put_document`), and the metered
    counts (queries per UTC day, estimated embedding tokens per UTC month). A tenant's counters are its own: nothing
    written for one tenant is read for another, whatever the ids."""

    def usage(self, tenant: str) -> "Usage":
        """The stored counters (all 0 for a tenant that never wrote anything)."""

    def reconcile(self, tenant: str) -> "tuple[Usage, Usage] | None":
        """Count the tenant's records again and set the counters to that: (counters before, counted). None when a
        write changed the counters while they were counted (nothing set; the next pass tries again)."""

    def add_metered(self, tenant: str, *, day: str, month: str, queries: int = 0, embedding_tokens: int = 0) -> None:
        """Add to the tenant's queries of `day` and embedding tokens of `month` (atomic increments, never lost)."""

    def metered(self, tenant: str, *, day: str, month: str) -> "Metered":
        """The tenant's queries of `day` and embedding tokens of `month` (0 when nothing was recorded)."""


class KeyStore(Protocol):
    """API keys, looked up by their public key id. Only hashes of secrets are stored."""

    def put_key(self, key: "ApiKey") -> None:
        """Store a new key (key ids are random; an existing id is a Conflict)."""

    def get_key(self, key_id: str) -> "ApiKey | None":
        """The key record, revoked or not, or None."""

    def list_keys(self, tenant: str | None = None) -> list["ApiKey"]:
        """All keys (of one tenant if given), oldest first."""

    def revoke_key(self, key_id: str) -> bool:
        """Mark the key revoked; False when it does not exist."""


class MetadataStore(
    CollectionStore, DocumentStore, KeyStore, ReindexLedger, CollectionDeletions, UsageCounters, Protocol
):
    """The one store that serves the six metadata ports (SQLite locally, one DynamoDB table on AWS): an
    intersection, so the composition can hand the same object to each use case as the port that use case names.
    Use cases keep asking for the single ports; only the composition names this one."""


class BlobStore(Protocol):
    """Raw files by key (a folder locally, S3 on AWS). Keys are built by `kindex.domain.keys`.

    Six methods, one over the house limit of five: `blob_size` is the HEAD that existence and size checks need
    (downloading an object to learn that it exists, or that it is too big, was the bug), and no other method
    can answer it without reading the bytes."""

    def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        """Write (or overwrite) the object."""

    def get_blob(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """The object's bytes; NotFound when missing. With `max_bytes`, an object larger than that raises
        LimitExceeded before its body is read (and at most `max_bytes + 1` bytes are ever read)."""

    def blob_size(self, key: str) -> int | None:
        """The object's size in bytes, read from its metadata without its body (a HEAD); None when missing."""

    def delete_blob(self, key: str) -> None:
        """Delete the object; deleting a missing object is not an error."""

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under the prefix; returns how many were deleted."""

    def list_blobs(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[str]:
        """Keys under the prefix, in order; only those after `start_after` (which need not exist), at most `limit`
        (a bounded listing reads about that many keys, not the whole prefix)."""


class ChunkStore(Protocol):
    """Chunk texts and offsets, per tenant, collection and document. Writes are idempotent by chunk id."""

    def put_chunks(self, tenant: str, chunks: Sequence["StoredChunk"]) -> None:
        """Insert or replace the chunks (batched)."""

    def get_chunks(self, tenant: str, refs: Sequence["ChunkRef"]) -> dict[str, "StoredChunk"]:
        """The chunks that exist among `refs`, by chunk id, in one batched read; missing ones are absent."""

    def get_chunk_ranges(self, tenant: str, ranges: Sequence["ChunkRange"]) -> list["StoredChunk"]:
        """The chunks whose index lies in one of `ranges` (each of one document), ordered by (collection, document,
        index, chunk id), each once, in one batched read; a range past the document's end yields what exists."""

    def list_chunks(self, tenant: str, collection: str, document_id: str) -> list["StoredChunk"]:
        """The document's chunks ordered by index."""

    def iter_chunks(
        self, tenant: str, collection: str, document_id: str, *, after: tuple[int, str] | None = None, offset: int = 0
    ) -> Iterator["StoredChunk"]:
        """The document's chunks in (index, chunk id) order, from just after the position `after` (an
        (index, chunk id) pair, which need not exist any more), skipping `offset` more. Read lazily in batches:
        a caller that stops early (a page is full) reads about one batch past what it used, whatever the
        document's size."""

    def delete_chunks(
        self, tenant: str, collection: str, *, document_id: str | None = None, chunk_ids: Sequence[str] | None = None
    ) -> None:
        """Delete the given chunks of a document, all of a document's chunks, or (document None) the collection's."""


class EmbeddingCache(Protocol):
    """Vectors by (tenant, model, sha256 of the text): a text is embedded once per tenant and model, across
    documents. A tenant's entries are its own: no read for one tenant ever returns a vector stored for another."""

    def get_vectors(self, tenant: str, model: str, text_hashes: Sequence[str]) -> dict[str, "np.ndarray"]:
        """The tenant's cached vectors among the hashes (float32); absent hashes are simply missing."""

    def put_vectors(self, tenant: str, model: str, vectors: dict[str, "np.ndarray"]) -> None:
        """Store vectors for the tenant; storing an existing hash again is harmless."""


class MessageQueue(Protocol):
    """An at-least-once queue with SQS semantics (local mode's stand-in for S3 -> SQS)."""

    def send(self, body: str, *, lane: str = "", group: str = "") -> None:
        """Enqueue a message durably. Each receive serves one `lane` (local mode: the tenant), the least busy first;
        two messages of one non-empty `group` (local mode: the document) are never in flight in two receives."""

    def receive(
        self, max_messages: int, visibility_timeout: float, *, lane_limit: int | None = None
    ) -> list["QueueMessage"]:
        """Claim up to `max_messages` visible messages; unacknowledged ones reappear after the timeout. With
        `lane_limit`, lanes that already have that many receives in flight are skipped."""

    def acknowledge(self, message_id: str) -> None:
        """Delete a processed message."""

    def retry_later(self, message_id: str, delay: float, max_receives: int) -> bool:
        """Make a failed message visible again after `delay`, or dead-letter it once it was received
        `max_receives` times; True when it was dead-lettered."""

    def redrive(self) -> int:
        """Move every dead-lettered message back to the queue; returns how many."""


class SecretStore(Protocol):
    """Small secrets (signing keys) by name: files readable only by the owner locally, Secrets Manager on AWS."""

    def put_secret(self, name: str, value: bytes) -> None:
        """Create or replace the secret."""

    def get_secret(self, name: str) -> bytes | None:
        """The secret, or None when it was never set."""


class QueryLog(Protocol):
    """The documents a recent query returned, so `POST /v1/citations` can refer to it by `query_id`."""

    def put_query(self, tenant: str, query_id: str, documents: list[dict], ttl_seconds: int) -> None:
        """Remember the query's documents for `ttl_seconds`."""

    def get_query(self, tenant: str, query_id: str) -> list[dict] | None:
        """The documents, or None when unknown or expired (or another tenant's)."""


class JobStore(Protocol):
    """Reindex jobs, per tenant (kept for 30 days)."""

    def put_job(self, job: "ReindexJob") -> None:
        """Create or replace the job record."""

    def get_job(self, tenant: str, job_id: str) -> "ReindexJob | None":
        """The job, or None when unknown (or another tenant's)."""


class ReindexQueue(Protocol):
    """Carries reindex tasks from the planner to the reindex worker (SQS on AWS, the durable queue locally)."""

    def send(self, tasks: Sequence["ReindexTask"]) -> None:
        """Enqueue every task (in bounded batches); DependencyFailed when the queue refuses any of them."""


class IngestTrigger(Protocol):
    """Asks the ingest pipeline to (re)process blobs, with the same event a fresh upload produces."""

    def trigger(self, keys: Sequence[str]) -> None:
        """Enqueue one created-event per key, in bounded batches."""


class NotificationForwarder(Protocol):
    """Puts S3 notifications onto the fair ingest queue, each in the message group of its tenant (AWS: S3 cannot
    set a group itself, so the ingest router re-sends what it delivers)."""

    def forward(self, messages: Sequence[tuple[str, str, str | None]]) -> list[str]:
        """Send each (message id, body, group; None: no group) once, in bounded batches; the ids of the messages
        the queue did not accept (the caller retries those). DependencyFailed when the queue cannot be reached."""


class MetricsRecorder(Protocol):
    """One metric per business event (documents indexed, chunks embedded, rights denials)."""

    def count(self, name: str, value: float = 1) -> None:
        """Add `value` to the counter `name` for the current invocation."""

    def meter(self, tenant: str, name: str, value: float = 1) -> None:
        """Record `value` of the billable usage `name` (USAGE_EVENTS) for `tenant`, as a record of its own: one
        invocation serves several tenants (an ingest batch), so usage is never summed into the invocation's set.
        The tenant is a property of the record, never a metric dimension (one series per tenant would cost per
        tenant)."""


@runtime_checkable
class TokenCounter(Protocol):
    """An embedder whose provider bills by token: how many tokens `embed(texts)` sends (after any truncation)."""

    def count_tokens(self, texts: Sequence[str]) -> int: ...


class Presigner(Protocol):
    """Signs a PUT of one blob key (S3 presigned URL, or the local server's own signed URL)."""

    def presign_put(
        self, key: str, content_type: str, content_length: int, expires_in: int
    ) -> tuple[str, dict[str, str], int]:
        """(url, headers the client must send, expiry in unix seconds). Content-Type and Content-Length are
        signed: the upload is refused unless it sends exactly that type and exactly that many bytes. The URL
        uploads once: a PUT to a key that already holds a blob is refused (412), so a replay changes nothing."""


class RightsEndpoint(Protocol):
    """Carries one signed rights-check request to a tenant's endpoint."""

    def post(self, url: str, body: bytes, headers: dict[str, str], deadline: float) -> tuple[int, bytes]:
        """(status, body) by `deadline` (time.monotonic). The body is only read for a 200, and at most 1 MiB of it.
        Raises RightsCallFailed for any failure, including a URL or resolved address the policy refuses."""


class UsagePlanKeys(Protocol):
    """Each tenant's API Gateway API key (its usage identifier, never a credential) and the one usage plan it is
    attached to. Plans are named as in `UsagePlans` (`default` or a named plan); the adapter knows their ids."""

    def attach(self, tenant: str, plan: str) -> bool:
        """Make sure the tenant's key exists (created once, with the value `usage_identifier` derives) and is
        attached to `plan` and to no other plan of this deployment. Idempotent: True when anything changed, False
        when it was already so. NotFound for a plan the deployment does not have."""

    def attached_plan(self, tenant: str) -> str | None:
        """The plan the tenant's key is attached to; None when the tenant has no key or its key is in no plan."""
