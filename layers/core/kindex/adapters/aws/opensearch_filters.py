"""Attribute filters and access lists as OpenSearch query clauses (pure: no I/O), and the chunk fields they read.

One clause serves both legs of hybrid search: it goes into the k-NN query's `filter` (efficient filtering, applied
while the graph is searched, on lucene and faiss alike) and into the keyword query's `bool.filter`, beside the
tenant and collection terms of `opensearch_requests.build_filter_clauses`. Attributes are indexed with the typed
key-value terms of `kindex.adapters.filter_terms` (keyword fields: a bounded mapping whatever tenants write, no type
conflicts, numeric ranges over order-preserving number terms); docs/decisions.md (2026-12-01, "Document attributes
and access lists") has the measurements against flat_object and nested fields.

A chunk indexed before these fields existed has none of them: no attributes (every key missing) and no access list
(visible unless the collection requires one) - exactly what `kindex.domain.filters` says of such a document, so an
existing index needs only the new properties added (`PUT <index>/_mapping`, which a strict mapping accepts; the
adapter sends it once per process the first time it writes to an index it did not create). A search that meets an
index without the fields is right too: a term, range or prefix on an unmapped field matches nothing, so such chunks
read as "no attributes, no access list" there as well (checked on the node).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kindex.adapters import filter_terms as terms
from kindex.domain.filters import (
    Access,
    AllOf,
    AnyOf,
    AttributeValue,
    Comparison,
    Expression,
    Scalar,
)

HAS_ACCESS = "access_set"
ACCESS_FIELDS = ("access_users", "access_groups", "access_deny_users", "access_deny_groups")
MATCH_NONE: dict[str, Any] = {"match_none": {}}
MATCH_ALL: dict[str, Any] = {"match_all": {}}


def mapping_properties() -> dict[str, Any]:
    """The properties to add to a chunk index's mapping: ten fields (five attribute term fields, four access lists,
    whether a list is set), whatever keys the tenants use."""
    return {
        **{field: {"type": "keyword"} for field in (*terms.ATTRIBUTE_FIELDS, *ACCESS_FIELDS)},
        HAS_ACCESS: {"type": "boolean"},
    }


def index_fields(attributes: Mapping[str, AttributeValue] | None, access: Access | None) -> dict[str, Any]:
    """The `_source` fields of one chunk of a document with `attributes` and `access` (validated values). Every
    field is written, empty or not, so that re-indexing a chunk clears what an earlier version set."""
    fields: dict[str, Any] = dict(terms.attribute_terms(attributes))
    fields[HAS_ACCESS] = access is not None
    for field in ACCESS_FIELDS:
        fields[field] = list(getattr(access, field.removeprefix("access_"))) if access is not None else []
    return fields


# -- attribute filters ------------------------------------------------------------------------------------------


def _field_of(value: Scalar) -> tuple[str, str]:
    if isinstance(value, bool):
        return terms.BOOLEANS, terms.boolean_value(value)
    if isinstance(value, int | float):
        return terms.NUMBERS, terms.sortable_number(value)
    return terms.STRINGS, value


def _one_of(key: str, values: Sequence[Scalar]) -> dict[str, Any]:
    """Any of `values` (of any types): one `terms` clause per field, so 1,000 values are never an OR-chain."""
    by_field: dict[str, list[str]] = {}
    for value in values:
        field, encoded = _field_of(value)
        by_field.setdefault(field, []).append(terms.term(key, encoded))
    clauses = [{"terms": {field: found}} for field, found in by_field.items()]
    if not clauses:
        return MATCH_NONE
    return clauses[0] if len(clauses) == 1 else {"bool": {"should": clauses, "minimum_should_match": 1}}


def _not(clause: dict[str, Any]) -> dict[str, Any]:
    return {"bool": {"must_not": [clause]}}


def _number_range(key: str, operator: str, bound: int | float) -> dict[str, Any]:
    """A byte-wise range over the key's number terms; the other side is bounded by the key's own terms."""
    edge = terms.term(key, terms.sortable_number(bound))
    if operator in ("$gt", "$gte"):
        limits = {operator.removeprefix("$"): edge, "lt": terms.term(key, terms.NUMBER_END)}
    else:
        limits = {"gt": terms.term(key, ""), operator.removeprefix("$"): edge}
    return {"range": {terms.NUMBERS: limits}}


def _comparison(comparison: Comparison) -> dict[str, Any]:
    key, operator, value = comparison.key, comparison.operator, comparison.value
    if operator in ("$eq", "$in"):
        return _one_of(key, comparison.operands())
    if operator in ("$ne", "$nin"):
        return _not(_one_of(key, comparison.operands()))
    if operator in ("$gt", "$gte", "$lt", "$lte"):
        return _number_range(key, operator, comparison.bound())
    if operator == "$exists":
        present = {"term": {terms.KEYS: key}}
        return present if value else _not(present)
    if operator == "$contains":
        return {"term": {terms.LISTS: terms.term(key, comparison.string())}}
    return {"prefix": {terms.STRINGS: terms.term(key, comparison.string())}}


def build_attribute_filter(expression: Expression) -> dict[str, Any]:
    """A query clause (filter context, no scores) that holds exactly where `kindex.domain.filters.matches` does."""
    if isinstance(expression, Comparison):
        return _comparison(expression)
    clauses = [build_attribute_filter(clause) for clause in expression.clauses]
    if isinstance(expression, AllOf):
        return {"bool": {"filter": clauses}} if clauses else MATCH_ALL
    assert isinstance(expression, AnyOf)
    return {"bool": {"should": clauses, "minimum_should_match": 1}} if clauses else MATCH_NONE


# -- access lists -----------------------------------------------------------------------------------------------


def build_access_filter(user: str | None, groups: Collection[str], *, required: bool) -> dict[str, Any]:
    """Chunks the query's `user` and `groups` may see (`kindex.domain.filters.admits`): listed and not denied, or -
    unless the collection requires access lists - without a list. Groups are one `terms` clause each way, so a
    user in 1,000 groups costs one set-membership test, and no groups match no group."""
    groups = list(dict.fromkeys(groups))
    granted = ([{"term": {"access_users": user}}] if user is not None else []) + (
        [{"terms": {"access_groups": groups}}] if groups else []
    )
    denied = ([{"term": {"access_deny_users": user}}] if user is not None else []) + (
        [{"terms": {"access_deny_groups": groups}}] if groups else []
    )
    visible: list[dict[str, Any]] = []
    if granted:
        visible.append(
            {
                "bool": {
                    "filter": [{"term": {HAS_ACCESS: True}}],
                    "should": granted,
                    "minimum_should_match": 1,
                    "must_not": denied,
                }
            }
        )
    if not required:
        visible.append(_not({"term": {HAS_ACCESS: True}}))  # no list, or a chunk indexed before lists existed
    if not visible:
        return MATCH_NONE
    return visible[0] if len(visible) == 1 else {"bool": {"should": visible, "minimum_should_match": 1}}


def build_document_filters(
    expression: Expression | None, user: str | None, groups: Collection[str], *, required: bool
) -> list[dict[str, Any]]:
    """The clauses to append to a search's `bool.filter` list (both legs): the access clause always (a document
    with a list is never visible to a query that names no principal of it), the attribute clause when given."""
    clauses = [build_access_filter(user, groups, required=required)]
    if expression is not None:
        clauses.append(build_attribute_filter(expression))
    return clauses
