"""Scanned PDF pages through the local ingest (issue 28.4): the worker OCRs them with Tesseract in a collection with
`ocr: "auto"` (the default), leaves them empty in one with `ocr: "off"` and says so on the document, and fails a file
of scans only with the reason. Two tenants use the same collection and document ids with different settings: each
gets its own setting's outcome. The scans are made at test time from a shared PDF."""

from __future__ import annotations

import pytest

from kindex.domain.models import CollectionInput
from kindex.domain.query import QueryRequest
from kindex_local.deployment import build_worker
from tests.support import scans

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scanned() -> tuple[bytes, set[str]]:
    """The five-page shared PDF with page 2 as a picture, and the long words of page 2's original text layer."""
    original = scans.WORD_PROCESSOR.read_bytes()
    return scans.with_scanned_pages(original, {1}), scans.page_words(original, 1)


@pytest.fixture
def deployment(local_container):
    local_container.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=400, allow_guests=True))
    local_container.catalog.put_collection(
        "u", "c", CollectionInput(chunking_max_size=400, ocr="off", allow_guests=True)
    )
    worker = build_worker()
    worker.backoff = 0.0
    return local_container, worker


def test_ocr_auto_reads_the_scanned_page_and_ocr_off_says_it_was_not_read(deployment, scanned):
    services, worker = deployment
    pdf, page_two_words = scanned
    # Given the collections' settings as stored
    assert services.adapters.metadata.get_collection("t", "c").ocr == "auto"
    assert services.adapters.metadata.get_collection("u", "c").ocr == "off"
    # When the same scanned PDF is written under the same ids in both tenants and the worker runs
    for tenant in ("t", "u"):
        services.catalog.put_file(tenant, "c", "scan", "scan.pdf", pdf)
    worker.drain()
    read = services.adapters.metadata.get_document("t", "c", "scan")
    unread = services.adapters.metadata.get_document("u", "c", "scan")
    # Then with OCR the document is indexed with nothing missing, and page 2's chunks hold its words, on page 2
    assert read.status.value == "indexed" and read.failure_reason is None
    chunks = services.adapters.chunks.list_chunks("t", "c", "scan")
    page_two = " ".join(c.text for c in chunks if c.page_start <= 2 <= c.page_end).lower()
    assert sum(word in page_two for word in page_two_words) >= 0.9 * len(page_two_words)
    assert {c.page_start for c in chunks} >= {1, 2, 3, 4, 5}
    # And without OCR it is indexed too (pages 1, 3-5), page 2 left out and named in the failure reason
    assert unread.status.value == "indexed"
    assert unread.failure_reason == (
        "ScannedPagesUnread: page 2 has no text layer and OCR was needed but unavailable "
        "(OCR is off for this collection)"
    )
    assert all(c.page_start != 2 or c.page_end != 2 for c in services.adapters.chunks.list_chunks("u", "c", "scan"))
    # And a keyword query for a word only the scan holds finds page 2 in the OCR tenant, nothing in the other
    word = sorted(page_two_words - set(" ".join(c.text for c in chunks if c.page_start > 2).lower().split()))[0]
    for tenant, expected in (("t", True), ("u", False)):
        answer = services.query.query(tenant, ["c"], QueryRequest(query=word, mode="keyword", k=3), multi=False)
        pages = [result.page_start for result in answer.results]
        assert (2 in pages or any(r.page_end == 2 for r in answer.results)) is expected, (tenant, word, pages)


def test_a_file_of_scans_only_fails_with_ocr_off_saying_ocr_was_needed(deployment, scanned):
    services, worker = deployment
    # Given a PDF of two scanned pages in the collection with OCR off
    only_scans = scans.with_scanned_pages(scans.first_pages(scans.WORD_PROCESSOR.read_bytes(), 2), {0, 1}, dpi=72)
    services.catalog.put_file("u", "c", "scans", "scans.pdf", only_scans)
    # When the worker runs
    worker.drain()
    # Then the document failed, not retryably, and the reason names the pages and why they were not read
    document = services.adapters.metadata.get_document("u", "c", "scans")
    assert document.status.value == "failed" and not document.failure_retryable
    assert document.failure_reason == (
        "EmptyText: No text could be extracted: pages 1, 2 have no text layer and OCR was needed but unavailable "
        "(OCR is off for this collection)"
    )


def test_turning_ocr_on_and_reindexing_reads_the_page_left_unread(deployment, scanned):
    services, worker = deployment
    pdf, page_two_words = scanned
    # Given the scanned PDF indexed with OCR off, page 2 named as unread
    services.catalog.put_file("u", "c", "scan", "scan.pdf", pdf)
    worker.drain()
    assert services.adapters.metadata.get_document("u", "c", "scan").failure_reason.startswith("ScannedPagesUnread")
    before = services.adapters.metadata.get_collection("u", "c").config_version
    # When OCR is turned on (a configuration change) and a reindex job runs
    services.catalog.put_collection("u", "c", CollectionInput(ocr="auto"))
    assert services.adapters.metadata.get_collection("u", "c").config_version == before + 1
    job = services.reindex_jobs.start("u", "c", clean=False)
    worker.drain()
    assert services.reindex_jobs.get_job("u", job.id).status == "completed"
    # Then the document is read again: nothing is missing and page 2's words are in its chunks
    document = services.adapters.metadata.get_document("u", "c", "scan")
    assert document.status.value == "indexed" and document.failure_reason is None
    chunks = services.adapters.chunks.list_chunks("u", "c", "scan")
    page_two = " ".join(c.text for c in chunks if c.page_start <= 2 <= c.page_end).lower()
    assert sum(word in page_two for word in page_two_words) >= 0.9 * len(page_two_words)


def test_turning_ocr_off_is_a_collection_field_that_a_get_shows_and_a_put_changes(deployment):
    services, _ = deployment
    # When the setting is changed back and forth through the catalog
    services.catalog.put_collection("t", "c", CollectionInput(ocr="off"))
    assert services.adapters.metadata.get_collection("t", "c").ocr == "off"
    services.catalog.put_collection("t", "c", CollectionInput(ocr="auto"))
    # Then only that field changed, and each change is a configuration change (documents are to be read again)
    stored = services.adapters.metadata.get_collection("t", "c")
    assert stored.ocr == "auto" and stored.chunking_max_size == 400 and stored.config_version == 3
