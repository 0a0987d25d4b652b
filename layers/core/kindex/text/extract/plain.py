"""Plain text and Markdown: the decoded file, verbatim."""

from __future__ import annotations

from kindex.domain.types import ExtractedText
from kindex.text.extract.decoding import decode_text
from kindex.text.extract.limits import ExtractLimits, strip_nul


def extract_plain(data: bytes, limits: ExtractLimits) -> ExtractedText:
    """Text and Markdown alike. Verbatim on purpose: chunk offsets and citations point into this exact string."""
    return ExtractedText(text=strip_nul(decode_text(data)))
