"""Reindex tasks as queue messages: bounded, round-tripping, and refusing anything else."""

from __future__ import annotations

import json

import pytest

from kindex.domain.reindex import MAX_TASK_BYTES, ReindexTask, decode_task, is_task_body

pytestmark = pytest.mark.unit

LONGEST = "\U0001f600" * 255  # a stored id can be 255 characters of 4 bytes (12 once JSON-escaped)


@pytest.mark.parametrize(
    "task",
    [
        ReindexTask(kind="tenant", tenant="t"),
        ReindexTask(kind="collection", tenant="t", collection="c"),
        ReindexTask(
            kind="sweep",
            tenant=LONGEST,
            collection=LONGEST,
            after="\U0010ffff" * 512,
            clean=True,
            job="f" * 64,
            total=10**12,
            done=10**12,
            enqueued=10**12,
        ),
    ],
)
def test_tasks_round_trip_within_the_bound(task):
    body = task.encode()
    assert is_task_body(body) and len(body.encode("utf-8")) <= MAX_TASK_BYTES < 256 * 1024
    assert decode_task(body) == task


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        json.dumps({"Records": []}),
        json.dumps({"kindex_reindex": {"kind": "drop", "tenant": "t"}}),
        json.dumps({"kindex_reindex": {"kind": "collection", "tenant": "t"}}),  # no collection
        json.dumps({"kindex_reindex": {"kind": "tenant", "tenant": "t", "collection": "c"}}),
        json.dumps({"kindex_reindex": {"kind": "sweep", "tenant": "t", "collection": "c", "total": -1}}),
        json.dumps({"kindex_reindex": {"kind": "sweep", "tenant": "t", "collection": "c", "extra": 1}}),
        json.dumps({"kindex_reindex": {"kind": "sweep", "tenant": "a/b", "collection": "c"}}),
        json.dumps({"kindex_reindex": {"kind": "tenant", "tenant": "t"}, "more": 1}),
        json.dumps({"kindex_reindex": {"kind": "tenant", "tenant": "t" + " " * MAX_TASK_BYTES}}),
        json.dumps({"kindex_reindex": {"kind": "tenant", "tenant": "t", "after": "\u00e9" * 1025}}),
    ],
)
def test_anything_but_a_valid_bounded_task_is_refused(body):
    with pytest.raises(ValueError):
        decode_task(body)


def test_ingest_notifications_are_not_tasks():
    assert not is_task_body(json.dumps({"Records": [{"eventSource": "aws:s3"}]}))
    assert is_task_body(ReindexTask(kind="tenant", tenant="t").encode())
