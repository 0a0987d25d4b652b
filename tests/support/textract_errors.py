"""A real HTTP endpoint on 127.0.0.1 speaking Textract's JSON protocol for the one thing moto's Textract cannot do:
answer DetectDocumentText with an error. Each request gets the next scripted answer: an error code (HTTP 400 with
`__type`, as Textract sends it) or None for a success with one LINE block. It records the requests' targets and
sizes, so a test sees what was sent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class TextractErrors:
    def __init__(self, answers: list[str | None]):
        self.answers = list(answers)
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with server._lock:
                    server.requests.append({"target": self.headers.get("X-Amz-Target"), "bytes": len(body)})
                    code = server.answers.pop(0) if server.answers else None
                if code is None:
                    status, answer = 200, {"Blocks": [{"BlockType": "LINE", "Id": "l", "Text": "read"}]}
                else:
                    status, answer = 400, {"__type": code, "message": f"{code} (test)"}
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> TextractErrors:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
