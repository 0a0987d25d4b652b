"""The local server: Hypercorn speaks HTTP (request parsing, chunked bodies, Content-Length, keep-alive, header and
idle timeouts, header size limits); an ASGI app turns each request into an API Gateway REST proxy event, runs the
authorizer function and then the same Lambda handler that runs on AWS, on a pool of threads (the function's
concurrent instances), and writes back the handler's response. Every error answer is JSON `{"error", "message"}`,
including the ones Hypercorn's HTTP layer produces (see `_json_protocol_errors`)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs

from kindex.api.http import error_response
from kindex.app.cpu_slots import CpuSlots

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
# Longest request target (path and query) we accept: ids are at most 255 characters, URL-encoded at most 765.
MAX_TARGET_BYTES = 8192
# Request line plus headers; larger ones get 431 from the HTTP layer.
MAX_HEAD_BYTES = 32 * 1024
# How long a client may take to send a whole request head, and how long an idle keep-alive connection stays open
# (one Hypercorn setting; long enough that a client reusing a pooled connection rarely races its close).
HEAD_TIMEOUT_SECONDS = 10
# A body that stalls this long between two reads ends the connection.
READ_TIMEOUT_SECONDS = 30
# A raw route's body (uploads) is written to its sink in pieces of this size.
STREAM_PIECE = 1 << 20
# Requests run at once: the number of warm "function instances". More requests wait for a free one.
CONCURRENCY = 32


@dataclass
class LambdaContext:
    """Enough of the Lambda context object for Powertools and our handlers."""

    function_name: str
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:local:000000000000:function:kindex-local"
    log_group_name: str = "local"
    log_stream_name: str = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


@dataclass
class Route:
    """A method and path served by a Lambda function; `public` routes skip the authorizer (the docs)."""

    method: str | None
    pattern: Any  # re.Pattern
    function_name: str
    handler: Handler
    public: bool = False


class RawSink(Protocol):
    """Where a raw route's body goes while it arrives (never held whole in memory)."""

    def write(self, data: bytes) -> None:
        """Take the next piece of the body."""

    def finish(self) -> dict[str, Any]:
        """The whole body arrived: keep it (or refuse it) and return the response."""

    def abort(self) -> None:
        """The body will not be complete (too large, or the client left): leave nothing behind."""


class RawRoute(Protocol):
    """A path served by the server itself, not by a function (presigned uploads, which S3 takes on AWS).
    `admit` runs before a byte of the body is read; `open` gives the sink the body streams into."""

    pattern: Any
    method: str
    max_body_bytes: int

    def admit(self, path: str, query: dict[str, str], headers: dict[str, str]) -> dict[str, Any] | None:
        """None to go on, or the (error) response to send without reading the body."""

    def open(self, path: str, query: dict[str, str], headers: dict[str, str]) -> RawSink:
        """The sink for this request's body."""


class Throttle(Protocol):
    """Per-tenant usage plans (kindex_local.throttle.TenantThrottle)."""

    def admit(self, tenant: str) -> Any:
        """None to let the tenant's request run, else a refusal with `code`, `message`, `retry_after_seconds`."""


class Gateway:
    """What API Gateway does for us on AWS: route a request to a function, after the authorizer allowed it and the
    tenant's usage plan (`throttle`, when plans are configured) admitted it."""

    def __init__(
        self,
        authorizer: Handler,
        routes: list[Route],
        max_body_bytes: int,
        raw_routes: list[RawRoute] | None = None,
        throttle: Throttle | None = None,
    ):
        self.authorizer = authorizer
        self.throttle = throttle
        self.routes = routes
        self.raw_routes = raw_routes or []
        self.max_body_bytes = max_body_bytes

    def build_event(
        self, method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes, source_ip: str
    ) -> dict[str, Any]:
        multi_query = parse_qs(query, keep_blank_values=True)
        try:
            text_body, is_base64 = body.decode("utf-8"), False
        except UnicodeDecodeError:
            text_body, is_base64 = base64.b64encode(body).decode(), True
        return {
            "resource": raw_path,
            "path": raw_path,
            "httpMethod": method,
            "headers": headers,
            "multiValueHeaders": {k: [v] for k, v in headers.items()},
            "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
            "multiValueQueryStringParameters": multi_query or None,
            "pathParameters": None,
            "stageVariables": None,
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "stage": "local",
                "httpMethod": method,
                "path": raw_path,
                "resourcePath": raw_path,
                "identity": {"sourceIp": source_ip},
            },
            "body": text_body if body else None,
            "isBase64Encoded": is_base64,
        }

    def dispatch(self, event: dict[str, Any]) -> dict[str, Any]:
        route = self.route(event["httpMethod"], event["path"])
        if route is None:
            return error_response(404, "not_found", "no such route")
        if not route.public:
            method_arn = f"arn:aws:execute-api:local:000000000000:kindex/local/{event['httpMethod']}{event['path']}"
            auth_event = {**event, "type": "REQUEST", "methodArn": method_arn}
            try:
                policy = self.authorizer(auth_event, LambdaContext("kindex-authorizer"))
            except Exception as error:  # API Gateway's contract: an authorizer that raises 'Unauthorized' means 401
                if str(error) == "Unauthorized":
                    return error_response(401, "unauthorized", "missing or invalid API key")
                logger.exception("authorizer failed")
                return error_response(500, "internal_error", "internal error")
            event["requestContext"]["authorizer"] = {**policy.get("context", {}), "principalId": policy["principalId"]}
            refusal = self.throttle.admit(policy["context"]["tenant"]) if self.throttle is not None else None
            if refusal is not None:
                return error_response(
                    429, refusal.code, refusal.message, headers={"Retry-After": str(refusal.retry_after_seconds)}
                )
        try:
            return route.handler(event, LambdaContext(route.function_name))
        except Exception:
            logger.exception("handler failed", extra={"function": route.function_name})
            return error_response(502, "bad_gateway", "the function failed")

    def route(self, method: str, path: str) -> Route | None:
        for route in self.routes:
            if (route.method is None or route.method == method) and route.pattern.fullmatch(path):
                return route
        return None

    def raw_route(self, method: str, path: str) -> RawRoute | None:
        for route in self.raw_routes:
            if route.method == method and route.pattern.fullmatch(path):
                return route
        return None


class _BodyTooLarge(Exception):
    pass


class AsgiGateway:
    """The ASGI application: reads a request (bounded), runs it through the gateway on the instance pool."""

    def __init__(self, gateway: Gateway, concurrency: int = CONCURRENCY, cpu_slots: CpuSlots | None = None):
        self.gateway = gateway
        self.instances = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kindex-function")
        self.cpu_slots = cpu_slots  # None: every instance computes at once

    async def __call__(self, scope: Mapping[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Mapping[str, Any], receive: Callable, send: Callable) -> None:
        method = scope["method"]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        query_bytes: bytes = scope.get("query_string", b"")
        if len(raw_path) + len(query_bytes) > MAX_TARGET_BYTES:
            await _send(
                send,
                error_response(414, "uri_too_long", f"request target exceeds {MAX_TARGET_BYTES} bytes"),
                close=True,
            )
            return
        try:
            path, query = raw_path.decode("ascii"), query_bytes.decode("ascii")
        except UnicodeDecodeError:
            await _send(
                send,
                error_response(400, "bad_request", "the request target must be ASCII (percent-encode it)"),
                close=True,
            )
            return
        if sum(len(name) + len(value) + 4 for name, value in scope.get("headers", [])) > MAX_HEAD_BYTES:
            # The HTTP layer bounds a head it has to wait for; one that arrived whole is bounded here.
            await _send(
                send,
                error_response(431, "request_header_fields_too_large", f"request head exceeds {MAX_HEAD_BYTES} bytes"),
                close=True,
            )
            return
        headers = _headers(scope)
        client = (scope.get("client") or ("", 0))[0]
        raw_route = self.gateway.raw_route(method, path)
        limit = raw_route.max_body_bytes if raw_route else self.gateway.max_body_bytes
        flat_query = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        if raw_route is not None:
            refused = await self._run(raw_route.admit, path, flat_query, headers)
            if refused is not None:
                await _send(send, refused, close=True)
                return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            # Do not read (or buffer) what we are going to refuse anyway; the server closes the connection.
            await _send(
                send, error_response(413, "payload_too_large", f"request body exceeds {limit} bytes"), close=True
            )
            return
        if raw_route is not None:
            await self._stream(raw_route, path, flat_query, headers, receive, send, limit)
            return
        try:
            body = await _read_body(receive, limit)
        except _BodyTooLarge:
            await _send(
                send, error_response(413, "payload_too_large", f"request body exceeds {limit} bytes"), close=True
            )
            return
        if body is None:
            return  # the client went away
        event = self.gateway.build_event(method, path, query, headers, body, client)
        del body
        response = await self._run(self._dispatch, event)
        await _send(send, response, head=method == "HEAD")

    async def _stream(
        self,
        route: RawRoute,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        receive: Callable,
        send: Callable,
        limit: int,
    ) -> None:
        """A raw route's body goes to its sink in pieces of about STREAM_PIECE bytes, written off the event loop."""
        sink = await self._run(route.open, path, query, headers)
        pending: list[bytes] = []
        buffered = size = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    await self._run(sink.abort)
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    await self._run(sink.abort)
                    await _send(
                        send,
                        error_response(413, "payload_too_large", f"request body exceeds {limit} bytes"),
                        close=True,
                    )
                    return
                if chunk:
                    pending.append(chunk)
                    buffered += len(chunk)
                more = message.get("more_body", False)
                if pending and (buffered >= STREAM_PIECE or not more):
                    await self._run(sink.write, b"".join(pending))
                    pending, buffered = [], 0
                if not more:
                    break
        except BaseException:
            await self._run(sink.abort)
            raise
        await _send(send, await self._run(sink.finish))

    def _dispatch(self, event: dict[str, Any]) -> dict[str, Any]:
        """A function's run, inside a CPU slot when the server has them (kindex.app.cpu_slots)."""
        if self.cpu_slots is None:
            return self.gateway.dispatch(event)
        with self.cpu_slots.held():
            return self.gateway.dispatch(event)

    async def _run(self, function: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.instances, function, *args)

    def close(self) -> None:
        self.instances.shutdown(wait=False, cancel_futures=True)


def _headers(scope: Mapping[str, Any]) -> dict[str, str]:
    """Header names lower-cased (as HTTP/2 and ASGI give them); repeated headers joined with ', '."""
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


async def _read_body(receive: Callable, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Callable, response: dict[str, Any], head: bool = False, close: bool = False) -> None:
    """Send a proxy response. `close` for an answer given before the request body was read: the server then ends
    the connection, and the client must know not to reuse it (`Connection: close`)."""
    body = response.get("body") or ""
    payload = base64.b64decode(body) if response.get("isBase64Encoded") else body.encode("utf-8")
    headers: list[tuple[bytes, bytes]] = []
    seen = set()
    for name, value in (response.get("headers") or {}).items():
        if name.lower() != "content-length":
            headers.append((name.lower().encode("latin-1"), str(value).encode("latin-1")))
            seen.add(name.lower())
    for name, values in (response.get("multiValueHeaders") or {}).items():
        if name.lower() not in seen and name.lower() != "content-length":
            headers.extend((name.lower().encode("latin-1"), str(v).encode("latin-1")) for v in values)
    headers.append((b"content-length", str(len(payload)).encode()))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": response.get("statusCode", 200), "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else payload})


_PROTOCOL_ERRORS = {
    400: ("bad_request", "malformed HTTP request"),
    431: ("request_header_fields_too_large", f"request head exceeds {MAX_HEAD_BYTES} bytes"),
    501: ("not_implemented", "unsupported Transfer-Encoding"),
}


def _json_protocol_errors() -> None:
    """Hypercorn answers requests it cannot parse with an empty body; ours say what went wrong, in JSON, like every
    other error of the API. Its H11 protocol has one method for those answers; we give it a JSON body."""
    import h11
    from hypercorn.protocol.h11 import H11Protocol

    async def send_error_response(self, status_code: int) -> None:
        code, message = _PROTOCOL_ERRORS.get(status_code, ("bad_request", "malformed HTTP request"))
        body = json.dumps({"error": code, "message": message}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())

    # Replacing hypercorn's method is the point (the docstring): it has no hook for the body of these answers.
    H11Protocol._send_error_response = send_error_response  # type: ignore[method-assign]


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving, so a busy port is reported at start and port 0 tells which port it got."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError:
        sock.close()
        raise
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


class LocalServer:
    """Hypercorn serving the gateway on a bound socket, plus the background threads local mode runs beside it
    (the ingest worker, the reindex scheduler)."""

    def __init__(
        self, gateway: Gateway, host: str, port: int, concurrency: int = CONCURRENCY, cpu_slots: CpuSlots | None = None
    ):
        self.app = AsgiGateway(gateway, concurrency, cpu_slots)
        self.socket = bind_socket(host, port)
        self.background: list = []  # things with stop(), stopped on shutdown (the worker)
        self.closing: list[Callable[[], None]] = []  # called last on shutdown, once nothing else runs (the index)
        self.lock = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self.stop_requested = False  # kept for a `serve_forever` not running yet: it then returns at once

    @property
    def address(self) -> tuple[str, int]:
        return self.socket.getsockname()[:2]

    def _config(self):
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"fd://{self.socket.fileno()}"]
        config.keep_alive_timeout = HEAD_TIMEOUT_SECONDS
        config.read_timeout = READ_TIMEOUT_SECONDS
        config.h11_max_incomplete_size = MAX_HEAD_BYTES
        config.include_server_header = False
        config.accesslog = None
        config.errorlog = logging.getLogger("kindex.http")
        config.graceful_timeout = 5
        return config

    def serve_forever(self) -> None:
        from hypercorn.asyncio import serve

        _json_protocol_errors()

        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            if self.stop_requested:  # asked before the loop ran (a signal right after the start)
                self._stopping.set()
            await serve(self.app, self._config(), shutdown_trigger=self._stopping.wait, mode="asgi")

        asyncio.run(run())

    def request_stop(self) -> None:
        """Ask `serve_forever` to return after in-flight requests finish (safe from a signal handler or a thread, and
        before `serve_forever` runs)."""
        self.stop_requested = True
        if self._loop is not None and self._stopping is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stopping.set)
            except RuntimeError:
                pass  # the loop already ended

    def shutdown(self) -> None:
        self.request_stop()
        for item in self.background:
            item.stop()
        self.app.close()
        try:
            self.socket.close()
        except OSError:
            pass
        for close in self.closing:
            try:
                close()
            except Exception:
                logger.exception("shutdown: closing failed")
        self.closing.clear()
