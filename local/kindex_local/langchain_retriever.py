"""`KindexRetriever`: a LangChain retriever over any kindex deployment (extra `kindex[langchain]`, langchain-core only).

    from kindex_local.langchain_retriever import KindexRetriever

    retriever = KindexRetriever(url="https://...", api_key="...", collections=["handbook"], user="ann",
                                groups=["staff"], k=5)
    docs = retriever.invoke("How many days of leave?")          # or: await retriever.ainvoke(...)

    eu_only = KindexRetriever(..., filter={"region": "eu"})      # every query: filters.attributes
    docs = eu_only.invoke("leave", filter=F.gte("year", 2020))   # this query also (ANDed): a dict or a kindex.client.F

Each `Document` holds one retrieved chunk; its metadata carries what a citation needs: collection, document id,
chunk id, title, url, pages, score, the citation number, the `<CIT id />` tag and the query id that `POST
/v1/citations` renders footnotes for. The user and groups are the retriever's configuration (the application's
current user), as in every kindex query; the documents' access lists are applied for them inside the index. An
attribute filter narrows what is searched: the retriever's `filter` on every query, and `filter=` of one call ANDed
with it (so a chain can narrow the configured filter, never widen it)."""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, SecretStr, field_validator

from kindex.client import AsyncKindex, F, Filter, Kindex
from kindex.domain.citations import cite_tag
from kindex.domain.query import Expand, HybridWeights, QueryResponse


def _documents(answer: QueryResponse) -> list[Document]:
    documents = []
    for result in answer.results:
        pages = (
            []
            if result.page_start is None
            else list(range(result.page_start, (result.page_end or result.page_start) + 1))
        )
        documents.append(
            Document(
                page_content=result.content,
                id=result.chunk_id,
                metadata={
                    "collection": result.collection,
                    "document_id": result.document_id,
                    "chunk_id": result.chunk_id,
                    "title": result.title,
                    "url": result.url,
                    "pages": pages,
                    "section": result.section,
                    "start": result.start,
                    "end": result.end,
                    "score": result.score,
                    "citation": result.citation,
                    "cite_as": cite_tag(result.document_id),
                    "query_id": answer.query_id,
                },
            )
        )
    return documents


class KindexRetriever(BaseRetriever):
    """Retrieves chunks from kindex's `POST /v1/query` (hybrid, vector or keyword), with the collection gate and the
    rights check applied for `user` and `groups`. Sync and async, over the SDK (`kindex.client`); the deployment's
    errors raise the SDK's typed exceptions (`kindex.client.ApiError` and its subclasses: status, error, message)."""

    url: str
    api_key: SecretStr
    collections: list[str] = Field(min_length=1)
    k: int = Field(default=5, ge=1, le=100)
    mode: Literal["vector", "keyword", "hybrid"] = "hybrid"
    user: str | None = None
    groups: list[str] = Field(default_factory=list)
    timeout: float = 60.0
    # Ranking and context options of the query API (None: the API's defaults); checked as the API checks them.
    expand: Expand | None = None
    max_chunks_per_document: int | None = Field(default=None, ge=1, le=100)
    hybrid: HybridWeights | None = None
    filter: dict[str, Any] | None = Field(
        default=None,
        description="an attribute filter (filters.attributes) for every query: JSON or a kindex.client.Filter",
    )

    @field_validator("filter", mode="before")
    @classmethod
    def _checked_filter(cls, value: Any) -> Any:
        # Checked as the API checks it, so a bad filter fails when the retriever is built, not on the first query.
        return None if value is None else _filter(value).to_json()

    def _fields(self, filter: dict[str, Any] | Filter | None) -> dict[str, Any]:
        fields: dict[str, Any] = {"k": self.k, "mode": self.mode, "user": self.user, "groups": self.groups}
        for name in ("expand", "max_chunks_per_document", "hybrid"):
            value = getattr(self, name)
            if value is not None:
                fields[name] = value.model_dump() if hasattr(value, "model_dump") else value
        parts = [_filter(part) for part in (self.filter, filter) if part is not None]
        if parts:
            fields["filters"] = {"attributes": F.all_of(*parts).to_json()}
        return fields

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, filter: dict[str, Any] | Filter | None = None
    ) -> list[Document]:
        with Kindex(self.url, self.api_key.get_secret_value(), timeout=self.timeout) as client:
            return _documents(client.query_collections(self.collections, query, **self._fields(filter)))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        filter: dict[str, Any] | Filter | None = None,
    ) -> list[Document]:
        async with AsyncKindex(self.url, self.api_key.get_secret_value(), timeout=self.timeout) as client:
            return _documents(await client.query_collections(self.collections, query, **self._fields(filter)))


def _filter(value: Any) -> Filter:
    return value if isinstance(value, Filter) else F.parse(value)
