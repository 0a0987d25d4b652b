"""The SDK's pure parts: one request builder (and one sync and one async method) per route of the API's OpenAPI
document, request bodies validated by the API's own models, the retry policy, and the error map."""

import inspect
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import httpx
import pytest
from pydantic import ValidationError

from kindex.client import AsyncKindex, Kindex, calls, errors
from kindex.client.retry import RetryPolicy, retry_after_seconds
from kindex.client.transport import ClientConfig, decode, known_fields

pytestmark = pytest.mark.unit

SAMPLE_ARGUMENTS = {
    "collection": "c",
    "document": "d",
    "job": "j",
    "filename": "f.txt",
    "size": 3,
    "request": "q",
    "batch": {"format_version": 1, "embedding_model": "hash:384", "dimensions": 384},
    "collections": ["c", "e"],
    "text": "t",
}


def sample_call(builder) -> calls.ApiCall:
    required = [
        p.name
        for p in inspect.signature(builder).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    return builder(*[SAMPLE_ARGUMENTS[name] for name in required])


def openapi_routes() -> set[tuple[str, str]]:
    from functions.api import OPENAPI, resolver

    schema = json.loads(resolver.get_openapi_json_schema(**OPENAPI))
    return {(method.upper(), path) for path, item in schema["paths"].items() for method in item}


def test_every_route_of_the_openapi_document_has_exactly_one_builder_and_no_builder_is_extra():
    # Given the API's OpenAPI document (the one /v1/openapi.json serves) and the SDK's builders
    covered = [(call.method, call.route) for call in map(sample_call, calls.BUILDERS)]
    # Then they name the same routes, each once: a new route without a client method fails here
    assert sorted(covered) == sorted(openapi_routes())
    assert len(set(covered)) == len(covered)


def test_the_sync_and_the_async_client_have_a_method_for_every_builder():
    for builder in calls.BUILDERS:
        sync_method, async_method = getattr(Kindex, builder.__name__), getattr(AsyncKindex, builder.__name__)
        assert not inspect.iscoroutinefunction(sync_method), builder.__name__
        assert inspect.iscoroutinefunction(async_method), builder.__name__
        # the same parameters, so code moves between them unchanged
        assert inspect.signature(sync_method).parameters.keys() == inspect.signature(async_method).parameters.keys()


def test_each_built_path_matches_its_route_with_ids_encoded_as_one_segment():
    from kindex.api.routes import ApiRoute

    for builder in calls.BUILDERS:
        call = sample_call(builder)
        assert ApiRoute(call.route, (call.method,), "api").pattern.fullmatch(call.path), call
    hostile = calls.get_document("a/b c", "../%2F?#é")
    assert hostile.path == "/v1/collections/a%2Fb%20c/documents/..%2F%252F%3F%23%C3%A9"
    with pytest.raises(ValueError):
        calls.get_collection("")


def test_write_bodies_hold_only_the_fields_given_validated_by_the_apis_models():
    # Given a partial update
    call = calls.put_collection("c", {"title": "T"}, query_groups="staff, hr")
    # Then only those fields go, in the API's canonical form
    assert call.body == {"title": "T", "query_groups": ["staff", "hr"]}
    # And a misspelt field or a wrong type fails before any request
    with pytest.raises(ValidationError):
        calls.put_collection("c", titel="T")
    with pytest.raises(ValidationError):
        calls.query("c", "q", k="5")
    assert calls.query("c", "q", k=5, groups=["g"]).body == {"query": "q", "k": 5, "groups": ["g"]}
    assert calls.query_collections(["a", "b"], "q").body == {"query": "q", "collections": ["a", "b"]}
    assert calls.list_documents("c", cursor="abc", number=7).params == {"cursor": "abc", "number": 7}
    assert calls.list_documents("c", start=5, number=7).params == {"start": 5, "number": 7}


def test_a_stored_collection_read_back_can_be_put_back():
    from kindex.domain.models import Collection

    stored = Collection.model_validate(
        {"id": "c", "embedding_model": "hash:384", "title": "T", "created_at": "2026-01-01T00:00:00Z"}
    )
    body = calls.put_collection("c", stored).body
    assert body["title"] == "T" and body["embedding_model"] == "hash:384"
    assert isinstance(body["created_at"], str)  # JSON-ready; the API ignores read-only fields


def test_retry_after_reads_seconds_and_http_dates_and_ignores_garbage():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert retry_after_seconds({"Retry-After": "3"}) == 3
    assert retry_after_seconds({"retry-after": "0.5"}) == 0.5
    assert retry_after_seconds({"Retry-After": format_datetime(now + timedelta(seconds=7), usegmt=True)}, now=now) == 7
    assert retry_after_seconds({"Retry-After": format_datetime(now - timedelta(seconds=7), usegmt=True)}, now=now) == 0
    for garbage in ("soon", "nan", "inf", ""):
        assert retry_after_seconds({"Retry-After": garbage}) is None
    assert retry_after_seconds({}) is None


def test_retry_policy_retries_only_429_and_503_a_bounded_number_of_times_within_the_wait_bound():
    policy = RetryPolicy(max_retries=2, backoff=1.0, max_backoff=3.0, max_wait=10.0)
    assert policy.delay(0, 429, {"Retry-After": "4"}) == 4
    assert policy.delay(1, 503, {"Retry-After": "0"}) == 0
    assert policy.delay(2, 429, {"Retry-After": "1"}) is None  # retries used up
    assert policy.delay(0, 429, {"Retry-After": "11"}) is None  # longer than we wait: raise at once
    for status in (200, 400, 404, 409, 500, 502):
        assert policy.delay(0, status, {}) is None
    # Without a hint: exponential backoff with jitter, capped
    assert 0.5 <= policy.delay(0, 503, {}) <= 1.0
    assert 1.0 <= policy.delay(1, 503, {}) <= 2.0
    assert 1.5 <= RetryPolicy(max_retries=9, backoff=1.0, max_backoff=3.0).delay(6, 503, {}) <= 3.0


@pytest.mark.parametrize(
    "status, kind",
    [
        (400, errors.BadRequest),
        (401, errors.Unauthorized),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (409, errors.Conflict),
        (413, errors.PayloadTooLarge),
        (422, errors.InvalidInput),
        (429, errors.Throttled),
        (500, errors.ServerError),
        (502, errors.ServerError),
        (503, errors.ServiceUnavailable),
        (418, errors.ApiError),
    ],
)
def test_answers_become_typed_exceptions_carrying_code_message_and_status(status, kind):
    response = httpx.Response(
        status, json={"error": "some_code", "message": "what happened"}, headers={"Retry-After": "2"}
    )
    with pytest.raises(kind) as raised:
        decode(calls.get_collection("c"), response)
    assert type(raised.value) is kind
    assert (raised.value.status, raised.value.error, raised.value.message) == (status, "some_code", "what happened")
    assert isinstance(raised.value, errors.KindexClientError)


def test_an_answer_that_is_not_the_apis_json_still_raises_with_its_status():
    response = httpx.Response(502, text="<html>Bad Gateway</html>")
    with pytest.raises(errors.ServerError) as raised:
        decode(calls.get_collection("c"), response)
    assert raised.value.error == "http_502" and "Bad Gateway" in raised.value.message
    assert errors.Throttled(429, "x", "y", {"Retry-After": "9"}).retry_after == 9


def test_answers_with_fields_a_newer_server_added_still_read():
    from kindex.api.models import UploadResponse

    data = {"id": "c", "embedding_model": "hash:384", "brand_new": 1}
    assert decode(calls.get_collection("c"), httpx.Response(200, json=data)).id == "c"
    nested = {
        "url": "u",
        "method": "PUT",
        "headers": {},
        "expires_at": "2026-01-01T00:00:00Z",
        "later": True,
        "document": {"id": "d", "collection": "c", "also_new": "x"},
    }
    assert known_fields(UploadResponse, nested)["document"] == {"id": "d", "collection": "c"}
    assert decode(calls.prepare_upload("c", "d", "f.txt", 1), httpx.Response(200, json=nested)).document.id == "d"


def test_the_client_needs_a_url_and_a_key_and_reads_them_from_the_environment(monkeypatch):
    monkeypatch.delenv("KINDEX_URL", raising=False)
    monkeypatch.delenv("KINDEX_API_KEY", raising=False)
    with pytest.raises(errors.ConfigurationError):
        Kindex()
    with pytest.raises(errors.ConfigurationError):
        Kindex("http://127.0.0.1:1")
    with pytest.raises(errors.ConfigurationError):
        Kindex("ftp://x", "k")
    monkeypatch.setenv("KINDEX_URL", "http://127.0.0.1:1/")
    monkeypatch.setenv("KINDEX_API_KEY", "kdx_x")
    with Kindex() as client:
        assert (client.config.url, client.config.key) == ("http://127.0.0.1:1", "kdx_x")


def test_an_http_client_handed_in_stays_open_for_its_owner():
    mine = httpx.Client()
    with Kindex("http://127.0.0.1:1", "k", http_client=mine):
        pass
    assert not mine.is_closed
    with Kindex("http://127.0.0.1:1", "k") as own:
        pass
    assert own._http.is_closed
    mine.close()


def test_the_key_goes_only_to_the_api_in_the_authorization_header():
    config = ClientConfig.resolve("https://api.example", "kdx_secret", 5.0, None)
    args = config.request(calls.list_collections())
    assert args["url"] == "https://api.example/v1/collections"
    assert args["headers"]["Authorization"] == "Bearer kdx_secret"
    assert "kdx_secret" not in json.dumps({k: v for k, v in args.items() if k != "headers"})


@pytest.mark.slow
def test_importing_the_sdk_loads_none_of_the_servers_dependencies():
    # Given a fresh interpreter that imports the SDK and builds a client
    forbidden = [
        "numpy",
        "onnxruntime",
        "pypdf",
        "tokenizers",
        "boto3",
        "botocore",
        "aws_lambda_powertools",
        "docx",
        "bs4",
        "tiktoken",
        "openai",
        "hypercorn",
        "opensearchpy",
        "tqdm",
        "kindex.adapters",
        "kindex.app",
        "kindex.compose",
        "kindex.text",
        "kindex.settings",
        "kindex.api.http",
        "kindex.api.routers",
        "kindex_local",
        "functions",
    ]
    code = (
        "import sys, kindex.client, kindex.client.models\n"
        "kindex.client.Kindex('http://127.0.0.1:1', 'k').close()\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    # Then none of the server's modules or dependencies got loaded
    assert "httpx" in loaded and "pydantic" in loaded
    assert [
        m for m in loaded if m.split(".")[0] in forbidden or any(m.startswith(f + ".") or m == f for f in forbidden)
    ] == []
