"""`kindex mcp`: a Model Context Protocol server (the official MCP Python SDK) in front of one kindex deployment, for
one end user. Tools: `search` (retrieval with citations) and `cite` (an answer's `<CIT id />` tags to footnotes).

Who asks is configuration, never an argument: the deployment URL and key, the end user and their groups come from
flags or the environment when the server starts, and the tools' schemas have no field for them. Whatever a prompt
makes the model put into a tool call, kindex's collection gate, the documents' access lists and the rights check run
for the configured user (an argument the schema does not declare is dropped before the tool runs). The model may
narrow a search with an attribute filter (`filter`: the filter language of `filters.attributes`); a filter in the
server's configuration (`--filter`, KINDEX_MCP_FILTER) is ANDed with it, so the model can narrow it, never widen it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from kindex.client import ApiError, AsyncKindex, F, Filter, InvalidFilter, KindexClientError
from kindex.domain.citations import cite_tag
from kindex.domain.query import MAX_EXPAND

INSTRUCTIONS = (
    "Search the organisation's knowledge index with `search`; cite what you use by writing "
    "the result's `cite_as` tag (such as <CIT document-id />) after the sentence it supports, then "
    "turn the answer's tags into footnotes with `cite` and the search's `query_id`. To narrow a search "
    'by document attributes, pass `filter`, e.g. {"region": "eu", "year": {"$gte": 2020}}.'
)
FILTER_DESCRIPTION = (
    'optional: only documents whose attributes match, e.g. {"region": "eu", "year": {"$gte": 2020}}. '
    'Keys side by side are AND; also {"$and": [...]}, {"$or": [...]}; operators $eq $ne $gt $gte $lt $lte $in '
    "$nin $exists $contains (a list attribute holds the value) $starts_with. Which attributes exist is the "
    "deployment's: a key no document has matches nothing (except $ne, $nin, $exists: false)."
)
MAX_RESULTS = 50


@dataclass(frozen=True)
class McpSettings:
    """The server's fixed identity: which deployment, with which key, for which end user."""

    url: str
    key: str
    user: str | None = None
    groups: tuple[str, ...] = ()
    collections: tuple[str, ...] = field(default_factory=tuple)
    timeout: float = 60.0
    # Every search's attribute filter, ANDed with the one the model passes (None: none).
    filter: Filter | None = None

    @classmethod
    def from_args(
        cls,
        url: str,
        key: str,
        user: str | None,
        groups: str | None,
        collections: list[str] | None,
        timeout: float = 60.0,
        filter_json: str | None = None,
    ) -> "McpSettings":
        """The deployment as `kindex` resolves it (flags, profile, environment); then flags first, else
        KINDEX_MCP_USER, KINDEX_MCP_GROUPS (comma-separated), KINDEX_MCP_COLLECTIONS (comma-separated: the
        collections `search` uses when the call names none) and KINDEX_MCP_FILTER (a JSON attribute filter). A
        filter that is not valid raises InvalidFilter (ValueError) naming the place: the server does not start."""
        groups = groups if groups is not None else os.environ.get("KINDEX_MCP_GROUPS", "")
        listed = collections or [c for c in os.environ.get("KINDEX_MCP_COLLECTIONS", "").split(",") if c.strip()]
        filter_json = filter_json if filter_json is not None else os.environ.get("KINDEX_MCP_FILTER") or None
        return cls(
            url=url,
            key=key,
            user=user or os.environ.get("KINDEX_MCP_USER") or None,
            groups=tuple(g.strip() for g in groups.split(",") if g.strip()),
            collections=tuple(c.strip() for c in listed),
            timeout=timeout,
            filter=_configured_filter(filter_json),
        )


def _configured_filter(text: str | None) -> Filter | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidFilter(f"the configured filter is not JSON: {error}") from None
    return F.parse(value)


def search_filter(configured: Filter | None, given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The query's `filters` for a search: the model's attribute filter ANDed with the configured one (either may be
    absent). Only `attributes`: nothing the model passes reaches principals, document ids or anything else."""
    parts = [part for part in (configured, F.parse(given) if given is not None else None) if part is not None]
    return {"attributes": F.all_of(*parts).to_json()} if parts else None


def _result(item) -> dict[str, Any]:
    return {
        "document_id": item.document_id,
        "collection": item.collection,
        "title": item.title,
        "url": item.url,
        "page_start": item.page_start,
        "page_end": item.page_end,
        "citation": item.citation,
        "cite_as": cite_tag(item.document_id),
        "score": item.score,
        "section": item.section,
        "text": item.content,
    }


def build_server(settings: McpSettings, client: AsyncKindex | None = None):
    """The MCP server with its two tools, bound to `settings` (one SDK client for the server's life)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="kindex", instructions=INSTRUCTIONS)
    client = client or AsyncKindex(settings.url, settings.key, timeout=settings.timeout)

    async def call(send):
        try:
            return await send
        except ApiError as error:
            # The deployment's own answer (403 outside the collection's groups, 404 unknown collection, ...): the
            # model sees it as a tool error it can explain, never a crash of the server.
            raise ToolError(f"kindex refused: {error.status} {error.error}: {error.message}") from error
        except KindexClientError as error:
            raise ToolError(f"kindex could not be reached: {error}") from error

    @server.tool(
        description="Search the knowledge index. Returns the most relevant passages the configured user may "
        "see, each with its document, title, url, pages and the tag to cite it with."
    )
    async def search(
        query: Annotated[str, Field(min_length=1, max_length=8000, description="what to look for")],
        collections: Annotated[
            list[str] | None,
            Field(max_length=50, description=("collections to search; omitted: the server's configured collections")),
        ] = None,
        k: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="how many passages")] = 5,
        mode: Annotated[Literal["vector", "keyword", "hybrid"], Field(description="retrieval mode")] = "hybrid",
        filter: Annotated[dict[str, Any] | None, Field(description=FILTER_DESCRIPTION)] = None,
        context_before: Annotated[
            int,
            Field(ge=0, le=MAX_EXPAND, description="adjacent chunks of the same document to add before each passage"),
        ] = 0,
        context_after: Annotated[
            int,
            Field(ge=0, le=MAX_EXPAND, description="adjacent chunks of the same document to add after each passage"),
        ] = 0,
        max_per_document: Annotated[
            int | None, Field(ge=1, le=MAX_RESULTS, description="at most this many passages from one document")
        ] = None,
    ) -> dict[str, Any]:
        names = list(collections or settings.collections)
        if not names:
            raise ToolError("name the collections to search (this server has none configured)")
        try:
            filters = search_filter(settings.filter, filter)
        except InvalidFilter as error:  # the same message the API's 422 would give, without the round trip
            raise ToolError(f"invalid filter: {error}") from error
        extra: dict[str, Any] = {"filters": filters} if filters is not None else {}
        if context_before or context_after:
            extra["expand"] = {"before": context_before, "after": context_after}
        if max_per_document is not None:
            extra["max_chunks_per_document"] = max_per_document
        answer = await call(
            client.query_collections(
                names, query, k=k, mode=mode, user=settings.user, groups=list(settings.groups), **extra
            )
        )
        return {
            "query_id": answer.query_id,
            "results": [_result(r) for r in answer.results],
            "denied_collections": answer.denied_collections,
            "warnings": [w.model_dump(mode="json") for w in answer.warnings],
        }

    @server.tool(
        description="Turn an answer's <CIT document-id /> tags into numbered footnotes with a reference "
        "list (markdown), for the documents a `search` returned (its query_id)."
    )
    async def cite(
        text: Annotated[str, Field(max_length=200_000, description="the answer, with <CIT document-id /> tags")],
        query_id: Annotated[str, Field(min_length=1, max_length=200, description="`query_id` of the search")],
    ) -> dict[str, Any]:
        rendered = await call(client.render_citations(text, query_id=query_id))
        return {
            "markdown": rendered.markdown,
            "references": [reference.model_dump(mode="json") for reference in rendered.references],
        }

    return server


def run(settings: McpSettings, transport: str, host: str = "127.0.0.1", port: int = 8765) -> None:
    server = build_server(settings)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
