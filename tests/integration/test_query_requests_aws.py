"""How many DynamoDB requests a query makes on the AWS backend (moto): its collection records, then its candidates'
document records and the chunk texts of its results, each in batches (issue 24.10: a read per candidate document
made tens of sequential calls). Counted from the requests botocore sends, by operation and by item kind."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import pytest

from kindex.adapters.aws.dynamodb_metadata import collections_pk
from kindex.domain.models import CollectionInput, DocumentInput
from kindex.domain.query import QueryRequest
from tests.support.aws_deployment import AwsStack, aws_stack

pytestmark = pytest.mark.integration

COLLECTIONS = ("a", "b")
# 128 of tenant t's documents match: more than one batch of 100 records (moto's transactions copy the whole table,
# so the setup's cost grows with the square of the documents: 240 took 95 s).
PER_COLLECTION = 64


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    """Tenant t with two public collections of 64 one-chunk documents each, all about walruses; tenant u with some
    of the same ids (its records must never be read by t's query)."""
    with aws_stack(monkeypatch) as stack:
        for tenant, documents in (("t", PER_COLLECTION), ("u", 10)):
            for collection in COLLECTIONS:
                stack.services.catalog.put_collection(tenant, collection, CollectionInput(allow_guests=True))
                for i in range(documents):
                    stack.services.catalog.put_document(
                        tenant,
                        collection,
                        f"d{i:03d}",
                        DocumentInput(content=f"Walrus {i} of herd {collection} hauls out on the ice floe."),
                    )
        stack.drain()
        yield stack


def batch_keys(requests: list[dict]) -> list[list[str]]:
    """The pks asked for by each BatchGetItem."""
    return [
        [key["pk"]["S"] for entry in r["RequestItems"].values() for key in entry["Keys"]]
        for r in requests
        if r["operation"] == "BatchGetItem"
    ]


def test_a_query_reads_its_records_in_batches(stack):
    for k in (5, 100):
        check_requests_of_one_query(stack, k)


def check_requests_of_one_query(stack: AwsStack, k: int) -> None:
    request = QueryRequest(query="walrus herd ice floe", k=k, mode="hybrid")
    response = None

    def query():
        nonlocal response
        response = stack.services.query.query("t", list(COLLECTIONS), request, multi=True)

    # When tenant t queries both collections for k results
    sent = stack.dynamodb_requests(query)
    # Then k results came back
    assert len(response.results) == k
    operations = Counter(r["operation"] for r in sent)
    # And each collection record was read once, and no other single item
    gets = [r for r in sent if r["operation"] == "GetItem"]
    assert sorted(r["Key"]["sk"]["S"] for r in gets) == sorted(COLLECTIONS)
    assert {r["Key"]["pk"]["S"] for r in gets} == {collections_pk("t")}
    # And the candidates' document records came in batches of up to 100, each document asked for once, all t's
    batches = batch_keys(sent)
    document_batches = [pks for pks in batches if all(pk.count("#") == 3 for pk in pks)]  # T#t#C#a, not ...#D#d
    documents = [pk for pks in document_batches for pk in pks]
    assert len(documents) > k and len(document_batches) == math.ceil(len(documents) / 100)
    assert all(pk.startswith("T#t#C#") for pk in documents)
    # And the results' chunk texts came in batches of up to 100 (one, with k <= 100)
    chunk_batches = [pks for pks in batches if pks not in document_batches]
    assert len(chunk_batches) == math.ceil(k / 100)
    # And the query log is one write, the usage meter one atomic add (the day's queries and embedding tokens);
    # nothing else was sent
    assert operations["PutItem"] == 1 and operations["UpdateItem"] == 1
    assert sum(operations.values()) == len(COLLECTIONS) + len(document_batches) + len(chunk_batches) + 1 + 1
    print(
        f"k={k}: {sum(operations.values())} DynamoDB requests ({dict(operations)}) for {len(documents)} "
        "candidate documents"
    )
