"""`POST /v1/citations`: an LLM answer with `<CIT id />` tags -> markdown footnotes, safe HTML, references."""

from __future__ import annotations

from functools import lru_cache

from kindex.domain.citations import CitedDocument, render_citations
from kindex.domain.errors import InvalidInput, NotFound
from kindex.domain.ports import QueryLog
from kindex.domain.query import CitationReference, CitationsRequest, CitationsResponse

ALLOWED_TAGS = {
    "p",
    "a",
    "sup",
    "section",
    "ol",
    "li",
    "hr",
    "div",
    "em",
    "strong",
    "code",
    "pre",
    "ul",
    "blockquote",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "br",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}


def render_html(markdown_text: str) -> str:
    """Markdown (with footnotes and tables) to HTML, then sanitized: LLM output is untrusted. Raw HTML in the
    answer is shown as text, never passed through (the sanitizer would drop it anyway)."""
    import nh3

    html = _markdown().render(markdown_text)
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes={
            "a": {"href", "title", "class", "id"},
            "sup": {"class"},
            "li": {"id", "class"},
            "section": {"class"},
            "ol": {"class"},
            "hr": {"class"},
        },
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
    )


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.footnote import footnote_plugin

    return MarkdownIt("commonmark", {"html": False}).enable("table").use(footnote_plugin)


class CitationService:
    def __init__(self, query_log: QueryLog):
        self.query_log = query_log

    def render(self, tenant: str, request: CitationsRequest) -> CitationsResponse:
        if request.documents is not None:
            documents = [
                CitedDocument(
                    document_id=d.document_id, title=d.title, url=d.url, collection=d.collection, pages=tuple(d.pages)
                )
                for d in request.documents
            ]
        elif request.query_id:
            logged = self.query_log.get_query(tenant, request.query_id)
            if logged is None:
                raise NotFound("query_id is unknown or expired")
            documents = [
                CitedDocument(
                    document_id=d["document_id"],
                    title=d.get("title"),
                    url=d.get("url"),
                    collection=d.get("collection"),
                    pages=tuple(d.get("pages") or ()),
                )
                for d in logged
            ]
        else:
            raise InvalidInput("give either documents or query_id")
        markdown_text, references = render_citations(request.text, documents)
        return CitationsResponse(
            markdown=markdown_text,
            html=render_html(markdown_text),
            references=[
                CitationReference(
                    n=r.n,
                    document_id=r.document_id,
                    title=r.title,
                    url=r.url,
                    collection=r.collection,
                    pages=list(r.pages),
                )
                for r in references
            ],
        )
