"""The rules of a document's filter fields (issue 23): what a change bumps, when a document is current or
searchable, what the record admits, and how large the next over-fetch round is."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kindex.app.document_writes import filter_fields_change, with_filter_fields
from kindex.app.query import MAX_CANDIDATES, admitted, next_round_size
from kindex.domain.filters import Access
from kindex.domain.models import Collection, Document, DocumentStatus
from kindex.domain.query import QueryRequest

pytestmark = pytest.mark.unit

COLLECTION = Collection(id="c", embedding_model="hash:384")
INDEXED = Document(
    id="d",
    collection="c",
    status=DocumentStatus.INDEXED,
    version=2,
    indexed_version=2,
    indexed_model="hash:384",
    indexed_config_version=1,
    indexed_at=datetime.now(timezone.utc),
    attributes={"flag": 1},
)


def test_a_filter_field_change_bumps_the_fields_version_and_shows_in_progress():
    changed = with_filter_fields(INDEXED, {"attributes": {"flag": 2}})
    assert changed.fields_version == 1 and changed.status is DocumentStatus.IN_PROGRESS
    assert changed.fields_stale and changed.searchable and not changed.is_current(COLLECTION)
    assert changed.content_current(COLLECTION)


def test_equal_values_are_no_change_and_1_is_not_true():
    assert not filter_fields_change(INDEXED, {"attributes": {"flag": 1}, "title": "other"})
    assert filter_fields_change(INDEXED, {"attributes": {"flag": True}})
    assert with_filter_fields(INDEXED, {"title": "x"}).status is DocumentStatus.INDEXED


def test_a_document_being_indexed_keeps_its_status_and_is_not_searchable():
    pending = INDEXED.model_copy(update={"status": DocumentStatus.PENDING, "version": 3})
    changed = with_filter_fields(pending, {"access": Access(groups=("hr",))})
    assert changed.status is DocumentStatus.PENDING and not changed.searchable
    assert not changed.content_current(COLLECTION)


def test_a_failed_document_is_not_searchable_whatever_its_fields():
    failed = with_filter_fields(INDEXED.model_copy(update={"status": DocumentStatus.FAILED}), {"language": "en"})
    assert not failed.searchable and not failed.content_current(COLLECTION)


def test_a_record_from_before_fields_is_current():
    assert INDEXED.is_current(COLLECTION)


@pytest.mark.parametrize(
    ("access", "required", "user", "groups", "admits"),
    [
        (None, False, None, [], True),
        (None, True, "ann", ["hr"], False),
        (Access(groups=("hr",)), True, None, ["hr"], True),
        (Access(groups=("hr",), deny_users=("ann",)), False, "ann", ["hr"], False),
        (Access(users=("ann",)), False, None, [], False),
    ],
)
def test_the_record_admits_by_its_access_list_and_the_collection_s_document_access(
    access, required, user, groups, admits
):
    collection = COLLECTION.model_copy(update={"document_access": "required" if required else "optional"})
    request = QueryRequest(query="q", user=user, groups=groups)
    assert admitted(INDEXED.model_copy(update={"access": access}), request, collection) is admits


def test_the_record_is_checked_against_the_attribute_filter():
    match = QueryRequest(query="q", filters={"attributes": {"flag": {"$gte": 1}}})
    miss = QueryRequest(query="q", filters={"attributes": {"flag": {"$gt": 1}}})
    assert admitted(INDEXED, match, COLLECTION) and not admitted(INDEXED, miss, COLLECTION)


def test_the_next_round_is_sized_from_the_rate_seen():
    # 1 of 300 candidates survived, 10 wanted: about 10 / (1/300) * 1.5 = 4,500
    assert next_round_size(300, 10, 1, 300) == 4500
    # a high rate still at least doubles
    assert next_round_size(30, 10, 9, 30) == 60
    # nothing survived: a blind jump, bounded
    assert next_round_size(30, 10, 0, 30) == 300
    assert next_round_size(5000, 10, 0, 5000) == MAX_CANDIDATES
