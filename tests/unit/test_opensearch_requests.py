"""The OpenSearch adapter's pure request builders, checked against the OpenSearch API spec, and the adapter's
wire behaviour (batching, routing, index creation, error translation) observed through the OpenSearch double."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from opensearchpy.exceptions import OpenSearchException, RequestError
from opensearchpy.helpers.actions import expand_action

from kindex.adapters.aws.opensearch_design import IndexDesign
from kindex.adapters.aws.opensearch_filters import mapping_properties
from kindex.adapters.aws.opensearch_index import OpenSearchIndex, opensearch_client
from kindex.adapters.aws.opensearch_requests import (
    TEXT_ANALYZER,
    build_bulk_actions,
    build_chunk_ids_query,
    build_client_options,
    build_delete_query,
    build_index_body,
    build_keyword_query,
    build_knn_query,
    build_mapping_update,
    concrete_index,
    cosine_from_score,
    document_id,
    index_alias,
    model_slug,
    routing_key,
)
from kindex.domain.errors import DependencyFailed, InvalidInput
from kindex.domain.filters import Access, parse_filter
from kindex.domain.types import IndexRecord, Principals, SearchFilters
from kindex.settings import SettingsError, load_settings
from tests.support.opensearch_double import OpenSearchDouble, spec_checker

pytestmark = pytest.mark.unit

MODEL = "local:all-MiniLM-L6-v2"
ALIAS = "kindex-local-all-minilm-l6-v2-4"
FILTERS = SearchFilters(document_ids=("d-1", "d-2"), language="en", mimetype="application/pdf")
# What a query that names no principal may see: documents without an access list (fail closed, never "no filter").
NO_ACCESS_LIST = {"bool": {"must_not": [{"term": {"access_set": True}}]}}
# Every operator, both combinators, and a user in 1,000 groups.
EVERY_FILTER = SearchFilters(
    language="en",
    principals=Principals("alice", tuple(f"g{i}" for i in range(1000)), required=True),
    attributes=parse_filter(
        {
            "$or": [
                {"year": {"$gt": 1, "$gte": 2, "$lt": 9, "$lte": 8}, "r": {"$in": ["a", 1, True]}},
                {"r": {"$ne": "x", "$nin": ["y"]}, "t": {"$exists": False}},
                {"tags": {"$contains": "z"}, "title": {"$starts_with": "Zoë"}},
            ]
        }
    ),
)


def record(
    chunk_id: str,
    vector=(3.0, 0.0, 4.0, 0.0),
    *,
    tenant: str = "acme",
    collection: str = "handbook",
    text: str = "some words",
) -> IndexRecord:
    return IndexRecord(
        tenant=tenant,
        collection=collection,
        document_id="d-1",
        chunk_id=chunk_id,
        vector=vector,
        text=text,
        language="en",
        mimetype="text/plain",
    )


def unit_vectors(count: int, dims: int = 4, seed: int = 3) -> np.ndarray:
    matrix = np.random.RandomState(seed).normal(size=(count, dims))
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


# -- names and ids -----------------------------------------------------------------------------------------------


def test_alias_and_concrete_index_names_are_lowercase_slugs_with_dimensions():
    # Given model names with colons, capitals and dots
    # When naming their indices
    # Then they become valid lowercase index names keyed by dimension, behind a versioned concrete index
    assert index_alias("kindex", MODEL, 384) == "kindex-local-all-minilm-l6-v2-384"
    assert index_alias("kindex", "openai:text-embedding-3-small", 1536) == "kindex-openai-text-embedding-3-small-1536"
    assert model_slug("hash:384") == "hash-384"
    assert concrete_index("kindex-hash-384-384") == "kindex-hash-384-384-v1"
    with pytest.raises(InvalidInput):
        model_slug("::")


def test_document_ids_differ_per_tenant_and_collection_and_stay_within_the_limit():
    # Given the same chunk id under different tenants and collections, and ambiguous-looking names
    ids = {
        document_id("acme", "handbook", "c-1"),
        document_id("globex", "handbook", "c-1"),
        document_id("acme", "wiki", "c-1"),
        document_id("a/1:b", "c", "d"),
        document_id("a", "1:b/c", "d"),
    }
    # Then every combination has its own _id
    assert len(ids) == 5
    # And an over-long combination falls back to a hash under OpenSearch's 512-byte limit
    long_id = document_id("t" * 300, "c" * 300, "x")
    assert long_id.startswith("sha256:") and len(long_id.encode()) <= 512


@pytest.mark.parametrize("dot", [-1.0, -0.5, -0.01, 0.0, 0.3, 0.99, 1.0])
def test_cosine_from_score_inverts_the_faiss_innerproduct_score(dot):
    # Given the score OpenSearch reports for a dot product (faiss innerproduct)
    score = 1 + dot if dot >= 0 else 1 / (1 - dot)
    # When converting back / Then the cosine of normalised vectors is recovered
    assert cosine_from_score(score) == pytest.approx(dot)


# -- request bodies ----------------------------------------------------------------------------------------------


def test_index_body_maps_a_faiss_hnsw_innerproduct_vector_and_hides_text():
    # When building the index body for 384 dimensions
    body = build_index_body(
        384, alias=ALIAS, design=IndexDesign(number_of_shards=2, number_of_replicas=1, ef_construction=256, m=24)
    )
    # Then k-NN is on, the vector is faiss HNSW in innerproduct space with our parameters
    assert body["settings"]["index"]["knn"] is True
    assert body["settings"]["index"]["number_of_shards"] == 2
    vector = body["mappings"]["properties"]["vector"]
    assert vector == {
        "type": "knn_vector",
        "dimension": 384,
        "method": {
            "name": "hnsw",
            "engine": "faiss",
            "space_type": "innerproduct",
            "parameters": {"ef_construction": 256, "m": 24},
        },
    }
    # And text is an indexed text field (split into words like the embedded index does); text and vector are
    # excluded from _source, every write must be routed, the ids and filters are keywords
    assert body["mappings"]["properties"]["text"] == {"type": "text", "analyzer": TEXT_ANALYZER}
    analyzer = body["settings"]["index"]["analysis"]["analyzer"][TEXT_ANALYZER]
    assert analyzer["tokenizer"] == "standard" and analyzer["filter"] == ["lowercase", "asciifolding"]
    assert body["mappings"]["_source"] == {"excludes": ["text", "vector"]}
    assert body["mappings"]["_routing"] == {"required": True}
    for name in ("tenant", "collection", "document_id", "chunk_id", "language", "mimetype"):
        assert body["mappings"]["properties"][name] == {"type": "keyword"}
    assert body["mappings"]["dynamic"] == "strict"
    assert body["aliases"] == {ALIAS: {}}


def test_the_engine_is_the_only_difference_between_a_faiss_and_a_lucene_index():
    # When building the same index for both engines
    faiss = build_index_body(384, alias=ALIAS, design=IndexDesign(engine="faiss"))
    lucene = build_index_body(384, alias=ALIAS, design=IndexDesign(engine="lucene"))
    # Then only the vector method's engine differs (faiss is the default: Amazon OpenSearch Service's)
    assert faiss == build_index_body(384, alias=ALIAS)
    assert lucene["mappings"]["properties"]["vector"]["method"]["engine"] == "lucene"
    lucene["mappings"]["properties"]["vector"]["method"]["engine"] = "faiss"
    assert lucene == faiss


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["nmslib", "FAISS", "", "lucene "])
def test_an_unknown_engine_is_refused_before_anything_is_sent(engine, double):
    # When asking for an engine other than faiss or lucene / Then it fails at once, naming the engine
    with pytest.raises(ValueError, match="k-NN engine"):
        IndexDesign(engine=engine)
    with pytest.raises(ValueError, match="k-NN engine"):
        OpenSearchIndex(double.client(), engine=engine)
    assert double.requests == []


@pytest.mark.parametrize(
    "backend, value, engine",
    [
        ("aws", None, "faiss"),
        ("aws", "faiss", "faiss"),
        ("aws", "lucene", "lucene"),
        ("local", None, "lucene"),
        ("local", "faiss", "faiss"),
        ("local", "lucene", "lucene"),
    ],
)
def test_the_engine_setting_defaults_to_faiss_on_aws_and_lucene_for_kindex_serve(backend, value, engine):
    # Given the environment of a backend with or without KINDEX_OPENSEARCH_ENGINE
    environ = {"KINDEX_BACKEND": backend, "KINDEX_TABLE_NAME": "t", "KINDEX_BUCKET_NAME": "b"}
    if value is not None:
        environ["KINDEX_OPENSEARCH_ENGINE"] = value
    # When loading the settings / Then the engine is the one named; unset, faiss on AWS and lucene locally
    assert load_settings(environ).search_engine == engine


def test_the_scale_design_reaches_the_index_settings():
    # Given a design for a large corpus: 6 primaries, a tenant spread over 3 of them, no replica
    design = IndexDesign(
        number_of_shards=6, number_of_replicas=0, routing_partition_size=3, ef_search=256, refresh_interval="30s"
    )
    # When building the index body
    settings = build_index_body(384, design=design)["settings"]["index"]
    # Then each knob is an index setting OpenSearch reads
    assert {
        key: settings[key]
        for key in (
            "number_of_shards",
            "number_of_replicas",
            "number_of_routing_shards",
            "routing_partition_size",
            "knn.algo_param.ef_search",
            "refresh_interval",
        )
    } == {
        "number_of_shards": 6,
        "number_of_replicas": 0,
        "number_of_routing_shards": 6,
        "routing_partition_size": 3,
        "knn.algo_param.ef_search": 256,
        "refresh_interval": "30s",
    }
    # And a splittable design names its routing shards; the defaults leave them to OpenSearch
    splittable = build_index_body(384, design=IndexDesign(number_of_shards=3, number_of_routing_shards=48))
    assert splittable["settings"]["index"]["number_of_routing_shards"] == 48
    defaults = build_index_body(384)["settings"]["index"]
    assert "number_of_routing_shards" not in defaults and "routing_partition_size" not in defaults
    assert defaults["number_of_replicas"] == 1 and defaults["refresh_interval"] == "1s"


@pytest.mark.parametrize(
    "compression, extra, encoder",
    [
        ("none", {}, None),
        ("fp16", {}, {"name": "sq", "parameters": {"type": "fp16"}}),
        ("16x", {"mode": "on_disk", "compression_level": "16x"}, None),
        ("32x", {"mode": "on_disk", "compression_level": "32x"}, None),
    ],
)
def test_compression_maps_to_faiss_scalar_or_binary_quantization(compression, extra, encoder):
    # When building a faiss index with each compression
    vector = build_index_body(1536, design=IndexDesign(compression=compression))["mappings"]["properties"]["vector"]
    # Then fp16 is an sq encoder of the HNSW method, 16x/32x the on_disk mode with that compression level
    assert {key: vector[key] for key in ("mode", "compression_level") if key in vector} == extra
    assert vector["method"]["parameters"].get("encoder") == encoder
    assert vector["method"]["engine"] == "faiss" and vector["method"]["space_type"] == "innerproduct"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"number_of_shards": 0}, "number_of_shards"),
        ({"number_of_replicas": -1}, "negative"),
        ({"number_of_shards": 3, "number_of_routing_shards": 8}, "multiple of number_of_shards"),
        ({"number_of_shards": 2, "number_of_routing_shards": 2048}, "at most 1024"),
        ({"number_of_shards": 3, "routing_partition_size": 3}, "less than number_of_shards"),
        ({"routing_partition_size": 2}, "less than number_of_shards"),
        (
            {"number_of_shards": 6, "routing_partition_size": 3, "number_of_routing_shards": 48},
            "equals number_of_shards",
        ),
        ({"m": 1}, "m must be"),
        ({"ef_search": 0}, "ef_search"),
        ({"compression": "8x"}, "unknown compression"),
        ({"engine": "lucene", "compression": "fp16"}, "needs the faiss engine"),
        ({"engine": "lucene", "compression": "32x"}, "needs the faiss engine"),
        ({"refresh_interval": "-1"}, "refresh_interval"),
        ({"refresh_interval": "1 s"}, "refresh_interval"),
    ],
)
def test_a_design_opensearch_would_refuse_fails_before_anything_is_sent(fields, message, double):
    # When asking for an impossible layout / Then it fails at once, naming the problem, and nothing was sent
    with pytest.raises(ValueError, match=message):
        IndexDesign(**fields)
    with pytest.raises(ValueError, match=message):
        OpenSearchIndex(double.client(), **fields)
    assert double.requests == []


def test_unknown_design_fields_and_refresh_policies_are_refused(double):
    with pytest.raises(TypeError, match="shard_count"):
        OpenSearchIndex(double.client(), shard_count=3)
    with pytest.raises(ValueError, match="refresh policy"):
        OpenSearchIndex(double.client(), refresh="true")


def test_a_partitioned_index_spreads_one_tenant_over_its_partition_and_still_finds_everything(double):
    # Given a 6-shard index whose tenants each spread over 3 shards
    index = OpenSearchIndex(double.client(), number_of_shards=6, routing_partition_size=3)
    # When one tenant writes 300 chunks and another 10 with the same chunk ids
    index.upsert(MODEL, many_records(300))
    index.upsert(MODEL, many_records(10, tenant="globex"))
    # Then the big tenant's chunks sit on 3 shards, not 1, and every chunk is found, tenants kept apart
    (state,) = double.indices.values()
    shards = {doc.shard for doc in state.live.values() if doc.routing == "acme"}
    assert len(shards) == 3
    assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 300
    assert len(index.chunk_ids(MODEL, "globex", "handbook")) == 10
    assert len(index.knn_search(MODEL, "acme", ["handbook"], [1, 0, 0, 0], 50)) == 50
    index.delete(MODEL, "acme", "handbook")
    assert index.chunk_ids(MODEL, "acme", "handbook") == set()
    assert len(index.chunk_ids(MODEL, "globex", "handbook")) == 10
    assert double.spec_violations == []


def test_a_small_upsert_waits_for_its_refresh_in_one_request(double):
    # Given the default policy
    index = OpenSearchIndex(double.client())
    # When upserting one document's chunks
    index.upsert(MODEL, many_records(20))
    # Then one bulk request waited for the refresh (no forced refresh), and the chunks are searchable at once
    (bulk,) = double.requests_to("_bulk")
    assert bulk.params.get("refresh") == "wait_for" and double.requests_to("_refresh") == []
    assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 20


@pytest.mark.slow
def test_a_backfill_writes_without_refreshing_and_refreshes_once_when_done(double):
    # Given an adapter for a bulk backfill
    index = OpenSearchIndex(double.client(), refresh="false", bulk_chunk_size=100)
    # When upserting many records, and deleting some
    for start in range(0, 1000, 250):
        index.upsert(MODEL, many_records(1000)[start : start + 250])
    index.delete(MODEL, "acme", "handbook", chunk_ids=["c-0000"])
    # Then no write asked for a refresh, and nothing is searchable yet
    writes = double.requests_to("_bulk") + double.requests_to("_delete_by_query")
    assert writes and all("refresh" not in request.params for request in writes)
    assert double.requests_to("_refresh") == []
    assert index.chunk_ids(MODEL, "acme", "handbook") == set()
    # And after the one refresh at the end everything is
    index.refresh(MODEL)
    assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 1000


def test_the_vector_is_searchable_but_never_stored_in_source(double):
    # Given a chunk indexed through the adapter
    client = double.client()
    index = OpenSearchIndex(client)
    index.upsert(MODEL, [record("c-1", (0.0, 1.0, 0.0, 0.0))])
    # When anyone reads the full _source / Then the vector is not there, and k-NN still finds the chunk by it
    (hit,) = client.search(index=ALIAS, body={"query": {"match_all": {}}, "_source": True})["hits"]["hits"]
    assert "vector" not in hit["_source"]
    assert ids_of(index.knn_search(MODEL, "acme", ["handbook"], [0.0, 1.0, 0.0, 0.0], 1)) == ["c-1"]


def ids_of(hits) -> list[str]:
    return [hit.chunk_id for hit in hits]


def test_the_index_design_settings_are_read_from_the_environment():
    # Given every design variable set
    settings = load_settings(
        {
            "KINDEX_OPENSEARCH_SHARDS": "12",
            "KINDEX_OPENSEARCH_REPLICAS": "0",
            "KINDEX_OPENSEARCH_ROUTING_SHARDS": "0",
            "KINDEX_OPENSEARCH_ROUTING_PARTITION_SIZE": "4",
            "KINDEX_OPENSEARCH_HNSW_M": "24",
            "KINDEX_OPENSEARCH_EF_CONSTRUCTION": "256",
            "KINDEX_OPENSEARCH_EF_SEARCH": "200",
            "KINDEX_OPENSEARCH_COMPRESSION": "fp16",
            "KINDEX_OPENSEARCH_REFRESH_INTERVAL": "30s",
            "KINDEX_OPENSEARCH_REFRESH": "false",
        }
    )
    # Then each reaches its field; unset, the documented defaults hold
    assert (
        settings.opensearch_shards,
        settings.opensearch_replicas,
        settings.opensearch_routing_partition_size,
        settings.opensearch_hnsw_m,
        settings.opensearch_ef_construction,
        settings.opensearch_ef_search,
        settings.opensearch_compression,
        settings.opensearch_refresh_interval,
        settings.opensearch_refresh,
    ) == (12, 0, 4, 24, 256, 200, "fp16", "30s", "false")
    defaults = load_settings({})
    assert (
        defaults.opensearch_shards,
        defaults.opensearch_replicas,
        defaults.opensearch_compression,
        defaults.opensearch_refresh,
    ) == (1, 1, "none", "wait_for")


@pytest.mark.parametrize(
    "name, value",
    [
        ("KINDEX_OPENSEARCH_SHARDS", "0"),
        ("KINDEX_OPENSEARCH_REPLICAS", "-1"),
        ("KINDEX_OPENSEARCH_COMPRESSION", "8x"),
        ("KINDEX_OPENSEARCH_REFRESH_INTERVAL", "-1"),
        ("KINDEX_OPENSEARCH_REFRESH", "true"),
        ("KINDEX_OPENSEARCH_HNSW_M", "1"),
    ],
)
def test_a_bad_index_design_setting_stops_the_cold_start(name, value):
    with pytest.raises(SettingsError):
        load_settings({name: value})


def test_an_unknown_engine_setting_stops_the_cold_start():
    # Given a typo in KINDEX_OPENSEARCH_ENGINE / When loading the settings / Then it is a settings error
    with pytest.raises(SettingsError, match="opensearch_engine"):
        load_settings({"KINDEX_OPENSEARCH_ENGINE": "nmslib"})


def test_a_user_in_the_endpoint_url_means_basic_auth_and_never_sigv4(monkeypatch):
    # Given an endpoint with a percent-encoded user and password, and no AWS credentials at all
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    endpoint = "https://kindex%40ops:p%3Ass@search.example.org:9243"
    # When building the client options and the client
    options = build_client_options(endpoint)
    client = opensearch_client(endpoint)
    # Then the host has no credentials in it, and every request carries basic auth, not a signature
    assert options["hosts"] == [{"host": "search.example.org", "port": 9243}] and options["use_ssl"]
    assert options["http_auth"] == ("kindex@ops", "p:ss")
    (connection,) = client.transport.connection_pool.connections
    assert connection.headers["authorization"] == "Basic a2luZGV4QG9wczpwOnNz"  # base64("kindex@ops:p:ss")
    opensearch_client.cache_clear()


def test_a_local_cluster_without_sigv4_gets_no_authentication():
    # Given the test node's plain HTTP URL
    client = opensearch_client("http://127.0.0.1:9200", sigv4=False)
    # Then requests go over HTTP to that port, unauthenticated
    (connection,) = client.transport.connection_pool.connections
    assert connection.host == "http://127.0.0.1:9200" and "authorization" not in connection.headers
    assert "http_auth" not in build_client_options("http://127.0.0.1:9200")
    opensearch_client.cache_clear()


@pytest.mark.parametrize("endpoint", ["", "ftp://host", "http://", "https://host:99999", "http://host:port"])
def test_unusable_endpoints_are_refused(endpoint):
    with pytest.raises(ValueError):
        build_client_options(endpoint)


def test_knn_query_uses_an_efficient_filter_on_tenant_collections_and_filters():
    # When building a k-NN query with filters
    body = build_knn_query("acme", ["handbook", "wiki"], [3.0, 0.0, 4.0, 0.0], 7, FILTERS)
    # Then the filter sits inside the knn clause (applied before the k nearest are chosen), size is k
    knn = body["query"]["knn"]["vector"]
    assert body["size"] == 7 and knn["k"] == 7
    assert knn["vector"] == pytest.approx([0.6, 0.0, 0.8, 0.0])  # normalised: inner product == cosine
    assert knn["filter"] == {
        "bool": {
            "filter": [
                {"term": {"tenant": "acme"}},
                {"terms": {"collection": ["handbook", "wiki"]}},
                {"terms": {"document_id": ["d-1", "d-2"]}},
                {"term": {"language": "en"}},
                {"term": {"mimetype": "application/pdf"}},
                NO_ACCESS_LIST,
            ]
        }
    }
    # And only ids come back
    assert body["_source"] == ["chunk_id", "document_id", "collection"]


def test_knn_query_carries_the_search_breadth_and_never_below_k():
    # When building a k-NN query with an ef_search / Then it is in the query itself (lucene ignores the index's),
    # raised to k when smaller; without one, no method_parameters at all
    assert build_knn_query("acme", ["h"], [1.0], 7, ef_search=100)["query"]["knn"]["vector"]["method_parameters"] == {
        "ef_search": 100
    }
    assert build_knn_query("acme", ["h"], [1.0], 50, ef_search=10)["query"]["knn"]["vector"]["method_parameters"] == {
        "ef_search": 50
    }
    assert "method_parameters" not in build_knn_query("acme", ["h"], [1.0], 7)["query"]["knn"]["vector"]


def test_the_index_sends_its_ef_search_with_every_knn_query(double):
    # Given an index configured with ef_search 64 holding one chunk
    index = OpenSearchIndex(double.client(), index_prefix="kx", ef_search=64)
    index.upsert("m", [record("c-1")])
    # When searching / Then the k-NN clause asks for that breadth
    index.knn_search("m", "acme", ["handbook"], [0.1] * 4, 3)
    (search,) = double.requests_to("_search")
    assert search.body["query"]["knn"]["vector"]["method_parameters"] == {"ef_search": 64}


def test_the_designs_ef_search_goes_in_every_knn_query_and_never_below_k(double):
    # When building queries with an ef_search / Then it is the query's method parameter, at least k
    assert "method_parameters" not in build_knn_query("acme", ["h"], [1.0, 0.0], 5)["query"]["knn"]["vector"]
    knn = build_knn_query("acme", ["h"], [1.0, 0.0], 5, ef_search=100)["query"]["knn"]["vector"]
    assert knn["method_parameters"] == {"ef_search": 100}
    knn = build_knn_query("acme", ["h"], [1.0, 0.0], 500, ef_search=100)["query"]["knn"]["vector"]
    assert knn["method_parameters"] == {"ef_search": 500}
    # And the adapter sends its design's value
    index = OpenSearchIndex(double.client(), ef_search=321)
    index.upsert(MODEL, [record("c-1")])
    index.knn_search(MODEL, "acme", ["handbook"], [1, 0, 0, 0], 3)
    (search,) = double.requests_to("_search")
    assert search.body["query"]["knn"]["vector"]["method_parameters"] == {"ef_search": 321}
    assert double.spec_violations == []


def test_compression_of_http_bodies_only_for_https_endpoints():
    assert build_client_options("https://search-x.eu-west-1.es.amazonaws.com")["http_compress"] is True
    assert build_client_options("http://127.0.0.1:9200")["http_compress"] is False


def test_keyword_query_matches_text_within_the_same_filters():
    # When building a keyword query
    body = build_keyword_query("acme", ["handbook"], 'budget "AND" (review)', 5, SearchFilters(language="de"))
    # Then the raw text goes into a match query (no query-string syntax) and the filters are terms
    assert body["size"] == 5
    assert body["query"]["bool"]["must"] == [{"match": {"text": {"query": 'budget "AND" (review)'}}}]
    assert body["query"]["bool"]["filter"] == [
        {"term": {"tenant": "acme"}},
        {"terms": {"collection": ["handbook"]}},
        {"term": {"language": "de"}},
        NO_ACCESS_LIST,
    ]
    assert body["_source"] == ["chunk_id", "document_id", "collection"]


def test_bulk_actions_route_by_tenant_normalise_vectors_and_keep_the_last_write():
    # Given a batch where chunk c-1 appears twice
    records = [record("c-1", text="old"), record("c-2"), record("c-1", vector=(0.0, 2.0, 0.0, 0.0), text="new")]
    # When building bulk actions
    actions = build_bulk_actions(ALIAS, records)
    # Then there is one index action per chunk, routed by tenant, keyed by tenant/collection/chunk
    assert [a["_id"] for a in actions] == [
        document_id("acme", "handbook", "c-2"),
        document_id("acme", "handbook", "c-1"),
    ]
    newest = actions[1]
    assert newest["_op_type"] == "index" and newest["_routing"] == "acme"
    assert "_index" not in newest  # the request names the index (`<alias>/_bulk`), never an action
    assert newest["_source"]["vector"] == [0.0, 1.0, 0.0, 0.0]
    assert newest["_source"]["text"] == "new"  # sent for indexing; the mapping keeps it out of _source
    assert newest["_source"]["chunk_id"] == "c-1" and newest["_source"]["tenant"] == "acme"


@pytest.mark.parametrize(
    "kwargs, extra",
    [
        ({}, []),
        ({"document_ids": ["d-1"]}, [{"terms": {"document_id": ["d-1"]}}]),
        ({"chunk_ids": ["c-1", "c-2"]}, [{"terms": {"chunk_id": ["c-1", "c-2"]}}]),
    ],
)
def test_delete_query_is_scoped_to_tenant_and_collection(kwargs, extra):
    # When building a delete query
    body = build_delete_query("acme", "handbook", **kwargs)
    # Then it always filters by tenant and collection, plus the ids given
    assert body == {
        "query": {"bool": {"filter": [{"term": {"tenant": "acme"}}, {"term": {"collection": "handbook"}}, *extra]}}
    }


def test_chunk_ids_query_pages_with_search_after_on_the_chunk_id():
    # When building the first and a later page
    first = build_chunk_ids_query("acme", "handbook", page_size=100)
    later = build_chunk_ids_query("acme", "handbook", page_size=100, search_after=["c-099"])
    # Then pages are sorted by chunk id and continue after the last one seen
    assert first["sort"] == ["chunk_id"] and "search_after" not in first and first["size"] == 100
    assert later["search_after"] == ["c-099"]
    assert later["query"]["bool"]["filter"][0] == {"term": {"tenant": "acme"}}


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, template, body",
    [
        ("PUT", "/{index}", build_index_body(384, alias=ALIAS)),
        ("PUT", "/{index}", build_index_body(384, alias=ALIAS, design=IndexDesign(engine="lucene"))),
        ("PUT", "/{index}", build_index_body(384, alias=ALIAS, design=IndexDesign(compression="fp16"))),
        (
            "PUT",
            "/{index}",
            build_index_body(
                384, alias=ALIAS, design=IndexDesign(number_of_shards=6, routing_partition_size=3, compression="32x")
            ),
        ),
        (
            "PUT",
            "/{index}",
            build_index_body(
                384,
                alias=ALIAS,
                design=IndexDesign(number_of_shards=3, number_of_routing_shards=48, m=32, ef_construction=256),
            ),
        ),
        ("POST", "/{index}/_search", build_knn_query("acme", ["handbook"], [0.1] * 4, 3, FILTERS)),
        ("POST", "/{index}/_search", build_knn_query("acme", ["handbook"], [0.1] * 4, 3, FILTERS, ef_search=100)),
        ("POST", "/{index}/_search", build_keyword_query("acme", ["handbook"], "q", 3, FILTERS)),
        ("POST", "/{index}/_search", build_knn_query("acme", ["handbook"], [0.1] * 4, 3, EVERY_FILTER, ef_search=100)),
        ("POST", "/{index}/_search", build_keyword_query("acme", ["handbook"], "q", 3, EVERY_FILTER)),
        ("PUT", "/{index}/_mapping", build_mapping_update()),
        ("POST", "/{index}/_search", build_chunk_ids_query("acme", "handbook", search_after=["x"])),
        (
            "POST",
            "/{index}/_delete_by_query",
            build_delete_query("acme", "handbook", chunk_ids=["c"], document_ids=["d"]),
        ),
    ],
)
def test_every_request_body_is_valid_against_the_opensearch_api_spec(method, template, body):
    # Given a body one of the builders produced
    # When validated against the OpenSearch 2.19 REST API spec
    # Then the spec accepts it
    assert spec_checker().body_errors(method, template, body) == []


def test_bulk_ndjson_is_valid_against_the_opensearch_api_spec():
    # Given the NDJSON lines opensearch-py makes from our actions
    lines = []
    for action in build_bulk_actions(ALIAS, [record("c-1"), record("c-2", tenant="globex")]):
        meta, source = expand_action(action)
        lines += [meta, source]
    # Then the spec accepts every action line, and each carries the tenant routing
    parsed = [json.loads(line) if isinstance(line, str) else line for line in lines]
    assert spec_checker().body_errors("POST", "/_bulk", parsed) == []
    assert [parsed[0]["index"]["routing"], parsed[2]["index"]["routing"]] == ["acme", "globex"]


def test_both_legs_share_one_filter_with_the_attribute_and_access_clauses():
    # When both legs are built for one query with an attribute filter and principals
    knn = build_knn_query("acme", ["handbook"], [1.0, 0.0], 5, EVERY_FILTER)["query"]["knn"]["vector"]["filter"]
    keyword = build_keyword_query("acme", ["handbook"], "q", 5, EVERY_FILTER)["query"]["bool"]["filter"]
    # Then the k-NN leg's efficient filter is exactly the keyword leg's bool filter: tenant, collections,
    # language, then the access clause (1,000 groups as one terms clause each way) and the attribute clause
    assert knn == {"bool": {"filter": keyword}}
    assert keyword[:3] == [
        {"term": {"tenant": "acme"}},
        {"terms": {"collection": ["handbook"]}},
        {"term": {"language": "en"}},
    ]
    access, attributes = keyword[3:]
    assert access["bool"]["filter"] == [{"term": {"access_set": True}}]
    assert {"terms": {"access_groups": [f"g{i}" for i in range(1000)]}} in access["bool"]["should"]
    assert {"terms": {"access_deny_groups": [f"g{i}" for i in range(1000)]}} in access["bool"]["must_not"]
    assert "should" in attributes["bool"] and len(attributes["bool"]["should"]) == 3


def test_new_indices_map_the_filter_fields_and_every_chunk_writes_them_all():
    # When an index body and the actions of a chunk with attributes and of one without are built
    properties = build_index_body(4, alias=ALIAS)["mappings"]["properties"]
    listed = IndexRecord(
        tenant="acme",
        collection="h",
        document_id="d",
        chunk_id="c1",
        vector=(1.0, 0.0),
        text="t",
        attributes={"year": 2020, "tags": ["x"]},
        access=Access(users=("alice",)),
    )
    bare = IndexRecord(tenant="acme", collection="h", document_id="d", chunk_id="c2", vector=(1.0, 0.0), text="t")
    first, second = (action["_source"] for action in build_bulk_actions(ALIAS, [listed, bare]))
    # Then the mapping holds the ten filter fields, and both chunks carry every one of them (a rewrite clears what
    # an earlier version set), the second as "no attributes, no access list"
    assert {name: properties[name] for name in mapping_properties()} == mapping_properties()
    assert len(mapping_properties()) == 10 and build_mapping_update() == {"properties": mapping_properties()}
    assert set(mapping_properties()) <= set(first) and set(mapping_properties()) <= set(second)
    assert first["access_set"] is True and first["access_users"] == ["alice"]
    assert sorted(first["attr_k"]) == ["tags", "year"]
    assert second["access_set"] is False and all(
        second[name] == [] for name in mapping_properties() if name != "access_set"
    )


def test_the_spec_check_rejects_a_malformed_knn_query():
    # Given a k-NN query without a vector and with a non-integer k (the spec folder's own bad example)
    bad = {"query": {"knn": {"vector": {"k": "five", "filter": {"term": {"tenant": "acme"}}}}}}
    # Then the validator reports both problems
    errors = spec_checker().body_errors("POST", "/{index}/_search", bad)
    assert any("'vector' is a required property" in e for e in errors)
    assert any("five" in e for e in errors)


# -- the adapter on the double -----------------------------------------------------------------------------------


@pytest.fixture
def double() -> OpenSearchDouble:
    return OpenSearchDouble()


def many_records(count: int, tenant: str = "acme") -> list[IndexRecord]:
    vectors = unit_vectors(count)
    return [record(f"c-{i:04d}", tuple(vectors[i]), tenant=tenant) for i in range(count)]


@pytest.mark.slow
def test_a_thousand_records_go_out_in_a_bounded_number_of_routed_bulk_requests(double):
    # Given an adapter sending at most 200 actions per bulk request
    index = OpenSearchIndex(double.client(), bulk_chunk_size=200)
    # When upserting 1,000 records
    index.upsert(MODEL, many_records(1000))
    # Then 5 bulk requests carried them, every action routed by tenant, all valid per spec
    bulks = double.requests_to("_bulk")
    assert len(bulks) == 5
    actions = [line["index"] for bulk in bulks for line in bulk.body if "index" in line]
    assert len(actions) == 1000 and {action["routing"] for action in actions} == {"acme"}
    # And none of them waited for a refresh: the index was refreshed once, after the last one
    assert all("refresh" not in bulk.params for bulk in bulks)
    assert [r.path for r in double.requests_to("_refresh")] == [f"/{ALIAS}/_refresh"]
    assert double.requests.index(double.requests_to("_refresh")[0]) > double.requests.index(bulks[-1])
    assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 1000
    assert double.spec_violations == []


def test_the_index_is_created_once_behind_its_alias(double):
    # Given an adapter
    index = OpenSearchIndex(double.client(), number_of_shards=3, number_of_replicas=0)
    # When upserting several batches
    for batch in range(3):
        index.upsert(MODEL, [record(f"c-{batch}")])
    # Then one index was created, with the mapping, and the alias points to it
    creates = [r for r in double.requests if r.method == "PUT"]
    assert [r.path for r in creates] == [f"/{ALIAS}-v1"]
    assert double.aliases == {ALIAS: f"{ALIAS}-v1"}
    assert creates[0].body["settings"]["index"]["number_of_shards"] == 3


def test_every_search_and_delete_is_routed_by_tenant(double):
    # Given data under one tenant
    index = OpenSearchIndex(double.client())
    index.upsert(MODEL, many_records(5))
    # When searching, listing and deleting
    index.knn_search(MODEL, "acme", ["handbook"], [1, 0, 0, 0], 3)
    index.keyword_search(MODEL, "acme", ["handbook"], "words", 3)
    index.chunk_ids(MODEL, "acme", "handbook")
    index.delete(MODEL, "acme", "handbook", chunk_ids=["c-0001"])
    index.delete(MODEL, "acme", "handbook")
    # Then each of those requests carried routing=tenant
    data_requests = double.requests_to("_search") + double.requests_to("_delete_by_query")
    assert len(data_requests) == 5
    assert all(request.params.get("routing") == "acme" for request in data_requests)


def test_a_tenant_id_with_commas_routes_by_its_hash_in_every_request(double):
    # Given an adapter on a 5-shard index, and a tenant whose id a routing list would split into "a" and "b"
    index = OpenSearchIndex(double.client(), number_of_shards=5)
    # When it writes, searches, lists and deletes
    index.upsert(MODEL, many_records(5, tenant="a,b"))
    found = index.knn_search(MODEL, "a,b", ["handbook"], [1, 0, 0, 0], 10)
    listed = index.chunk_ids(MODEL, "a,b", "handbook")
    index.delete(MODEL, "a,b", "handbook")
    # Then every request carried one comma-free routing value, so all of them reached the shard holding its chunks
    key = routing_key("a,b")
    assert "," not in key and key == routing_key("a,b") != routing_key("a,c")
    bulk_routings = {
        line["index"]["routing"] for bulk in double.requests_to("_bulk") for line in bulk.body if "index" in line
    }
    request_routings = {
        r.params["routing"] for r in double.requests_to("_search") + double.requests_to("_delete_by_query")
    }
    assert bulk_routings == request_routings == {key}
    assert len(found) == 5 and len(listed) == 5 and index.chunk_ids(MODEL, "a,b", "handbook") == set()
    # And ids without a comma route as themselves (the routing of existing documents does not change)
    assert routing_key("acme") == "acme" and routing_key(" spaced ") == " spaced "


def test_the_cluster_never_stores_or_returns_chunk_text(double):
    # Given a chunk indexed through the adapter
    client = double.client()
    OpenSearchIndex(client).upsert(MODEL, [record("c-1", text="bluebird merger")])
    # When anyone reads the full _source
    response = client.search(index=ALIAS, body={"query": {"match": {"text": "bluebird"}}, "_source": True})
    # Then the text was searchable but is not in the stored _source
    (hit,) = response["hits"]["hits"]
    assert hit["_source"]["chunk_id"] == "c-1" and "text" not in hit["_source"]


def test_losing_the_index_creation_race_is_fine(double):
    # Given another process that creates the index between our exists check and our create
    def create_first(method, path):
        if method == "PUT" and path == f"/{ALIAS}-v1" and ALIAS not in double.aliases:
            double._create_index(f"{ALIAS}-v1", build_index_body(4, alias=ALIAS))

    double.before_request = create_first
    index = OpenSearchIndex(double.client())
    # When upserting
    index.upsert(MODEL, [record("c-1")])
    # Then the resource_already_exists answer is ignored and the write lands
    assert index.chunk_ids(MODEL, "acme", "handbook") == {"c-1"}


@pytest.mark.slow
@pytest.mark.parametrize("failure", [503, 429, 500, "connection"])
@pytest.mark.parametrize("operation", ["upsert", "knn", "keyword", "delete", "chunk_ids"])
def test_cluster_failures_become_dependency_failed(double, failure, operation):
    # Given an index with data, and a cluster that fails the next request
    index = OpenSearchIndex(double.client())
    index.upsert(MODEL, [record("c-1")])
    double.fail_next(status=failure)
    calls = {
        "upsert": lambda: index.upsert(MODEL, [record("c-2")]),
        "knn": lambda: index.knn_search(MODEL, "acme", ["handbook"], [1, 0, 0, 0], 3),
        "keyword": lambda: index.keyword_search(MODEL, "acme", ["handbook"], "words", 3),
        "delete": lambda: index.delete(MODEL, "acme", "handbook"),
        "chunk_ids": lambda: index.chunk_ids(MODEL, "acme", "handbook"),
    }
    # When the operation runs / Then the domain error surfaces, never an opensearch-py exception
    with pytest.raises(DependencyFailed) as caught:
        calls[operation]()
    assert not isinstance(caught.value, OpenSearchException)


def test_a_rejected_index_creation_is_a_dependency_failure(double):
    # Given a cluster that answers the create with a 400 other than "already exists"
    double.before_request = lambda method, path: double.fail_next(status=400) if method == "PUT" else None
    # When upserting / Then it is DependencyFailed
    with pytest.raises(DependencyFailed):
        OpenSearchIndex(double.client()).upsert(MODEL, [record("c-1")])


@pytest.mark.slow
def test_large_deletes_are_split_into_bounded_requests(double):
    # Given 1,500 chunks
    index = OpenSearchIndex(double.client())
    index.upsert(MODEL, many_records(1500))
    # When deleting 1,450 of them by id
    index.delete(MODEL, "acme", "handbook", chunk_ids=[f"c-{i:04d}" for i in range(1450)])
    # Then the terms lists stayed bounded (2 requests of at most 1,000 ids) and exactly 50 remain
    deletes = double.requests_to("_delete_by_query")
    assert [len(r.body["query"]["bool"]["filter"][2]["terms"]["chunk_id"]) for r in deletes] == [1000, 450]
    assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 50


# -- the double itself -------------------------------------------------------------------------------------------


def test_the_double_rejects_requests_the_spec_rejects(double):
    # Given a real opensearch-py client on the double
    client = double.client()
    client.indices.create(index="probe", body=build_index_body(4))
    # When sending a k-NN query with k as a string, or an unknown query parameter
    with pytest.raises(RequestError):
        client.search(index="probe", body={"query": {"knn": {"vector": {"vector": [0, 0, 0, 1], "k": "five"}}}})
    with pytest.raises(RequestError):
        client.search(index="probe", body={"query": {"match_all": {}}}, params={"routingg": "x"})
    # Then both failed like OpenSearch would and were recorded as spec violations
    assert len(double.spec_violations) == 2
    assert "'five' is not of type 'integer'" in double.spec_violations[0]
    assert "unknown query parameter [routingg]" in double.spec_violations[1]


def test_the_double_filters_before_choosing_the_k_nearest(double):
    # Given ten documents, only the farthest of which matches the filter
    client = double.client()
    client.indices.create(index="probe", body=build_index_body(2))
    for i in range(10):
        angle = i * 0.1
        client.index(
            index="probe",
            id=str(i),
            routing="t",
            refresh=True,
            body={
                "tenant": "t",
                "chunk_id": str(i),
                "vector": [math.cos(angle), math.sin(angle)],
                "language": "de" if i == 9 else "en",
            },
        )
    # When asking for the single nearest with an efficient filter
    body = {
        "size": 1,
        "query": {"knn": {"vector": {"vector": [1.0, 0.0], "k": 1, "filter": {"term": {"language": "de"}}}}},
    }
    (hit,) = client.search(index="probe", body=body)["hits"]["hits"]
    # Then the filtered document is returned, scored 1 + dot as faiss innerproduct does
    assert hit["_id"] == "9"
    assert hit["_score"] == pytest.approx(1 + math.cos(0.9))


def test_the_double_shows_writes_only_after_a_refresh_and_routes_like_opensearch(double):
    # Given, on a one-shard index, the same _id written under two routing values and another _id, without refresh
    client = double.client()
    client.indices.create(index="probe", body=build_index_body(2))
    client.index(index="probe", id="a", routing="t1", body={"tenant": "t1", "vector": [1.0, 0.0]})
    second = client.index(index="probe", id="a", routing="t2", body={"tenant": "t2", "vector": [0.0, 1.0]})
    client.index(index="probe", id="b", routing="t1", body={"tenant": "t1", "vector": [1.0, 0.0]})
    # Then nothing is searchable until a refresh
    assert client.search(index="probe", body={"query": {"match_all": {}}})["hits"]["hits"] == []
    client.indices.refresh(index="probe")
    # And, as on a real node, _id is unique per shard (the second "a" replaced the first), and a routed search
    # sees every document of the shard its routing selects, whatever their routing (tenants need a filter)
    assert second["result"] == "updated"
    hits = client.search(index="probe", body={"query": {"match_all": {}}}, routing="t2")["hits"]["hits"]
    assert sorted((h["_id"], h["_routing"]) for h in hits) == [("a", "t2"), ("b", "t1")]


@pytest.mark.parametrize(
    "routing, shards",
    [
        ("acme", [1, 0, 7]),
        ("globex", [0, 4, 7]),
        ("t1", [2, 1, 4]),
        ("t2", [2, 3, 5]),
        ("Ünïcode-テナント", [1, 3, 3]),
        ("😀", [0, 2, 4]),
    ],
)
def test_the_double_puts_a_routing_value_on_the_shard_opensearch_does(double, routing, shards):
    # Given indices of 3, 5 and 8 shards (the expected shards are what OpenSearch 2.19.1's _search_shards said)
    client = double.client()
    for count in (3, 5, 8):
        client.indices.create(index=f"probe-{count}", body={"settings": {"number_of_shards": count}})
    # When a document is written with that routing value / Then it lands on the same shard as on a real node
    for count, expected in zip((3, 5, 8), shards):
        client.index(index=f"probe-{count}", id="x", routing=routing, body={"n": 1})
        (doc,) = double.indices[f"probe-{count}"].live.values()
        assert doc.shard == expected


def test_the_double_refuses_a_routing_partition_opensearch_would_refuse(double):
    # Given a partitioned index without required routing, and one with a partition as large as the index
    client = double.client()
    bodies = [
        {"settings": {"number_of_shards": 4, "routing_partition_size": 2}},
        {
            "settings": {"number_of_shards": 2, "routing_partition_size": 2},
            "mappings": {"_routing": {"required": True}},
        },
    ]
    # When creating them / Then both fail like OpenSearch
    for number, body in enumerate(bodies):
        with pytest.raises(RequestError):
            client.indices.create(index=f"probe-{number}", body=body)
