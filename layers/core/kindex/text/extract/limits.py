"""What one file may cost to read, and the failure-reason helpers every format shares."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_BYTES = 50 * 1024 * 1024

# A parser's own message can be long or multi-line; a failure reason must stay one short line.
_MAX_REASON_CHARS = 200

_MIB = 1024 * 1024


@dataclass(frozen=True)
class ExtractLimits:
    """Bounds on what one file may cost to read, whatever its size on disk. The defaults keep the worst file
    of each format under about 450 MB of memory and a minute of CPU (measured at each limit: DOCX 414 MB / 32 s,
    HTML 370 MB / 10 s, PDF 156 MB / 51 s); real documents are far below them (an 872-page DOCX handbook has
    5 MiB of XML, a 10-K filing in HTML 15,000 elements, a text PDF page 4-15 KiB of content). A file over a
    limit fails with LimitExceeded naming it."""

    # ZIP packages (DOCX). Word writes only stored and deflated entries, so nothing else is accepted.
    zip_max_entries: int = 10_000
    zip_max_uncompressed_bytes: int = 256 * _MIB  # everything python-docx loads (media included)
    zip_max_xml_bytes: int = 32 * _MIB  # what lxml parses: about 13 bytes of memory per byte of XML
    zip_max_ratio: int = 200  # deflate tops out near 1,000:1; Word's XML compresses about 10-20:1
    zip_ratio_floor_bytes: int = 1 * _MIB  # tiny entries may compress well; only big ones must not
    # HTML: BeautifulSoup costs about 1 KB of memory per element, whatever the nesting.
    html_max_bytes: int = 16 * _MIB
    html_max_elements: int = 250_000  # comments and processing instructions count as elements
    html_max_depth: int = 256  # libxml2's own default for XML; keeps every tree walk far from any recursion limit
    # PDF: pypdf decodes and tokenizes page content streams; decoded streams stay cached on the reader.
    pdf_max_pages: int = 10_000
    # Scanned pages OCRed per document (the rest stay empty, named in the warning): without it a 10,000-page scan
    # held a local ingest thread for days (Tesseract may take up to 120 s a page); on AWS the ingest function's
    # 5 minutes end far sooner.
    pdf_max_ocr_pages: int = 200
    pdf_max_stream_bytes: int = 16 * _MIB  # one decompressed stream (pypdf's default is 75 MB)
    pdf_max_stream_tokens: int = 1_000_000  # operands and operators in one content stream (pypdf: 2,000,000)
    pdf_max_content_bytes: int = 32 * _MIB  # decoded page content over the whole document: about a minute of work
    # Markdown: markdown-it-py's block pass (headings, tables; no inline pass) costs about 30 s per 300,000 short lines
    # on a loaded 2-core machine, whatever they hold; a larger file is read as plain text, without sections.
    markdown_structure_max_chars: int = 1 * _MIB
    pdf_max_outline_entries: int = 10_000


DEFAULT_LIMITS = ExtractLimits()


def short_reason(exc: BaseException) -> str:
    """A parser's exception as one short line for a document's `failure_reason`."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > _MAX_REASON_CHARS:
        text = text[: _MAX_REASON_CHARS - 3] + "..."
    return text


def strip_nul(text: str) -> str:
    """Without NUL characters: stores and indexes reject them."""
    return text.replace("\x00", "")


def collapse(text: str) -> str:
    """Runs of whitespace (line breaks included) as one space, trimmed."""
    return " ".join(text.split())
