"""Scanned PDF pages are OCRed (issue 28.4): a page without a text layer that draws an image is read by Tesseract,
in its place, so pages keep their numbers; without OCR it stays empty and the warning (or, for a file of scans
only, the failure) says OCR was needed. The scans are made at test time from a shared PDF (tests/support/scans.py);
Tesseract is real (tesserocr over Debian's language data, which `make test` provisions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kindex.adapters.local.tesseract_ocr import DEFAULT_MAX_PIXELS, TesseractPageReader, render_scale
from kindex.domain.errors import EmptyText
from kindex.text.extract import APPLICATION_PDF, extract
from kindex.text.extract.limits import ExtractLimits
from tests.support import scans

pytestmark = [pytest.mark.unit, pytest.mark.slow]  # runs Tesseract

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def original() -> bytes:
    return scans.WORD_PROCESSOR.read_bytes()


@pytest.fixture(scope="module")
def second_page_scanned(original) -> bytes:
    """The five-page PDF with page 2 replaced by its 150-DPI picture."""
    return scans.with_scanned_pages(original, {1})


@pytest.fixture(scope="module")
def ocred(second_page_scanned):
    return extract(second_page_scanned, mimetype=APPLICATION_PDF, filename="scan.pdf", ocr=TesseractPageReader())


def page_text(extracted, number: int) -> str:
    spans = extracted.pages
    start = spans[number - 1].start
    end = spans[number].start if number < len(spans) else len(extracted.text)
    return extracted.text[start:end]


def test_a_scanned_page_is_read_by_tesseract_in_its_place(original, second_page_scanned, ocred):
    # Given page 2 of a real PDF as a picture only (no text layer left)
    assert scans.page_words(second_page_scanned, 1) == set()
    words = scans.page_words(original, 1)
    assert len(words) > 40
    # When it is extracted with Tesseract
    # Then page 2's text holds nearly every long word of the original page's text layer
    read = {w.lower().strip(".,;:()\"'") for w in page_text(ocred, 2).split()}
    found = words & read
    assert len(found) >= 0.9 * len(words), sorted(words - read)
    # And the document keeps its five pages, the text pages exactly as without OCR, and nothing is reported missing
    assert [span.number for span in ocred.pages] == [1, 2, 3, 4, 5]
    plain = extract(original, mimetype=APPLICATION_PDF, filename="original.pdf")
    for number in (1, 3, 4, 5):
        assert page_text(ocred, number) == page_text(plain, number)
    assert ocred.warning is None


def test_without_ocr_the_scanned_page_stays_empty_and_the_warning_names_it(second_page_scanned):
    # Given the same file, read with OCR off
    extracted = extract(
        second_page_scanned, mimetype=APPLICATION_PDF, filename="scan.pdf", no_ocr="OCR is off for this collection"
    )
    # Then page 2 is empty but still page 2 (pages 1 and 3-5 keep their numbers and text)
    assert [span.number for span in extracted.pages] == [1, 2, 3, 4, 5]
    assert page_text(extracted, 2).strip() == ""
    assert page_text(extracted, 3).strip()
    # And the warning says which page needed OCR and why it was not read
    assert extracted.warning == (
        "page 2 has no text layer and OCR was needed but unavailable (OCR is off for this collection)"
    )


def test_a_file_of_scans_only_fails_saying_ocr_was_needed(original):
    # Given a PDF of two pages, both scanned, and no OCR engine
    scan = scans.with_scanned_pages(scans.first_pages(original, 2), {0, 1}, dpi=72)
    # Then its extraction fails as EmptyText, naming the pages and the reason
    with pytest.raises(EmptyText) as raised:
        extract(scan, mimetype=APPLICATION_PDF, filename="scan.pdf", no_ocr="this server has no OCR engine")
    assert "pages 1, 2 have no text layer and OCR was needed but unavailable (this server has no OCR engine)" in str(
        raised.value
    )


def test_scanned_pages_past_the_ocr_budget_stay_empty_and_the_warning_names_them(original):
    # Given a PDF of two scanned pages and a budget of one OCRed page per document
    scan = scans.with_scanned_pages(scans.first_pages(original, 2), {0, 1})
    limits = ExtractLimits(pdf_max_ocr_pages=1)
    # When it is extracted with Tesseract
    extracted = extract(scan, mimetype=APPLICATION_PDF, filename="scan.pdf", ocr=TesseractPageReader(), limits=limits)
    # Then page 1 is read, page 2 stays empty (its number kept), and the warning says why
    assert page_text(extracted, 1).strip() and not page_text(extracted, 2).strip()
    assert "page 2 has no text layer" in extracted.warning
    assert "only 1 scanned pages are OCRed per document" in extracted.warning


def test_a_blank_page_is_not_a_scan(original):
    # Given a PDF with a blank page (no text, no image) after its first page
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.add_page(PdfReader(io.BytesIO(original)).pages[0])
    writer.add_blank_page()
    out = io.BytesIO()
    writer.write(out)
    # When it is read without OCR
    extracted = extract(out.getvalue(), mimetype=APPLICATION_PDF, filename="blank.pdf")
    # Then nothing is reported missing: a blank page needs no OCR
    assert extracted.warning is None
    assert [span.number for span in extracted.pages] == [1, 2]


@pytest.mark.parametrize(
    ("width", "height", "dpi", "expected_pixels"),
    [
        (612, 792, 300, 612 * 792 * (300 / 72) ** 2),  # Letter at 300 DPI: 8.4 MP, under the bound
        (20_000, 20_000, 300, DEFAULT_MAX_PIXELS),  # 83,333 pixels a side at 300 DPI: shrunk to the bound
        (14_400, 100, 300, DEFAULT_MAX_PIXELS),  # the largest page PDF allows, as a long strip
    ],
)
def test_the_render_never_exceeds_the_pixel_bound(width, height, dpi, expected_pixels):
    scale = render_scale(width, height, dpi, DEFAULT_MAX_PIXELS)
    assert width * height * scale * scale == pytest.approx(expected_pixels, rel=1e-9)
    assert width * height * scale * scale <= DEFAULT_MAX_PIXELS * (1 + 1e-9)


PROBE = """
import json, resource, sys
from kindex.adapters.local.tesseract_ocr import TesseractPageReader
from tests.support import scans
pdf = scans.huge_scan(page_side=int(sys.argv[1]), image_side=int(sys.argv[2]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
outcome = TesseractPageReader().read_pages(pdf, [0])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grown_kib": peak - before, "texts": dict(outcome.texts), "unread": dict(outcome.unread)}))
"""


def ocr_in_a_process_of_its_own(page_side: int, image_side: int) -> dict:
    """What OCR of one huge scan made of it, and how much the process grew meanwhile (its peak is its own)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "layers" / "core"), str(REPO)])}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(page_side), str(image_side)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_a_20000_pixel_square_image_is_left_unread_without_decoding_it():
    # Given a page of 20,000 x 20,000 points drawing a 20,000 x 20,000-pixel image (400 MB of grey pixels; PDFium
    # grew a process by 580 MB rendering it)
    # When it is OCRed
    measured = ocr_in_a_process_of_its_own(20_000, 20_000)
    # Then the page is left unread, saying why, and the process grew by far less than the image's pixels
    assert measured["texts"] == {}
    assert measured["unread"] == {"0": "the page's images have 400,000,000 pixels; the limit is 50,000,000"}
    assert measured["grown_kib"] / 1024 < 100


def test_a_20000_point_page_is_rendered_within_the_pixel_bound():
    # Given a page of 20,000 x 20,000 points drawing an image within the image bound (at 300 DPI the page would
    # render to 83,333 pixels a side: 6.9 GB)
    # When it is OCRed
    measured = ocr_in_a_process_of_its_own(20_000, 2_000)
    # Then it is read (a white page: no words) and the process grew by about the 12 MP render, not gigabytes
    assert measured["unread"] == {} and measured["texts"]["0"].strip() == ""
    assert measured["grown_kib"] / 1024 < 300


def test_eight_documents_ocred_at_once_each_get_their_own_page(original):
    # Given eight one-page scans (pages 1-4 of the shared PDF, twice each), small for speed: eight threads already
    # interleave PDFium's renders with Tesseract's reads (sixteen took 94 s of CPU on a loaded 2-core machine)
    from concurrent.futures import ThreadPoolExecutor

    pages = [i % 4 for i in range(8)]
    files = {index: scans.scanned_page(original, index, dpi=72) for index in set(pages)}
    expected = {index: scans.page_words(original, index) for index in set(pages)}
    reader = TesseractPageReader(dpi=110)
    # When eight threads OCR them at the same time through one reader (PDFium is serialized, Tesseract is not)
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(lambda index: reader.read_pages(files[index], [0]), pages))
    # Then every one read its own page: most of its long words, and fewer of any other page's own words
    for index, outcome in zip(pages, outcomes):
        assert outcome.unread == {}
        read = outcome.texts[0].lower()
        mine = sum(word in read for word in expected[index]) / len(expected[index])
        assert mine >= 0.6, (index, mine)
        for other in set(pages) - {index}:
            only_theirs = expected[other] - expected[index]
            assert sum(word in read for word in only_theirs) / len(only_theirs) < mine, (index, other)
