"""Metadata sidecars: `<file>.metadata.json` beside a file put straight into a tenant's prefix gives that file's
document its attributes and access list, in the shape Amazon Bedrock Knowledge Bases reads:

    {"metadataAttributes": {"region": "eu", "year": 2024,
                            "tags": {"value": {"type": "STRING_LIST", "stringListValue": ["hr"]}}},
     "access": {"groups": ["hr"], "deny_users": ["mallory"]}}

`metadataAttributes` values are plain JSON values, or Bedrock's typed form `{"value": {"type": "STRING" | "NUMBER" |
"BOOLEAN" | "STRING_LIST", "stringValue" | "numberValue" | "booleanValue" | "stringListValue": ...},
"includeForEmbedding": ...}` (`includeForEmbedding` is accepted and ignored: kindex embeds the text only). `access`
is kindex's own (Bedrock keeps its access lists elsewhere), the same object as a document's `access`. A key the
sidecar leaves out is no attribute / no access list. Pure: the ingest reads the object, this judges it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kindex.domain.errors import InvalidInput
from kindex.domain.filters import validate_access, validate_attributes

SIDECAR_SUFFIX = ".metadata.json"
#: A sidecar holds at most attributes (10 KiB) and an access list (128 KiB) and some JSON around them.
MAX_SIDECAR_BYTES = 256 * 1024
_TYPED_FIELDS = {
    "STRING": "stringValue",
    "NUMBER": "numberValue",
    "BOOLEAN": "booleanValue",
    "STRING_LIST": "stringListValue",
}


def is_sidecar(filename: str) -> bool:
    """Whether a file name is a metadata sidecar (of the file named without the suffix), never a document."""
    return filename.endswith(SIDECAR_SUFFIX) and len(filename) > len(SIDECAR_SUFFIX)


def sidecar_key(key: str) -> str:
    return key + SIDECAR_SUFFIX


def described_key(key: str) -> str:
    """The key of the file a sidecar's key describes."""
    return key[: -len(SIDECAR_SUFFIX)]


def _plain(key: str, value: Any) -> Any:
    """A Bedrock typed value as its plain JSON value; a plain value as it is."""
    if not isinstance(value, Mapping):
        return value
    typed = value.get("value")
    if set(value) - {"value", "includeForEmbedding"} or not isinstance(typed, Mapping):
        raise InvalidInput(
            f"metadataAttributes.{key}: an object value must be Bedrock's typed form "
            '{"value": {"type": ..., "<type>Value": ...}}'
        )
    kind = typed.get("type")
    field = _TYPED_FIELDS.get(kind) if isinstance(kind, str) else None  # a list or an object is no type (unhashable)
    if field is None or set(typed) != {"type", field}:
        raise InvalidInput(
            f"metadataAttributes.{key}.value: type must be one of {', '.join(_TYPED_FIELDS)}, with "
            "exactly its one value field (stringValue, numberValue, booleanValue, stringListValue)"
        )
    return typed[field]


def parse_sidecar(data: bytes) -> dict[str, Any]:
    """The document fields a sidecar sets: {"attributes": ... or None, "access": ... or None}; InvalidInput naming
    the place (`metadataAttributes.year`, `access.groups[3]`) for anything the API would refuse in a PUT."""
    if len(data) > MAX_SIDECAR_BYTES:
        raise InvalidInput(f"the sidecar is {len(data):,} bytes, at most {MAX_SIDECAR_BYTES:,}")
    try:
        body = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise InvalidInput(f"the sidecar is not valid JSON: {str(error)[:200]}") from None
    if not isinstance(body, dict):
        raise InvalidInput("the sidecar must be a JSON object with metadataAttributes (and access)")
    unknown = sorted(set(body) - {"metadataAttributes", "access"})
    if unknown:
        raise InvalidInput(
            f"{json.dumps(unknown[0])[:80]}: unknown field: a sidecar holds metadataAttributes and access"
        )
    attributes = body.get("metadataAttributes")
    if attributes is not None:
        if not isinstance(attributes, dict):
            raise InvalidInput("metadataAttributes: must be an object")
        attributes = validate_attributes(
            {key: _plain(str(key), value) for key, value in attributes.items()}, path="metadataAttributes"
        )
    access = body.get("access")
    return {"attributes": attributes or None, "access": validate_access(access) if access is not None else None}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
