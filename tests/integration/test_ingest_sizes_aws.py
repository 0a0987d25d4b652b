"""File sizes on the AWS backend under moto: an object over the file limit fails its own document without ever
being downloaded, the rest of its SQS batch indexes, and existence checks are HEADs, not GETs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kindex.domain.keys import blob_key
from kindex.domain.models import CollectionInput
from tests.support.aws import BUCKET
from tests.support.aws_deployment import AwsStack, aws_stack

pytestmark = pytest.mark.integration

LIMIT = 2000
TEXT = "\n\n".join(f"Paragraph {i} is about subject {i} and has enough words to be a chunk." for i in range(6))


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    with aws_stack(monkeypatch, {"KINDEX_MAX_FILE_BYTES": str(LIMIT)}) as running:
        running.services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=200))
        yield running


@pytest.fixture
def s3_calls(stack) -> list[tuple[str, str]]:
    """(operation, key) of every S3 object request the ingest side makes from now on."""
    calls: list[tuple[str, str]] = []
    events = stack.services.adapters.blobs.client.meta.events
    for operation in ("GetObject", "HeadObject"):
        events.register(
            f"before-parameter-build.s3.{operation}",
            lambda params, _op=operation, **_: calls.append((_op, params["Key"])),
        )
    return calls


def test_object_over_the_limit_fails_its_document_without_a_get_and_spares_the_batch(stack, s3_calls):
    # Given one object over the file limit and two within it, notified in the same SQS batch
    big = blob_key("t", "c", "big", "big.txt")
    small = [blob_key("t", "c", f"d{i}", "notes.txt") for i in range(2)]
    stack.s3.put_object(Bucket=BUCKET, Key=big, Body=b"x" * (LIMIT + 1))
    for key in small:
        stack.s3.put_object(Bucket=BUCKET, Key=key, Body=TEXT.encode())
    messages = stack.receive()
    assert len(messages) == 3
    # When the ingest function handles the batch
    failed = stack.handle(messages)
    # Then no message failed (nothing is retried or dead-lettered)
    assert failed == set()
    # And the big document failed with LimitExceeded, read only through HEADs (the event's size, then confirmed)
    document = stack.services.adapters.metadata.get_document("t", "c", "big")
    assert document.status.value == "failed"
    assert document.failure_reason == f"LimitExceeded: File is {LIMIT + 1} bytes; the limit is {LIMIT} bytes"
    assert ("GetObject", big) not in s3_calls and ("HeadObject", big) in s3_calls
    # And the others indexed, each downloaded once (their event sizes were within the limit, so no HEAD first);
    # their one HEAD is the existence check before a dropped-in file becomes a document
    for number, key in enumerate(small):
        assert stack.services.adapters.metadata.get_document("t", "c", f"d{number}").status.value == "indexed"
        assert s3_calls.count(("GetObject", key)) == 1 and s3_calls.count(("HeadObject", key)) == 1


def test_stale_event_of_an_oversized_version_does_not_fail_the_current_object(stack):
    # Given a document uploaded too big, then replaced by a file that fits, both events still queued
    key = blob_key("t", "c", "d", "notes.txt")
    stack.s3.put_object(Bucket=BUCKET, Key=key, Body=b"x" * (LIMIT * 10))
    stack.s3.put_object(Bucket=BUCKET, Key=key, Body=TEXT.encode())
    # When the events are delivered (the first says the object is over the limit)
    stack.drain()
    # Then the HEAD found the current object within the limit and the document is indexed from it
    document = stack.services.adapters.metadata.get_document("t", "c", "d")
    assert document.status.value == "indexed" and document.content_length == len(TEXT.encode())


def test_removal_and_staleness_checks_are_heads(stack, s3_calls):
    # Given an indexed document whose object is written again after a removal event was sent
    key = blob_key("t", "c", "d", "notes.txt")
    stack.s3.put_object(Bucket=BUCKET, Key=key, Body=TEXT.encode())
    stack.drain()
    s3_calls.clear()
    # When the removal event arrives while the object exists
    stack.services.ingest.object_removed(key)
    # Then the document stays, and the check was one HEAD, no download
    assert stack.services.adapters.metadata.get_document("t", "c", "d").status.value == "indexed"
    assert s3_calls == [("HeadObject", key)]
