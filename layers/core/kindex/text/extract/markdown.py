"""Markdown: the decoded file verbatim (chunk offsets and citations point into this exact string), with its headings
(ATX `#` and setext) and tables found by markdown-it-py's CommonMark parser with its GFM table rule: a `#` line inside
a fenced code block is code, not a heading. YAML front matter (`---` ... `---` at the start, as Jekyll and MyST
write it) is skipped, so its closing line is not read as a setext underline."""

from __future__ import annotations

import re

from kindex.domain.types import ExtractedText, Heading, TableSpan
from kindex.text.extract.decoding import decode_text
from kindex.text.extract.limits import ExtractLimits, strip_nul

# markdown-it normalises \r\n and a lone \r to \n before it counts lines; offsets count the same line ends.
_LINE_END = re.compile(r"\r\n?|\n")
_FRONT_MATTER = re.compile(r"---[ \t]*\r?\n(?:.*?\r?\n)?---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def extract_markdown(data: bytes, limits: ExtractLimits) -> ExtractedText:
    text = strip_nul(decode_text(data))
    if len(text) > limits.markdown_structure_max_chars:
        return ExtractedText(text=text)  # read as plain text: structure is worth less than a bounded parse
    headings, tables = markdown_structure(text)
    return ExtractedText(text=text, headings=headings, tables=tables)


def markdown_structure(text: str) -> tuple[tuple[Heading, ...], tuple[TableSpan, ...]]:
    from markdown_it import MarkdownIt

    front = _FRONT_MATTER.match(text)
    body_start = front.end() if front else 0
    line_starts = [body_start] + [m.end() for m in _LINE_END.finditer(text, body_start)]

    def line(number: int) -> int:
        return line_starts[number] if number < len(line_starts) else len(text)

    # Block rules only: headings and tables are blocks, and the inline pass (emphasis, links) is where hostile text
    # costs time (2 MB of "[" took 110 s with it on a loaded machine).
    tokens = MarkdownIt("commonmark").enable("table").disable("inline").parse(text[body_start:])
    headings: list[Heading] = []
    tables: list[TableSpan] = []
    for position, token in enumerate(tokens):
        if token.map is None:
            continue
        if token.type == "heading_open" and token.level == 0:  # a heading inside a list or quote is no section
            title = tokens[position + 1].content if position + 1 < len(tokens) else ""
            headings.append(Heading(start=line(token.map[0]), level=int(token.tag[1]), title=" ".join(title.split())))
        elif token.type == "table_open" and token.level == 0:
            first, after = token.map
            end = line(after)
            while end > line(first) and text[end - 1] in "\r\n":
                end -= 1  # the table ends with its last row, not the line break after it
            tables.append(TableSpan(start=line(first), end=end, header_end=min(line(first + 2), end)))
    return tuple(headings), tuple(tables)
