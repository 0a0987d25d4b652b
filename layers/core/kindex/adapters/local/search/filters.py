"""Attribute filters and access lists for the embedded index (pure: no I/O): a tantivy query for the keyword half
and a document mask for the vector half, both answering exactly what `kindex.domain.filters` says.

Both halves use the typed key-value terms of `kindex.adapters.filter_terms`, the very design of the OpenSearch
adapter, so there is one encoding to reason about:

- tantivy: the chunk documents carry raw text fields `attr_k attr_s attr_l attr_n attr_b` and the access fields
  (`tantivy_fields`); comparisons become term-set queries, and numeric ranges and `$starts_with` become regular
  expressions over the terms (the binding's `range_query` takes numeric fields only, and a numeric field cannot
  carry a tenant's key). A numeric range is a regex over the 16 hex digits of `filter_terms.sortable_number`, at
  most ~32 alternatives, which tantivy runs against its term dictionary (an FST) - a Lucene-style term range.
- vectors: a partition holds each row's document code (`Partition.document_codes`), and attributes and access
  lists belong to documents, so a filter is evaluated once per *document* (`DocumentTable.mask`), in numpy over
  posting lists, and the row mask is `mask[document_codes]`. The partition's `top` then searches exactly over the
  matching rows (gathered when they are few), or takes the graph's candidates when many match: usearch's Python
  binding has no predicate search, so docs/decisions.md (2026-12-01) records the measured crossover.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping
from typing import Literal

import numpy as np
import tantivy

from kindex.adapters import filter_terms as terms
from kindex.domain.filters import Access, AllOf, AttributeValue, Comparison, Expression, Scalar, admits, matches

HAS_ACCESS = "access_set"
ACCESS_FIELDS = ("access_users", "access_groups", "access_deny_users", "access_deny_groups")
HAS_ACCESS_TERM = "1"
# Characters a regex may hold as they are; every other one is written `\x{hex}`, which Rust's regex syntax reads as
# that very character (a backslash before `&`, `-` or `<` does not always mean the character itself there).
_REGEX_LITERAL = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_HEX = "0123456789abcdef"


def add_schema_fields(builder: tantivy.SchemaBuilder) -> None:
    """The filter fields of a chunk document: raw (untokenised) terms, indexed but not stored."""
    for field in (*terms.ATTRIBUTE_FIELDS, *ACCESS_FIELDS, HAS_ACCESS):
        builder.add_text_field(field, tokenizer_name="raw", index_option="basic")


def tantivy_fields(attributes: Mapping[str, AttributeValue] | None, access: Access | None) -> dict[str, list[str]]:
    """The filter fields to add to a chunk's `tantivy.Document(**fields)` (empty lists left out: tantivy has no
    empty multi-value)."""
    fields = {field: found for field, found in terms.attribute_terms(attributes).items() if found}
    if access is not None:
        fields[HAS_ACCESS] = [HAS_ACCESS_TERM]
        for field in ACCESS_FIELDS:
            if values := list(getattr(access, field.removeprefix("access_"))):
                fields[field] = values
    return fields


def _escape(text: str) -> str:
    return "".join(char if char in _REGEX_LITERAL else f"\\x{{{ord(char):x}}}" for char in text)


def hex_range_regex(low: str, high: str) -> str:
    """A regex matching exactly the lower-case hex strings of len(low) between `low` and `high` inclusive."""
    if low == high:
        return low
    rest = len(low) - 1
    if low == "0" * len(low) and high == "f" * len(high):
        return f"[0-9a-f]{{{len(low)}}}"
    if low[0] == high[0]:
        return f"{low[0]}(?:{hex_range_regex(low[1:], high[1:])})"
    parts, first, last = [], _HEX.index(low[0]), _HEX.index(high[0])
    if low[1:] != "0" * rest:
        parts.append(f"{low[0]}(?:{hex_range_regex(low[1:], 'f' * rest)})")
        first += 1
    if high[1:] != "f" * rest:
        parts.append(f"{high[0]}(?:{hex_range_regex('0' * rest, high[1:])})")
        last -= 1
    if first <= last:
        parts.append(f"[{_HEX[first : last + 1]}]" + (f"[0-9a-f]{{{rest}}}" if rest else ""))
    return "|".join(parts)


def _number_bounds(operator: str, bound: int | float) -> tuple[str, str] | None:
    """The inclusive (low, high) encodings of a range, or None when it is empty."""
    edge = terms.sortable_number(bound)
    bottom, top = "0" * terms.NUMBER_DIGITS, "f" * terms.NUMBER_DIGITS
    if operator == "$gte":
        return edge, top
    if operator == "$lte":
        return bottom, edge
    if operator == "$gt":
        above = terms.next_sortable(edge)
        return (above, top) if above is not None else None
    below = terms.previous_sortable(edge)
    return (bottom, below) if below is not None else None


def _encoded(value: Scalar) -> tuple[str, str]:
    if isinstance(value, bool):
        return terms.BOOLEANS, terms.boolean_value(value)
    if isinstance(value, int | float):
        return terms.NUMBERS, terms.sortable_number(value)
    return terms.STRINGS, value


def _grouped(key: str, values: Iterable[Scalar]) -> dict[str, list[str]]:
    by_field: dict[str, list[str]] = {}
    for value in values:
        field, encoded = _encoded(value)
        by_field.setdefault(field, []).append(terms.term(key, encoded))
    return by_field


# -- tantivy ----------------------------------------------------------------------------------------------------


class TantivyFilters:
    """Compiles expressions and access checks to zero-scored tantivy queries over `add_schema_fields`' fields."""

    def __init__(self, schema: tantivy.Schema):
        self.schema = schema

    def attributes(self, expression: Expression) -> tantivy.Query:
        return tantivy.Query.const_score_query(self._query(expression), 0.0)

    def access(self, user: str | None, groups: Collection[str], *, required: bool) -> tantivy.Query:
        """Documents `user` and `groups` may see: listed and not denied, or (unless required) without a list."""
        groups = list(dict.fromkeys(groups))
        granted = ([self._set("access_users", [user])] if user is not None else []) + (
            [self._set("access_groups", groups)] if groups else []
        )
        denied = ([self._set("access_deny_users", [user])] if user is not None else []) + (
            [self._set("access_deny_groups", groups)] if groups else []
        )
        has_list = self._set(HAS_ACCESS, [HAS_ACCESS_TERM])
        visible = []
        if granted:
            visible.append(
                tantivy.Query.boolean_query(
                    [(tantivy.Occur.Must, has_list), (tantivy.Occur.Must, self._any(granted))]
                    + [(tantivy.Occur.MustNot, query) for query in denied]
                )
            )
        if not required:
            visible.append(self._not(has_list))
        query = self._any(visible) if visible else tantivy.Query.empty_query()
        return tantivy.Query.const_score_query(query, 0.0)

    def _query(self, expression: Expression) -> tantivy.Query:
        if isinstance(expression, Comparison):
            return self._comparison(expression)
        clauses = [self._query(clause) for clause in expression.clauses]
        if isinstance(expression, AllOf):
            if not clauses:
                return tantivy.Query.all_query()
            return tantivy.Query.boolean_query([(tantivy.Occur.Must, clause) for clause in clauses])
        return self._any(clauses) if clauses else tantivy.Query.empty_query()

    def _comparison(self, comparison: Comparison) -> tantivy.Query:
        key, operator, value = comparison.key, comparison.operator, comparison.value
        if operator in ("$eq", "$ne", "$in", "$nin"):
            found = [self._set(field, found) for field, found in _grouped(key, comparison.operands()).items()]
            query = self._any(found) if found else tantivy.Query.empty_query()
            return query if operator in ("$eq", "$in") else self._not(query)
        if operator == "$exists":
            present = self._set(terms.KEYS, [key])
            return present if value else self._not(present)
        if operator == "$contains":
            return self._set(terms.LISTS, [terms.term(key, comparison.string())])
        if operator == "$starts_with":
            prefix = _escape(terms.term(key, comparison.string()))
            return tantivy.Query.regex_query(self.schema, terms.STRINGS, prefix + "(?s:.*)")
        bounds = _number_bounds(operator, comparison.bound())
        if bounds is None:
            return tantivy.Query.empty_query()
        pattern = f"{_escape(terms.term(key, ''))}(?:{hex_range_regex(*bounds)})"
        return tantivy.Query.regex_query(self.schema, terms.NUMBERS, pattern)

    def _set(self, field: str, values: list[str]) -> tantivy.Query:
        values = list(dict.fromkeys(values))
        if len(values) == 1:
            # A term set query collects every document of its terms into a bit set before the search starts, so a
            # common term (`access_set`, a group everyone is in) costs its whole posting list on every query; a term
            # query is a posting list the word query skips through (3x the unfiltered keyword p50 before).
            return tantivy.Query.term_query(self.schema, field, values[0], index_option="basic")
        return tantivy.Query.term_set_query(self.schema, field, values)

    @staticmethod
    def _any(queries: list[tantivy.Query]) -> tantivy.Query:
        return (
            queries[0]
            if len(queries) == 1
            else tantivy.Query.boolean_query([(tantivy.Occur.Should, query) for query in queries])
        )

    @staticmethod
    def _not(query: tantivy.Query) -> tantivy.Query:
        # A tantivy boolean query of only MustNot clauses matches nothing: subtract from every document instead.
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, tantivy.Query.all_query()), (tantivy.Occur.MustNot, query)]
        )


# -- the vector half --------------------------------------------------------------------------------------------


class DocumentTable:
    """One partition's documents' attributes and access lists, indexed by document code (the partition's
    `Interned` documents), as posting lists of the shared terms; `mask` evaluates a filter for every document at
    once. Writes need the partition's exclusive lock; searches share it (they only fill caches derived from the
    postings, so two searches racing on one cache compute the same value)."""

    def __init__(self) -> None:
        self._postings: dict[tuple[str, str], set[int]] = {}
        self._numbers: dict[str, dict[float, set[int]]] = {}  # key -> value -> documents
        # key -> (distinct values ascending, start of each value's documents in the next array, the documents of
        # every value in value order): a range is one slice of the last array, not a loop over the values
        self._sorted_numbers: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._strings: dict[str, list[str]] = {}  # key -> sorted distinct string values ($starts_with)
        # code -> (terms per field, attributes, access list): the terms to undo a put, the values to persist it
        self._documents: dict[int, tuple[dict[str, list[str]], Mapping[str, AttributeValue] | None, Access | None]] = {}
        self._arrays: dict[tuple[str, str], np.ndarray] = {}
        self._known_codes: np.ndarray | None = None  # `_known`'s array until the next put or remove
        self.size = 0  # one past the highest document code seen: the length of every mask

    def put(self, document: int, attributes: Mapping[str, AttributeValue] | None, access: Access | None) -> None:
        """Set (or replace) document `document`'s attributes and access list."""
        self.remove(document)
        self._known_codes = None
        fields = terms.attribute_terms(attributes)
        if access is not None:
            fields[HAS_ACCESS] = [HAS_ACCESS_TERM]
            for field in ACCESS_FIELDS:
                fields[field] = list(getattr(access, field.removeprefix("access_")))
        for field, found in fields.items():
            for term in found:
                self._posting(field, term).add(document)
        for key, value in (attributes or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._numbers.setdefault(key, {}).setdefault(float(value) + 0.0, set()).add(document)
                self._sorted_numbers.pop(key, None)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str):
                    self._strings.pop(key, None)
        self._documents[document] = (fields, dict(attributes) if attributes is not None else None, access)
        self.size = max(self.size, document + 1)

    def ensure(self, document: int) -> None:
        """Put `(document, None, None)` unless the document is known: a document indexed before attributes existed
        has none (every key missing, no access list)."""
        if document not in self._documents:
            self.put(document, None, None)

    def __contains__(self, document: int) -> bool:
        return document in self._documents

    def values(self, document: int) -> tuple[Mapping[str, AttributeValue] | None, Access | None]:
        """The document's (attributes, access list) as put; (None, None) for a code never put."""
        _, attributes, access = self._documents.get(document, (None, None, None))
        return attributes, access

    def admits(
        self,
        document: int,
        expression: Expression | None,
        user: str | None,
        groups: Collection[str],
        *,
        required: bool,
        check_access: bool = True,
    ) -> bool:
        """`mask(...)[document]` for one document, by the reference semantics (a few keyword hits to check, not a
        whole table). False for a code never put: fail closed."""
        if document not in self._documents:
            return False
        _, attributes, access = self._documents[document]
        return (not check_access or admits(access, user, groups, required)) and (
            expression is None or matches(expression, attributes)
        )

    def remove(self, document: int) -> None:
        """Forget document `document` (its code stays taken: masks keep their length)."""
        previous = self._documents.pop(document, None)
        if previous is None:
            return
        self._known_codes = None
        fields = previous[0]
        for field, found in fields.items():
            for value in found:
                self._posting(field, value).discard(document)
        for number_term in fields[terms.NUMBERS]:
            key = number_term.split(terms.SEPARATOR, 1)[0]
            for documents in self._numbers.get(key, {}).values():
                documents.discard(document)
            self._sorted_numbers.pop(key, None)
        for string_term in fields[terms.STRINGS]:
            self._strings.pop(string_term.split(terms.SEPARATOR, 1)[0], None)

    def mask(
        self,
        expression: Expression | None,
        user: str | None,
        groups: Collection[str],
        *,
        required: bool,
        documents: int | None = None,
        check_access: bool = True,
    ) -> np.ndarray:
        """A boolean array over document codes 0..`documents`-1 (default: every code put so far): the documents the
        filter and the access check both admit. A code never put, or removed, is False - fail closed: put
        `(code, None, None)` for a document without attributes or access list. The row mask of a partition is
        `mask(..., documents=len(partition.documents.values))[partition.document_codes[:partition.size]]`.
        Without `check_access` (a query with no principals) only the expression applies."""
        known = self._known()
        visible = self._access(user, groups, required=required) & known if check_access else known
        found = visible & self._evaluate(expression) if expression is not None else visible
        if documents is None or documents == self.size:
            return found
        padded = np.zeros(documents, dtype=bool)
        padded[: min(documents, self.size)] = found[:documents]
        return padded

    # -- evaluation -------------------------------------------------------------------------------------------

    def _known(self) -> np.ndarray:
        # Listing 10,000 codes costs ~0.3 ms a query; the array only changes with a put or a remove. A copy goes
        # out, so a caller that changes its mask in place never changes the cache.
        if self._known_codes is None or len(self._known_codes) != self.size:
            known = np.zeros(self.size, dtype=bool)
            known[list(self._documents)] = True
            self._known_codes = known
        return self._known_codes.copy()

    def _of(self, field: str, values: Iterable[str]) -> np.ndarray:
        found = np.zeros(self.size, dtype=bool)
        for value in values:
            found[self._array(field, value)] = True
        return found

    def _access(self, user: str | None, groups: Collection[str], *, required: bool) -> np.ndarray:
        users, groups = [user] if user is not None else [], list(groups)
        has_list = self._of(HAS_ACCESS, [HAS_ACCESS_TERM])
        granted = has_list & (self._of("access_users", users) | self._of("access_groups", groups))
        granted &= ~(self._of("access_deny_users", users) | self._of("access_deny_groups", groups))
        return granted | ~has_list if not required else granted

    def _evaluate(self, expression: Expression) -> np.ndarray:
        if isinstance(expression, Comparison):
            return self._comparison(expression)
        result = np.full(self.size, isinstance(expression, AllOf), dtype=bool)
        for clause in expression.clauses:
            if isinstance(expression, AllOf):
                result &= self._evaluate(clause)
            else:
                result |= self._evaluate(clause)
        return result

    def _comparison(self, comparison: Comparison) -> np.ndarray:
        key, operator, value = comparison.key, comparison.operator, comparison.value
        if operator in ("$eq", "$ne", "$in", "$nin"):
            found = np.zeros(self.size, dtype=bool)
            for field, encoded in _grouped(key, comparison.operands()).items():
                found |= self._of(field, encoded)
            return found if operator in ("$eq", "$in") else ~found
        if operator == "$exists":
            present = self._of(terms.KEYS, [key])
            return present if value else ~present
        if operator == "$contains":
            return self._of(terms.LISTS, [terms.term(key, comparison.string())])
        if operator == "$starts_with":
            prefixed = self._prefixed(key, comparison.string())
            return self._of(terms.STRINGS, [terms.term(key, found) for found in prefixed])
        return self._in_range(key, operator, comparison.bound())

    def _in_range(self, key: str, operator: str, bound: int | float) -> np.ndarray:
        values, starts, documents = self._sorted(key)
        side: Literal["left", "right"] = "left" if operator in ("$gte", "$lt") else "right"
        edge = int(starts[np.searchsorted(values, float(bound), side=side)])
        found = np.zeros(self.size, dtype=bool)
        found[documents[edge:] if operator in ("$gt", "$gte") else documents[:edge]] = True
        return found

    def _prefixed(self, key: str, prefix: str) -> list[str]:
        values = self._strings.get(key)
        if values is None:
            start = terms.term(key, "")
            values = self._strings[key] = sorted(
                term[len(start) :]
                for (field, term), documents in self._postings.items()
                if field == terms.STRINGS and documents and term.startswith(start)
            )
        found = []
        for value in values[bisect.bisect_left(values, prefix) :]:
            if not value.startswith(prefix):
                break
            found.append(value)
        return found

    def _sorted(self, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cached = self._sorted_numbers.get(key)
        if cached is None:
            pairs = sorted((value, documents) for value, documents in self._numbers.get(key, {}).items() if documents)
            sizes = np.array([len(documents) for _, documents in pairs], dtype=np.int64)
            cached = self._sorted_numbers[key] = (
                np.array([value for value, _ in pairs], dtype=np.float64),
                np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),  # one more than the values: the end
                np.fromiter(
                    (document for _, documents in pairs for document in documents), dtype=np.int64, count=sizes.sum()
                ),
            )
        return cached

    def _posting(self, field: str, value: str) -> set[int]:
        self._arrays.pop((field, value), None)
        return self._postings.setdefault((field, value), set())

    def _array(self, field: str, value: str) -> np.ndarray:
        array = self._arrays.get((field, value))
        if array is None:
            documents = self._postings.get((field, value), ())
            array = self._arrays[(field, value)] = np.fromiter(documents, dtype=np.int64, count=len(documents))
        return array
