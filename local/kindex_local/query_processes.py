"""`kindex serve`'s query processes: the query function's requests answered by child processes, each with its own
interpreter (and so its own GIL) and its own container, over a socket pair each (kindex_local.frames).

One interpreter is the limit on a 2-core machine: sixteen query clients left it ~20 % idle whatever the CPU slots,
batching or GIL switch interval, and two server processes answered 25 % more queries/s (docs/decisions.md, issue
27). The server keeps everything else (HTTP, the authorizer, usage plans, the api function, the ingest worker, the
only writer of the embedded index); a child runs the query handler only, on the index as a follower (it reads the
server's files and follows its writes, never writes: KINDEX_INDEX_FOLLOWER in its environment).

A request that arrives while no other query is in flight is answered by the server itself (`local`, the handler
it would run without children), on the index it writes: one client at a time pays neither the hop (~0.5 ms) nor
the follower's checks (docs/decisions.md). Any other request goes to the ready child with the fewest requests in
flight, the first of them on a tie (so a light load keeps to one process and its warm caches); the server thread
that carries it gives its CPU slot back while it waits (the child computes under its own slots: its share of the
cores, deployment.server_cpu_slots). A child that dies fails its pending requests with the 502 a failing function
gets, and is started again (at once after a long life, else after a pause that doubles up to 30 s); meanwhile the
others answer, and with none ready a request waits for one within its budget, then gets a 503 to retry."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from kindex.api.http import RETRY_AFTER_S, error_response
from kindex.app import cpu_slots
from kindex_local.frames import FrameTooLarge, encode_frame, read_frame

logger = logging.getLogger(__name__)

CHILD_COMMAND = (sys.executable, "-m", "kindex_local.query_process")
FIRST_RESTART_DELAY_S = 0.5
MAX_RESTART_DELAY_S = 30.0
# A child that served this long before it died is started again at once; one that died sooner (or before it was
# ready) waits the restart delay, which doubles each time: a child that cannot start does not spin.
STABLE_AFTER_S = 10.0
STOP_TIMEOUT_S = 5.0
# How long past the request's budget the server waits for a child's answer (the child keeps the budget itself).
ANSWER_GRACE_S = 5.0


def default_count(cores: int) -> int:
    """One query process per core when there are two or more; on one core a second interpreter gains nothing."""
    return cores if cores >= 2 else 0


def _failed() -> dict[str, Any]:
    return error_response(502, "bad_gateway", "the function failed")  # what Gateway.dispatch answers for a raise


def _unavailable() -> dict[str, Any]:
    return error_response(
        503,
        "dependency_unavailable",
        "no query process could answer in time; retry shortly",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


class _Child:
    """One query process slot: the running process (replaced when it dies), its socket and its requests in flight.
    `ready` and `pending` change under the owner's condition only."""

    def __init__(self, number: int):
        self.number = number
        self.process: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.send_lock = threading.Lock()  # one frame at a time on the socket
        self.ready = False
        self.pending: dict[int, Future] = {}


class QueryProcesses:
    """`count` query processes and `handler`, the query function's handler that hands each request to one of them
    (or to `local`, the server's own handler, when it is the only one in flight). `stop` ends them (the server's
    shutdown: LocalServer.background)."""

    def __init__(
        self,
        count: int,
        budget_s: float,
        command: Sequence[str] = CHILD_COMMAND,
        local: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None,
    ):
        if count < 1:
            raise ValueError("count must be at least 1")
        self.budget_s = budget_s
        self._command = list(command)
        self._local = local
        self._children = [_Child(number) for number in range(count)]
        self._changed = threading.Condition()  # a child became ready or went away; guards the children's state
        self._in_flight = 0  # requests in `handler` now, answered here or by a child (under `_changed`)
        self._lifecycle = threading.Lock()  # `_stopping` against a process being started
        self._stopping = False
        self._stopped = threading.Event()  # cuts a restart delay short
        self._ids = itertools.count(1)
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start every child, each watched by a thread of its own that reads its answers and restarts it."""
        self._threads = [
            threading.Thread(target=self._supervise, args=(child,), name=f"kindex-query-process-{child.number}")
            for child in self._children
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    def handler(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """The query function: answered here when it is the only query in flight and there is a `local` handler,
        else by a child, while the calling thread's CPU slot is free."""
        with self._changed:
            alone = self._in_flight == 0
            self._in_flight += 1
        try:
            if alone and self._local is not None:
                return self._local(event, context)
            return self._hand_over(event)
        finally:
            with self._changed:
                self._in_flight -= 1

    def _hand_over(self, event: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        try:
            # Encoded once: a send that fails goes again, whole, to another child.
            frame = encode_frame({"id": request_id, "event": event})
        except FrameTooLarge:
            return error_response(413, "payload_too_large", "request too large")
        deadline = time.monotonic() + self.budget_s
        with cpu_slots.away():
            return self._answer(request_id, frame, deadline)

    def _answer(self, request_id: int, frame: bytes, deadline: float) -> dict[str, Any]:
        while True:
            submitted = self._submit(request_id, frame, deadline)
            if submitted is None:
                return _unavailable()
            child, future = submitted
            if future is not None:
                break
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()) + ANSWER_GRACE_S)
        except FutureTimeout:
            with self._changed:
                child.pending.pop(request_id, None)
            logger.error("a query process did not answer in time", extra={"query_process": child.number})
            return _unavailable()

    def _submit(self, request_id: int, frame: bytes, deadline: float) -> tuple[_Child, Future | None] | None:
        """Send the request to the ready child with the fewest in flight: that child and the future of its answer
        (None: the send failed, so the child never got the request whole: pick again); None when no child was ready
        before the deadline, or the server stops."""
        with self._changed:
            while True:
                if self._stopping:
                    return None
                ready = [child for child in self._children if child.ready]
                if ready:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)
            child = min(ready, key=lambda candidate: len(candidate.pending))  # the first of the least busy
            future: Future = Future()
            child.pending[request_id] = future
            sock = child.sock
        assert sock is not None  # a ready child has its socket
        try:
            with child.send_lock:
                sock.sendall(frame)
        except OSError:
            with self._changed:
                child.pending.pop(request_id, None)
                if child.sock is sock:
                    child.ready = False  # it is going away; its thread sees the end of its socket
            return child, None
        return child, future

    def _supervise(self, child: _Child) -> None:
        delay = FIRST_RESTART_DELAY_S
        while True:
            started = time.monotonic()
            try:
                served = self._run(child)
            except Exception:  # this thread is the slot's only keeper: it must not end while the server runs
                logger.exception("a query process failed to run", extra={"query_process": child.number})
                self._gone(child)
                served = False
            if served is None:
                return  # the server stops
            if served and time.monotonic() - started >= STABLE_AFTER_S:
                wait, delay = 0.0, FIRST_RESTART_DELAY_S
            else:
                wait, delay = delay, min(delay * 2, MAX_RESTART_DELAY_S)
            if self._stopped.wait(wait):
                return

    def _run(self, child: _Child) -> bool | None:
        """One life of the child's process, from its start to its end: whether it had become ready; None when the
        server stops."""
        spawned = self._spawn(child)
        if spawned is None:
            return None
        pid = child.process.pid if child.process is not None else None
        was_ready = spawned and self._serve(child)
        failed = self._gone(child)
        exit_code = self._reap(child)
        if self._stopping:
            return None
        logger.error(  # never the requests' events: they carry API keys
            "a query process ended; starting another",
            extra={"query_process": child.number, "pid": pid, "exit_code": exit_code, "requests_failed": failed},
        )
        return was_ready

    def _spawn(self, child: _Child) -> bool | None:
        """Start the child's process: True, False when it could not be started, None when the server stops."""
        parent_end, child_end = socket.socketpair()
        try:
            with self._lifecycle:
                if self._stopping:
                    parent_end.close()
                    return None
                fd = child_end.fileno()
                # The child inherits the server's environment, which start() filled with the settings (stdout and
                # stderr too: its logs go where the server's go). Its own process group: a terminal's Ctrl-C reaches
                # the server's group only, and the server stops its children itself (a child starting up could not
                # ignore SIGINT before its interpreter is up: it died of a KeyboardInterrupt in `site`).
                child.process = subprocess.Popen(
                    [*self._command, "--fd", str(fd), "--of", str(len(self._children))],
                    pass_fds=(fd,),
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, "KINDEX_INDEX_FOLLOWER": "true"},
                    process_group=0,
                )
                child.sock = parent_end
        except OSError:
            logger.exception("a query process could not be started", extra={"query_process": child.number})
            parent_end.close()
            child.process, child.sock = None, None
            return False
        finally:
            child_end.close()
        return True

    def _serve(self, child: _Child) -> bool:
        """Read the child's frames until its socket ends (or it breaks the protocol: then it is killed). Whether it
        had become ready."""
        assert child.sock is not None and child.process is not None
        was_ready = False
        with child.sock.makefile("rb") as stream:
            while True:
                try:
                    message = read_frame(stream)
                except OSError:
                    return was_ready
                except (FrameTooLarge, ValueError):
                    self._kill(child, "a query process sent a frame it may not (too large, or not JSON); killing it")
                    return was_ready
                if message is None:
                    return was_ready
                if message.get("ready") is True:
                    was_ready = True
                    with self._changed:
                        child.ready = True
                        self._changed.notify_all()
                elif not self._resolve(child, message):
                    self._kill(child, "a query process sent a malformed answer; killing it")
                    return was_ready

    def _kill(self, child: _Child, why: str) -> None:
        logger.error(why, extra={"query_process": child.number})
        if child.process is not None:
            child.process.kill()

    def _resolve(self, child: _Child, message: dict[str, Any]) -> bool:
        request_id, response = message.get("id"), message.get("response")
        if not isinstance(request_id, int) or not isinstance(response, dict):
            return False
        with self._changed:
            future = child.pending.pop(request_id, None)
        if future is not None:  # else its request gave up waiting
            future.set_result(response)
        return True

    def _gone(self, child: _Child) -> int:
        """The child's socket ended: nothing more goes to it, and its pending requests fail. How many did."""
        with self._changed:
            child.ready = False
            pending, child.pending = child.pending, {}
            self._changed.notify_all()
        for future in pending.values():
            future.set_result(_failed())
        return len(pending)

    def _reap(self, child: _Child) -> int | None:
        """Wait for the child's process to end (kill it if it does not), close its socket: its exit code."""
        process, sock = child.process, child.sock
        if sock is not None:
            sock.close()
        if process is None:
            return None
        try:
            return process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def stop(self) -> None:
        """Hang up on every child (each exits at the end of its socket), wait up to 5 s for them, kill the rest."""
        with self._lifecycle:
            self._stopping = True
            running = [(child.process, child.sock) for child in self._children if child.process is not None]
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()  # requests waiting for a ready child get their 503 now
        for _, sock in running:
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process, _ in running:
            assert process is not None
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("a query process did not stop in time; killing it", extra={"pid": process.pid})
                process.kill()
                process.wait()
        for thread in self._threads:
            thread.join(timeout=STOP_TIMEOUT_S)

    @property
    def pids(self) -> list[int]:
        """The children's process ids now (the ones running or not yet reaped)."""
        with self._lifecycle:
            return [child.process.pid for child in self._children if child.process is not None]
