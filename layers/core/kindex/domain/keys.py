"""Blob keys and paging cursors: pure functions shared by every adapter."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote, unquote, unquote_plus

from kindex.domain.errors import InvalidInput
from kindex.domain.models import check_stored_id

BLOB_ROOT = "tenants"
# S3 refuses longer keys; each part is also one file name in the folder store (ids are checked to <= 255 bytes).
MAX_KEY_BYTES = 1024
_DOT_SEGMENTS = {".": "%2E", "..": "%2E%2E"}


def _part(value: str) -> str:
    """One id as one path segment, injectively: URL-encoding leaves only ASCII letters, digits and `_.-~`, and
    encodes '%' itself, so different ids never give the same segment (unicode forms and letter case stay apart:
    'é' precomposed and decomposed are different ids and different keys). The only segments with a path meaning,
    '.' and '..', are encoded too (`quote` never writes '%2E' for anything else), so no key steps out of its folder
    even for an id that skipped validation."""
    encoded = quote(value, safe="")
    return _DOT_SEGMENTS.get(encoded, encoded)


def document_prefix(tenant: str, collection: str, document: str) -> str:
    return f"{BLOB_ROOT}/{_part(tenant)}/collections/{_part(collection)}/documents/{_part(document)}/"


def tenant_collections_prefix(tenant: str) -> str:
    return f"{BLOB_ROOT}/{_part(tenant)}/collections/"


def collection_prefix(tenant: str, collection: str) -> str:
    return f"{BLOB_ROOT}/{_part(tenant)}/collections/{_part(collection)}/"


def blob_key(tenant: str, collection: str, document: str, filename: str) -> str:
    """`tenants/{tenant}/collections/{collection}/documents/{document}/{filename}`, each part URL-encoded.
    InvalidInput when the whole key would be longer than S3 allows (four long ids together)."""
    try:
        key = document_prefix(tenant, collection, document) + _part(filename)
    except UnicodeEncodeError as error:  # a lone surrogate: ids are checked against them, this is the backstop
        raise InvalidInput("ids and file names must be valid unicode (no lone surrogates)") from error
    if len(key) > MAX_KEY_BYTES:
        raise InvalidInput(
            f"the storage key of this file (tenant, collection id, document id and file name "
            f"URL-encoded) is {len(key)} bytes, at most {MAX_KEY_BYTES}: use a shorter id or file name"
        )
    return key


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


def write_blob_key(
    tenant: str,
    collection: str,
    document: str,
    filename: str,
    *,
    version: int,
    written_at: datetime | None = None,
    token: str | None = None,
) -> str:
    """A key unique to one write of the document's content: the write's version, time and a random token go in the
    file name (the key keeps the 7-part layout, so every reader of `parse_blob_key` still finds the file name).

    Why: the bytes are stored before the version-checked metadata write that makes them the document's content.
    With a key per write, a write that loses that race never overwrites the winner's bytes, and deletes only its
    own blob."""
    when = written_at or datetime.now(timezone.utc)
    millis = int(when.timestamp() * 1000)
    plain = blob_key(tenant, collection, document, filename)  # the same checks (length, unicode) as a plain key
    prefix, _, name = plain.rpartition("/")
    key = f"{prefix}/v{version}.{millis}.{token or secrets.token_hex(8)}@{name}"
    if len(key) > MAX_KEY_BYTES:
        raise InvalidInput(
            f"the storage key of this file (tenant, collection id, document id and file name "
            f"URL-encoded) is {len(key)} bytes, at most {MAX_KEY_BYTES}: use a shorter id or file name"
        )
    return key


def blob_write(key: str) -> BlobWrite | None:
    """The write a key was made for (`write_blob_key`), or None for any other key (a file dropped in by hand)."""
    match = _WRITE_NAME.match(key.rsplit("/", 1)[-1])
    if match is None or parse_blob_key(key) is None:
        return None
    version, millis, token, _ = match.groups()
    return BlobWrite(int(version), datetime.fromtimestamp(int(millis) / 1000, timezone.utc), token)


def parse_blob_key(key: str) -> tuple[str, str, str, str] | None:
    """(tenant, collection, document, filename) of a blob key, or None if the key is not a document blob.
    Only keys exactly as `blob_key` or `write_blob_key` write them parse (an S3 key typed by hand as `.../My Doc/...`
    does not), so keys and documents correspond one to one: two objects can never claim the same document, and a
    delete of the document's prefix removes every object that could have made it. For a key made by
    `write_blob_key` the file name is the one given there, without the write's prefix."""
    parts = key.split("/")
    if len(parts) != 7 or parts[0] != BLOB_ROOT or parts[2] != "collections" or parts[4] != "documents":
        return None
    match = _WRITE_NAME.match(parts[6])
    encoded = (parts[1], parts[3], parts[5], match.group(4) if match else parts[6])
    try:
        ids = tuple(unquote(p, errors="strict") for p in encoded)
        for value, part in zip(ids, encoded):
            check_stored_id(value)  # written before the rules for new ids tightened: such keys still parse
            if value in _DOT_SEGMENTS or _part(value) != part:
                return None
    except (UnicodeDecodeError, ValueError):
        return None
    tenant, collection, document, filename = ids
    return tenant, collection, document, filename


# SQS accepts a MessageGroupId of 1-128 characters, letters, digits and ASCII punctuation. `_part` writes only
# letters, digits, `_.-~` and `%XX`, so a tenant's key segment is a group id as it stands unless it is too long.
MESSAGE_GROUP_MAX = 128
_GROUP_SAFE = re.compile(r"^[A-Za-z0-9_.~%-]{1,128}$")


def ingest_group(key: str) -> str | None:
    """The ingest queue's message group of a blob key: its tenant (the key's encoded tenant segment), so SQS fair
    queues share the ingest functions between tenants, not between messages. A segment that is too long for a
    group id, or not as `_part` writes it (a key typed by hand), becomes `sha256-<hex of the segment>`: one tenant
    still maps to one group. None for a key outside `tenants/` (such a message counts as a tenant of its own)."""
    parts = key.split("/")
    if len(parts) < 3 or parts[0] != BLOB_ROOT or not parts[1]:
        return None
    segment = parts[1]
    if _GROUP_SAFE.match(segment):
        return segment
    return "sha256-" + hashlib.sha256(segment.encode("utf-8", "surrogatepass")).hexdigest()


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
    # JSON can spell a lone surrogate (`"\\ud800"`), which no id holds and no store can encode: not one of ours.
    if not isinstance(value, str) or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise InvalidInput("cursor is not a cursor returned by this API")
    return value
