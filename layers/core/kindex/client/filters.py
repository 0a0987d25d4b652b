"""A typed builder of attribute filters: `F.eq("region", "eu") & F.gte("year", 2020)` gives the JSON expression the
API reads as `filters.attributes` (`{"$and": [{"region": {"$eq": "eu"}}, {"year": {"$gte": 2020}}]}`).

Pure: nothing here sends a request. Each filter is checked when built, by the very parser the server runs
(`kindex.domain.filters.parse_filter`: operators, key syntax, operand types, depth and clause limits), so a filter
the server would refuse with a 422 fails here, at the line that built it, with the same message. What each operator
means - and what a document without the key gives - is the server's one definition, in the docstring of
`kindex.domain.filters`.

    from kindex.client import F
    recent_eu = F.eq("region", "eu") & F.gte("year", 2020)
    either = F.any_of(F.contains("tags", "policy"), F.starts_with("path", "hr/"))
    kx.query("handbook", "leave", filters={"attributes": recent_eu | either})   # or filters=recent_eu | either
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kindex.client.errors import InvalidFilter
from kindex.domain.errors import InvalidInput
from kindex.domain.filters import MATCH_ALL, AllOf, AnyOf, Comparison, Expression, parse_filter

Scalar = str | int | float | bool


def expression_json(expression: Expression) -> dict[str, Any]:
    """The JSON form of a parsed expression (what `parse_filter` reads back to the same expression): a comparison as
    `{key: {operator: value}}`, AND as `$and`, OR as `$or`, and no clauses at all as `{}` (every document)."""
    if isinstance(expression, Comparison):
        value = list(expression.value) if isinstance(expression.value, tuple) else expression.value
        return {expression.key: {expression.operator: value}}
    if not expression.clauses:
        return {}
    operator = "$and" if isinstance(expression, AllOf) else "$or"
    return {operator: [expression_json(clause) for clause in expression.clauses]}


def _parsed(value: object, path: str) -> Expression:
    try:
        return parse_filter(value, path=path)
    except InvalidInput as error:
        raise InvalidFilter(str(error)) from None


class Filter:
    """One attribute filter expression. `a & b` holds when both hold, `a | b` when either does (nested ANDs and ORs
    are flattened, so chains stay within the depth limit). `to_json()` is the API's form."""

    __slots__ = ("expression",)

    def __init__(self, expression: Expression):
        # Checked as the server would check it: the limits hold for the whole expression, not only its parts.
        self.expression = _parsed(expression_json(expression), "filter")

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> "Filter":
        """A filter from its JSON form (a decoded `filters.attributes`); InvalidFilter names the place at fault."""
        return cls(_parsed(value, "filter"))

    def to_json(self) -> dict[str, Any]:
        return expression_json(self.expression)

    def __and__(self, other: "Filter") -> "Filter":
        return _combined(AllOf, self, other)

    def __or__(self, other: "Filter") -> "Filter":
        return _combined(AnyOf, self, other)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filter) and other.expression == self.expression

    def __hash__(self) -> int:
        return hash(self.expression)

    def __repr__(self) -> str:
        return f"Filter({self.to_json()!r})"


def _combined(kind: type[AllOf] | type[AnyOf], *filters: Filter) -> Filter:
    clauses: list[Expression] = []
    for item in filters:
        if not isinstance(item, Filter):
            raise TypeError(f"combine filters with filters, not {type(item).__name__}")
        expression = item.expression
        # (a & b) & c is a & b & c: one level, however long the chain.
        clauses.extend(expression.clauses if isinstance(expression, kind) else (expression,))
    if not clauses:  # only ANDs of match-alls flatten to nothing: an OR always keeps its parts
        return Filter(MATCH_ALL)
    return Filter(clauses[0] if len(clauses) == 1 else kind(tuple(clauses)))


def _compare(key: str, operator: str, value: object) -> Filter:
    return Filter(_parsed({key: {operator: value}}, "filter"))


class F:
    """Constructors of `Filter`s, one per operator of the API (`$eq` ... `$starts_with`), and the combinators."""

    @staticmethod
    def eq(key: str, value: Scalar) -> Filter:
        """The attribute equals `value` (a list attribute: one of its items does). Types never mix: 1 is not true."""
        return _compare(key, "$eq", value)

    @staticmethod
    def ne(key: str, value: Scalar) -> Filter:
        """Not `eq`: also true for a document without the key."""
        return _compare(key, "$ne", value)

    @staticmethod
    def gt(key: str, value: int | float) -> Filter:
        return _compare(key, "$gt", value)

    @staticmethod
    def gte(key: str, value: int | float) -> Filter:
        return _compare(key, "$gte", value)

    @staticmethod
    def lt(key: str, value: int | float) -> Filter:
        return _compare(key, "$lt", value)

    @staticmethod
    def lte(key: str, value: int | float) -> Filter:
        return _compare(key, "$lte", value)

    @staticmethod
    def between(key: str, low: int | float, high: int | float) -> Filter:
        """low <= attribute <= high (both ends included)."""
        return _compare(key, "$gte", low) & _compare(key, "$lte", high)

    @staticmethod
    def in_(key: str, values: Iterable[Scalar]) -> Filter:
        """The attribute equals one of `values` (`in_(k, [])` matches nothing)."""
        return _compare(key, "$in", list(values))

    @staticmethod
    def not_in(key: str, values: Iterable[Scalar]) -> Filter:
        """The attribute equals none of `values`: also true for a document without the key."""
        return _compare(key, "$nin", list(values))

    @staticmethod
    def exists(key: str, present: bool = True) -> Filter:
        return _compare(key, "$exists", present)

    @staticmethod
    def contains(key: str, value: str) -> Filter:
        """A list attribute holds `value` (never a substring search: false on a plain string)."""
        return _compare(key, "$contains", value)

    @staticmethod
    def starts_with(key: str, prefix: str) -> Filter:
        return _compare(key, "$starts_with", prefix)

    @staticmethod
    def all_of(*filters: Filter) -> Filter:
        """Every one of `filters` holds; `all_of()` matches every document."""
        return _combined(AllOf, *filters) if filters else Filter(MATCH_ALL)

    @staticmethod
    def any_of(*filters: Filter) -> Filter:
        """At least one of `filters` holds (give at least one: an empty OR would match nothing, surely a slip)."""
        if not filters:
            raise InvalidFilter("any_of needs at least one filter")
        return _combined(AnyOf, *filters)

    parse = Filter.parse
