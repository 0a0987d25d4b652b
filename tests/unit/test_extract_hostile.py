"""Extraction of hostile files: content that is not what its name says, text in other encodings, and files
built to cost far more to read than their size (ZIP bombs, deep HTML, PDF stream bombs)."""

from __future__ import annotations

import io
import time
import tracemalloc
import zipfile

import pytest

from kindex.domain.errors import CorruptFile, LimitExceeded, UnsupportedType
from kindex.text.extract import DEFAULT_LIMITS, ExtractLimits, extract
from tests.support import hostile_files as hostile

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def measured(call):
    """(result or raised error, peak Python memory in bytes, seconds) of one call."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        outcome = call()
    except Exception as error:  # the caller asserts on the error
        outcome = error
    finally:
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return outcome, peak, elapsed


# -------------------------------------------------------------------------------------- content and type


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(hostile.random_bytes(), id="random bytes"),
        pytest.param(hostile.elf_binary(), id="ELF executable"),
        pytest.param(hostile.elf_binary()[4:], id="ELF without its magic"),
        pytest.param(b"\x00" * 5000, id="NUL bytes"),
        pytest.param(b"A readable header line\n" + hostile.random_bytes(64 * 1024), id="text header, binary body"),
    ],
)
def test_binary_content_named_txt_is_unsupported(data):
    # When binary content arrives as a .txt / Then it fails as UnsupportedType instead of becoming latin-1 junk
    with pytest.raises(UnsupportedType, match="binary|executable"):
        extract(data, mimetype=None, filename="notes.txt")


def test_pdf_named_txt_is_refused_and_the_reason_says_what_it_is():
    # Given a real PDF saved as .txt (decision: the declared type wins, the upload must be renamed)
    data = hostile.text_pdf("hello")
    # When / Then
    with pytest.raises(UnsupportedType, match=r"^File content is a PDF document, not plain text"):
        extract(data, mimetype=None, filename="report.txt")
    # And the same bytes under their real name are read
    assert extract(data, mimetype=None, filename="report.pdf").text == "hello"


@pytest.mark.parametrize(
    "data, filename, found",
    [
        (hostile.minimal_docx(["x"]), "a.pdf", "a ZIP archive"),
        (hostile.text_pdf("x"), "a.docx", "a PDF document"),
        (b"\x89PNG\r\n\x1a\n" + bytes(100), "a.md", "a PNG image"),
        (hostile.elf_binary(4096), "a.html", "an ELF executable"),
    ],
)
def test_content_of_another_format_is_unsupported(data, filename, found):
    with pytest.raises(UnsupportedType, match=f"^File content is {found}, not "):
        extract(data, mimetype=None, filename=filename)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(("\ufeff" + hostile.JAPANESE * 20).encode("utf-16-le"), id="UTF-16 LE with BOM"),
        pytest.param(("\ufeff" + hostile.JAPANESE * 20).encode("utf-16-be"), id="UTF-16 BE with BOM"),
        pytest.param(("\ufeff" + hostile.JAPANESE * 20).encode("utf-32-le"), id="UTF-32 LE with BOM"),
        pytest.param((hostile.JAPANESE * 20).encode("utf-16-le"), id="UTF-16 LE without BOM"),
        pytest.param((hostile.JAPANESE * 20).encode("utf-16-be"), id="UTF-16 BE without BOM"),
        pytest.param((hostile.JAPANESE * 20).encode("shift_jis"), id="Shift JIS"),
    ],
)
def test_japanese_text_in_other_encodings_is_decoded(data):
    # When / Then the text is the Japanese it was written in, without a BOM character
    assert extract(data, mimetype=None, filename="japan.txt").text == hostile.JAPANESE * 20


@pytest.mark.parametrize(
    "text, encoding",
    [
        ("Café crème", "latin-1"),
        ("Größe über Maß, déjà vu – “quoted”", "cp1252"),
        ("Привет, мир. Это русский текст, который можно найти.\n" * 3, "cp1251"),
    ],
)
def test_legacy_single_byte_text_is_decoded(text, encoding):
    assert extract(text.encode(encoding), mimetype=None, filename="legacy.txt").text == text


def test_html_charset_declared_in_a_meta_tag_is_honoured():
    html = '<html><head><meta charset="windows-1251"></head><body><p>Привет мир</p></body></html>'
    assert extract(html.encode("cp1251"), mimetype=None, filename="page.html").text == "Привет мир"


def test_a_few_stray_control_characters_in_text_are_dropped_not_refused():
    data = b"Report\x1b[0m line one\x00\nline two\x07\n" * 2
    assert "line two" in extract(data, mimetype=None, filename="log.txt").text


# -------------------------------------------------------------------------------------------------- docx


@pytest.mark.slow
def test_docx_bomb_is_refused_from_its_central_directory_without_inflating_it():
    # Given a 300 MB document.xml squeezed into under 1 MB
    data = hostile.docx_bomb(300 * MIB)
    assert len(data) < 1 * MIB
    # When extracted
    outcome, peak, elapsed = measured(lambda: extract(data, mimetype=None, filename="bomb.docx"))
    # Then it fails on the declared size, at once and without memory to speak of
    assert isinstance(outcome, LimitExceeded)
    assert str(outcome).startswith("DOCX unpacks to ") and "the limit is 268435456" in str(outcome)
    assert peak < 16 * MIB and elapsed < 5


@pytest.mark.slow
def test_docx_entry_lying_about_its_size_is_never_inflated_in_full():
    # Given an entry that declares 4 KB but inflates to 256 MB (zipfile's read() would inflate it all)
    data = hostile.docx_lying_about_its_size(real_bytes=256 * MIB, declared_bytes=4096)
    # When extracted
    outcome, peak, _ = measured(lambda: extract(data, mimetype=None, filename="liar.docx"))
    # Then the bounded read stops at the declared size and the CRC check calls it corrupt
    assert isinstance(outcome, CorruptFile), outcome
    assert "Bad CRC-32" in str(outcome)
    assert peak < 16 * MIB


def test_docx_with_a_highly_compressed_entry_is_refused_by_ratio():
    # Given 4 MB of XML in a few KB: under the size limits but no Word document compresses like that
    data = hostile.docx_bomb(4 * MIB)
    with pytest.raises(LimitExceeded, match=r"^DOCX entry 'word/document.xml' is compressed more than 200:1"):
        extract(data, mimetype=None, filename="dense.docx")


def test_docx_with_too_many_entries_is_refused():
    data = hostile.docx_with_many_entries(DEFAULT_LIMITS.zip_max_entries)
    with pytest.raises(LimitExceeded, match=r"^DOCX has 10003 ZIP entries; the limit is 10000$"):
        extract(data, mimetype=None, filename="padded.docx")


def test_docx_xml_limit_applies_to_the_declared_xml_size():
    data = hostile.minimal_docx(["x" * 2000])
    with pytest.raises(LimitExceeded, match=r"^DOCX holds \d+ bytes of XML; the limit is 1000$"):
        extract(data, mimetype=None, filename="a.docx", limits=ExtractLimits(zip_max_xml_bytes=1000))
    # And the same document within the default limits is read
    assert extract(data, mimetype=None, filename="a.docx").text == "x" * 2000


def test_docx_entry_compressed_with_bzip2_is_unsupported():
    # Given a package with an entry zipfile would inflate without any output bound
    buffer = io.BytesIO(hostile.minimal_docx(["text"]))
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.writestr("word/media/extra.bin", b"\x00" * 1000, compress_type=zipfile.ZIP_BZIP2)
    with pytest.raises(UnsupportedType, match="uses ZIP compression method 12"):
        extract(buffer.getvalue(), mimetype=None, filename="a.docx")


def test_minimal_docx_is_read():
    assert extract(hostile.minimal_docx(["one", "two"]), mimetype=None, filename="a.docx").text == "one\n\ntwo"


# -------------------------------------------------------------------------------------------------- html


def test_deeply_nested_html_is_refused_before_a_tree_is_built():
    # Given the 11 MB HTML of two million nested divs (1.1 GB and 27 s before)
    data = hostile.nested_html(2_000_000)
    # When extracted
    outcome, peak, elapsed = measured(lambda: extract(data, mimetype=None, filename="deep.html"))
    # Then the streaming pre-scan stops at the depth limit
    assert isinstance(outcome, LimitExceeded) and str(outcome) == "HTML nests deeper than 256 elements"
    assert peak < 64 * MIB and elapsed < 10


@pytest.mark.slow
def test_html_with_too_many_elements_is_refused_before_a_tree_is_built():
    data = hostile.flat_html(DEFAULT_LIMITS.html_max_elements)
    outcome, peak, _ = measured(lambda: extract(data, mimetype=None, filename="flat.html"))
    assert isinstance(outcome, LimitExceeded) and str(outcome) == "HTML has more than 250000 elements and comments"
    assert peak < 64 * MIB


def test_html_comments_count_against_the_element_limit():
    # Given one real element and more comments than the limit (BeautifulSoup keeps each as a node)
    data = b"<p>text</p>" + b"<!--c-->" * DEFAULT_LIMITS.html_max_elements
    with pytest.raises(LimitExceeded, match="^HTML has more than 250000 elements and comments$"):
        extract(data, mimetype=None, filename="comments.html")


def test_html_nesting_within_the_limit_is_read():
    data = hostile.nested_html(200)
    assert extract(data, mimetype=None, filename="deep.html").text == "deep nested text"


def test_html_over_the_html_size_limit_is_refused():
    data = b"<p>" + b"word " * 1000 + b"</p>"
    with pytest.raises(LimitExceeded, match=r"^HTML file is 5007 bytes; the limit for HTML is 4096 bytes$"):
        extract(data, mimetype=None, filename="a.html", limits=ExtractLimits(html_max_bytes=4096))


# --------------------------------------------------------------------------------------------------- pdf


@pytest.mark.slow
def test_pdf_stream_bomb_is_stopped_by_the_decompression_limit():
    # Given a page whose content inflates to 64 MB from a few KB
    data = hostile.pdf_stream_bomb(pages=2, decompressed_per_page=64 * MIB)
    # When / Then pypdf's decompression limit (tightened to 16 MiB) stops it, as a LimitExceeded
    outcome, _, elapsed = measured(lambda: extract(data, mimetype=None, filename="bomb.pdf"))
    assert isinstance(outcome, LimitExceeded), outcome
    assert str(outcome).startswith("PDF exceeds a parsing limit: ")
    assert elapsed < 10


@pytest.mark.slow
def test_pdf_content_budget_covers_the_whole_document():
    # Given pages that are each within the stream limits but together exceed the document's content budget
    data = hostile.pdf_stream_bomb(pages=3, decompressed_per_page=64 * 1024)
    limits = ExtractLimits(pdf_max_content_bytes=150 * 1024)
    # When / Then the third page is refused
    with pytest.raises(LimitExceeded, match=r"^PDF page content exceeds 153600 bytes \(decompressed, by page 3\)$"):
        extract(data, mimetype=None, filename="long.pdf", limits=limits)


def test_pdf_page_count_is_limited():
    with pytest.raises(LimitExceeded, match=r"^PDF has 3 pages; the limit is 2$"):
        extract(hostile.text_pdf("a", "b", "c"), mimetype=None, filename="a.pdf", limits=ExtractLimits(pdf_max_pages=2))
