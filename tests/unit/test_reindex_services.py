"""Reindex is one service per job (kindex/app/reindex/): each takes only the ports it uses, and building the one an
entry point calls builds only the adapters that job needs (the planner function may reach neither the bucket nor
the search domain: tests/infra/test_stack.py)."""

from __future__ import annotations

import inspect

import pytest

from kindex.app.reindex.jobs import ReindexJobs
from kindex.app.reindex.orphans import OrphanBlobs
from kindex.app.reindex.pages import PageChecker
from kindex.app.reindex.planner import ReindexPlanner
from kindex.app.reindex.switch import ModelSwitch
from kindex.app.reindex.worker import ReindexWorker
from kindex.compose import Services
from kindex.compose.local import LocalAdapters
from kindex.domain import ports
from kindex.settings import load_settings

pytestmark = pytest.mark.unit

PIECES = (ReindexPlanner, ReindexWorker, PageChecker, ModelSwitch, ReindexJobs, OrphanBlobs)
PORTS = {
    name for name, value in vars(ports).items() if isinstance(value, type) and getattr(value, "_is_protocol", False)
}


def port_parameters(service: type) -> list[str]:
    """The constructor's parameters annotated with a port (the annotations are strings: `from __future__`)."""
    parameters = inspect.signature(service.__init__).parameters.values()
    return [parameter.name for parameter in parameters if str(parameter.annotation) in PORTS]


@pytest.mark.parametrize("service", PIECES, ids=lambda service: service.__name__)
def test_each_reindex_service_takes_at_most_five_ports(service):
    # Given a reindex service / Then its constructor names five ports or fewer (house rule 3's size)
    assert 1 <= len(port_parameters(service)) <= 5, port_parameters(service)


def built_adapters(adapters: LocalAdapters) -> set[str]:
    """The adapters built so far (each is a cached property: built on first use)."""
    return {name for name in ("blobs", "chunks", "search_index", "ingest_trigger", "jobs") if name in vars(adapters)}


def test_the_planner_builds_neither_the_blob_store_nor_the_search_index(tmp_path):
    # Given a deployment's services, nothing built yet
    services = Services(LocalAdapters(load_settings({"KINDEX_DATA_DIR": str(tmp_path)})))
    # When the scheduled function's service is built and plans (no tenant yet)
    assert services.reindex_planner.plan() == {"tenants": 0, "collections": 0, "tasks": 0}
    # Then no blob store, chunk store, search index, ingest trigger or job store was built for it
    assert built_adapters(services.adapters) == set()


def test_the_worker_and_the_jobs_share_one_model_switch(tmp_path):
    # Given a deployment's services / Then the API's jobs and the queue's worker switch models through one service
    services = Services(LocalAdapters(load_settings({"KINDEX_DATA_DIR": str(tmp_path)})))
    assert services.reindex_jobs.switch is services.reindex_worker.switch is services.model_switch


class _Keys:
    def list_keys(self):
        from types import SimpleNamespace

        return [SimpleNamespace(tenant="acme"), SimpleNamespace(tenant="evil")]


class _NoCollections:
    def list_collections(self, tenant, *, after, offset, limit):
        return []

    def pending_deletions(self, tenant):
        return []


class _Queue:
    def __init__(self):
        self.sent = []

    def send(self, tasks):
        self.sent += tasks


@pytest.mark.parametrize(
    ("hour", "full", "recount"),
    [(0, False, True), (1, False, False), (23, False, False), (5, True, True)],
    ids=["the recount hour", "the next hour", "the hour before", "a full pass"],
)
def test_the_planner_asks_for_a_usage_recount_once_a_day_and_on_full_passes(hour, full, recount):
    # Given a planner whose recount hour is 0 UTC, at `hour`
    from datetime import UTC, datetime

    queue = _Queue()
    stores = _NoCollections()
    planner = ReindexPlanner(
        _Keys(), stores, stores, queue, recount_hour=0, clock=lambda: datetime(2026, 12, 2, hour, 30, tzinfo=UTC)
    )
    # When it plans / Then every tenant task asks for the recount exactly when due (a recount reads every document)
    planner.plan(full=full)
    tenant_tasks = [task for task in queue.sent if task.kind == "tenant"]
    assert [task.tenant for task in tenant_tasks] == ["acme", "evil"]
    assert {task.recount for task in tenant_tasks} == {recount}


def test_a_planner_without_a_recount_hour_recounts_only_on_full_passes():
    queue, stores = _Queue(), _NoCollections()
    planner = ReindexPlanner(_Keys(), stores, stores, queue, recount_hour=None)
    planner.plan()
    planner.plan(full=True)
    assert [task.recount for task in queue.sent if task.kind == "tenant"] == [False, False, True, True]
