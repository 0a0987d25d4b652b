"""Pure request builders: one function per route of /v1/openapi.json, each returning the `ApiCall` the sync and the
async client send alike. No I/O here; a test checks that the builders and the API's route table agree."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from kindex.api.models import (
    ChunkList,
    CollectionList,
    DocumentList,
    DocumentOut,
    ReindexRequest,
    RightsSecret,
    UploadRequest,
    UploadResponse,
)
from kindex.client.filters import Filter, expression_json
from kindex.domain.filters import AllOf, AnyOf, Comparison
from kindex.domain.models import (
    MAX_PAGE_SIZE,
    Collection,
    CollectionInput,
    DocumentInput,
    DocumentStatus,
    ReindexJob,
)
from kindex.domain.query import CitationsRequest, CitationsResponse, MultiQueryRequest, QueryRequest, QueryResponse
from kindex.domain.quotas import UsageReport
from kindex.domain.transfer import (
    DEFAULT_EXPORT_CHUNKS,
    MAX_EMBED_CHARS,
    MAX_EMBED_TEXTS,
    ExportPage,
    ImportRequest,
    ImportResult,
    split_for_embedding,
)

T = TypeVar("T")


@dataclass(frozen=True)
class ApiCall(Generic[T]):
    """One request: `route` is the OpenAPI path it serves (with {name} parameters), `path` the encoded one.
    `response` is the model of a success's body (None for 204)."""

    method: str
    route: str
    path: str
    response: type[BaseModel] | None
    params: dict[str, Any] | None = None
    body: dict[str, Any] | None = None


def segment(value: str) -> str:
    """One id as a path segment: everything but unreserved characters percent-encoded ('/' included)."""
    if not isinstance(value, str) or not value:
        raise ValueError("ids are non-empty strings")
    return quote(value, safe="")


def _page(start: int, number: int, cursor: str | None) -> dict[str, Any]:
    # `start` is ignored with a cursor; the page size is not.
    return {"cursor": cursor, "number": number} if cursor else {"start": start, "number": number}


def _body(model: type[BaseModel], value: BaseModel | dict[str, Any] | None, fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of a write: `value` (a model or a dict) and keyword fields, validated by the API's own model
    (so a typo fails here, before any request), with only the fields given: the API updates only those."""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_unset=True)
    merged = {**(value or {}), **fields}
    return model.model_validate(merged).model_dump(mode="json", exclude_unset=True)


def list_collections(start: int = 0, number: int = 100, cursor: str | None = None) -> ApiCall[CollectionList]:
    return ApiCall("GET", "/v1/collections", "/v1/collections", CollectionList, _page(start, number, cursor))


def get_collection(collection: str) -> ApiCall[Collection]:
    return ApiCall("GET", "/v1/collections/{collection}", f"/v1/collections/{segment(collection)}", Collection)


def put_collection(collection: str, value: CollectionInput | dict | None = None, **fields: Any) -> ApiCall[Collection]:
    return ApiCall(
        "PUT",
        "/v1/collections/{collection}",
        f"/v1/collections/{segment(collection)}",
        Collection,
        body=_body(CollectionInput, value, fields),
    )


def delete_collection(collection: str) -> ApiCall[ReindexJob]:
    """202 with the delete job: the collection is gone from reads at once, the job deletes the rest."""
    return ApiCall("DELETE", "/v1/collections/{collection}", f"/v1/collections/{segment(collection)}", ReindexJob)


def list_documents(
    collection: str, start: int = 0, number: int = 100, cursor: str | None = None
) -> ApiCall[DocumentList]:
    return ApiCall(
        "GET",
        "/v1/collections/{collection}/documents",
        f"/v1/collections/{segment(collection)}/documents",
        DocumentList,
        _page(start, number, cursor),
    )


TERMINAL_STATUSES = (DocumentStatus.INDEXED, DocumentStatus.FAILED)


def listing_is_cheaper(document_count: int, wanted: int) -> bool:
    """Whether the summaries of `wanted` named documents cost fewer requests through the collection's listing (one
    request per MAX_PAGE_SIZE documents) than through one GET per document."""
    return 0 < wanted and -(-document_count // MAX_PAGE_SIZE) < wanted


class DocumentWait:
    """What `wait_for_documents` (sync and async) keeps between polls: the documents still waited for, and the
    summaries of those that are done (`indexed`, `failed`, or gone: None)."""

    def __init__(self, documents, timeout: float):
        self.waiting = list(dict.fromkeys(documents))
        self.done: dict[str, Any] = {}
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def update(self, current: dict[str, Any]) -> bool:
        """Take one poll's summaries; True once nothing is waited for, TimeoutError past the deadline."""
        self.done.update({d: s for d, s in current.items() if s is None or s.status in TERMINAL_STATUSES})
        self.waiting = [d for d in self.waiting if d not in self.done]
        if not self.waiting:
            return True
        if time.monotonic() >= self.deadline:
            raise TimeoutError(
                f"{len(self.waiting)} documents are not indexed after {self.timeout:.0f} s: {self.waiting[:5]}"
            )
        return False


def has_summaries(page: DocumentList) -> bool:
    """Whether the page carries its documents' summaries: a deployment from before them answers ids only."""
    return len(page.items) == len(page.documents)


def _document_path(collection: str, document: str) -> str:
    return f"/v1/collections/{segment(collection)}/documents/{segment(document)}"


def get_document(collection: str, document: str) -> ApiCall[DocumentOut]:
    return ApiCall(
        "GET", "/v1/collections/{collection}/documents/{document}", _document_path(collection, document), DocumentOut
    )


def put_document(
    collection: str, document: str, value: DocumentInput | dict | None = None, **fields: Any
) -> ApiCall[DocumentOut]:
    return ApiCall(
        "PUT",
        "/v1/collections/{collection}/documents/{document}",
        _document_path(collection, document),
        DocumentOut,
        body=_body(DocumentInput, value, fields),
    )


def delete_document(collection: str, document: str) -> ApiCall[None]:
    return ApiCall(
        "DELETE", "/v1/collections/{collection}/documents/{document}", _document_path(collection, document), None
    )


def prepare_upload(
    collection: str,
    document: str,
    filename: str,
    size: int,
    mimetype: str | None = None,
    *,
    attributes: dict[str, Any] | None = None,
    access: dict[str, Any] | None = None,
) -> ApiCall[UploadResponse]:
    """The upload ticket; `attributes` and `access` are set with it, in the same write, so the file is never in the
    index without them."""
    fields: dict[str, Any] = {"filename": filename, "size": size}
    if mimetype:
        fields["mimetype"] = mimetype
    fields.update(
        {name: value for name, value in (("attributes", attributes), ("access", access)) if value is not None}
    )
    return ApiCall(
        "POST",
        "/v1/collections/{collection}/documents/{document}/upload",
        _document_path(collection, document) + "/upload",
        UploadResponse,
        body=_body(UploadRequest, None, fields),
    )


def list_chunks(
    collection: str, document: str, start: int = 0, number: int = 100, cursor: str | None = None
) -> ApiCall[ChunkList]:
    return ApiCall(
        "GET",
        "/v1/collections/{collection}/documents/{document}/chunks",
        _document_path(collection, document) + "/chunks",
        ChunkList,
        _page(start, number, cursor),
    )


def _filter_json(value: object) -> object:
    """An attribute filter in its JSON form, whether given as JSON, as a `Filter`, or parsed (a model's field)."""
    if isinstance(value, Filter):
        return value.to_json()
    if isinstance(value, Comparison | AllOf | AnyOf):
        return expression_json(value)
    return value  # JSON: the API's model judges it (an error that names filters.attributes)


def _wire_filters(filters: object) -> object:
    """`filters=` as the API reads it: a `Filter` alone is the attribute filter; a QueryFilters model is its fields."""
    if isinstance(filters, Filter):
        return {"attributes": filters.to_json()}
    if isinstance(filters, BaseModel):
        attributes = getattr(filters, "attributes", None)
        filters = filters.model_dump(exclude_unset=True, exclude={"attributes"})
        if attributes is not None:
            filters["attributes"] = attributes
    if isinstance(filters, dict) and filters.get("attributes") is not None:
        return {**filters, "attributes": _filter_json(filters["attributes"])}
    return filters


def _query_body(model: type[BaseModel], value: BaseModel | dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """`_body` for a query. The attribute filter goes out as JSON: the API's model holds it parsed (a tree that does
    not dump back to the filter language), so the body carries the filter as given once the model accepted it."""
    if isinstance(value, BaseModel):
        filters = getattr(value, "filters", None)
        value = value.model_dump(exclude_unset=True, exclude={"filters"})
        if filters is not None:
            value["filters"] = filters
    merged = {**value, **fields}
    if "filters" in merged:
        merged["filters"] = _wire_filters(merged["filters"])
    attributes = merged["filters"].get("attributes") if isinstance(merged.get("filters"), dict) else None
    validated = model.model_validate(merged)
    if attributes is None:
        return validated.model_dump(mode="json", exclude_unset=True)
    body = validated.model_dump(mode="json", exclude_unset=True, exclude={"filters": {"attributes"}})
    body["filters"]["attributes"] = attributes
    return body


def query(collection: str, request: QueryRequest | dict | str, **fields: Any) -> ApiCall[QueryResponse]:
    """`filters=` takes the API's object (`{"attributes": {...}, "language": ...}`), a `Filter` of
    `kindex.client.filters` (the attribute filter alone), or a dict whose `attributes` is a `Filter`."""
    value = {"query": request} if isinstance(request, str) else request
    return ApiCall(
        "POST",
        "/v1/collections/{collection}/query",
        f"/v1/collections/{segment(collection)}/query",
        QueryResponse,
        body=_query_body(QueryRequest, value, fields),
    )


def query_collections(
    collections: list[str], request: QueryRequest | dict | str, **fields: Any
) -> ApiCall[QueryResponse]:
    value = {"query": request} if isinstance(request, str) else request
    return ApiCall(
        "POST",
        "/v1/query",
        "/v1/query",
        QueryResponse,
        body=_query_body(MultiQueryRequest, value, {"collections": list(collections), **fields}),
    )


def render_citations(text: str | CitationsRequest | dict, **fields: Any) -> ApiCall[CitationsResponse]:
    value = {"text": text} if isinstance(text, str) else text
    return ApiCall(
        "POST", "/v1/citations", "/v1/citations", CitationsResponse, body=_body(CitationsRequest, value, fields)
    )


def start_reindex(collection: str, clean: bool = False) -> ApiCall[ReindexJob]:
    return ApiCall(
        "POST",
        "/v1/collections/{collection}/reindex",
        f"/v1/collections/{segment(collection)}/reindex",
        ReindexJob,
        body=_body(ReindexRequest, None, {"clean": clean}),
    )


def get_job(job: str) -> ApiCall[ReindexJob]:
    return ApiCall("GET", "/v1/jobs/{job}", f"/v1/jobs/{segment(job)}", ReindexJob)


def get_usage() -> ApiCall[UsageReport]:
    return ApiCall("GET", "/v1/usage", "/v1/usage", UsageReport)


def rotate_rights_secret() -> ApiCall[RightsSecret]:
    return ApiCall("POST", "/v1/rights-check-secret", "/v1/rights-check-secret", RightsSecret, body={})


def export_collection(
    collection: str, cursor: str | None = None, number: int = DEFAULT_EXPORT_CHUNKS
) -> ApiCall[ExportPage]:
    params: dict[str, Any] = {"number": number, **({"cursor": cursor} if cursor else {})}
    return ApiCall(
        "GET",
        "/v1/collections/{collection}/export",
        f"/v1/collections/{segment(collection)}/export",
        ExportPage,
        params,
    )


def import_batch(collection: str, batch: ImportRequest | dict, **fields: Any) -> ApiCall[ImportResult]:
    return ApiCall(
        "POST",
        "/v1/collections/{collection}/import",
        f"/v1/collections/{segment(collection)}/import",
        ImportResult,
        body=_body(ImportRequest, batch, fields),
    )


def import_body(batch: ImportRequest | dict, fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of one import batch, validated by the API's own model."""
    return _body(ImportRequest, batch, fields)


def may_embed_too_much(body: dict[str, Any]) -> bool:
    """Whether the batch could send more texts to embed than one request may (MAX_EMBED_TEXTS, MAX_EMBED_CHARS),
    were every chunk embedded: only then does the target collection's model need asking (`import_parts`)."""
    chunks = body.get("chunks", [])
    return len(chunks) > MAX_EMBED_TEXTS or sum(len(c["text"]) for c in chunks) > MAX_EMBED_CHARS


def import_parts(body: dict[str, Any], collection_model: str) -> list[dict[str, Any]]:
    """The bodies that carry one import batch into a collection of `collection_model`: the batch itself, or, when
    it sends more texts to embed than one request may (the API answers 413), consecutive parts that each fit."""
    reuse = body["embedding_model"] == collection_model
    return [
        {**body, "documents": documents, "chunks": part}
        for documents, part in split_for_embedding(body.get("documents", []), body.get("chunks", []), reuse)
    ]


def merged_import_result(bodies: list[dict[str, Any]], results: list[ImportResult]) -> ImportResult:
    """One result for the parts of a batch: counts added up; incomplete documents as the last part touching each
    one left it."""
    merged = ImportResult()
    incomplete: dict[str, bool] = {}
    for body, result in zip(bodies, results):
        merged.documents_started += result.documents_started
        merged.documents_completed += result.documents_completed
        merged.chunks_written += result.chunks_written
        merged.texts_embedded += result.texts_embedded
        for document_id in [d["id"] for d in body.get("documents", [])] + [c["document_id"] for c in body["chunks"]]:
            incomplete[document_id] = False
        incomplete.update(dict.fromkeys(result.incomplete_documents, True))
    merged.incomplete_documents = [document_id for document_id, waiting in incomplete.items() if waiting]
    return merged


#: Every route the client covers, by the name of its builder (and of the clients' method).
BUILDERS = (
    list_collections,
    get_collection,
    put_collection,
    delete_collection,
    list_documents,
    get_document,
    put_document,
    delete_document,
    prepare_upload,
    list_chunks,
    query,
    query_collections,
    render_citations,
    start_reindex,
    get_job,
    get_usage,
    rotate_rights_secret,
    export_collection,
    import_batch,
)
