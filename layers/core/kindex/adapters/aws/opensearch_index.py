"""OpenSearch adapter of the `SearchIndex` port: one k-NN index per embedding model and dimension, shared by tenants.

Layout: alias `{prefix}-{slug(model)}-{dims}` -> concrete index `<alias>-v1` (the alias lets a later mapping change
reindex into `-v2` and swap without touching callers). Every write, search and delete is routed by tenant
(`routing_key`) and also filtered by a `tenant` term, so a tenant's requests hit one shard and can never see
another tenant's chunks.
Request bodies are built by the pure `build_*` functions below; the class only sends them and turns
opensearch-py exceptions into `DependencyFailed` in one place (`_translate_errors`).

The vector engine is configuration (`faiss`, the default on Amazon OpenSearch Service, or `lucene`): both build
HNSW graphs in the `innerproduct` space, support efficient filtering and report the same score for a dot
product, so everything but the mapping's `engine` is shared. `lucene` needs no native library, which is why the
test node (assembled from Maven Central, where the k-NN plugin ships without its faiss/nmslib libraries) uses it.

The index design is configuration too (`IndexDesign`; docs/scale.md says when to change what): primary shards and
replicas, `number_of_routing_shards` (how far the index can be split later), `routing_partition_size` (a tenant's
chunks spread over that many shards instead of one, so a tenant holding most of the data does not fill one shard),
HNSW `m` / `ef_construction` / `ef_search`, vector compression (faiss: fp16 scalar quantization, or `on_disk` binary
quantization at 16x/32x) and the refresh interval. Neither the vector nor the text is kept in `_source`: nothing
reads them back from the cluster (a model switch or a drift repair re-embeds from the chunk store), so storing them
there would only cost disk (a chunk took half as much again with its vector in `_source`, measured at 384 dims).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit

from opensearchpy import OpenSearch, helpers
from opensearchpy.exceptions import (
    NotFoundError,
    OpenSearchException,
    RequestError,
    TransportError,
)

from kindex.adapters.aws.opensearch_design import REFRESH_POLICIES, IndexDesign
from kindex.domain import budget
from kindex.domain.errors import DependencyFailed, InvalidInput
from kindex.domain.types import IndexRecord, SearchFilters, SearchHit

logger = logging.getLogger(__name__)

VECTOR_FIELD = "vector"
TEXT_FIELD = "text"
# Fields a search hit needs; everything else (vector, filter fields) stays on the cluster.
HIT_SOURCE_FIELDS = ["chunk_id", "document_id", "collection"]
KEYWORD_FIELDS = ("tenant", "collection", "document_id", "chunk_id", "language", "mimetype")
# OpenSearch rejects _id values longer than 512 bytes.
MAX_DOC_ID_BYTES = 512
TEXT_ANALYZER = "kindex_text"
# Words as the embedded index's FTS5 `unicode61 remove_diacritics 2` tokenizer sees them: every character that is
# not a letter, digit or combining mark separates words, case and diacritics are folded. The standard analyzer
# alone keeps "budget's" and "text:budget" as single tokens, so a query for them would not find "budget".
# (pattern_replace and asciifolding come from the analysis-common module, present on every managed domain.)
TEXT_ANALYSIS: dict[str, Any] = {
    "char_filter": {"kindex_word_breaks": {"type": "pattern_replace", "pattern": r"[^\p{L}\p{N}\p{M}]+",
                                           "replacement": " "}},
    "analyzer": {TEXT_ANALYZER: {"type": "custom", "char_filter": ["kindex_word_breaks"], "tokenizer": "standard",
                                 "filter": ["lowercase", "asciifolding"]}},
}
# A terms query may hold at most `index.max_terms_count` (65,536) values; stay well below per delete request.
DELETE_IDS_PER_REQUEST = 1000
CHUNK_IDS_PAGE_SIZE = 1000
# Amazon OpenSearch Service domains sign with this service name (OpenSearch Serverless would be "aoss").
SIGNING_SERVICE = "es"
# Outside API requests (ingest, reindex): long timeouts and several retries. Inside one: a few seconds and one retry.
BACKGROUND_TIMEOUT_S = 30
BACKGROUND_RETRIES = 3
REQUEST_TIMEOUT_S = 4.0
REQUEST_RETRIES = 1

_DOMAIN_REGION = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d)\.es\.amazonaws\.com$")


def build_client_options(endpoint: str, *, max_retries: int = 3) -> dict[str, Any]:
    """opensearch-py client options for an endpoint (`https://host[:port]`, or a bare host meaning HTTPS).

    Plain `http://` is honoured only when written out (a local cluster or a test server). A user and password in
    the URL (`https://user:secret@host`, percent-encoded) become HTTP basic auth (`http_auth`). The transport
    retries timeouts and 502/503/504 (a managed domain's blue/green changes) at once; throttling is left to the
    caller.
    """
    if not endpoint:
        raise ValueError("no OpenSearch endpoint is configured")
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    try:
        port = parts.port
    except ValueError as error:
        raise ValueError("the OpenSearch endpoint has an invalid port") from error
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("the OpenSearch endpoint must be an http(s) URL or a host name")
    secure = parts.scheme == "https"
    options: dict[str, Any] = {
        "hosts": [{"host": parts.hostname, "port": port or (443 if secure else 80)}],
        "use_ssl": secure,
        "verify_certs": secure,
        "timeout": BACKGROUND_TIMEOUT_S,
        "max_retries": max_retries,
        "retry_on_timeout": True,
        # gzip (level 9, in Python) halves bulk throughput next to the cluster (measured: 484 against 1,104
        # 384-d docs/s on the test node): worth it only over the network to a remote (https) domain.
        "http_compress": secure,
    }
    if parts.username is not None:
        options["http_auth"] = (unquote(parts.username), unquote(parts.password or ""))
    return options


def region_of_domain(host: str) -> str | None:
    """The region in a managed domain's host name (`search-x-abc.eu-west-1.es.amazonaws.com`), else None."""
    match = _DOMAIN_REGION.search(host)
    return match.group(1) if match else None


def _call_budget() -> dict[str, Any]:
    """Per-call options inside an API request: a `request_timeout` of a few seconds, cut so that the call and its
    one retry fit in what the request's budget has left (BudgetSpent when nothing is left). None elsewhere."""
    if not budget.active():
        return {}
    both = budget.call_timeout((REQUEST_RETRIES + 1) * REQUEST_TIMEOUT_S, "the search cluster")
    return {"request_timeout": both / (REQUEST_RETRIES + 1)}


@lru_cache(maxsize=8)
def opensearch_client(endpoint: str, *, sigv4: bool = True, max_retries: int = 3) -> OpenSearch:
    """A client for `endpoint`: basic auth when the URL carries a user; otherwise, with `sigv4` (an Amazon
    OpenSearch Service domain), every request is SigV4-signed with the process's AWS credentials (refreshed as
    they rotate: the signer freezes them per request; boto3 is imported only then, to keep cold starts short; the
    region is the process's, else the one in the endpoint's host name); without it, no authentication (a local
    cluster such as the test node)."""
    options = build_client_options(endpoint, max_retries=max_retries)
    if "http_auth" in options or not sigv4:
        return OpenSearch(**options)

    import boto3
    from opensearchpy import Urllib3AWSV4SignerAuth, Urllib3HttpConnection

    session = boto3.Session()
    credentials = session.get_credentials()
    region = session.region_name or region_of_domain(options["hosts"][0]["host"])
    if credentials is None or not region:
        raise DependencyFailed("no AWS credentials or region to sign search cluster requests with")
    return OpenSearch(http_auth=Urllib3AWSV4SignerAuth(credentials, region, SIGNING_SERVICE),
                      connection_class=Urllib3HttpConnection, **options)


def model_slug(model: str) -> str:
    """Index-name-safe form of a model name: lowercase, runs of other characters become one dash."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    if not slug:
        raise InvalidInput("model name has no letters or digits")
    return slug


def index_alias(prefix: str, model: str, dims: int) -> str:
    """The alias every request uses for (model, dims)."""
    return f"{prefix}-{model_slug(model)}-{int(dims)}"


def concrete_index(alias: str) -> str:
    """The first physical index behind an alias."""
    return f"{alias}-v1"


def document_id(tenant: str, collection: str, chunk_id: str) -> str:
    """The OpenSearch `_id` of a chunk.

    Not the bare chunk id: `_id` is unique per shard, and two tenants' documents may share a shard, so the same
    chunk id under two tenants (or collections) would overwrite each other. Length-prefixing keeps it
    unambiguous and readable; over-long ids fall back to a hash.
    """
    readable = f"{len(tenant)}:{tenant}/{len(collection)}:{collection}/{chunk_id}"
    if len(readable.encode("utf-8")) <= MAX_DOC_ID_BYTES:
        return readable
    return "sha256:" + hashlib.sha256(readable.encode("utf-8")).hexdigest()


def routing_key(tenant: str) -> str:
    """The `routing` value of a tenant's documents and requests: the tenant id, unless it holds a comma.

    A request's `routing` is a comma-separated list (split like Java's `String.split`, trailing empty parts
    dropped) while a document's is one value, so a tenant "a,b" would be written to the shard of "a,b" but
    searched and deleted on the shards of "a" and "b" (and "," on none at all): its chunks would be invisible and
    undeletable. Such ids route by their hash instead.
    Two tenants sharing a routing value only share a shard; the tenant filter still keeps them apart.
    """
    if "," not in tenant:
        return tenant
    return "sha256-" + hashlib.sha256(tenant.encode("utf-8")).hexdigest()


def normalise(vector: Sequence[float]) -> list[float]:
    """L2-normalise so inner product equals cosine similarity (a zero vector stays zero)."""
    values = [float(x) for x in vector]
    norm = math.sqrt(sum(x * x for x in values))
    if not math.isfinite(norm):
        raise InvalidInput("vector contains non-finite values")
    return [x / norm for x in values] if norm > 0 else values


def cosine_from_score(score: float) -> float:
    """Invert the `innerproduct` score (1 + dot if dot >= 0, else 1 / (1 - dot); the same for faiss and lucene)
    back to the dot product, which is the cosine similarity of normalised vectors, so both adapters report the
    same scale."""
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


def build_vector_mapping(dims: int, design: IndexDesign) -> dict[str, Any]:
    """The `knn_vector` field: HNSW in the innerproduct space, compressed as the design says."""
    parameters: dict[str, Any] = {"ef_construction": design.ef_construction, "m": design.m}
    if design.compression == "fp16":
        parameters["encoder"] = {"name": "sq", "parameters": {"type": "fp16"}}
    mapping: dict[str, Any] = {
        "type": "knn_vector",
        "dimension": int(dims),
        "method": {"name": "hnsw", "engine": design.engine, "space_type": "innerproduct", "parameters": parameters},
    }
    if design.compression in ("16x", "32x"):
        mapping.update({"mode": "on_disk", "compression_level": design.compression})
    return mapping


def build_index_body(dims: int, *, alias: str | None = None, design: IndexDesign | None = None) -> dict[str, Any]:
    """Settings and mappings of one model's index.

    Space `innerproduct`: every stored and query vector is L2-normalised, so inner product ranks exactly like
    cosine; the OpenSearch docs recommend it over `cosinesimil` for normalised vectors with Faiss (which
    only supports cosinesimil from 2.19 on, and then normalises internally anyway), and Lucene scores it the
    same way. `text` is indexed for BM25 (with `TEXT_ANALYZER`) and the vector for k-NN, but neither is kept in
    `_source`: the cluster never returns chunk text, and the vector is stored in the k-NN files already (in
    `_source` it would be JSON text on top). Routing is required, as every request routes by tenant (and
    a routing partition demands it).
    """
    design = design or IndexDesign()
    index_settings: dict[str, Any] = {
        "knn": True,
        "knn.algo_param.ef_search": design.ef_search,
        "number_of_shards": design.number_of_shards,
        "number_of_replicas": design.number_of_replicas,
        "refresh_interval": design.refresh_interval,
        "analysis": TEXT_ANALYSIS,
    }
    if design.routing_partition_size > 1:
        index_settings["routing_partition_size"] = design.routing_partition_size
        index_settings["number_of_routing_shards"] = design.number_of_shards  # see IndexDesign
    elif design.number_of_routing_shards:
        index_settings["number_of_routing_shards"] = design.number_of_routing_shards
    body: dict[str, Any] = {
        "settings": {"index": index_settings},
        "mappings": {
            # strict: a typo in a field name fails the write instead of creating an unmapped field.
            "dynamic": "strict",
            "_routing": {"required": True},
            "_source": {"excludes": [TEXT_FIELD, VECTOR_FIELD]},
            "properties": {
                **{name: {"type": "keyword"} for name in KEYWORD_FIELDS},
                TEXT_FIELD: {"type": "text", "analyzer": TEXT_ANALYZER},
                VECTOR_FIELD: build_vector_mapping(dims, design),
            },
        },
    }
    if alias:
        body["aliases"] = {alias: {}}
    return body


def build_filter_clauses(tenant: str, collections: Sequence[str], filters: SearchFilters | None = None
                         ) -> list[dict[str, Any]]:
    """Term filters shared by every search: tenant, collections and the optional search filters."""
    clauses: list[dict[str, Any]] = [
        {"term": {"tenant": tenant}},
        {"terms": {"collection": list(collections)}},
    ]
    if filters is not None:
        if filters.document_ids is not None:
            clauses.append({"terms": {"document_id": list(filters.document_ids)}})
        if filters.language is not None:
            clauses.append({"term": {"language": filters.language}})
        if filters.mimetype is not None:
            clauses.append({"term": {"mimetype": filters.mimetype}})
    return clauses


def build_knn_query(tenant: str, collections: Sequence[str], vector: Sequence[float], k: int,
                    filters: SearchFilters | None = None, *, ef_search: int | None = None) -> dict[str, Any]:
    """A k-NN search with an *efficient filter*: the filter is applied while searching, before the k nearest are
    chosen, so a narrow filter still yields k results (a post-filter could return fewer or none).

    `ef_search` (the HNSW candidate list) goes in the query's `method_parameters`: the index setting
    `knn.algo_param.ef_search` is read by faiss only, and lucene otherwise searches with ef = k - measured on the
    test node with 10k random 384-d vectors, recall@10 0.44 at ef = k = 10 against 0.88 at ef_search 100.
    """
    options: dict[str, Any] = {
        "vector": normalise(vector),
        "k": k,
        "filter": {"bool": {"filter": build_filter_clauses(tenant, collections, filters)}},
    }
    if ef_search is not None:
        options["method_parameters"] = {"ef_search": max(int(ef_search), k)}
    return {"size": k, "_source": list(HIT_SOURCE_FIELDS), "query": {"knn": {VECTOR_FIELD: options}}}


def build_keyword_query(tenant: str, collections: Sequence[str], query: str, k: int,
                        filters: SearchFilters | None = None) -> dict[str, Any]:
    """A BM25 search. `match` analyses the text like the indexed field, so any user input (quotes, operators,
    punctuation) is just text: there is no query-string syntax to escape."""
    return {
        "size": k,
        "_source": list(HIT_SOURCE_FIELDS),
        "query": {
            "bool": {
                "must": [{"match": {TEXT_FIELD: {"query": query}}}],
                "filter": build_filter_clauses(tenant, collections, filters),
            }
        },
    }


def build_bulk_actions(alias: str, records: Iterable[IndexRecord]) -> list[dict[str, Any]]:
    """helpers.bulk actions for `records`, routed by tenant; the last record wins for a repeated chunk id. The
    actions name no index: the request goes to `<alias>/_bulk`, so a writer needs no grant on the domain's root
    `_bulk` (which would let a bulk body name any index), and domains refuse explicit indices in bodies."""
    actions: dict[str, dict[str, Any]] = {}
    for record in records:
        doc_id = document_id(record.tenant, record.collection, record.chunk_id)
        actions.pop(doc_id, None)  # keep batch order = last write order
        actions[doc_id] = {
            "_op_type": "index",
            "_id": doc_id,
            "_routing": routing_key(record.tenant),
            "_source": {
                "tenant": record.tenant,
                "collection": record.collection,
                "document_id": record.document_id,
                "chunk_id": record.chunk_id,
                "language": record.language,
                "mimetype": record.mimetype,
                TEXT_FIELD: record.text,
                VECTOR_FIELD: normalise(record.vector),
            },
        }
    return list(actions.values())


def build_delete_query(tenant: str, collection: str, *, document_ids: Sequence[str] | None = None,
                       chunk_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """delete_by_query body: the tenant's collection, narrowed to documents and/or chunks when given."""
    clauses: list[dict[str, Any]] = [{"term": {"tenant": tenant}}, {"term": {"collection": collection}}]
    if document_ids is not None:
        clauses.append({"terms": {"document_id": list(document_ids)}})
    if chunk_ids is not None:
        clauses.append({"terms": {"chunk_id": list(chunk_ids)}})
    return {"query": {"bool": {"filter": clauses}}}


def build_chunk_ids_query(tenant: str, collection: str, *, page_size: int = CHUNK_IDS_PAGE_SIZE,
                          search_after: Sequence[str] | None = None, after_document: str | None = None,
                          through_document: str | None = None) -> dict[str, Any]:
    """One page of chunk ids, sorted by chunk id so `search_after` can continue where the last page ended; with
    `after_document` / `through_document`, only chunks of document ids in that range (a keyword range compares
    UTF-8 bytes, which is code point order, the order documents are listed in)."""
    filters: list[dict[str, Any]] = [{"term": {"tenant": tenant}}, {"term": {"collection": collection}}]
    bounds = {op: value for op, value in (("gt", after_document), ("lte", through_document)) if value is not None}
    if bounds:
        filters.append({"range": {"document_id": bounds}})
    body: dict[str, Any] = {
        "size": page_size,
        "_source": ["chunk_id"],
        # The bare field name (ascending by default): the spec's `oneOf` for sort entries matches an object form
        # like {"chunk_id": {"order": "asc"}} twice and so rejects it, although OpenSearch accepts both.
        "sort": ["chunk_id"],
        "query": {"bool": {"filter": filters}},
    }
    if search_after is not None:
        body["search_after"] = list(search_after)
    return body


def _batches(values: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield list(values[start:start + size])


def _error_type(error: TransportError) -> str:
    info = error.info if isinstance(error.info, dict) else {}
    detail = info.get("error")
    if isinstance(detail, dict):
        return str(detail.get("type", ""))
    return str(error.error)


def _hits(response: dict[str, Any], *, knn: bool) -> list[SearchHit]:
    hits = []
    for hit in response.get("hits", {}).get("hits", []):
        source = hit.get("_source", {})
        score = float(hit["_score"])
        hits.append(SearchHit(
            chunk_id=source["chunk_id"],
            document_id=source["document_id"],
            collection=source["collection"],
            score=cosine_from_score(score) if knn else score,
        ))
    return hits


class OpenSearchIndex:
    """`SearchIndex` on an OpenSearch cluster with the k-NN plugin (HNSW, innerproduct on normalised vectors, with
    the `engine` given: faiss or lucene).

    `client` is a configured `opensearchpy.OpenSearch`; without one, `opensearch_client(endpoint, sigv4=sigv4)`
    builds the client for `endpoint` on first use (SigV4-signed for an AWS domain).
    New indices are laid out as `design` says (keyword arguments override single fields: `number_of_shards=3`).
    `refresh="wait_for"` (the default): an upsert or delete is searchable when the call returns, at the price of
    one wait for the next scheduled refresh per call (not per bulk request: a large upsert goes out without waits
    and refreshes its index once at the end). `refresh="false"`: writes return at once and become searchable
    within the index's refresh interval - for bulk backfills, which call `refresh(model)` once when done.
    """

    def __init__(self, client: OpenSearch | None = None, *, endpoint: str | None = None, sigv4: bool = True,
                 index_prefix: str = "kindex", design: IndexDesign | None = None, bulk_chunk_size: int = 500,
                 bulk_max_bytes: int = 10 * 1024 * 1024, refresh: str = "wait_for", **design_fields: Any):
        if client is None and not endpoint:
            raise ValueError("OpenSearchIndex needs a client or an endpoint")
        if refresh not in REFRESH_POLICIES:
            raise ValueError(f"unknown refresh policy {refresh!r}; use one of {', '.join(REFRESH_POLICIES)}")
        unknown = set(design_fields) - {item.name for item in fields(IndexDesign)}
        if unknown:
            raise TypeError(f"unknown index design fields {sorted(unknown)}")
        self._given_client = client
        self._endpoint = endpoint
        self._sigv4 = sigv4
        self._prefix = index_prefix
        self._design = replace(design or IndexDesign(), **design_fields)
        self._bulk_chunk_size = bulk_chunk_size
        self._bulk_max_bytes = bulk_max_bytes
        self._refresh = refresh
        self._lock = threading.Lock()
        self._ready_aliases: set[str] = set()
        self._dims_by_model: dict[str, set[int]] = {}
        # Deferred writes (an ingest batch's): write number -> the alias it went to, until a commit refreshes it.
        self._deferred: dict[int, str] = {}
        self._deferred_count = 0

    @property
    def design(self) -> IndexDesign:
        """The layout new indices are created with."""
        return self._design

    @property
    def engine(self) -> str:
        """The k-NN engine new indices are created with."""
        return self._design.engine

    # -- port -------------------------------------------------------------------------------------------------

    def upsert(self, model: str, records: Sequence[IndexRecord]) -> None:
        self._upsert(model, records, wait=True)

    # -- DeferredKeywordCommits: an ingest batch's writes become searchable with one refresh per index -------------

    def upsert_deferred(self, model: str, records: Sequence[IndexRecord]) -> int:
        """`upsert` without waiting for a refresh (with the wait_for policy each call would wait for the next
        scheduled refresh, up to the refresh interval); `commit_deferred` makes the batch's writes searchable."""
        return self._number(self._upsert(model, records, wait=False))

    def commit_deferred(self, writes: Sequence[int]) -> None:
        """Refresh, once each, the indices the numbered writes went to (with the `false` policy, nothing: writes
        become searchable within the refresh interval, as every write does then). The writes are durable in the
        shards' translog once `upsert_deferred` returned, so a failed refresh loses nothing: it raises
        DependencyFailed and the caller reports nothing done and redoes the writes."""
        with self._lock:
            aliases = sorted({self._deferred.pop(write) for write in writes if write in self._deferred})
        if self._refresh != "wait_for":
            return
        for alias in aliases:
            with self._translate_errors("refresh", alias):
                self._client.indices.refresh(index=alias, **_call_budget())

    def _number(self, alias: str | None) -> int:
        with self._lock:
            self._deferred_count += 1
            if alias is not None:
                self._deferred[self._deferred_count] = alias
            return self._deferred_count

    def delete(self, model: str, tenant: str, collection: str, *, document_ids: Sequence[str] | None = None,
               chunk_ids: Sequence[str] | None = None) -> None:
        # An empty list means "nothing", never "everything": only (None, None) deletes the whole collection.
        if (document_ids is not None and not document_ids) or (chunk_ids is not None and not chunk_ids):
            return
        bodies = self._delete_bodies(tenant, collection, document_ids, chunk_ids)
        deleted = 0
        for alias in self._aliases_of(model):
            with self._translate_errors("delete", alias):
                for body in bodies:
                    try:
                        params = {"refresh": "true"} if self._refresh == "wait_for" else {}
                        response = self._client.delete_by_query(index=alias, body=body, routing=routing_key(tenant),
                                                                conflicts="proceed", **params, **_call_budget())
                    except NotFoundError as error:
                        if _error_type(error) != "index_not_found_exception":
                            raise
                        break
                    deleted += int(response.get("deleted", 0))
        logger.info("search index delete", extra={"model": model, "tenant": tenant, "collection": collection,
                                                   "deleted": deleted})

    def knn_search(self, model: str, tenant: str, collections: Sequence[str], vector: Sequence[float], k: int,
                   filters: SearchFilters | None = None) -> list[SearchHit]:
        if k <= 0 or not collections or len(vector) == 0:  # len(): query vectors arrive as numpy arrays
            return []
        alias = index_alias(self._prefix, model, len(vector))
        body = build_knn_query(tenant, collections, vector, k, filters, ef_search=self._design.ef_search)
        response = self._search(alias, tenant, body)
        if not response and (aliases := self._aliases_of(model)) and alias not in aliases:
            # The model is indexed, but not at this dimension: a caller bug, not an empty result. (An alias of this
            # very dimension there now was created by another writer since the search found none: nothing matched.)
            raise InvalidInput(f"query vector has {len(vector)} dimensions, which model {model} does not use")
        return _hits(response, knn=True)

    def keyword_search(self, model: str, tenant: str, collections: Sequence[str], query: str, k: int,
                       filters: SearchFilters | None = None) -> list[SearchHit]:
        if k <= 0 or not collections or not query.strip():
            return []
        hits: list[SearchHit] = []
        for alias in self._aliases_of(model):
            hits.extend(_hits(self._search(alias, tenant, build_keyword_query(tenant, collections, query, k,
                                                                              filters)), knn=False))
        hits.sort(key=lambda hit: -hit.score)
        return hits[:k]

    def chunk_ids(self, model: str, tenant: str, collection: str, *, after_document: str | None = None,
                  through_document: str | None = None) -> set[str]:
        found: set[str] = set()
        for alias in self._aliases_of(model):
            search_after: list[str] | None = None
            while True:
                body = build_chunk_ids_query(tenant, collection, search_after=search_after,
                                             after_document=after_document, through_document=through_document)
                page = self._search(alias, tenant, body).get("hits", {}).get("hits", [])
                found.update(hit["_source"]["chunk_id"] for hit in page)
                if len(page) < CHUNK_IDS_PAGE_SIZE:
                    break
                search_after = page[-1]["sort"]
        return found

    def refresh(self, model: str) -> None:
        """Make every write to `model`'s indices searchable now (the end of a backfill written with
        `refresh="false"`). Not part of the port: only bulk loaders need it."""
        for alias in self._aliases_of(model):
            with self._translate_errors("refresh", alias):
                self._client.indices.refresh(index=alias, **_call_budget())

    # -- helpers ----------------------------------------------------------------------------------------------

    def _upsert(self, model: str, records: Sequence[IndexRecord], *, wait: bool) -> str | None:
        """Write `records` to the model's index for their dimension (created if missing) and return its alias
        (None for no records); with `wait` and the wait_for policy, only once they are searchable."""
        if not records:
            return None
        dims = {len(record.vector) for record in records}
        if len(dims) != 1 or 0 in dims:
            raise InvalidInput("all vectors in one upsert must have the same non-zero length")
        (dim,) = dims
        alias = index_alias(self._prefix, model, dim)
        actions = build_bulk_actions(alias, records)
        with self._translate_errors("upsert", alias):
            self._ensure_index(model, alias, dim)
            ok = self._bulk(alias, actions, wait=wait)
        logger.info("search index upsert", extra={"model": model, "index": alias, "records": ok, "waited": wait})
        return alias

    def _bulk(self, alias: str, actions: list[dict[str, Any]], *, wait: bool = True) -> int:
        """Send `actions`; with `wait` and the wait_for policy, return once they are searchable.

        `refresh=wait_for` on a bulk request waits only for the shards that request touched, so it is exact for
        an upsert that fits one request. A larger one (a big document, a backfill batch) goes out without any
        wait and ends with one refresh of the index: one refresh per call instead of a wait per 500 chunks, and
        exact whatever shards a routing partition spread the chunks over.
        """
        wait = wait and self._refresh == "wait_for"
        small = len(actions) <= self._bulk_chunk_size
        params = {"refresh": "wait_for"} if wait and small else {}
        ok, _ = helpers.bulk(self._client, actions, index=alias, chunk_size=self._bulk_chunk_size,
                             max_chunk_bytes=self._bulk_max_bytes, **params, **_call_budget())
        if wait and not small:
            self._client.indices.refresh(index=alias, **_call_budget())
        return ok


    @property
    def _client(self) -> OpenSearch:
        """The given client, else the shared one for the endpoint: with one retry inside an API request (whose
        calls also carry a short `request_timeout`, see `_call_budget`), with the transport's usual retries
        elsewhere (ingest, reindex)."""
        if self._given_client is not None:
            return self._given_client
        retries = REQUEST_RETRIES if budget.active() else BACKGROUND_RETRIES
        return opensearch_client(self._endpoint, sigv4=self._sigv4, max_retries=retries)

    @contextmanager
    def _translate_errors(self, operation: str, index: str) -> Iterator[None]:
        """The one place opensearch-py exceptions become domain errors; nothing above sees them."""
        try:
            yield
        except (OpenSearchException, helpers.BulkIndexError) as error:
            status = getattr(error, "status_code", None)
            logger.warning("search cluster request failed",
                           extra={"operation": operation, "index": index, "status": status,
                                  "error_type": type(error).__name__})
            raise DependencyFailed(f"search cluster {operation} failed ({type(error).__name__}, status {status})"
                                   ) from error

    def _search(self, alias: str, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._translate_errors("search", alias):
            try:
                return self._client.search(index=alias, body=body, routing=routing_key(tenant), **_call_budget())
            except NotFoundError as error:
                # No index yet for this model and dimension: nothing has been written, so nothing matches.
                if _error_type(error) == "index_not_found_exception":
                    return {}
                raise

    def _ensure_index(self, model: str, alias: str, dims: int) -> None:
        if alias in self._ready_aliases:
            return
        with self._lock:
            if alias in self._ready_aliases:
                return
            if not self._client.indices.exists(index=alias, **_call_budget()):
                body = build_index_body(dims, alias=alias, design=self._design)
                try:
                    self._client.indices.create(index=concrete_index(alias), body=body, **_call_budget())
                    logger.info("search index created", extra={"index": concrete_index(alias), "alias": alias})
                except RequestError as error:
                    # Another process created it between our check and create: that is the outcome we wanted.
                    if _error_type(error) != "resource_already_exists_exception":
                        raise
            self._ready_aliases.add(alias)
            self._dims_by_model.setdefault(model, set()).add(dims)

    def _aliases_of(self, model: str) -> list[str]:
        """Aliases holding `model` (one per dimension ever written). Operations that carry no vector need this."""
        known = self._dims_by_model.get(model)
        if not known:
            prefix = f"{self._prefix}-{model_slug(model)}-"
            pattern = re.compile(re.escape(prefix) + r"(\d+)$")
            with self._translate_errors("get_alias", prefix + "*"):
                try:
                    response = self._client.indices.get_alias(name=prefix + "*", **_call_budget())
                except NotFoundError:
                    response = {}
            dims = {int(match.group(1)) for entry in response.values() for name in entry.get("aliases", {})
                    if (match := pattern.match(name))}
            if not dims:
                return []  # not cached: the index may be created later by another process
            with self._lock:
                known = self._dims_by_model.setdefault(model, set())
                known.update(dims)
        return [index_alias(self._prefix, model, dim) for dim in sorted(known)]

    @staticmethod
    def _delete_bodies(tenant: str, collection: str, document_ids: Sequence[str] | None,
                       chunk_ids: Sequence[str] | None) -> list[dict[str, Any]]:
        if chunk_ids is not None:
            return [build_delete_query(tenant, collection, document_ids=document_ids, chunk_ids=batch)
                    for batch in _batches(list(dict.fromkeys(chunk_ids)), DELETE_IDS_PER_REQUEST)]
        if document_ids is not None:
            return [build_delete_query(tenant, collection, document_ids=batch)
                    for batch in _batches(list(dict.fromkeys(document_ids)), DELETE_IDS_PER_REQUEST)]
        return [build_delete_query(tenant, collection)]
