"""Chunks indexed before sections and tables keep working, and a reindex brings their collection to the current
chunking version, re-embedding only the chunks whose embedded text changed (issue 28 item 7), on the local backend."""

import pytest

from kindex.app.ingest import embedded_text
from kindex.app.record_writes import write_collection
from kindex.domain.models import CHUNKING_VERSION, CollectionInput, DocumentInput
from kindex.domain.query import QueryRequest
from kindex_local.deployment import build_worker

pytestmark = pytest.mark.integration

GUIDE = "# Guide\n\nIntro to volcanoes.\n\n## Lava\n\nLava is molten rock.\n\n## Ash\n\nAsh clouds ground planes.\n"
NOTE = "Penguins live in the southern hemisphere. They cannot fly. They swim very well."


class Counting:
    def __init__(self):
        self.counts = {}

    def count(self, name, value=1):
        self.counts[name] = self.counts.get(name, 0) + value

    def meter(self, tenant, name, value=1):
        pass  # per-tenant usage: not what this test counts


def test_a_reindex_upgrades_the_chunking_and_reuses_every_unchanged_chunk_vector(local_container):
    services = local_container
    counted = Counting()
    services.adapters.__dict__["metrics"] = counted  # before the services that record metrics are built
    services.keys.create("t", "admin")
    # Given a collection as stored before chunking versions (version 1) holding a Markdown guide and a plain note
    created, _ = services.catalog.put_collection("t", "c", CollectionInput(allow_guests=True, chunking_max_size=40))
    assert created.chunking_version == CHUNKING_VERSION  # a new collection gets the current chunking
    old, _ = write_collection(
        services.adapters.metadata,
        "t",
        "c",
        created,
        lambda current: current.model_copy(update={"chunking_version": 1}),
    )
    services.catalog.put_document("t", "c", "guide", DocumentInput(content=GUIDE, mimetype="text/markdown"))
    services.catalog.put_document("t", "c", "note", DocumentInput(content=NOTE))
    worker = build_worker()
    worker.drain()
    before = {d: services.adapters.chunks.list_chunks("t", "c", d) for d in ("guide", "note")}
    assert all(c.section is None for chunks in before.values() for c in chunks)
    embedded_before = counted.counts["ChunksEmbedded"]

    # Then its old chunks answer queries, without sections
    answer = services.query.query("t", ["c"], QueryRequest(query="molten rock", k=2), multi=False)
    assert answer.results[0].document_id == "guide" and answer.results[0].section is None

    # When a reindex job runs
    job = services.reindex_jobs.start("t", "c", clean=False)
    worker.drain()
    assert services.reindex_jobs.get_job("t", job.id).status == "completed"

    # Then the collection is at the current chunking under a new configuration version, every document rebuilt
    collection = services.adapters.metadata.get_collection("t", "c")
    assert collection.chunking_version == CHUNKING_VERSION and collection.config_version == old.config_version + 1
    for doc_id in ("guide", "note"):
        document = services.adapters.metadata.get_document("t", "c", doc_id)
        assert document.indexed_config_version == collection.config_version
    after = {d: services.adapters.chunks.list_chunks("t", "c", d) for d in ("guide", "note")}
    assert [c.section for c in after["guide"]][-1] == "Guide > Ash"
    # And only the chunks whose embedded text changed were embedded again: the note's came from the cache
    assert [(c.chunk_id, c.text) for c in after["note"]] == [(c.chunk_id, c.text) for c in before["note"]]
    old_texts = {c.text for chunks in before.values() for c in chunks}
    changed = sum(1 for chunks in after.values() for c in chunks if embedded_text(c) not in old_texts)
    assert changed > 0
    assert counted.counts["ChunksEmbedded"] - embedded_before == changed
    # And queries now return the section
    answer = services.query.query("t", ["c"], QueryRequest(query="molten rock", k=2), multi=False)
    assert answer.results[0].section == "Guide > Lava"
    # And a second reindex finds nothing to do
    assert services.reindex_jobs.start("t", "c", clean=False).enqueued == 0
