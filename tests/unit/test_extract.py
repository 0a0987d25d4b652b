"""Text extraction on the real mixed-format documents in /work/shared/data/docs (read in place)."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from kindex.domain.errors import (
    CorruptFile,
    EmptyText,
    EncryptedFile,
    LimitExceeded,
    UnsupportedType,
)
from kindex.text.extract import SUPPORTED_MIMETYPES, extract, guess_mimetype

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "docs"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def _read(relative: str) -> bytes:
    return (DOCS / relative).read_bytes()


@lru_cache(maxsize=None)
def _extracted_pdf(relative: str):
    # Two tests read each real PDF; parsing once keeps the suite fast.
    return extract(_read(relative), mimetype=None, filename=Path(relative).name)


def _manifest_units() -> dict[str, dict[str, int]]:
    with (DOCS / "MANIFEST.tsv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    units: dict[str, dict[str, int]] = {}
    for row in rows:
        pairs = (item.split("=") for item in row["units"].split(";"))
        units[row["file"]] = {key: int(value) for key, value in pairs}
    return units


def _pdf_bytes(*pages: str, user_password: str | None = None) -> bytes:
    """A small PDF with one text line per page, optionally encrypted."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    for text in pages:
        page = writer.add_blank_page(width=300, height=200)
        if text:
            font = DictionaryObject(
                {
                    NameObject("/Type"): NameObject("/Font"),
                    NameObject("/Subtype"): NameObject("/Type1"),
                    NameObject("/BaseFont"): NameObject("/Helvetica"),
                }
            )
            page[NameObject("/Resources")] = DictionaryObject(
                {NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})}
            )
            stream = DecodedStreamObject()
            stream.set_data(f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET".encode("latin-1"))
            page[NameObject("/Contents")] = writer._add_object(stream)
    if user_password is not None:
        writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="AES-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


# ------------------------------------------------------------------------------------------------ pdf

PDF_PHRASES = {
    # file: (phrase, page it is printed on)
    "pdf/Seige_of_Vicksburg_Sample_OCR.pdf": ("crashing through a tent", 2),
    "pdf/docling-multi_page.pdf": ("word processing software had become more sophisticated", 2),
    "pdf/federal-register-2020-17221.pdf": ("Up to 79 work-hours", 6),
    "pdf/pdflatex-outline.pdf": ("Huardest gefburn", 2),
}


@pytest.mark.slow
@pytest.mark.parametrize("relative", sorted(PDF_PHRASES))
def test_pdf_page_spans_start_at_zero_increase_and_match_the_page_count(relative):
    # Given a real PDF and its page count from the manifest
    expected_pages = _manifest_units()[relative]["pages"]

    # When it is extracted
    result = _extracted_pdf(relative)

    # Then there is one span per page, numbered from 1, starting at 0 and strictly increasing
    assert result.pages is not None
    assert [span.number for span in result.pages] == list(range(1, expected_pages + 1))
    starts = [span.start for span in result.pages]
    assert starts[0] == 0
    assert all(later > earlier for earlier, later in zip(starts, starts[1:]))
    assert starts[-1] <= len(result.text)


@pytest.mark.parametrize("relative", sorted(PDF_PHRASES))
def test_pdf_phrase_is_found_on_its_page(relative):
    # Given a phrase known to be printed on one page
    phrase, page_number = PDF_PHRASES[relative]

    # When the PDF is extracted
    result = _extracted_pdf(relative)

    # Then the phrase sits inside that page's span
    offset = result.text.index(phrase)
    spans = list(result.pages)
    page_index = page_number - 1
    page_end = spans[page_index + 1].start if page_index + 1 < len(spans) else len(result.text)
    assert spans[page_index].start <= offset < page_end


def test_pdf_pages_are_joined_with_a_blank_line_and_spans_point_at_page_text():
    # Given a three-page PDF whose middle page is blank
    data = _pdf_bytes("First page text", "", "Third page text")

    # When it is extracted
    result = extract(data, mimetype=PDF, filename="three.pdf")

    # Then each span starts where that page's text starts, and pages are separated by "\n\n"
    assert result.text == "First page text\n\n\n\nThird page text"
    assert [(span.start, span.number) for span in result.pages] == [(0, 1), (17, 2), (19, 3)]
    assert result.text[result.pages[2].start :].startswith("Third")


def test_pdf_encrypted_with_a_password_is_an_encrypted_file():
    # Given a PDF encrypted with a user password
    data = _pdf_bytes("Top secret", user_password="secret")

    # When / Then extraction refuses it as encrypted, with a short message
    with pytest.raises(EncryptedFile) as caught:
        extract(data, mimetype=PDF, filename="locked.pdf")
    assert caught.value.kind == "EncryptedFile"
    assert "\n" not in caught.value.message


def test_pdf_encrypted_with_an_empty_password_is_read_normally():
    # Given a PDF "encrypted" with an empty user password (only restricting permissions)
    data = _pdf_bytes("Readable anyway", user_password="")

    # When it is extracted
    result = extract(data, mimetype=PDF, filename="restricted.pdf")

    # Then its text comes out
    assert "Readable anyway" in result.text


def test_corrupt_bytes_named_pdf_are_a_corrupt_file():
    # Given bytes that are not a PDF, named like one
    data = b"%PDF-1.7\nthis is not really a pdf at all\n" + bytes(range(256))

    # When / Then
    with pytest.raises(CorruptFile) as caught:
        extract(data, mimetype=None, filename="broken.pdf")
    assert caught.value.message.startswith("Could not read PDF: ")
    assert "\n" not in caught.value.message and len(caught.value.message) <= 230


def test_pdf_without_any_text_is_empty_text():
    # Given a PDF with only blank pages (a scan without OCR looks the same)
    data = _pdf_bytes("", "")

    # When / Then
    with pytest.raises(EmptyText, match="No text could be extracted"):
        extract(data, mimetype=PDF, filename=None)


# ----------------------------------------------------------------------------------------------- docx


def test_docx_tables_are_rendered_as_rows_of_cells():
    # Given a DOCX with a uniform, a nested and a merged-cell table
    result = extract(_read("docx/docx-tables.docx"), mimetype=DOCX, filename=None)

    # Then each table is a Markdown table (header row, separator, one line per row), a merged cell appears once and
    # the cells after it stay in their columns
    assert "| Header Col 1 | Header Col 2 |\n| --- | --- |\n| Lorem ipsum | A link example |" in result.text
    assert "Table with merged cells\n\n| a | b |  |\n| --- | --- | --- |\n| a | c | d |\n| e |  | d |" in result.text
    assert result.pages is None
    # And each table's span and header are known to the chunker
    first = result.tables[0]
    assert result.text[first.start : first.header_end] == "| Header Col 1 | Header Col 2 |\n| --- | --- |\n"
    assert result.text[first.header_end : first.end] == "| Lorem ipsum | A link example |"
    assert len(result.tables) == 3


def test_docx_headings_and_tables_keep_document_order():
    # Given a DOCX with Title/Heading styles and a table between two paragraphs
    text = extract(_read("docx/docling-word_sample.docx"), mimetype=None, filename="word_sample.docx").text

    # Then headings are Markdown-style lines and the table sits between its neighbours
    assert "\n# Swimming in the lake\n" in text  # style "Title"
    assert "\n# Let’s swim!\n" in text  # style "Heading 1"
    assert "\n## Let’s eat\n" in text  # style "Heading 2"
    before = text.index("Here are some interesting things a respectful duck could eat:")
    table = text.index("Food | Calories per portion |\n| --- | --- | --- |\n| Leaves | Ash, Elm, Maple | 50 |")
    after = text.index("And let’s add another list in the end:")
    assert before < table < after


@pytest.mark.slow
def test_docx_large_handbook_extracts_all_body_text():
    # Given the 8,140-paragraph handbook (manifest: ~821k characters of body paragraphs)
    text = extract(_read("docx/handbook-872p.docx"), mimetype=DOCX, filename=None).text

    # Then nearly all of it is there, and its table too
    assert len(text) > 800_000
    assert " | " in text


def test_corrupt_docx_is_a_corrupt_file():
    # Given a zip that is not a Word document, and bytes that are not a zip at all
    buffer = io.BytesIO()
    import zipfile

    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a docx")
    for data in (buffer.getvalue(), b"PK\x03\x04garbage"):
        # When / Then
        with pytest.raises(CorruptFile, match=r"^Could not read DOCX: "):
            extract(data, mimetype=None, filename="report.docx")


# ----------------------------------------------------------------------------------------------- html


@pytest.mark.slow
def test_html_drops_scripts_and_navigation_and_keeps_headings_and_tables():
    # Given the saved Wikipedia "Duck" page with scripts, nav menus, headings and an infobox table
    text = extract(_read("html/wiki_duck.html"), mimetype="text/html", filename=None).text

    # Then script and nav contents are gone
    assert "enwikimwclientpreferences" not in text  # inline <script>
    assert "Random article" not in text and "Upload file" not in text  # <nav> menus
    # And headings are Markdown-style lines of their own
    assert "\n# Duck\n" in text
    assert "\n## Etymology\n" in text
    assert "\n### Feeding\n" in text
    # And tables are Markdown tables, one row per line
    assert "\n| Kingdom: | Animalia |\n" in text


def test_html_blocks_are_paragraphs_and_inline_whitespace_is_collapsed():
    # Given a small page with inline markup, a line break, a list, a table and a comment
    html = (
        b"<html><head><title>Page title</title><style>p {color: red}</style></head><body>"
        b"<nav>Home | About</nav><h2>Sec <b>one</b></h2>"
        b"<p>Hello   <i>big</i>\n   world<br>second line</p>"
        b"<ul><li>alpha</li><li>beta</li></ul>"
        b"<table><tr><th>Name</th><th>Qty</th></tr><tr><td>apple</td><td>3</td></tr></table>"
        b"<div style='display: none'>hidden</div><p>end<!-- note --> here</p>"
        b"<script>alert('x')</script></body></html>"
    )

    # When it is extracted
    text = extract(html, mimetype="text/html; charset=utf-8", filename=None).text

    # Then
    assert text == (
        "Page title\n\n## Sec one\n\nHello big world\nsecond line\n\n- alpha\n\n- beta\n\n"
        "| Name | Qty |\n| --- | --- |\n| apple | 3 |\n\nend here"
    )


def test_xhtml_filing_is_read_as_html():
    # Given an inline-XBRL 10-K page (XHTML with an XML declaration)
    text = extract(_read("html/example-10k-1p.html"), mimetype=None, filename="10k.htm").text

    # Then its text and table cells come out
    assert "Galaxy Gaming, Inc." in text
    assert "| Title of each class | Trading symbol | Name of exchange on which registered |" in text


# ------------------------------------------------------------------------------------------ text / md


@pytest.mark.parametrize("relative", ["md/pypdf-extract-text.md", "md/opensearch-efficient-knn-filtering.md"])
def test_markdown_is_verbatim(relative):
    # Given a real Markdown file
    data = _read(relative)

    # When it is extracted
    result = extract(data, mimetype=None, filename=Path(relative).name)

    # Then the text is the file's content unchanged
    assert result.text == data.decode("utf-8-sig")
    assert result.pages is None


def test_plain_text_keeps_crlf_and_drops_nul_and_bom():
    # Given UTF-8 text with a byte-order mark, CRLF line ends and a NUL byte
    data = "\ufeffTitle\r\n=====\r\nbody\x00 text\r\n".encode("utf-8")

    # When
    text = extract(data, mimetype="text/plain", filename=None).text

    # Then only the BOM and the NUL are gone
    assert text == "Title\r\n=====\r\nbody text\r\n"


def test_text_that_is_not_utf8_falls_back_to_latin1():
    # Given Latin-1 bytes
    data = "Café crème".encode("latin-1")

    # When / Then
    assert extract(data, mimetype=None, filename="menu.txt").text == "Café crème"


@pytest.mark.parametrize("data", [b"", b"   \n\t  \r\n", b"\x00\x00"])
def test_empty_or_blank_text_is_empty_text(data):
    # When / Then
    with pytest.raises(EmptyText, match="^No text could be extracted$"):
        extract(data, mimetype=None, filename=None)


def test_html_without_text_is_empty_text():
    # When / Then
    with pytest.raises(EmptyText):
        extract(b"<html><body><script>x()</script><img src=a.png></body></html>", mimetype="text/html", filename=None)


# ------------------------------------------------------------------------------------ type and limits


@pytest.mark.parametrize(
    ("mimetype", "filename", "named"),
    [
        ("image/png", None, "image/png"),
        ("image/png", "notes.txt", "image/png"),  # a declared type wins over the extension
        (None, "setup.exe", ".exe"),
        ("application/octet-stream", "archive.zip", ".zip"),
        (None, "README", "README"),
    ],
)
def test_unknown_types_are_unsupported_and_named_in_the_message(mimetype, filename, named):
    # When / Then
    with pytest.raises(UnsupportedType) as caught:
        extract(b"some bytes", mimetype=mimetype, filename=filename)
    assert named in caught.value.message
    assert caught.value.kind == "UnsupportedType"


@pytest.mark.parametrize(
    ("mimetype", "filename"),
    [
        ("TEXT/Markdown; charset=UTF-8", None),
        (None, "NOTES.MD"),
        ("application/octet-stream", "notes.markdown"),
        ("text/x-markdown", "whatever.bin"),
    ],
)
def test_type_comes_from_the_mimetype_then_the_extension(mimetype, filename):
    # Given Markdown declared in different ways; When / Then it is read verbatim as text
    assert extract(b"# Title\nbody", mimetype=mimetype, filename=filename).text == "# Title\nbody"


def test_declared_html_mimetype_beats_a_txt_extension():
    # When / Then the markup is parsed, not kept
    assert extract(b"<p>Hi <b>there</b></p>", mimetype="text/html", filename="page.txt").text == "Hi there"


def test_files_over_the_size_limit_are_refused_before_parsing():
    # Given a file one byte over the limit
    data = b"x" * 101

    # When / Then
    with pytest.raises(LimitExceeded) as caught:
        extract(data, mimetype="application/pdf", filename=None, max_bytes=100)
    assert caught.value.message == "File is 101 bytes; the limit is 100 bytes"
    # And a file at the limit is fine
    assert extract(b"x" * 100, mimetype=None, filename=None, max_bytes=100).text == "x" * 100


def test_guess_mimetype_and_supported_mimetypes_agree():
    # Then every extension maps to a supported type, case-insensitively, and others to None
    assert guess_mimetype("a/b/Report.PDF") == "application/pdf"
    assert guess_mimetype("page.htm") == "text/html"
    assert guess_mimetype("doc.docx") == DOCX
    assert guess_mimetype("x.md") == "text/markdown"
    assert guess_mimetype("x.doc") is None
    assert guess_mimetype("README") is None
    assert guess_mimetype(None) is None
    for name in ("a.txt", "a.md", "a.markdown", "a.html", "a.htm", "a.pdf", "a.docx"):
        assert guess_mimetype(name) in SUPPORTED_MIMETYPES


def test_reading_text_loads_no_pdf_docx_or_html_library():
    # Given a fresh interpreter that imports the extraction package and reads a UTF-8 text file
    code = (
        "import sys\n"
        "from kindex.text.extract import extract\n"
        "assert extract('héllo'.encode(), mimetype=None, filename='a.txt').text == 'héllo'\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    # Then no other format's reader or parser was loaded (each loads when a file of its format is first read)
    heavy = {"pypdf", "docx", "bs4", "lxml", "charset_normalizer"}
    assert {name for name in loaded if name.split(".")[0] in heavy} == set()
    assert {"kindex.text.extract.html", "kindex.text.extract.pdf", "kindex.text.extract.docx"} & loaded == set()


def test_an_unrecognised_text_subtype_is_read_as_plain_text():
    # Given text declared with a text/* subtype no reader has (RFC 2046: read it as text/plain)
    result = extract("a,b\n1,2\n".encode(), mimetype="text/csv", filename="data.csv")
    # Then it is extracted as plain text, while a non-text type stays unsupported
    assert result.text == "a,b\n1,2\n"
    with pytest.raises(UnsupportedType):
        extract(b"x", mimetype="application/x-unknown", filename="f.bin")
