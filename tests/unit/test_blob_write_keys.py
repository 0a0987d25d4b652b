"""Blob keys unique to one API write: the version, time and token they carry, and the file name readers still see."""

from datetime import datetime, timezone

import pytest

from kindex.domain import keys

pytestmark = pytest.mark.unit

WHEN = datetime(2024, 5, 17, 8, 30, 15, 123000, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "filename",
    [
        "content.txt",
        "report 2024.pdf",
        "a@b.txt",
        "v1.2.0123456789abcdef@x.md",
        "日本語 ✓.docx",
        "50% off?.txt",
        "~tilde~",
    ],
)
def test_write_key_round_trips_the_document_and_file_name(filename):
    # Given a key made for version 7 of a document with awkward ids
    key = keys.write_blob_key(
        "t 1", "My Coll", "déjà vu?", filename, version=7, written_at=WHEN, token="0123456789abcdef"
    )
    # Then it keeps the 7-part layout under the document's prefix
    assert key.startswith(keys.document_prefix("t 1", "My Coll", "déjà vu?")) and len(key.split("/")) == 7
    # And readers get the document and the file name as given, without the write's prefix
    assert keys.parse_blob_key(key) == ("t 1", "My Coll", "déjà vu?", filename)
    # And the write it belongs to
    assert keys.blob_write(key) == keys.BlobWrite(7, WHEN, "0123456789abcdef")


def test_two_writes_of_the_same_version_get_different_keys():
    made = {keys.write_blob_key("t", "c", "d", "content.txt", version=2, written_at=WHEN) for _ in range(100)}
    assert len(made) == 100


def test_the_same_ids_in_two_tenants_never_share_a_key():
    a = keys.write_blob_key("a", "c", "d", "content.txt", version=1, written_at=WHEN, token="0" * 16)
    b = keys.write_blob_key("b", "c", "d", "content.txt", version=1, written_at=WHEN, token="0" * 16)
    assert a != b and not b.startswith(keys.document_prefix("a", "c", "d"))


@pytest.mark.parametrize(
    "key",
    [
        keys.blob_key("t", "c", "d", "notes.md"),  # a file dropped into the bucket
        keys.blob_key("t", "c", "d", "v1.2.0123456789abcdef@x.md"),  # built by blob_key: its '@' is encoded
        "tenants/t/collections/c/documents/d/v1.2.0123456789ABCDEF@x.md",  # upper-case token: not ours
        "tenants/t/collections/c/documents/d/v1.2.0123456789abcde@x.md",  # 15 hex digits
        "tenants/t/collections/c/documents/d/v.2.0123456789abcdef@x.md",  # no version
        "tenants/t/collections/c/documents/d/v1.2.0123456789abcdef@",  # no file name
        "tenants/t/collections/c/other/d/v1.2.0123456789abcdef@x.md",  # not a document blob
    ],
)
def test_keys_not_made_for_a_write_are_not_taken_for_one(key):
    assert keys.blob_write(key) is None


def test_a_dropped_file_keeps_its_whole_name():
    key = keys.blob_key("t", "c", "d", "me@example.txt")
    assert keys.parse_blob_key(key)[3] == "me@example.txt"
    # written to the bucket by hand with a raw '@', it is not a key kindex writes: ignored, never taken for a write
    assert keys.parse_blob_key("tenants/t/collections/c/documents/d/me@example.txt") is None
    assert keys.blob_write("tenants/t/collections/c/documents/d/me@example.txt") is None
    # and a hand-made name that imitates a write's prefix, encoded as kindex would, stays a plain file
    imitation = keys.blob_key("t", "c", "d", "v1.1.0123456789abcdef@x.txt")
    assert keys.parse_blob_key(imitation)[3] == "v1.1.0123456789abcdef@x.txt" and keys.blob_write(imitation) is None


def test_s3_event_encoding_round_trips_a_write_key():
    key = keys.write_blob_key("t", "c", "My Doc", "a b.txt", version=3, written_at=WHEN, token="abcdef0123456789")
    from urllib.parse import quote_plus

    assert keys.decode_s3_event_key(quote_plus(key, safe="/")) == key
