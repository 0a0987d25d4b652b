"""A scriptable stand-in for the OpenAI embeddings endpoint: a real HTTP server on 127.0.0.1.

Usage::

    with OpenAIStub(dimensions=8) as stub:
        stub.script((429, {"Retry-After": "1"}, error_body("slow down", "rate_limit_exceeded")))
        embedder = OpenAIEmbedder("text-embedding-3-small", api_key="sk-test", base_url=stub.base_url, ...)
        ...
        assert len(stub.requests) == 2

Each POST /v1/embeddings takes the next scripted reply, or, when the script is empty, answers with
embeddings computed by `embed_fn(text)` in the OpenAI response shape (floats, or base64 float32 when
the request asks for `encoding_format: "base64"`). Every request body and its headers are recorded.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

SUCCESS = None  # a scripted body of None on a 200 means "answer with generated embeddings"


@dataclass(frozen=True)
class Reply:
    """One scripted answer; `delay` (seconds) holds the answer back, to provoke client timeouts."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = SUCCESS
    delay: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def error_body(message: str, code: str | None = None, error_type: str = "invalid_request_error") -> dict[str, Any]:
    """An error payload in OpenAI's shape."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def hashed_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic pseudo-embedding of a text (not normalised, as a real provider might not be)."""
    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).standard_normal(dimensions).astype(np.float32).tolist()


class OpenAIStub:
    """The server. Start it with `with OpenAIStub() as stub:` or `start()`/`stop()`.

    `shuffle=True` returns the `data` items in reverse order (with correct `index` fields), as the API
    is free to do, so that clients must order by `index`.
    """

    def __init__(
        self,
        dimensions: int = 8,
        *,
        embed_fn: Callable[[str], list[float]] | None = None,
        shuffle: bool = False,
        model: str = "text-embedding-3-small",
    ):
        self.dimensions = dimensions
        self.embed_fn = embed_fn or (lambda text: hashed_vector(text, dimensions))
        self.shuffle = shuffle
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -----------------------------------------------------------------------------------

    def script(self, *replies: Reply | tuple) -> None:
        """Queue replies for the next calls, each a `Reply` or `(status, headers, body[, delay])`."""
        with self._lock:
            for reply in replies:
                self._replies.append(reply if isinstance(reply, Reply) else Reply(*reply))

    @property
    def base_url(self) -> str:
        """The value for the OpenAI client's `base_url` (ends in /v1)."""
        if self._server is None:
            raise RuntimeError("the stub is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def inputs_per_request(self) -> list[int]:
        return [len(request.body.get("input", [])) for request in self.requests]

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> "OpenAIStub":
        handler = type("_BoundHandler", (_Handler,), {"stub": self})
        # Port 0: the OS picks a free port, so parallel test runs never collide.
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        # A short poll interval keeps stop() (which waits for the serve loop to notice) fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-stub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "OpenAIStub":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- answering -----------------------------------------------------------------------------------

    def _answer(self, path: str, headers: dict[str, str], raw_body: bytes) -> tuple[int, dict[str, str], bytes, float]:
        try:
            body = json.loads(raw_body or b"{}")
        except ValueError:
            return 400, {}, json.dumps(error_body("body is not JSON")).encode(), 0.0
        with self._lock:
            self.requests.append(RecordedRequest(path=path, headers=headers, body=body))
            reply = self._replies.popleft() if self._replies else Reply(200)
        if path.rstrip("/") != "/v1/embeddings":
            return 404, {}, json.dumps(error_body(f"no route {path}")).encode(), 0.0
        if reply.status == 200 and reply.body is SUCCESS:
            payload: Any = self._embeddings_payload(body)
        else:
            payload = reply.body
        if isinstance(payload, bytes):
            data = payload
        elif isinstance(payload, str):
            data = payload.encode("utf-8")
        else:
            data = json.dumps(payload).encode("utf-8")
        return reply.status, dict(reply.headers), data, reply.delay

    def _embeddings_payload(self, body: Mapping[str, Any]) -> dict[str, Any]:
        inputs = body.get("input", [])
        if isinstance(inputs, str):
            inputs = [inputs]
        as_base64 = body.get("encoding_format") == "base64"
        items = []
        for index, text in enumerate(inputs):
            vector = self.embed_fn(text)
            embedding: Any = (
                base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
                if as_base64
                else [float(value) for value in vector]
            )
            items.append({"object": "embedding", "index": index, "embedding": embedding})
        if self.shuffle:
            items.reverse()
        tokens = sum(len(str(text).split()) for text in inputs)
        return {
            "object": "list",
            "data": items,
            "model": body.get("model", self.model),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


class _Handler(BaseHTTPRequestHandler):
    stub: OpenAIStub
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length)
        headers = {key.lower(): value for key, value in self.headers.items()}
        status, reply_headers, data, delay = self.stub._answer(self.path, headers, raw_body)
        if delay:
            time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in reply_headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests); nothing to answer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # keep test output quiet
