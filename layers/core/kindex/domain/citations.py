"""Citations, as Open Chat Studio does them: `<CIT id />` tags -> `[^n]` footnotes in first-seen order, unknown ids
dropped, a reference list appended. Pure functions; HTML rendering lives in the service (it needs a library)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# `<CIT a />`, `<CIT a, b/>`, any whitespace before `/>`; ids are anything but whitespace, ',' and '/>'.
CIT_TAG = re.compile(r"([ \t]*)<CIT\s+([^<>]*?)\s*/>")


@dataclass(frozen=True, slots=True)
class CitedDocument:
    document_id: str
    title: str | None = None
    url: str | None = None
    collection: str | None = None
    pages: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Reference:
    n: int
    document_id: str
    title: str
    url: str | None
    collection: str | None
    pages: tuple[int, ...]


def escape_link_text(text: str) -> str:
    """Escape what could end a markdown link text or start markup inside it."""
    return re.sub(r"([\\\[\]`*_<>])", r"\\\1", " ".join(text.split()))


def escape_link_url(url: str) -> str:
    """Percent-encode what could end a markdown link destination (spaces, parentheses, angle brackets)."""
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C").replace(">", "%3E")


def _page_suffix(pages: tuple[int, ...]) -> str:
    if not pages:
        return ""
    unique = sorted(set(pages))
    return (", p. " if len(unique) == 1 else ", pp. ") + ", ".join(str(p) for p in unique)


def render_citations(text: str, documents: list[CitedDocument]) -> tuple[str, list[Reference]]:
    """Markdown with footnotes and the references it uses, numbered by first appearance in the text."""
    known = {d.document_id: d for d in documents}
    numbers: dict[str, int] = {}

    def replace(match: re.Match) -> str:
        ids = [part.strip() for part in match.group(2).split(",") if part.strip()]
        notes = []
        for doc_id in ids:
            if doc_id not in known:
                continue
            number = numbers.setdefault(doc_id, len(numbers) + 1)
            note = f"[^{number}]"
            if note not in notes:
                notes.append(note)
        if not notes:
            return ""  # a tag with no known id disappears together with the whitespace before it
        return "".join(notes)  # footnote marks attach to the word before them

    body = CIT_TAG.sub(replace, text)
    references = []
    for doc_id, number in numbers.items():
        doc = known[doc_id]
        references.append(Reference(n=number, document_id=doc_id, title=doc.title or doc_id, url=doc.url or None,
                                    collection=doc.collection, pages=doc.pages))
    if not references:
        return body, []
    lines = []
    for ref in references:
        label = escape_link_text(ref.title) + _page_suffix(ref.pages)
        target = f"[{label}]({escape_link_url(ref.url)})" if ref.url else label
        lines.append(f"[^{ref.n}]: {target}")
    return body.rstrip() + "\n\n" + "\n".join(lines) + "\n", references
