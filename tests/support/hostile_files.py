"""Hostile files, generated on demand (never committed): zip bombs, deep HTML, binaries named `.txt`, PDF bombs.

Each builder returns bytes; the big ones are written to memory once per call, so tests build them in `tmp_path`
or in the test itself and drop them afterwards.
"""

from __future__ import annotations

import io
import os
import sys
import zipfile
import zlib
from pathlib import Path

# "日本語" stands between punctuation, so that the keyword index (FTS5 unicode61, which splits CJK text only at
# punctuation and spaces) has it as a word of its own.
JAPANESE = "日本語。このテキストは検索できるはずです。東京の天気は晴れです。\n"

_DOCX_RELS = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    b'officeDocument" Target="word/document.xml"/></Relationships>'
)
_DOCX_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
    b'wordprocessingml.document.main+xml"/></Types>'
)
_DOCX_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
)
_DOCX_TAIL = b"</w:body></w:document>"
_DOCX_PARAGRAPH = b"<w:p><w:r><w:t>bomb paragraph text</w:t></w:r></w:p>"


def minimal_docx(paragraphs: list[str]) -> bytes:
    """A valid DOCX (the three parts Word needs) with one paragraph per string."""
    body = b"".join(b"<w:p><w:r><w:t>" + text.encode() + b"</w:t></w:r></w:p>" for text in paragraphs)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _DOCX_TYPES)
        archive.writestr("_rels/.rels", _DOCX_RELS)
        archive.writestr("word/document.xml", _DOCX_HEAD + body + _DOCX_TAIL)
    return buffer.getvalue()


def docx_bomb(uncompressed_bytes: int = 1 << 30) -> bytes:
    """A DOCX whose document.xml is `uncompressed_bytes` of paragraphs (about 1,000:1 compressed): the issue's
    "1.1 MB DOCX" is this with the default 1 GiB. Streamed into the archive, so building it costs no memory."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", _DOCX_TYPES)
        archive.writestr("_rels/.rels", _DOCX_RELS)
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(_DOCX_HEAD)
            block = _DOCX_PARAGRAPH * (1 << 14)
            written = 0
            while written < uncompressed_bytes:
                part.write(block)
                written += len(block)
            part.write(_DOCX_TAIL)
    return buffer.getvalue()


def docx_lying_about_its_size(real_bytes: int = 256 << 20, declared_bytes: int = 4096) -> bytes:
    """A DOCX whose central directory declares document.xml as `declared_bytes` while its deflate stream holds
    `real_bytes`: only a reader that bounds the real decompression survives it."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = _DOCX_PARAGRAPH * (1 << 14)
    pieces = [compressor.compress(_DOCX_HEAD)]
    written = 0
    while written < real_bytes:
        pieces.append(compressor.compress(block))
        written += len(block)
    pieces.append(compressor.compress(_DOCX_TAIL))
    pieces.append(compressor.flush())
    stream = b"".join(pieces)
    honest = io.BytesIO()
    with zipfile.ZipFile(honest, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _DOCX_TYPES)
        archive.writestr("_rels/.rels", _DOCX_RELS)
    # Append the lying entry by hand: local header, data, then a rebuilt central directory.
    existing = zipfile.ZipFile(io.BytesIO(honest.getvalue()))
    out = io.BytesIO()
    entries = []
    for info in existing.infolist():
        offset = out.tell()
        raw = existing.read(info.filename)
        data = zlib.compressobj(6, zlib.DEFLATED, -15)
        packed = data.compress(raw) + data.flush()
        entries.append((info.filename.encode(), zlib.crc32(raw), len(packed), len(raw), offset))
        out.write(_local_header(info.filename.encode(), zlib.crc32(raw), len(packed), len(raw)) + packed)
    offset = out.tell()
    name = b"word/document.xml"
    entries.append((name, 0, len(stream), declared_bytes, offset))
    out.write(_local_header(name, 0, len(stream), declared_bytes) + stream)
    directory_start = out.tell()
    for entry_name, crc, packed_size, size, entry_offset in entries:
        out.write(
            b"PK\x01\x02"
            + (20).to_bytes(2, "little")
            + (20).to_bytes(2, "little")
            + b"\x00\x00"
            + (8).to_bytes(2, "little")
            + b"\x00\x00\x00\x00"
            + crc.to_bytes(4, "little")
            + packed_size.to_bytes(4, "little")
            + size.to_bytes(4, "little")
            + len(entry_name).to_bytes(2, "little")
            + b"\x00" * 12
            + entry_offset.to_bytes(4, "little")
            + entry_name
        )
    directory_size = out.tell() - directory_start
    out.write(
        b"PK\x05\x06"
        + b"\x00\x00\x00\x00"
        + len(entries).to_bytes(2, "little") * 2
        + directory_size.to_bytes(4, "little")
        + directory_start.to_bytes(4, "little")
        + b"\x00\x00"
    )
    return out.getvalue()


def _local_header(name: bytes, crc: int, packed_size: int, size: int) -> bytes:
    return (
        b"PK\x03\x04"
        + (20).to_bytes(2, "little")
        + b"\x00\x00"
        + (8).to_bytes(2, "little")
        + b"\x00\x00\x00\x00"
        + crc.to_bytes(4, "little")
        + packed_size.to_bytes(4, "little")
        + size.to_bytes(4, "little")
        + len(name).to_bytes(2, "little")
        + b"\x00\x00"
        + name
    )


def docx_with_many_entries(entries: int) -> bytes:
    """A DOCX padded with `entries` tiny extra parts (a central directory that is expensive to walk)."""
    buffer = io.BytesIO(minimal_docx(["padded"]))
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_STORED) as archive:
        for number in range(entries):
            archive.writestr(f"customXml/item{number}.xml", b"<a/>")
    return buffer.getvalue()


def nested_html(depth: int = 2_000_000) -> bytes:
    """`depth` unclosed divs around one sentence: the issue's "11 MB nested HTML" with the default depth."""
    return b"<html><body>" + b"<div>" * depth + b"deep nested text" + b"</div>" * 10 + b"</body></html>"


def flat_html(elements: int) -> bytes:
    """`elements` sibling paragraphs: no depth at all, just many nodes."""
    return b"<html><body>" + b"<p>a</p>" * elements + b"</body></html>"


def random_bytes(size: int = 1 << 20, seed: int = 7) -> bytes:
    import random

    return random.Random(seed).randbytes(size)


def elf_binary(size: int = 1 << 20) -> bytes:
    """The first `size` bytes of this machine's Python interpreter (a real ELF executable), else a synthetic one."""
    try:
        data = Path(os.path.realpath(sys.executable)).read_bytes()[:size]
    except OSError:
        data = b""
    if not data.startswith(b"\x7fELF"):
        data = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + random_bytes(size - 16)
    return data


def text_pdf(*pages: str) -> bytes:
    """A small PDF with one line of text per page."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", None, b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        content = f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET".encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Resources << /Font << /F1 3 0 R >> >>"
            b" /Contents %d 0 R >>" % len(objects)
        )
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    return _pdf(objects)


def pdf_stream_bomb(pages: int = 20, decompressed_per_page: int = 64 << 20) -> bytes:
    """A PDF whose pages each carry their own Flate content stream of `decompressed_per_page` bytes of text
    operators (about 1,000:1 compressed)."""
    objects: list[bytes | None] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        None,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    operator = b"BT /F1 12 Tf 20 100 Td (bomb) Tj ET\n"
    kids = []
    for number in range(pages):
        compressor = zlib.compressobj(9)
        block = operator * (1 << 15)
        parts = [compressor.compress(b"%% page %d\n" % number)]
        written = 0
        while written < decompressed_per_page:
            piece = block[: decompressed_per_page - written]
            parts.append(compressor.compress(piece))
            written += len(piece)
        parts.append(compressor.flush())
        stream = b"".join(parts)
        objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Resources << /Font << /F1 3 0 R >> >>"
            b" /Contents %d 0 R >>" % len(objects)
        )
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    return _pdf(objects)


def _pdf(objects: list) -> bytes:
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()
