"""What the formats share to keep structure: blocks joined into text with their headings' and tables' offsets, and
rows rendered as a Markdown table.

A reader collects `Blocks` (paragraphs, headings with their level, tables as rows of cells) in document order; `join`
makes the text (blocks separated by a blank line, as before) and the `Heading` and `TableSpan` offsets into it, so the
chunker can keep tables whole between rows and give every chunk its heading path."""

from __future__ import annotations

from collections.abc import Sequence

from kindex.domain.types import ExtractedText, Heading, TableSpan
from kindex.text.extract.limits import strip_nul

BLOCK_SEPARATOR = "\n\n"


def markdown_table(rows: Sequence[Sequence[str]]) -> tuple[str, int] | None:
    """Rows of cell texts as a Markdown table (the first row is the header), and the length of its header row and
    separator line with their line breaks; None when no cell has text. Columns empty in every row (spacer cells of
    filings laid out with tables) are dropped; short rows are padded, so every cell stays under its column."""
    rows = [[_cell(cell) for cell in row] for row in rows]
    rows = [row for row in rows if any(row)]
    if not rows:
        return None
    width = max(len(row) for row in rows)
    rows = [list(row) + [""] * (width - len(row)) for row in rows]
    kept = [column for column in range(width) if any(row[column] for row in rows)]
    rows = [[row[column] for column in kept] for row in rows]
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    separator = "| " + " | ".join("---" for _ in kept) + " |"
    header = lines[0] + "\n" + separator
    body = "\n".join(lines[1:])
    text = header + ("\n" + body if body else "")
    return text, len(header) + 1 if body else len(header)


def _cell(text: str) -> str:
    # A pipe inside a cell would end it; Markdown escapes it.
    return " ".join(strip_nul(text).split()).replace("|", "\\|")


class Blocks:
    """The blocks of one document, in order."""

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._headings: list[tuple[int, int, str]] = []  # (block, level, title)
        self._tables: list[tuple[int, int, int]] = []  # (block, offset of the table in it, header length)

    def paragraph(self, text: str) -> None:
        text = strip_nul(text)  # removed here, before any offset is taken (stores and indexes reject NUL)
        if text.strip():
            self._blocks.append(text)

    def heading(self, level: int, title: str, rendered: str) -> None:
        """A heading line `rendered` (e.g. `## Title`) of `level` whose text is `title`."""
        rendered = strip_nul(rendered)
        if rendered.strip():
            self._headings.append((len(self._blocks), level, title))
            self._blocks.append(rendered)

    def table(self, rows: Sequence[Sequence[str]], caption: str = "") -> None:
        rendered = markdown_table(rows)
        if rendered is None:
            self.paragraph(caption)
            return
        table, header_length = rendered
        caption = " ".join(strip_nul(caption).split())
        prefix = caption + "\n" if caption else ""
        self._tables.append((len(self._blocks), len(prefix), header_length))
        self._blocks.append(prefix + table)

    def join(self) -> ExtractedText:
        starts: list[int] = []
        offset = 0
        for block in self._blocks:
            starts.append(offset)
            offset += len(block) + len(BLOCK_SEPARATOR)
        text = BLOCK_SEPARATOR.join(self._blocks)
        headings = tuple(
            Heading(start=starts[block], level=level, title=title) for block, level, title in self._headings
        )
        tables = tuple(
            TableSpan(
                start=starts[block] + inside,
                end=starts[block] + len(self._blocks[block]),
                header_end=starts[block] + inside + header,
            )
            for block, inside, header in self._tables
        )
        return ExtractedText(text=text, headings=headings, tables=tables)
