"""`AsyncKindex`: the asynchronous client, method for method the same as `Kindex` (awaitable; iterators are async)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
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
from kindex.client.sync import TERMINAL_STATUSES, UPLOAD_TIMEOUT
from kindex.client.transport import ClientConfig, decode, raise_for_answer
from kindex.client.uploads import UploadSource
from kindex.domain.models import MAX_PAGE_SIZE, Collection, CollectionInput, DocumentInput, DocumentSummary, ReindexJob
from kindex.domain.query import CitationsRequest, CitationsResponse, QueryRequest, QueryResponse
from kindex.domain.quotas import UsageReport
from kindex.domain.transfer import DEFAULT_EXPORT_CHUNKS, ExportPage, ImportRequest, ImportResult

# GETs of `document_summaries` in flight at once (when reading the named documents beats the listing).
SUMMARY_GETS_IN_FLIGHT = 8


class AsyncKindex:
    """A kindex deployment for one API key, for asyncio code. See `Kindex` for the behaviour of each method."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
    ):
        self.config = ClientConfig.resolve(url, key, timeout, retry)
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._owns_http = http_client is None  # a client handed in is the caller's to close
        self._sleep = asyncio.sleep

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncKindex":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- sending ------------------------------------------------------------------------------------------------

    async def _send(self, call: ApiCall) -> Any:
        return decode(call, await self._request(self.config.request(call)))

    async def _request(self, args: dict[str, Any], content_factory=None) -> httpx.Response:
        attempt = 0
        while True:
            if content_factory is not None:
                args["content"] = content_factory()
            try:
                response = await self._http.request(**args)
            except httpx.TransportError as error:
                raise ConnectionFailed(f"{args['method']} {args['url'].split('?')[0]}: {error!r}") from error
            delay = self.config.retry.delay(attempt, response.status_code, response.headers)
            if delay is None:
                return response
            await response.aclose()
            await self._sleep(delay)
            attempt += 1

    # -- collections --------------------------------------------------------------------------------------------

    async def list_collections(self, start: int = 0, number: int = 100, cursor: str | None = None) -> CollectionList:
        return await self._send(calls.list_collections(start, number, cursor))

    def iter_collections(self, page_size: int = 100) -> AsyncIterator[str]:
        return self._pages(lambda cursor: calls.list_collections(0, page_size, cursor), "collections")

    async def get_collection(self, collection: str) -> Collection:
        return await self._send(calls.get_collection(collection))

    async def put_collection(
        self, collection: str, value: CollectionInput | dict | None = None, **fields: Any
    ) -> Collection:
        return await self._send(calls.put_collection(collection, value, **fields))

    async def delete_collection(self, collection: str, *, wait: bool = False, timeout: float = 3600.0) -> ReindexJob:
        job = await self._send(calls.delete_collection(collection))
        return await self.wait_for_job(job.id, timeout=timeout) if wait else job

    # -- documents ----------------------------------------------------------------------------------------------

    async def list_documents(
        self, collection: str, start: int = 0, number: int = 100, cursor: str | None = None
    ) -> DocumentList:
        return await self._send(calls.list_documents(collection, start, number, cursor))

    def iter_documents(self, collection: str, page_size: int = 100) -> AsyncIterator[str]:
        return self._pages(lambda cursor: calls.list_documents(collection, 0, page_size, cursor), "documents")

    async def iter_document_summaries(self, collection: str, page_size: int = 100) -> AsyncIterator[DocumentSummary]:
        cursor = None
        while True:
            page = await self.list_documents(collection, 0, page_size, cursor)
            summaries = page.items if calls.has_summaries(page) else await self._summaries(collection, page.documents)
            for summary in summaries:
                if summary is not None:
                    yield summary
            cursor = page.next_cursor
            if not cursor:
                return

    async def document_summaries(self, collection: str, documents: Iterable[str]) -> dict[str, DocumentSummary | None]:
        wanted = list(dict.fromkeys(documents))
        if calls.listing_is_cheaper((await self.get_collection(collection)).document_count, len(wanted)):
            named = set(wanted)  # keep only those: a large collection's summaries would not fit in memory
            listed = {
                s.id: s
                async for s in self.iter_document_summaries(collection, page_size=MAX_PAGE_SIZE)
                if s.id in named
            }
            return {document: listed.get(document) for document in wanted}
        return dict(zip(wanted, await self._summaries(collection, wanted), strict=True))

    async def _summaries(self, collection: str, documents: list[str]) -> list[DocumentSummary | None]:
        """One GET per document, SUMMARY_GETS_IN_FLIGHT at a time; None for a document that does not exist."""
        gate = asyncio.Semaphore(SUMMARY_GETS_IN_FLIGHT)

        async def one(document: str) -> DocumentSummary | None:
            async with gate:
                try:
                    return DocumentSummary.of(await self.get_document(collection, document))
                except NotFound:
                    return None

        return list(await asyncio.gather(*map(one, documents)))

    async def wait_for_documents(
        self, collection: str, documents: Iterable[str], timeout: float = 300.0, interval: float = 1.0
    ) -> dict[str, DocumentSummary | None]:
        wait = calls.DocumentWait(documents, timeout)
        while not wait.update(await self.document_summaries(collection, wait.waiting)):
            await self._sleep(interval)
        return wait.done

    async def get_document(self, collection: str, document: str) -> DocumentOut:
        return await self._send(calls.get_document(collection, document))

    async def put_document(
        self, collection: str, document: str, value: DocumentInput | dict | None = None, **fields: Any
    ) -> DocumentOut:
        return await self._send(calls.put_document(collection, document, value, **fields))

    async def delete_document(self, collection: str, document: str) -> None:
        await self._send(calls.delete_document(collection, document))

    async def prepare_upload(
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
        return await self._send(
            calls.prepare_upload(collection, document, filename, size, mimetype, attributes=attributes, access=access)
        )

    async def upload_file(
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
        source = UploadSource.of(file, filename, mimetype)
        ticket = await self.prepare_upload(
            collection, document, source.filename, source.size, source.mimetype, attributes=attributes, access=access
        )
        response = await self._request(
            {"method": ticket.method, "url": ticket.url, "headers": ticket.headers, "timeout": UPLOAD_TIMEOUT},
            content_factory=source.async_chunks,
        )
        raise_for_answer(response)
        return ticket.document

    async def list_chunks(
        self, collection: str, document: str, start: int = 0, number: int = 100, cursor: str | None = None
    ) -> ChunkList:
        return await self._send(calls.list_chunks(collection, document, start, number, cursor))

    def iter_chunks(self, collection: str, document: str, page_size: int = 100) -> AsyncIterator[ChunkOut]:
        return self._pages(lambda cursor: calls.list_chunks(collection, document, 0, page_size, cursor), "chunks")

    async def wait_for_document(
        self, collection: str, document: str, timeout: float = 300.0, interval: float = 0.5
    ) -> DocumentOut:
        deadline = time.monotonic() + timeout
        while True:
            stored = await self.get_document(collection, document)
            if stored.status in TERMINAL_STATUSES:
                return stored
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{document!r} is still {stored.status.value} after {timeout:.0f} s")
            await self._sleep(interval)

    # -- query, citations, reindex, secrets ---------------------------------------------------------------------

    async def query(self, collection: str, request: QueryRequest | dict | str, **fields: Any) -> QueryResponse:
        return await self._send(calls.query(collection, request, **fields))

    async def query_collections(
        self, collections: list[str], request: QueryRequest | dict | str, **fields: Any
    ) -> QueryResponse:
        return await self._send(calls.query_collections(collections, request, **fields))

    async def render_citations(self, text: str | CitationsRequest | dict, **fields: Any) -> CitationsResponse:
        return await self._send(calls.render_citations(text, **fields))

    async def start_reindex(self, collection: str, clean: bool = False) -> ReindexJob:
        return await self._send(calls.start_reindex(collection, clean))

    async def get_usage(self) -> UsageReport:
        """What the tenant stores and used (documents, chunks, bytes, collections, queries today, embedding tokens
        this month) and its plan's limits (None: no limit)."""
        return await self._send(calls.get_usage())

    async def get_job(self, job: str) -> ReindexJob:
        return await self._send(calls.get_job(job))

    async def wait_for_job(self, job: str, timeout: float = 3600.0, interval: float = 1.0) -> ReindexJob:
        deadline = time.monotonic() + timeout
        while (current := await self.get_job(job)).status != "completed":
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {job!r} is still running after {timeout:.0f} s ({current.done}/{current.total})"
                )
            await self._sleep(interval)
        return current

    async def rotate_rights_secret(self) -> RightsSecret:
        return await self._send(calls.rotate_rights_secret())

    # -- export and import -----------------------------------------------------------------------------------------

    async def export_collection(
        self, collection: str, cursor: str | None = None, number: int = DEFAULT_EXPORT_CHUNKS
    ) -> ExportPage:
        """One page of the collection's export (documents, chunks, vectors); follow `next_cursor` for the rest."""
        return await self._send(calls.export_collection(collection, cursor, number))

    async def import_batch(self, collection: str, batch: ImportRequest | dict, **fields: Any) -> ImportResult:
        """One batch of an export into the collection (admin); vectors are kept when the models match. A batch
        that would embed more than one request may is sent in consecutive parts (`calls.import_parts`)."""
        body = calls.import_body(batch, fields)
        if not calls.may_embed_too_much(body):
            return await self._send(calls.import_batch(collection, body))
        bodies = calls.import_parts(body, (await self.get_collection(collection)).embedding_model)
        results = [await self._send(calls.import_batch(collection, part)) for part in bodies]
        return calls.merged_import_result(bodies, results)

    # -- paging -------------------------------------------------------------------------------------------------

    async def _pages(self, call_for, items: str) -> AsyncIterator[Any]:
        cursor = None
        while True:
            page = await self._send(call_for(cursor))
            for item in getattr(page, items):
                yield item
            cursor = page.next_cursor
            if not cursor:
                return
