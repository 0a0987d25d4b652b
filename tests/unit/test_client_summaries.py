"""The SDK's document summaries without a server (httpx's MockTransport): the listing or one GET per document,
whichever takes fewer requests, the same in the sync and the async client, and a deployment from before the
summaries (pages of ids only) still answers through GETs."""

import asyncio
import json

import httpx
import pytest

from kindex.client import AsyncKindex, Kindex, calls
from kindex.domain.models import MAX_PAGE_SIZE, Document, DocumentStatus

pytestmark = pytest.mark.unit

BASE = "http://kindex.test"


class Deployment:
    """A collection `c` of documents answered as the API does (`with_summaries=False`: as it did before them)."""

    def __init__(self, count: int, *, with_summaries: bool = True, status: DocumentStatus = DocumentStatus.INDEXED):
        self.documents = {
            f"d{i:04d}": Document(
                id=f"d{i:04d}", collection="c", title=f"t{i}", status=status, source="tenants/x/secret-key"
            )
            for i in range(count)
        }
        self.with_summaries = with_summaries
        self.requests: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests.append(path)
        if path == "/v1/collections/c":
            return httpx.Response(
                200, json={"id": "c", "embedding_model": "hash:384", "document_count": len(self.documents)}
            )
        if path == "/v1/collections/c/documents":
            return httpx.Response(200, json=self._page(request.url.params))
        document = self.documents.get(path.rsplit("/", 1)[-1])
        if document is None:
            return httpx.Response(404, json={"error": "not_found", "message": "no such document"})
        return httpx.Response(200, content=document.model_dump_json())

    def _page(self, params) -> dict:
        ids = sorted(self.documents)
        after = json.loads(params["cursor"]) if "cursor" in params else None
        remaining = [i for i in ids if after is None or i > after]
        number = int(params.get("number", 100))
        page, more = remaining[:number], len(remaining) > number
        body = {"documents": page, "next_cursor": json.dumps(page[-1]) if more else None}
        if self.with_summaries:
            body["items"] = [
                json.loads(self.documents[i].model_dump_json(exclude={"source", "collection"})) for i in page
            ]
        return body


def sync_client(deployment: Deployment) -> Kindex:
    return Kindex(BASE, "kdx_test", http_client=httpx.Client(transport=httpx.MockTransport(deployment.handle)))


def async_client(deployment: Deployment) -> AsyncKindex:
    return AsyncKindex(
        BASE, "kdx_test", http_client=httpx.AsyncClient(transport=httpx.MockTransport(deployment.handle))
    )


def both(deployment: Deployment, method: str, *args, **kwargs):
    """The sync client's answer and the async client's, each from a fresh record of requests."""
    deployment.requests.clear()
    with sync_client(deployment) as client:
        synced = getattr(client, method)(*args, **kwargs)
        if not isinstance(synced, dict):  # an iterator: read it while the client is open
            synced = list(synced)
    sync_requests = list(deployment.requests)
    deployment.requests.clear()

    async def run():
        async with async_client(deployment) as client:
            result = getattr(client, method)(*args, **kwargs)
            if hasattr(result, "__aiter__"):
                return [item async for item in result]
            return await result

    awaited = asyncio.run(run())
    assert awaited == synced
    # the same requests (the async client's GETs run concurrently, so in any order)
    assert sorted(deployment.requests) == sorted(sync_requests)
    return awaited, sync_requests


def test_listing_is_cheaper_only_when_it_takes_fewer_requests():
    assert not calls.listing_is_cheaper(0, 0)
    assert calls.listing_is_cheaper(0, 1)  # an empty collection: one (empty) page answers everything
    assert not calls.listing_is_cheaper(1, 1)
    assert calls.listing_is_cheaper(MAX_PAGE_SIZE, 2)
    assert not calls.listing_is_cheaper(MAX_PAGE_SIZE + 1, 2)
    assert calls.listing_is_cheaper(10 * MAX_PAGE_SIZE, 11)


def test_summaries_come_from_the_pages_with_no_get_per_document():
    deployment = Deployment(250)
    summaries, requests = both(deployment, "iter_document_summaries", "c", page_size=100)
    assert [s.id for s in summaries] == sorted(deployment.documents)
    assert requests == ["/v1/collections/c/documents"] * 3


def test_a_deployment_from_before_the_summaries_is_read_by_get(monkeypatch):
    # Given a deployment whose pages hold ids only
    deployment = Deployment(5, with_summaries=False)
    # When iterating summaries / Then each document is read once, and the summaries are the same
    summaries, requests = both(deployment, "iter_document_summaries", "c", page_size=3)
    assert [(s.id, s.title) for s in summaries] == [(d.id, d.title) for d in deployment.documents.values()]
    assert requests.count("/v1/collections/c/documents") == 2 and len(requests) == 2 + 5


@pytest.mark.parametrize(
    "count, asked, expected_requests",
    [
        (2500, ["d0001", "d0002", "nope"], 1 + 3),  # three GETs beat three pages
        (2500, ["d0001", "d0002", "d0003", "nope"], 1 + 3),  # three pages beat four GETs
        (10, ["d0001", "nope"], 1 + 1),
    ],
)
def test_named_documents_are_read_in_the_fewest_requests(count, asked, expected_requests):
    found, requests = both(Deployment(count), "document_summaries", "c", asked)
    assert requests[0] == "/v1/collections/c" and len(requests) == expected_requests
    assert {d: s and s.id for d, s in found.items()} == {d: None if d == "nope" else d for d in asked}


def test_waiting_for_documents_returns_them_settled_and_times_out_on_pending_ones():
    settled, _ = both(
        Deployment(3, status=DocumentStatus.FAILED), "wait_for_documents", "c", ["d0000", "gone"], timeout=5
    )
    assert settled["d0000"].status is DocumentStatus.FAILED and settled["gone"] is None
    with sync_client(Deployment(3, status=DocumentStatus.PENDING)) as client:
        client._sleep = lambda seconds: None
        with pytest.raises(TimeoutError, match="1 documents are not indexed"):
            client.wait_for_documents("c", ["d0001"], timeout=0)
