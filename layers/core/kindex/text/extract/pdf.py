"""PDF: pypdf under tightened decompression and parsing limits and a page and content budget; one span per page.

pypdf loads on first use.
"""

from __future__ import annotations

import io

from kindex.domain.errors import CorruptFile, EncryptedFile, LimitExceeded
from kindex.domain.types import ExtractedText, PageSpan
from kindex.text.extract.limits import ExtractLimits, short_reason, strip_nul

_PAGE_SEPARATOR = "\n\n"


def extract_pdf(data: bytes, limits: ExtractLimits) -> ExtractedText:
    from pypdf import apply_configuration
    from pypdf.errors import LimitReachedError

    # pypdf's own resource limits (decompression per stream, tokens per content stream), tightened for text
    # extraction: a page's text never needs 75 MB of decoded operators. A ContextVar, so per thread.
    stream_bytes = limits.pdf_max_stream_bytes
    with apply_configuration(zlib_maximum_output_length=stream_bytes, lzw_maximum_output_length=stream_bytes,
                             run_length_maximum_output_length=stream_bytes, brotli_maximum_output_length=stream_bytes,
                             array_based_stream_maximum_output_length=stream_bytes,
                             stream_decoding_work_maximum_length=4 * stream_bytes,
                             stream_parsing_work_maximum_count=limits.pdf_max_stream_tokens):
        try:
            page_texts = _read_pdf_pages(data, limits)
        except LimitReachedError as exc:
            raise LimitExceeded(f"PDF exceeds a parsing limit: {short_reason(exc)}") from exc

    spans: list[PageSpan] = []
    offset = 0
    for number, page_text in enumerate(page_texts, start=1):
        spans.append(PageSpan(start=offset, number=number))
        offset += len(page_text) + len(_PAGE_SEPARATOR)
    return ExtractedText(text=_PAGE_SEPARATOR.join(page_texts), pages=tuple(spans))


def _read_pdf_pages(data: bytes, limits: ExtractLimits) -> list[str]:
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
                raise LimitExceeded(f"PDF page content exceeds {limits.pdf_max_content_bytes} bytes "
                                    f"(decompressed, by page {number})")
            page_texts.append(strip_nul(page.extract_text() or ""))
    except (LimitExceeded, LimitReachedError):
        raise
    except Exception as exc:
        raise CorruptFile(f"Could not read PDF: {short_reason(exc)}") from exc
    return page_texts
