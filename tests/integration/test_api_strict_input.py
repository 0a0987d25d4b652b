"""Strict input and bounded pages at the Lambda handlers, with API Gateway events from tests/events/: hostile
bodies and query strings get a 4xx naming the field (never a 5xx), and no list answer can outgrow 5 MB."""

import copy
import json

import pytest

from functions import api, query
from kindex.domain.models import (
    MAX_CHUNK_SIZE,
    MAX_PAGE_SIZE,
    ChunkingMethod,
    Collection,
    Document,
    DocumentStatus,
)
from kindex.domain.types import StoredChunk
from tests.conftest import load_event

pytestmark = pytest.mark.integration

RESPONSE_LIMIT = 5 * 1024 * 1024


class Context:
    function_name = "kindex-api"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:kindex-api"
    aws_request_id = "req-1"


def call(handler, event) -> tuple[int, dict | None, int]:
    response = handler(event, Context())
    body = response.get("body") or ""
    return response["statusCode"], json.loads(body) if body else None, len(body.encode("utf-8"))


def put_collection(body: str) -> dict:
    event = load_event("api_put_collection.json")
    event["body"] = body
    return event


def with_query(event: dict, **params: str) -> dict:
    event = copy.deepcopy(event)
    event["queryStringParameters"] = dict(params)
    event["multiValueQueryStringParameters"] = {name: [value] for name, value in params.items()}
    return event


def assert_refused(status: int, body: dict, expected_status: int, field: str) -> None:
    assert status == expected_status, body
    assert set(body) == {"error", "message"}
    assert body["message"].startswith(f"{field}:") or f" {field}" in body["message"], body["message"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ('{"title": ' + "[" * 10_000 + "]" * 10_000 + "}", 400, "title"),
        ("[" * 10_000 + "]" * 10_000, 400, "request body"),
        ('{"title": "a", "title": "b"}', 422, "title"),
        ('{"chunking_max_size": NaN}', 422, "chunking_max_size"),
        ('{"chunking_max_size": Infinity}', 422, "chunking_max_size"),
        (
            '{"rights_check_method_configuration": {"url": "https://x.example", "timeout": -Infinity}}',
            422,
            "rights_check_method_configuration.timeout",
        ),
        ('{"chunking_max_size": ' + "9" * 4000 + "}", 422, "chunking_max_size"),
        ('{"chunking_max_size": 10000000000}', 422, "chunking_max_size"),
        ('{"chunking_max_size": "500"}', 422, "chunking_max_size"),
        ('{"chunking_max_size": 500.0}', 422, "chunking_max_size"),
        ('{"chunking_overlap_offset": true}', 422, "chunking_overlap_offset"),
        ('{"allow_guests": "yes"}', 422, "allow_guests"),
        ('{"ocr": "maybe"}', 422, "ocr"),
        ('{"ocr": null}', 422, "ocr"),
        ('{"ocr": true}', 422, "ocr"),
        ('{"embedding_model": "local:foo"}', 422, "embedding_model"),
        ('{"embedding_model": "hash:4"}', 422, "embedding_model"),
        ('{"title": "a\\ud800"}', 422, "title"),
        ('{"document_spaces": ' + json.dumps(["s"] * 1001) + "}", 422, "document_spaces"),
        # a record that could not be one DynamoDB item (400 KB) is refused as input, not failed in the store
        ('{"query_groups": ' + json.dumps(["g" * 255] * 600) + "}", 422, "query_groups"),
        (
            '{"rights_check_method_configuration": {"note": "' + "é" * 100_000 + '"}}',
            422,
            "rights_check_method_configuration",
        ),
    ],
)
def test_hostile_collection_bodies_get_4xx_naming_the_field_and_store_nothing(local_container, body, status, field):
    # When a hostile PUT /v1/collections/{c} is handled
    got_status, got, _ = call(api.handler, put_collection(body))
    # Then it is refused with our error body naming the field, and no collection exists
    assert_refused(got_status, got, status, field)
    assert local_container.adapters.metadata.get_collection("acme", "My Collection") is None


def test_the_deepest_accepted_body_is_safe_for_the_resolver_too(local_container):
    # Given a body at the deepest nesting precheck lets through (the resolver parses it again with json.loads)
    body = '{"title": ' + "[" * 63 + "]" * 63 + "}"
    # When handled / Then the resolver's own validation answers, naming the field
    status, got, _ = call(api.handler, put_collection(body))
    assert_refused(status, got, 422, "title")


def test_a_known_model_is_saved_in_its_canonical_form(local_container):
    status, body, _ = call(api.handler, put_collection('{"embedding_model": "hash:0256"}'))
    assert status == 201 and body["embedding_model"] == "hash:256"
    assert local_container.adapters.metadata.get_collection("acme", "My Collection").embedding_model == "hash:256"


@pytest.mark.parametrize(
    ("k", "field"),
    [
        ('"5"', "k"),
        ("true", "k"),
        ("5.0", "k"),
        ("0", "k"),
        ("101", "k"),
        ("NaN", "k"),
        ("1e999", "k"),
        ("9" * 400, "k"),
    ],
)
def test_query_k_must_be_a_json_integer_in_bounds(local_container, k, field):
    # Given a collection anyone may query
    assert call(api.handler, put_collection('{"allow_guests": true}'))[0] == 201
    event = load_event("api_query_collection.json")
    event["body"] = '{"query": "handbook", "k": ' + k + "}"
    # When the query function handles it / Then it is refused naming k
    status, body, _ = call(query.handler, event)
    assert_refused(status, body, 422, field)


def test_query_with_a_json_integer_k_is_answered(local_container):
    assert call(api.handler, put_collection('{"allow_guests": true}'))[0] == 201
    status, body, _ = call(query.handler, load_event("api_query_collection.json"))
    assert status == 200 and body["results"] == []


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ('"expand": {"before": 4}', "expand.before"),
        ('"expand": {"after": -1}', "expand.after"),
        ('"expand": {"after": "2"}', "expand.after"),
        ('"expand": {"after": 1.0}', "expand.after"),
        ('"expand": {"around": 1}', "expand.around"),
        ('"expand": 2', "expand"),
        ('"max_chunks_per_document": 0', "max_chunks_per_document"),
        ('"max_chunks_per_document": 101', "max_chunks_per_document"),
        ('"max_chunks_per_document": true', "max_chunks_per_document"),
        ('"hybrid": {"vector_weight": -0.5}', "hybrid.vector_weight"),
        ('"hybrid": {"keyword_weight": "1"}', "hybrid.keyword_weight"),
        ('"hybrid": {"keyword_weight": 1e999}', "hybrid.keyword_weight"),
        ('"hybrid": {"keyword_weight": 101}', "hybrid.keyword_weight"),
        ('"hybrid": {"vector_weight": 0, "keyword_weight": 0}', "hybrid"),
        ('"hybrid": {"rrf_k": 60}', "hybrid.rrf_k"),
    ],
)
def test_query_ranking_options_out_of_bounds_are_refused_naming_the_field(local_container, options, field):
    # Given a collection anyone may query
    assert call(api.handler, put_collection('{"allow_guests": true}'))[0] == 201
    event = load_event("api_query_collection.json")
    event["body"] = '{"query": "handbook", ' + options + "}"
    # When the query function handles it / Then it is a 422 naming the option
    status, body, _ = call(query.handler, event)
    assert_refused(status, body, 422, field)


def test_query_ranking_options_in_bounds_are_answered(local_container):
    assert call(api.handler, put_collection('{"allow_guests": true}'))[0] == 201
    event = load_event("api_query_collection.json")
    event["body"] = json.dumps(
        {
            "query": "handbook",
            "expand": {"before": 3, "after": 0},
            "max_chunks_per_document": 1,
            "hybrid": {"vector_weight": 0, "keyword_weight": 2.5},
        }
    )
    status, body, _ = call(query.handler, event)
    assert status == 200 and body["results"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"start": str(2**63)}, "start"),
        ({"number": str(2**63)}, "number"),
        ({"start": "9" * 5000}, "start"),
        ({"number": str(MAX_PAGE_SIZE + 1)}, "number"),
        ({"number": "0"}, "number"),
        ({"number": "-2"}, "number"),
        ({"start": "1000000001"}, "start"),
        ({"cursor": "x" * 10_000}, "cursor"),
    ],
)
def test_paging_parameters_out_of_bounds_get_422_naming_the_parameter(local_container, params, field):
    assert call(api.handler, put_collection("{}"))[0] == 201
    for name in ("api_list_documents.json", "api_list_chunks.json"):
        status, body, _ = call(api.handler, with_query(load_event(name), **params))
        assert_refused(status, body, 422, field)


def store_chunks(container, count: int, text_of) -> list[StoredChunk]:
    """A document d1 of `count` chunks written straight to the chunk store (ingest is not what is tested)."""
    event = load_event("api_put_collection.json")
    event["path"] = "/v1/collections/My%20Collection/documents/d1"
    event["body"] = '{"content": "x"}'
    assert call(api.handler, put_collection("{}"))[0] == 201 and call(api.handler, event)[0] == 201
    chunks = [
        StoredChunk(
            chunk_id=f"c{i:05d}", collection="My Collection", document_id="d1", index=i, start=0, end=1, text=text_of(i)
        )
        for i in range(count)
    ]
    for first in range(0, count, 100):
        container.adapters.chunks.put_chunks("acme", chunks[first : first + 100])
    return chunks


def walk_chunk_pages(**params: str) -> tuple[list[str], list[int]]:
    """Every chunk id over every page, and the size of each answer."""
    seen, sizes, cursor = [], [], None
    while True:
        page_params = {**params, **({"cursor": cursor} if cursor else {})}
        status, body, size = call(api.handler, with_query(load_event("api_list_chunks.json"), **page_params))
        assert status == 200, body
        seen += [chunk["chunk_id"] for chunk in body["chunks"]]
        sizes.append(size)
        cursor = body["next_cursor"]
        if not cursor:
            return seen, sizes


def test_chunks_are_paged_by_default_and_cursor_paging_walks_each_chunk_once(local_container):
    # Given a document of 250 chunks
    chunks = store_chunks(local_container, 250, lambda i: f"chunk {i}")
    # When listing without paging parameters
    status, body, _ = call(api.handler, with_query(load_event("api_list_chunks.json")))
    # Then the first 100 come back, in index order, with a cursor
    assert status == 200 and [c["index"] for c in body["chunks"]] == list(range(100)) and body["next_cursor"]
    # And following cursors walks every chunk exactly once, in order; start/number pages as XWiki does
    assert walk_chunk_pages(number="30")[0] == [c.chunk_id for c in chunks]
    status, body, _ = call(api.handler, with_query(load_event("api_list_chunks.json"), start="240", number="-1"))
    assert [c["index"] for c in body["chunks"]] == list(range(240, 250)) and body["next_cursor"] is None


def test_the_largest_chunk_page_of_the_largest_chunks_answers_under_5_mb(local_container):
    # Given chunks of the largest maxChars size, in the costliest characters to serialise (astral: 12 bytes each
    # as \\ud83d\\ude00 escapes, so 1.2 MB per chunk)
    largest = MAX_CHUNK_SIZE[ChunkingMethod.MAX_CHARS]
    chunks = store_chunks(local_container, 12, lambda i: chr(0x1F600 + i) * largest)
    # When walking them with the largest page size
    seen, sizes = walk_chunk_pages(number=str(MAX_PAGE_SIZE))
    # Then every answer stays under 5 MB, and nothing is lost or repeated
    assert seen == [c.chunk_id for c in chunks]
    assert max(sizes) < RESPONSE_LIMIT and len(sizes) > 1


def test_a_full_page_of_default_size_chunks_answers_in_one_page_under_5_mb(local_container):
    # Given 1,000 chunks of the default maxChars size (2,000 characters)
    store_chunks(local_container, MAX_PAGE_SIZE, lambda i: f"{i:04d}" + "lorem ipsum " * 166)
    # When asking for the largest page / Then all 1,000 come in one answer under 5 MB
    status, body, size = call(api.handler, with_query(load_event("api_list_chunks.json"), number=str(MAX_PAGE_SIZE)))
    assert status == 200 and len(body["chunks"]) == MAX_PAGE_SIZE and body["next_cursor"] is None
    assert size < RESPONSE_LIMIT


def test_the_largest_page_of_the_longest_ids_answers_under_5_mb(local_container):
    # Given 1,001 collections whose ids are 255 astral characters (the longest id, 12 bytes a character in JSON)
    for i in range(MAX_PAGE_SIZE + 1):
        collection_id = f"{i:04d}" + "\U0001f600" * 251
        local_container.adapters.metadata.put_collection(
            "acme", Collection(id=collection_id, embedding_model="hash:384"), create=True
        )
    event = with_query(load_event("api_list_documents.json"), number=str(MAX_PAGE_SIZE))
    event["path"] = "/v1/collections"
    # When listing the largest page
    status, body, size = call(api.handler, event)
    # Then it holds 1,000 ids, a cursor to the last one, and is under 5 MB
    assert status == 200 and len(body["collections"]) == MAX_PAGE_SIZE and body["next_cursor"]
    assert size < RESPONSE_LIMIT


def test_the_largest_page_of_the_heaviest_document_summaries_answers_under_5_mb(local_container):
    # Given 1,001 documents with the longest ids, titles and failure reasons, in astral characters (12 bytes each
    # as JSON escapes: about 21 KB a summary, 21 MB for a full page if nothing stopped it)
    assert call(api.handler, put_collection("{}"))[0] == 201
    expected = []
    for i in range(MAX_PAGE_SIZE + 1):
        document_id = f"{i:04d}" + "\U0001f600" * 251
        local_container.adapters.metadata.put_document(
            "acme",
            Document(
                id=document_id,
                collection="My Collection",
                title="\U0001f600" * 1024,
                status=DocumentStatus.FAILED,
                failure_reason="\U0001f600" * 500,
                mimetype="\U0001f600" * 255,
            ),
            create=True,
        )
        expected.append(document_id)
    # When walking the list with the largest page size
    seen, sizes, cursor = [], [], None
    while True:
        status, body, size = call(
            api.handler,
            with_query(
                load_event("api_list_documents.json"),
                number=str(MAX_PAGE_SIZE),
                **({"cursor": cursor} if cursor else {}),
            ),
        )
        assert status == 200, body
        assert [d["id"] for d in body["items"]] == body["documents"]
        seen += body["documents"]
        sizes.append(size)
        cursor = body["next_cursor"]
        if not cursor:
            break
    # Then every answer stays under 5 MB, each with at least one document, and each document comes exactly once
    assert seen == expected
    assert max(sizes) < RESPONSE_LIMIT and len(sizes) > 4


def test_lists_default_to_a_page_of_100_and_minus_one_means_the_largest_page(local_container):
    for i in range(MAX_PAGE_SIZE + 5):
        local_container.adapters.metadata.put_collection(
            "acme", Collection(id=f"c{i:04d}", embedding_model="hash:384"), create=True
        )
    event = with_query(load_event("api_list_documents.json"))
    event["path"] = "/v1/collections"
    status, body, _ = call(api.handler, event)
    assert status == 200 and len(body["collections"]) == 100 and body["next_cursor"]
    status, body, _ = call(api.handler, with_query(event, number="-1"))
    assert len(body["collections"]) == MAX_PAGE_SIZE and body["next_cursor"]
    status, body, _ = call(api.handler, with_query(event, number="-1", cursor=body["next_cursor"]))
    assert body["collections"] == [f"c{i:04d}" for i in range(MAX_PAGE_SIZE, MAX_PAGE_SIZE + 5)]
    assert body["next_cursor"] is None


def test_a_documents_cursor_is_not_a_chunks_cursor(local_container):
    store_chunks(local_container, 3, lambda i: "text")
    event = with_query(load_event("api_list_documents.json"), number="1")
    event["path"] = "/v1/collections"
    local_container.adapters.metadata.put_collection(
        "acme", Collection(id="zz", embedding_model="hash:384"), create=True
    )
    cursor = call(api.handler, event)[1]["next_cursor"]
    status, body, _ = call(api.handler, with_query(load_event("api_list_chunks.json"), cursor=cursor))
    assert_refused(status, body, 422, "cursor")
