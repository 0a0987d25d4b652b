"""Which format a file is read as: its declared mimetype, else its filename extension."""

from __future__ import annotations

from pathlib import PurePosixPath

from kindex.domain.errors import UnsupportedType

TEXT_PLAIN = "text/plain"
TEXT_MARKDOWN = "text/markdown"
TEXT_HTML = "text/html"
APPLICATION_PDF = "application/pdf"
APPLICATION_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

SUPPORTED_MIMETYPES: frozenset[str] = frozenset(
    {TEXT_PLAIN, TEXT_MARKDOWN, TEXT_HTML, APPLICATION_PDF, APPLICATION_DOCX}
)

#: What each format is called in a failure reason.
DESCRIPTIONS = {
    TEXT_PLAIN: "plain text",
    TEXT_MARKDOWN: "Markdown text",
    TEXT_HTML: "HTML",
    APPLICATION_PDF: "a PDF document",
    APPLICATION_DOCX: "a DOCX document",
}

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


def guess_mimetype(filename: str | None) -> str | None:
    """The canonical mimetype for a supported filename extension (case-insensitive), else None."""
    if not filename:
        return None
    return _EXTENSIONS.get(PurePosixPath(filename.replace("\\", "/")).suffix.lower())


def resolve_mimetype(mimetype: str | None, filename: str | None) -> str:
    """The supported mimetype a file is read as, or `UnsupportedType`. A declared type wins over the extension,
    except a generic one (`application/octet-stream`)."""
    declared = (mimetype or "").split(";", 1)[0].strip().lower()
    if declared and declared not in _GENERIC_MIMETYPES:
        declared = _MIMETYPE_ALIASES.get(declared, declared)
        if declared in SUPPORTED_MIMETYPES:
            return declared
        if declared.startswith("text/"):
            # RFC 2046 4.1.4: an unrecognised subtype of text is read as text/plain (text/csv, text/x-log, ...);
            # the content is still checked to be text, so bytes that are not fail as before.
            return TEXT_PLAIN
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
