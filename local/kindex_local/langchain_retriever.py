"""`KindexRetriever`: a LangChain retriever over any kindex deployment (extra `kindex[langchain]`, langchain-core only).

    from kindex_local.langchain_retriever import KindexRetriever

    retriever = KindexRetriever(url="https://...", api_key="...", collections=["handbook"], user="ann",
                                groups=["staff"], k=5)
    docs = retriever.invoke("How many days of leave?")          # or: await retriever.ainvoke(...)

Each `Document` holds one retrieved chunk; its metadata carries what a citation needs: collection, document id,
chunk id, title, url, pages, score, the citation number, the `<CIT id />` tag and the query id that `POST
/v1/citations` renders footnotes for. The user and groups are the retriever's configuration (the application's
current user), as in every kindex query."""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, SecretStr

from kindex.client import AsyncKindex, Kindex
from kindex.domain.citations import cite_tag
from kindex.domain.query import QueryResponse


def _documents(answer: QueryResponse) -> list[Document]:
    documents = []
    for result in answer.results:
        pages = [] if result.page_start is None else \
            list(range(result.page_start, (result.page_end or result.page_start) + 1))
        documents.append(Document(page_content=result.content, id=result.chunk_id, metadata={
            "collection": result.collection, "document_id": result.document_id, "chunk_id": result.chunk_id,
            "title": result.title, "url": result.url, "pages": pages, "score": result.score,
            "citation": result.citation, "cite_as": cite_tag(result.document_id), "query_id": answer.query_id}))
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

    def _fields(self) -> dict[str, Any]:
        return {"k": self.k, "mode": self.mode, "user": self.user, "groups": self.groups}

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        with Kindex(self.url, self.api_key.get_secret_value(), timeout=self.timeout) as client:
            return _documents(client.query_collections(self.collections, query, **self._fields()))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        async with AsyncKindex(self.url, self.api_key.get_secret_value(), timeout=self.timeout) as client:
            return _documents(await client.query_collections(self.collections, query, **self._fields()))
