"""Contract of the JobStore port: what every adapter (SQLite, DynamoDB...) must do."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pytest

from kindex.domain.models import ReindexJob
from tests.contract.mixins.clock import T0, Clock

if TYPE_CHECKING:
    from kindex.domain.ports import JobStore

DAY = 24 * 3600


def make_job(tenant: str = "acme", job_id: str = "job-1", **fields) -> ReindexJob:
    created = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    values = {
        "collection": "c",
        "total": 6,
        "done": 2,
        "enqueued": 4,
        "created_at": created,
        "updated_at": created,
        "repaired": {"blobs_without_documents": 1, "documents_without_vectors": 0, "vectors_without_chunks": 3},
    }
    return ReindexJob(id=job_id, tenant=tenant, **{**values, **fields})


class JobStoreContract:
    """Subclass in a `Test*` class that provides `jobs`: a fresh, empty JobStore whose time is `clock`."""

    @pytest.fixture
    def clock(self) -> Clock:
        return Clock()

    @pytest.fixture
    def jobs(self, clock) -> JobStore:
        raise NotImplementedError(f"{type(self).__name__} must provide the `jobs` fixture")

    @pytest.mark.slow
    def test_job_round_trips_every_field(self, jobs):
        # Given a job with progress, repairs and timestamps / When stored and read back / Then it is equal
        job = make_job(clean=True, status="completed")
        jobs.put_job(job)
        assert jobs.get_job("acme", "job-1") == job

    def test_unknown_job_is_none(self, jobs):
        jobs.put_job(make_job())
        assert jobs.get_job("acme", "job-2") is None
        assert jobs.get_job("acme", "") is None

    def test_another_tenants_job_is_none(self, jobs):
        # Given a job of tenant acme / When another tenant asks for its id / Then it is not found
        jobs.put_job(make_job("acme"))
        assert jobs.get_job("other", "job-1") is None
        assert jobs.get_job("acme#x", "job-1") is None

    def test_same_job_id_in_two_tenants_are_two_jobs(self, jobs):
        jobs.put_job(make_job("acme", total=1))
        jobs.put_job(make_job("beta", total=2))
        assert jobs.get_job("acme", "job-1").total == 1
        assert jobs.get_job("beta", "job-1").total == 2

    def test_putting_a_job_again_replaces_it(self, jobs):
        # Given a running job / When its progress is written again / Then the latest record is read
        jobs.put_job(make_job(status="running", done=2))
        jobs.put_job(make_job(status="completed", done=6))
        job = jobs.get_job("acme", "job-1")
        assert (job.status, job.done) == ("completed", 6)

    def test_job_is_kept_for_thirty_days(self, jobs, clock):
        jobs.put_job(make_job())
        clock.now = T0 + 30 * DAY - 1
        assert jobs.get_job("acme", "job-1") == make_job()

    def test_awkward_tenants_and_job_ids(self, jobs):
        pairs = [("a#b", "J#1"), ("a", "b#JOBS"), ("日本 %", "é"), ("\U0001f600" * 255, "j"), ("t", "\U0001f600" * 255)]
        for tenant, job_id in pairs:
            jobs.put_job(make_job(tenant, job_id))
        for tenant, job_id in pairs:
            assert jobs.get_job(tenant, job_id) == make_job(tenant, job_id)
        assert jobs.get_job("a#b", "b#JOBS") is None and jobs.get_job("a", "J#1") is None
