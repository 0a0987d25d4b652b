"""PDF: pypdf under tightened decompression and parsing limits and a page and content budget; one span per page.

The outline (bookmarks), where the file has one, gives the headings: an entry's level is its depth, its offset the
first occurrence of its title on its destination page (the page's start when the page's text does not show it).
A page without a text layer that draws an image (a scan) is read by OCR when the caller passes a `PageReader`
(Tesseract locally, Amazon Textract on AWS); its text takes the page's place, so pages keep their numbers. Without
one, or for a page the reader could not read, the page stays empty and `ExtractedText.warning` names it; a file
whose every page is such a scan fails with `EmptyText` saying that OCR was needed. A page with neither text nor an
image is blank and costs no OCR. Tables are not found in PDFs: pdfplumber would find them, but it brings
pdfminer.six, Pillow and pypdfium2 (about 19 MB of wheels) into the Lambda layer and reads a page's text
differently from pypdf, so its tables could not be placed in this text (docs/decisions.md). pypdf loads on first
use.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from kindex.domain.errors import CorruptFile, EmptyText, EncryptedFile, LimitExceeded
from kindex.domain.types import ExtractedText, Heading, PageSpan
from kindex.text.extract.limits import ExtractLimits, short_reason, strip_nul

if TYPE_CHECKING:
    from kindex.domain.ports import PageReader

_PAGE_SEPARATOR = "\n\n"
# A failure reason lists at most this many page numbers (a 500-page scan names the first ones and the count).
_LISTED_PAGES = 10


def extract_pdf(
    data: bytes, limits: ExtractLimits, ocr: PageReader | None = None, no_ocr: str = "no OCR engine is configured"
) -> ExtractedText:
    """The text of a PDF, one span per page. `ocr` reads the scanned pages; when it is None, `no_ocr` says why (it
    ends the failure reason: "OCR is off for this collection")."""
    from pypdf import apply_configuration
    from pypdf.errors import LimitReachedError

    # pypdf's own resource limits (decompression per stream, tokens per content stream), tightened for text
    # extraction: a page's text never needs 75 MB of decoded operators. A ContextVar, so per thread.
    stream_bytes = limits.pdf_max_stream_bytes
    with apply_configuration(
        zlib_maximum_output_length=stream_bytes,
        lzw_maximum_output_length=stream_bytes,
        run_length_maximum_output_length=stream_bytes,
        brotli_maximum_output_length=stream_bytes,
        array_based_stream_maximum_output_length=stream_bytes,
        stream_decoding_work_maximum_length=4 * stream_bytes,
        stream_parsing_work_maximum_count=limits.pdf_max_stream_tokens,
    ):
        try:
            page_texts, outline, scanned = _read_pdf_pages(data, limits)
        except LimitReachedError as exc:
            raise LimitExceeded(f"PDF exceeds a parsing limit: {short_reason(exc)}") from exc
    warning = None
    if scanned:
        unread = _read_scans(data, page_texts, scanned, ocr, limits.pdf_max_ocr_pages)
        warning = _unread_warning(unread, ocr, no_ocr)
        if warning is not None and not any(text.strip() for text in page_texts):
            raise EmptyText(f"No text could be extracted: {warning}")

    spans: list[PageSpan] = []
    offset = 0
    for number, page_text in enumerate(page_texts, start=1):
        spans.append(PageSpan(start=offset, number=number))
        offset += len(page_text) + len(_PAGE_SEPARATOR)
    text = _PAGE_SEPARATOR.join(page_texts)
    return ExtractedText(
        text=text, pages=tuple(spans), headings=_outline_headings(text, spans, outline), warning=warning
    )


def _read_scans(
    data: bytes, page_texts: list[str], scanned: list[int], ocr: PageReader | None, budget: int
) -> dict[int, str]:
    """OCR the first `budget` scanned pages into `page_texts` (in place); the pages left unread, with why (empty
    without `ocr`)."""
    if ocr is None:
        return {index: "" for index in scanned}
    read, past = scanned[:budget], scanned[budget:]
    outcome = ocr.read_pages(data, read)
    unread = {index: outcome.unread.get(index, "not read") for index in read if index not in outcome.texts}
    unread.update(dict.fromkeys(past, f"only {budget} scanned pages are OCRed per document"))
    for index in read:
        if index in outcome.texts:
            page_texts[index] = strip_nul(outcome.texts[index]).strip()
    return unread


def _unread_warning(unread: dict[int, str], ocr: PageReader | None, no_ocr: str) -> str | None:
    """One line naming the scanned pages left empty and why: 'pages 2, 5 have no text layer and were not read
    (OCR is off for this collection)'."""
    if not unread:
        return None
    numbers = sorted(index + 1 for index in unread)
    listed = ", ".join(str(n) for n in numbers[:_LISTED_PAGES])
    if len(numbers) > _LISTED_PAGES:
        listed += f" and {len(numbers) - _LISTED_PAGES} more"
    which = f"page {listed} has" if len(numbers) == 1 else f"pages {listed} have"
    if ocr is None:
        why = no_ocr
    else:
        reasons = sorted({reason for reason in unread.values() if reason})
        why = f"{ocr.name}: {'; '.join(reasons) or 'not read'}"
    return short_reason(ValueError(f"{which} no text layer and OCR was needed but unavailable ({why})"))


def _draws_image(page) -> bool:
    """Whether a page draws an image or a form (where scanners put the page's picture) or holds an inline image:
    only such a page can be a scan. Read from the page's resources and content, never decoding an image."""
    try:
        resources = page.get("/Resources")
        resources = resources.get_object() if resources is not None else None
        xobjects = resources.get("/XObject") if resources is not None else None
        if xobjects is not None and len(xobjects.get_object()) > 0:
            return True
        contents = page.get_contents()
        return contents is not None and b"BI" in contents.get_data()
    except Exception:  # a broken resource dictionary: the page's text (none) is all we can say
        return False


def _outline_headings(text: str, spans: list[PageSpan], outline: list[tuple[int, int, str]]) -> tuple[Heading, ...]:
    """(depth, page index, title) entries as headings in text order (outline order among equal offsets)."""
    placed: list[tuple[int, int, Heading]] = []
    for order, (level, page, title) in enumerate(outline):
        if not 0 <= page < len(spans) or not title:
            continue
        start = spans[page].start
        end = spans[page + 1].start if page + 1 < len(spans) else len(text)
        found = text.find(title, start, end)
        offset = found if found >= 0 else start
        placed.append((offset, order, Heading(start=offset, level=level, title=title)))
    return tuple(heading for _, _, heading in sorted(placed, key=lambda entry: entry[:2]))


def _read_outline(reader, limits: ExtractLimits) -> list[tuple[int, int, str]]:
    """The outline's entries as (depth from 1, destination page index, title); [] when the file has none or it
    cannot be read (a broken outline costs the sections, never the document)."""
    entries: list[tuple[int, int, str]] = []
    try:
        pending = [(1, item) for item in reversed(reader.outline)]
        while pending and len(entries) < limits.pdf_max_outline_entries:
            depth, item = pending.pop()
            if isinstance(item, list):
                pending.extend((depth + 1, child) for child in reversed(item))
                continue
            page = reader.get_destination_page_number(item)
            title = " ".join(strip_nul(str(item.title or "")).split())
            if page is not None:
                entries.append((depth, page, title))
    except Exception:  # pypdf raises many types on a broken outline; the text is still good
        return entries
    return entries


def _read_pdf_pages(data: bytes, limits: ExtractLimits) -> tuple[list[str], list[tuple[int, int, str]], list[int]]:
    """The text of each page, the outline, and the 0-based indexes of the pages that look scanned (no text, an
    image)."""
    from pypdf import PasswordType, PdfReader
    from pypdf.errors import LimitReachedError

    try:
        reader = PdfReader(io.BytesIO(data))  # BytesIO shares the bytes object's buffer: no copy
    except LimitReachedError:
        raise
    except Exception as exc:  # pypdf raises its own errors but also ValueError/KeyError on broken files
        raise CorruptFile(f"Could not read PDF: {short_reason(exc)}") from exc

    if reader.is_encrypted:
        try:
            # Many PDFs are "encrypted" with an empty user password only to restrict printing or copying.
            decrypted = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except Exception:  # unsupported algorithm or missing crypto dependency: we cannot read it either way
            decrypted = False
        if not decrypted:
            raise EncryptedFile("PDF is password-protected")

    page_texts: list[str] = []
    scanned: list[int] = []
    content_bytes = 0
    try:
        page_count = len(reader.pages)
        if page_count > limits.pdf_max_pages:
            raise LimitExceeded(f"PDF has {page_count} pages; the limit is {limits.pdf_max_pages}")
        for number, page in enumerate(reader.pages, start=1):
            # Decoded content streams stay cached on the reader, so their total is what the document costs.
            contents = page.get_contents()
            content_bytes += len(contents.get_data()) if contents is not None else 0
            if content_bytes > limits.pdf_max_content_bytes:
                raise LimitExceeded(
                    f"PDF page content exceeds {limits.pdf_max_content_bytes} bytes (decompressed, by page {number})"
                )
            page_texts.append(strip_nul(page.extract_text() or ""))
            if not page_texts[-1].strip() and _draws_image(page):
                scanned.append(number - 1)
    except (LimitExceeded, LimitReachedError):
        raise
    except Exception as exc:
        raise CorruptFile(f"Could not read PDF: {short_reason(exc)}") from exc
    return page_texts, _read_outline(reader, limits), scanned
