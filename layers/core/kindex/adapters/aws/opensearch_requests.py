"""The OpenSearch adapter's pure half: index names, document ids, routing, and every request body the adapter
(`opensearch_index.OpenSearchIndex`) sends, built from values alone, with no client and no I/O, so each is checked
on its own against the OpenSearch API spec (tests/unit/test_opensearch_requests.py).

Layout: alias `{prefix}-{slug(model)}-{dims}` -> concrete index `<alias>-v1` (the alias lets a later mapping change
reindex into `-v2` and swap without touching callers). Every write, search and delete is routed by tenant
(`routing_key`) and also filtered by a `tenant` term, so a tenant's requests hit one shard and can never see
another tenant's chunks. Neither the vector nor the text is kept in `_source`: nothing reads them back from the
cluster (a model switch or a drift repair re-embeds from the chunk store), so storing them there would only cost
disk (a chunk took half as much again with its vector in `_source`, measured at 384 dims). It follows that a chunk
is only ever rewritten whole (an `index` action with its vector and text): a partial `_update` rebuilds the
document from `_source` and so drops both from the k-NN and BM25 indexes (shown on the node in
tests/contract/test_search_filters_opensearch.py).

Each chunk also carries its document's attributes and access list as the typed terms of `opensearch_filters`
(`index_fields`), and every search adds that module's clauses to its filter, on both legs.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from kindex.adapters.aws.opensearch_design import IndexDesign
from kindex.adapters.aws.opensearch_filters import build_document_filters, index_fields, mapping_properties
from kindex.domain.errors import InvalidInput
from kindex.domain.types import IndexRecord, Principals, SearchFilters, SearchHit

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
    "char_filter": {
        "kindex_word_breaks": {"type": "pattern_replace", "pattern": r"[^\p{L}\p{N}\p{M}]+", "replacement": " "}
    },
    "analyzer": {
        TEXT_ANALYZER: {
            "type": "custom",
            "char_filter": ["kindex_word_breaks"],
            "tokenizer": "standard",
            "filter": ["lowercase", "asciifolding"],
        }
    },
}
# A terms query may hold at most `index.max_terms_count` (65,536) values; stay well below per delete request.
DELETE_IDS_PER_REQUEST = 1000
CHUNK_IDS_PAGE_SIZE = 1000
# Outside API requests (ingest, reindex) a call may take this long; inside one, the adapter cuts it per call.
BACKGROUND_TIMEOUT_S = 30

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
                **mapping_properties(),
            },
        },
    }
    if alias:
        body["aliases"] = {alias: {}}
    return body


def build_mapping_update() -> dict[str, Any]:
    """`PUT <index>/_mapping` body that brings an index created before attributes and access lists existed up to
    date: the filter fields only (a strict mapping accepts new fields; re-sending fields it has is a no-op). Its
    chunks have none of them until rewritten, which reads as "no attributes, no access list"."""
    return {"properties": mapping_properties()}


def build_filter_clauses(
    tenant: str, collections: Sequence[str], filters: SearchFilters | None = None
) -> list[dict[str, Any]]:
    """The filter shared by both legs of every search: tenant, collections, the optional search filters, and always
    the access clause - without `filters.principals` a query names no user and no group, so it sees only documents
    without an access list (fail closed: an absent principal never reads as "no filter")."""
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
    principals = (filters.principals if filters is not None else None) or Principals()
    clauses += build_document_filters(
        filters.attributes if filters is not None else None,
        principals.user,
        principals.groups,
        required=principals.required,
    )
    return clauses


def build_knn_query(
    tenant: str,
    collections: Sequence[str],
    vector: Sequence[float],
    k: int,
    filters: SearchFilters | None = None,
    *,
    ef_search: int | None = None,
) -> dict[str, Any]:
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


def build_keyword_query(
    tenant: str, collections: Sequence[str], query: str, k: int, filters: SearchFilters | None = None
) -> dict[str, Any]:
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
                **index_fields(record.attributes, record.access),
            },
        }
    return list(actions.values())


def build_delete_query(
    tenant: str, collection: str, *, document_ids: Sequence[str] | None = None, chunk_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """delete_by_query body: the tenant's collection, narrowed to documents and/or chunks when given."""
    clauses: list[dict[str, Any]] = [{"term": {"tenant": tenant}}, {"term": {"collection": collection}}]
    if document_ids is not None:
        clauses.append({"terms": {"document_id": list(document_ids)}})
    if chunk_ids is not None:
        clauses.append({"terms": {"chunk_id": list(chunk_ids)}})
    return {"query": {"bool": {"filter": clauses}}}


def build_chunk_ids_query(
    tenant: str,
    collection: str,
    *,
    page_size: int = CHUNK_IDS_PAGE_SIZE,
    search_after: Sequence[str] | None = None,
    after_document: str | None = None,
    through_document: str | None = None,
) -> dict[str, Any]:
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


def build_delete_queries(
    tenant: str, collection: str, *, document_ids: Sequence[str] | None = None, chunk_ids: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The delete_by_query bodies that remove the given chunks or documents (the whole collection when neither is
    given), each naming at most DELETE_IDS_PER_REQUEST ids (repeats dropped)."""
    if chunk_ids is not None:
        return [
            build_delete_query(tenant, collection, document_ids=document_ids, chunk_ids=batch)
            for batch in _batches(list(dict.fromkeys(chunk_ids)), DELETE_IDS_PER_REQUEST)
        ]
    if document_ids is not None:
        return [
            build_delete_query(tenant, collection, document_ids=batch)
            for batch in _batches(list(dict.fromkeys(document_ids)), DELETE_IDS_PER_REQUEST)
        ]
    return [build_delete_query(tenant, collection)]


def _batches(values: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


def search_hits(response: dict[str, Any], *, knn: bool) -> list[SearchHit]:
    """The hits of a search response; a k-NN score is turned back into the cosine similarity."""
    hits = []
    for hit in response.get("hits", {}).get("hits", []):
        source = hit.get("_source", {})
        score = float(hit["_score"])
        hits.append(
            SearchHit(
                chunk_id=source["chunk_id"],
                document_id=source["document_id"],
                collection=source["collection"],
                score=cosine_from_score(score) if knn else score,
            )
        )
    return hits
