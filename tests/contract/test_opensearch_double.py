"""The OpenSearch double answers like a real node: the same requests go to both and their answers are compared.

Runs only when a real node is up (`make opensearch`; see tests/support/opensearch_node.py). What is compared is
what the adapter relies on and the double imitates: routing (shard placement, `_id` unique per shard, routed
searches seeing whole shards, routing partitions), the adapter's text analysis, and k-NN scores with a filter.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from opensearchpy import OpenSearch

from kindex.adapters.aws.opensearch_design import IndexDesign
from kindex.adapters.aws.opensearch_index import opensearch_client
from kindex.adapters.aws.opensearch_requests import build_index_body
from tests.support.opensearch_double import OpenSearchDouble
from tests.support.opensearch_node import ENGINE, OpenSearchNode

pytestmark = pytest.mark.contract

# Routing lists too ("a,b", ","...): a document takes one routing value, a request a comma-separated list.
ROUTINGS = [
    "acme",
    "globex",
    "t1",
    "t2",
    "Ünïcode-テナント",
    "😀",
    "x" * 40,
    " spaced ",
    "a,b",
    ",",
    "acme,,globex",
    ",acme",
    "acme,",
]


@pytest.fixture
def both(opensearch_node: OpenSearchNode) -> Iterator[tuple[str, dict[str, OpenSearch]]]:
    """(index prefix, {"node": client, "double": client})."""
    prefix = opensearch_node.new_prefix()
    double = OpenSearchDouble()
    yield prefix, {"node": opensearch_client(opensearch_node.url, sigv4=False), "double": double.client()}
    opensearch_node.delete_indices(prefix)
    assert double.spec_violations == []


def on_both(clients: dict[str, OpenSearch], call) -> dict[str, object]:
    return {name: call(client) for name, client in clients.items()}


def routed_ids(client: OpenSearch, index: str, routing: str) -> list[str]:
    body = {"size": 100, "query": {"match_all": {}}}
    return sorted(hit["_id"] for hit in client.search(index=index, body=body, routing=routing)["hits"]["hits"])


@pytest.mark.parametrize(
    "settings, mappings",
    [
        ({"number_of_shards": 1}, {}),
        ({"number_of_shards": 3}, {}),
        ({"number_of_shards": 4, "number_of_routing_shards": 16}, {}),
        ({"number_of_shards": 6, "routing_partition_size": 3}, {"_routing": {"required": True}}),
    ],
)
def test_routed_searches_see_the_same_documents(both, settings, mappings):
    # Given the same index on the node and the double, and documents under several routing values, one _id
    # reused under every routing value
    prefix, clients = both
    index = f"{prefix}-routing"
    body = {"settings": {"number_of_replicas": 0, **settings}, "mappings": mappings}
    on_both(clients, lambda c: c.indices.create(index=index, body=body))
    for client in clients.values():
        for number, routing in enumerate(ROUTINGS):
            for doc_id in (f"doc-{number}", f"other-{number}", "shared"):
                client.index(index=index, id=doc_id, routing=routing, body={"routing": routing})
        client.indices.refresh(index=index)
    # When searching with each routing value / Then both see exactly the same documents
    for routing in ROUTINGS:
        answers = on_both(clients, lambda c, routing=routing: routed_ids(c, index, routing))
        assert answers["double"] == answers["node"], routing
    everything = {"size": 1000, "query": {"match_all": {}}}
    totals = on_both(clients, lambda c: len(c.search(index=index, body=everything)["hits"]["hits"]))
    assert totals["double"] == totals["node"]


@pytest.mark.parametrize("query", ["budget's", "text:budget", "snake_case", "Budget", "e-mail", "3.14"])
def test_keyword_matches_agree_under_the_adapter_analyzer(both, query):
    # Given the adapter's mapping and texts with punctuation inside words
    prefix, clients = both
    index = f"{prefix}-words"
    texts = {
        "1": "The budget review",
        "2": "snake case names",
        "3": "send an e-mail",
        "4": "pi is 3.14",
        "5": "text: unrelated words",
        "6": "nothing here",
    }
    on_both(
        clients,
        lambda c: c.indices.create(
            index=index, body=build_index_body(2, design=IndexDesign(engine=ENGINE, number_of_replicas=0))
        ),
    )
    for client in clients.values():
        for doc_id, text in texts.items():
            client.index(index=index, id=doc_id, routing="t", body={"text": text, "vector": [1.0, 0.0]})
        client.indices.refresh(index=index)
    # When matching the query / Then the same documents match
    body = {"size": 10, "query": {"match": {"text": {"query": query}}}}
    answers = on_both(clients, lambda c: sorted(h["_id"] for h in c.search(index=index, body=body)["hits"]["hits"]))
    assert answers["double"] == answers["node"]


def test_filtered_knn_scores_agree(both):
    # Given normalised vectors on both
    prefix, clients = both
    index = f"{prefix}-knn"
    vectors = np.random.RandomState(4).normal(size=(30, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    on_both(
        clients,
        lambda c: c.indices.create(
            index=index, body=build_index_body(8, design=IndexDesign(engine=ENGINE, number_of_replicas=0))
        ),
    )
    for client in clients.values():
        for number, vector in enumerate(vectors):
            client.index(
                index=index,
                id=str(number),
                routing="t",
                body={"vector": vector.tolist(), "language": "de" if number % 3 else "en"},
            )
        client.indices.refresh(index=index)
    # When searching with an efficient filter
    body = {
        "size": 5,
        "query": {"knn": {"vector": {"vector": vectors[0].tolist(), "k": 5, "filter": {"term": {"language": "de"}}}}},
    }
    answers = on_both(
        clients, lambda c: [(h["_id"], h["_score"]) for h in c.search(index=index, body=body)["hits"]["hits"]]
    )
    # Then the same documents come back in the same order, with the same scores
    assert [i for i, _ in answers["double"]] == [i for i, _ in answers["node"]]
    assert [s for _, s in answers["double"]] == pytest.approx([s for _, s in answers["node"]], abs=1e-5)
