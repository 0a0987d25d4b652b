"""Model strings -> embedders.

A collection names its model with one string, which is also the partition key of the index:

- `hash:<dimensions>`: the deterministic, non-semantic HashEmbedder (tests, CI), e.g. `hash:384`;
- `local:all-MiniLM-L6-v2`: MiniLM run locally with onnxruntime (384 dimensions);
- `openai:<name>` or `openai:<name>@<dimensions>`: OpenAI embeddings, e.g. `openai:text-embedding-3-small`
  (1536) or `openai:text-embedding-3-large@1024` (shortened vectors; text-embedding-3 models only).
  A name we do not know (an OpenAI-compatible server's model) needs the `@<dimensions>` suffix.

Names are canonicalised (`hash:0384` -> `hash:384`; `@1536` on text-embedding-3-small is dropped
because it changes nothing), so that equal vector spaces always share one name.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

from kindex.domain.errors import InvalidInput

if TYPE_CHECKING:
    from kindex.domain.ports import Embedder

_HASH = re.compile(r"hash:(?P<dims>[0-9]{1,6})")
_OPENAI = re.compile(r"openai:(?P<name>[A-Za-z0-9][A-Za-z0-9._\-/]{0,127})(?:@(?P<dims>[0-9]{1,6}))?")
_LOCAL_MINILM = "local:all-MiniLM-L6-v2"
_MAX_MODEL_CHARS = 160

_cache: dict[tuple[str, str | None, str | None], "Embedder"] = {}
_cache_lock = threading.Lock()


def _parse(model: str) -> tuple[str, str, int | None]:
    """(family, name, dimensions) of a model string, validated; no model is loaded."""
    if not isinstance(model, str) or len(model) > _MAX_MODEL_CHARS:
        raise InvalidInput("embedding model must be a short string such as 'local:all-MiniLM-L6-v2'")
    if model == _LOCAL_MINILM:
        return "local", model, None
    if match := _HASH.fullmatch(model):
        from kindex.embedding.hashing import MAX_DIMENSIONS, MIN_DIMENSIONS

        dims = int(match["dims"])
        if not MIN_DIMENSIONS <= dims <= MAX_DIMENSIONS:
            raise InvalidInput(f"hash embedding dimensions must be between {MIN_DIMENSIONS} and {MAX_DIMENSIONS}")
        return "hash", f"hash:{dims}", dims
    if match := _OPENAI.fullmatch(model):
        from kindex.embedding.openai_embedder import KNOWN_MODEL_DIMENSIONS, resolve_dimensions

        name = match["name"]
        dims = resolve_dimensions(name, int(match["dims"]) if match["dims"] else None)
        canonical = f"openai:{name}" if dims == KNOWN_MODEL_DIMENSIONS.get(name) else f"openai:{name}@{dims}"
        return "openai", canonical, dims
    raise InvalidInput(
        f"unknown embedding model {model[:80]!r}: use 'local:all-MiniLM-L6-v2', 'hash:<dimensions>' "
        "or 'openai:<model>[@<dimensions>]'")


def validate_model_name(model: str) -> str:
    """The canonical form of a model string, or InvalidInput. Cheap: loads nothing, calls nothing."""
    return _parse(model)[1]


def create_embedder(model: str, *, openai_api_key: str | None = None,
                    openai_base_url: str | None = None) -> "Embedder":
    """The embedder for a model string, one instance per (model, key, base URL) in this process.

    The instance's `model` attribute is the canonical model string.
    """
    family, canonical, dims = _parse(model)
    key = (canonical, openai_api_key, openai_base_url) if family == "openai" else (canonical, None, None)
    with _cache_lock:
        embedder = _cache.get(key)
        if embedder is None:
            embedder = _build(family, canonical, dims, openai_api_key, openai_base_url)
            _cache[key] = embedder
        return embedder


def _build(family: str, canonical: str, dims: int | None, api_key: str | None, base_url: str | None) -> "Embedder":
    if family == "hash":
        from kindex.embedding.hashing import HashEmbedder

        return HashEmbedder(dims or 0)
    if family == "local":
        from kindex.embedding.local_minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    from kindex.embedding.openai_embedder import OpenAIEmbedder

    name = canonical.removeprefix("openai:").split("@", 1)[0]
    return OpenAIEmbedder(name, api_key=api_key, base_url=base_url, dimensions=dims)


def clear_embedder_cache() -> None:
    """Forget cached instances (tests; a rotated API key gets a new instance anyway)."""
    with _cache_lock:
        _cache.clear()
