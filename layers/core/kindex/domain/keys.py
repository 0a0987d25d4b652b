"""Blob keys and paging cursors: pure functions shared by every adapter."""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
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


# The file name of a blob written by the API: `v{version}.{unix ms}.{16 hex}@{encoded file name}`. `_part` encodes
# every '@' of a file name, so the prefix cannot be confused with a name built here; a file dropped into the bucket
# by hand under exactly this pattern would be taken for an API write (and ignored unless its document points at it).
_WRITE_NAME = re.compile(r"^v([0-9]{1,15})\.([0-9]{1,15})\.([0-9a-f]{16})@(.+)$")


@dataclass(frozen=True)
class BlobWrite:
    """What the key of a blob written by one API write says about that write."""

    version: int  # the document version the write commits (its conditional metadata write expects version - 1)
    written_at: datetime  # when the bytes were written (UTC, millisecond precision)
    token: str  # random: two writes of the same version (a race) never share a key


def write_blob_key(tenant: str, collection: str, document: str, filename: str, *, version: int,
                   written_at: datetime | None = None, token: str | None = None) -> str:
    """A key unique to one write of the document's content: the write's version, time and a random token go in the
    file name (the key keeps the 7-part layout, so every reader of `parse_blob_key` still finds the file name).

    Why: the bytes are stored before the version-checked metadata write that makes them the document's content.
    With a key per write, a write that loses that race never overwrites the winner's bytes, and deletes only its
    own blob."""
    when = written_at or datetime.now(timezone.utc)
    millis = int(when.timestamp() * 1000)
    return document_prefix(tenant, collection, document) + \
        f"v{version}.{millis}.{token or secrets.token_hex(8)}@{_part(filename)}"


def blob_write(key: str) -> BlobWrite | None:
    """The write a key was made for (`write_blob_key`), or None for any other key (a file dropped in by hand)."""
    match = _WRITE_NAME.match(key.rsplit("/", 1)[-1])
    if match is None or parse_blob_key(key) is None:
        return None
    version, millis, token, _ = match.groups()
    return BlobWrite(int(version), datetime.fromtimestamp(int(millis) / 1000, timezone.utc), token)


def parse_blob_key(key: str) -> tuple[str, str, str, str] | None:
    """(tenant, collection, document, filename) of a blob key, or None if the key is not a document blob.
    For a key made by `write_blob_key` the file name is the one given there, without the write's prefix."""
    parts = key.split("/")
    if len(parts) != 7 or parts[0] != BLOB_ROOT or parts[2] != "collections" or parts[4] != "documents":
        return None
    match = _WRITE_NAME.match(parts[6])
    name = match.group(4) if match else parts[6]
    tenant, collection, document, filename = (unquote(p) for p in (parts[1], parts[3], parts[5], name))
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
