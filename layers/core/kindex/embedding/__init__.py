"""Embedders: `create_embedder(model)` turns a collection's model string into an `Embedder`.

Concrete embedders (hashing, local_minilm, openai_embedder) are imported on demand so that a function
that never embeds locally never pays for onnxruntime, and one that never calls OpenAI never imports it.
"""

from kindex.embedding.registry import clear_embedder_cache, create_embedder, known_model, validate_model_name

__all__ = ["clear_embedder_cache", "create_embedder", "known_model", "validate_model_name"]
