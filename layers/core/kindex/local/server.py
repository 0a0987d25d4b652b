"""The local server: a real HTTP server that turns each request into an API Gateway REST proxy event, runs the
authorizer function and then the same Lambda handler that runs on AWS, and writes back the handler's response."""

from __future__ import annotations

import base64
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kindex.api.http import error_response

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
PUBLIC_PATHS = frozenset({"/docs", "/v1/openapi.json"})


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
    """`public` routes skip the authorizer (docs, and presigned uploads which carry their own signature)."""

    method: str | None
    pattern: re.Pattern
    function_name: str
    handler: Handler
    public: bool = False
    max_body_bytes: int | None = None


class Gateway:
    """What API Gateway does for us on AWS: route a request to a function, after the authorizer allowed it."""

    def __init__(self, authorizer: Handler, routes: list[Route], max_body_bytes: int):
        self.authorizer = authorizer
        self.routes = routes
        self.max_body_bytes = max_body_bytes

    def build_event(self, method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes,
                    source_ip: str) -> dict[str, Any]:
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
                "requestId": str(uuid.uuid4()), "stage": "local", "httpMethod": method, "path": raw_path,
                "resourcePath": raw_path, "identity": {"sourceIp": source_ip},
            },
            "body": text_body if body else None,
            "isBase64Encoded": is_base64,
        }

    def body_limit(self, method: str, path: str) -> int:
        route = self._route(method, path)
        return route.max_body_bytes if route and route.max_body_bytes else self.max_body_bytes

    def dispatch(self, event: dict[str, Any]) -> dict[str, Any]:
        route = self._route(event["httpMethod"], event["path"])
        if route is None:
            return error_response(404, "not_found", "no such route")
        if not route.public and event["path"] not in PUBLIC_PATHS:
            auth_event = {**event, "type": "REQUEST",
                          "methodArn": f"arn:aws:execute-api:local:000000000000:kindex/local/{event['httpMethod']}{event['path']}"}
            try:
                policy = self.authorizer(auth_event, LambdaContext("kindex-authorizer"))
            except Exception as error:  # API Gateway's contract: an authorizer that raises 'Unauthorized' means 401
                if str(error) == "Unauthorized":
                    return error_response(401, "unauthorized", "missing or invalid API key")
                logger.exception("authorizer failed")
                return error_response(500, "internal_error", "internal error")
            event["requestContext"]["authorizer"] = {**policy.get("context", {}), "principalId": policy["principalId"]}
        try:
            return route.handler(event, LambdaContext(route.function_name))
        except Exception:
            logger.exception("handler failed", extra={"function": route.function_name})
            return error_response(502, "bad_gateway", "the function failed")

    def _route(self, method: str, path: str) -> Route | None:
        for route in self.routes:
            if (route.method is None or route.method == method) and route.pattern.fullmatch(path):
                return route
        return None


def make_request_handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    class RequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "kindex"
        # Headers and body go out in two writes; with Nagle on, a keep-alive client waits ~40 ms (delayed ACK).
        disable_nagle_algorithm = True

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length_header = self.headers.get("Content-Length")
            try:
                length = int(length_header) if length_header else 0
            except ValueError:
                self._write(error_response(400, "bad_request", "invalid Content-Length"), close=True)
                return
            limit = gateway.body_limit(self.command, parts.path)
            if length > limit:
                # Do not read (or buffer) what we are going to refuse anyway.
                self._write(error_response(413, "payload_too_large", f"request body exceeds {limit} bytes"), close=True)
                return
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items()}
            event = gateway.build_event(self.command, parts.path, parts.query, headers, body, self.client_address[0])
            self._write(gateway.dispatch(event))

        def _write(self, response: dict[str, Any], close: bool = False) -> None:
            body = response.get("body") or ""
            payload = base64.b64decode(body) if response.get("isBase64Encoded") else body.encode("utf-8")
            self.send_response(response.get("statusCode", 200))
            headers = dict(response.get("headers") or {})
            for name, values in (response.get("multiValueHeaders") or {}).items():
                for value in values:
                    if name not in headers:
                        self.send_header(name, value)
            for name, value in headers.items():
                if name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            logger.info("request", extra={"client": self.client_address[0], "line": format % args})

    return RequestHandler


class LocalServer:
    """The HTTP server plus whatever background threads local mode runs beside it (the ingest worker)."""

    def __init__(self, gateway: Gateway, host: str, port: int):
        self.httpd = ThreadingHTTPServer((host, port), make_request_handler(gateway))
        self.httpd.daemon_threads = True
        self.background: list = []  # things with stop(), stopped on shutdown (the worker)
        self.lock = None

    @property
    def address(self) -> tuple[str, int]:
        return self.httpd.server_address[:2]

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        for item in self.background:
            item.stop()
