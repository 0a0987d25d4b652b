"""The Embedder contract (tests/contract/mixins/embedder.py) run against every embedder: the hash embedder, the local
models from their installed files (MiniLM, bge int8 and fp32, e5), and OpenAI through the SDK against the real HTTP
stub on 127.0.0.1; plus the vectors the local models gave before their shared window-encoding base."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from kindex.adapters.embedders.openai import MAX_INPUT_TOKENS, OpenAIEmbedder
from kindex.adapters.embedders.registry import create_embedder
from kindex.domain.embedding_models import LOCAL_BGE_SMALL, LOCAL_BGE_SMALL_Q, LOCAL_E5_SMALL, LOCAL_MINILM
from tests.contract.mixins.embedder import EmbedderContract, cosine
from tests.support.openai_stub import OpenAIStub

pytestmark = pytest.mark.contract

PINS = Path(__file__).parent / "data" / "embedder_vectors.json"
PINNED_PASSAGES = ["The weather is lovely today.", "Ünïcödé text: 文字 and an emoji 🙂.", "word " * 700]
PINNED_QUERIES = ["Indexes speed up database queries."]


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    # Nothing here may reach Hugging Face: the models come from installed packages and files.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def local_model(name: str):
    """The registry's instance: the tuned defaults (batch sizes, workers, memory arena) the pipeline uses."""
    return create_embedder(name)


class TestHashEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self):
        return create_embedder("hash:384")


@pytest.mark.slow  # runs the ONNX model
class TestMiniLMEmbedder(EmbedderContract):
    window_tokens = 256

    @pytest.fixture
    def embedder(self):
        return local_model(LOCAL_MINILM)


@pytest.mark.slow  # runs the ONNX model
class TestBgeSmallInt8Embedder(EmbedderContract):
    window_tokens = 512
    queries_differ = True

    @pytest.fixture
    def embedder(self):
        return local_model(LOCAL_BGE_SMALL_Q)


@pytest.mark.slow  # runs the ONNX model
class TestBgeSmallEmbedder(EmbedderContract):
    window_tokens = 512
    queries_differ = True

    @pytest.fixture
    def embedder(self):
        return local_model(LOCAL_BGE_SMALL)


@pytest.mark.slow  # runs the ONNX model
class TestE5SmallEmbedder(EmbedderContract):
    window_tokens = 512
    queries_differ = True

    @pytest.fixture
    def embedder(self):
        return local_model(LOCAL_E5_SMALL)


class TestOpenAIEmbedder(EmbedderContract):
    window_tokens = MAX_INPUT_TOKENS
    truncates = True

    @pytest.fixture
    def stub(self):
        with OpenAIStub(dimensions=16) as running:
            yield running

    @pytest.fixture
    def embedder(self, stub):
        return OpenAIEmbedder(
            "text-embedding-3-small",
            api_key="sk-test-contract",
            base_url=stub.base_url,
            dimensions=16,
            max_retries=0,
            timeout=10.0,
        )

    def test_what_goes_out_is_valid_utf8_with_the_surrogates_replaced(self, embedder, stub):
        # When a text with a lone surrogate and a split surrogate pair is embedded
        sent_before = len(stub.requests)
        embedder.embed(["a\ud800b \ud83d\ude00"])
        # Then the provider received it as UTF-8 JSON, the lone one as U+FFFD and the pair as its character
        (request,) = stub.requests[sent_before:]
        assert request.body["input"] == ["a\ufffdb \U0001f600"]


def _pinned(model: str) -> list[np.ndarray]:
    """The model's pinned sets, one per CPU they were computed on: each the passages' vectors, then the queries'."""
    pins = json.loads(PINS.read_text())
    sets = [pins["vectors"][model]] + [
        other["vectors"][model] for other in pins["other_cpus"] if model in other["vectors"]
    ]
    return [
        np.vstack([np.frombuffer(base64.b64decode(row), dtype="<f4") for row in found["passages"] + found["queries"]])
        for found in sets
    ]


@pytest.mark.slow
@pytest.mark.parametrize("model", [LOCAL_MINILM, LOCAL_BGE_SMALL_Q, LOCAL_BGE_SMALL, LOCAL_E5_SMALL])
def test_the_local_models_give_the_vectors_they_gave_before_the_shared_base(model):
    # Given the vectors each local model gave at 3d20d85 for short, non-ASCII and past-the-window texts (for
    # bge-small int8 on two CPUs, whose int8 kernels round differently)
    pins = _pinned(model)
    embedder = local_model(model)
    # When the same texts are embedded now
    got = np.vstack([embedder.embed(PINNED_PASSAGES), embedder.embed_queries(PINNED_QUERIES)])
    # Then every vector is that of one pinned set: cosine 1 within 1e-4, which rules out a changed pipeline (another
    # pooling, window or prefix moves it by 1e-2 or more)
    closest = [min(cosine(a, b) for a, b in zip(got, pinned, strict=True)) for pinned in pins]
    assert max(closest) == pytest.approx(1.0, abs=1e-4), closest
