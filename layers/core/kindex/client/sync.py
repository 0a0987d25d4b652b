"""`Kindex`: the synchronous client. Every method sends one call of `kindex.client.calls` (or follows pages of
one); `AsyncKindex` mirrors it method for method."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from kindex.api.models import (
    ChunkList,
    ChunkOut,
    CollectionList,
    DocumentList,
    DocumentOut,
    RightsSecret,
    UploadResponse,
)
from kindex.client import calls
from kindex.client.calls import ApiCall
from kindex.client.errors import ConnectionFailed, NotFound
from kindex.client.retry import RetryPolicy
from kindex.client.transport import ClientConfig, decode, raise_for_answer
from kindex.client.uploads import UploadSource
from kindex.domain.models import (
    MAX_PAGE_SIZE,
    Collection,
    CollectionInput,
    DocumentInput,
    DocumentSummary,
    ReindexJob,
)
from kindex.domain.query import CitationsRequest, CitationsResponse, QueryRequest, QueryResponse
from kindex.domain.quotas import UsageReport
from kindex.domain.transfer import DEFAULT_EXPORT_CHUNKS, ExportPage, ImportRequest, ImportResult

TERMINAL_STATUSES = calls.TERMINAL_STATUSES
UPLOAD_TIMEOUT = 300.0


class Kindex:
    """A kindex deployment (local `kindex serve` or AWS) for one API key.

    `url` and `key` default to KINDEX_URL and KINDEX_API_KEY. 429 and 503 answers are retried (see RetryPolicy);
    other failures raise the typed exceptions of `kindex.client.errors`. Thread-safe; close it (or use `with`)."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
    ):
        self.config = ClientConfig.resolve(url, key, timeout, retry)
        self._http = http_client or httpx.Client(timeout=timeout)
        self._owns_http = http_client is None  # a client handed in is the caller's to close
        self._sleep = time.sleep

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> "Kindex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ------------------------------------------------------------------------------------------------

    def _send(self, call: ApiCall) -> Any:
        return decode(call, self._request(self.config.request(call)))

    def _request(self, args: dict[str, Any], content_factory=None) -> httpx.Response:
        """One request with the retry policy; `content_factory` gives a fresh body for each attempt (uploads)."""
        attempt = 0
        while True:
            if content_factory is not None:
                args["content"] = content_factory()
            try:
                response = self._http.request(**args)
            except httpx.TransportError as error:
                raise ConnectionFailed(f"{args['method']} {args['url'].split('?')[0]}: {error!r}") from error
            delay = self.config.retry.delay(attempt, response.status_code, response.headers)
            if delay is None:
                return response
            response.close()
            self._sleep(delay)
            attempt += 1

    # -- collections --------------------------------------------------------------------------------------------

    def list_collections(self, start: int = 0, number: int = 100, cursor: str | None = None) -> CollectionList:
        return self._send(calls.list_collections(start, number, cursor))

    def iter_collections(self, page_size: int = 100) -> Iterator[str]:
        """Every collection id, following `next_cursor` page after page."""
        return self._pages(lambda cursor: calls.list_collections(0, page_size, cursor), "collections")

    def get_collection(self, collection: str) -> Collection:
        return self._send(calls.get_collection(collection))

    def put_collection(self, collection: str, value: CollectionInput | dict | None = None, **fields: Any) -> Collection:
        """Create the collection or change only the fields given."""
        return self._send(calls.put_collection(collection, value, **fields))

    def delete_collection(self, collection: str, *, wait: bool = False, timeout: float = 3600.0) -> ReindexJob:
        """Delete the collection with everything in it: it is gone from every read at once, and the returned job
        deletes its documents, chunks, vectors and files in the background (with `wait`, returned completed; its id
        can be created again from then on)."""
        job = self._send(calls.delete_collection(collection))
        return self.wait_for_job(job.id, timeout=timeout) if wait else job

    # -- documents ----------------------------------------------------------------------------------------------

    def list_documents(
        self, collection: str, start: int = 0, number: int = 100, cursor: str | None = None
    ) -> DocumentList:
        return self._send(calls.list_documents(collection, start, number, cursor))

    def iter_documents(self, collection: str, page_size: int = 100) -> Iterator[str]:
        return self._pages(lambda cursor: calls.list_documents(collection, 0, page_size, cursor), "documents")

    def iter_document_summaries(self, collection: str, page_size: int = 100) -> Iterator[DocumentSummary]:
        """Every document's summary (status, failure_reason, chunk_count, ...), one request per page: no GET per
        document (but from a deployment older than the summaries, whose pages hold only ids)."""
        cursor = None
        while True:
            page = self.list_documents(collection, 0, page_size, cursor)
            if calls.has_summaries(page):
                yield from page.items
            else:
                yield from filter(None, (self._summary(collection, document) for document in page.documents))
            cursor = page.next_cursor
            if not cursor:
                return

    def document_summaries(self, collection: str, documents: Iterable[str]) -> dict[str, DocumentSummary | None]:
        """The summaries of the named documents (None: there is no such document), read through the collection's
        listing or one GET per document, whichever takes fewer requests."""
        wanted = list(dict.fromkeys(documents))
        if calls.listing_is_cheaper(self.get_collection(collection).document_count, len(wanted)):
            named = set(wanted)  # keep only those: a large collection's summaries would not fit in memory
            listed = {
                s.id: s for s in self.iter_document_summaries(collection, page_size=MAX_PAGE_SIZE) if s.id in named
            }
            return {document: listed.get(document) for document in wanted}
        return {document: self._summary(collection, document) for document in wanted}

    def _summary(self, collection: str, document: str) -> DocumentSummary | None:
        try:
            return DocumentSummary.of(self.get_document(collection, document))
        except NotFound:
            return None

    def wait_for_documents(
        self, collection: str, documents: Iterable[str], timeout: float = 300.0, interval: float = 1.0
    ) -> dict[str, DocumentSummary | None]:
        """The named documents' summaries once each is `indexed`, `failed` or gone (None), polling them together
        (see `document_summaries`); TimeoutError after `timeout` s."""
        wait = calls.DocumentWait(documents, timeout)
        while not wait.update(self.document_summaries(collection, wait.waiting)):
            self._sleep(interval)
        return wait.done

    def get_document(self, collection: str, document: str) -> DocumentOut:
        return self._send(calls.get_document(collection, document))

    def put_document(
        self, collection: str, document: str, value: DocumentInput | dict | None = None, **fields: Any
    ) -> DocumentOut:
        """Create or change a document; text `content=` goes in the request itself (small content). Files go
        through `upload_file`. `attributes=` / `access=` alone change what filters and access lists see, without
        re-embedding."""
        return self._send(calls.put_document(collection, document, value, **fields))

    def delete_document(self, collection: str, document: str) -> None:
        self._send(calls.delete_document(collection, document))

    def prepare_upload(
        self,
        collection: str,
        document: str,
        filename: str,
        size: int,
        mimetype: str | None = None,
        *,
        attributes: dict[str, Any] | None = None,
        access: dict[str, Any] | None = None,
    ) -> UploadResponse:
        return self._send(
            calls.prepare_upload(collection, document, filename, size, mimetype, attributes=attributes, access=access)
        )

    def upload_file(
        self,
        collection: str,
        document: str,
        file: str | Path | bytes,
        *,
        filename: str | None = None,
        mimetype: str | None = None,
        attributes: dict[str, Any] | None = None,
        access: dict[str, Any] | None = None,
    ) -> DocumentOut:
        """Upload a file (a path or its bytes) through a presigned URL; the upload triggers indexing. The bytes go
        straight to the blob store (no API key is sent there), streamed from disk for a path. `attributes`
        (`{"region": "eu", "year": 2024}`) and `access` (`{"users": [...], "groups": [...], "deny_users": [...],
        "deny_groups": [...]}`) are written with the ticket, before any byte is indexed."""
        source = UploadSource.of(file, filename, mimetype)
        ticket = self.prepare_upload(
            collection, document, source.filename, source.size, source.mimetype, attributes=attributes, access=access
        )
        response = self._request(
            {"method": ticket.method, "url": ticket.url, "headers": ticket.headers, "timeout": UPLOAD_TIMEOUT},
            content_factory=source.chunks,
        )
        raise_for_answer(response)
        return ticket.document

    def list_chunks(
        self, collection: str, document: str, start: int = 0, number: int = 100, cursor: str | None = None
    ) -> ChunkList:
        return self._send(calls.list_chunks(collection, document, start, number, cursor))

    def iter_chunks(self, collection: str, document: str, page_size: int = 100) -> Iterator[ChunkOut]:
        return self._pages(lambda cursor: calls.list_chunks(collection, document, 0, page_size, cursor), "chunks")

    def wait_for_document(
        self, collection: str, document: str, timeout: float = 300.0, interval: float = 0.5
    ) -> DocumentOut:
        """The document once `indexed` or `failed` (read `failure_reason`); TimeoutError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            stored = self.get_document(collection, document)
            if stored.status in TERMINAL_STATUSES:
                return stored
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{document!r} is still {stored.status.value} after {timeout:.0f} s")
            self._sleep(interval)

    # -- query, citations, reindex, secrets ---------------------------------------------------------------------

    def query(self, collection: str, request: QueryRequest | dict | str, **fields: Any) -> QueryResponse:
        """Search one collection: `query("...", user=..., groups=[...], k=5, mode="hybrid")`; an attribute filter
        as `filters=F.eq("region", "eu")` (see `kindex.client.filters`) or `filters={"attributes": {...}}`."""
        return self._send(calls.query(collection, request, **fields))

    def query_collections(
        self, collections: list[str], request: QueryRequest | dict | str, **fields: Any
    ) -> QueryResponse:
        """Search several collections; refused ones are listed in `denied_collections`."""
        return self._send(calls.query_collections(collections, request, **fields))

    def render_citations(self, text: str | CitationsRequest | dict, **fields: Any) -> CitationsResponse:
        """`<CIT id />` tags -> footnotes: pass `query_id=` of the query the answer came from (or `documents=`)."""
        return self._send(calls.render_citations(text, **fields))

    def start_reindex(self, collection: str, clean: bool = False) -> ReindexJob:
        return self._send(calls.start_reindex(collection, clean))

    def get_usage(self) -> UsageReport:
        """What the tenant stores and used (documents, chunks, bytes, collections, queries today, embedding tokens
        this month) and its plan's limits (None: no limit)."""
        return self._send(calls.get_usage())

    def get_job(self, job: str) -> ReindexJob:
        return self._send(calls.get_job(job))

    def wait_for_job(self, job: str, timeout: float = 3600.0, interval: float = 1.0) -> ReindexJob:
        deadline = time.monotonic() + timeout
        while (current := self.get_job(job)).status != "completed":
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {job!r} is still running after {timeout:.0f} s ({current.done}/{current.total})"
                )
            self._sleep(interval)
        return current

    def rotate_rights_secret(self) -> RightsSecret:
        return self._send(calls.rotate_rights_secret())

    # -- export and import -----------------------------------------------------------------------------------------

    def export_collection(
        self, collection: str, cursor: str | None = None, number: int = DEFAULT_EXPORT_CHUNKS
    ) -> ExportPage:
        """One page of the collection's export (documents, chunks, vectors); follow `next_cursor` for the rest."""
        return self._send(calls.export_collection(collection, cursor, number))

    def import_batch(self, collection: str, batch: ImportRequest | dict, **fields: Any) -> ImportResult:
        """One batch of an export into the collection (admin); vectors are kept when the models match. A batch
        that would embed more than one request may is sent in consecutive parts (`calls.import_parts`)."""
        body = calls.import_body(batch, fields)
        if not calls.may_embed_too_much(body):
            return self._send(calls.import_batch(collection, body))
        bodies = calls.import_parts(body, (self.get_collection(collection)).embedding_model)
        results = [self._send(calls.import_batch(collection, part)) for part in bodies]
        return calls.merged_import_result(bodies, results)

    # -- paging -------------------------------------------------------------------------------------------------

    def _pages(self, call_for, items: str) -> Iterator[Any]:
        cursor = None
        while True:
            page = self._send(call_for(cursor))
            yield from getattr(page, items)
            cursor = page.next_cursor
            if not cursor:
                return
