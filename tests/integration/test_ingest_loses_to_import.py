"""A content PUT's ingest that loses to an import of the same document while it embeds: the stale ingest removes
only what it wrote, never the import's chunks (it once removed every chunk not cut from the current content blob,
which an import's chunks never are), and the document ends exactly as the import left it."""

import pytest

from kindex.domain.errors import Conflict
from kindex.domain.models import CollectionInput, DocumentInput, DocumentStatus, PageRequest
from kindex.domain.query import QueryRequest
from kindex.domain.transfer import ImportRequest
from kindex_local.deployment import build_worker
from tests.support.import_bodies import two_chunk_import

pytestmark = pytest.mark.integration

PARTS = ("imported part one. ", "imported part two.")


def import_request(collection) -> ImportRequest:
    data = collection.model_dump(mode="json")
    chunking = {name: data[name] for name in ("chunking_method", "chunking_max_size", "chunking_overlap_offset")}
    return ImportRequest(**two_chunk_import(*PARTS, chunking=chunking))


def test_an_ingest_that_loses_to_a_finished_import_leaves_the_imports_chunks(local_container):
    services = local_container
    collection, _ = services.catalog.put_collection(
        "t", "c", CollectionInput(embedding_model="hash:8", query_groups=["g"])
    )
    # Given a content PUT whose ingest, while it embeds its chunk, sees an import of the document run to the end
    services.catalog.put_document("t", "c", "d", DocumentInput(content="stale words of the lost write."))
    original = services.embeddings.embedder_for
    imports = []

    def embedder_for(model):
        embedder = original(model)

        class ImportsWhileEmbedding:
            model = embedder.model
            dimensions = embedder.dimensions

            def embed(self, texts):
                if not imports and any("stale words" in t for t in texts):
                    imports.append(services.transfer.import_batch("t", "c", import_request(collection)))
                return embedder.embed(texts)

            def embed_queries(self, texts):
                return embedder.embed_queries(texts)

        return ImportsWhileEmbedding()

    services.embeddings.embedder_for = embedder_for
    # When the worker runs the PUT's event (it loses: the import committed newer content), then the import's own
    build_worker().drain()
    # Then the import happened mid-ingest, and the document is the import's: record, chunk texts and search hits
    assert [r.documents_completed for r in imports] == [1]
    document, _ = services.catalog.get_document("t", "c", "d")
    assert (document.status, document.chunk_count) == (DocumentStatus.INDEXED, 2)
    chunks = services.catalog.list_chunks("t", "c", "d", PageRequest(number=100)).chunks
    assert [c.text for c in chunks] == list(PARTS)
    found = services.query.query(
        "t",
        ["c"],
        QueryRequest(query="stale words imported part", k=10, mode="keyword", user="u", groups=["g"]),
        multi=False,
    ).results
    assert found and {h.chunk_id for h in found} <= {c.chunk_id for c in chunks}


def test_an_import_that_loses_to_a_put_indexed_meanwhile_leaves_the_puts_chunk(local_container):
    services = local_container
    collection, _ = services.catalog.put_collection(
        "t", "c", CollectionInput(embedding_model="hash:8", query_groups=["g"])
    )
    # Given an import whose run of the document has begun when a content PUT commits and its ingest runs
    transfer = services.transfer
    begin = transfer._start_document

    def begin_then_put(*args, **kwargs):
        run = begin(*args, **kwargs)
        services.catalog.put_document("t", "c", "d", DocumentInput(content="the words of the winning write."))
        build_worker().drain()
        return run

    transfer._start_document = begin_then_put
    # When the import goes on writing its chunks (one at the PUT's chunk's index), it loses: 409
    with pytest.raises(Conflict):
        transfer.import_batch("t", "c", import_request(collection))
    transfer._start_document = begin
    build_worker().drain()
    # Then the document is the PUT's, its chunk included (the import once removed it as "replaced at its index")
    document, _ = services.catalog.get_document("t", "c", "d")
    chunks = services.catalog.list_chunks("t", "c", "d", PageRequest(number=100)).chunks
    assert (document.status, document.chunk_count) == (DocumentStatus.INDEXED, 1)
    assert [c.text for c in chunks] == ["the words of the winning write."]
