"""Blob keys and paging cursors: pure functions shared by every adapter."""

from __future__ import annotations

import base64
import binascii
import json
from urllib.parse import quote, unquote, unquote_plus

from kindex.domain.errors import InvalidInput

BLOB_ROOT = "tenants"


def _part(value: str) -> str:
    return quote(value, safe="")


def document_prefix(tenant: str, collection: str, document: str) -> str:
    return f"{BLOB_ROOT}/{_part(tenant)}/collections/{_part(collection)}/documents/{_part(document)}/"


def tenant_collections_prefix(tenant: str) -> str:
    return f"{BLOB_ROOT}/{_part(tenant)}/collections/"


def collection_prefix(tenant: str, collection: str) -> str:
    return f"{BLOB_ROOT}/{_part(tenant)}/collections/{_part(collection)}/"


def blob_key(tenant: str, collection: str, document: str, filename: str) -> str:
    """`tenants/{tenant}/collections/{collection}/documents/{document}/{filename}`, each part URL-encoded."""
    return document_prefix(tenant, collection, document) + _part(filename)


def parse_blob_key(key: str) -> tuple[str, str, str, str] | None:
    """(tenant, collection, document, filename) of a blob key, or None if the key is not a document blob."""
    parts = key.split("/")
    if len(parts) != 7 or parts[0] != BLOB_ROOT or parts[2] != "collections" or parts[4] != "documents":
        return None
    tenant, collection, document, filename = (unquote(p) for p in (parts[1], parts[3], parts[5], parts[6]))
    if not all((tenant, collection, document, filename)):
        return None
    return tenant, collection, document, filename


def decode_s3_event_key(raw: str) -> str:
    """S3 notifications carry keys form-encoded (`+` for space, `%2F` for '/'): undo exactly that once."""
    return unquote_plus(raw)


def encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": last_id}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["after"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise InvalidInput("cursor is not a cursor returned by this API") from error
    if not isinstance(value, str):
        raise InvalidInput("cursor is not a cursor returned by this API")
    return value
