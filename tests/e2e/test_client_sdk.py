"""The SDK (`kindex.client`) against a real `kindex serve`: every route, typed exceptions, pagination, uploads,
the async client, and two tenants with the same ids."""

import asyncio

import httpx
import pytest

from kindex.client import AsyncKindex, Conflict, Forbidden, InvalidInput, Kindex, NotFound, Unauthorized
from kindex.client.models import DocumentStatus
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.e2e

HOSTILE_ID = "Über ?#%2F & ..x"


@pytest.fixture(scope="module")
def admin(server):
    with Kindex(server.base_url, server.admin_key) as client:
        yield client


def test_collections_documents_chunks_query_citations_and_reindex_through_the_sdk(admin):
    # Given a collection with one text document and one real PDF, under ids that need encoding
    admin.put_collection(HOSTILE_ID, title="Handbook", query_groups="staff,hr")
    created = admin.put_document(HOSTILE_ID, HOSTILE_ID, title="Leave", content="Staff get 25 days of leave.")
    assert created.status is DocumentStatus.PENDING and created.id == HOSTILE_ID
    pdf = SHARED_DATA / "docs/pdf/docling-multi_page.pdf"
    ticket_document = admin.upload_file(HOSTILE_ID, "paper", pdf)
    assert ticket_document.id == "paper"
    # When both are indexed
    assert admin.wait_for_document(HOSTILE_ID, HOSTILE_ID, timeout=60).status is DocumentStatus.INDEXED
    paper = admin.wait_for_document(HOSTILE_ID, "paper", timeout=120)
    # Then every read route answers typed models
    assert paper.status is DocumentStatus.INDEXED and paper.content_length == pdf.stat().st_size
    assert admin.get_collection(HOSTILE_ID).document_count == 2
    assert HOSTILE_ID in admin.list_collections(number=1000).collections
    assert sorted(admin.iter_documents(HOSTILE_ID)) == sorted([HOSTILE_ID, "paper"])
    assert admin.get_document(HOSTILE_ID, HOSTILE_ID).content == "Staff get 25 days of leave."
    chunks = list(admin.iter_chunks(HOSTILE_ID, "paper", page_size=2))
    assert [c.index for c in chunks] == list(range(paper.chunk_count)) and chunks[0].page_start == 1
    answer = admin.query(HOSTILE_ID, "How many days of leave?", groups=["staff"], k=3, mode="keyword")
    assert answer.results[0].document_id == HOSTILE_ID and answer.results[0].citation == 1
    admin.put_collection("closed", query_groups=["board"])
    several = admin.query_collections([HOSTILE_ID, "closed"], "leave", groups=["staff"])
    assert several.results and several.denied_collections == ["closed"]
    cited = admin.render_citations(f"Twenty-five <CIT {HOSTILE_ID} />.", query_id=answer.query_id)
    assert "[^1]" in cited.markdown and cited.references[0].document_id == HOSTILE_ID
    job = admin.start_reindex(HOSTILE_ID, clean=False)
    assert admin.wait_for_job(job.id, timeout=120).status == "completed"
    assert admin.rotate_rights_secret().header == "X-Kindex-Signature"
    # And deletes go through
    admin.delete_document(HOSTILE_ID, HOSTILE_ID)
    with pytest.raises(NotFound):
        admin.get_document(HOSTILE_ID, HOSTILE_ID)
    deleting = admin.delete_collection(HOSTILE_ID)
    assert (deleting.kind, deleting.collection) == ("delete", HOSTILE_ID)
    with pytest.raises(NotFound) as raised:
        admin.get_collection(HOSTILE_ID)
    assert raised.value.status == 404 and raised.value.error == "not_found" and HOSTILE_ID in raised.value.message
    assert admin.wait_for_job(deleting.id, timeout=120).status == "completed"


def test_the_served_openapi_document_has_no_route_without_a_client_method(server):
    import inspect

    from kindex.client import calls

    document = httpx.get(server.url("/v1/openapi.json"), timeout=30).json()
    served = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    samples = {
        "collection": "c",
        "document": "d",
        "job": "j",
        "filename": "f",
        "size": 1,
        "request": "q",
        "collections": ["c"],
        "text": "t",
        "batch": {"format_version": 1, "embedding_model": "hash:384", "dimensions": 384},
    }
    covered = set()
    for builder in calls.BUILDERS:
        required = [
            p.name
            for p in inspect.signature(builder).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        call = builder(*[samples[name] for name in required])
        covered.add((call.method, call.route))
        assert hasattr(Kindex, builder.__name__) and hasattr(AsyncKindex, builder.__name__)
    assert served == covered


def test_failures_raise_typed_exceptions_with_the_apis_code_and_message(server, admin):
    admin.put_collection("typed", query_groups=["staff"])
    with Kindex(server.base_url, "kdx_not-a-key") as stranger, pytest.raises(Unauthorized) as raised:
        stranger.list_collections()
    assert raised.value.status == 401
    with Kindex(server.base_url, server.create_key("default", "query")) as query_only:
        with pytest.raises(Forbidden):
            query_only.list_collections()
        with pytest.raises(Forbidden):  # the end user is not in the collection's groups
            query_only.query("typed", "anything", groups=["outsiders"])
    with pytest.raises(InvalidInput) as raised:  # the server's rule: no '/' in ids
        admin.put_document("typed", "a/b", content="x")
    assert "'/'" in raised.value.message
    with pytest.raises(Conflict):  # external rights checks need the tenant's signing secret first
        with Kindex(server.base_url, server.create_key("fresh-tenant", "admin")) as fresh:
            fresh.put_collection(
                "x",
                rights_check_method="external",
                rights_check_method_configuration={"url": "http://127.0.0.1:9/check"},
            )


def test_pages_are_followed_to_the_end_in_id_order(server, admin):
    admin.put_collection("paged")
    ids = [f"doc-{n:03d}" for n in range(23)]
    for doc_id in ids:
        admin.put_document("paged", doc_id, content=f"text {doc_id}")
    asked = []
    counted = httpx.Client(event_hooks={"request": [lambda request: asked.append(request.url.params)]})
    with Kindex(server.base_url, server.admin_key, http_client=counted) as client:
        assert list(client.iter_documents("paged", page_size=5)) == ids
    assert len(asked) == 5 and all(params["number"] == "5" for params in asked)  # 5+5+5+5+3, one request each
    assert list(admin.iter_documents("paged", page_size=1000)) == ids
    first = admin.list_documents("paged", number=5)
    assert first.documents == ids[:5] and first.next_cursor
    second = admin.list_documents("paged", cursor=first.next_cursor, number=5)
    assert second.documents == ids[5:10] and second.next_cursor


def test_two_tenants_with_the_same_ids_never_see_each_other(server, admin):
    admin.put_collection("shared-name")
    admin.put_document("shared-name", "same", content="tenant default's secret text")
    with Kindex(server.base_url, server.create_key("other-tenant", "admin")) as other:
        with pytest.raises(NotFound):
            other.get_document("shared-name", "same")
        other.put_collection("shared-name")
        other.put_document("shared-name", "same", content="the other tenant's text")
        assert other.get_document("shared-name", "same").content == "the other tenant's text"
        assert list(other.iter_documents("shared-name")) == ["same"]
    assert admin.get_document("shared-name", "same").content == "tenant default's secret text"


def test_the_async_client_does_the_same_work(server):
    async def scenario():
        async with AsyncKindex(server.base_url, server.admin_key) as client:
            await client.put_collection("async", query_groups=["staff"])
            await client.upload_file(
                "async", "notes", b"# Notes\n\nThe lighthouse keeper counts nine gulls.\n", filename="notes.md"
            )
            await asyncio.gather(*(client.put_document("async", f"n{i}", content=f"note {i}") for i in range(6)))
            indexed = await client.wait_for_document("async", "notes", timeout=60)
            ids = [doc_id async for doc_id in client.iter_documents("async", page_size=2)]
            chunks = [chunk async for chunk in client.iter_chunks("async", "notes")]
            answer = await client.query("async", "How many gulls?", groups=["staff"], mode="keyword")
            with pytest.raises(NotFound):
                await client.get_job("no-such-job")
            deleted = await client.delete_collection("async", wait=True, timeout=120)
            assert (deleted.kind, deleted.status) == ("delete", "completed")
            return indexed, ids, chunks, answer

    indexed, ids, chunks, answer = asyncio.run(scenario())
    assert indexed.status is DocumentStatus.INDEXED and indexed.mimetype == "text/markdown"
    assert ids == ["n0", "n1", "n2", "n3", "n4", "n5", "notes"]
    assert "nine gulls" in chunks[0].text
    assert answer.results[0].document_id == "notes"
