"""Contract of the Embedder port (kindex/domain/ports.py): what every embedder (hash, the local models, OpenAI) must do.

Inputs stay small (a few short texts, one text just past the window) so that the local models run it in seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from kindex.domain.ports import Embedder

# Distinct topics and lengths, so that a row in the wrong place cannot pass for the right one.
TEXTS = [
    "The weather is lovely today, sunny and warm.",
    "Indexes speed up database queries over large tables.",
    "A recipe for bread: flour, water, salt and yeast, baked for forty minutes.",
    "Ünïcödé text with accents, 文字 and an emoji 🙂.",
    "x",
]
# About seven word pieces a repetition in BERT's vocabulary and in cl100k_base.
FILLER = "The cat sat on the mat by the door. "
TAIL = "Quantum chromodynamics describes how quarks and gluons bind into protons and neutrons. "
# Batching may round int8 activations differently (one scale per batch tensor); anything else is a wrong row.
SAME_TEXT_COSINE = 0.999


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_unit_rows(vectors: np.ndarray, count: int, dimensions: int) -> None:
    assert vectors.dtype == np.float32
    assert vectors.shape == (count, dimensions)
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


class EmbedderContract:
    """Subclass in a `Test*` class that provides `embedder`, and says how the model reads queries and long texts."""

    #: Whether queries get other vectors than passages (models trained with instructions: bge, e5).
    queries_differ: bool = False
    #: The tokens of text a window (or the provider's input) holds; None when the embedder has no window.
    window_tokens: int | None = None
    #: True when text past `window_tokens` is cut off (OpenAI), False when it is read as further windows.
    truncates: bool = False

    @pytest.fixture
    def embedder(self) -> Embedder:
        raise NotImplementedError(f"{type(self).__name__} must provide the `embedder` fixture")

    def test_rows_are_unit_float32_vectors_of_the_declared_dimensions(self, embedder):
        # When a few texts are embedded as passages and as queries
        passages, queries = embedder.embed(TEXTS), embedder.embed_queries(TEXTS)
        # Then each is one finite unit float32 row per text, of the embedder's declared size, named by its model
        assert isinstance(embedder.model, str) and embedder.model
        assert isinstance(embedder.dimensions, int) and embedder.dimensions > 0
        assert_unit_rows(passages, len(TEXTS), embedder.dimensions)
        assert_unit_rows(queries, len(TEXTS), embedder.dimensions)

    def test_no_texts_give_an_empty_matrix(self, embedder):
        for vectors in (embedder.embed([]), embedder.embed_queries([])):
            assert vectors.dtype == np.float32
            assert vectors.shape == (0, embedder.dimensions)

    def test_rows_come_back_in_input_order_each_as_the_text_alone(self, embedder):
        # Given the texts embedded one call each
        alone = np.vstack([embedder.embed([text]) for text in TEXTS])
        # When they are embedded in one call, in reverse order
        together = embedder.embed(TEXTS[::-1])[::-1]
        # Then every row is its own text's vector, and no two texts share one
        for got, want in zip(together, alone):
            assert cosine(got, want) >= SAME_TEXT_COSINE
        assert max(cosine(alone[i], alone[j]) for i in range(len(TEXTS)) for j in range(i)) < SAME_TEXT_COSINE

    def test_the_same_text_twice_gets_the_same_vector_twice(self, embedder):
        vectors = embedder.embed([TEXTS[0], TEXTS[1], TEXTS[0]])
        assert cosine(vectors[0], vectors[2]) >= SAME_TEXT_COSINE
        assert cosine(vectors[0], embedder.embed([TEXTS[0]])[0]) >= SAME_TEXT_COSINE

    def test_a_lone_surrogate_is_read_as_the_replacement_character(self, embedder):
        # Given texts with lone surrogates (a high one, a low one as `surrogateescape` leaves, one at the very end)
        hostile = ["a\ud800b", "lone \udc80 low surrogate", "ends with a high surrogate \ud83d"]
        replaced = ["a\ufffdb", "lone \ufffd low surrogate", "ends with a high surrogate \ufffd"]
        # When embedded as passages and as queries / Then nothing fails, and each gets its U+FFFD twin's vector
        for embed in (embedder.embed, embedder.embed_queries):
            got, want = embed(hostile), embed(replaced)
            assert_unit_rows(got, len(hostile), embedder.dimensions)
            for row, twin in zip(got, want):
                assert cosine(row, twin) >= SAME_TEXT_COSINE

    def test_a_surrogate_pair_is_read_as_the_character_it_encodes(self, embedder):
        pair, character = embedder.embed(["smile \ud83d\ude00 please", "smile \U0001f600 please"])
        assert cosine(pair, character) >= SAME_TEXT_COSINE

    def test_a_text_past_the_window_is_read_whole_or_cut_as_the_embedder_says(self, embedder):
        # Given a text whose first part alone fills more than the window, followed by a different topic
        window = self.window_tokens or 64
        head = FILLER * (window // 7 + 8)
        tail = TAIL * 12
        whole, head_only, tail_only = embedder.embed([head + tail, head, tail])
        assert_unit_rows(np.vstack([whole]), 1, embedder.dimensions)
        if self.truncates:
            # Then a truncating embedder never sees the tail: the vector is the head's
            assert cosine(whole, head_only) >= SAME_TEXT_COSINE
        else:
            # Then the tail counts: the vector leans from the head's towards the tail's (windows averaged)
            assert cosine(whole, head_only) < SAME_TEXT_COSINE
            assert cosine(whole, tail_only) > cosine(head_only, tail_only) + 0.01

    def test_queries_are_embedded_as_the_model_was_trained(self, embedder):
        # When the same texts are embedded as queries and as passages
        queries, passages = embedder.embed_queries(TEXTS), embedder.embed(TEXTS)
        # Then instruction-trained models give queries their own vectors (still near the text's), others the same
        for query, passage in zip(queries, passages):
            if self.queries_differ:
                assert 0.5 < cosine(query, passage) < SAME_TEXT_COSINE
            else:
                assert cosine(query, passage) >= SAME_TEXT_COSINE
