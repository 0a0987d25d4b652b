"""Secrets Manager adapter of the `SecretStore` port.

Each secret is one Secrets Manager secret named `{prefix}/{name}`, its value stored as SecretBinary. Secret names
allow only ASCII letters, digits and `/_+=.@-` (at most 512 characters), while our names embed tenant ids (any
unicode), so `secret_name` escapes every other character as `=XX` per UTF-8 byte and `=` itself as `=3D`: plain
names such as `tenants/acme/rights-check-signing` keep their readable form, and two names never share a secret.
A name still too long after escaping uses `{prefix}/=={sha256}` (an escaped name never contains `==`).

Reads are cached in-process for five minutes: secrets sit on the query path, and Secrets Manager bills and
throttles per call. A write replaces the cached value at once, so the process that rotates a secret never signs
with the old one; other warm processes pick the change up within the cache lifetime.

Powertools' `parameters.get_secret` caches the same way, but it wraps every failure into one GetParameterError
(the cause is only implicit context), so "never set" could not be told from "unreachable" without matching message
text; the cache here is a dict and a clock.

Values are never logged; errors carry the operation and AWS error code only.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from kindex.adapters.aws import boto
from kindex.domain.errors import DependencyFailed

logger = logging.getLogger(__name__)

CACHE_SECONDS = 300.0
MAX_NAME_CHARS = 512
_ALLOWED = re.compile(r"[A-Za-z0-9/_+.@-]")


@lru_cache(maxsize=3)
def secretsmanager_client(profile: str = boto.BACKGROUND) -> Any:
    """The shared boto3 Secrets Manager client of a profile (`boto.client_config`), created on first use (boto3
    is imported here for cold starts)."""
    import boto3

    return boto3.client("secretsmanager", config=boto.client_config(profile))


def secret_name(prefix: str, name: str) -> str:
    """The Secrets Manager name of our secret `name` (see module docstring)."""
    escaped = "".join(
        ch if _ALLOWED.fullmatch(ch) else "".join(f"={byte:02X}" for byte in ch.encode("utf-8")) for ch in name
    )
    full = f"{prefix}/{escaped}"
    if len(full) <= MAX_NAME_CHARS:
        return full
    return f"{prefix}/=={hashlib.sha256(name.encode('utf-8')).hexdigest()}"


class SecretsManagerStore:
    """Implements SecretStore with AWS Secrets Manager. `client` is a boto3 client (created lazily when omitted);
    `clock` (monotonic seconds) drives the five-minute read cache."""

    def __init__(
        self,
        prefix: str,
        *,
        client: Any = None,
        cache_seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.prefix = prefix.rstrip("/")
        self._client = client
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cache: dict[str, tuple[float, bytes | None]] = {}
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The client given, else the shared one of the current profile (short timeouts inside an API request)."""
        if self._client is not None:
            return self._client
        return boto.shared_client(secretsmanager_client, "the secret store")

    def put_secret(self, name: str, value: bytes) -> None:
        secret_id = secret_name(self.prefix, name)
        # InvalidRequestException from create or put means the secret is scheduled for deletion: restore it first.
        _, code = self._call(
            "create_secret",
            {"Name": secret_id, "SecretBinary": value},
            tolerate={"ResourceExistsException", "InvalidRequestException"},
        )
        created = code is None
        if code == "ResourceExistsException":
            _, code = self._call(
                "put_secret_value", {"SecretId": secret_id, "SecretBinary": value}, tolerate={"InvalidRequestException"}
            )
        if code == "InvalidRequestException":
            self._call("restore_secret", {"SecretId": secret_id})
            self._call("put_secret_value", {"SecretId": secret_id, "SecretBinary": value})
        with self._lock:
            self._cache[secret_id] = (self.clock() + self.cache_seconds, value)
        logger.info("secret written", extra={"secret": secret_id, "created": created})

    def get_secret(self, name: str) -> bytes | None:
        secret_id = secret_name(self.prefix, name)
        with self._lock:
            cached = self._cache.get(secret_id)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        value = self._fetch(secret_id)
        # Misses are cached too: tenants without a secret must not cost a Secrets Manager call per query.
        with self._lock:
            self._cache[secret_id] = (self.clock() + self.cache_seconds, value)
        return value

    def _fetch(self, secret_id: str) -> bytes | None:
        # InvalidRequestException here means the secret is scheduled for deletion: as good as never set.
        response, code = self._call(
            "get_secret_value",
            {"SecretId": secret_id},
            tolerate={"ResourceNotFoundException", "InvalidRequestException"},
        )
        if code is not None:
            return None
        if "SecretBinary" in response:
            return bytes(response["SecretBinary"])
        # Set by hand (console or CLI) as a string: the bytes of that string.
        return str(response.get("SecretString", "")).encode("utf-8")

    def _call(
        self, operation: str, request: dict[str, Any], *, tolerate: set[str] | frozenset[str] = frozenset()
    ) -> tuple[dict[str, Any], str | None]:
        """Send one request: (response, None), or ({}, AWS error code) when the code is one of `tolerate`.

        The single place where botocore errors become domain errors. Raised `from None`: botocore's parameter
        validation errors quote the offending value, which could be the secret itself.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        secret_id = request.get("Name") or request.get("SecretId")
        try:
            return getattr(self.client, operation)(**request), None
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in tolerate:
                return {}, code
            logger.error(
                "secrets manager request failed",
                extra={"operation": operation, "error_code": code, "secret": secret_id},
            )
            raise DependencyFailed("secret store request failed") from None
        except BotoCoreError as error:
            logger.error(
                "secrets manager unreachable",
                extra={"operation": operation, "secret": secret_id, "error_type": type(error).__name__},
            )
            raise DependencyFailed("secret store is unreachable") from None
