"""Text extraction: bytes of a txt, md, html, pdf or docx file -> `ExtractedText`.

The format is chosen by mimetype, then by filename extension, and the content must agree: a file whose first
bytes say it is something else (a PDF, a ZIP archive, an executable) is refused with `UnsupportedType`, and
text must decode to text (byte-order mark, then UTF-8, then the declared or detected charset) rather than
to control characters. Every parser runs inside limits (`ExtractLimits`) that bound its memory and work
whatever the file claims: a ZIP package's central directory is checked and every entry decompressed in
bounded reads before python-docx opens it, HTML is measured (elements, nesting) by a streaming pre-scan
before BeautifulSoup builds a tree, and pypdf runs with tighter decompression and parsing limits plus a
page and content budget. Every failure is a domain `IngestError` with a short one-line message, so that the
document's `failure_reason` is readable and nothing above this module needs to know which parser was used.
PDF, DOCX and HTML libraries are imported inside their format function so that a plain-text ingest does not
pay for loading them.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from kindex.domain.errors import (
    CorruptFile,
    EmptyText,
    EncryptedFile,
    LimitExceeded,
    UnsupportedType,
)
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

_MIB = 1024 * 1024


@dataclass(frozen=True)
class ExtractLimits:
    """Bounds on what one file may cost to read, whatever its size on disk. The defaults keep the worst file
    of each format under about 450 MB of memory and a minute of CPU (measured at each limit: DOCX 414 MB / 32 s,
    HTML 370 MB / 10 s, PDF 156 MB / 51 s); real documents are far below them (an 872-page DOCX handbook has
    5 MiB of XML, a 10-K filing in HTML 15,000 elements, a text PDF page 4-15 KiB of content). A file over a
    limit fails with LimitExceeded naming it."""

    # ZIP packages (DOCX). Word writes only stored and deflated entries, so nothing else is accepted.
    zip_max_entries: int = 10_000
    zip_max_uncompressed_bytes: int = 256 * _MIB  # everything python-docx loads (media included)
    zip_max_xml_bytes: int = 32 * _MIB  # what lxml parses: about 13 bytes of memory per byte of XML
    zip_max_ratio: int = 200  # deflate tops out near 1,000:1; Word's XML compresses about 10-20:1
    zip_ratio_floor_bytes: int = 1 * _MIB  # tiny entries may compress well; only big ones must not
    # HTML: BeautifulSoup costs about 1 KB of memory per element, whatever the nesting.
    html_max_bytes: int = 16 * _MIB
    html_max_elements: int = 250_000  # comments and processing instructions count as elements
    html_max_depth: int = 256  # libxml2's own default for XML; keeps every tree walk far from any recursion limit
    # PDF: pypdf decodes and tokenizes page content streams; decoded streams stay cached on the reader.
    pdf_max_pages: int = 10_000
    pdf_max_stream_bytes: int = 16 * _MIB  # one decompressed stream (pypdf's default is 75 MB)
    pdf_max_stream_tokens: int = 1_000_000  # operands and operators in one content stream (pypdf: 2,000,000)
    pdf_max_content_bytes: int = 32 * _MIB  # decoded page content over the whole document: about a minute of work


DEFAULT_LIMITS = ExtractLimits()


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
    limits: ExtractLimits = DEFAULT_LIMITS,
) -> ExtractedText:
    """Extract the text of one file.

    Raises `LimitExceeded` when `data` is larger than `max_bytes` or the file would cost more than `limits`
    allow to read, `UnsupportedType` for a type we do not read or content that is not what the name or
    mimetype says (binary named `.txt`, a PDF named `.docx`), `CorruptFile` / `EncryptedFile` when the parser
    cannot open the file and `EmptyText` when the file holds no text. NUL characters are removed from the
    output (stores and indexes reject them).
    """
    if len(data) > max_bytes:
        raise LimitExceeded(f"File is {len(data)} bytes; the limit is {max_bytes} bytes")
    kind = _resolve_mimetype(mimetype, filename)
    _check_signature(data, kind)
    extracted = _EXTRACTORS[kind](data, limits)
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


# ------------------------------------------------------------------------------------------- content

# Leading bytes of formats that are never text, and what to call them in a failure reason. Only signatures
# that cannot start a text file (each holds a control or non-ASCII byte, except "%PDF-", which only a PDF
# starts with): the real gate for text is `_decode_text`, which refuses any content that does not decode to
# text, signature or not; this table makes the reason say what the file is, and keeps a PDF or a ZIP from
# being read as another format. Hand-written rather than libmagic (a C library Lambda lacks) or a
# pure-Python signature database: these few entries are all the decision needs (decisions.md).
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"PK\x05\x06", "a ZIP archive"),
    (b"\x7fELF", "an ELF executable"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\xce\xfa\xed\xfe", "a Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "a Mach-O or Java class file"),
    (b"\x00asm", "a WebAssembly module"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"\xfd7zXZ\x00", "an XZ archive"),
    (b"\x28\xb5\x2f\xfd", "a Zstandard archive"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "a legacy Office (OLE2) file"),
    (b"SQLite format 3\x00", "an SQLite database"),
)

# What each extractor expects to find, by the description `_sniff` gives.
_EXPECTED_CONTENT = {APPLICATION_PDF: "a PDF document", APPLICATION_DOCX: "a ZIP archive"}
_DESCRIPTIONS = {TEXT_PLAIN: "plain text", TEXT_MARKDOWN: "Markdown text", TEXT_HTML: "HTML",
                 APPLICATION_PDF: "a PDF document", APPLICATION_DOCX: "a DOCX document"}


def _sniff(data: bytes) -> str | None:
    """What the leading bytes say the file is, or None when they name no known binary format."""
    for signature, description in _SIGNATURES:
        if data.startswith(signature):
            return description
    return None


def _check_signature(data: bytes, kind: str) -> None:
    """Refuse content whose magic bytes name another format than the one the name or mimetype declared.

    A PDF named `.txt` is refused rather than read as a PDF: the document's mimetype, its citations and its
    re-extraction all follow the declared type, so the name must be fixed at the source (decisions.md)."""
    found = _sniff(data)
    if found is None or found == _EXPECTED_CONTENT.get(kind):
        return
    raise UnsupportedType(f"File content is {found}, not {_DESCRIPTIONS[kind]}; upload it under its real type")


# ---------------------------------------------------------------------------------------------- text

_BOMS = (
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),  # before UTF-16 LE, whose mark it starts with
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xfe\xff", "utf-16-be"),
    (b"\xff\xfe", "utf-16-le"),
)
# Characters text does not contain: C0 controls other than tab, line and page breaks, DEL, the C1 block
# (only a wrong single-byte decoding produces it) and the replacement character of undecodable bytes.
_BINARY_CHARACTERS = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")
_BINARY_SAMPLE_WINDOWS = 16
_BINARY_SAMPLE_CHARS = 64 * 1024
# A few stray control characters (a NUL, an escape) are tolerated and removed; a binary file has thousands.
_BINARY_MIN_COUNT = 8
_BINARY_MAX_SHARE = 0.01
# Encodings the detector cannot tell apart on short input (it scores them the same): then the web's default
# for undeclared Western text wins, as WHATWG specifies for browsers.
_FALLBACK_ENCODING = "cp1252"
_DETECTION_SAMPLE_BYTES = 256 * 1024


def _decode_text(data: bytes, declared: str | None = None) -> str:
    """Bytes -> text by byte-order mark, then strict UTF-8, then the `declared` charset (HTML's meta), then
    charset-normalizer's detection. Raises `UnsupportedType` when the result is not text."""
    text = _decode_by_bom(data)
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = _decode_declared(data, declared)
            if text is None:
                text = _decode_detected(data)
    if _looks_binary(text):
        raise UnsupportedType("File content is binary, not text")
    return text


def _decode_by_bom(data: bytes) -> str | None:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                name = codec.upper()
                raise UnsupportedType(f"File starts with a {name} byte-order mark but is not {name} text") from None
    return None


def _decode_declared(data: bytes, declared: str | None) -> str | None:
    if not declared:
        return None
    try:
        return data.decode(declared)
    except (LookupError, UnicodeDecodeError):
        return None  # an unknown or wrong declaration: detect instead


def _decode_detected(data: bytes) -> str:
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        raise UnsupportedType("File content is binary, not text in any known encoding")
    best = matches[0]
    encoding = best.encoding
    tied = [m.encoding for m in matches if m.chaos == best.chaos and m.coherence == best.coherence]
    # Compared on a prefix: the detector scores a sample too, and decoding the whole file once per tied
    # candidate would cost more than the rest of the extraction.
    sample = data[:_DETECTION_SAMPLE_BYTES]
    fallback = sample.decode(_FALLBACK_ENCODING, errors="replace")
    if any(candidate == _FALLBACK_ENCODING or sample.decode(candidate, errors="replace") == fallback
           for candidate in tied):
        encoding = _FALLBACK_ENCODING
    # A stray byte the encoding lacks becomes U+FFFD, which `_looks_binary` counts, rather than failing the file.
    return data.decode(encoding, errors="replace")


def _looks_binary(text: str) -> bool:
    """True when sampled windows spread over the text hold more than a trace of non-text characters."""
    if len(text) <= _BINARY_SAMPLE_WINDOWS * _BINARY_SAMPLE_CHARS:
        samples = [text]
    else:
        step = (len(text) - _BINARY_SAMPLE_CHARS) // (_BINARY_SAMPLE_WINDOWS - 1)
        samples = [text[i * step:i * step + _BINARY_SAMPLE_CHARS] for i in range(_BINARY_SAMPLE_WINDOWS)]
    sampled = sum(len(sample) for sample in samples)
    found = sum(len(_BINARY_CHARACTERS.findall(sample)) for sample in samples)
    return found > max(_BINARY_MIN_COUNT, _BINARY_MAX_SHARE * sampled)


def _extract_plain(data: bytes, limits: ExtractLimits) -> ExtractedText:
    # Verbatim on purpose: chunk offsets and citations point into this exact string.
    return ExtractedText(text=_strip_nul(_decode_text(data)))


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


def _extract_html(data: bytes, limits: ExtractLimits) -> ExtractedText:
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning
    from bs4.dammit import EncodingDetector

    if len(data) > limits.html_max_bytes:
        raise LimitExceeded(f"HTML file is {len(data)} bytes; the limit for HTML is {limits.html_max_bytes} bytes")
    # The document's own <meta charset> / XML declaration comes after a BOM and valid UTF-8, as in browsers.
    markup = _decode_text(data, EncodingDetector.find_declared_encoding(data, is_html=True))
    _check_html_shape(markup, limits)
    try:
        with warnings.catch_warnings():
            # XHTML (e.g. inline-XBRL filings) is parsed as HTML on purpose: we want text, not a tree.
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            soup = BeautifulSoup(markup, _html_parser_name())
        text = _render_html(soup)
    except Exception as exc:  # the parsers raise many unrelated types on broken input
        raise CorruptFile(f"Could not read HTML: {_short_reason(exc)}") from exc
    return ExtractedText(text=_strip_nul(text))


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
            parser.feed(markup[start:start + _HTML_FEED_CHARS])
        parser.close()
    except _HtmlTooLarge as exc:
        raise LimitExceeded(str(exc)) from None
    except etree.LxmlError:
        pass  # unparseable markup: BeautifulSoup reports it (or reads what it can) below


def _render_html(soup) -> str:
    from bs4.element import NavigableString, Tag

    title_tag = soup.find("title")
    title = _collapse(title_tag.get_text(" ")) if title_tag is not None else ""
    _drop_invisible_html(soup)
    text = _HtmlText([title] if title else [])
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
    return "\n\n".join(text.blocks)


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

    def __init__(self, blocks: list[str]):
        self.blocks = blocks
        self.inline: list[object] = []

    def enter(self, tag) -> list[tuple[object, bool]]:
        """Reads a tag; returns the nodes still to visit, in stack order (the last is visited first)."""
        standalone = _html_standalone_block(tag)
        if standalone is not None:
            self.end_paragraph()
            if standalone:
                self.blocks.append(standalone)
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
                lines.append(_collapse("".join(current)))
                current = []
            elif piece is not _LIST_ITEM:
                current.append(piece)  # type: ignore[arg-type]
        lines.append(_collapse("".join(current)))
        self.inline.clear()
        paragraph = "\n".join(line for line in lines if line)
        if paragraph:
            self.blocks.append("- " + paragraph if is_list_item else paragraph)


def _html_standalone_block(tag) -> str | None:
    """The text of a heading, table or `pre` (read whole, as one block; "" when empty), None for any other tag."""
    name = tag.name
    if name in _HTML_HEADINGS:
        heading = _collapse(tag.get_text(" "))
        return "#" * _HTML_HEADINGS[name] + " " + heading if heading else ""
    if name == "table":
        return _render_html_table(tag)
    if name == "pre":
        preformatted = "\n".join(line.rstrip() for line in tag.get_text().strip("\n").splitlines())
        return preformatted if preformatted.strip() else ""
    return None


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


def _extract_pdf(data: bytes, limits: ExtractLimits) -> ExtractedText:
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
            raise LimitExceeded(f"PDF exceeds a parsing limit: {_short_reason(exc)}") from exc

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
            page_texts.append(_strip_nul(page.extract_text() or ""))
    except (LimitExceeded, LimitReachedError):
        raise
    except Exception as exc:
        raise CorruptFile(f"Could not read PDF: {_short_reason(exc)}") from exc
    return page_texts


# ---------------------------------------------------------------------------------------------- docx

_DOCX_HEADING_STYLE = re.compile(r"heading\s+([1-9])$", re.IGNORECASE)


def _extract_docx(data: bytes, limits: ExtractLimits) -> ExtractedText:
    import docx

    _check_zip_package(data, limits)
    try:
        document = docx.Document(io.BytesIO(data))
        text = _render_docx(document)
    except Exception as exc:  # zipfile, lxml and python-docx each raise their own types on broken files
        raise CorruptFile(f"Could not read DOCX: {_short_reason(exc)}") from exc
    return ExtractedText(text=_strip_nul(text))


_ZIP_READ_CHUNK = 1024 * 1024
_XML_PART = re.compile(r"\.(xml|rels|vml)$", re.IGNORECASE)


def _check_zip_package(data: bytes, limits: ExtractLimits) -> None:
    """Prove a ZIP package is cheap to open before python-docx reads it whole.

    First the central directory (entry count, declared sizes, per-entry compression ratio), then every entry
    decompressed in bounded reads and discarded: `ZipFile.read` (what python-docx calls) inflates an entry's
    whole compressed stream in one call and only then cuts it to the declared size, so an entry that lies
    about its size would otherwise be inflated in full. zipfile stops each bounded read at the declared size
    and checks the CRC, so a lying entry ends as a corrupt file after at most one extra chunk."""
    import zipfile
    import zlib

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise CorruptFile(f"Could not read DOCX: {_short_reason(exc)}") from exc
    with archive:
        entries = archive.infolist()
        if len(entries) > limits.zip_max_entries:
            raise LimitExceeded(f"DOCX has {len(entries)} ZIP entries; the limit is {limits.zip_max_entries}")
        declared = sum(entry.file_size for entry in entries)
        if declared > limits.zip_max_uncompressed_bytes:
            raise LimitExceeded(f"DOCX unpacks to {declared} bytes; the limit is {limits.zip_max_uncompressed_bytes}")
        xml = sum(entry.file_size for entry in entries if _XML_PART.search(entry.filename))
        if xml > limits.zip_max_xml_bytes:
            raise LimitExceeded(f"DOCX holds {xml} bytes of XML; the limit is {limits.zip_max_xml_bytes}")
        for entry in entries:
            if entry.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                # bzip2 and LZMA members are inflated without an output bound by zipfile; Word never writes them.
                raise UnsupportedType(f"DOCX entry {entry.filename!r} uses ZIP compression method "
                                      f"{entry.compress_type}; Word documents use deflate")
            if (entry.file_size > limits.zip_ratio_floor_bytes
                    and entry.file_size > limits.zip_max_ratio * max(entry.compress_size, 1)):
                raise LimitExceeded(f"DOCX entry {entry.filename!r} is compressed more than "
                                    f"{limits.zip_max_ratio}:1 (a ZIP bomb)")
        try:
            for entry in entries:
                with archive.open(entry) as member:
                    while member.read(_ZIP_READ_CHUNK):
                        pass
        except RuntimeError as exc:  # zipfile's way of saying an entry is encrypted
            raise EncryptedFile("DOCX is password-protected") from exc
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
            raise CorruptFile(f"Could not read DOCX: {_short_reason(exc)}") from exc


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


_EXTRACTORS: dict[str, Callable[[bytes, ExtractLimits], ExtractedText]] = {
    TEXT_PLAIN: _extract_plain,
    TEXT_MARKDOWN: _extract_plain,
    TEXT_HTML: _extract_html,
    APPLICATION_PDF: _extract_pdf,
    APPLICATION_DOCX: _extract_docx,
}
