"""The JobStore contract (tests/contract/mixins/job_store.py) run against SQLite and DynamoDB (moto), plus the
DynamoDB adapter's item layout, expiry and error translation."""

from __future__ import annotations

import logging

import pytest
from botocore.stub import Stubber

from kindex.adapters.aws import dynamodb_table
from kindex.adapters.aws.dynamodb_jobs import JOB_TTL_SECONDS, DynamoDbJobStore, jobs_pk
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_jobs import SqliteJobStore
from kindex.domain.errors import DependencyFailed
from kindex.domain.models import ReindexJob
from tests.contract.mixins.job_store import DAY, T0, JobStoreContract, make_job
from tests.support.aws import TABLE, fake_aws_env, moto_client

pytestmark = pytest.mark.contract


class TestSqliteJobStore(JobStoreContract):
    @pytest.fixture
    def jobs(self, tmp_path, clock) -> SqliteJobStore:
        return SqliteJobStore(SqliteDatabase(tmp_path / "x.sqlite3"), clock=clock)


class TestDynamoDbJobStore(JobStoreContract):
    @pytest.fixture
    def jobs(self, dynamodb, clock) -> DynamoDbJobStore:
        return DynamoDbJobStore(TABLE, client=dynamodb, clock=clock)

    def test_item_is_in_the_tenants_jobs_partition_with_a_thirty_day_ttl(self, dynamodb, clock):
        # Given a job written at T0 + 0.5 s
        clock.now = T0 + 0.5
        DynamoDbJobStore(TABLE, client=dynamodb, clock=clock).put_job(make_job())
        # Then it is the item (T#acme#JOBS, job-1), with its JSON body and `expires_at` 30 days later in whole seconds
        assert jobs_pk("acme") == "T#acme#JOBS" and jobs_pk("a#b") == "T#a%23b#JOBS"
        (item,) = dynamodb.scan(TableName=TABLE)["Items"]
        assert (item["pk"]["S"], item["sk"]["S"]) == ("T#acme#JOBS", "job-1")
        assert ReindexJob.model_validate_json(item["body"]["S"]) == make_job()
        assert item["expires_at"] == {"N": str(int(T0) + 1 + JOB_TTL_SECONDS)}
        assert dynamodb.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]["AttributeName"] == "expires_at"

    @pytest.mark.slow
    def test_rewrite_extends_the_expiry(self, dynamodb, clock):
        store = DynamoDbJobStore(TABLE, client=dynamodb, clock=clock)
        store.put_job(make_job())
        # When the job is written again 10 days later (get_job updates progress) / Then it lives 30 days from then
        clock.now = T0 + 10 * DAY
        store.put_job(make_job(done=5))
        clock.now = T0 + 39 * DAY
        assert store.get_job("acme", "job-1").done == 5

    def test_expired_job_is_none_before_ttl_deletes_it(self, dynamodb, clock):
        # Given a job past its 30 days that DynamoDB's lazy TTL has not deleted yet
        store = DynamoDbJobStore(TABLE, client=dynamodb, clock=clock)
        store.put_job(make_job())
        clock.now = T0 + 30 * DAY + 1
        assert dynamodb.scan(TableName=TABLE)["Count"] == 1
        # When read / Then it is gone
        assert store.get_job("acme", "job-1") is None

    def test_job_whose_body_names_another_tenant_is_not_served(self, dynamodb, clock):
        # Given an item in acme's partition whose body says it belongs to another tenant (never written by the adapter)
        store = DynamoDbJobStore(TABLE, client=dynamodb, clock=clock)
        store.put_job(make_job("other"))
        item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": jobs_pk("other")}, "sk": {"S": "job-1"}})["Item"]
        dynamodb.put_item(TableName=TABLE, Item={**item, "pk": {"S": jobs_pk("acme")}})
        # When acme asks for it / Then it is not found
        assert store.get_job("acme", "job-1") is None

    def test_over_long_job_id_is_none_without_a_request(self, dynamodb):
        store = DynamoDbJobStore(TABLE, client=dynamodb)
        calls: list[str] = []
        dynamodb.meta.events.register("before-call.dynamodb.GetItem", lambda **_: calls.append("get"))
        assert store.get_job("acme", "x" * 1025) is None
        assert calls == []
        # (while an ordinary id is looked up)
        assert store.get_job("acme", "x" * 1024) is None
        assert calls == ["get"]

    def test_errors_become_dependency_failed(self, monkeypatch, caplog):
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

    def test_client_is_created_lazily(self, dynamodb):
        dynamodb_table.dynamodb_client.cache_clear()
        try:
            store = DynamoDbJobStore(TABLE)
            store.put_job(make_job())
            assert store.client is dynamodb_table.dynamodb_client()
            assert dynamodb.scan(TableName=TABLE)["Count"] == 1
        finally:
            dynamodb_table.dynamodb_client.cache_clear()
