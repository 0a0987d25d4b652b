"""The BlobStore contract (tests/contract/mixins/blob_store.py) run against a local folder and a versioned S3 bucket
(moto), and what each adapter does beyond it."""

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
from moto import mock_aws

from kindex.adapters.aws import s3_blobs
from kindex.adapters.aws.s3_blobs import S3BlobStore
from kindex.adapters.local.folder_blobs import FolderBlobStore
from kindex.domain.errors import Conflict, DependencyFailed, InvalidInput, LimitExceeded
from kindex.domain.keys import blob_key
from tests.contract.mixins.blob_store import UNICODE_KEY, BlobStoreContract
from tests.support.aws import BUCKET, create_versioned_bucket, fake_aws_env, moto_client
from tests.support.together import run_together

pytestmark = pytest.mark.contract


def all_versions(client, prefix: str = "") -> list[tuple[str, str]]:
    """Every (key, kind) S3 still holds under the prefix, delete markers included."""
    found = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=prefix):
        found += [(v["Key"], "version") for v in page.get("Versions", [])]
        found += [(m["Key"], "marker") for m in page.get("DeleteMarkers", [])]
    return found


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
    request = AWSRequest(
        method="PUT", url=f"{parts.scheme}://{parts.netloc}{parts.path}?{unsigned_query}", headers=signed
    )
    request.context["timestamp"] = query["X-Amz-Date"][0]
    auth = S3SigV4QueryAuth(Credentials(access_key, "testing", "testing"), service, region)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    return hmac.compare_digest(expected, query["X-Amz-Signature"][0])


class TestFolderBlobStore(BlobStoreContract):
    """The local adapter; beyond the contract: keys that are one path of their own, temp files kept outside the
    key space, files owner-only."""

    @pytest.fixture
    def blobs(self, tmp_path) -> FolderBlobStore:
        return FolderBlobStore(tmp_path)

    @pytest.mark.parametrize(
        "key",
        [
            "",
            "a//b",
            "a/./b",
            "a/../b",
            "../x",
            "./x",
            "a/",
            "/a",
            "a/b\x00c",
            ".tmp/x",
            ".tmp",
            "a/b/../../../outside",
        ],
    )
    def test_refuses_keys_that_are_not_one_path_of_their_own(self, tmp_path, key):
        # Given a folder store / When a key with an empty, '.' or '..' name or one inside the temp folder is used
        store = FolderBlobStore(tmp_path / "blobs")
        with pytest.raises(InvalidInput):
            store.put_blob(key, b"x", "text/plain")
        with pytest.raises(InvalidInput):
            store.get_blob(key)
        # Then nothing was written anywhere
        assert [p for p in tmp_path.rglob("*") if p.is_file()] == []

    def test_writes_leave_no_temp_files_even_when_they_fail(self, tmp_path, monkeypatch):
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

    def test_write_survives_a_concurrent_prune_of_its_folder(self, tmp_path, monkeypatch):
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

    def test_a_create_only_write_never_replaces_a_blob_and_notifies_nothing(self, tmp_path):
        # Given a blob written once, create-only (an upload ticket's one upload), with notifications recorded
        events = []
        store = FolderBlobStore(tmp_path / "blobs", notify=lambda *event: events.append(event))
        first = store.open_put("t/c/d/v1@f.txt", "text/plain", only_if_absent=True)
        first.write(b"first")
        first.commit()
        # When another create-only write of the same key commits
        replay = store.open_put("t/c/d/v1@f.txt", "text/plain", only_if_absent=True)
        replay.write(b"other bytes")
        with pytest.raises(Conflict):
            replay.commit()
        # Then the first bytes stay, only the first write was notified, and no temp file is left
        assert store.get_blob("t/c/d/v1@f.txt") == b"first"
        assert events == [("ObjectCreated:Put", "t/c/d/v1@f.txt", 5)]
        assert list(store.temp.iterdir()) == []
        # And the file is still owner-only (a link keeps the temp file's mode)
        assert stat.S_IMODE(store._path("t/c/d/v1@f.txt").stat().st_mode) == 0o600

    def test_of_sixteen_racing_create_only_writes_of_one_key_exactly_one_commits(self, tmp_path):
        # Given 16 writers of one key, each with its bytes written and ready to commit
        store = FolderBlobStore(tmp_path / "blobs")
        writers = []
        for i in range(16):
            writer = store.open_put("t/c/d/v1@f.txt", "text/plain", only_if_absent=True)
            writer.write(f"writer {i}".encode())
            writers.append(writer)
        # When they all commit at once
        outcomes = run_together([writer.commit for writer in writers])
        # Then exactly one committed, the others were refused, and the blob is the winner's
        won = [i for i, outcome in enumerate(outcomes) if outcome is None]
        assert len(won) == 1 and all(isinstance(o, Conflict) for i, o in enumerate(outcomes) if i != won[0])
        assert store.get_blob("t/c/d/v1@f.txt") == f"writer {won[0]}".encode()
        assert list(store.temp.iterdir()) == []

    def test_a_create_only_write_survives_a_concurrent_prune_of_its_folder(self, tmp_path, monkeypatch):
        # Given a create-only write whose target folder is pruned by a delete just before the link
        store = FolderBlobStore(tmp_path / "blobs")
        real_link = os.link
        pruned = []

        def link_after_prune(src, dst):
            if not pruned:
                pruned.append(dst)
                Path(dst).parent.rmdir()
            return real_link(src, dst)

        monkeypatch.setattr("kindex.adapters.local.folder_blobs.os.link", link_after_prune)
        writer = store.open_put("t/c/d/f.txt", "text/plain", only_if_absent=True)
        writer.write(b"data")
        # When it commits / Then it lands anyway
        writer.commit()
        assert pruned and store.get_blob("t/c/d/f.txt") == b"data"
        assert list(store.temp.iterdir()) == []

    def test_drops_crash_leftovers_of_the_older_layout_once(self, tmp_path):
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
            f"tenants/t/collections/c/documents/d/{name}" for name in (".tmp-x", ".tmp-zzzzzzzz", "f.txt")
        )

    def test_files_are_owner_only_whatever_the_umask(self, tmp_path):
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

    def test_warns_on_a_case_insensitive_file_system(self, tmp_path, monkeypatch, caplog):
        # Given a file system that folds case (simulated: every upper-cased probe name "exists")
        real_exists = Path.exists
        monkeypatch.setattr(
            Path,
            "exists",
            lambda self: (
                real_exists(self)
                or (self.name.startswith("CASE-PROBE-") and real_exists(self.with_name(self.name.lower())))
            ),
        )
        # When a store opens / Then it says that ids differing only in case would share files
        with caplog.at_level("WARNING", logger="kindex.adapters.local.folder_blobs"):
            FolderBlobStore(tmp_path / "blobs")
        assert "case-insensitive" in caplog.text
        caplog.clear()
        monkeypatch.setattr(Path, "exists", real_exists)
        with caplog.at_level("WARNING", logger="kindex.adapters.local.folder_blobs"):
            FolderBlobStore(tmp_path / "blobs2")
        assert "case-insensitive" not in caplog.text


class TestS3BlobStore(BlobStoreContract):
    """The AWS adapter on a versioned bucket (moto); beyond the contract: versioned deletes leave nothing,
    encryption, presigned uploads, error translation."""

    @pytest.fixture
    def s3(self, monkeypatch: pytest.MonkeyPatch) -> Iterator:
        """A moto S3 client with a versioned bucket, as infra/stack.py declares it."""
        fake_aws_env(monkeypatch)
        with mock_aws():
            # SigV4 like the production client (`s3_blobs.s3_client`), so presigned URLs look the same.
            client = moto_client("s3", config=Config(signature_version="s3v4"))
            create_versioned_bucket(client)
            yield client

    @pytest.fixture
    def blobs(self, s3) -> S3BlobStore:
        return S3BlobStore(BUCKET, client=s3)

    def test_deletes_leave_no_versions_or_markers(self, s3):
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

    def test_delete_prefix_batches_deletes(self, s3, monkeypatch):
        # Given more object versions than one DeleteObjects batch (batch size shrunk for the test)
        monkeypatch.setattr(s3_blobs, "DELETE_BATCH_MAX", 4)
        calls = []
        s3.meta.events.register(
            "before-parameter-build.s3.DeleteObjects",
            lambda **kwargs: calls.append(len(kwargs["params"]["Delete"]["Objects"])),
        )
        store = S3BlobStore(BUCKET, client=s3)
        for i in range(9):
            store.put_blob(f"p/{i}.txt", b"x", "text/plain")
        # When deleting the prefix / Then all go, in batches no bigger than the limit
        assert store.delete_prefix("p/") == 9
        assert calls == [4, 4, 1]
        assert all_versions(s3) == []

    def test_put_sets_content_type_and_encryption(self, s3):
        store = S3BlobStore(BUCKET, client=s3)
        store.put_blob(UNICODE_KEY, b"%PDF", "application/pdf")
        head = s3.head_object(Bucket=BUCKET, Key=UNICODE_KEY)
        assert head["ContentType"] == "application/pdf"
        assert head["ServerSideEncryption"] == "AES256"

    def test_presigned_put_uploads_with_the_returned_headers(self, s3):
        # Given a presigned upload of 8 bytes for a unicode key
        store = S3BlobStore(BUCKET, client=s3)
        url, headers, expires_at = store.presign_put(UNICODE_KEY, "application/pdf", 8, 300)
        query = parse_qs(urlparse(url).query)
        assert query["X-Amz-Expires"] == ["300"]
        # And the reported expiry is the signing time plus 300 s, never later than the URL's real expiry
        signed_at = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        assert 0 <= signed_at.timestamp() + 300 - expires_at <= 2
        assert {"content-type", "content-length"} <= set(query["X-Amz-SignedHeaders"][0].split(";"))
        assert headers == {
            "Content-Type": "application/pdf",
            "Content-Length": "8",
            "x-amz-server-side-encryption": "AES256",
            "If-None-Match": "*",
        }
        # When the file is PUT to it (moto intercepts the request) / Then the store reads it back
        response = requests.put(url, data=b"%PDF-1.7", headers=headers, timeout=5)
        assert response.status_code == 200
        assert store.get_blob(UNICODE_KEY) == b"%PDF-1.7"
        assert s3.head_object(Bucket=BUCKET, Key=UNICODE_KEY)["ContentType"] == "application/pdf"

    def test_presigned_put_is_valid_for_its_signed_length_only(self, s3):
        # Given a presigned upload of exactly 8 bytes
        url, headers, _ = S3BlobStore(BUCKET, client=s3).presign_put(UNICODE_KEY, "application/pdf", 8, 300)
        # When S3 checks the signature of a PUT carrying the ticket's headers / Then it matches
        assert presigned_put_accepts(url, headers)
        # And a PUT of any other length (or type) does not: S3 answers 403 SignatureDoesNotMatch
        for length in ("7", "9", "52428801", "5368709120"):
            assert not presigned_put_accepts(url, {**headers, "Content-Length": length})
        assert not presigned_put_accepts(url, {k: v for k, v in headers.items() if k != "Content-Length"})
        assert not presigned_put_accepts(url, {**headers, "Content-Type": "text/html"})
        # And the create-only condition is signed: a PUT that drops it (to overwrite) does not match either
        assert "if-none-match" in parse_qs(urlparse(url).query)["X-Amz-SignedHeaders"][0].split(";")
        assert not presigned_put_accepts(url, {k: v for k, v in headers.items() if k != "If-None-Match"})
        assert not presigned_put_accepts(url, {**headers, "If-None-Match": '"etag"'})

    def test_presigned_put_uploads_once_and_a_replay_gets_412(self, s3):
        # Given a presigned upload, used once
        store = S3BlobStore(BUCKET, client=s3)
        url, headers, _ = store.presign_put(UNICODE_KEY, "text/plain", 8, 300)
        assert requests.put(url, data=b"original", headers=headers, timeout=5).status_code == 200
        # When the same URL is PUT again with other bytes of the signed length
        replay = requests.put(url, data=b"replayed", headers=headers, timeout=5)
        # Then S3 refuses the conditional write, and the first upload is the only version the bucket holds
        assert replay.status_code == 412 and b"PreconditionFailed" in replay.content
        assert store.get_blob(UNICODE_KEY) == b"original"
        assert all_versions(s3) == [(UNICODE_KEY, "version")]

    def test_head_of_a_missing_key_is_none_and_other_errors_fail(self, monkeypatch):
        fake_aws_env(monkeypatch)
        client = moto_client("s3")
        store = S3BlobStore(BUCKET, client=client)
        with Stubber(client) as stub:
            stub.add_client_error("head_object", service_error_code="404", http_status_code=404)
            stub.add_client_error("head_object", service_error_code="403", http_status_code=403)
            assert store.blob_size("a") is None
            with pytest.raises(DependencyFailed):
                store.blob_size("a")

    def test_get_with_a_limit_never_reads_the_body_of_a_larger_object(self, monkeypatch):
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
            stub.add_response("get_object", {"Body": Body(), "ContentLength": 5 * 1024**3})
            # When read with the file limit / Then refused, the body never read, the connection closed
            with pytest.raises(LimitExceeded, match=r"^File is 5368709120 bytes; the limit is 52428800 bytes$"):
                store.get_blob("big", max_bytes=50 * 1024 * 1024)
        assert Body.read_sizes == [] and Body.closed

    @pytest.mark.parametrize("code", ["AccessDenied", "SlowDown", "InternalError", "NoSuchBucket"])
    def test_errors_become_dependency_failed(self, monkeypatch, code):
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

    def test_partial_delete_failure_is_reported(self, monkeypatch):
        # Given a bucket that refuses to delete one of the versions
        fake_aws_env(monkeypatch)
        client = moto_client("s3")
        store = S3BlobStore(BUCKET, client=client)
        with Stubber(client) as stub:
            stub.add_response(
                "list_object_versions",
                {"Versions": [{"Key": "p/a", "VersionId": "v1", "IsLatest": True}], "IsTruncated": False},
            )
            stub.add_response("delete_objects", {"Errors": [{"Key": "p/a", "VersionId": "v1", "Code": "AccessDenied"}]})
            # When deleting the prefix / Then DependencyFailed rather than a wrong count
            with pytest.raises(DependencyFailed):
                store.delete_prefix("p/")

    def test_client_is_created_lazily(self, s3):
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
