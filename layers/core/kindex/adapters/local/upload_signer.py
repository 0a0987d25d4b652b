"""Presigned uploads in local mode: HMAC-signed, expiring PUT URLs for one exact content length that the local
server itself accepts, as S3 accepts its presigned URLs on AWS. Each URL is good for one upload: its key is unique
to the ticket (`keys.write_blob_key`) and the server writes it only while it holds no blob (`If-None-Match: *`, as
the S3 URL is signed), so a replay is refused with 412 however many times it comes."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path
from urllib.parse import quote, urlencode

from kindex.adapters.local.private_files import restrict

UPLOAD_PATH = "/uploads/"
# Sent with every upload, on S3 as a signed header: the PUT may create the key, never overwrite it.
CREATE_ONLY = {"If-None-Match": "*"}


def load_or_create_secret(path: Path) -> bytes:
    """The signing secret of this data directory (created once, mode 0600)."""
    try:
        secret = bytes.fromhex(path.read_text().strip())
        restrict(path)  # written by an older version, possibly wider
        return secret
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())


class LocalUploadSigner:
    """Signs `PUT /uploads/{blob key}` for one key, content type, content length and expiry; verifies in
    constant time. Like S3's signed Content-Length, the length is part of the signature, so the route that
    accepts the upload must pass the request's Content-Length header to `verify` and store the body only when
    it is exactly that long (a request without Content-Length, e.g. chunked, never verifies). Like the S3 URL's
    signed `If-None-Match: *`, a request without that header never verifies either, and the route must store the
    body only if the key holds no blob yet."""

    def __init__(self, secret: bytes, base_url: str, clock=time.time):
        self.secret = secret
        self.base_url = base_url.rstrip("/")
        self.clock = clock

    def _signature(self, key: str, content_type: str, content_length: str, expires: int) -> str:
        message = "\n".join(("PUT", key, content_type, content_length, str(expires))).encode("utf-8")
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def presign_put(
        self, key: str, content_type: str, content_length: int, expires_in: int
    ) -> tuple[str, dict[str, str], int]:
        """(url, headers the client must send, expiry as unix seconds)."""
        expires = int(self.clock()) + expires_in
        length = str(int(content_length))
        query = urlencode({"expires": expires, "signature": self._signature(key, content_type, length, expires)})
        headers = {"Content-Type": content_type, "Content-Length": length, **CREATE_ONLY}
        return f"{self.base_url}{UPLOAD_PATH}{quote(key, safe='/')}?{query}", headers, expires

    def verify(
        self, key: str, content_type: str, content_length: str, expires: str, signature: str, if_none_match: str
    ) -> bool:
        """True when the URL's signature covers this key, type and length (the request's Content-Length header,
        as sent), the request is create-only (its If-None-Match header is `*`) and the URL has not expired."""
        try:
            expires_at = int(expires)
        except ValueError:
            return False
        if not (content_length.isascii() and content_length.isdigit()) or if_none_match != CREATE_ONLY["If-None-Match"]:
            return False
        expected = self._signature(key, content_type, content_length, expires_at)
        return hmac.compare_digest(expected, signature) and self.clock() <= expires_at
