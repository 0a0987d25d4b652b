"""S3 adapter of the `BlobStore` port.

The production bucket is versioned. A plain DeleteObject there only stacks a delete marker on top of the old
versions, which would leave the file recoverable (and billed) after a user deleted it. Deletes here therefore remove
every version and delete marker of the affected keys, so "deleted" means gone. Overwrites keep the previous version
as a noncurrent one; expiring those is the bucket's lifecycle rule's job, not this adapter's.

Request building is pure (`build_*` functions); `S3BlobStore._call` is the one place where botocore errors become
domain errors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from kindex.adapters.aws import boto
from kindex.domain.errors import DependencyFailed, LimitExceeded, NotFound

logger = logging.getLogger(__name__)

SERVER_SIDE_ENCRYPTION = "AES256"
# DeleteObjects accepts at most 1,000 keys per request.
DELETE_BATCH_MAX = 1000
MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


@lru_cache(maxsize=3)
def s3_client(profile: str = boto.BACKGROUND) -> Any:
    """The shared boto3 S3 client, created on first use (boto3 is imported here to keep cold starts short).

    SigV4 explicitly: presigned URLs must work in every region and with SSE headers.
    """
    import boto3

    return boto3.client("s3", config=boto.client_config(profile, signature_version="s3v4"))


def build_put_request(bucket: str, key: str, data: bytes, content_type: str) -> dict[str, Any]:
    return {
        "Bucket": bucket,
        "Key": key,
        "Body": data,
        "ContentType": content_type,
        "ServerSideEncryption": SERVER_SIDE_ENCRYPTION,
    }


def build_presign_params(
    bucket: str, key: str, content_type: str, content_length: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """PutObject parameters to sign, and the headers the uploader must send with exactly those values.

    Content-Length is a signed header: S3 refuses (403 SignatureDoesNotMatch) a PUT of any other length, so the
    size the client declared, and the catalog checked against the file limit, is the only size S3 accepts.
    `If-None-Match: *` is signed too (a conditional write): S3 stores the PUT only if the key holds no object, and
    answers 412 PreconditionFailed otherwise. The key is unique to the ticket, so the URL uploads one file, once: a
    replay with other bytes can neither replace the document's content nor trigger another ingest."""
    params = {
        "Bucket": bucket,
        "Key": key,
        "ContentType": content_type,
        "ContentLength": content_length,
        "ServerSideEncryption": SERVER_SIDE_ENCRYPTION,
        "IfNoneMatch": "*",
    }
    headers = {
        "Content-Type": content_type,
        "Content-Length": str(content_length),
        "x-amz-server-side-encryption": SERVER_SIDE_ENCRYPTION,
        "If-None-Match": "*",
    }
    return params, headers


def build_delete_batches(bucket: str, versions: list[dict[str, str]]) -> Iterator[dict[str, Any]]:
    """DeleteObjects requests for (Key, VersionId) pairs, at most 1,000 per request."""
    for start in range(0, len(versions), DELETE_BATCH_MAX):
        yield {"Bucket": bucket, "Delete": {"Objects": versions[start : start + DELETE_BATCH_MAX], "Quiet": True}}


class S3BlobStore:
    """Implements BlobStore over one S3 bucket (versioned or not). `client` is a boto3 S3 client, created lazily."""

    def __init__(self, bucket: str, *, client: Any = None):
        self.bucket = bucket
        self._client = client

    @property
    def client(self) -> Any:
        """The client given, else the shared one of the current profile (short timeouts inside an API request)."""
        return self._client if self._client is not None else boto.shared_client(s3_client, "the blob store")

    def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        self._call("put_object", build_put_request(self.bucket, key, data, content_type), key=key)

    def get_blob(self, key: str, *, max_bytes: int | None = None) -> bytes:
        from botocore.exceptions import BotoCoreError

        response = self._call("get_object", {"Bucket": self.bucket, "Key": key}, key=key)
        body = response["Body"]
        try:
            if max_bytes is None:
                return body.read()
            # The length arrives with the headers: an object over the limit is refused before its body is read
            # (closing the unread body drops the connection instead of draining it).
            size = int(response.get("ContentLength") or 0)
            data = body.read(max_bytes + 1) if size <= max_bytes else b""
            if size > max_bytes or len(data) > max_bytes:
                raise LimitExceeded(f"File is {max(size, len(data))} bytes; the limit is {max_bytes} bytes")
            return data
        except BotoCoreError as error:  # the connection dropped or timed out mid-body, after the call itself succeeded
            raise self._translate(error, "get_object_body", key=key) from error
        finally:
            body.close()

    def blob_size(self, key: str) -> int | None:
        try:
            response = self._call("head_object", {"Bucket": self.bucket, "Key": key}, key=key)
        except NotFound:
            return None
        return int(response["ContentLength"])

    def delete_blob(self, key: str) -> None:
        versions, _ = self._versions(key, exact=True)
        self._delete_versions(versions)

    def delete_prefix(self, prefix: str) -> int:
        versions, live_keys = self._versions(prefix, exact=False)
        self._delete_versions(versions)
        logger.info(
            "blob prefix deleted",
            extra={"bucket": self.bucket, "prefix": prefix, "objects": live_keys, "versions": len(versions)},
        )
        return live_keys

    def list_blobs(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[str]:
        if limit is not None and limit <= 0:
            return []
        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after:
            request["StartAfter"] = start_after
        if limit is not None:
            request["PaginationConfig"] = {"MaxItems": limit, "PageSize": min(limit, 1000)}
        keys: list[str] = []
        for page in self._pages("list_objects_v2", request):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        # S3 already lists in UTF-8 byte order, which is code point order; sorting states the contract, not a fix.
        return sorted(keys)

    def presign_put(
        self, key: str, content_type: str, content_length: int, expires_in: int
    ) -> tuple[str, dict[str, str], int]:
        """A URL the caller can PUT exactly `content_length` bytes to, the headers that upload must carry, and
        when the URL expires (unix seconds), as the catalog's `Presigner` protocol asks."""
        params, headers = build_presign_params(self.bucket, key, content_type, content_length)
        # Read the clock before signing: the signature's own timestamp is then the same second or later, so the
        # reported expiry is never after the real one.
        expires_at = int(time.time()) + int(expires_in)
        url = self._call(
            "generate_presigned_url",
            {"ClientMethod": "put_object", "Params": params, "ExpiresIn": int(expires_in)},
            key=key,
        )
        return url, headers, expires_at

    # Internals
    def _versions(self, prefix: str, *, exact: bool) -> tuple[list[dict[str, str]], int]:
        """Every version and delete marker under the prefix (or of exactly that key), and how many keys are live."""
        versions: list[dict[str, str]] = []
        live = 0
        for page in self._pages("list_object_versions", {"Bucket": self.bucket, "Prefix": prefix}):
            for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
                if exact and entry["Key"] != prefix:
                    continue
                versions.append({"Key": entry["Key"], "VersionId": entry["VersionId"]})
            live += sum(
                1
                for entry in page.get("Versions", [])
                if entry.get("IsLatest") and (not exact or entry["Key"] == prefix)
            )
        return versions, live

    def _delete_versions(self, versions: list[dict[str, str]]) -> None:
        for request in build_delete_batches(self.bucket, versions):
            response = self._call("delete_objects", request)
            errors = response.get("Errors") or []
            if errors:
                logger.error(
                    "s3 delete left objects",
                    extra={"bucket": self.bucket, "failed": len(errors), "error_code": errors[0].get("Code")},
                )
                raise DependencyFailed("blob store could not delete every object")

    def _pages(self, operation: str, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield from self.client.get_paginator(operation).paginate(**request)
        except (ClientError, BotoCoreError) as error:
            raise self._translate(error, operation, key=None) from error

    def _call(self, operation: str, request: dict[str, Any], *, key: str | None = None) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, operation)(**request)
        except (ClientError, BotoCoreError) as error:
            raise self._translate(error, operation, key=key) from error

    def _translate(self, error: Exception, operation: str, *, key: str | None) -> Exception:
        """The single mapping from botocore errors to domain errors."""
        from botocore.exceptions import ClientError

        code = error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else ""
        if operation in ("get_object", "head_object") and code in MISSING_CODES:
            return NotFound(f"blob {key!r} does not exist")
        logger.error(
            "s3 request failed",
            extra={
                "operation": operation,
                "bucket": self.bucket,
                "error_code": code,
                "error_type": type(error).__name__,
            },
        )
        return DependencyFailed("blob store request failed")
