"""OpenAIEmbedder against a real HTTP stub of the embeddings endpoint on 127.0.0.1 (through the openai SDK)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from kindex.adapters.embedders.openai import OpenAIEmbedder
from kindex.domain.errors import EmbeddingFailed
from tests.support.openai_stub import OpenAIStub, Reply, error_body

pytestmark = pytest.mark.integration

API_KEY = "sk-test-SECRET-4f9a8b7c6d5e"
DIMS = 8


class RecordingSleep:
    """Stands in for time.sleep: records the waits instead of waiting."""

    def __init__(self):
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def stub():
    with OpenAIStub(dimensions=DIMS) as running:
        yield running


@pytest.fixture
def sleep():
    return RecordingSleep()


def make_embedder(stub: OpenAIStub, sleep: RecordingSleep, **overrides) -> OpenAIEmbedder:
    options = {
        "api_key": API_KEY,
        "base_url": stub.base_url,
        "dimensions": DIMS,
        "max_retries": 3,
        "timeout": 5.0,
        "base_delay": 0.01,
        "sleep": sleep,
        "model_name": "text-embedding-3-small",
    }
    options.update(overrides)
    return OpenAIEmbedder(options.pop("model_name"), **options)


def expected_rows(stub: OpenAIStub, texts: list[str]) -> np.ndarray:
    rows = np.array([stub.embed_fn(text) for text in texts], dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_embeds_through_the_sdk_with_the_key_model_and_dimensions(stub, sleep):
    # Given an embedder asking for shortened text-embedding-3-small vectors
    embedder = make_embedder(stub, sleep)
    # When two texts are embedded
    vectors = embedder.embed(["first text", "second text"])
    # Then one request carried the key, the model, the size and base64; rows are the stub's, normalised
    (request,) = stub.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body == {
        "model": "text-embedding-3-small",
        "input": ["first text", "second text"],
        "encoding_format": "base64",
        "dimensions": DIMS,
    }
    np.testing.assert_allclose(vectors, expected_rows(stub, ["first text", "second text"]), rtol=1e-6)
    assert embedder.model == "openai:text-embedding-3-small@8"


def test_rate_limit_with_retry_after_is_waited_out_then_succeeds(stub, sleep):
    # Given a 429 that asks the client to come back in 2 seconds, then a success
    stub.script((429, {"Retry-After": "2"}, error_body("Rate limit reached", "rate_limit_exceeded")))
    # When embedding
    vectors = make_embedder(stub, sleep).embed(["hello"])
    # Then it took exactly two requests and waited what the server asked
    assert len(stub.requests) == 2
    assert sleep.waits == [2.0]
    assert vectors.shape == (1, DIMS)


def test_retry_after_ms_wins_and_waits_are_capped(stub, sleep):
    stub.script(
        (429, {"retry-after-ms": "250"}, error_body("slow down")),
        (503, {"Retry-After": "3600"}, error_body("overloaded")),
    )
    make_embedder(stub, sleep, max_delay=5.0).embed(["hello"])
    assert sleep.waits == [0.25, 5.0]


def test_persistent_server_errors_fail_after_all_retries(stub, sleep):
    # Given a provider that answers 500 to everything
    stub.script(*[(500, {}, error_body("The server had an error", error_type="server_error"))] * 10)
    # When embedding with 3 retries
    with pytest.raises(EmbeddingFailed) as failure:
        make_embedder(stub, sleep, max_retries=3).embed(["hello"])
    # Then it tried 4 times, backing off in between, and the failure is retryable later
    assert len(stub.requests) == 4
    assert len(sleep.waits) == 3
    assert failure.value.retryable is True
    assert "HTTP 500" in str(failure.value) and "\n" not in str(failure.value)


def test_large_input_is_split_into_api_sized_batches_in_input_order():
    # Given a stub that returns data items in reverse order and 2,500 short texts
    texts = [f"item {i}" for i in range(2500)]
    with OpenAIStub(dimensions=DIMS, shuffle=True) as shuffled:
        embedder = make_embedder(shuffled, RecordingSleep())
        # When they are embedded
        vectors = embedder.embed(texts)
        # Then exactly two requests went out (2,048 + 452) and row i is text i
        assert shuffled.inputs_per_request == [2048, 452]
        assert shuffled.requests[1].body["input"][0] == "item 2048"
        np.testing.assert_allclose(vectors, expected_rows(shuffled, texts), rtol=1e-5, atol=1e-6)


def test_token_budget_splits_batches_before_the_input_count_does(stub, sleep):
    # Given ~2,000-token texts and a 10,000-token request budget
    texts = [" ".join(["word"] * 2000) + f" {i}" for i in range(7)]
    make_embedder(stub, sleep, max_batch_tokens=10_000).embed(texts)
    assert stub.inputs_per_request == [4, 3]


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_fail_at_once_without_retry(stub, sleep, status):
    # Given a provider that rejects the request
    stub.script((status, {}, error_body("'$.input' is invalid.", "invalid_request")))
    # When embedding
    with pytest.raises(EmbeddingFailed) as failure:
        make_embedder(stub, sleep).embed(["hello"])
    # Then there was a single request, no wait, and a one-line reason naming the status
    assert len(stub.requests) == 1 and sleep.waits == []
    assert f"HTTP {status}" in str(failure.value) and "\n" not in str(failure.value)


def test_api_key_never_appears_in_errors_or_logs(stub, sleep, caplog):
    # Given a provider whose error messages echo the key, first as a 500 then as a 401
    echo = f"Incorrect API key provided: {API_KEY}. You can find your API key at https://platform.openai.com."
    stub.script((500, {}, error_body(echo, error_type="server_error")), (401, {}, error_body(echo, "invalid_api_key")))
    caplog.set_level(logging.DEBUG)
    # When embedding fails
    with pytest.raises(EmbeddingFailed) as failure:
        make_embedder(stub, sleep).embed(["hello"])
    # Then neither the message, its cause chain, nor any log record (message or extra) holds the key
    assert "HTTP 401" in str(failure.value)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__
    texts = [str(failure.value), repr(failure.value), caplog.text]
    texts += [repr(vars(record)) for record in caplog.records]
    assert len(caplog.records) > 0
    assert not [text for text in texts if "SECRET" in text]


def test_timeouts_are_retried(stub, sleep):
    # Given a first answer slower than the client's timeout
    stub.script(Reply(200, delay=1.0))
    # When embedding with a short timeout
    vectors = make_embedder(stub, sleep, timeout=0.2).embed(["hello"])
    # Then the second request succeeded
    assert len(stub.requests) == 2 and len(sleep.waits) == 1
    assert vectors.shape == (1, DIMS)


def test_connection_errors_exhaust_retries_into_embedding_failed(sleep):
    # Given a port where nothing listens any more
    with OpenAIStub() as gone:
        base_url = gone.base_url
    embedder = OpenAIEmbedder(
        "text-embedding-3-small", api_key=API_KEY, base_url=base_url, max_retries=2, base_delay=0.01, sleep=sleep
    )
    with pytest.raises(EmbeddingFailed, match="connection error"):
        embedder.embed(["hello"])
    assert len(sleep.waits) == 2


def test_wrong_vector_size_from_the_provider_fails(sleep):
    # Given a provider returning 8 dimensions to a client that expects 1,536
    with OpenAIStub(dimensions=8) as wrong:
        embedder = make_embedder(wrong, sleep, dimensions=None)
        with pytest.raises(EmbeddingFailed, match="dimensions"):
            embedder.embed(["hello"])
        # And the native size is not sent as a parameter
        assert "dimensions" not in wrong.requests[0].body


def test_empty_input_makes_no_request(stub, sleep):
    assert make_embedder(stub, sleep).embed([]).shape == (0, DIMS)
    assert stub.requests == []


def test_an_injected_client_has_its_own_retries_switched_off(stub, sleep):
    import openai

    # Given a caller's client that would retry 5 times by itself, and one server error
    client = openai.OpenAI(api_key=API_KEY, base_url=stub.base_url, max_retries=5)
    stub.script((500, {}, error_body("boom", error_type="server_error")))
    # When embedding through it
    make_embedder(stub, sleep, client=client).embed(["hello"])
    # Then the retry went through our policy (one recorded wait), not the SDK's hidden one
    assert len(stub.requests) == 2 and len(sleep.waits) == 1


def test_missing_api_key_is_an_embedding_failure(stub, sleep, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EmbeddingFailed, match="API key"):
        make_embedder(stub, sleep, api_key=None).embed(["hello"])
    assert stub.requests == []
