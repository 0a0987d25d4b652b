"""A writer process killed with SIGKILL at some moment of its work (crash-safety tests of on-disk stores)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def kill_writer_after(target: Callable, root: Path, delay: float, ready_timeout: float) -> None:
    """Start `target(str(root), ready)` in a fresh (spawned) process, wait until it sets `ready`, let it work
    `delay` seconds more, then kill it without warning and reap it."""
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    writer = context.Process(target=target, args=(str(root), ready))
    writer.start()
    assert ready.wait(ready_timeout), "the writer never became ready"
    time.sleep(delay)
    os.kill(writer.pid, signal.SIGKILL)
    writer.join()
