"""The content sniffer: a file whose first bytes name another format than the declared one is refused."""

from __future__ import annotations

from kindex.domain.errors import UnsupportedType
from kindex.text.extract.formats import APPLICATION_DOCX, APPLICATION_PDF, DESCRIPTIONS

# Leading bytes of formats that are never text, and what to call them in a failure reason. Only signatures
# that cannot start a text file (each holds a control or non-ASCII byte, except "%PDF-", which only a PDF
# starts with): the real gate for text is `decoding.decode_text`, which refuses any content that does not decode
# to text, signature or not; this table makes the reason say what the file is, and keeps a PDF or a ZIP from
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

# What each extractor expects to find, by the description `sniff` gives.
_EXPECTED_CONTENT = {APPLICATION_PDF: "a PDF document", APPLICATION_DOCX: "a ZIP archive"}


def sniff(data: bytes) -> str | None:
    """What the leading bytes say the file is, or None when they name no known binary format."""
    for signature, description in _SIGNATURES:
        if data.startswith(signature):
            return description
    return None


def check_signature(data: bytes, kind: str) -> None:
    """Refuse content whose magic bytes name another format than the one the name or mimetype declared.

    A PDF named `.txt` is refused rather than read as a PDF: the document's mimetype, its citations and its
    re-extraction all follow the declared type, so the name must be fixed at the source (decisions.md)."""
    found = sniff(data)
    if found is None or found == _EXPECTED_CONTENT.get(kind):
        return
    raise UnsupportedType(f"File content is {found}, not {DESCRIPTIONS[kind]}; upload it under its real type")
