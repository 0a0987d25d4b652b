"""Document attributes, document access lists and attribute filter expressions: the value types, the parser, and the
reference semantics every search engine must reproduce (issue 23).

Attributes: key -> string | number | boolean | list of strings. Keys match `KEY_PATTERN`; at most 64 keys, strings
of at most 1,024 characters, lists of at most 100 items, at most 10 KiB as canonical JSON. Numbers are finite, and
integers lie within +-(2^53 - 1), so every engine holds them exactly as a double.

Filter expressions have the MongoDB / Pinecone shape: `{"region": {"$eq": "eu"}, "year": {"$gte": 2020}}` (keys
side by side, and operators side by side under a key, are AND), `{"$and": [...]}`, `{"$or": [...]}`, and a bare
value as shorthand for `$eq`. At most `MAX_DEPTH` levels of objects, `MAX_CLAUSES` comparisons, `MAX_VALUES`
values in a list. Anything else is `InvalidInput` naming the place, e.g. `filters.attributes.$or[1].year.$gte`.

Semantics, decided once (every engine's compiler is tested against `matches`):

- A document without the key fails every operator except `$ne`, `$nin` and `$exists: false`, which it passes
  (they read "is not ..."; MongoDB, Pinecone and OpenSearch's must_not agree). A document with no attributes at all
  (one indexed before attributes existed) is a document whose every key is missing.
- Types never mix: a number equals a number (`2020 == 2020.0`), a string a string, a boolean a boolean; `1` is not
  `true`, and `"2020"` is not `2020`. So two tenants that give one key different types never disturb each other.
- A list attribute is its set of strings (MongoDB): `$eq`/`$in`/`$starts_with` hold when any item does, `$ne`/`$nin`
  when no item does; `$contains` holds only on a list that holds the value (on a plain string it is false: a
  substring search is not an index filter).
- Ranges (`$gt $gte $lt $lte`) compare numbers only, int and float alike; a range with a string, boolean or list is
  refused. Why not strings: engines order strings differently (collation, normalisation), the common wish (dates)
  is better kept as numbers (epoch seconds or 20240131), and `$starts_with` covers "2024-01-*". Allowing string
  ranges later breaks nobody; taking them away would.
- `$in: []` matches nothing and `$nin: []` everything; `{}` (no clauses) matches every document.

Access lists: `admits` - deny wins; a query without groups matches no group (never "no filter"); a document without
an access list is visible exactly when the collection does not require one. An access list with every list empty
admits nobody (fail closed).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Annotated, Union

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, WithJsonSchema, field_validator

from kindex.domain.errors import InvalidInput

KEY_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
MAX_KEYS = 64
MAX_STRING_CHARS = 1_024
MAX_LIST_ITEMS = 100
MAX_ATTRIBUTES_BYTES = 10 * 1024
MAX_SAFE_INTEGER = 2**53 - 1
MAX_PRINCIPAL_CHARS = 256
MAX_PRINCIPALS = 1_000
MAX_DEPTH = 4
MAX_CLAUSES = 64
MAX_VALUES = 1_000

Scalar = Union[str, int, float, bool]  # noqa: UP007 - a runtime alias that isinstance() and pydantic both read
AttributeValue = Union[str, int, float, bool, list[str]]  # noqa: UP007

EQUALITY_OPERATORS = ("$eq", "$ne")
SET_OPERATORS = ("$in", "$nin")
RANGE_OPERATORS = ("$gt", "$gte", "$lt", "$lte")
STRING_OPERATORS = ("$contains", "$starts_with")
OPERATORS = (*EQUALITY_OPERATORS, *SET_OPERATORS, *RANGE_OPERATORS, "$exists", *STRING_OPERATORS)


class _Refused(ValueError):
    """A value that breaks a rule; `where` is the path inside the value, joined to the caller's path at the edge."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where, self.problem = where, problem


def _join(path: str, where: str) -> str:
    if not where:
        return path
    return f"{path}{where}" if where.startswith("[") or not path else f"{path}.{where}"


def _domain_error(path: str, refused: _Refused) -> InvalidInput:
    where = _join(path, refused.where)
    return InvalidInput(f"{where}: {refused.problem}" if where else refused.problem)


# -- scalars ----------------------------------------------------------------------------------------------------


def _check_string(value: str, where: str, *, limit: int) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refused(where, "contains a lone surrogate (not valid Unicode)") from None
    if len(value) > limit:
        raise _Refused(where, f"longer than {limit:,} characters")


def _check_number(value: int | float, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise _Refused(where, "must be a finite number (not NaN or Infinity)")
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        raise _Refused(where, "an integer must lie within +-(2^53 - 1), which every engine holds exactly")


def _kind(value: object) -> str:
    """The JSON type's name, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "null"
    return "an object"


def _scalar(value: object, where: str) -> Scalar:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        _check_number(value, where)
        return value
    if isinstance(value, str):
        _check_string(value, where, limit=MAX_STRING_CHARS)
        return value
    raise _Refused(where, f"must be a string, a number or a boolean, not {_kind(value)}")


def _printable(text: str) -> str:
    """`text` cut to 80 characters, with lone surrogates escaped: a message must encode as UTF-8 to be sent."""
    text = text[:80]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(text)[1:-1]
    return text


def _check_key(key: object, where: str) -> str:
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        shown = json.dumps(_printable(key) if isinstance(key, str) else "key", ensure_ascii=False)
        raise _Refused(
            where, f"{shown} is not a valid attribute key: a letter, then up to 63 letters, digits, '_', '.' or '-'"
        )
    return key


# -- attributes -------------------------------------------------------------------------------------------------


def _attribute_value(key: str, value: object) -> AttributeValue:
    if isinstance(value, list):
        if len(value) > MAX_LIST_ITEMS:
            raise _Refused(key, f"a list holds at most {MAX_LIST_ITEMS} items")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise _Refused(f"{key}[{i}]", f"a list holds strings only, not {_kind(item)}")
            _check_string(item, f"{key}[{i}]", limit=MAX_STRING_CHARS)
        return list(value)
    return _scalar(value, key)


def _attributes(value: object) -> dict[str, AttributeValue]:
    if not isinstance(value, Mapping):
        raise _Refused("", f"must be an object, not {_kind(value)}")
    if len(value) > MAX_KEYS:
        raise _Refused("", f"at most {MAX_KEYS} keys")
    checked = {_check_key(key, ""): _attribute_value(key, item) for key, item in value.items()}
    size = len(canonical_json(checked).encode("utf-8"))
    if size > MAX_ATTRIBUTES_BYTES:
        raise _Refused("", f"{size:,} bytes as JSON, more than the {MAX_ATTRIBUTES_BYTES:,} allowed")
    return checked


def canonical_json(attributes: Mapping[str, AttributeValue]) -> str:
    """Sorted keys, no spaces, UTF-8 as is: the form whose size is bounded and which records store."""
    return json.dumps(attributes, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def validate_attributes(value: object, *, path: str = "attributes") -> dict[str, AttributeValue]:
    """`value` checked as document attributes (a new dict), or InvalidInput naming `path` and the key."""
    try:
        return _attributes(value)
    except _Refused as refused:
        raise _domain_error(path, refused) from None


def _attributes_field(value: object) -> dict[str, AttributeValue]:
    return _attributes(value)  # _Refused is a ValueError: pydantic reports it at the field's location


_ATTRIBUTES_SCHEMA = {
    "type": "object",
    "maxProperties": MAX_KEYS,
    "propertyNames": {"pattern": f"^{KEY_PATTERN.pattern}$"},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "maxLength": MAX_STRING_CHARS},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": {"type": "string", "maxLength": MAX_STRING_CHARS}, "maxItems": MAX_LIST_ITEMS},
        ]
    },
    "description": "Document attributes: key -> string, number, boolean or list of strings.",
}
Attributes = Annotated[dict[str, AttributeValue], PlainValidator(_attributes_field), WithJsonSchema(_ATTRIBUTES_SCHEMA)]
"""A pydantic field type for request bodies: `attributes: Attributes | None = None`."""


# -- access lists -----------------------------------------------------------------------------------------------


def _principals(values: object, where: str) -> tuple[str, ...]:
    if not isinstance(values, list | tuple):
        raise _Refused(where, f"must be a list of strings, not {_kind(values)}")
    if len(values) > MAX_PRINCIPALS:
        raise _Refused(where, f"at most {MAX_PRINCIPALS:,} principals")
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value:
            raise _Refused(f"{where}[{i}]", "a principal is a non-empty string")
        _check_string(value, f"{where}[{i}]", limit=MAX_PRINCIPAL_CHARS)
    return tuple(dict.fromkeys(values))


class Access(BaseModel):
    """Who may see a document: a query's `user` in `users` or one of its groups in `groups`, and neither in the deny
    lists (deny wins). Principals are opaque non-empty strings; duplicates are dropped, order kept."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    deny_users: tuple[str, ...] = ()
    deny_groups: tuple[str, ...] = ()

    @field_validator("users", "groups", "deny_users", "deny_groups", mode="before")
    @classmethod
    def _check(cls, values: object) -> tuple[str, ...]:
        return _principals(values, "")


def validate_principals(values: object, *, path: str) -> tuple[str, ...]:
    """A query's groups (or any principal list) checked like an access list's, or InvalidInput naming `path`."""
    try:
        return _principals(values, "")
    except _Refused as refused:
        raise _domain_error(path, refused) from None


def admits(access: Access | None, user: str | None, groups: Collection[str], required: bool) -> bool:
    """May a query by `user` in `groups` see a document with `access`? Deny wins; no groups match no group; without
    an access list the document is visible unless the collection requires one. A caller that checks many documents
    for one query passes its groups as a set: each check then costs the document's lists, not the query's 1,000
    groups times them."""
    if access is None:
        return not required
    if (user is not None and user in access.deny_users) or _meet(groups, access.deny_groups):
        return False
    return (user is not None and user in access.users) or _meet(groups, access.groups)


def _meet(groups: Collection[str], listed: tuple[str, ...]) -> bool:
    """Does one of the query's `groups` appear in a document's `listed` groups? Linear in both at most."""
    if not groups or not listed:
        return False
    if isinstance(groups, AbstractSet):
        return any(group in groups for group in listed)
    return not frozenset(listed).isdisjoint(groups)


# -- filter expressions -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Comparison:
    """`key <operator> value`: value is a Scalar ($eq $ne), a number (ranges), a tuple of Scalars ($in $nin), a
    bool ($exists) or a string ($contains $starts_with)."""

    key: str
    operator: str
    value: Scalar | tuple[Scalar, ...]

    # The operand in the type its operator gives it (the parser's `_operand` checked it): what the compilers read,
    # so that each engine's typed helpers take it without a cast.
    def operands(self) -> tuple[Scalar, ...]:
        """The values an $eq, $ne (its one value), $in or $nin (its list) comparison matches."""
        return self.value if isinstance(self.value, tuple) else (self.value,)

    def bound(self) -> int | float:
        """The number a range comparison ($gt $gte $lt $lte) compares to."""
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise TypeError(f"{self.operator} on {self.key!r} holds {_kind(self.value)}, not a number")
        return self.value

    def string(self) -> str:
        """The string of a $contains or $starts_with comparison."""
        if not isinstance(self.value, str):
            raise TypeError(f"{self.operator} on {self.key!r} holds {_kind(self.value)}, not a string")
        return self.value


@dataclass(frozen=True, slots=True)
class AllOf:
    clauses: tuple[Expression, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    clauses: tuple[Expression, ...]


Expression = Union[Comparison, AllOf, AnyOf]  # noqa: UP007
MATCH_ALL = AllOf(())


class _Parser:
    """One parse: counts the comparisons as it goes, so 10,000 clauses stop at the 65th."""

    def __init__(self) -> None:
        self.clauses = 0

    def expression(self, value: object, where: str, depth: int) -> Expression:
        if not isinstance(value, Mapping):
            raise _Refused(where, f"must be an object, not {_kind(value)}")
        if depth > MAX_DEPTH:
            raise _Refused(where, f"nested deeper than {MAX_DEPTH} levels")
        clauses: list[Expression] = []
        for key, item in value.items():
            here = _join(where, _printable(str(key)))
            if key in ("$and", "$or"):
                clauses.append(self.logical(key, item, here, depth))
            elif isinstance(key, str) and key.startswith("$"):
                raise _Refused(here, "unknown operator here: only $and and $or combine clauses")
            else:
                clauses.extend(self.field(_check_key(key, here), item, here))
        return clauses[0] if len(clauses) == 1 else AllOf(tuple(clauses))

    def logical(self, operator: str, items: object, where: str, depth: int) -> Expression:
        if not isinstance(items, list) or not items:
            raise _Refused(where, "must be a non-empty list of filter objects")
        if len(items) > MAX_CLAUSES:
            raise _Refused(where, f"at most {MAX_CLAUSES} clauses")
        parts = tuple(self.expression(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(items))
        return AllOf(parts) if operator == "$and" else AnyOf(parts)

    def field(self, key: str, condition: object, where: str) -> list[Comparison]:
        if not isinstance(condition, Mapping):
            return [self.comparison(key, "$eq", condition, where)]  # {"region": "eu"} is {"region": {"$eq": "eu"}}
        if not condition:
            raise _Refused(where, "needs at least one operator")
        return [
            self.comparison(key, str(operator), value, _join(where, _printable(str(operator))))
            for operator, value in condition.items()
        ]

    def comparison(self, key: str, operator: str, value: object, where: str) -> Comparison:
        self.clauses += 1
        if self.clauses > MAX_CLAUSES:
            raise _Refused(where, f"more than {MAX_CLAUSES} comparisons in one filter")
        if operator not in OPERATORS:
            raise _Refused(where, f"unknown operator; use one of {', '.join(OPERATORS)}")
        return Comparison(key, operator, _operand(operator, value, where))


def _operand(operator: str, value: object, where: str) -> Scalar | tuple[Scalar, ...]:
    if operator in EQUALITY_OPERATORS:
        if isinstance(value, list):
            raise _Refused(
                where, f"{operator} compares one value; use {'$in' if operator == '$eq' else '$nin'} for a list"
            )
        return _scalar(value, where)
    if operator in SET_OPERATORS:
        if not isinstance(value, list):
            raise _Refused(where, f"{operator} takes a list of values, not {_kind(value)}")
        if len(value) > MAX_VALUES:
            raise _Refused(where, f"at most {MAX_VALUES:,} values")
        # Deduplicated by type and value: Python's True == 1 would otherwise drop one of [1, true].
        unique = {
            (isinstance(item, bool), item): item
            for item in (_scalar(item, f"{where}[{i}]") for i, item in enumerate(value))
        }
        return tuple(unique.values())
    if operator in RANGE_OPERATORS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Refused(where, f"{operator} compares numbers, not {_kind(value)}")
        _check_number(value, where)
        return value
    if operator == "$exists":
        if not isinstance(value, bool):
            raise _Refused(where, f"$exists takes true or false, not {_kind(value)}")
        return value
    if not isinstance(value, str):
        raise _Refused(where, f"{operator} takes a string, not {_kind(value)}")
    _check_string(value, where, limit=MAX_STRING_CHARS)
    return value


def parse_filter(value: object, *, path: str = "filters.attributes") -> Expression:
    """The filter expression `value` (JSON already decoded) as an Expression, or InvalidInput naming the place
    (`path` + the path inside the expression). Never raises anything else, whatever `value` holds."""
    try:
        return _Parser().expression(value, "", 1)
    except _Refused as refused:
        raise _domain_error(path, refused) from None
    except RecursionError:  # a decoded JSON value nested thousands deep: refused before reaching here, but surely
        raise InvalidInput(f"{path}: nested deeper than {MAX_DEPTH} levels") from None


def _filter_field(value: object) -> Expression:
    return _Parser().expression(value, "", 1)


FilterExpression = Annotated[
    Expression,
    PlainValidator(_filter_field),
    WithJsonSchema(
        {"type": "object", "description": 'An attribute filter expression: {"year": {"$gte": 2020}, "$or": [...]}'}
    ),
]
"""A pydantic field type: `attributes: FilterExpression | None = None` parses at the edge (errors name the path)."""


# -- the reference semantics ------------------------------------------------------------------------------------


def _same(item: object, value: Scalar) -> bool:
    """Equal and of the same JSON type (Python's True == 1 must not leak in)."""
    if isinstance(value, bool) or isinstance(item, bool):
        return isinstance(value, bool) and isinstance(item, bool) and item is value
    if isinstance(value, str) or isinstance(item, str):
        return isinstance(value, str) and isinstance(item, str) and item == value
    return item == value


def _in_range(item: object, operator: str, bound: int | float) -> bool:
    if isinstance(item, bool) or not isinstance(item, int | float):
        return False
    if operator == "$gt":
        return item > bound
    if operator == "$gte":
        return item >= bound
    if operator == "$lt":
        return item < bound
    return item <= bound


def _holds(comparison: Comparison, attributes: Mapping[str, AttributeValue]) -> bool:
    operator, value = comparison.operator, comparison.value
    if operator == "$exists":
        return (comparison.key in attributes) is value
    if comparison.key not in attributes:
        return operator in ("$ne", "$nin")
    stored = attributes[comparison.key]
    items = stored if isinstance(stored, list) else [stored]
    if operator in ("$eq", "$ne", "$in", "$nin"):
        found = any(_same(item, choice) for item in items for choice in comparison.operands())
        return found is (operator in ("$eq", "$in"))
    if operator in RANGE_OPERATORS:
        bound = comparison.bound()
        return any(_in_range(item, operator, bound) for item in items)
    if operator == "$contains":
        return isinstance(stored, list) and value in stored
    prefix = comparison.string()
    return any(isinstance(item, str) and item.startswith(prefix) for item in items)


def matches(expression: Expression, attributes: Mapping[str, AttributeValue] | None) -> bool:
    """Does a document with `attributes` (None: none at all) pass `expression`? The reference every engine meets."""
    attributes = attributes or {}
    if isinstance(expression, Comparison):
        return _holds(expression, attributes)
    if isinstance(expression, AllOf):
        return all(matches(clause, attributes) for clause in expression.clauses)
    return any(matches(clause, attributes) for clause in expression.clauses)


def comparisons(expression: Expression) -> list[Comparison]:
    """Every comparison in `expression`, depth first (for compilers and logs)."""
    if isinstance(expression, Comparison):
        return [expression]
    return [found for clause in expression.clauses for found in comparisons(clause)]


def validate_access(value: object, *, path: str = "access") -> Access:
    """`value` checked as an access list, or InvalidInput naming `path` and the list (and the item) at fault."""
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{path}: must be an object, not {_kind(value)}")
    try:
        return Access.model_validate(dict(value))
    except ValidationError as error:
        raise InvalidInput(describe(error, path)) from None


def describe(error: ValidationError, path: str) -> str:
    """'path.field[i]: problem' for each of a pydantic error's details (our validators put `[i]: ` in front)."""
    parts = []
    for detail in error.errors(include_url=False, include_input=False):
        where = _join(path, ".".join(str(part) for part in detail.get("loc", ())))
        message = str(detail.get("msg", "invalid value")).removeprefix("Value error, ")
        if detail.get("type") == "extra_forbidden":
            message = "unknown field: use users, groups, deny_users, deny_groups"
        elif message.startswith("["):
            index, _, message = message.partition(": ")
            where += index
        parts.append(f"{where}: {message}")
    return "; ".join(parts)
