"""Citations, as Open Chat Studio does them: `<CIT id />` tags -> `[^n]` footnotes in first-seen order, unknown ids
dropped, a reference list appended. Pure functions; HTML rendering lives in the service (it needs a library).

Every id an API accepts can be cited: ids never hold '/', so `/>` always ends a tag. A tag lists ids separated by
commas, each bare (`<CIT hr-policy />`, `<CIT Team Handbook />`) or quoted with `&`, `<`, `>` and `"` written as
XML entities (`<CIT "a&gt;b", "x, y" />`). `cite_tag` writes the form to copy; the query's context shows it."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from kindex.domain.models import is_safe_url, normalize_id

# `<CIT a />`, `<CIT a, "b" />`, any whitespace before `/>`. A quoted id holds no '"', '/', '<' or '>' (cite_form
# writes those as entities), a bare one no '"', '/', '<' or '>'; so a tag cannot run on past the `/>` of its own,
# nor past the next '<'. Possessive quantifiers and no leading whitespace group: nothing backtracks, so a hostile
# answer (200,000 spaces after `<CIT`) costs one pass, not the minutes the ambiguous `\s+...*?\s*` pattern took.
CIT_TAG = re.compile(r'<CIT\s++((?:"[^"/<>]*+"|[^"/<>])*+)/>')
_TAG_ITEM = re.compile(r'"([^"]*)"|([^,"]+)')
# An id that reads back as itself bare: nothing a tag or a list uses, no whitespace at either end.
_BARE_ID = re.compile(r'[^"<>&,/]+')


def cite_form(document_id: str) -> str:
    """How `document_id` is written inside a `<CIT />` tag so that `render_citations` reads it back exactly."""
    if _BARE_ID.fullmatch(document_id) and document_id == document_id.strip():
        return document_id
    escaped = document_id.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return f'"{escaped}"'


def cite_tag(*document_ids: str) -> str:
    """The tag citing these documents, e.g. `<CIT hr-policy />` or `<CIT a, "b&gt;c" />`."""
    return "<CIT " + ", ".join(cite_form(d) for d in document_ids) + " />"


def parse_tag_ids(body: str) -> list[str]:
    """The ids listed in a tag's body (between `<CIT` and `/>`), in order."""
    ids = []
    for match in _TAG_ITEM.finditer(body):
        quoted, bare = match.group(1), match.group(2)
        value = html.unescape(quoted) if quoted is not None else bare.strip()
        if value:
            ids.append(value)
    return ids


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
    """Markdown with footnotes and the references it uses, numbered by first appearance in the text. An id is
    matched as written, else in NFC form (the form ids are stored in). A reference links only to a URL a browser
    may follow safely (http(s) or relative): any other is shown as no link, whoever supplied it."""
    known = {d.document_id: d for d in documents}
    normalized = {normalize_id(d.document_id): d for d in reversed(documents)}
    numbers: dict[str, int] = {}

    def footnotes(tag_body: str) -> str:
        notes = []
        for doc_id in parse_tag_ids(tag_body):
            doc = known.get(doc_id) or normalized.get(normalize_id(doc_id))
            if doc is None:
                continue
            number = numbers.setdefault(doc.document_id, len(numbers) + 1)
            note = f"[^{number}]"
            if note not in notes:
                notes.append(note)
        return "".join(notes)

    pieces: list[str] = []
    position = 0
    for match in CIT_TAG.finditer(text):
        before = text[position : match.start()]
        # footnote marks attach to the word before them; a tag with no known id disappears with its spaces
        pieces.append(before.rstrip(" \t") + footnotes(match.group(1)))
        position = match.end()
    pieces.append(text[position:])
    body = "".join(pieces)
    references = []
    for doc_id, number in numbers.items():
        doc = known[doc_id]
        url = doc.url if doc.url and is_safe_url(doc.url) else None
        references.append(
            Reference(
                n=number,
                document_id=doc_id,
                title=doc.title or doc_id,
                url=url,
                collection=doc.collection,
                pages=doc.pages,
            )
        )
    if not references:
        return body, []
    lines = []
    for ref in references:
        label = escape_link_text(ref.title) + _page_suffix(ref.pages)
        target = f"[{label}]({escape_link_url(ref.url)})" if ref.url else label
        lines.append(f"[^{ref.n}]: {target}")
    return body.rstrip() + "\n\n" + "\n".join(lines) + "\n", references
