"""Document attributes and access lists on the AWS backend under moto: stored in the DynamoDB item and read back by
both metadata stores alike, a sidecar `<key>.metadata.json` put straight into S3 (before or after its file) read by
the ingest from its own S3 event, a fields-only PUT that reaches the ingest through the SQS trigger and rewrites the
OpenSearch entries (the double) without embedding (issue 23)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from kindex.adapters.aws.sqs_trigger import SqsIngestTrigger
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_metadata import SqliteMetadataStore
from kindex.domain.filters import Access, parse_filter
from kindex.domain.keys import blob_key
from kindex.domain.models import Collection, CollectionInput, Document, DocumentInput, DocumentStatus
from kindex.domain.query import QueryRequest
from kindex.domain.types import Principals, SearchFilters
from tests.integration.test_ingest_aws import deploy  # noqa: F401 - the fixture the one below builds on
from tests.support.aws import BUCKET

pytestmark = pytest.mark.integration

ATTRIBUTES = {"region": "eü", "year": 2024, "ratio": -0.5, "final": True, "tags": ["hr", "ünï"]}
ACCESS = Access(users=("ann",), groups=("hr",), deny_users=("mallory",), deny_groups=("temp",))


@pytest.fixture
def aws(deploy):  # noqa: F811 - the imported fixture
    deployment = deploy()
    deployment.services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=200))
    return deployment


def stores(aws, tmp_path):
    return {
        "dynamodb": aws.services.adapters.metadata,
        "sqlite": SqliteMetadataStore(SqliteDatabase(tmp_path / "m.db")),
    }


def test_both_metadata_stores_keep_attributes_access_and_document_access(aws, tmp_path):
    for name, store in stores(aws, tmp_path).items():
        # Given two tenants with the same ids, and the same attribute key of different types
        for tenant, year in (("t1", 2024), ("t2", "2024")):
            store.put_collection(
                tenant, Collection(id="c", embedding_model="hash:384", document_access="required"), create=True
            )
            store.put_document(
                tenant,
                Document(
                    id="d",
                    collection="c",
                    attributes={**ATTRIBUTES, "year": year},
                    access=ACCESS,
                    fields_version=3,
                    indexed_fields_version=2,
                ),
                create=True,
            )
        # Then each reads back exactly, types kept (2024 a number in one, a string in the other)
        first, second = store.get_document("t1", "c", "d"), store.get_document("t2", "c", "d")
        assert first.attributes == ATTRIBUTES and type(first.attributes["year"]) is int, name
        assert second.attributes["year"] == "2024" and first.access == ACCESS == second.access, name
        assert (first.fields_version, first.indexed_fields_version) == (3, 2), name
        assert isinstance(first.attributes["final"], bool) and first.attributes["ratio"] == -0.5, name
        assert store.get_collection("t1", "c").document_access == "required", name
        assert store.list_documents("t2", "c", after=None, offset=0, limit=10)[0].attributes["year"] == "2024"


def test_a_sidecar_put_into_s3_before_or_after_its_file_is_applied(aws):
    d = aws
    d.receive()  # S3's test event
    key = blob_key("t", "c", "report", "report.txt")
    # Given a sidecar put before its file: it is no document
    d.s3.put_object(
        Bucket=BUCKET,
        Key=key + ".metadata.json",
        Body=b'{"metadataAttributes": {"region": "eu", "tags": {"value": {"type": "STRING_LIST", '
        b'"stringListValue": ["hr"]}}}, "access": {"groups": ["hr"]}}',
    )
    d.drain()
    assert d.document("report") is None
    # When the file comes
    d.s3.put_object(Bucket=BUCKET, Key=key, Body=b"penguin colony census for the board")
    assert all(not delivery.failed_ids for delivery in d.drain())
    # Then the document carries the sidecar's fields, and the index entries do too
    document = d.document("report")
    assert document.status is DocumentStatus.INDEXED
    assert document.attributes == {"region": "eu", "tags": ["hr"]} and document.access.groups == ("hr",)
    query = d.services.query
    d.services.catalog.put_collection("t", "c", CollectionInput(query_groups=["hr"]))
    ask = QueryRequest(query="penguin census", groups=["hr"], filters={"attributes": {"tags": {"$contains": "hr"}}})
    assert [r.document_id for r in query.query("t", ["c"], ask, multi=False).results] == ["report"]
    assert (
        query.query("t", ["c"], QueryRequest(query="penguin census", user="bob", groups=["hr-not"]), multi=True).results
        == []
    )
    # When the sidecar changes after the file was indexed, Then its S3 event applies it, embedding nothing
    with counting(d) as calls:
        d.s3.put_object(Bucket=BUCKET, Key=key + ".metadata.json", Body=b'{"access": {"users": ["ann"]}}')
        assert all(not delivery.failed_ids for delivery in d.drain())
    assert calls == []
    document = d.document("report")
    assert document.status is DocumentStatus.INDEXED and document.attributes is None
    assert document.access.users == ("ann",) and not document.fields_stale
    found = query.query("t", ["c"], QueryRequest(query="penguin census", user="ann", groups=["hr"]), multi=False)
    assert [r.document_id for r in found.results] == ["report"]
    assert query.query("t", ["c"], ask, multi=False).results == []


@contextmanager
def counting(d):
    """The texts the deployment's embedder is asked to embed (passages), while the block runs."""
    embedder = d.services.embeddings.embedder_for("hash:384")
    calls: list[int] = []
    original = embedder.embed

    def counted(texts):
        calls.append(len(texts))
        return original(texts)

    embedder.embed = counted
    try:
        yield calls
    finally:
        embedder.embed = original


def test_a_fields_only_put_reaches_the_ingest_through_sqs_and_rewrites_without_embedding(aws):
    d = aws
    d.receive()
    # Given the catalog's trigger on the ingest queue (as the API function has it), and an indexed document
    d.services.catalog.ingest_trigger = SqsIngestTrigger(d.queue_url, BUCKET, client=d.sqs)
    d.services.catalog.put_document("t", "c", "d1", DocumentInput(content="penguin colony antarctic. " * 30))
    d.drain()
    indexed = d.document("d1")
    assert indexed.status is DocumentStatus.INDEXED
    with counting(d) as calls:
        # When only its access list and attributes change
        written, _ = d.services.catalog.put_document(
            "t", "c", "d1", DocumentInput(attributes={"region": "eu"}, access={"groups": ["hr"]})
        )
        assert written.status is DocumentStatus.IN_PROGRESS
        assert all(not delivery.failed_ids for delivery in d.drain())
    # Then the document is indexed again at the same content version, with zero embedding calls
    done = d.document("d1")
    assert done.status is DocumentStatus.INDEXED and done.version == indexed.version and not done.fields_stale
    assert calls == []
    # And the OpenSearch entries still have their vectors, with the new fields: a filtered vector search finds every
    # chunk
    vector = d.services.embeddings.embed_query("hash:384", "penguin colony")
    hr = SearchFilters(attributes=parse_filter({"region": "eu"}), principals=Principals(groups=("hr",)))
    hits = d.services.adapters.search_index.knn_search("hash:384", "t", ["c"], vector, 100, hr)
    assert {h.document_id for h in hits} == {"d1"} and len(hits) == done.chunk_count
