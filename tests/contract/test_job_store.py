"""Contract of the JobStore port, run against the local adapter (SQLite) and DynamoDB (moto), plus the DynamoDB
adapter's item layout, expiry and error translation."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from botocore.stub import Stubber
from kindex.adapters.aws.dynamodb_jobs import JOB_TTL_SECONDS, DynamoDbJobStore, jobs_pk
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_jobs import SqliteJobStore
from kindex.domain.errors import DependencyFailed
from kindex.domain.models import ReindexJob
from moto import mock_aws

from tests.support.aws import TABLE, create_metadata_table, fake_aws_env, moto_client

pytestmark = pytest.mark.contract

T0 = 1_700_000_000.0
DAY = 24 * 3600


class Clock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_job(tenant: str = "acme", job_id: str = "job-1", **fields) -> ReindexJob:
    created = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    values = {"collection": "c", "total": 6, "done": 2, "enqueued": 4, "created_at": created, "updated_at": created,
              "repaired": {"blobs_without_documents": 1, "documents_without_vectors": 0, "vectors_without_chunks": 3}}
    return ReindexJob(id=job_id, tenant=tenant, **{**values, **fields})


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    fake_aws_env(monkeypatch)
    with mock_aws():
        dynamodb = moto_client("dynamodb")
        create_metadata_table(dynamodb)
        yield dynamodb


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["local", "aws"])
def jobs(request: pytest.FixtureRequest, tmp_path, clock) -> Iterator:
    if request.param == "local":
        yield SqliteJobStore(SqliteDatabase(tmp_path / "x.sqlite3"), clock=clock)
    else:
        yield DynamoDbJobStore(TABLE, client=request.getfixturevalue("aws"), clock=clock)


# The port's contract
def test_job_round_trips_every_field(jobs):
    # Given a job with progress, repairs and timestamps / When stored and read back / Then it is equal
    job = make_job(clean=True, status="completed")
    jobs.put_job(job)
    assert jobs.get_job("acme", "job-1") == job


def test_unknown_job_is_none(jobs):
    jobs.put_job(make_job())
    assert jobs.get_job("acme", "job-2") is None
    assert jobs.get_job("acme", "") is None


def test_another_tenants_job_is_none(jobs):
    # Given a job of tenant acme / When another tenant asks for its id / Then it is not found
    jobs.put_job(make_job("acme"))
    assert jobs.get_job("other", "job-1") is None
    assert jobs.get_job("acme#x", "job-1") is None


def test_same_job_id_in_two_tenants_are_two_jobs(jobs):
    jobs.put_job(make_job("acme", total=1))
    jobs.put_job(make_job("beta", total=2))
    assert jobs.get_job("acme", "job-1").total == 1
    assert jobs.get_job("beta", "job-1").total == 2


def test_putting_a_job_again_replaces_it(jobs):
    # Given a running job / When its progress is written again / Then the latest record is read
    jobs.put_job(make_job(status="running", done=2))
    jobs.put_job(make_job(status="completed", done=6))
    job = jobs.get_job("acme", "job-1")
    assert (job.status, job.done) == ("completed", 6)


def test_job_is_kept_for_thirty_days(jobs, clock):
    jobs.put_job(make_job())
    clock.now = T0 + 30 * DAY - 1
    assert jobs.get_job("acme", "job-1") == make_job()


def test_awkward_tenants_and_job_ids(jobs):
    pairs = [("a#b", "J#1"), ("a", "b#JOBS"), ("日本 %", "é"), ("\U0001F600" * 255, "j"), ("t", "\U0001F600" * 255)]
    for tenant, job_id in pairs:
        jobs.put_job(make_job(tenant, job_id))
    for tenant, job_id in pairs:
        assert jobs.get_job(tenant, job_id) == make_job(tenant, job_id)
    assert jobs.get_job("a#b", "b#JOBS") is None and jobs.get_job("a", "J#1") is None


# DynamoDB specifics
def test_dynamodb_item_is_in_the_tenants_jobs_partition_with_a_thirty_day_ttl(aws, clock):
    # Given a job written at T0 + 0.5 s
    clock.now = T0 + 0.5
    DynamoDbJobStore(TABLE, client=aws, clock=clock).put_job(make_job())
    # Then it is the item (T#acme#JOBS, job-1), with its JSON body and `expires_at` 30 days later in whole seconds
    assert jobs_pk("acme") == "T#acme#JOBS" and jobs_pk("a#b") == "T#a%23b#JOBS"
    (item,) = aws.scan(TableName=TABLE)["Items"]
    assert (item["pk"]["S"], item["sk"]["S"]) == ("T#acme#JOBS", "job-1")
    assert ReindexJob.model_validate_json(item["body"]["S"]) == make_job()
    assert item["expires_at"] == {"N": str(int(T0) + 1 + JOB_TTL_SECONDS)}
    assert aws.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]["AttributeName"] == "expires_at"


def test_dynamodb_rewrite_extends_the_expiry(aws, clock):
    store = DynamoDbJobStore(TABLE, client=aws, clock=clock)
    store.put_job(make_job())
    # When the job is written again 10 days later (get_job updates progress) / Then it lives 30 days from then
    clock.now = T0 + 10 * DAY
    store.put_job(make_job(done=5))
    clock.now = T0 + 39 * DAY
    assert store.get_job("acme", "job-1").done == 5


def test_dynamodb_expired_job_is_none_before_ttl_deletes_it(aws, clock):
    # Given a job past its 30 days that DynamoDB's lazy TTL has not deleted yet
    store = DynamoDbJobStore(TABLE, client=aws, clock=clock)
    store.put_job(make_job())
    clock.now = T0 + 30 * DAY + 1
    assert aws.scan(TableName=TABLE)["Count"] == 1
    # When read / Then it is gone
    assert store.get_job("acme", "job-1") is None


def test_dynamodb_job_whose_body_names_another_tenant_is_not_served(aws, clock):
    # Given an item in acme's partition whose body says it belongs to another tenant (never written by the adapter)
    store = DynamoDbJobStore(TABLE, client=aws, clock=clock)
    store.put_job(make_job("other"))
    item = aws.get_item(TableName=TABLE, Key={"pk": {"S": jobs_pk("other")}, "sk": {"S": "job-1"}})["Item"]
    aws.put_item(TableName=TABLE, Item={**item, "pk": {"S": jobs_pk("acme")}})
    # When acme asks for it / Then it is not found
    assert store.get_job("acme", "job-1") is None


def test_dynamodb_over_long_job_id_is_none_without_a_request(aws):
    store = DynamoDbJobStore(TABLE, client=aws)
    calls: list[str] = []
    aws.meta.events.register("before-call.dynamodb.GetItem", lambda **_: calls.append("get"))
    assert store.get_job("acme", "x" * 1025) is None
    assert calls == []
    # (while an ordinary id is looked up)
    assert store.get_job("acme", "x" * 1024) is None
    assert calls == ["get"]


def test_dynamodb_errors_become_dependency_failed(monkeypatch, caplog):
    # Given a client that is denied everything
    fake_aws_env(monkeypatch)
    client = moto_client("dynamodb")
    store = DynamoDbJobStore(TABLE, client=client)
    caplog.set_level(logging.ERROR, logger="kindex")
    with Stubber(client) as stub:
        stub.add_client_error("put_item", service_error_code="AccessDeniedException")
        stub.add_client_error("get_item", service_error_code="ResourceNotFoundException")
        # When writing and reading / Then DependencyFailed, with the SDK's error code logged as a key/value
        with pytest.raises(DependencyFailed):
            store.put_job(make_job())
        with pytest.raises(DependencyFailed):
            store.get_job("acme", "job-1")
    assert [r.error_code for r in caplog.records] == ["AccessDeniedException", "ResourceNotFoundException"]


def test_dynamodb_client_is_created_lazily(aws):
    from kindex.adapters.aws import dynamodb_table

    dynamodb_table.dynamodb_client.cache_clear()
    try:
        store = DynamoDbJobStore(TABLE)
        store.put_job(make_job())
        assert store.client is dynamodb_table.dynamodb_client()
        assert aws.scan(TableName=TABLE)["Count"] == 1
    finally:
        dynamodb_table.dynamodb_client.cache_clear()
