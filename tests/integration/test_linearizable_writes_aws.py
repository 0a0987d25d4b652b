"""Linearizable document writes on the AWS backend under moto: DynamoDB conditional writes, S3 (versioned) and the
SQS -> ingest handler path. The content stored, chunked and indexed is that of the last write that succeeded; a
write that lost (409) leaves no object version, no chunk item and no vector."""

from __future__ import annotations

import threading

import pytest

from kindex.adapters.aws.dynamodb_chunks import chunks_pk
from kindex.domain import keys
from kindex.domain.errors import Conflict
from kindex.domain.models import CollectionInput, DocumentInput
from tests.integration.test_ingest_aws import Deployment, deploy  # noqa: F401 (the moto deployment fixture)
from tests.support.aws import BUCKET, TABLE
from tests.support.interleave import Interleave

pytestmark = pytest.mark.integration

WRITERS = 12


@pytest.fixture
def atomic_requests(monkeypatch):
    """Each AWS request decides in one step, as on AWS (a conditional put is atomic per item). moto's backends are
    plain Python objects that threads could interleave inside one request; the races under test are between
    requests, so requests are made atomic here and nothing else is serialized."""
    from moto.core.botocore_stubber import BotocoreStubber

    lock = threading.RLock()
    original = BotocoreStubber.__call__

    def atomic(self, *args, **kwargs):
        with lock:
            return original(self, *args, **kwargs)

    monkeypatch.setattr(BotocoreStubber, "__call__", atomic)


@pytest.fixture
def aws(deploy, atomic_requests) -> Deployment:  # noqa: F811
    deployment = deploy()
    for tenant in ("t", "u"):
        deployment.services.catalog.put_collection(tenant, "c", CollectionInput(chunking_max_size=200))
    return deployment


def put(d: Deployment, content: str, tenant: str = "t", **fields):
    return d.services.catalog.put_document(tenant, "c", "d", DocumentInput(content=content, **fields))[0]


def object_versions(d: Deployment, tenant: str = "t") -> list[str]:
    """Every object version and delete marker left under the document's prefix (keys, one per entry)."""
    listing = d.s3.list_object_versions(Bucket=BUCKET, Prefix=keys.document_prefix(tenant, "c", "d"))
    return sorted(v["Key"] for v in listing.get("Versions", []) + listing.get("DeleteMarkers", []))


def indexed_texts(d: Deployment, tenant: str = "t") -> list[str]:
    """The document's chunk texts, after checking the raw chunk items and the vectors are exactly those chunks."""
    chunks = d.services.adapters.chunks.list_chunks(tenant, "c", "d")
    items = d.dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": chunks_pk(tenant, "c", "d")}},
    )["Items"]
    assert {item["sk"]["S"] for item in items} == {c.chunk_id for c in chunks}
    assert d.services.adapters.search_index.chunk_ids("hash:384", tenant, "c") == {c.chunk_id for c in chunks}
    return [c.text for c in chunks]


def drain(d: Deployment) -> None:
    deliveries = d.drain(max_batches=60)
    assert all(not delivery.failed_ids for delivery in deliveries)
    assert d.dead_letters() == 0


def test_concurrent_writers_keep_the_last_successful_write(aws):
    d = aws
    put(d, "tenant u keeps this", tenant="u")
    drain(d)
    for round_ in range(3):
        # When 12 writers PUT different content to one document at the same instant
        barrier = threading.Barrier(WRITERS)
        outcomes: list = [None] * WRITERS

        def write(i, round_=round_, barrier=barrier, outcomes=outcomes):
            barrier.wait()
            try:
                outcomes[i] = put(d, f"round {round_} writer {i} text", title=f"w{i}")
            except Conflict:
                outcomes[i] = "409"

        threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        succeeded = [o for o in outcomes if o not in ("409", None)]
        assert None not in outcomes and succeeded
        assert len({o.version for o in succeeded}) == len(succeeded)  # no two successes decided the same version
        last = max(succeeded, key=lambda o: o.version)
        # And the notifications are delivered to the ingest handler
        drain(d)
        # Then the last successful write is the document, its content, its chunks and its vectors
        document, content = d.services.catalog.get_document("t", "c", "d")
        assert (document.version, document.title, document.status.value) == (last.version, last.title, "indexed")
        assert content == f"round {round_} writer {last.title[1:]} text"
        assert indexed_texts(d) == [content]
        # And S3 holds that write's object only: no other key, version or delete marker is left
        assert object_versions(d) == [last.source]
    # And the other tenant's document with the same ids is untouched
    assert d.services.catalog.get_document("u", "c", "d")[1] == "tenant u keeps this"
    assert indexed_texts(d, "u") == ["tenant u keeps this"] and len(object_versions(d, "u")) == 1


@pytest.mark.parametrize("moment", ["after_read", "before_commit"])
def test_a_losing_write_leaves_no_object_chunk_or_vector(aws, moment):
    d = aws
    put(d, "the original text")
    drain(d)
    winner = {}

    def another_write_wins():
        winner["doc"] = put(d, "the winning text", title="winner")
        drain(d)  # the loser's created event too, when its object is already there

    catalog = d.services.catalog
    catalog.documents = Interleave(catalog.documents, another_write_wins, moment)
    with pytest.raises(Conflict):
        put(d, "the losing text", title="loser")
    drain(d)
    document, content = catalog.get_document("t", "c", "d")
    assert (document.title, content, document.status.value) == ("winner", "the winning text", "indexed")
    assert indexed_texts(d) == ["the winning text"]
    assert object_versions(d) == [winner["doc"].source]
