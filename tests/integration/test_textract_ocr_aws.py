"""Scanned PDF pages on AWS (issue 28.4): the ingest function sends each scanned page, as a PDF of its own, to Amazon
Textract's DetectDocumentText and puts the LINE blocks in the page's place. Under moto, whose Textract answers
every call with the blocks a test sets (it does not read the document), so these tests check what we send (the pure
builders, on a real scan) and what we do with the answer, through the real client and the real ingest wiring."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from moto import mock_aws
from moto.textract.models import TextractBackend
from pypdf import PdfReader

from kindex.adapters.aws.textract_ocr import (
    MAX_REQUEST_BYTES,
    TextractPageReader,
    build_detect_request,
    build_page_pdf,
    page_text,
)
from kindex.text.extract import APPLICATION_PDF, extract
from tests.integration.test_ingest_aws import deploy  # noqa: F401  (the moto deployment fixture)
from tests.support import scans
from tests.support.aws import fake_aws_env, moto_client

pytestmark = pytest.mark.integration

# Words the shared PDF never uses, so that a chunk holding them holds Textract's answer.
LINES = ["Quartz tangerine zeppelin", "marmalade xylophone harbour."]


def textract_blocks(lines: list[str]) -> list[dict]:
    """A DetectDocumentText answer's blocks: the PAGE, each LINE, and the WORDs that repeat the lines."""
    blocks = [{"BlockType": "PAGE", "Id": "p"}]
    for number, line in enumerate(lines):
        blocks.append({"BlockType": "LINE", "Id": f"l{number}", "Text": line})
        blocks += [{"BlockType": "WORD", "Id": f"w{number}-{i}", "Text": w} for i, w in enumerate(line.split())]
    return blocks


@pytest.fixture
def textract(monkeypatch) -> Iterator:
    fake_aws_env(monkeypatch)
    monkeypatch.setattr(TextractBackend, "BLOCKS", textract_blocks(LINES))
    with mock_aws():
        yield moto_client("textract")


@pytest.fixture(scope="module")
def scanned() -> bytes:
    return scans.with_scanned_pages(scans.WORD_PROCESSOR.read_bytes(), {1, 3})


def test_each_scanned_page_is_sent_alone_as_a_one_page_pdf(scanned):
    # When the request for page 2 (index 1) is built
    request = build_detect_request(build_page_pdf(scanned, 1))
    # Then it is the page's own PDF, under Textract's size limit, with the picture and no text layer
    page_pdf = request["Document"]["Bytes"]
    assert set(request) == {"Document"} and len(page_pdf) < MAX_REQUEST_BYTES
    reader = PdfReader(io.BytesIO(page_pdf))
    assert len(reader.pages) == 1 and (reader.pages[0].extract_text() or "").strip() == ""
    assert len(reader.pages[0]["/Resources"]["/XObject"]) == 1
    assert reader.pages[0].mediabox == PdfReader(io.BytesIO(scanned)).pages[1].mediabox


def test_the_page_text_is_its_lines_in_textracts_order_without_the_repeated_words():
    assert page_text({"Blocks": textract_blocks(LINES)}) == "\n".join(LINES)
    assert page_text({"Blocks": []}) == ""


def test_textract_reads_the_scanned_pages_in_their_places(textract, scanned):
    # Given a PDF whose pages 2 and 4 are scans, and Textract (moto) answering with two lines
    reader = TextractPageReader(client=textract)
    # When it is extracted with Textract
    extracted = extract(scanned, mimetype=APPLICATION_PDF, filename="scan.pdf", ocr=reader)
    # Then pages 2 and 4 hold Textract's lines, every page keeps its number, and nothing is reported missing
    spans = extracted.pages
    assert [span.number for span in spans] == [1, 2, 3, 4, 5]
    for number in (2, 4):
        end = spans[number].start if number < len(spans) else len(extracted.text)
        assert extracted.text[spans[number - 1].start : end].strip() == "\n".join(LINES)
    assert extracted.warning is None


def test_the_ingest_function_wires_textract_and_indexes_the_scanned_page(deploy, monkeypatch, scanned):  # noqa: F811
    # Given the AWS deployment under moto, and Textract answering with two lines
    from kindex.domain.models import CollectionInput

    monkeypatch.setattr(TextractBackend, "BLOCKS", textract_blocks(LINES))
    d = deploy()
    d.services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=400))
    assert isinstance(d.services.adapters.page_reader, TextractPageReader)
    # When a PDF with scanned pages is written and its notification handled
    d.services.catalog.put_file("t", "c", "scan", "scan.pdf", scanned)
    deliveries = d.drain()
    # Then it is indexed with nothing missing, and Textract's text is in two chunks, one reaching page 2, the other
    # page 4 (a short page shares its chunk with its neighbours)
    assert all(not delivery.failed_ids for delivery in deliveries)
    document = d.document("scan")
    assert document.status.value == "indexed" and document.failure_reason is None
    chunks = d.services.adapters.chunks.list_chunks("t", "c", "scan")
    holding = [c for c in chunks if LINES[0] in c.text]
    assert [[p for p in (2, 4) if c.page_start <= p <= c.page_end] for c in holding] == [[2], [4]]


@pytest.fixture
def no_retry_client(monkeypatch):
    """A Textract client for a local endpoint, without botocore's retries (each scripted answer is one call)."""
    import boto3
    from botocore.config import Config

    fake_aws_env(monkeypatch)

    def make(url: str):
        return boto3.client(
            "textract", endpoint_url=url, region_name="us-east-1", config=Config(retries={"total_max_attempts": 1})
        )

    return make


def test_a_page_textract_refuses_is_left_unread_and_costs_no_other_page(no_retry_client, scanned):
    from tests.support.textract_errors import TextractErrors

    # Given Textract refusing the first page it is sent and reading the second
    with TextractErrors(["UnsupportedDocumentException", None]) as endpoint:
        reader = TextractPageReader(client=no_retry_client(endpoint.url), concurrency=1)
        # When pages 2 and 4 are read
        outcome = reader.read_pages(scanned, [1, 3])
    # Then page 2 is unread with Textract's code, page 4 read, each sent once as DetectDocumentText
    assert outcome.unread == {1: "Textract refused the page (UnsupportedDocumentException)"}
    assert outcome.texts == {3: "read"}
    assert [r["target"] for r in endpoint.requests] == ["Textract.DetectDocumentText"] * 2


@pytest.mark.parametrize(
    "code", ["ProvisionedThroughputExceededException", "ThrottlingException", "InternalServerError"]
)
def test_throttling_or_an_outage_is_a_dependency_failure_worth_retrying(no_retry_client, scanned, code):
    from kindex.domain.errors import DependencyFailed
    from tests.support.textract_errors import TextractErrors

    # Given Textract throttling or failing
    with TextractErrors([code]) as endpoint:
        reader = TextractPageReader(client=no_retry_client(endpoint.url), concurrency=1)
        # When a page is read / Then the document's extraction raises DependencyFailed (the queue retries it)
        with pytest.raises(DependencyFailed, match=code):
            reader.read_pages(scanned, [1])
