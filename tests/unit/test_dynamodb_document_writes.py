"""The DynamoDB document and collection write's condition, built by a pure function: a create needs no item, an
update needs the item at the revision the writer read (an item from before revisions, without the attribute, is at
revision 0)."""

from __future__ import annotations

import pytest

from kindex.adapters.aws.dynamodb_metadata import build_item, build_put_request

pytestmark = pytest.mark.unit

ITEM = build_item("T#acme#C#docs", "d1", "{}", version=3, revision=5)


def test_the_item_carries_version_and_revision_as_numbers():
    assert (ITEM["version"], ITEM["revision"]) == ({"N": "3"}, {"N": "5"})


def test_a_create_needs_no_item():
    request = build_put_request("t", ITEM, create=True)
    assert request["ConditionExpression"] == "attribute_not_exists(pk)"
    assert "ExpressionAttributeValues" not in request


def test_an_update_needs_the_revision_it_read():
    request = build_put_request("t", ITEM, create=False, expected_revision=4)
    assert request["ConditionExpression"] == "attribute_exists(pk) AND #revision = :expected"
    assert request["ExpressionAttributeNames"] == {"#revision": "revision"}
    assert request["ExpressionAttributeValues"] == {":expected": {"N": "4"}}
    assert request["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"


def test_an_update_over_revision_zero_also_accepts_an_item_written_before_revisions():
    request = build_put_request("t", ITEM, create=False, expected_revision=0)
    assert (
        request["ConditionExpression"]
        == "attribute_exists(pk) AND (attribute_not_exists(#revision) OR #revision = :expected)"
    )
    assert request["ExpressionAttributeValues"] == {":expected": {"N": "0"}}


def test_a_collection_update_needs_the_revision_it_read_too():
    # (collection items carry a revision since 2026-12-01; before, their updates only needed the item to exist)
    item = build_item("T#acme#COLLECTIONS", "c", "{}", revision=3)
    request = build_put_request("t", item, create=False, expected_revision=2)
    assert item["revision"] == {"N": "3"} and "version" not in item
    assert request["ConditionExpression"] == "attribute_exists(pk) AND #revision = :expected"
    assert request["ExpressionAttributeValues"] == {":expected": {"N": "2"}}
