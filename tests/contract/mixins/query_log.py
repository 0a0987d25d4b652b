"""Contract of the QueryLog port: what every adapter (SQLite, DynamoDB...) must do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.contract.mixins.clock import T0, Clock

if TYPE_CHECKING:
    from kindex.domain.ports import QueryLog

DOCUMENTS = [
    {"document_id": "d1", "title": "Ünïcode ✓", "url": None, "n": 1},
    {"document_id": "d#2", "title": "two", "url": "https://x.example/2", "n": 2},
]


class QueryLogContract:
    """Subclass in a `Test*` class that provides `query_log`: a fresh, empty QueryLog whose time is `clock`."""

    @pytest.fixture
    def clock(self) -> Clock:
        return Clock()

    @pytest.fixture
    def query_log(self, clock) -> QueryLog:
        raise NotImplementedError(f"{type(self).__name__} must provide the `query_log` fixture")

    def test_query_round_trips_its_documents(self, query_log):
        query_log.put_query("acme", "q1", DOCUMENTS, ttl_seconds=3600)
        assert query_log.get_query("acme", "q1") == DOCUMENTS

    def test_unknown_query_and_other_tenants_query_are_none(self, query_log):
        # Given a query of tenant acme / When another tenant, or an unknown id, is asked / Then None
        query_log.put_query("acme", "q1", DOCUMENTS, ttl_seconds=3600)
        assert query_log.get_query("other", "q1") is None
        assert query_log.get_query("acme", "q2") is None

    def test_query_expires_after_its_ttl(self, query_log, clock):
        # Given a query remembered for 60 s
        query_log.put_query("acme", "q1", DOCUMENTS, ttl_seconds=60)
        # When 59 s have passed / Then it is there; when 61 s have passed / Then it is gone (whatever TTL did)
        clock.now = T0 + 59
        assert query_log.get_query("acme", "q1") == DOCUMENTS
        clock.now = T0 + 61
        assert query_log.get_query("acme", "q1") is None

    def test_writing_a_query_again_replaces_it(self, query_log, clock):
        query_log.put_query("acme", "q1", DOCUMENTS, ttl_seconds=10)
        query_log.put_query("acme", "q1", DOCUMENTS[:1], ttl_seconds=100)
        clock.now = T0 + 50
        assert query_log.get_query("acme", "q1") == DOCUMENTS[:1]

    def test_awkward_tenants_and_query_ids(self, query_log):
        for tenant, query_id in [("a#b", "Q#1"), ("a", "b#Q#1"), ("日本 %", "é"), ("\U0001f600" * 255, "q")]:
            query_log.put_query(tenant, query_id, [{"tenant": tenant}], ttl_seconds=60)
        assert query_log.get_query("a#b", "Q#1") == [{"tenant": "a#b"}]
        assert query_log.get_query("a", "b#Q#1") == [{"tenant": "a"}]
        assert query_log.get_query("日本 %", "é") == [{"tenant": "日本 %"}]
        assert query_log.get_query("\U0001f600" * 255, "q") == [{"tenant": "\U0001f600" * 255}]
