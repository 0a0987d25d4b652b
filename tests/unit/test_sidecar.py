"""Metadata sidecars in Bedrock's shape (domain/sidecar.py): plain and typed values, kindex's access list, and a
refusal naming the place for anything a PUT would refuse."""

from __future__ import annotations

import json

import pytest

from kindex.domain.errors import InvalidInput
from kindex.domain.sidecar import MAX_SIDECAR_BYTES, described_key, is_sidecar, parse_sidecar, sidecar_key

pytestmark = pytest.mark.unit


def sidecar(body) -> bytes:
    return json.dumps(body).encode()


def test_plain_and_typed_values_read_alike():
    fields = parse_sidecar(
        sidecar(
            {
                "metadataAttributes": {
                    "genre": "drama",
                    "year": {"value": {"type": "NUMBER", "numberValue": 1966}, "includeForEmbedding": True},
                    "final": {"value": {"type": "BOOLEAN", "booleanValue": False}},
                    "tags": {"value": {"type": "STRING_LIST", "stringListValue": ["a", "b"]}},
                    "title": {"value": {"type": "STRING", "stringValue": "Persona"}},
                }
            }
        )
    )
    assert fields == {
        "attributes": {"genre": "drama", "year": 1966, "final": False, "tags": ["a", "b"], "title": "Persona"},
        "access": None,
    }


def test_the_access_list_is_kindex_s_own_and_a_sidecar_may_hold_only_it():
    fields = parse_sidecar(sidecar({"access": {"groups": ["hr", "hr"], "deny_users": ["mallory"]}}))
    assert fields["attributes"] is None
    assert fields["access"].groups == ("hr",) and fields["access"].deny_users == ("mallory",)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b'{"metadataAttributes": {"year": NaN}}', "not valid JSON"),
        (b'{"metadataAttributes": {"year": 9223372036854775808}}', "metadataAttributes.year"),
        (b'{"metadataAttributes": {"s": "\\ud800"}}', "metadataAttributes.s"),
        (b'{"metadataAttributes": {"1bad": 1}}', "metadataAttributes"),
        (b'{"metadataAttributes": {"x": {"value": {"type": "DATE", "stringValue": "2024"}}}}', "metadataAttributes.x"),
        (b'{"metadataAttributes": {"x": {"value": {"type": "NUMBER", "stringValue": "1"}}}}', "metadataAttributes.x"),
        # A type that is no string (a list cannot even be looked up): refused, not a TypeError.
        (b'{"metadataAttributes": {"x": {"value": {"type": ["STRING"], "stringValue": "a"}}}}', "metadataAttributes.x"),
        (b'{"metadataAttributes": {"x": {"value": {"type": {}, "stringValue": "a"}}}}', "metadataAttributes.x"),
        (b'{"metadataAttributes": {"x": {"nested": 1}}}', "metadataAttributes.x"),
        (b'{"metadataAttributes": []}', "metadataAttributes"),
        (b'{"access": {"groups": ["ok", ""]}}', "access.groups[1]"),
        (b'{"access": {"owner": "x"}}', "access.owner"),
        (b'{"metadata": {}}', "unknown field"),
        (b"[1]", "JSON object"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    ],
)
def test_a_sidecar_a_put_would_refuse_is_refused_naming_the_place(data, named):
    with pytest.raises(InvalidInput) as refused:
        parse_sidecar(data)
    assert named in refused.value.message


def test_a_sidecar_is_bounded():
    with pytest.raises(InvalidInput, match="at most"):
        parse_sidecar(b" " * (MAX_SIDECAR_BYTES + 1))


def test_sidecar_names():
    key = "tenants/t/collections/c/documents/d/report.pdf"
    assert described_key(sidecar_key(key)) == key
    assert is_sidecar("report.pdf.metadata.json") and not is_sidecar(".metadata.json")
    assert not is_sidecar("report.pdf")
