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
    assert (
        admin.put(
            server.url("/v1/collections/lc"), json={"query_groups": ["staff"], "chunking_max_size": 800}
        ).status_code
        == 201
    )
    assert admin.put(
        server.url("/v1/collections/lc/documents/expenses"),
        json={
            "content": "Travel expenses are refunded within thirty days when the receipts are attached.",
            "title": "Expenses",
            "url": "https://example.com/expenses",
        },
    ).ok
    import requests

    pdf = (SHARED_DATA / "docs" / "pdf" / "docling-multi_page.pdf").read_bytes()
    ticket = admin.post(
        server.url("/v1/collections/lc/documents/paper/upload"), json={"filename": "paper.pdf", "size": len(pdf)}
    ).json()
    assert requests.put(ticket["url"], data=pdf, headers=ticket["headers"]).status_code == 200
    assert wait_settled(admin, server.url("/v1/collections/lc"), ["expenses", "paper"]) == {
        "expenses": "indexed",
        "paper": "indexed",
    }
    return "lc"


def retriever(server, collection, **fields):
    fields.setdefault("groups", ["staff"])
    return KindexRetriever(
        url=server.base_url, api_key=server.create_key("default", "query"), collections=[collection], **fields
    )


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
        collection,
        "expenses",
        "Expenses",
        "https://example.com/expenses",
    )
    assert meta["citation"] == 1 and meta["cite_as"] == "<CIT expenses />" and meta["query_id"]
    assert meta["chunk_id"] == first.id and isinstance(meta["score"], float) and meta["pages"] == []
    # And the query id renders the answer's citations
    cited = (
        server.session(server.admin_key)
        .post(
            server.url("/v1/citations"),
            json={"text": "Within thirty days <CIT expenses />.", "query_id": meta["query_id"]},
        )
        .json()
    )
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


def test_a_retriever_filter_and_a_call_filter_narrow_the_search_together(server):
    from pydantic import ValidationError

    from kindex.client import F, InvalidFilter

    # Given documents told apart by their attributes
    admin = server.session(server.admin_key)
    assert admin.put(server.url("/v1/collections/lc-filtered"), json={"query_groups": ["staff"]}).status_code == 201
    for document, region, year in (("eu-2024", "eu", 2024), ("eu-2018", "eu", 2018), ("us-2024", "us", 2024)):
        assert admin.put(
            server.url(f"/v1/collections/lc-filtered/documents/{document}"),
            json={
                "content": f"Travel rules for the {region} office, issued in {year}.",
                "attributes": {"region": region, "year": year},
            },
        ).ok
    assert set(
        wait_settled(admin, server.url("/v1/collections/lc-filtered"), ["eu-2024", "eu-2018", "us-2024"]).values()
    ) == {"indexed"}

    def ids(documents):
        return sorted(d.metadata["document_id"] for d in documents)

    # When the retriever keeps to the EU and one call also asks for recent rules
    eu = retriever(server, "lc-filtered", k=10, mode="keyword", filter={"region": "eu"})
    assert ids(eu.invoke("travel rules office")) == ["eu-2018", "eu-2024"]
    assert ids(eu.invoke("travel rules office", filter=F.gte("year", 2020))) == ["eu-2024"]
    assert ids(asyncio.run(eu.ainvoke("travel rules office", filter={"year": {"$lt": 2020}}))) == ["eu-2018"]
    # Then a call filter can only narrow: asking for the US within the EU retriever finds nothing
    assert eu.invoke("travel rules office", filter={"region": "us"}) == []
    # And a filter the API would refuse fails when the retriever is built, or at the call, naming the place
    with pytest.raises(ValidationError, match=r"filter.year.\$gte: \$gte compares numbers"):
        retriever(server, "lc-filtered", filter={"year": {"$gte": "2020"}})
    with pytest.raises(InvalidFilter, match=r"filter.\$nor: unknown operator"):
        eu.invoke("travel", filter={"$nor": [{"region": "eu"}]})


def test_expand_and_max_chunks_per_document_pass_through_the_sdk_to_the_api(server, collection):
    # Given a keyword retrieval of the PDF's chunks, alone and with one neighbour on each side, one per document
    question = "word processor typewriter"
    alone = retriever(server, collection, k=5, mode="keyword").invoke(question)
    wider = retriever(
        server, collection, k=5, mode="keyword", expand={"before": 1, "after": 1}, max_chunks_per_document=1
    ).invoke(question)
    # Then each document gives one passage, and the PDF's passage spans at least its best chunk, with true offsets
    assert len({d.metadata["document_id"] for d in wider}) == len(wider)
    best = next(d for d in alone if d.metadata["document_id"] == "paper")
    passage = next(d for d in wider if d.metadata["document_id"] == "paper")
    assert best.page_content in passage.page_content and len(passage.page_content) > len(best.page_content)
    assert passage.metadata["start"] <= best.metadata["start"] and passage.metadata["end"] >= best.metadata["end"]
    assert passage.metadata["end"] - passage.metadata["start"] == len(passage.page_content)
    # And a bad option fails when the retriever is built, as the API would refuse it
    with pytest.raises(ValueError, match="before"):
        retriever(server, collection, expand={"before": 4})
