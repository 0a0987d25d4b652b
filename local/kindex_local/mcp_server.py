"""`kindex mcp`: a Model Context Protocol server (the official MCP Python SDK) in front of one kindex deployment, for
one end user. Tools: `search` (retrieval with citations) and `cite` (an answer's `<CIT id />` tags to footnotes).

Who asks is configuration, never an argument: the deployment URL and key, the end user and their groups come from
flags or the environment when the server starts, and the tools' schemas have no field for them. Whatever a prompt
makes the model put into a tool call, kindex's collection gate and rights check run for the configured user (an
argument the schema does not declare is dropped before the tool runs)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from kindex.client import ApiError, AsyncKindex, KindexClientError
from kindex.domain.citations import cite_tag

INSTRUCTIONS = ("Search the organisation's knowledge index with `search`; cite what you use by writing "
                "the result's `cite_as` tag (such as <CIT document-id />) after the sentence it supports, then "
                "turn the answer's tags into footnotes with `cite` and the search's `query_id`.")
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

    @classmethod
    def from_args(cls, url: str, key: str, user: str | None, groups: str | None, collections: list[str] | None,
                  timeout: float = 60.0) -> "McpSettings":
        """The deployment as `kindex` resolves it (flags, profile, environment); then flags first, else
        KINDEX_MCP_USER, KINDEX_MCP_GROUPS (comma-separated) and KINDEX_MCP_COLLECTIONS (comma-separated: the
        collections `search` uses when the call names none)."""
        groups = groups if groups is not None else os.environ.get("KINDEX_MCP_GROUPS", "")
        listed = collections or [c for c in os.environ.get("KINDEX_MCP_COLLECTIONS", "").split(",") if c.strip()]
        return cls(url=url, key=key, user=user or os.environ.get("KINDEX_MCP_USER") or None,
                   groups=tuple(g.strip() for g in groups.split(",") if g.strip()),
                   collections=tuple(c.strip() for c in listed), timeout=timeout)


def _result(item) -> dict[str, Any]:
    return {"document_id": item.document_id, "collection": item.collection, "title": item.title, "url": item.url,
            "page_start": item.page_start, "page_end": item.page_end, "citation": item.citation,
            "cite_as": cite_tag(item.document_id), "score": item.score, "text": item.content}


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

    @server.tool(description="Search the knowledge index. Returns the most relevant passages the configured user may "
                             "see, each with its document, title, url, pages and the tag to cite it with.")
    async def search(
        query: Annotated[str, Field(min_length=1, max_length=8000, description="what to look for")],
        collections: Annotated[list[str] | None, Field(max_length=50, description=(
            "collections to search; omitted: the server's configured collections"))] = None,
        k: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="how many passages")] = 5,
        mode: Annotated[Literal["vector", "keyword", "hybrid"], Field(description="retrieval mode")] = "hybrid",
    ) -> dict[str, Any]:
        names = list(collections or settings.collections)
        if not names:
            raise ToolError("name the collections to search (this server has none configured)")
        answer = await call(client.query_collections(names, query, k=k, mode=mode, user=settings.user,
                                                     groups=list(settings.groups)))
        return {"query_id": answer.query_id, "results": [_result(r) for r in answer.results],
                "denied_collections": answer.denied_collections,
                "warnings": [w.model_dump(mode="json") for w in answer.warnings]}

    @server.tool(description="Turn an answer's <CIT document-id /> tags into numbered footnotes with a reference "
                             "list (markdown), for the documents a `search` returned (its query_id).")
    async def cite(
        text: Annotated[str, Field(max_length=200_000, description="the answer, with <CIT document-id /> tags")],
        query_id: Annotated[str, Field(min_length=1, max_length=200, description="`query_id` of the search")],
    ) -> dict[str, Any]:
        rendered = await call(client.render_citations(text, query_id=query_id))
        return {"markdown": rendered.markdown,
                "references": [reference.model_dump(mode="json") for reference in rendered.references]}

    return server


def run(settings: McpSettings, transport: str, host: str = "127.0.0.1", port: int = 8765) -> None:
    server = build_server(settings)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
