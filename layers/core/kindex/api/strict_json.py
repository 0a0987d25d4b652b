"""Strict JSON for request bodies: what `json.loads` accepts, minus what no client of this API means to send.

Refused, each with the path of the field it was found at:

- nesting deeper than `MAX_DEPTH` (checked by an iterative scan *before* parsing, so neither this parser nor the
  resolver's own `json.loads` can run out of stack: 10,000 levels used to end in a RecursionError and a 502);
- duplicate object keys (`json.loads` silently keeps the last one, other parsers the first: a proxy and this API
  could read two different requests);
- `NaN`, `Infinity`, `-Infinity` and numbers that overflow to them (`1e999`): not JSON, and poison for scores;
- integers beyond +-(2**53 - 1): no JSON client can hold them exactly, and none fits a field of this API (a
  4,000-digit integer used to reach float division or SQLite and end in a 500);
- lone UTF-16 surrogates (`"\\ud800"`): valid JSON escapes, but no UTF-8 string, so storing one failed with a 500.

The checks run inside the parse (hooks that only raise flags, at most doubling the parse time of a 10 MB body);
the tree is walked to find the offending path only when a flag was raised.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
MAX_INTEGER = 2**53 - 1
# Longer digit runs can be out of range; shorter ones never are (2**53 has 16 digits).
_SAFE_INTEGER_DIGITS = 15
# Python refuses to convert longer digit strings to int (sys.get_int_max_str_digits); we never need to.
_MAX_CONVERTED_DIGITS = 20

_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}
_KEY_AFTER = re.compile(r"\s*:")
_MAX_STEPS_TO_NAME = 200_000
# A \uD800-\uDFFF escape: the only way a surrogate gets into a parsed str (raw surrogates are not UTF-8).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE_SURROGATE = "string contains a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape)"


class JsonBodyError(ValueError):
    """A body this API refuses. `malformed` means it is not (acceptable) JSON at all (400); otherwise a value
    inside it is refused and `path` names where (422)."""

    def __init__(self, path: str, problem: str, *, malformed: bool = False):
        super().__init__(f"{path}: {problem}" if path else f"request body: {problem}")
        self.path = path
        self.problem = problem
        self.malformed = malformed


class _DuplicateKeys(dict):
    """An object whose pairs named some key twice (kept as a dict so the parse can go on)."""

    duplicates: list[str]


class _Refused:
    """Stands in for a refused number until the walk reports where it was."""

    def __init__(self, problem: str):
        self.problem = problem


def _repeats(keys: list[str]) -> list[str]:
    """Each key that occurs again, at its repeated occurrence, in order."""
    seen: set[str] = set()
    repeated = []
    for key in keys:
        if key in seen:
            repeated.append(key)
        seen.add(key)
    return repeated


def parse(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of `text`, or JsonBodyError naming what is refused and where."""
    check_depth(text, max_depth)
    flags: set[str] = set()

    def parse_int(digits: str) -> int | _Refused:
        if len(digits) <= _SAFE_INTEGER_DIGITS:
            return int(digits)
        value = int(digits) if len(digits.lstrip("-")) <= _MAX_CONVERTED_DIGITS else None
        if value is None or abs(value) > MAX_INTEGER:
            flags.add("number")
            return _Refused(f"integer out of range (at most {MAX_INTEGER} in absolute value)")
        return value

    def parse_float(literal: str) -> float | _Refused:
        value = float(literal)
        if math.isfinite(value):
            return value
        flags.add("number")
        return _Refused("number out of range (it overflows to infinity)")

    def parse_constant(name: str) -> _Refused:
        flags.add("number")
        return _Refused(f"{name} is not allowed (numbers must be finite)")

    def object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) == len(pairs):
            return value
        flags.add("duplicate")
        marked = _DuplicateKeys(value)
        marked.duplicates = _repeats([key for key, _ in pairs])
        return marked

    try:
        value = json.loads(
            text,
            parse_int=parse_int,
            parse_float=parse_float,
            parse_constant=parse_constant,
            object_pairs_hook=object_pairs,
        )
    except RecursionError as error:  # unreachable after check_depth; kept so no input can ever escape as a 5xx
        raise JsonBodyError("", f"nested deeper than {max_depth} levels", malformed=True) from error
    except ValueError as error:
        raise JsonBodyError("", f"not valid JSON: {str(error).splitlines()[0][:200]}", malformed=True) from error
    if flags or _SURROGATE_ESCAPE.search(text):
        _report_first_refusal(value)
    return value


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """JsonBodyError when arrays and objects nest deeper than `max_depth`.

    Iterative and linear, every step in C: escaped backslashes, then escaped quotes, are dropped (pairing
    backslashes from the left is exactly how JSON reads them), so the quotes left delimit strings; the brackets
    outside strings are then summed as a running depth. (A string regex would do, but one with an escape loop
    goes quadratic on an unterminated string full of escaped quotes.)
    """
    if text.count("[") + text.count("{") <= max_depth:
        return
    pieces = _pieces(text)
    brackets = _NOT_BRACKET.sub("", "".join(pieces[0::2]))
    if max(accumulate(map(_DEPTH_DELTA.__getitem__, brackets)), default=0) > max_depth:
        raise JsonBodyError(
            _deep_field(text, pieces, max_depth), f"nested deeper than {max_depth} levels", malformed=True
        )


def _pieces(text: str) -> list[str]:
    """Alternating pieces of `text` around its strings: pieces 0, 2, 4... are outside strings (escapes removed)."""
    return text.replace("\\\\", "").replace('\\"', "").split('"')


def _deep_field(text: str, pieces: list[str], max_depth: int) -> str:
    """The top-level key under which nesting gets too deep: '' when the body itself is the array, or when naming
    it would take too long (this runs only for refused bodies, and must stay cheap for hostile ones)."""
    if not text.lstrip().startswith("{"):
        return ""
    depth, steps, key, candidate = 0, 0, "", ""
    for index, piece in enumerate(pieces):
        steps += 1
        if index % 2:  # a string: a candidate key when it sits in the top-level object and a ':' follows it
            following = pieces[index + 1] if index + 1 < len(pieces) else ""
            if depth == 1 and _KEY_AFTER.match(following):
                candidate = piece
            continue
        for bracket in _NOT_BRACKET.sub("", piece):
            steps += 1
            if steps > _MAX_STEPS_TO_NAME:
                return ""
            if bracket in "[{":
                if depth == 1:
                    key = candidate
                depth += 1
                if depth > max_depth:
                    return _printable(key)
            else:
                depth -= 1
    return ""


def _report_first_refusal(value: Any) -> None:
    """Walk the parsed value (iteratively) and raise for the first refused number, key or string."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _Refused):
            raise JsonBodyError(_dotted(path), node.problem)
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise JsonBodyError(_dotted(path), _LONE_SURROGATE)
            continue
        if isinstance(node, dict):
            if isinstance(node, _DuplicateKeys):
                raise JsonBodyError(_dotted(path + (node.duplicates[0],)), "duplicate key")
            for key in node:
                if _SURROGATE.search(key):
                    raise JsonBodyError(_dotted(path), f"object key: {_LONE_SURROGATE}")
            stack.extend(reversed([(path + (key,), item) for key, item in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(path + (index,), item) for index, item in enumerate(node)]))


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(_printable(str(part)) for part in path)


def _printable(name: str) -> str:
    """A key as it may appear in a message: short, and without surrogates or control characters."""
    cleaned = "".join(ch if ch.isprintable() and not _SURROGATE.match(ch) else "?" for ch in name[:80])
    return cleaned + ("..." if len(name) > 80 else "")
