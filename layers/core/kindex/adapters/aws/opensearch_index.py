"""OpenSearch adapter of the `SearchIndex` port: one k-NN index per embedding model and dimension, shared by tenants.

The index names, routing and request bodies come from the pure `build_*` functions of `opensearch_requests` (the
layout is described there); this module only sends them and turns opensearch-py exceptions into
`DependencyFailed` in one place (`_translate_errors`).

The vector engine is configuration (`faiss`, the default on Amazon OpenSearch Service, or `lucene`): both build
HNSW graphs in the `innerproduct` space, support efficient filtering and report the same score for a dot
product, so everything but the mapping's `engine` is shared. `lucene` needs no native library, which is why the
test node (assembled from Maven Central, where the k-NN plugin ships without its faiss/nmslib libraries) uses it.

The index design is configuration too (`IndexDesign`; docs/scale.md says when to change what): primary shards and
replicas, `number_of_routing_shards` (how far the index can be split later), `routing_partition_size` (a tenant's
chunks spread over that many shards instead of one, so a tenant holding most of the data does not fill one shard),
HNSW `m` / `ef_construction` / `ef_search`, vector compression (faiss: fp16 scalar quantization, or `on_disk` binary
quantization at 16x/32x) and the refresh interval.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from functools import lru_cache
from typing import Any

from opensearchpy import OpenSearch, helpers
from opensearchpy.exceptions import (
    NotFoundError,
    OpenSearchException,
    RequestError,
    TransportError,
)

from kindex.adapters.aws.opensearch_design import REFRESH_POLICIES, IndexDesign
from kindex.adapters.aws.opensearch_requests import (
    CHUNK_IDS_PAGE_SIZE,
    build_bulk_actions,
    build_chunk_ids_query,
    build_client_options,
    build_delete_queries,
    build_index_body,
    build_keyword_query,
    build_knn_query,
    build_mapping_update,
    concrete_index,
    index_alias,
    model_slug,
    region_of_domain,
    routing_key,
    search_hits,
)
from kindex.app import cpu_slots
from kindex.domain import budget
from kindex.domain.errors import DependencyFailed, InvalidInput
from kindex.domain.types import IndexRecord, SearchFilters, SearchHit

logger = logging.getLogger(__name__)

# Amazon OpenSearch Service domains sign with this service name (OpenSearch Serverless would be "aoss").
SIGNING_SERVICE = "es"
# Outside API requests (ingest, reindex): long timeouts (BACKGROUND_TIMEOUT_S in opensearch_requests) and several
# retries. Inside one: a few seconds and one retry.
BACKGROUND_RETRIES = 3
REQUEST_TIMEOUT_S = 4.0
REQUEST_RETRIES = 1


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
    return OpenSearch(
        http_auth=Urllib3AWSV4SignerAuth(credentials, region, SIGNING_SERVICE),
        connection_class=Urllib3HttpConnection,
        **options,
    )


def _error_type(error: TransportError) -> str:
    info = error.info if isinstance(error.info, dict) else {}
    detail = info.get("error")
    if isinstance(detail, dict):
        return str(detail.get("type", ""))
    return str(error.error)


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

    computes_locally = False  # the node searches; a query waits on the network

    def __init__(
        self,
        client: OpenSearch | None = None,
        *,
        endpoint: str | None = None,
        sigv4: bool = True,
        index_prefix: str = "kindex",
        design: IndexDesign | None = None,
        bulk_chunk_size: int = 500,
        bulk_max_bytes: int = 10 * 1024 * 1024,
        refresh: str = "wait_for",
        **design_fields: Any,
    ):
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
    def index_prefix(self) -> str:
        """The prefix of every index name this adapter uses (`<prefix>-<model>-<dims>`)."""
        return self._prefix

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

    def delete(
        self,
        model: str,
        tenant: str,
        collection: str,
        *,
        document_ids: Sequence[str] | None = None,
        chunk_ids: Sequence[str] | None = None,
    ) -> None:
        # An empty list means "nothing", never "everything": only (None, None) deletes the whole collection.
        if (document_ids is not None and not document_ids) or (chunk_ids is not None and not chunk_ids):
            return
        bodies = build_delete_queries(tenant, collection, document_ids=document_ids, chunk_ids=chunk_ids)
        deleted = 0
        for alias in self._aliases_of(model):
            with self._translate_errors("delete", alias):
                for body in bodies:
                    try:
                        params = {"refresh": "true"} if self._refresh == "wait_for" else {}
                        response = self._client.delete_by_query(
                            index=alias,
                            body=body,
                            routing=routing_key(tenant),
                            conflicts="proceed",
                            **params,
                            **_call_budget(),
                        )
                    except NotFoundError as error:
                        if _error_type(error) != "index_not_found_exception":
                            raise
                        break
                    deleted += int(response.get("deleted", 0))
        logger.info(
            "search index delete",
            extra={"model": model, "tenant": tenant, "collection": collection, "deleted": deleted},
        )

    def knn_search(
        self,
        model: str,
        tenant: str,
        collections: Sequence[str],
        vector: Sequence[float],
        k: int,
        filters: SearchFilters | None = None,
    ) -> list[SearchHit]:
        if k <= 0 or not collections or len(vector) == 0:  # len(): query vectors arrive as numpy arrays
            return []
        alias = index_alias(self._prefix, model, len(vector))
        body = build_knn_query(tenant, collections, vector, k, filters, ef_search=self._design.ef_search)
        response = self._search(alias, tenant, body)
        if not response and (aliases := self._aliases_of(model)) and alias not in aliases:
            # The model is indexed, but not at this dimension: a caller bug, not an empty result. (An alias of this
            # very dimension there now was created by another writer since the search found none: nothing matched.)
            raise InvalidInput(f"query vector has {len(vector)} dimensions, which model {model} does not use")
        return search_hits(response, knn=True)

    def keyword_search(
        self,
        model: str,
        tenant: str,
        collections: Sequence[str],
        query: str,
        k: int,
        filters: SearchFilters | None = None,
    ) -> list[SearchHit]:
        if k <= 0 or not collections or not query.strip():
            return []
        hits: list[SearchHit] = []
        for alias in self._aliases_of(model):
            hits.extend(
                search_hits(
                    self._search(alias, tenant, build_keyword_query(tenant, collections, query, k, filters)), knn=False
                )
            )
        hits.sort(key=lambda hit: -hit.score)
        return hits[:k]

    def chunk_ids(
        self,
        model: str,
        tenant: str,
        collection: str,
        *,
        after_document: str | None = None,
        through_document: str | None = None,
    ) -> set[str]:
        found: set[str] = set()
        for alias in self._aliases_of(model):
            search_after: list[str] | None = None
            while True:
                body = build_chunk_ids_query(
                    tenant,
                    collection,
                    search_after=search_after,
                    after_document=after_document,
                    through_document=through_document,
                )
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
        params: dict[str, Any] = {"refresh": "wait_for"} if wait and small else {}  # Any: the client's own kwargs
        ok, _ = helpers.bulk(
            self._client,
            actions,
            index=alias,
            chunk_size=self._bulk_chunk_size,
            max_chunk_bytes=self._bulk_max_bytes,
            **params,
            **_call_budget(),
        )
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
            logger.warning(
                "search cluster request failed",
                extra={"operation": operation, "index": index, "status": status, "error_type": type(error).__name__},
            )
            raise DependencyFailed(
                f"search cluster {operation} failed ({type(error).__name__}, status {status})"
            ) from error

    def _search(self, alias: str, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._translate_errors("search", alias):
            try:
                with cpu_slots.away():  # the node's time, not this machine's: under `kindex serve` the slot is free
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
            else:
                self._update_mapping(alias)
            self._ready_aliases.add(alias)
            self._dims_by_model.setdefault(model, set()).add(dims)

    def _update_mapping(self, alias: str) -> None:
        """Add the attribute and access-list fields to an index this process did not create, before its first write
        there: an index created before they existed has a strict mapping that would refuse every chunk carrying
        them. Sent unconditionally (the fields already there make it a no-op, acknowledged without a cluster state
        change) rather than read first: the writers' grant covers a PUT on the index path, not a GET of its
        mapping, and it is one request per index per process."""
        self._client.indices.put_mapping(index=alias, body=build_mapping_update(), **_call_budget())
        logger.info("search index mapping brought up to date", extra={"alias": alias})

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
            dims = {
                int(match.group(1))
                for entry in response.values()
                for name in entry.get("aliases", {})
                if (match := pattern.match(name))
            }
            if not dims:
                return []  # not cached: the index may be created later by another process
            with self._lock:
                known = self._dims_by_model.setdefault(model, set())
                known.update(dims)
        return [index_alias(self._prefix, model, dim) for dim in sorted(known)]
