"""DOCX: the ZIP package proven cheap to open, then python-docx's body read in order (paragraphs, headings, tables).

Heading and Title styles become Markdown-style `#` lines with their level and offset, tables Markdown tables (a
merged cell once, its other grid columns left empty; a nested table inline in its cell). python-docx loads on first
use.
"""

from __future__ import annotations

import io
import re

from kindex.domain.errors import CorruptFile, EncryptedFile, LimitExceeded, UnsupportedType
from kindex.domain.types import ExtractedText
from kindex.text.extract.limits import ExtractLimits, collapse, short_reason
from kindex.text.extract.structure import Blocks

_DOCX_HEADING_STYLE = re.compile(r"heading\s+([1-9])$", re.IGNORECASE)


def extract_docx(data: bytes, limits: ExtractLimits) -> ExtractedText:
    import docx

    _check_zip_package(data, limits)
    try:
        document = docx.Document(io.BytesIO(data))
        return _render_docx(document)
    except Exception as exc:  # zipfile, lxml and python-docx each raise their own types on broken files
        raise CorruptFile(f"Could not read DOCX: {short_reason(exc)}") from exc


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
        raise CorruptFile(f"Could not read DOCX: {short_reason(exc)}") from exc
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
                raise UnsupportedType(
                    f"DOCX entry {entry.filename!r} uses ZIP compression method "
                    f"{entry.compress_type}; Word documents use deflate"
                )
            if entry.file_size > limits.zip_ratio_floor_bytes and entry.file_size > limits.zip_max_ratio * max(
                entry.compress_size, 1
            ):
                raise LimitExceeded(
                    f"DOCX entry {entry.filename!r} is compressed more than {limits.zip_max_ratio}:1 (a ZIP bomb)"
                )
        try:
            for entry in entries:
                with archive.open(entry) as member:
                    while member.read(_ZIP_READ_CHUNK):
                        pass
        except RuntimeError as exc:  # zipfile's way of saying an entry is encrypted
            raise EncryptedFile("DOCX is password-protected") from exc
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
            raise CorruptFile(f"Could not read DOCX: {short_reason(exc)}") from exc


def _render_docx(document) -> ExtractedText:
    from docx.oxml.ns import qn
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    # Resolving `paragraph.style` scans the style part on every call (seconds on a large handbook);
    # one lookup table makes heading detection cheap.
    heading_levels = _docx_heading_levels(document)
    paragraph_tag, table_tag = qn("w:p"), qn("w:tbl")
    sdt_tag, sdt_content_tag = qn("w:sdt"), qn("w:sdtContent")
    body = document.element.body
    blocks = Blocks()
    # Body children in document order interleave paragraphs and tables, so a table stays next to the
    # text that introduces it. Content controls (w:sdt) wrap ordinary paragraphs and tables.
    pending = list(reversed(body))
    while pending:
        element = pending.pop()
        if element.tag == paragraph_tag:
            _add_docx_paragraph(blocks, Paragraph(element, document), heading_levels)
        elif element.tag == table_tag:
            blocks.table(_docx_table_rows(Table(element, document)))
        elif element.tag == sdt_tag:
            content = element.find(sdt_content_tag)
            if content is not None:
                pending.extend(reversed(content))
    return blocks.join()


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


def _add_docx_paragraph(blocks: Blocks, paragraph, heading_levels: dict[str, int]) -> None:
    text = paragraph.text.strip()
    level = heading_levels.get(paragraph._p.style or "", 0)
    if level and text:
        blocks.heading(level, collapse(text), "#" * level + " " + collapse(text))
    else:
        blocks.paragraph(text)


def _docx_table_rows(table) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            # A merged cell is returned once per grid column it spans: its text once, its other columns empty.
            cells.append("" if previous is not None and cell._tc is previous else _render_docx_cell(cell))
            previous = cell._tc
        rows.append(cells)
    return rows


def _render_docx_table(table) -> str:
    """A nested table, inline in its cell: rows separated by ` ; `."""
    rows = (" | ".join(cell for cell in row if cell) for row in _docx_table_rows(table))
    return " ; ".join(row for row in rows if row)


def _render_docx_cell(cell) -> str:
    from docx.table import Table

    parts: list[str] = []
    for item in cell.iter_inner_content():
        if isinstance(item, Table):
            parts.append(_render_docx_table(item))
        else:
            parts.append(item.text)
    return collapse(" ".join(parts))
