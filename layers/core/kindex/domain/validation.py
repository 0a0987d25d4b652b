"""Turning pydantic validation errors into one-line domain errors that name the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from kindex.domain.errors import InvalidInput

T = TypeVar("T")

# Strict fields refuse other JSON types: say what is expected rather than pydantic's "valid integer", which reads
# as if "5" were one.
_STRICT_TYPE_MESSAGES = {
    "int_type": "must be a JSON integer (not a string, a boolean or a number with a fraction)",
    "float_type": "must be a JSON number (not a string or a boolean)",
    "bool_type": "must be true or false",
}


def describe(error: ValidationError | list[dict], *, skip_prefix: tuple[str, ...] = ()) -> str:
    """'field: problem; other: problem' from pydantic error details."""
    details = error.errors(include_url=False, include_input=False) if isinstance(error, ValidationError) else error
    parts = []
    for detail in details:
        loc = [str(p) for p in detail.get("loc", ()) if str(p) not in skip_prefix]
        message = str(detail.get("msg", "invalid value")).removeprefix("Value error, ")
        if detail.get("type") == "extra_forbidden":
            message = "unknown field"
        message = _STRICT_TYPE_MESSAGES.get(str(detail.get("type")), message)
        field = ".".join(loc)
        # A value type that checks a nested value (domain/filters.py) says where inside it: `attributes.region`,
        # `access.groups[3]`, rather than `attributes: region: ...`.
        refused = (detail.get("ctx") or {}).get("error")
        where, problem = getattr(refused, "where", None), getattr(refused, "problem", None)
        if isinstance(where, str) and where and isinstance(problem, str):
            field = f"{field}{where}" if where.startswith("[") or not field else f"{field}.{where}"
            message = problem
        parts.append(f"{field}: {message}" if field else message)
    return "; ".join(parts) or "invalid input"


def validated(build: Callable[[], T]) -> T:
    try:
        return build()
    except ValidationError as error:
        raise InvalidInput(describe(error)) from error
