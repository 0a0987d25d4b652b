"""A TCP server on 127.0.0.1 that accepts connections, reads whatever is sent and never answers: a dependency that
is up but hung (the worst kind: connecting succeeds, so only a read timeout ends the wait)."""

from __future__ import annotations

import socket
import threading


class BlackHole:
    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> BlackHole:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for connection in self._open:
            connection.close()
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._open.append(connection)  # held open, never read from or answered
