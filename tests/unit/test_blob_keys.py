"""Blob keys: ids map to keys one to one, every key stays in its folder, and only canonical keys name documents."""

import itertools
import unicodedata

import pytest

from kindex.adapters.aws.dynamodb_chunks import chunked_documents_pk, chunks_pk
from kindex.adapters.aws.dynamodb_jobs import jobs_pk
from kindex.adapters.aws.dynamodb_metadata import (
    collections_pk,
    documents_pk,
    tenant_keys_pk,
)
from kindex.adapters.aws.dynamodb_query_log import query_pk
from kindex.domain import keys
from kindex.domain.errors import InvalidInput

pytestmark = pytest.mark.unit

# Ids an attacker would try: path steps, their encodings, escapes of each other, case, both unicode forms, '~',
# separators of the DynamoDB keys, and names of the folder store's own files.
HOSTILE_IDS = [
    ".",
    "..",
    "...",
    ".a",
    "a.",
    "%2E",
    "%2e",
    "%2E%2E",
    "%252E",
    "%",
    "%25",
    "%2F",
    "a%2Fb",
    "~",
    "%7E",
    "~a",
    "A",
    "a",
    "Doc",
    "doc",
    "DOC",
    unicodedata.normalize("NFC", "é"),
    unicodedata.normalize("NFD", "é"),
    "\ufb01",
    "fi",
    "a b",
    "a+b",
    "a%20b",
    "a#b",
    "a%23b",
    "#",
    "T#x#C#y",
    "KEYS",
    "COLLECTIONS",
    ".tmp",
    ".tmp-x",
    ".tmp-abcd1234",
    "tenants",
    "documents",
    "\\",
    "a\\..",
    "日本",
    "\U0001f600",
]


def test_the_mapping_is_injective_for_every_part():
    # Given every pair of distinct hostile ids / When each is used in each position of a key
    base = ["t", "c", "d", "f.txt"]
    seen: dict[str, tuple] = {}
    for position, value in itertools.product(range(4), HOSTILE_IDS):
        parts = list(base)
        parts[position] = value
        key = keys.blob_key(*parts)
        # Then no two id tuples share a key, and the key is one folder level per part (no part adds or removes one)
        assert seen.setdefault(key, tuple(parts)) == tuple(parts), (key, seen[key], parts)
        assert len(key.split("/")) == 7


@pytest.mark.parametrize("value", HOSTILE_IDS)
def test_no_segment_is_a_path_step_and_each_round_trips(value):
    # Given a hostile id in every position / When its key is built
    key = keys.blob_key(value, value, value, value)
    segments = key.split("/")
    # Then no segment is empty, '.' or '..' or contains a separator, so the key cannot leave its folder
    assert not {"", ".", ".."} & set(segments)
    assert all(segment.isascii() and "\\" not in segment for segment in segments[1::2])
    # And the key parses back to exactly the ids, unless the id is one no document may have
    parsed = keys.parse_blob_key(key)
    if value in (".", ".."):
        assert parsed is None
    else:
        assert parsed == (value, value, value, value)


def test_dot_ids_are_encoded_not_interpreted():
    assert keys.document_prefix("t", "..", ".") == "tenants/t/collections/%2E%2E/documents/%2E/"
    assert keys.collection_prefix("..", "c") == "tenants/%2E%2E/collections/c/"
    # while an id that merely starts with a dot keeps its readable key (stored keys do not change)
    assert keys.blob_key("t", "c", ".hidden", ".tmp-x") == "tenants/t/collections/c/documents/.hidden/.tmp-x"


@pytest.mark.parametrize(
    "key",
    [
        "tenants/t/collections/c/documents/My Doc/notes.md",  # a raw space: blob_key writes %20
        "tenants/t/collections/c/documents/d/%41.txt",  # 'A' needlessly escaped
        "tenants/t/collections/c/documents/d/%2e%2e",  # lowercase escape of '..'
        "tenants/t/collections/c/documents/%2E/f.txt",  # the id '.'
        "tenants/t/collections/c/documents/../f.txt",
        "tenants/t/collections/c/documents/d/%FF.txt",  # not UTF-8
        "tenants/t/collections/c/documents/d/%ED%A0%80",  # an encoded lone surrogate
        "tenants/t/collections/c/documents/a%2Fb/f.txt",  # '/' is not allowed in ids
        "tenants/t/collections/c/documents/d/%00",  # control character
        "tenants/t/collections/c/documents//f.txt",
    ],
)
def test_only_canonical_keys_name_a_document(key):
    # Given keys no `blob_key` call writes / When parsed / Then none names a document, so two objects can never
    # claim one document and a document's prefix holds every object that made it
    assert keys.parse_blob_key(key) is None


def test_too_long_keys_are_refused_with_422():
    # Given four ids that are each acceptable, but whose key would pass S3's 1,024 bytes together
    long = "x" * 255
    with pytest.raises(InvalidInput, match="1024"):
        keys.blob_key(long, long, long, long)
    assert len(keys.blob_key(long, long, long, "x" * 220)) <= keys.MAX_KEY_BYTES


def test_lone_surrogates_are_refused_not_crashed():
    with pytest.raises(InvalidInput, match="surrogate"):
        keys.blob_key("t", "c", "d", "\ud800.txt")


def test_dynamodb_partitions_are_injective_across_tenants():
    # Given tenants, collections and documents whose ids differ only by escaping or look like key fragments
    ids = [
        "a",
        "a#b",
        "a%23b",
        "a%b",
        "a%25b",
        "#",
        "%23",
        "C",
        "C#x",
        "KEYS",
        "JOBS",
        "COLLECTIONS",
        "Q",
        "D",
        "CHUNKDOCS",
        "a#C#b",
    ]
    builders = {
        "collections": lambda t, c, d: collections_pk(t),
        "documents": lambda t, c, d: documents_pk(t, c),
        "keys": lambda t, c, d: tenant_keys_pk(t),
        "jobs": lambda t, c, d: jobs_pk(t),
        "chunks": lambda t, c, d: chunks_pk(t, c, d),
        "chunkdocs": lambda t, c, d: chunked_documents_pk(t, c),
        "queries": lambda t, c, d: query_pk(t, d),
    }
    seen: dict[str, tuple] = {}
    for (kind, build), t, c, d in itertools.product(builders.items(), ids, ids, ids):
        logical = {
            "collections": (kind, t),
            "documents": (kind, t, c),
            "keys": (kind, t),
            "jobs": (kind, t),
            "chunks": (kind, t, c, d),
            "chunkdocs": (kind, t, c),
            "queries": (kind, t, d),
        }[kind]
        # When their partition keys are built / Then two different things never share one
        assert seen.setdefault(build(t, c, d), logical) == logical


def test_ingest_group_is_the_tenant_segment_and_one_valid_group_id_per_tenant():
    from kindex.domain.keys import MESSAGE_GROUP_MAX, blob_key, ingest_group

    # Given keys of tenants with plain, encoded, very long and hand-typed ids
    plain = blob_key("acme", "c", "d", "a.md")
    encoded = blob_key("日本 x", "c", "d", "a.md")
    long_tenant = "t" * 255
    hand_typed = "tenants/raw space/collections/c/documents/d/a.md"
    # Then the group is the tenant's segment, the same for every document of the tenant and no other's
    assert ingest_group(plain) == "acme" == ingest_group(blob_key("acme", "other", "e", "b.pdf"))
    assert ingest_group(encoded) == "%E6%97%A5%E6%9C%AC%20x" != ingest_group(blob_key("日本", "c", "d", "a.md"))
    # And a segment SQS would refuse (too long, or a character outside its set) becomes one hashed group id
    long_group = ingest_group(blob_key(long_tenant, "c", "d", "a.md"))
    assert (
        long_group == ingest_group(blob_key(long_tenant, "c2", "d2", "b.md")) and len(long_group) <= MESSAGE_GROUP_MAX
    )
    assert long_group != ingest_group(blob_key("t" * 254, "c", "d", "a.md"))
    assert ingest_group(hand_typed).startswith("sha256-")
    # And a key outside tenants/ has no group (SQS counts such a message as a tenant of its own)
    assert ingest_group("other/x") is None and ingest_group("tenants//x") is None
