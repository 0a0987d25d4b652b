"""HTTP transport of external rights checks (httpcore, HTTP/1.1): only approved addresses, one deadline, capped answers.

- Every new connection resolves the host itself, judges *every* address with the deployment's RightsUrlPolicy and
  connects to an approved one (never to a second lookup's answer), so a DNS name cannot be re-pointed at the metadata
  service or into the VPC after it was saved. The URL keeps its host name, so TLS verifies the certificate for that
  name (SNI) and `Host:` names it. Kept-alive connections are only ever to addresses approved when they opened.
- One absolute deadline per call covers connecting, TLS, writing and the whole read: each socket operation waits at
  most until the deadline (a per-operation timeout alone lets an endpoint drip one byte at a time forever).
- Only a 200 answer's body is read, and at most `max_answer_bytes` of it: a longer answer fails without being read.
- No proxies from the environment, no redirects, no retries, no content decoding.

httpcore is httpx's transport layer; it is used directly because httpx has no public hook for the network backend.
It is imported on the first call, not with the module: the query function's cold start does not pay for it unless a
collection checks rights externally.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from kindex.domain.rights_policy import RightsCallFailed, RightsUrlPolicy, UrlRefused

if TYPE_CHECKING:
    import httpcore

MAX_ANSWER_BYTES = 1024 * 1024
USER_AGENT = "kindex-rights-check/1"
_WRITE_PIECE = 64 * 1024


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (A and AAAA, IP literals as themselves), in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class HttpRightsEndpoint:
    """POSTs one rights-check request and returns (status, body). Raises RightsCallFailed on every failure (a
    refused URL or address, resolution, connection, TLS, the deadline, an oversized answer, a broken answer).
    `resolver` defaults to this module's `resolve`; `ssl_context` to certifi's roots. Thread-safe."""

    def __init__(
        self,
        policy: RightsUrlPolicy,
        *,
        ssl_context: Any = None,
        resolver: Callable[[str, int], list[str]] | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_keepalive_connections: int = 32,
    ):
        self.policy = policy
        self.max_answer_bytes = max_answer_bytes
        self._ssl_context = ssl_context
        self._resolver = resolver
        self._max_keepalive = max_keepalive_connections
        self._pool: Any = None
        self._lock = threading.Lock()
        self._calls = threading.local()  # the deadline of the call running in this thread

    def post(self, url: str, body: bytes, headers: dict[str, str], deadline: float) -> tuple[int, bytes]:
        """`deadline` is on the time.monotonic clock. Non-200 answers come back with an empty body (never read)."""
        try:
            target = self.policy.check_url(url)
        except UrlRefused as error:
            raise RightsCallFailed("refused", error.rule) from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RightsCallFailed("timeout")
        import httpcore

        request_url = httpcore.URL(scheme=target.scheme, host=target.host, port=target.port, target=target.target)
        request_headers = [
            ("Host", target.host_header),
            ("User-Agent", USER_AGENT),
            ("Accept", "application/json"),
            *headers.items(),
        ]
        timeouts = {"connect": remaining, "read": remaining, "write": remaining, "pool": remaining}
        self._calls.deadline = deadline
        try:
            with self._connections().stream(
                "POST", request_url, headers=request_headers, content=body, extensions={"timeout": timeouts}
            ) as response:
                if response.status != 200:
                    return response.status, b""
                return 200, self._read_capped(response)
        except RightsCallFailed:
            raise
        except httpcore.TimeoutException as error:
            raise RightsCallFailed("timeout") from error
        except httpcore.ConnectError as error:  # refused, unreachable, TLS handshake or certificate
            raise RightsCallFailed("connect") from error
        except Exception as error:  # a broken answer or anything unforeseen: fail closed
            raise RightsCallFailed("protocol", type(error).__name__) from error
        finally:
            self._calls.deadline = None

    def _read_capped(self, response: Any) -> bytes:
        declared = dict((k.lower(), v) for k, v in response.headers).get(b"content-length")
        if declared is not None and (not declared.strip().isdigit() or int(declared) > self.max_answer_bytes):
            raise RightsCallFailed("too_large")
        chunks, size = [], 0
        for chunk in response.iter_stream():
            size += len(chunk)
            if size > self.max_answer_bytes:
                raise RightsCallFailed("too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    def _connections(self) -> Any:
        with self._lock:
            if self._pool is None:
                import httpcore

                context = self._ssl_context or _default_ssl_context()
                # No connection cap: each tenant's concurrency is bounded above this layer, and a shared cap would
                # let one tenant's slow endpoint queue everyone else's calls.
                self._pool = httpcore.ConnectionPool(
                    ssl_context=context,
                    max_connections=None,
                    max_keepalive_connections=self._max_keepalive,
                    keepalive_expiry=30.0,
                    http1=True,
                    http2=False,
                    retries=0,
                    # httpcore types the backend as its base class; ours has the same three methods without
                    # inheriting, so that this module imports without httpcore (see the docstring).
                    network_backend=cast(
                        "httpcore.NetworkBackend", _PinnedBackend(self.policy, self._resolve, self._deadline)
                    ),
                )
            return self._pool

    def _resolve(self, host: str, port: int) -> list[str]:
        return (self._resolver or resolve)(host, port)

    def _deadline(self) -> float:
        deadline = getattr(self._calls, "deadline", None)
        return time.monotonic() if deadline is None else deadline

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


@lru_cache(maxsize=1)
def _default_ssl_context() -> Any:
    """certifi's roots, loaded once per process (~50-100 ms): every endpoint and connection shares the context."""
    import httpcore

    return httpcore.default_ssl_context()


class _PinnedBackend:
    """httpcore network backend: resolve, judge every address, connect to an approved one, bound by the deadline."""

    def __init__(
        self, policy: RightsUrlPolicy, resolver: Callable[[str, int], list[str]], deadline: Callable[[], float]
    ):
        import httpcore

        self.policy = policy
        self.resolver = resolver
        self.deadline = deadline
        self.tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> "_DeadlineStream":
        import httpcore

        try:
            addresses = self.resolver(host, port)
        except (OSError, UnicodeError) as error:
            raise RightsCallFailed("resolve") from error
        if not addresses:
            raise RightsCallFailed("resolve")
        for address in addresses:  # every one: a resolver may hand out a public and a private address together
            try:
                self.policy.check_address(address)
            except (UrlRefused, ValueError) as error:
                raise RightsCallFailed("refused", getattr(error, "rule", "address")) from None
        last_error: Exception = RightsCallFailed("connect")
        for address in addresses:
            budget = _budget(self.deadline, timeout, httpcore.ConnectTimeout)
            try:
                stream = self.tcp.connect_tcp(
                    address, port, timeout=budget, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last_error = error
                continue
            return _DeadlineStream(stream, self.deadline)
        raise last_error

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        raise RightsCallFailed("refused", "unix-socket")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _DeadlineStream:
    """A network stream whose every operation ends by the current call's deadline."""

    def __init__(self, inner: Any, deadline: Callable[[], float]):
        self.inner = inner
        self.deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        import httpcore

        return self.inner.read(max_bytes, _budget(self.deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        import httpcore

        for start in range(0, len(buffer), _WRITE_PIECE):  # a slow reader cannot stretch one long write
            self.inner.write(
                buffer[start : start + _WRITE_PIECE], _budget(self.deadline, timeout, httpcore.WriteTimeout)
            )

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> "_DeadlineStream":
        import httpcore

        budget = _budget(self.deadline, timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, budget), self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


def _budget(deadline: Callable[[], float], timeout: float | None, error: type[Exception]) -> float:
    remaining = deadline() - time.monotonic()
    if remaining <= 0:
        raise error("the rights check's deadline passed")
    return remaining if timeout is None else min(timeout, remaining)
