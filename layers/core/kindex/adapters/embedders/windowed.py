"""The loop the ONNX embedders share: texts -> BERT windows -> length-sorted parallel batches -> one vector per text.

Each model (bge.py, minilm.py) says only what differs: where its graph and tokenizer are, its query prefix, and how a
batch's hidden states become one token-weighted vector per window (mean pooling or [CLS]). Everything else, and so
every promise of the `Embedder` port about order, empty input, surrogates and long texts, is written once here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kindex.adapters.embedders.text_input import encodable
from kindex.adapters.embedders.windows import (
    BatchPool,
    available_cores,
    encode_windows,
    length_buckets,
    onnx_session,
    padded_batch,
    pool_windows,
)

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers


class WindowedOnnxEmbedder:
    """A BERT-style encoder on onnxruntime (CPU) over texts of any length.

    No text is cut: its word pieces become consecutive windows of `window_tokens` ([CLS] and [SEP] included), and its
    vector is the token-weighted mean of its windows' vectors, L2-normalised (windows.py); a text that fits one
    window gets exactly the model's own vector. Windows run in batches of at most `batch_size`, sorted by length when
    `bucketed`, one single-threaded batch per worker at a time (`workers`, default: the cores this process may use);
    vectors come back in input order. Queries get `query_prefix`, passages nothing. Before tokenizing, surrogates are
    read as UTF-16 would (text_input.py). Sessions and tokenizers load lazily, once per process; an instance is safe
    to share between threads.
    """

    model: str
    dimensions: int
    window_tokens: int
    query_prefix: str = ""

    def __init__(self, *, batch_size: int, workers: int | None, bucketed: bool, memory_arena: bool, name: str):
        self.batch_size = batch_size
        self.workers = workers or available_cores()
        self.bucketed = bucketed
        self.memory_arena = memory_arena
        self._batches = BatchPool(self.workers, name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, prefix="")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, prefix=self.query_prefix)

    # --- what each model says -------------------------------------------------------------------------------

    def _model_files(self) -> tuple["tokenizers.Tokenizer", Path]:
        """The model's tokenizer (without truncation or padding, never reconfigured: it is shared) and the ONNX
        graph's file; DependencyFailed when they are not installed."""
        raise NotImplementedError

    def _window_sums(self, session: "onnxruntime.InferenceSession", feed: dict[str, np.ndarray]) -> np.ndarray:
        """One row per window of the batch `feed`: its vector times its token count (`pool_windows` divides the
        sums of a text's windows by their total token count)."""
        raise NotImplementedError

    # --- the shared loop ------------------------------------------------------------------------------------

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        tokenizer, model_path = self._model_files()
        windows, owners = encode_windows(tokenizer, [prefix + encodable(text) for text in texts], self.window_tokens)
        lengths = np.array([len(window) for window in windows])
        sums = np.zeros((len(windows), self.dimensions), dtype=np.float32)
        session = onnx_session(model_path, max(1, available_cores() // self.workers), self.memory_arena)

        def run(batch: np.ndarray) -> None:
            sums[batch] = self._window_sums(session, padded_batch([windows[i] for i in batch]))

        self._batches.run(length_buckets(lengths, self.batch_size, self.bucketed), run)
        return pool_windows(sums, lengths, owners, len(texts))
