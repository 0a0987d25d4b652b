"""Contract of the BlobStore port: what every adapter (a local folder, a versioned S3 bucket...) must do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kindex.domain.errors import LimitExceeded, NotFound
from kindex.domain.keys import (
    blob_key,
    collection_prefix,
    document_prefix,
    parse_blob_key,
)

if TYPE_CHECKING:
    from kindex.domain.ports import BlobStore

UNICODE_KEY = blob_key("tenant é", "col #1", "dök 50%/x", "Résumé (final).pdf")

# Document ids (also used as file names) that a store could confuse: dot names, names the folder store once gave
# its temp files, case, percent-escapes and unicode normal forms.
AWKWARD_DOCUMENTS = [
    ".",
    "..",
    ".tmp-x",
    ".tmp-abcd1234",
    ".hidden",
    "Doc",
    "doc",
    "%2E",
    "é",
    "e\u0301",
    "~",
    "%7E",
    "a#b",
    "a%23b",
]


class BlobStoreContract:
    """Subclass in a `Test*` class that provides `blobs`: a fresh, empty BlobStore."""

    @pytest.fixture
    def blobs(self) -> BlobStore:
        raise NotImplementedError(f"{type(self).__name__} must provide the `blobs` fixture")

    @pytest.mark.slow
    def test_put_then_get_round_trips_bytes(self, blobs):
        # Given bytes that are not valid UTF-8 / When stored and read back / Then identical
        data = bytes(range(256)) * 10
        blobs.put_blob("a/b/file.bin", data, "application/octet-stream")
        assert blobs.get_blob("a/b/file.bin") == data

    def test_overwrite_replaces_content(self, blobs):
        blobs.put_blob("a/f.txt", b"old", "text/plain")
        blobs.put_blob("a/f.txt", b"new", "text/plain")
        assert blobs.get_blob("a/f.txt") == b"new"
        assert blobs.list_blobs("a/") == ["a/f.txt"]

    def test_get_missing_is_not_found(self, blobs):
        with pytest.raises(NotFound):
            blobs.get_blob("a/missing.txt")

    def test_blob_size_reads_the_size_without_the_body_and_none_when_missing(self, blobs):
        # Given a blob, an overwritten blob and a deleted one
        blobs.put_blob("a/f.bin", b"12345", "application/octet-stream")
        blobs.put_blob("a/g.bin", b"1", "application/octet-stream")
        blobs.put_blob("a/g.bin", b"123", "application/octet-stream")
        blobs.put_blob("a/gone.bin", b"1", "application/octet-stream")
        blobs.delete_blob("a/gone.bin")
        # When / Then sizes are the current objects', and missing keys (or a folder-like prefix) have none
        assert blobs.blob_size("a/f.bin") == 5
        assert blobs.blob_size("a/g.bin") == 3
        assert blobs.blob_size("a/gone.bin") is None
        assert blobs.blob_size("a/never.bin") is None
        assert blobs.blob_size("a") is None
        blobs.put_blob("a/empty.txt", b"", "text/plain")
        assert blobs.blob_size("a/empty.txt") == 0

    def test_get_blob_with_a_limit_refuses_larger_objects_and_reads_the_rest(self, blobs):
        # Given a 10-byte blob
        blobs.put_blob("a/f.bin", b"0123456789", "application/octet-stream")
        # When read with a limit at or above its size / Then all of it
        assert blobs.get_blob("a/f.bin", max_bytes=10) == b"0123456789"
        assert blobs.get_blob("a/f.bin", max_bytes=11) == b"0123456789"
        # And below its size / Then LimitExceeded naming both sizes, and a missing blob is still NotFound
        with pytest.raises(LimitExceeded, match=r"^File is 10 bytes; the limit is 9 bytes$"):
            blobs.get_blob("a/f.bin", max_bytes=9)
        with pytest.raises(NotFound):
            blobs.get_blob("a/missing.bin", max_bytes=9)

    def test_delete_blob_and_delete_missing(self, blobs):
        # Given a blob
        blobs.put_blob("a/f.txt", b"x", "text/plain")
        # When deleted / Then it is gone, and deleting it (or anything missing) again is fine
        blobs.delete_blob("a/f.txt")
        with pytest.raises(NotFound):
            blobs.get_blob("a/f.txt")
        blobs.delete_blob("a/f.txt")
        blobs.delete_blob("never/was.txt")
        assert blobs.list_blobs("a/") == []

    def test_delete_blob_spares_keys_that_extend_it(self, blobs):
        # Given "a/f.txt" and "a/f.txt.bak" / When deleting the first / Then the second remains
        blobs.put_blob("a/f.txt", b"1", "text/plain")
        blobs.put_blob("a/f.txt.bak", b"2", "text/plain")
        blobs.delete_blob("a/f.txt")
        assert blobs.list_blobs("a/") == ["a/f.txt.bak"]

    def test_delete_prefix_counts_and_isolates(self, blobs):
        # Given blobs under "a/b/", a sibling "a/bc/" sharing the text prefix, and others
        inside = ["a/b/1.txt", "a/b/2.txt", "a/b/deep/3.txt"]
        outside = ["a/bc/1.txt", "a/b.txt", "z/b/1.txt"]
        for key in inside + outside:
            blobs.put_blob(key, key.encode(), "text/plain")
        # When deleting the prefix "a/b/"
        deleted = blobs.delete_prefix("a/b/")
        # Then exactly the inside blobs are gone and counted
        assert deleted == len(inside)
        assert blobs.list_blobs("a/b/") == []
        assert blobs.list_blobs("") == sorted(outside)
        assert blobs.get_blob("a/bc/1.txt") == b"a/bc/1.txt"
        # And an empty prefix deletes nothing more
        assert blobs.delete_prefix("a/b/") == 0

    def test_list_blobs_sorted_with_encoded_unicode_keys(self, blobs):
        # Given document blobs whose ids need URL-encoding, written out of order
        keys = [
            blob_key("acme", "docs", doc, name)
            for doc, name in [
                ("z doc", "original.pdf"),
                ("é#1", "text.txt"),
                ("a%b", "original.pdf"),
                ("日本", "original.txt"),
                ("A", "x y.txt"),
            ]
        ]
        for key in reversed(keys):
            blobs.put_blob(key, b"x", "text/plain")
        blobs.put_blob(blob_key("other", "docs", "z doc", "original.pdf"), b"x", "text/plain")
        # When listing the tenant's collection / Then sorted, and each key parses back to its ids
        listed = blobs.list_blobs(collection_prefix("acme", "docs"))
        assert listed == sorted(keys)
        assert {parse_blob_key(k)[2] for k in listed} == {"z doc", "é#1", "a%b", "日本", "A"}

    def test_bounded_listing_continues_after_a_key(self, blobs):
        # Given 7 blobs of a collection and one of another tenant
        keys = sorted(blob_key("acme", "docs", f"d{i}", "x.txt") for i in range(7))
        for key in keys:
            blobs.put_blob(key, b"x", "text/plain")
        blobs.put_blob(blob_key("other", "docs", "d0", "x.txt"), b"x", "text/plain")
        prefix = collection_prefix("acme", "docs")
        # When walking 3 at a time / Then every key once, in order, and nothing of the other tenant
        walked, after = [], None
        while page := blobs.list_blobs(prefix, start_after=after, limit=3):
            assert len(page) <= 3
            walked, after = walked + page, page[-1]
        assert walked == keys
        # And a start key that does not exist, past the end, or a zero limit
        assert blobs.list_blobs(prefix, start_after=keys[2] + "0", limit=2) == keys[3:5]
        assert blobs.list_blobs(prefix, start_after=prefix + "\U0010ffff") == []
        assert blobs.list_blobs(prefix, limit=0) == []

    def test_unicode_keys_round_trip_and_delete_by_document_prefix(self, blobs):
        # Given two files of a unicode-named document and one of a document whose id extends it
        other = blob_key("tenant é", "col #1", "dök 50%/x2", "a.txt")
        blobs.put_blob(UNICODE_KEY, "é".encode(), "application/pdf")
        blobs.put_blob(UNICODE_KEY + ".txt", b"t", "text/plain")
        blobs.put_blob(other, b"o", "text/plain")
        assert blobs.get_blob(UNICODE_KEY) == "é".encode()
        # When deleting the document's prefix / Then only its files go
        assert blobs.delete_prefix(document_prefix("tenant é", "col #1", "dök 50%/x")) == 2
        assert blobs.list_blobs(collection_prefix("tenant é", "col #1")) == [other]

    # Keys at rest: every id has its own key, and nothing is hidden from the listing
    @pytest.mark.slow
    def test_ids_that_differ_only_by_case_escaping_or_unicode_form_are_separate_blobs(self, blobs):
        # Given one blob per awkward document id (each also as a file name), each with its own content
        written = {blob_key("acme", "docs", doc, doc): doc.encode() for doc in AWKWARD_DOCUMENTS}
        assert len(written) == len(AWKWARD_DOCUMENTS)
        for key, data in written.items():
            blobs.put_blob(key, data, "text/plain")
        # When each is read and listed / Then each has its own content, in the collection's folder only
        assert {key: blobs.get_blob(key) for key in written} == written
        assert blobs.list_blobs(collection_prefix("acme", "docs")) == sorted(written)
        assert blobs.list_blobs("") == sorted(written)
        # And deleting one document's prefix removes exactly its blob
        assert blobs.delete_prefix(document_prefix("acme", "docs", "doc")) == 1
        assert blobs.list_blobs("") == sorted(set(written) - {blob_key("acme", "docs", "doc", "doc")})

    def test_files_named_like_temp_files_are_listed_and_deleted(self, blobs):
        # Given files whose names the folder store once used for its temp files
        prefix = document_prefix("acme", "docs", "d")
        names = [".tmp-x", ".tmp-abcd1234", ".tmp"]
        for name in names:
            blobs.put_blob(prefix + name, b"x", "text/plain")
        # When the document's prefix is listed and deleted / Then every one is seen and nothing is left
        assert blobs.list_blobs(prefix) == sorted(prefix + name for name in names)
        assert blobs.delete_prefix(prefix) == 3
        assert blobs.list_blobs("") == []
