"""Two import runs of one document, a DELETE between them, all within one second: both runs have version 1 (the
record is created again), so only their start times tell them apart. The run whose document was deleted once took
the newer run's record for its own (start times were whole seconds): it committed `indexed` with its 2 chunks, which
the DELETE had removed, and the newer run then lost and removed its own, leaving a record that claimed 2 chunks and
had none (the racing-import e2e test, with the CPU slots on)."""

import threading
import time

import pytest

from kindex.domain.errors import Conflict
from kindex.domain.models import CollectionInput, DocumentStatus, PageRequest
from kindex.domain.query import QueryRequest
from kindex.domain.transfer import ImportRequest
from kindex_local.deployment import build_worker
from tests.support.import_bodies import two_chunk_import

pytestmark = pytest.mark.integration

FIRST = ("first import part one. ", "first import part two.")
SECOND = ("second import part one. ", "second import part two.")


def import_request(collection, parts) -> ImportRequest:
    data = collection.model_dump(mode="json")
    chunking = {name: data[name] for name in ("chunking_method", "chunking_max_size", "chunking_overlap_offset")}
    return ImportRequest(**two_chunk_import(*parts, chunking=chunking))


def test_an_import_whose_document_was_deleted_never_finishes_a_newer_run(local_container, monkeypatch):
    services = local_container
    collection, _ = services.catalog.put_collection(
        "t", "c", CollectionInput(embedding_model="hash:8", query_groups=["g"])
    )
    transfer = services.transfer
    put_blob = transfer.blobs.put_blob
    second_at_its_commit = threading.Event()
    first_done = threading.Event()
    runs = {}
    outcomes = {}

    def outcome_of(name: str, parts) -> None:
        try:
            outcomes[name] = transfer.import_batch("t", "c", import_request(collection, parts))
        except Exception as error:  # reported by the assertions below
            outcomes[name] = error

    second = threading.Thread(target=outcome_of, args=("second", SECOND))

    def put_blob_between_the_runs(key, data, content_type):
        # The content blob each run stores once it has listed its chunks, just before it commits `indexed`.
        if threading.current_thread() is second:
            runs["second"] = transfer.documents.get_document("t", "c", "d")
            second_at_its_commit.set()
            first_done.wait(30)
        elif "first" not in runs:
            # Given the first run's chunks all in, the document is deleted (its chunks with it), and a second
            # import begins a new run and has written its chunks when the first commits
            runs["first"] = transfer.documents.get_document("t", "c", "d")
            services.catalog.delete_document("t", "c", "d")
            second.start()
            assert second_at_its_commit.wait(30)
        put_blob(key, data, content_type)

    monkeypatch.setattr(transfer.blobs, "put_blob", put_blob_between_the_runs)
    time.sleep(1.02 - time.time() % 1)  # at the start of a second: both runs begin within it
    # When the first run goes on to commit, then the second
    try:
        outcome_of("first", FIRST)
    finally:
        first_done.set()
        second.join(30)
    monkeypatch.undo()
    build_worker().drain()
    # Then the runs were the case that once mixed them up (version 1 both, begun in one second), and the document
    # is the second import's: record, chunk texts and search hits
    first_run, second_run = runs["first"], runs["second"]
    assert (first_run.version, second_run.version) == (1, 1)
    assert first_run.created_at.replace(microsecond=0) == second_run.created_at.replace(microsecond=0)
    assert isinstance(outcomes["first"], Conflict), outcomes  # its document was deleted: 409
    assert outcomes["second"].documents_completed == 1, outcomes
    document, _ = services.catalog.get_document("t", "c", "d")
    chunks = services.catalog.list_chunks("t", "c", "d", PageRequest(number=100)).chunks
    assert (document.status, document.chunk_count, [c.text for c in chunks]) == (
        DocumentStatus.INDEXED,
        2,
        list(SECOND),
    )
    found = services.query.query(
        "t",
        ["c"],
        QueryRequest(query="first second import part", k=10, mode="keyword", user="u", groups=["g"]),
        multi=False,
    ).results
    assert found and {h.chunk_id for h in found} <= {c.chunk_id for c in chunks}


def test_a_delete_racing_writers_pauses_between_its_rounds_outside_its_cpu_slot(local_container, monkeypatch):
    # Given a document, and a record delete that loses to a writer three times (each time a write committed between
    # the delete's removal of the chunks and its conditional delete of the record)
    from kindex.app import catalog as catalog_module
    from kindex.app import cpu_slots
    from kindex.domain.models import DocumentInput

    services = local_container
    catalog = services.catalog
    catalog.put_collection("t", "c", CollectionInput(embedding_model="hash:8", query_groups=["g"]))
    catalog.put_document("t", "c", "d", DocumentInput(content="some text"))
    delete_record = catalog.documents.delete_document
    lost = []

    def delete_losing_three_times(*args, **kwargs):
        if len(lost) < 3:
            lost.append(args)
            raise Conflict("a writer committed meanwhile")
        return delete_record(*args, **kwargs)

    monkeypatch.setattr(catalog.documents, "delete_document", delete_losing_three_times)
    pauses = []
    monkeypatch.setattr(catalog, "pause", lambda seconds: pauses.append((seconds, cpu_slots.holding())))
    # When a request of `kindex serve` (holding a CPU slot) deletes it
    with cpu_slots.CpuSlots(1).held():
        catalog.delete_document("t", "c", "d")
    # Then it paused before each new round, twice as long each time, with its slot given back meanwhile, and won
    first = catalog_module.DELETE_PAUSE_SECONDS
    assert pauses == [(first, False), (2 * first, False), (4 * first, False)]
    assert catalog.documents.get_document("t", "c", "d") is None
