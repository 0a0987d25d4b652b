"""Contract of the BlobStore port, run against a local folder and a versioned S3 bucket (moto)."""

from __future__ import annotations

import hmac
import os
import stat
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse, urlsplit

import pytest
import requests
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.stub import Stubber
from kindex.adapters.aws import s3_blobs
from kindex.adapters.aws.s3_blobs import S3BlobStore
from kindex.adapters.local.folder_blobs import FolderBlobStore
from kindex.domain.errors import DependencyFailed, InvalidInput, LimitExceeded, NotFound
from kindex.domain.keys import (
    blob_key,
    collection_prefix,
    document_prefix,
    parse_blob_key,
)
from moto import mock_aws

from tests.support.aws import BUCKET, create_versioned_bucket, fake_aws_env, moto_client

pytestmark = pytest.mark.contract

@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """A moto S3 client with a versioned bucket, as infra/stack.py declares it."""
    fake_aws_env(monkeypatch)
    with mock_aws():
        # SigV4 like the production client (`s3_blobs.s3_client`), so presigned URLs look the same.
        client = moto_client("s3", config=Config(signature_version="s3v4"))
        create_versioned_bucket(client)
        yield client


@pytest.fixture(params=["local", "aws"])
def blobs(request: pytest.FixtureRequest, tmp_path) -> Iterator:
    if request.param == "local":
        yield FolderBlobStore(tmp_path)
    else:
        yield S3BlobStore(BUCKET, client=request.getfixturevalue("s3"))


def all_versions(client, prefix: str = "") -> list[tuple[str, str]]:
    """Every (key, kind) S3 still holds under the prefix, delete markers included."""
    found = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=prefix):
        found += [(v["Key"], "version") for v in page.get("Versions", [])]
        found += [(m["Key"], "marker") for m in page.get("DeleteMarkers", [])]
    return found


UNICODE_KEY = blob_key("tenant é", "col #1", "dök 50%/x", "Résumé (final).pdf")


def test_put_then_get_round_trips_bytes(blobs):
    # Given bytes that are not valid UTF-8 / When stored and read back / Then identical
    data = bytes(range(256)) * 10
    blobs.put_blob("a/b/file.bin", data, "application/octet-stream")
    assert blobs.get_blob("a/b/file.bin") == data


def test_overwrite_replaces_content(blobs):
    blobs.put_blob("a/f.txt", b"old", "text/plain")
    blobs.put_blob("a/f.txt", b"new", "text/plain")
    assert blobs.get_blob("a/f.txt") == b"new"
    assert blobs.list_blobs("a/") == ["a/f.txt"]


def test_get_missing_is_not_found(blobs):
    with pytest.raises(NotFound):
        blobs.get_blob("a/missing.txt")


def test_blob_size_reads_the_size_without_the_body_and_none_when_missing(blobs):
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


def test_get_blob_with_a_limit_refuses_larger_objects_and_reads_the_rest(blobs):
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


def test_delete_blob_and_delete_missing(blobs):
    # Given a blob
    blobs.put_blob("a/f.txt", b"x", "text/plain")
    # When deleted / Then it is gone, and deleting it (or anything missing) again is fine
    blobs.delete_blob("a/f.txt")
    with pytest.raises(NotFound):
        blobs.get_blob("a/f.txt")
    blobs.delete_blob("a/f.txt")
    blobs.delete_blob("never/was.txt")
    assert blobs.list_blobs("a/") == []


def test_delete_blob_spares_keys_that_extend_it(blobs):
    # Given "a/f.txt" and "a/f.txt.bak" / When deleting the first / Then the second remains
    blobs.put_blob("a/f.txt", b"1", "text/plain")
    blobs.put_blob("a/f.txt.bak", b"2", "text/plain")
    blobs.delete_blob("a/f.txt")
    assert blobs.list_blobs("a/") == ["a/f.txt.bak"]


def test_delete_prefix_counts_and_isolates(blobs):
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


def test_list_blobs_sorted_with_encoded_unicode_keys(blobs):
    # Given document blobs whose ids need URL-encoding, written out of order
    keys = [blob_key("acme", "docs", doc, name) for doc, name in
            [("z doc", "original.pdf"), ("é#1", "text.txt"), ("a%b", "original.pdf"), ("日本", "original.txt"),
             ("A", "x y.txt")]]
    for key in reversed(keys):
        blobs.put_blob(key, b"x", "text/plain")
    blobs.put_blob(blob_key("other", "docs", "z doc", "original.pdf"), b"x", "text/plain")
    # When listing the tenant's collection / Then sorted, and each key parses back to its ids
    listed = blobs.list_blobs(collection_prefix("acme", "docs"))
    assert listed == sorted(keys)
    assert {parse_blob_key(k)[2] for k in listed} == {"z doc", "é#1", "a%b", "日本", "A"}


def test_unicode_keys_round_trip_and_delete_by_document_prefix(blobs):
    # Given two files of a unicode-named document and one of a document whose id extends it
    other = blob_key("tenant é", "col #1", "dök 50%/x2", "a.txt")
    blobs.put_blob(UNICODE_KEY, "é".encode(), "application/pdf")
    blobs.put_blob(UNICODE_KEY + ".txt", b"t", "text/plain")
    blobs.put_blob(other, b"o", "text/plain")
    assert blobs.get_blob(UNICODE_KEY) == "é".encode()
    # When deleting the document's prefix / Then only its files go
    assert blobs.delete_prefix(document_prefix("tenant é", "col #1", "dök 50%/x")) == 2
    assert blobs.list_blobs(collection_prefix("tenant é", "col #1")) == [other]


# S3-specific behaviour: versioned deletes leave nothing, encryption, presigned uploads, error translation
def test_s3_deletes_leave_no_versions_or_markers(s3):
    # Given a versioned bucket holding overwritten blobs under a prefix and one outside it
    store = S3BlobStore(BUCKET, client=s3)
    for _ in range(3):
        store.put_blob("t/c/d1/f.txt", b"x", "text/plain")
    store.put_blob("t/c/d2/g.txt", b"y", "text/plain")
    store.put_blob("t/c/d2/h.txt", b"y", "text/plain")
    store.put_blob("t/cc/keep.txt", b"k", "text/plain")
    s3.delete_object(Bucket=BUCKET, Key="t/c/d2/h.txt")  # a marker left by someone else
    # When deleting the prefix and then a single blob outside it
    assert store.delete_prefix("t/c/") == 2
    # Then no version or delete marker remains under the prefix, and the other key is intact
    assert all_versions(s3, "t/c/") == []
    assert all_versions(s3, "t/cc/") == [("t/cc/keep.txt", "version")]
    store.put_blob("t/cc/keep.txt", b"k2", "text/plain")
    store.delete_blob("t/cc/keep.txt")
    assert all_versions(s3) == []


def test_s3_delete_prefix_batches_deletes(s3, monkeypatch):
    # Given more object versions than one DeleteObjects batch (batch size shrunk for the test)
    monkeypatch.setattr(s3_blobs, "DELETE_BATCH_MAX", 4)
    calls = []
    s3.meta.events.register("before-parameter-build.s3.DeleteObjects",
                            lambda **kwargs: calls.append(len(kwargs["params"]["Delete"]["Objects"])))
    store = S3BlobStore(BUCKET, client=s3)
    for i in range(9):
        store.put_blob(f"p/{i}.txt", b"x", "text/plain")
    # When deleting the prefix / Then all go, in batches no bigger than the limit
    assert store.delete_prefix("p/") == 9
    assert calls == [4, 4, 1]
    assert all_versions(s3) == []


def test_s3_put_sets_content_type_and_encryption(s3):
    store = S3BlobStore(BUCKET, client=s3)
    store.put_blob(UNICODE_KEY, b"%PDF", "application/pdf")
    head = s3.head_object(Bucket=BUCKET, Key=UNICODE_KEY)
    assert head["ContentType"] == "application/pdf"
    assert head["ServerSideEncryption"] == "AES256"


def presigned_put_accepts(url: str, headers: dict[str, str]) -> bool:
    """S3's own check of a SigV4 presigned PUT, as the service does it: rebuild the canonical request from the URL
    and the headers the client actually sends (only those the URL says are signed) and compare signatures.
    moto does not verify presigned signatures (a PUT of any length succeeds under moto), so this stands in for it."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    unsigned_query = "&".join(p for p in parts.query.split("&") if not p.startswith("X-Amz-Signature="))
    access_key, _, region, service, _ = unquote(query["X-Amz-Credential"][0]).split("/")
    sent = {name.lower(): value for name, value in headers.items()}
    signed = {name: sent.get(name, "") for name in query["X-Amz-SignedHeaders"][0].split(";") if name != "host"}
    request = AWSRequest(method="PUT", url=f"{parts.scheme}://{parts.netloc}{parts.path}?{unsigned_query}",
                         headers=signed)
    request.context["timestamp"] = query["X-Amz-Date"][0]
    auth = S3SigV4QueryAuth(Credentials(access_key, "testing", "testing"), service, region)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    return hmac.compare_digest(expected, query["X-Amz-Signature"][0])


def test_s3_presigned_put_uploads_with_the_returned_headers(s3):
    # Given a presigned upload of 8 bytes for a unicode key
    store = S3BlobStore(BUCKET, client=s3)
    url, headers, expires_at = store.presign_put(UNICODE_KEY, "application/pdf", 8, 300)
    query = parse_qs(urlparse(url).query)
    assert query["X-Amz-Expires"] == ["300"]
    # And the reported expiry is the signing time plus 300 s, never later than the URL's real expiry
    signed_at = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    assert 0 <= signed_at.timestamp() + 300 - expires_at <= 2
    assert {"content-type", "content-length"} <= set(query["X-Amz-SignedHeaders"][0].split(";"))
    assert headers == {"Content-Type": "application/pdf", "Content-Length": "8",
                       "x-amz-server-side-encryption": "AES256"}
    # When the file is PUT to it (moto intercepts the request) / Then the store reads it back
    response = requests.put(url, data=b"%PDF-1.7", headers=headers, timeout=5)
    assert response.status_code == 200
    assert store.get_blob(UNICODE_KEY) == b"%PDF-1.7"
    assert s3.head_object(Bucket=BUCKET, Key=UNICODE_KEY)["ContentType"] == "application/pdf"


def test_s3_presigned_put_is_valid_for_its_signed_length_only(s3):
    # Given a presigned upload of exactly 8 bytes
    url, headers, _ = S3BlobStore(BUCKET, client=s3).presign_put(UNICODE_KEY, "application/pdf", 8, 300)
    # When S3 checks the signature of a PUT carrying the ticket's headers / Then it matches
    assert presigned_put_accepts(url, headers)
    # And a PUT of any other length (or type) does not: S3 answers 403 SignatureDoesNotMatch
    for length in ("7", "9", "52428801", "5368709120"):
        assert not presigned_put_accepts(url, {**headers, "Content-Length": length})
    assert not presigned_put_accepts(url, {k: v for k, v in headers.items() if k != "Content-Length"})
    assert not presigned_put_accepts(url, {**headers, "Content-Type": "text/html"})


def test_s3_head_of_a_missing_key_is_none_and_other_errors_fail(monkeypatch):
    fake_aws_env(monkeypatch)
    client = moto_client("s3")
    store = S3BlobStore(BUCKET, client=client)
    with Stubber(client) as stub:
        stub.add_client_error("head_object", service_error_code="404", http_status_code=404)
        stub.add_client_error("head_object", service_error_code="403", http_status_code=403)
        assert store.blob_size("a") is None
        with pytest.raises(DependencyFailed):
            store.blob_size("a")


def test_s3_get_with_a_limit_never_reads_the_body_of_a_larger_object(monkeypatch):
    # Given an object whose GET response announces 5 GB
    fake_aws_env(monkeypatch)
    client = moto_client("s3")
    store = S3BlobStore(BUCKET, client=client)

    class Body:
        closed = False
        read_sizes: list = []

        def read(self, amount=None):
            self.read_sizes.append(amount)
            return b""

        def close(self):
            Body.closed = True

    with Stubber(client) as stub:
        stub.add_response("get_object", {"Body": Body(), "ContentLength": 5 * 1024 ** 3})
        # When read with the file limit / Then refused, the body never read, the connection closed
        with pytest.raises(LimitExceeded, match=r"^File is 5368709120 bytes; the limit is 52428800 bytes$"):
            store.get_blob("big", max_bytes=50 * 1024 * 1024)
    assert Body.read_sizes == [] and Body.closed


@pytest.mark.parametrize("code", ["AccessDenied", "SlowDown", "InternalError", "NoSuchBucket"])
def test_s3_errors_become_dependency_failed(monkeypatch, code):
    # Given a client whose calls fail with an AWS error other than a missing key
    fake_aws_env(monkeypatch)
    client = moto_client("s3")
    store = S3BlobStore(BUCKET, client=client)
    with Stubber(client) as stub:
        stub.add_client_error("get_object", service_error_code=code)
        stub.add_client_error("put_object", service_error_code=code)
        stub.add_client_error("list_objects_v2", service_error_code=code)
        # When reading, writing or listing / Then only DependencyFailed escapes
        with pytest.raises(DependencyFailed):
            store.get_blob("a")
        with pytest.raises(DependencyFailed):
            store.put_blob("a", b"x", "text/plain")
        with pytest.raises(DependencyFailed):
            store.list_blobs("a/")


def test_s3_partial_delete_failure_is_reported(monkeypatch):
    # Given a bucket that refuses to delete one of the versions
    fake_aws_env(monkeypatch)
    client = moto_client("s3")
    store = S3BlobStore(BUCKET, client=client)
    with Stubber(client) as stub:
        stub.add_response("list_object_versions", {"Versions": [{"Key": "p/a", "VersionId": "v1", "IsLatest": True}],
                                                   "IsTruncated": False})
        stub.add_response("delete_objects", {"Errors": [{"Key": "p/a", "VersionId": "v1", "Code": "AccessDenied"}]})
        # When deleting the prefix / Then DependencyFailed rather than a wrong count
        with pytest.raises(DependencyFailed):
            store.delete_prefix("p/")


def test_s3_client_is_created_lazily(s3):
    s3_blobs.s3_client.cache_clear()
    try:
        store = S3BlobStore(BUCKET)
        store.put_blob("lazy.txt", b"x", "text/plain")
        assert store.client is s3_blobs.s3_client()
        assert s3.get_object(Bucket=BUCKET, Key="lazy.txt")["Body"].read() == b"x"
        # And its presigned URLs are SigV4
        url, _, _ = store.presign_put("lazy.txt", "text/plain", 1, 60)
        assert parse_qs(urlparse(url).query)["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    finally:
        s3_blobs.s3_client.cache_clear()


# Keys and files at rest: every id has its own key, nothing is hidden from the listing, the folder store keeps
# its temp files outside the key space and its files owner-only
AWKWARD_DOCUMENTS = [".", "..", ".tmp-x", ".tmp-abcd1234", ".hidden", "Doc", "doc", "%2E", "é",
                     "e\u0301", "~", "%7E", "a#b", "a%23b"]


def test_ids_that_differ_only_by_case_escaping_or_unicode_form_are_separate_blobs(blobs):
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


def test_files_named_like_temp_files_are_listed_and_deleted(blobs):
    # Given files whose names the folder store once used for its temp files
    prefix = document_prefix("acme", "docs", "d")
    names = [".tmp-x", ".tmp-abcd1234", ".tmp"]
    for name in names:
        blobs.put_blob(prefix + name, b"x", "text/plain")
    # When the document's prefix is listed and deleted / Then every one is seen and nothing is left
    assert blobs.list_blobs(prefix) == sorted(prefix + name for name in names)
    assert blobs.delete_prefix(prefix) == 3
    assert blobs.list_blobs("") == []


@pytest.mark.parametrize("key", ["", "a//b", "a/./b", "a/../b", "../x", "./x", "a/", "/a", "a/b\x00c",
                                 ".tmp/x", ".tmp", "a/b/../../../outside"])
def test_folder_refuses_keys_that_are_not_one_path_of_their_own(tmp_path, key):
    # Given a folder store / When a key with an empty, '.' or '..' name or one inside the temp folder is used
    store = FolderBlobStore(tmp_path / "blobs")
    with pytest.raises(InvalidInput):
        store.put_blob(key, b"x", "text/plain")
    with pytest.raises(InvalidInput):
        store.get_blob(key)
    # Then nothing was written anywhere
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_folder_writes_leave_no_temp_files_even_when_they_fail(tmp_path, monkeypatch):
    # Given a folder store and some writes
    store = FolderBlobStore(tmp_path / "blobs")
    for i in range(5):
        store.put_blob(f"a/{i}.txt", b"x" * i, "text/plain")
    # When a write fails at the final rename
    def failing_replace(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr("kindex.adapters.local.folder_blobs.os.replace", failing_replace)
    with pytest.raises(OSError):
        store.put_blob("a/late.txt", b"y", "text/plain")
    # Then the temp folder is empty and the listing shows exactly the completed writes
    assert list(store.temp.iterdir()) == []
    assert store.list_blobs("") == [f"a/{i}.txt" for i in range(5)]


def test_folder_write_survives_a_concurrent_prune_of_its_folder(tmp_path, monkeypatch):
    # Given a write whose target folder is removed (emptied and pruned by a delete) just before the rename
    store = FolderBlobStore(tmp_path / "blobs")
    real_replace = os.replace
    pruned = []

    def replace_after_prune(src, dst):
        if not pruned:
            pruned.append(dst)
            Path(dst).parent.rmdir()
        return real_replace(src, dst)

    monkeypatch.setattr("kindex.adapters.local.folder_blobs.os.replace", replace_after_prune)
    # When the write goes on / Then it lands anyway
    store.put_blob("t/c/d/f.txt", b"data", "text/plain")
    assert pruned and store.get_blob("t/c/d/f.txt") == b"data"


def test_folder_drops_crash_leftovers_of_the_older_layout_once(tmp_path):
    # Given a store folder written by a version that kept temp files next to the blobs
    root = tmp_path / "blobs"
    folder = root / "tenants" / "t" / "collections" / "c" / "documents" / "d"
    folder.mkdir(parents=True)
    (folder / "f.txt").write_bytes(b"kept")
    old, recent, lookalike = folder / ".tmp-k2j4_x9a", folder / ".tmp-zzzzzzzz", folder / ".tmp-x"
    for path in (old, recent, lookalike):
        path.write_bytes(b"partial")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    os.utime(lookalike, (time.time() - 7200, time.time() - 7200))
    # When it is opened / Then only the old temp file is gone: a recent one may be a write in progress, and a
    # file not named as mkstemp names is a blob
    store = FolderBlobStore(root)
    assert sorted(p.name for p in folder.iterdir()) == [".tmp-x", ".tmp-zzzzzzzz", "f.txt"]
    # And once the store has its temp folder, no later start walks the blobs again
    os.utime(recent, (time.time() - 7200, time.time() - 7200))
    FolderBlobStore(root)
    assert recent.exists() and store.list_blobs("tenants/t/") == sorted(
        f"tenants/t/collections/c/documents/d/{name}" for name in (".tmp-x", ".tmp-zzzzzzzz", "f.txt"))


def test_folder_files_are_owner_only_whatever_the_umask(tmp_path):
    # Given a permissive umask, as a library user might have
    previous = os.umask(0o022)
    try:
        # When a store writes nested blobs
        store = FolderBlobStore(tmp_path / "data" / "blobs")
        store.put_blob(blob_key("t", "c", "d", "f.txt"), b"secret text", "text/plain")
        store.put_blob(blob_key("t", "c", "d", "f.txt"), b"overwritten", "text/plain")
    finally:
        os.umask(previous)
    # Then every folder it made is 0700 and every file 0600
    for path in (tmp_path / "data").rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700


def test_folder_warns_on_a_case_insensitive_file_system(tmp_path, monkeypatch, caplog):
    # Given a file system that folds case (simulated: every upper-cased probe name "exists")
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: real_exists(self) or
                        (self.name.startswith("CASE-PROBE-") and real_exists(self.with_name(self.name.lower()))))
    # When a store opens / Then it says that ids differing only in case would share files
    with caplog.at_level("WARNING", logger="kindex.adapters.local.folder_blobs"):
        FolderBlobStore(tmp_path / "blobs")
    assert "case-insensitive" in caplog.text
    caplog.clear()
    monkeypatch.setattr(Path, "exists", real_exists)
    with caplog.at_level("WARNING", logger="kindex.adapters.local.folder_blobs"):
        FolderBlobStore(tmp_path / "blobs2")
    assert "case-insensitive" not in caplog.text
