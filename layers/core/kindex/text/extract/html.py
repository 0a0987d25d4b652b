"""HTML: measured by a streaming lxml pre-scan, then read by BeautifulSoup into paragraphs, headings and tables.

Headings (h1-h6) become Markdown-style `#` lines with their level and offset, tables Markdown tables (a cell spanning
columns keeps the columns after it in place; columns empty in every row are dropped), lists `- ` items; what a
browser does not show (scripts, styles, navigation, hidden elements) is dropped. bs4 and lxml load on first use.
"""

from __future__ import annotations

import re
import warnings

from kindex.domain.errors import CorruptFile, LimitExceeded
from kindex.domain.types import ExtractedText
from kindex.text.extract.decoding import decode_text
from kindex.text.extract.limits import ExtractLimits, collapse, short_reason
from kindex.text.extract.structure import Blocks

_HTML_DROPPED_TAGS = ["script", "style", "nav", "noscript", "template", "head", "svg", "iframe"]
_HTML_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Elements that end the running paragraph: their content never runs into the text around them.
_HTML_BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "center",
        "dd",
        "details",
        "dialog",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "hr",
        "html",
        "legend",
        "li",
        "main",
        "menu",
        "ol",
        "p",
        "section",
        "summary",
        "ul",
    }
)
_HTML_HIDDEN_STYLE = re.compile(r"display\s*:\s*none", re.IGNORECASE)
_LINE_BREAK = object()
_LIST_ITEM = object()


def _html_parser_name() -> str:
    try:
        import lxml  # noqa: F401  (only probing whether the fast parser is installed)
    except ImportError:
        return "html.parser"
    return "lxml"


def extract_html(data: bytes, limits: ExtractLimits) -> ExtractedText:
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning
    from bs4.dammit import EncodingDetector

    if len(data) > limits.html_max_bytes:
        raise LimitExceeded(f"HTML file is {len(data)} bytes; the limit for HTML is {limits.html_max_bytes} bytes")
    # The document's own <meta charset> / XML declaration comes after a BOM and valid UTF-8, as in browsers.
    markup = decode_text(data, EncodingDetector.find_declared_encoding(data, is_html=True))
    _check_html_shape(markup, limits)
    try:
        with warnings.catch_warnings():
            # XHTML (e.g. inline-XBRL filings) is parsed as HTML on purpose: we want text, not a tree.
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            soup = BeautifulSoup(markup, _html_parser_name())
        return _render_html(soup)
    except Exception as exc:  # the parsers raise many unrelated types on broken input
        raise CorruptFile(f"Could not read HTML: {short_reason(exc)}") from exc


class _HtmlTooLarge(Exception):
    pass


class _HtmlShape:
    """An lxml parser target that only counts: elements (and comments) and the current nesting. The same libxml2
    HTML parser that BeautifulSoup uses sees the same markup, so its numbers are the tree BeautifulSoup would
    build, at the cost of a streaming pass (no tree, constant memory)."""

    def __init__(self, limits: ExtractLimits):
        self.limits = limits
        self.elements = 0
        self.depth = 0

    def start(self, tag, attrib) -> None:
        self.depth += 1
        if self.depth > self.limits.html_max_depth:
            raise _HtmlTooLarge(f"HTML nests deeper than {self.limits.html_max_depth} elements")
        self._count()

    def end(self, tag) -> None:
        self.depth -= 1

    def data(self, data) -> None:
        pass

    def comment(self, text) -> None:
        self._count()  # BeautifulSoup keeps comments as nodes: as costly as an element

    def pi(self, target, data=None) -> None:
        self._count()

    def _count(self) -> None:
        self.elements += 1
        if self.elements > self.limits.html_max_elements:
            raise _HtmlTooLarge(f"HTML has more than {self.limits.html_max_elements} elements and comments")

    def close(self) -> None:
        return None


_HTML_FEED_CHARS = 1024 * 1024


def _check_html_shape(markup: str, limits: ExtractLimits) -> None:
    """`LimitExceeded` before any tree exists when the HTML has too many elements or nests too deep."""
    from lxml import etree

    parser = etree.HTMLParser(target=_HtmlShape(limits), recover=True, no_network=True)
    try:
        for start in range(0, len(markup), _HTML_FEED_CHARS):
            parser.feed(markup[start : start + _HTML_FEED_CHARS])
        parser.close()
    except _HtmlTooLarge as exc:
        raise LimitExceeded(str(exc)) from None
    except etree.LxmlError:
        pass  # unparseable markup: BeautifulSoup reports it (or reads what it can) below


def _render_html(soup) -> ExtractedText:
    from bs4.element import NavigableString, Tag

    title_tag = soup.find("title")
    title = collapse(title_tag.get_text(" ")) if title_tag is not None else ""
    _drop_invisible_html(soup)
    text = _HtmlText(Blocks())
    text.blocks.paragraph(title)
    # An explicit stack instead of recursion: real pages nest deeper than Python's recursion limit.
    stack: list[tuple[object, bool]] = [(soup, False)]
    while stack:
        node, closing = stack.pop()
        if closing:
            text.end_paragraph()
        elif type(node) is NavigableString:  # skips comments, doctypes, CDATA, processing instructions
            text.inline.append(str(node))
        elif isinstance(node, Tag):
            stack.extend(text.enter(node))
    text.end_paragraph()
    return text.blocks.join()


def _drop_invisible_html(soup) -> None:
    for tag in soup.find_all(_HTML_DROPPED_TAGS):
        if not tag.decomposed:
            tag.decompose()
    # Content a browser does not show is page chrome or machine data (inline XBRL headers, menus).
    hidden = soup.find_all(style=_HTML_HIDDEN_STYLE) + soup.find_all(attrs={"hidden": True})
    hidden += soup.find_all(attrs={"role": "navigation"})
    for tag in hidden:
        if not tag.decomposed:
            tag.decompose()


class _HtmlText:
    """The blocks read so far, and the inline pieces of the paragraph being read."""

    def __init__(self, blocks: Blocks):
        self.blocks = blocks
        self.inline: list[object] = []

    def enter(self, tag) -> list[tuple[object, bool]]:
        """Reads a tag; returns the nodes still to visit, in stack order (the last is visited first)."""
        if tag.name in _HTML_HEADINGS or tag.name in ("table", "pre"):
            self.end_paragraph()
            _add_html_standalone_block(self.blocks, tag)
            return []
        if tag.name == "br":
            self.inline.append(_LINE_BREAK)
            return []
        pending: list[tuple[object, bool]] = []
        if tag.name in _HTML_BLOCK_TAGS:
            self.end_paragraph()
            pending.append((tag, True))
            if tag.name == "li":
                self.inline.append(_LIST_ITEM)
        pending.extend((child, False) for child in reversed(tag.contents))
        return pending

    def end_paragraph(self) -> None:
        if not self.inline:
            return
        is_list_item = self.inline[0] is _LIST_ITEM
        lines: list[str] = []
        current: list[str] = []
        for piece in self.inline:
            if piece is _LINE_BREAK:
                lines.append(collapse("".join(current)))
                current = []
            elif isinstance(piece, str):  # not the other marker, _LIST_ITEM
                current.append(piece)
        lines.append(collapse("".join(current)))
        self.inline.clear()
        paragraph = "\n".join(line for line in lines if line)
        if paragraph:
            self.blocks.paragraph("- " + paragraph if is_list_item else paragraph)


def _add_html_standalone_block(blocks: Blocks, tag) -> None:
    """A heading, table or `pre`, read whole as one block (nothing when empty)."""
    name = tag.name
    if name in _HTML_HEADINGS:
        heading = collapse(tag.get_text(" "))
        blocks.heading(_HTML_HEADINGS[name], heading, "#" * _HTML_HEADINGS[name] + " " + heading if heading else "")
    elif name == "table":
        caption = tag.find("caption")
        caption_text = (
            collapse(caption.get_text(" ")) if caption is not None and caption.find_parent("table") is tag else ""
        )
        blocks.table(_html_table_rows(tag), caption_text)
    else:
        blocks.paragraph("\n".join(line.rstrip() for line in tag.get_text().strip("\n").splitlines()))


# A colspan beyond this is a broken or hostile table, not a layout: it counts as one column.
_MAX_COLSPAN = 50


def _html_table_rows(table) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.find_all("tr"):
        if row.find_parent("table") is not table:
            continue  # a nested table's row: its text already appears in the enclosing cell
        cells: list[str] = []
        for cell in row.find_all(("td", "th")):
            if cell.find_parent("tr") is not row:
                continue
            cells.append(collapse(cell.get_text(" ")))
            # A cell spanning columns keeps the next cells under their own headers.
            span = str(cell.get("colspan") or "1").strip()
            extra = int(span) - 1 if span.isdigit() and 1 < int(span) <= _MAX_COLSPAN else 0
            cells.extend([""] * extra)
        rows.append(cells)
    return rows
