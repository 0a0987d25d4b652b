"""One of `kindex serve`'s query processes (kindex_local.query_processes): `python -m kindex_local.query_process
--fd N` answers the query function's requests that arrive on socket N, running the same handler as the server
would, on as many threads as the server has function instances, inside CPU slots like the server's (by default
its share of the cores: deployment.server_cpu_slots).

It builds nothing of its own: the handler's container reads the settings from the environment the server handed
down, with KINDEX_INDEX_FOLLOWER set (the embedded index follows the server's writes and never writes). Ctrl-C is
the server's to act on: the process runs in a process group of its own, which a terminal's Ctrl-C does not reach,
and ignores SIGINT sent to it anyway. The end of the socket (the server stopped, or died) and SIGTERM end the
process, once the requests in flight have answered."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

from kindex_local.frames import FrameTooLarge, encode_frame, read_frame

logger = logging.getLogger(__name__)
# How often the followed embedded index lets go of what the server deleted (`_sweep`).
SWEEP_INTERVAL_S = 2.0


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")  # as `kindex serve`
    parser = argparse.ArgumentParser(prog="kindex_local.query_process")
    parser.add_argument("--fd", type=int, required=True, help="the socket the server hands requests on")
    parser.add_argument("--of", type=int, default=1, help="how many query processes the server runs")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    # SIGTERM ends reading: the loop below sees the end of the socket and leaves like when the server hangs up.
    signal.signal(signal.SIGTERM, lambda *_: _stop_reading(sock))

    from functions import query
    from kindex.api.http import error_response
    from kindex.settings import load_settings
    from kindex_local.deployment import server_cpu_slots
    from kindex_local.server import CONCURRENCY, LambdaContext

    slots = server_cpu_slots(load_settings(), query_processes=args.of)
    send_lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        try:
            frame = encode_frame(message)
        except (FrameTooLarge, TypeError, ValueError):
            logger.exception("a query answer cannot be sent")
            frame = encode_frame({"id": message.get("id"), "response": failed()})
        with send_lock:
            try:
                sock.sendall(frame)
            except OSError:
                pass  # the server is gone: the reading loop ends at the end of the socket

    def failed() -> dict[str, Any]:
        return error_response(502, "bad_gateway", "the function failed")  # what Gateway.dispatch answers

    def run(request_id: int, event: dict[str, Any]) -> None:
        try:
            with slots.held() if slots is not None else nullcontext():
                response = query.handler(event, LambdaContext("kindex-query"))
        except Exception:
            logger.exception("handler failed", extra={"function": "kindex-query"})
            response = failed()
        send({"id": request_id, "response": response})

    from kindex.compose import container

    services = container()  # built before the first request: two threads' first calls would build two
    stop_sweeping = threading.Event()
    if not services.settings.search_url:
        from kindex.compose import local_adapters

        threading.Thread(
            target=_sweep, args=(local_adapters(services).embedded_index, stop_sweeping), daemon=True
        ).start()
    send({"ready": True})
    with ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="kindex-function") as instances:
        with sock.makefile("rb") as stream:
            while True:
                try:
                    message = read_frame(stream)
                except OSError:
                    break
                except (FrameTooLarge, ValueError):
                    logger.exception("the server sent a frame this process cannot read")
                    break
                if message is None:
                    break
                instances.submit(run, message["id"], message["event"])
    stop_sweeping.set()
    sock.close()
    return 0


def _sweep(index: Any, stop: threading.Event) -> None:
    """Let go of the index's partitions the server replaced or removed (LocalSearchIndex.sweep) every few seconds,
    searched or not: a deleted collection leaves neither this process's memory nor, through a file this process holds
    open, the disk."""
    while not stop.wait(SWEEP_INTERVAL_S):
        try:
            index.sweep()
        except Exception:
            logger.exception("sweeping the followed index failed; the next sweep tries again")


def _stop_reading(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass  # already closed


if __name__ == "__main__":
    sys.exit(main())
