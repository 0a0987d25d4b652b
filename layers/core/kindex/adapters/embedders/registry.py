"""Model strings -> embedders.

A collection names its model with one string, which is also the partition key of the index. The names and
their rules (families, dimensions, canonical form) are the value type `kindex.domain.embedding_models`, which the
API validates with when a collection is saved; this registry builds embedders for exactly those names.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from kindex.domain.embedding_models import (
    LOCAL_BGE_SMALL,
    LOCAL_BGE_SMALL_Q,
    LOCAL_E5_SMALL,
    LOCAL_MINILM,
    parse_embedding_model,
)
from kindex.domain.errors import InvalidInput

if TYPE_CHECKING:
    from kindex.domain.ports import Embedder

_cache: dict[tuple[str, str | None, str | None], "Embedder"] = {}
_cache_lock = threading.Lock()


def validate_model_name(model: str) -> str:
    """The canonical form of a model string, or InvalidInput. Cheap: loads nothing, calls nothing."""
    return parse_embedding_model(model).canonical


def known_model(model: str) -> bool:
    """Whether `create_embedder` can build this model (without building it)."""
    try:
        parse_embedding_model(model)
    except InvalidInput:
        return False
    return True


def create_embedder(model: str, *, openai_api_key: str | None = None, openai_base_url: str | None = None) -> "Embedder":
    """The embedder for a model string, one instance per (model, key, base URL) in this process.

    The instance's `model` attribute is the canonical model string.
    """
    spec = parse_embedding_model(model)
    family, canonical, dims = spec.family, spec.canonical, spec.dimensions
    key = (canonical, openai_api_key, openai_base_url) if family == "openai" else (canonical, None, None)
    with _cache_lock:
        embedder = _cache.get(key)
        if embedder is None:
            embedder = _build(family, canonical, dims, openai_api_key, openai_base_url)
            _cache[key] = embedder
        return embedder


def _build(family: str, canonical: str, dims: int | None, api_key: str | None, base_url: str | None) -> "Embedder":
    if family == "hash":
        from kindex.adapters.embedders.hashing import HashEmbedder

        return HashEmbedder(dims or 0)
    if family == "local":
        return _build_local(canonical)
    from kindex.adapters.embedders.openai import OpenAIEmbedder

    name = canonical.removeprefix("openai:").split("@", 1)[0]
    return OpenAIEmbedder(name, api_key=api_key, base_url=base_url, dimensions=dims)


def _build_local(canonical: str) -> "Embedder":
    # Each runtime is imported only when its model is asked for: a process that never uses one never loads it.
    if canonical in (LOCAL_BGE_SMALL, LOCAL_BGE_SMALL_Q):
        from kindex.adapters.embedders.bge import BgeSmallEmbedder

        return BgeSmallEmbedder(canonical)
    if canonical == LOCAL_E5_SMALL:
        from kindex.adapters.embedders.e5 import E5SmallEmbedder

        return E5SmallEmbedder()
    if canonical == LOCAL_MINILM:
        from kindex.adapters.embedders.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    raise InvalidInput(f"no embedder for the local model {canonical!r}")


def clear_embedder_cache() -> None:
    """Forget cached instances (tests; a rotated API key gets a new instance anyway)."""
    with _cache_lock:
        _cache.clear()
