"""bge-small-en-v1.5 on onnxruntime from the files `make install` fetched (model_files.py): real model, no network."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kindex.adapters.embedders.bge import QUERY_INSTRUCTION, BgeSmallEmbedder
from kindex.adapters.embedders.registry import clear_embedder_cache, create_embedder, validate_model_name
from kindex.domain.embedding_models import LOCAL_BGE_SMALL, LOCAL_BGE_SMALL_Q, parse_embedding_model
from kindex.domain.errors import DependencyFailed

pytestmark = [pytest.mark.unit, pytest.mark.slow]  # runs the ONNX model


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_unit_rows(vectors: np.ndarray, count: int) -> None:
    assert vectors.dtype == np.float32 and vectors.shape == (count, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.fixture(scope="module", params=[LOCAL_BGE_SMALL_Q, LOCAL_BGE_SMALL])
def bge(request):
    """Both variants: int8 (the local default, one window per run) and fp32 (in batches of 3 here)."""
    return BgeSmallEmbedder(request.param, batch_size=None if request.param == LOCAL_BGE_SMALL_Q else 3)


def test_bge_embeds_unit_rows_of_384_in_input_order(bge):
    texts = [
        "a long sentence about databases, indexes and the queries that use them " * 5,
        "short",
        "",
        "a medium sentence about cats",
        "tiny text",
    ]
    vectors = bge.embed(texts)
    assert_unit_rows(vectors, len(texts))
    assert bge.model in ("local:bge-small-en-v1.5", "local:bge-small-en-v1.5-q")
    assert (bge.dimensions, bge.window_tokens) == (384, 512)
    assert bge.embed([]).shape == (0, 384) and bge.embed_queries([]).shape == (0, 384)
    for text, row in zip(texts, vectors):
        assert cosine(bge.embed([text])[0], row) >= 0.999


def test_bge_puts_queries_near_their_answers(bge):
    (query,) = bge.embed_queries(["how much protein should an adult eat per day"])
    answer, unrelated = bge.embed(
        [
            "Adults need about 0.8 grams of protein per kilogram of body weight daily.",
            "The stadium was rebuilt in 1998 after the fire.",
        ]
    )
    assert cosine(query, answer) > cosine(query, unrelated) + 0.15


def test_bge_queries_carry_the_instruction_and_passages_do_not(bge):
    # Given the same text as a query and as a passage
    (as_query,) = bge.embed_queries(["protein intake"])
    (as_passage,) = bge.embed(["protein intake"])
    (prefixed_passage,) = bge.embed([QUERY_INSTRUCTION + "protein intake"])
    # Then they differ, and the query is exactly the passage with the model card's instruction before it
    assert cosine(as_query, as_passage) < 0.99
    assert cosine(as_query, prefixed_passage) >= 0.9999


def test_bge_a_text_within_the_window_is_its_plain_cls_vector(bge):
    # The plain model: one pass, [CLS] of the last hidden state, L2-normalised (the model card's pooling)
    from kindex.adapters.embedders.bge import _tokenizer
    from kindex.adapters.embedders.model_files import MODEL_FILE, model_folder
    from kindex.adapters.embedders.windows import onnx_session, padded_batch

    folder = model_folder(bge.model)
    ids = _tokenizer(folder).encode("Knowledge graphs link entities with typed relations.").ids
    (hidden,) = onnx_session(folder / MODEL_FILE, 1).run(["last_hidden_state"], padded_batch([ids]))
    want = hidden[0, 0] / np.linalg.norm(hidden[0, 0])
    got = bge.embed(["Knowledge graphs link entities with typed relations."])[0]
    assert cosine(got, want) >= 0.99999


def test_bge_reads_text_past_its_512_token_window(bge):
    # Given two long texts that differ only far past the 512th token
    head = " ".join(f"word{i % 50}" for i in range(300))  # 600 word pieces
    cats, quarks = " cats and dogs play in the garden" * 30, " quantum chromodynamics describes quarks and gluons" * 30
    first, second, cats_alone = bge.embed([head + cats, head + quarks, cats])
    # Then each leans towards its own ending (a truncating model would give one vector twice)
    assert cosine(first, second) < 0.98
    assert cosine(first, cats_alone) > cosine(second, cats_alone) + 0.02


def test_bge_takes_any_python_string(bge):
    hostile = [
        "before\x00after",
        "lone \ud800 surrogate",
        "ünïcödé 文字 🙂",
        "\u202e\u200b" * 50,
        "<script>" * 400,
        " " * 10_000,
        "\n\t\r",
    ]
    vectors = bge.embed(hostile)
    assert_unit_rows(vectors, len(hostile))
    assert_unit_rows(bge.embed_queries(hostile), len(hostile))


def test_bge_length_sorted_parallel_batches_equal_the_unbatched_path():
    # 15 texts out of length order, one past one window: two batches of 8 on two workers, each batch's windows
    # sorted apart from their input order (a row written back to its sorted place fails here)
    texts = [("alpha beta gamma " * (1 + (i * 37) % 50)) + f"item {i}" for i in range(12)] + ["", "x"]
    # one text of two windows (525 word pieces): 16 windows, so two full batches of 8
    texts.append("alpha beta gamma " * 175 + "item 14")
    reference = BgeSmallEmbedder(batch_size=1, workers=1, bucketed=False).embed(texts)
    batched = BgeSmallEmbedder(batch_size=8, workers=2, bucketed=True).embed(texts)
    assert_unit_rows(batched, len(texts))
    for got, want in zip(batched, reference):
        assert cosine(got, want) >= 0.999


def test_bge_is_safe_to_share_between_threads(bge):
    # Eight short texts and one of two windows (550 word pieces): several batches per call, from every thread
    texts = [f"document {i} about topic {i % 7} " * (3 + 4 * i) for i in range(8)] + ["document 8 about topic 1 " * 110]
    alone = bge.embed(texts)
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda i: bge.embed(texts) if i % 2 else bge.embed_queries(texts), range(4)))
    queries = bge.embed_queries(texts)
    for i, vectors in enumerate(together):
        for got, want in zip(vectors, queries if i % 2 == 0 else alone):
            assert cosine(got, want) >= 0.999


def test_bge_int8_the_default_runs_each_window_alone_so_batching_changes_nothing():
    # Given the int8 graph, whose activations are quantised per run: a window's vector must not depend on the others
    texts = [("alpha beta gamma " * (1 + (i * 37) % 60)) + f"item {i}" for i in range(10)] + ["", "x"]
    default = BgeSmallEmbedder(LOCAL_BGE_SMALL_Q)
    assert default.batch_size == 1 and BgeSmallEmbedder(LOCAL_BGE_SMALL).batch_size == 8
    # When embedded in parallel by the default instance and one text at a time by a single worker
    together = default.embed(texts)
    alone = np.vstack([BgeSmallEmbedder(LOCAL_BGE_SMALL_Q, workers=1).embed([text]) for text in texts])
    # Then the vectors are the same
    assert_unit_rows(together, len(texts))
    np.testing.assert_allclose(together, alone, atol=1e-6)
    # While a batch of 8 would have moved them (why the default runs windows alone)
    batched = BgeSmallEmbedder(LOCAL_BGE_SMALL_Q, batch_size=8, workers=1).embed(texts)
    assert min(float(np.dot(a, b)) for a, b in zip(batched, alone)) < 0.9999


def test_bge_int8_the_default_runs_without_the_memory_arena_and_the_same_vectors():
    from kindex.adapters.embedders.model_files import MODEL_FILE, model_folder
    from kindex.adapters.embedders.windows import available_cores, onnx_session

    texts = [("delta epsilon " * (1 + (i * 53) % 300)) + f"row {i}" for i in range(12)]
    default = BgeSmallEmbedder(LOCAL_BGE_SMALL_Q)
    with_arena = BgeSmallEmbedder(LOCAL_BGE_SMALL_Q, memory_arena=True)
    # The int8 default runs its single-window sessions without onnxruntime's memory arena; fp32 keeps it
    assert (default.memory_arena, with_arena.memory_arena, BgeSmallEmbedder(LOCAL_BGE_SMALL).memory_arena) == (
        False,
        True,
        True,
    )
    got = default.embed(texts)
    session = onnx_session(
        model_folder(LOCAL_BGE_SMALL_Q) / MODEL_FILE, max(1, available_cores() // default.workers), False
    )
    assert session.get_session_options().enable_cpu_mem_arena is False
    # Where tensors are allocated changes no number
    np.testing.assert_allclose(got, with_arena.embed(texts), atol=1e-6)


def test_bge_int8_variant_points_the_same_way_as_fp32():
    sentences = ["The weather is lovely today.", "Insulin resistance drives type 2 diabetes.", "A short one."]
    fp32 = BgeSmallEmbedder(LOCAL_BGE_SMALL).embed(sentences)
    int8 = BgeSmallEmbedder(LOCAL_BGE_SMALL_Q).embed(sentences)
    for a, b in zip(fp32, int8):
        assert 0.95 <= cosine(a, b) < 0.99999  # close, yet another vector space: another model name


def test_bge_without_its_files_says_which_command_fetches_them(tmp_path, monkeypatch):
    # Given a models dir without the files (make install not run)
    monkeypatch.setenv("KINDEX_MODELS_DIR", str(tmp_path))
    # Then embedding fails with a dependency error (503, not a crash) naming the command
    with pytest.raises(DependencyFailed, match="python -m kindex.adapters.embedders.model_files"):
        BgeSmallEmbedder().embed(["hello"])


def test_registry_knows_both_bge_variants():
    for name in (LOCAL_BGE_SMALL, LOCAL_BGE_SMALL_Q):
        spec = parse_embedding_model(name)
        assert (spec.family, spec.dimensions, spec.window_tokens) == ("local", 384, 512)
        assert validate_model_name(name) == name
    clear_embedder_cache()
    embedder = create_embedder(LOCAL_BGE_SMALL_Q)
    assert isinstance(embedder, BgeSmallEmbedder) and embedder.model == LOCAL_BGE_SMALL_Q
    assert create_embedder(LOCAL_BGE_SMALL_Q) is embedder
    assert create_embedder(LOCAL_BGE_SMALL).model == LOCAL_BGE_SMALL
