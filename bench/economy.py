"""Embedding economy, counted at a local OpenAI stub server (tests/support/openai_stub.py) behind
`openai:text-embedding-3-small`, through the real local ingest path (catalog -> blob -> queue -> ingest function).

A 1,000-chunk corpus (100 documents of 10 maxChars chunks):
- first ingest;
- unchanged re-ingest: every document PUT again with the same content, then every source blob's event delivered
  again (what a duplicate S3 notification or `kindex ingest` of the same folder does);
- 1 % edit: one word changed in one chunk of each of 10 documents (10 of the 1,000 chunks).
Each step: requests the stub received, texts sent, and tokens sent (cl100k, counted on the request bodies).
Then OpenAI requests for one document of 2,048 chunks, beside the minimum the API limits allow
(2,048 inputs and 300,000 tokens per request).

And the DynamoDB requests of one query on the AWS backend (moto, as tests/integration/test_query_requests_aws.py
counts them): a hybrid query of k=10 over two collections of 60 documents each.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, Figure, SyntheticCorpus, drain_worker, local_deployment, log

TENANT = "default"
MODEL = "openai:text-embedding-3-small"
CHUNK_CHARS = 1000


def _tokens(texts: list[str]) -> int:
    from kindex.adapters.embedders.openai import _encoding

    return sum(len(tokens) for tokens in _encoding().encode_ordinary_batch(texts))


class _Counter:
    def __init__(self, stub):
        self.stub = stub
        self.mark = 0

    def take(self) -> dict:
        requests = self.stub.requests[self.mark :]
        self.mark = len(self.stub.requests)
        texts = [text for request in requests for text in request.body.get("input", [])]
        return {"requests": len(requests), "texts": len(texts), "tokens": _tokens(texts)}


def _put_all(services, documents: dict[str, str]) -> None:
    from kindex.domain.models import DocumentInput

    for document_id, content in documents.items():
        services.catalog.put_document(TENANT, "economy", document_id, DocumentInput(title=document_id, content=content))
    drain_worker()


def _dynamodb_requests_per_query() -> Figure:
    from collections import Counter

    import pytest

    from kindex.domain.models import CollectionInput, DocumentInput
    from kindex.domain.query import QueryRequest
    from tests.support.aws_deployment import aws_stack

    collections, per_collection = ("a", "b"), 60
    with pytest.MonkeyPatch.context() as patch, aws_stack(patch) as stack:
        for collection in collections:
            stack.services.catalog.put_collection("t", collection, CollectionInput(allow_guests=True))
            for i in range(per_collection):
                stack.services.catalog.put_document(
                    "t",
                    collection,
                    f"d{i:03d}",
                    DocumentInput(content=f"Walrus {i} of herd {collection} hauls out on the ice floe."),
                )
        stack.drain()
        request = QueryRequest(query="walrus herd ice floe", k=10, mode="hybrid")
        sent = stack.dynamodb_requests(lambda: stack.services.query.query("t", list(collections), request, multi=True))
    operations = Counter(r["operation"] for r in sent)
    candidates = (
        sum(
            len(entry["Keys"]) for r in sent if r["operation"] == "BatchGetItem" for entry in r["RequestItems"].values()
        )
        - request.k
    )
    log(f"economy: one query's DynamoDB requests {dict(operations)}")
    return Figure(
        "dynamodb_requests_per_query",
        len(sent),
        "requests",
        section="query economy",
        details={**operations, "candidate_documents": candidates},
        notes=f"hybrid k={request.k} over {len(collections)} collections of {per_collection} documents, "
        "AWS backend on moto: collection reads, batched document and chunk reads, the query log",
    )


def run() -> list[Figure]:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from kindex.domain.models import CollectionInput
    from kindex.text.chunking import chunk_text
    from tests.support.openai_stub import OpenAIStub

    corpus = SyntheticCorpus(seed=21)
    documents: dict[str, str] = {}
    while (
        sum(len(chunk_text(c, method="maxChars", max_size=CHUNK_CHARS, overlap=0)) for c in documents.values()) < 1000
    ):
        documents[f"doc-{len(documents):03d}"] = corpus.document(9300)
    total_chunks = sum(
        len(chunk_text(c, method="maxChars", max_size=CHUNK_CHARS, overlap=0)) for c in documents.values()
    )
    with OpenAIStub(dimensions=1536) as stub, tempfile.TemporaryDirectory(prefix="kindex-bench-economy-") as tmp:
        env = {"OPENAI_API_KEY": "sk-bench-not-a-key", "OPENAI_BASE_URL": stub.base_url}
        with local_deployment(Path(tmp) / "data", MODEL, env) as services:
            counter = _Counter(stub)
            services.catalog.put_collection(
                TENANT,
                "economy",
                CollectionInput(
                    allow_guests=True, embedding_model=MODEL, chunking_max_size=CHUNK_CHARS, chunking_overlap_offset=0
                ),
            )
            _put_all(services, documents)
            first = counter.take()
            _put_all(services, documents)
            sources = [services.adapters.metadata.get_document(TENANT, "economy", d).source for d in documents]
            services.adapters.ingest_trigger.trigger(sources)  # the same events delivered again
            drain_worker()
            unchanged = counter.take()
            edited = {}
            for document_id in list(documents)[:: max(1, len(documents) // 10)][:10]:
                content = documents[document_id]
                chunks = chunk_text(content, method="maxChars", max_size=CHUNK_CHARS, overlap=0)
                middle = chunks[len(chunks) // 2]
                word_at = content.index(" ", middle.start + 20) + 1
                word_end = content.index(" ", word_at)
                # Same length, different word: only this chunk's text changes, no boundary moves.
                edited[document_id] = content[:word_at] + "X" * (word_end - word_at) + content[word_end:]
            documents.update(edited)
            _put_all(services, edited)
            edit = counter.take()
            statuses = {services.adapters.metadata.get_document(TENANT, "economy", d).status.value for d in documents}

            big = "\n\n".join(corpus.paragraph(700) for _ in range(2200))
            pieces = chunk_text(big, method="maxChars", max_size=CHUNK_CHARS, overlap=0)
            big = big[: pieces[2047].end]  # exactly 2,048 chunks
            big_chunks = chunk_text(big, method="maxChars", max_size=CHUNK_CHARS, overlap=0)
            _put_all(services, {"big": big})
            batch = counter.take()
            big_status = services.adapters.metadata.get_document(TENANT, "economy", "big")
    if statuses != {"indexed"} or big_status.status.value != "indexed":
        raise RuntimeError(f"economy benchmark: documents ended {statuses}, big {big_status.status}")
    minimum = max(math.ceil(len(big_chunks) / 2048), math.ceil(batch["tokens"] / 300_000))
    log(f"economy: first {first}, unchanged {unchanged}, 1% edit {edit}, 2048 chunks {batch} (minimum {minimum})")
    corpus_note = (
        f"{len(documents)} documents, {total_chunks} chunks (maxChars {CHUNK_CHARS}); OpenAI stub on 127.0.0.1"
    )
    section = "embedding economy"
    return [
        Figure(
            "embed_calls_first_ingest", first["requests"], "requests", section=section, notes=corpus_note, details=first
        ),
        Figure("embed_tokens_first_ingest", first["tokens"], "tokens", section=section, notes=corpus_note),
        Figure(
            "reembed_calls_unchanged",
            unchanged["requests"],
            "requests",
            "first ingest requests",
            first["requests"],
            section=section,
            details=unchanged,
            notes=corpus_note + "; every document PUT again unchanged and every event delivered again",
        ),
        Figure(
            "reembed_tokens_unchanged",
            unchanged["tokens"],
            "tokens",
            "first ingest tokens",
            first["tokens"],
            section=section,
            notes=corpus_note,
        ),
        Figure(
            "reembed_calls_edit_1pct",
            edit["requests"],
            "requests",
            "first ingest requests",
            first["requests"],
            section=section,
            details=edit,
            notes=corpus_note + f"; one word changed in one chunk of each of {len(edited)} documents",
        ),
        Figure(
            "reembed_texts_edit_1pct",
            edit["texts"],
            "texts",
            "chunks changed",
            len(edited),
            section=section,
            notes="texts sent to the API after the 1 % edit (cache by sha256 of the chunk text)",
        ),
        Figure(
            "reembed_tokens_edit_1pct",
            edit["tokens"],
            "tokens",
            "first ingest tokens",
            first["tokens"],
            section=section,
            notes=corpus_note,
        ),
        Figure(
            "openai_requests_per_2048_chunks",
            batch["requests"],
            "requests",
            "minimum under the API limits (2,048 inputs, 300,000 tokens per request)",
            minimum,
            section=section,
            details={**batch, "chunks": len(big_chunks)},
            notes=f"one document of {len(big_chunks)} chunks, {batch['tokens']} tokens, through the ingest path",
        ),
        _dynamodb_requests_per_query(),
    ]
