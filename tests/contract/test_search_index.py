"""The SearchIndex contract (tests/contract/mixins/search_index.py) run against the embedded adapter and the
OpenSearch adapter: on the in-process OpenSearch double (faiss mapping; every request validated against the
OpenSearch API spec), and on a real OpenSearch node with the k-NN plugin (lucene engine) when one is up -
`make opensearch` starts one, and without it those cases are skipped with the reason (see
tests/support/opensearch_node.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from kindex.adapters.aws.opensearch_index import OpenSearchIndex, opensearch_client
from kindex.adapters.aws.opensearch_requests import index_alias
from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.app.cpu_slots import CpuSlots, holding
from kindex.compose import container
from kindex.domain.errors import InvalidInput
from tests.contract.mixins.search_filters import SearchFiltersContract
from tests.contract.mixins.search_index import DIMS, MODEL, SearchIndexContract, corpus, ids, record, unit
from tests.support.aws import fake_aws_env
from tests.support.opensearch_double import OpenSearchDouble
from tests.support.opensearch_node import ENGINE as NODE_ENGINE

pytestmark = pytest.mark.contract


class TestLocalSearchIndex(SearchIndexContract, SearchFiltersContract):
    @pytest.fixture
    def index(self, tmp_path) -> Iterator[LocalSearchIndex]:
        adapter = LocalSearchIndex(tmp_path / "search")
        yield adapter
        adapter.close()

    def test_persists_across_reopen(self, tmp_path):
        # Given a local index with data, closed
        first = LocalSearchIndex(tmp_path / "search")
        first.upsert(MODEL, corpus(5) + [record("kw", unit(40), text="persistent lighthouse")])
        first.delete(MODEL, "acme", "handbook", chunk_ids=["chunk-02"])
        first.close()
        # When it is reopened from the same folder
        second = LocalSearchIndex(tmp_path / "search")
        # Then vectors, keywords and deletions are all still there
        assert second.chunk_ids(MODEL, "acme", "handbook") == {"chunk-00", "chunk-01", "chunk-03", "chunk-04", "kw"}
        assert second.knn_search(MODEL, "acme", ["handbook"], unit(3).tolist(), 1)[0].chunk_id == "chunk-03"
        assert ids(second.keyword_search(MODEL, "acme", ["handbook"], "lighthouse", 5)) == ["kw"]
        second.close()

    def test_a_tenants_keyword_scores_never_depend_on_another_tenants_documents(self, index):
        def globex_ranking(index) -> list[tuple[str, float]]:
            hits = index.keyword_search(MODEL, "globex", ["handbook"], "kestrel", 5)
            return [(hit.chunk_id, hit.score) for hit in hits]

        # Given globex's chunks, and the same collection, document and chunk ids in acme, all holding one word
        index.upsert(
            MODEL,
            [
                record(f"chunk-{i}", unit(i), tenant="globex", document_id=f"doc-{i}", text=f"kestrel {'nest ' * i}")
                for i in range(3)
            ],
        )
        before = globex_ranking(index)
        # When acme writes many chunks with the word, then deletes its collection
        index.upsert(
            MODEL,
            [record(f"chunk-{i}", unit(i), tenant="acme", document_id=f"doc-{i}", text="kestrel") for i in range(20)],
        )
        during = globex_ranking(index)
        index.delete(MODEL, "acme", "handbook")
        after = globex_ranking(index)
        # Then globex's ranking and scores are exactly the same throughout (in the embedded index BM25's statistics
        # are per tenant; on OpenSearch they are per shard, see docs/scale.md)
        assert [chunk for chunk, _ in before] == ["chunk-0", "chunk-1", "chunk-2"]
        assert before == during == after


class TestOpenSearchIndexOnTheDouble(SearchIndexContract, SearchFiltersContract):
    @pytest.fixture
    def index(self) -> Iterator[OpenSearchIndex]:
        double = OpenSearchDouble()
        yield OpenSearchIndex(double.client(), number_of_replicas=0)
        # A request the spec rejects must fail the test even if the adapter had swallowed the error.
        assert double.spec_violations == []

    def test_a_search_gives_its_cpu_slot_back_while_the_cluster_answers(self):
        # Given the adapter (its searches wait on the cluster, unlike the embedded index's) and a client that
        # records whether the calling thread held a CPU slot while the cluster answered
        double = OpenSearchDouble()
        client = double.client()
        index = OpenSearchIndex(client, number_of_replicas=0)
        index.upsert(MODEL, corpus(3))
        held_during = []
        search = client.search

        def recorded(*args, **kwargs):
            held_during.append(holding())
            return search(*args, **kwargs)

        client.search = recorded
        assert not index.computes_locally and LocalSearchIndex.computes_locally
        # When a request of `kindex serve` (which holds a slot) searches both legs
        with CpuSlots(1).held():
            assert index.knn_search(MODEL, "acme", ["handbook"], unit(1).tolist(), 2)
            index.keyword_search(MODEL, "acme", ["handbook"], "anything", 2)
            # Then the slot was free during each call to the cluster, and is held again after it
            assert holding()
        assert held_during == [False, False]

    def test_a_query_racing_the_creation_of_its_index_finds_nothing_and_is_no_dimension_error(self):
        # Given a reader and a writer (another process) on one cluster, and no index for the model yet
        double = OpenSearchDouble()
        reader = OpenSearchIndex(double.client(), number_of_replicas=0)
        writer = OpenSearchIndex(double.client(), number_of_replicas=0)
        searched = reader._search

        def search_then_the_writer_creates_the_index(*args, **kwargs):
            found = searched(*args, **kwargs)  # no index: nothing found
            writer.upsert(MODEL, corpus(2))
            return found

        reader._search = search_then_the_writer_creates_the_index
        # When the reader's query meets no index, and the index of that very dimension appears right after
        # Then the query found nothing (no 400 "dimensions the model does not use")
        assert reader.knn_search(MODEL, "acme", ["handbook"], unit(1).tolist(), 3) == []
        # While a query of another dimension is still the caller's error
        with pytest.raises(InvalidInput, match="dimensions"):
            reader.knn_search(MODEL, "acme", ["handbook"], [1.0, 0.0, 0.0], 3)


class TestOpenSearchIndexOnANode(SearchIndexContract, SearchFiltersContract):
    """The real node (the `opensearch_node` fixture skips every test here, with the reason, when none is up)."""

    @pytest.fixture
    def index(self, opensearch_node) -> Iterator[OpenSearchIndex]:
        prefix = opensearch_node.new_prefix()
        yield OpenSearchIndex(
            opensearch_client(opensearch_node.url, sigv4=False),
            index_prefix=prefix,
            engine=NODE_ENGINE,
            number_of_replicas=0,
        )
        opensearch_node.delete_indices(prefix)

    def test_on_a_multi_shard_index_deletes_leave_nothing_behind(self, opensearch_node):
        # Given the adapter on a real node with a 3-shard index, and tenants whose ids would split a routing list
        client = opensearch_client(opensearch_node.url, sigv4=False)
        prefix = opensearch_node.new_prefix()
        index = OpenSearchIndex(
            client, index_prefix=prefix, engine=NODE_ENGINE, number_of_shards=3, number_of_replicas=0
        )
        tenants = ["acme", "a,b", ",", "globex"]
        alias = index_alias(prefix, MODEL, DIMS)
        try:
            for tenant in tenants:
                index.upsert(MODEL, corpus(20, tenant=tenant, text="confidential bluebird"))
            # (and the cluster indexed the text without storing it: a full _source has none)
            stored = client.search(index=alias, body={"query": {"match": {"text": "bluebird"}}, "_source": True})
            assert stored["hits"]["total"]["value"] == 80
            assert all("text" not in hit["_source"] for hit in stored["hits"]["hits"])
            # When each tenant searches, and then deletes its collection
            for tenant in tenants:
                assert len(index.knn_search(MODEL, tenant, ["handbook"], unit(3).tolist(), 50)) == 20, tenant
                index.delete(MODEL, tenant, "handbook", document_ids=["doc-0"])
                assert len(index.chunk_ids(MODEL, tenant, "handbook")) == 13, tenant
                index.delete(MODEL, tenant, "handbook")
            # Then, asked directly and without routing, the cluster holds none of their chunks
            client.indices.refresh(index=alias)
            assert client.count(index=alias)["count"] == 0
        finally:
            opensearch_node.delete_indices(prefix)

    def test_a_routing_partition_spreads_one_tenant_over_several_shards_of_the_node(self, opensearch_node):
        # Given a 6-shard index whose tenants spread over 3 shards each, written without per-request refreshes
        client = opensearch_client(opensearch_node.url, sigv4=False)
        prefix = opensearch_node.new_prefix()
        index = OpenSearchIndex(
            client,
            index_prefix=prefix,
            engine=NODE_ENGINE,
            number_of_shards=6,
            number_of_replicas=0,
            routing_partition_size=3,
            refresh="false",
        )
        alias = index_alias(prefix, MODEL, DIMS)
        try:
            # When one tenant writes 300 chunks and another 20, and the backfill ends with one refresh
            index.upsert(MODEL, corpus(300))
            index.upsert(MODEL, corpus(20, tenant="globex"))
            index.refresh(MODEL)
            # Then the big tenant's chunks sit on three shards (the node says so), none of them stored a vector,
            # and every chunk is found and deleted through the partition
            per_shard = requests.get(
                f"{opensearch_node.url}/_cat/shards/{alias}?h=shard,docs&format=json", timeout=10
            ).json()
            assert sum(1 for shard in per_shard if int(shard["docs"] or 0) > 0) >= 3
            assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 300
            stored = client.search(index=alias, body={"size": 5, "_source": True})["hits"]["hits"]
            assert stored and all("vector" not in hit["_source"] for hit in stored)
            assert len(index.knn_search(MODEL, "acme", ["handbook"], unit(3).tolist(), 40)) == 40
            index.delete(MODEL, "acme", "handbook")
            index.refresh(MODEL)
            assert index.chunk_ids(MODEL, "acme", "handbook") == set()
            assert len(index.chunk_ids(MODEL, "globex", "handbook")) == 20
        finally:
            opensearch_node.delete_indices(prefix)

    def test_the_engine_setting_reaches_the_node_through_the_aws_wiring(self, opensearch_node, monkeypatch):
        # Given the AWS settings naming the node as the search endpoint and the lucene engine, and a model no other
        # run uses (the wiring's index prefix is the production one)
        fake_aws_env(monkeypatch)
        for name, value in {
            "KINDEX_BACKEND": "aws",
            "KINDEX_TABLE_NAME": "table",
            "KINDEX_BUCKET_NAME": "bucket",
            "KINDEX_OPENSEARCH_ENDPOINT": opensearch_node.url,
            "KINDEX_OPENSEARCH_ENGINE": "lucene",
        }.items():
            monkeypatch.setenv(name, value)
        model = f"hash:{opensearch_node.new_prefix()}"
        alias = index_alias("kindex", model, DIMS)
        container.cache_clear()
        opensearch_client.cache_clear()
        try:
            # When the wired search index writes a chunk (SigV4-signed: the node has no security plugin to check
            # it); checked first, as a faiss index would stop this node (it has no faiss library)
            assert container().adapters.search_index.engine == "lucene"
            container().adapters.search_index.upsert(model, [record("c-1", unit(1))])
            # Then the node's index maps the vector with the lucene engine, and the chunk is there
            (index,) = requests.get(f"{opensearch_node.url}/{alias}/_mapping", timeout=10).json().values()
            assert index["mappings"]["properties"]["vector"]["method"]["engine"] == "lucene"
            assert container().adapters.search_index.chunk_ids(model, "acme", "handbook") == {"c-1"}
        finally:
            container.cache_clear()
            opensearch_client.cache_clear()
            requests.delete(f"{opensearch_node.url}/{alias}-v1", timeout=30)
