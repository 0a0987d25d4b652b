"""Running a local transformer over texts of any length: windows, length buckets, parallel batches.

Pure helpers (no model, no I/O) used by the local embedders, tested on their own:

- `split_windows`: a text's content tokens cut into consecutive windows that fit the model (no overlap);
- `length_buckets`: batches of windows of similar length (less padding), each batch a list of window indexes;
- `pool_windows`: one vector per text, the token-weighted mean of its windows' mean-pooled vectors, L2-normalised.
  For a text that fits one window this is exactly the plain mean pooling; for a longer one it is the mean over
  all its tokens, each token seen with the context of its own window.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

logger = logging.getLogger(__name__)


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count: containers pin fewer)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def split_windows(content: Sequence[int], window_content: int) -> list[Sequence[int]]:
    """`content` (token ids without special tokens) in consecutive pieces of at most `window_content` ids.

    An empty text still gets one (empty) window: it has a vector like any other text."""
    if window_content < 1:
        raise ValueError("a window must hold at least one content token")
    if not content:
        return [content]
    return [content[start : start + window_content] for start in range(0, len(content), window_content)]


def length_buckets(lengths: Sequence[int] | np.ndarray, batch_size: int, bucketed: bool = True) -> list[np.ndarray]:
    """Batches of at most `batch_size` indexes into `lengths`: by ascending length when `bucketed` (each batch pads
    to its own longest member, so similar lengths pad little), else in input order (the reference path)."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    order = np.argsort(np.asarray(lengths), kind="stable") if bucketed else np.arange(len(lengths))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def pool_windows(
    window_sums: np.ndarray, window_tokens: np.ndarray, window_text: np.ndarray, text_count: int
) -> np.ndarray:
    """One unit vector per text from its windows' token sums (rows of `window_sums`, `window_tokens` tokens each,
    window i belonging to text `window_text[i]`)."""
    dims = window_sums.shape[1]
    sums = np.zeros((text_count, dims), dtype=np.float64)
    counts = np.zeros(text_count, dtype=np.float64)
    np.add.at(sums, window_text, window_sums)
    np.add.at(counts, window_text, window_tokens)
    pooled = sums / np.clip(counts, 1e-9, None)[:, None]
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return (pooled / norms).astype(np.float32)


@lru_cache(maxsize=8)
def onnx_session(model_path: Path, threads: int, memory_arena: bool = True) -> "onnxruntime.InferenceSession":
    """One CPU session per (graph, thread count, arena); a session may run several batches at once from different
    threads (the local embedders run one single-threaded batch per core). `memory_arena` is onnxruntime's CPU
    memory arena (its default, on); without it each run's tensors come from the process allocator."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.enable_cpu_mem_arena = memory_arena
    session = onnxruntime.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    logger.info(
        "onnx embedding session loaded",
        extra={"model_path": str(model_path), "threads": threads, "memory_arena": memory_arena},
    )
    return session


def padded_batch(windows: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """A BERT-style feed for windows of token ids, padded (id 0, [PAD]) to the longest one."""
    width = max(len(window) for window in windows)
    input_ids = np.zeros((len(windows), width), dtype=np.int64)
    attention_mask = np.zeros_like(input_ids)
    for row, window in enumerate(windows):
        input_ids[row, : len(window)] = window
        attention_mask[row, : len(window)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)}


def encode_windows(
    tokenizer: "tokenizers.Tokenizer", texts: Sequence[str], window_tokens: int
) -> tuple[list[list[int]], np.ndarray]:
    """Every text's word pieces as BERT windows of at most `window_tokens` ids ([CLS] ... [SEP] each, see
    `split_windows`), and for each window the index of its text."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise ValueError("the tokenizer has no [CLS] or [SEP] token: it is not a BERT WordPiece tokenizer")
    windows: list[list[int]] = []
    owners: list[int] = []
    for index, encoding in enumerate(tokenizer.encode_batch(list(texts))):
        for piece in split_windows(encoding.ids[1:-1], window_tokens - 2):
            windows.append([cls_id, *piece, sep_id])
            owners.append(index)
    return windows, np.array(owners, dtype=np.int64)


class BatchPool:
    """Runs an embedder's batches `workers` at a time on its own threads (started at the first parallel call);
    safe to share between the threads that call it."""

    def __init__(self, workers: int, name: str):
        self.workers = workers
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, batches: Sequence[np.ndarray], run: Callable[[np.ndarray], None]) -> None:
        if len(batches) == 1 or self.workers == 1:
            for batch in batches:
                run(batch)
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self.name)
        list(self._pool.map(run, batches))  # list() re-raises the first failure
