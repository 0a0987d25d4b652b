"""`KindexRetriever` (LangChain) against a real `kindex serve`: sync and async retrieval with citation metadata, the
user's rights applied, and the deployment's errors raised as the SDK's typed exceptions."""

import asyncio

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from kindex.client import NotFound, Unauthorized  # noqa: E402
from kindex_local.langchain_retriever import KindexRetriever  # noqa: E402
from tests.conftest import SHARED_DATA  # noqa: E402
from tests.support.waiting import wait_settled  # noqa: E402

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def collection(server):
    admin = server.session(server.admin_key)
    assert admin.put(server.url("/v1/collections/lc"), json={"query_groups": ["staff"],
                                                             "chunking_max_size": 800}).status_code == 201
    assert admin.put(server.url("/v1/collections/lc/documents/expenses"), json={
        "content": "Travel expenses are refunded within thirty days when the receipts are attached.",
        "title": "Expenses", "url": "https://example.com/expenses"}).ok
    import requests

    pdf = (SHARED_DATA / "docs" / "pdf" / "docling-multi_page.pdf").read_bytes()
    ticket = admin.post(server.url("/v1/collections/lc/documents/paper/upload"),
                        json={"filename": "paper.pdf", "size": len(pdf)}).json()
    assert requests.put(ticket["url"], data=pdf, headers=ticket["headers"]).status_code == 200
    assert wait_settled(admin, server.url("/v1/collections/lc"), ["expenses", "paper"]) == {
        "expenses": "indexed", "paper": "indexed"}
    return "lc"


def retriever(server, collection, **fields):
    fields.setdefault("groups", ["staff"])
    return KindexRetriever(url=server.base_url, api_key=server.create_key("default", "query"),
                           collections=[collection], **fields)


def test_invoke_returns_documents_with_citation_metadata(server, collection):
    # Given a retriever for a user of the staff group
    staff = retriever(server, collection, user="ann", k=3)
    assert isinstance(staff, BaseRetriever)
    # When it is invoked
    documents = staff.invoke("When are travel expenses refunded?")
    # Then the best document is the expenses policy, with everything a citation needs
    assert all(isinstance(d, Document) for d in documents) and 1 <= len(documents) <= 3
    first = documents[0]
    assert "thirty days" in first.page_content
    meta = first.metadata
    assert (meta["collection"], meta["document_id"], meta["title"], meta["url"]) == (
        collection, "expenses", "Expenses", "https://example.com/expenses")
    assert meta["citation"] == 1 and meta["cite_as"] == "<CIT expenses />" and meta["query_id"]
    assert meta["chunk_id"] == first.id and isinstance(meta["score"], float) and meta["pages"] == []
    # And the query id renders the answer's citations
    cited = server.session(server.admin_key).post(server.url("/v1/citations"), json={
        "text": "Within thirty days <CIT expenses />.", "query_id": meta["query_id"]}).json()
    assert "[^1]: [Expenses](https://example.com/expenses)" in cited["markdown"]


def test_ainvoke_returns_pdf_chunks_with_pages(server, collection):
    documents = asyncio.run(retriever(server, collection, k=5, mode="keyword").ainvoke("word processor typewriter"))
    pages = [d.metadata["pages"] for d in documents if d.metadata["document_id"] == "paper"]
    assert pages and all(p and p == list(range(p[0], p[-1] + 1)) and 1 <= p[0] <= 5 for p in pages)


def test_the_users_rights_apply_and_errors_are_raised(server, collection):
    # A user outside the collection's groups gets nothing (the collection is refused to them)
    assert retriever(server, collection, user="bob", groups=["sales"]).invoke("travel expenses") == []
    # A missing collection is the deployment's 404, raised as the SDK's typed error with its code
    with pytest.raises(NotFound) as raised:
        retriever(server, "no-such-collection").invoke("travel expenses")
    assert raised.value.status == 404 and raised.value.error == "not_found"
    with pytest.raises(Unauthorized) as raised:
        asyncio.run(KindexRetriever(url=server.base_url, api_key="wrong", collections=[collection]).ainvoke("x"))
    assert raised.value.status == 401
