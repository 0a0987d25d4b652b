"""A real rights-check endpoint on 127.0.0.1 whose behaviour each test scripts: allow some ids, deny, omit ids,
answer 500, hang past the timeout, send garbage or non-booleans. It verifies kindex's HMAC signature like a
tenant's server would, and records every request."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RightsServer:
    def __init__(self, secret: bytes | None = None):
        self.secret = secret
        self.mode = "allow"
        self.allowed: set[str] = set()
        self.hang_seconds = 5.0
        self.requests: list[dict] = []
        self.bad_signatures = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as a real server would; else keep-alive requests stall ~40 ms

            def do_POST(self):  # noqa: N802 - stdlib name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                payload = json.loads(body)
                server.requests.append({"body": payload, "headers": dict(self.headers)})
                if server.secret is not None and not server.signature_ok(self.headers.get("X-Kindex-Signature", ""), body):
                    server.bad_signatures += 1
                    return self.reply(401, b'{"error": "bad signature"}')
                ids = payload["document_ids"]
                mode = server.mode
                if mode == "allow":
                    return self.reply(200, json.dumps({i: i in server.allowed for i in ids}).encode())
                if mode == "omit":
                    return self.reply(200, json.dumps({i: True for i in ids if i in server.allowed}).encode())
                if mode == "strings":
                    return self.reply(200, json.dumps({i: "true" for i in ids}).encode())
                if mode == "list":
                    return self.reply(200, json.dumps(ids).encode())
                if mode == "error":
                    return self.reply(500, json.dumps({i: True for i in ids}).encode())
                if mode == "garbage":
                    return self.reply(200, b"<html>not json")
                if mode == "hang":
                    time.sleep(server.hang_seconds)
                    return self.reply(200, json.dumps({i: True for i in ids}).encode())
                raise AssertionError(mode)

            def reply(self, status: int, body: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/check"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def signature_ok(self, header: str, body: bytes) -> bool:
        try:
            parts = dict(part.split("=", 1) for part in header.split(","))
            expected = hmac.new(self.secret, f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
        except (ValueError, KeyError):
            return False
        return hmac.compare_digest(expected, parts["v1"]) and abs(time.time() - int(parts["t"])) < 300

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
