"""Text extraction: bytes of a txt, md, html, pdf or docx file -> `ExtractedText`.

The format is chosen by mimetype, then by filename extension. Every failure is a domain `IngestError`
with a short one-line message, so that the document's `failure_reason` is readable and nothing above
this module needs to know which parser was used. PDF, DOCX and HTML libraries are imported inside their
format function so that a plain-text ingest does not pay for loading them.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from collections.abc import Callable
from pathlib import PurePosixPath

from kindex.domain.errors import CorruptFile, EmptyText, EncryptedFile, LimitExceeded, UnsupportedType
from kindex.domain.types import ExtractedText, PageSpan

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 1024 * 1024

TEXT_PLAIN = "text/plain"
TEXT_MARKDOWN = "text/markdown"
TEXT_HTML = "text/html"
APPLICATION_PDF = "application/pdf"
APPLICATION_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

SUPPORTED_MIMETYPES: frozenset[str] = frozenset(
    {TEXT_PLAIN, TEXT_MARKDOWN, TEXT_HTML, APPLICATION_PDF, APPLICATION_DOCX}
)

# Aliases seen in the wild, mapped to the canonical type of the extractor that reads them.
_MIMETYPE_ALIASES = {
    "text/x-markdown": TEXT_MARKDOWN,
    "application/xhtml+xml": TEXT_HTML,
}

# Mimetypes that say nothing about the content; the filename extension decides instead.
_GENERIC_MIMETYPES = frozenset({"application/octet-stream", "binary/octet-stream"})

_EXTENSIONS = {
    ".txt": TEXT_PLAIN,
    ".md": TEXT_MARKDOWN,
    ".markdown": TEXT_MARKDOWN,
    ".html": TEXT_HTML,
    ".htm": TEXT_HTML,
    ".pdf": APPLICATION_PDF,
    ".docx": APPLICATION_DOCX,
}

# A parser's own message can be long or multi-line; a failure reason must stay one short line.
_MAX_REASON_CHARS = 200


def guess_mimetype(filename: str | None) -> str | None:
    """The canonical mimetype for a supported filename extension (case-insensitive), else None."""
    if not filename:
        return None
    return _EXTENSIONS.get(PurePosixPath(filename.replace("\\", "/")).suffix.lower())


def extract(
    data: bytes,
    *,
    mimetype: str | None,
    filename: str | None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ExtractedText:
    """Extract the text of one file.

    Raises `LimitExceeded` when `data` is larger than `max_bytes`, `UnsupportedType` for a type we do not
    read, `CorruptFile` / `EncryptedFile` when the parser cannot open the file and `EmptyText` when the
    file holds no text. NUL characters are removed from the output (stores and indexes reject them).
    """
    if len(data) > max_bytes:
        raise LimitExceeded(f"File is {len(data)} bytes; the limit is {max_bytes} bytes")
    kind = _resolve_mimetype(mimetype, filename)
    extracted = _EXTRACTORS[kind](data)
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


def _resolve_mimetype(mimetype: str | None, filename: str | None) -> str:
    declared = (mimetype or "").split(";", 1)[0].strip().lower()
    if declared and declared not in _GENERIC_MIMETYPES:
        declared = _MIMETYPE_ALIASES.get(declared, declared)
        if declared in SUPPORTED_MIMETYPES:
            return declared
        raise UnsupportedType(f"Unsupported file type: {declared}")
    if filename is None:
        # Content posted without a name or type is text by contract (the API's `content` field).
        return TEXT_PLAIN
    guessed = guess_mimetype(filename)
    if guessed is not None:
        return guessed
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if suffix:
        raise UnsupportedType(f"Unsupported file type: {suffix}")
    raise UnsupportedType(f"Unsupported file type: {filename!r} has no extension and no mimetype")


def _short_reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > _MAX_REASON_CHARS:
        text = text[: _MAX_REASON_CHARS - 3] + "..."
    return text


def _strip_nul(text: str) -> str:
    return text.replace("\x00", "")


# ---------------------------------------------------------------------------------------------- text


def _extract_plain(data: bytes) -> ExtractedText:
    # Verbatim on purpose: chunk offsets and citations point into this exact string.
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return ExtractedText(text=_strip_nul(text))


# ---------------------------------------------------------------------------------------------- html

_HTML_DROPPED_TAGS = ["script", "style", "nav", "noscript", "template", "head", "svg", "iframe"]
_HTML_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Elements that end the running paragraph: their content never runs into the text around them.
_HTML_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog",
        "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup", "hr",
        "html", "legend", "li", "main", "menu", "ol", "p", "section", "summary", "ul",
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


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _extract_html(data: bytes) -> ExtractedText:
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    try:
        with warnings.catch_warnings():
            # XHTML (e.g. inline-XBRL filings) is parsed as HTML on purpose: we want text, not a tree.
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            # Bytes, not str: BeautifulSoup honours the document's declared charset.
            soup = BeautifulSoup(data, _html_parser_name())
        text = _render_html(soup)
    except Exception as exc:  # the parsers raise many unrelated types on broken input
        raise CorruptFile(f"Could not read HTML: {_short_reason(exc)}") from exc
    return ExtractedText(text=_strip_nul(text))


def _render_html(soup) -> str:
    from bs4.element import NavigableString, Tag

    title_tag = soup.find("title")
    title = _collapse(title_tag.get_text(" ")) if title_tag is not None else ""
    for tag in soup.find_all(_HTML_DROPPED_TAGS):
        if not tag.decomposed:
            tag.decompose()
    # Content a browser does not show is page chrome or machine data (inline XBRL headers, menus).
    hidden = soup.find_all(style=_HTML_HIDDEN_STYLE) + soup.find_all(attrs={"hidden": True})
    hidden += soup.find_all(attrs={"role": "navigation"})
    for tag in hidden:
        if not tag.decomposed:
            tag.decompose()

    blocks: list[str] = [title] if title else []
    inline: list[object] = []

    def flush() -> None:
        if not inline:
            return
        is_list_item = inline[0] is _LIST_ITEM
        lines: list[str] = []
        current: list[str] = []
        for piece in inline:
            if piece is _LINE_BREAK:
                lines.append(_collapse("".join(current)))
                current = []
            elif piece is not _LIST_ITEM:
                current.append(piece)  # type: ignore[arg-type]
        lines.append(_collapse("".join(current)))
        inline.clear()
        paragraph = "\n".join(line for line in lines if line)
        if paragraph:
            blocks.append("- " + paragraph if is_list_item else paragraph)

    # An explicit stack instead of recursion: real pages nest deeper than Python's recursion limit.
    stack: list[tuple[object, bool]] = [(soup, False)]
    while stack:
        node, closing = stack.pop()
        if closing:
            flush()
            continue
        if isinstance(node, NavigableString):
            if type(node) is NavigableString:  # skips comments, doctypes, CDATA, processing instructions
                inline.append(str(node))
            continue
        if not isinstance(node, Tag):
            continue
        name = node.name
        if name in _HTML_HEADINGS:
            flush()
            heading = _collapse(node.get_text(" "))
            if heading:
                blocks.append("#" * _HTML_HEADINGS[name] + " " + heading)
            continue
        if name == "table":
            flush()
            table = _render_html_table(node)
            if table:
                blocks.append(table)
            continue
        if name == "pre":
            flush()
            preformatted = "\n".join(line.rstrip() for line in node.get_text().strip("\n").splitlines())
            if preformatted.strip():
                blocks.append(preformatted)
            continue
        if name == "br":
            inline.append(_LINE_BREAK)
            continue
        is_block = name in _HTML_BLOCK_TAGS
        if is_block:
            flush()
            stack.append((node, True))
            if name == "li":
                inline.append(_LIST_ITEM)
        stack.extend((child, False) for child in reversed(node.contents))
    flush()
    return "\n\n".join(blocks)


def _render_html_table(table) -> str:
    rows: list[str] = []
    for row in table.find_all("tr"):
        if row.find_parent("table") is not table:
            continue  # a nested table's row: its text already appears in the enclosing cell
        cells = [
            _collapse(cell.get_text(" "))
            for cell in row.find_all(("td", "th"))
            if cell.find_parent("tr") is row
        ]
        cells = [cell for cell in cells if cell]
        if cells:
            rows.append(" | ".join(cells))
    caption = table.find("caption")
    if caption is not None and caption.find_parent("table") is table:
        caption_text = _collapse(caption.get_text(" "))
        if caption_text:
            rows.insert(0, caption_text)
    return "\n".join(rows)


# ----------------------------------------------------------------------------------------------- pdf

_PAGE_SEPARATOR = "\n\n"


def _extract_pdf(data: bytes) -> ExtractedText:
    from pypdf import PasswordType, PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
    except Exception as exc:  # pypdf raises its own errors but also ValueError/KeyError on broken files
        raise CorruptFile(f"Could not read PDF: {_short_reason(exc)}") from exc

    if reader.is_encrypted:
        try:
            # Many PDFs are "encrypted" with an empty user password only to restrict printing or copying.
            decrypted = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except Exception:  # unsupported algorithm or missing crypto dependency: we cannot read it either way
            decrypted = False
        if not decrypted:
            raise EncryptedFile("PDF is password-protected")

    page_texts: list[str] = []
    try:
        for page in reader.pages:
            page_texts.append(_strip_nul(page.extract_text() or ""))
    except Exception as exc:
        raise CorruptFile(f"Could not read PDF: {_short_reason(exc)}") from exc

    spans: list[PageSpan] = []
    offset = 0
    for number, page_text in enumerate(page_texts, start=1):
        spans.append(PageSpan(start=offset, number=number))
        offset += len(page_text) + len(_PAGE_SEPARATOR)
    return ExtractedText(text=_PAGE_SEPARATOR.join(page_texts), pages=tuple(spans))


# ---------------------------------------------------------------------------------------------- docx

_DOCX_HEADING_STYLE = re.compile(r"heading\s+([1-9])$", re.IGNORECASE)


def _extract_docx(data: bytes) -> ExtractedText:
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        text = _render_docx(document)
    except Exception as exc:  # zipfile, lxml and python-docx each raise their own types on broken files
        raise CorruptFile(f"Could not read DOCX: {_short_reason(exc)}") from exc
    return ExtractedText(text=_strip_nul(text))


def _render_docx(document) -> str:
    from docx.oxml.ns import qn
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    # Resolving `paragraph.style` scans the style part on every call (seconds on a large handbook);
    # one lookup table makes heading detection cheap.
    heading_levels = _docx_heading_levels(document)
    paragraph_tag, table_tag = qn("w:p"), qn("w:tbl")
    sdt_tag, sdt_content_tag = qn("w:sdt"), qn("w:sdtContent")
    body = document.element.body
    blocks: list[str] = []
    # Body children in document order interleave paragraphs and tables, so a table stays next to the
    # text that introduces it. Content controls (w:sdt) wrap ordinary paragraphs and tables.
    pending = list(reversed(body))
    while pending:
        element = pending.pop()
        if element.tag == paragraph_tag:
            rendered = _render_docx_paragraph(Paragraph(element, document), heading_levels)
        elif element.tag == table_tag:
            rendered = _render_docx_table(Table(element, document))
        elif element.tag == sdt_tag:
            content = element.find(sdt_content_tag)
            if content is not None:
                pending.extend(reversed(content))
            continue
        else:
            continue
        if rendered.strip():
            blocks.append(rendered)
    return "\n\n".join(blocks)


def _docx_heading_levels(document) -> dict[str, int]:
    levels: dict[str, int] = {}
    for style in document.styles:
        name = (style.name or "").strip()
        if name.lower() == "title":
            levels[style.style_id] = 1
            continue
        match = _DOCX_HEADING_STYLE.match(name)
        if match:
            levels[style.style_id] = int(match.group(1))
    return levels


def _render_docx_paragraph(paragraph, heading_levels: dict[str, int]) -> str:
    text = paragraph.text.strip()
    if not text:
        return ""
    level = heading_levels.get(paragraph._p.style or "", 0)
    if level:
        return "#" * level + " " + _collapse(text)
    return text


def _render_docx_table(table) -> str:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            # A merged cell is returned once per grid column it spans; render it once.
            if previous is not None and cell._tc is previous:
                continue
            previous = cell._tc
            text = _render_docx_cell(cell)
            if text:
                cells.append(text)
        if cells:
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _render_docx_cell(cell) -> str:
    from docx.table import Table

    parts: list[str] = []
    for item in cell.iter_inner_content():
        if isinstance(item, Table):
            parts.append(_render_docx_table(item).replace("\n", " ; "))
        else:
            parts.append(item.text)
    return _collapse(" ".join(parts))


_EXTRACTORS: dict[str, Callable[[bytes], ExtractedText]] = {
    TEXT_PLAIN: _extract_plain,
    TEXT_MARKDOWN: _extract_plain,
    TEXT_HTML: _extract_html,
    APPLICATION_PDF: _extract_pdf,
    APPLICATION_DOCX: _extract_docx,
}
