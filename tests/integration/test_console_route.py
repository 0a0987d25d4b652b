"""The console routes through the API function, as API Gateway calls them (keyless, under a stage prefix)."""

import copy
import json

import pytest

from functions import api
from tests.conftest import load_event

pytestmark = pytest.mark.integration


class Context:
    function_name = "kindex-api"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:kindex-api"
    aws_request_id = "req-1"


def get(path: str, headers: dict | None = None) -> dict:
    event = copy.deepcopy(load_event("api_get_console_asset.json"))
    event["path"] = path
    event["requestContext"]["path"] = "/prod" + path
    event["headers"].update(headers or {})
    return api.handler(event, Context())


def header(response: dict, name: str) -> str:
    """API Gateway REST events with multiValueHeaders get their response headers in that form too."""
    if name in (response.get("headers") or {}):
        return response["headers"][name]
    return ",".join(response["multiValueHeaders"][name])


def test_the_page_and_its_modules_are_served_without_a_key_with_a_strict_policy(local_container):
    # Given API Gateway's keyless event (no authorizer context) / When the page and a module are asked for
    page, module = get("/console"), get("/console/app.js")
    # Then both are served with their types and the policy that forbids inline code, framing and other origins
    assert page["statusCode"] == 200 and "<!doctype html>" in page["body"]
    assert header(page, "Content-Type") == "text/html; charset=utf-8"
    assert module["statusCode"] == 200 and header(module, "Content-Type") == "text/javascript; charset=utf-8"
    for response in (page, module):
        policy = header(response, "Content-Security-Policy")
        assert "default-src 'self'" in policy and "script-src 'self';" in policy
        assert "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
        assert header(response, "X-Content-Type-Options") == "nosniff"
        assert header(response, "Cache-Control") == "no-cache"


def test_a_repeated_request_revalidates_with_a_304(local_container):
    first = get("/console/style.css")
    again = get("/console/style.css", {"If-None-Match": header(first, "ETag")})
    assert again["statusCode"] == 304 and not again["body"]


@pytest.mark.parametrize(
    "path", ["/console/nope.js", "/console/index.html", "/console/%2e%2e%2fapi.py", "/console/..", "/console/APP.JS"]
)
def test_anything_else_under_console_is_a_json_404(local_container, path):
    response = get(path)
    assert response["statusCode"] == 404
    assert json.loads(response["body"])["error"] == "not_found"


def test_the_console_is_not_part_of_the_api_description(local_container):
    document = json.loads(get("/v1/openapi.json")["body"])
    assert not [p for p in document["paths"] if p.startswith("/console")]
