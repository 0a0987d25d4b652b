"""Text extraction: bytes of a txt, md, html, pdf or docx file -> `ExtractedText`.

The format is chosen by mimetype, then by filename extension (`formats`), and the content must agree: a file whose
first bytes say it is something else (a PDF, a ZIP archive, an executable) is refused with `UnsupportedType`
(`sniff`), and text must decode to text (byte-order mark, then UTF-8, then the declared or detected charset) rather
than to control characters (`decoding`). Every parser runs inside limits (`ExtractLimits`, `limits`) that bound its
memory and work whatever the file claims: a ZIP package's central directory is checked and every entry
decompressed in bounded reads before python-docx opens it (`docx`), HTML is measured (elements, nesting) by a
streaming pre-scan before BeautifulSoup builds a tree (`html`), and pypdf runs with tighter decompression and
parsing limits plus a page and content budget (`pdf`). Every failure is a domain `IngestError` with a short
one-line message, so that the document's `failure_reason` is readable and nothing above this package needs to know
which parser was used. Each format's module, and the PDF, DOCX or HTML library it uses, is imported when a file of
that format is first read, so that a plain-text ingest does not pay for loading them.

One module per format, each with one reader `(data, limits) -> ExtractedText`: what a format knows beyond its text
(pages, headings, tables) travels in the `ExtractedText` its reader returns, and this module only
dispatches and checks what every format must satisfy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kindex.domain.errors import EmptyText, LimitExceeded
from kindex.domain.types import ExtractedText
from kindex.text.extract.formats import (
    APPLICATION_DOCX,
    APPLICATION_PDF,
    SUPPORTED_MIMETYPES,
    TEXT_HTML,
    TEXT_MARKDOWN,
    TEXT_PLAIN,
    guess_mimetype,
    resolve_mimetype,
)
from kindex.text.extract.limits import DEFAULT_LIMITS, DEFAULT_MAX_BYTES, ExtractLimits
from kindex.text.extract.sniff import check_signature

if TYPE_CHECKING:
    from kindex.domain.ports import PageReader

__all__ = [
    "APPLICATION_DOCX",
    "APPLICATION_PDF",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_BYTES",
    "SUPPORTED_MIMETYPES",
    "TEXT_HTML",
    "TEXT_MARKDOWN",
    "TEXT_PLAIN",
    "ExtractLimits",
    "extract",
    "guess_mimetype",
]

logger = logging.getLogger(__name__)

Reader = Callable[[bytes, ExtractLimits], ExtractedText]


def _reader(kind: str) -> Reader:
    """The reader of a supported mimetype. Each format's module is imported when a file of that format is first
    read, as its parser is: a plain-text ingest loads neither the HTML, PDF nor DOCX module."""
    if kind == TEXT_PLAIN:
        from kindex.text.extract.plain import extract_plain

        return extract_plain
    if kind == TEXT_MARKDOWN:
        from kindex.text.extract.markdown import extract_markdown

        return extract_markdown
    if kind == TEXT_HTML:
        from kindex.text.extract.html import extract_html

        return extract_html
    if kind == APPLICATION_PDF:
        from kindex.text.extract.pdf import extract_pdf

        return extract_pdf
    if kind == APPLICATION_DOCX:
        from kindex.text.extract.docx import extract_docx

        return extract_docx
    raise ValueError(f"no reader for {kind!r}")  # resolve_mimetype returns supported types only


def extract(
    data: bytes,
    *,
    mimetype: str | None,
    filename: str | None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    limits: ExtractLimits = DEFAULT_LIMITS,
    ocr: PageReader | None = None,
    no_ocr: str = "no OCR engine is configured",
) -> ExtractedText:
    """Extract the text of one file.

    Raises `LimitExceeded` when `data` is larger than `max_bytes` or the file would cost more than `limits`
    allow to read, `UnsupportedType` for a type we do not read or content that is not what the name or
    mimetype says (binary named `.txt`, a PDF named `.docx`), `CorruptFile` / `EncryptedFile` when the parser
    cannot open the file and `EmptyText` when the file holds no text. NUL characters are removed from the
    output (stores and indexes reject them). `ocr` reads PDF pages that are scans (no text layer, an image); when
    it is None, `no_ocr` says why in the warning or failure reason that names the pages left empty.
    """
    if len(data) > max_bytes:
        raise LimitExceeded(f"File is {len(data)} bytes; the limit is {max_bytes} bytes")
    kind = resolve_mimetype(mimetype, filename)
    check_signature(data, kind)
    if kind == APPLICATION_PDF:
        from kindex.text.extract.pdf import extract_pdf

        extracted = extract_pdf(data, limits, ocr=ocr, no_ocr=no_ocr)  # the one format that can need OCR
    else:
        extracted = _reader(kind)(data, limits)
    if not extracted.text.strip():
        raise EmptyText("No text could be extracted")
    logger.debug(
        "text extracted",
        extra={
            "mimetype": kind,
            "bytes": len(data),
            "chars": len(extracted.text),
            "pages": len(extracted.pages) if extracted.pages is not None else None,
        },
    )
    return extracted
