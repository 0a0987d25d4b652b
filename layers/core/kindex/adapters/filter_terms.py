"""The typed key-value term encoding that both search engines index document attributes with (OpenSearch keyword
fields, tantivy raw text fields), so that one design answers one filter the same way everywhere.

A document's attributes become terms in five fields whatever keys a tenant uses, so the number of mapped fields never
grows, and a key's type is part of the field it lands in, so two tenants' `year` (a number for one, a string for the
other) never conflict:

- `attr_k`: each key present (`$exists`);
- `attr_s`: `key<US>value` for each string, and each item of a list of strings (Mongo: `$eq` on a list is "holds");
- `attr_l`: `key<US>item` for each item of a list of strings only (`$contains`);
- `attr_n`: `key<US>` + 16 hex digits of the number's order-preserving float64 encoding (`sortable_number`), so a
  byte-wise range over the terms is a numeric range and `2020` and `2020.0` are one term;
- `attr_b`: `key<US>true` / `key<US>false`.

<US> is the ASCII unit separator (0x1f): keys cannot contain it (`kindex.domain.filters.KEY_PATTERN`), so a key's
terms always start with `key<US>` and no value can forge another key's term. docs/decisions.md (2026-12-01, "Document
attributes and access lists") has the measurements behind this choice.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kindex.domain.filters import AttributeValue

SEPARATOR = "\x1f"
KEYS, STRINGS, LISTS, NUMBERS, BOOLEANS = "attr_k", "attr_s", "attr_l", "attr_n", "attr_b"
ATTRIBUTE_FIELDS = (KEYS, STRINGS, LISTS, NUMBERS, BOOLEANS)
# One past the last hex digit: `key<US>` + NUMBER_END bounds a key's numbers from above.
NUMBER_END = "g"
NUMBER_DIGITS = 16
_SIGN = 1 << 63
_ALL = (1 << 64) - 1


def sortable_number(number: int | float) -> str:
    """16 lower-case hex digits whose byte order is the numeric order of `number` (an IEEE 754 double with the sign
    bit flipped for positives and every bit flipped for negatives). -0.0 is 0.0; NaN never reaches here."""
    bits = struct.unpack(">Q", struct.pack(">d", float(number) + 0.0))[0]
    return f"{(bits ^ _ALL) if bits & _SIGN else (bits | _SIGN):016x}"


def next_sortable(encoded: str) -> str | None:
    """The encoding just above `encoded` (None at the very top): a strict bound `> x` is `>= next_sortable(x)`."""
    value = int(encoded, 16) + 1
    return None if value > _ALL else f"{value:016x}"


def previous_sortable(encoded: str) -> str | None:
    """The encoding just below `encoded` (None at the bottom): `< x` is `<= previous_sortable(x)`."""
    value = int(encoded, 16) - 1
    return None if value < 0 else f"{value:016x}"


def term(key: str, value: str) -> str:
    return f"{key}{SEPARATOR}{value}"


def string_term(key: str, value: str) -> str:
    return term(key, value)


def number_term(key: str, number: int | float) -> str:
    return term(key, sortable_number(number))


def boolean_value(value: bool) -> str:
    return "true" if value else "false"


def boolean_term(key: str, value: bool) -> str:
    return term(key, boolean_value(value))


def attribute_terms(attributes: Mapping[str, AttributeValue] | None) -> dict[str, list[str]]:
    """The terms of validated attributes, per field (every field present, empty lists included, so that a rewrite
    of a chunk clears what an earlier version set)."""
    terms: dict[str, list[str]] = {field: [] for field in ATTRIBUTE_FIELDS}
    for key, value in (attributes or {}).items():
        terms[KEYS].append(key)
        if isinstance(value, bool):
            terms[BOOLEANS].append(boolean_term(key, value))
        elif isinstance(value, int | float):
            terms[NUMBERS].append(number_term(key, value))
        elif isinstance(value, str):
            terms[STRINGS].append(string_term(key, value))
        else:
            items = list(dict.fromkeys(value))
            terms[STRINGS].extend(string_term(key, item) for item in items)
            terms[LISTS].extend(string_term(key, item) for item in items)
    return terms
