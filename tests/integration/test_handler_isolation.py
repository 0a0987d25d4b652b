"""The API and query handlers called from many threads at once, as the local server calls them: each request
must see only its own event (tenant, path, body), whatever the other threads are resolving."""

import copy
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from functions import api, query
from tests.conftest import load_event

pytestmark = pytest.mark.integration

TENANTS = {"alpha": "ALPHA", "beta": "BETA"}


class Context:
    function_name = "kindex-api"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:kindex-api"
    aws_request_id = "req-1"


def event(tenant: str, method: str, path: str, body: dict | None = None) -> dict:
    built = copy.deepcopy(load_event("api_list_documents.json"))
    built.update(
        httpMethod=method,
        path=path,
        body=json.dumps(body) if body is not None else None,
        queryStringParameters=None,
        multiValueQueryStringParameters=None,
        pathParameters=None,
    )
    built["requestContext"]["authorizer"] = {
        "tenant": tenant,
        "role": "admin",
        "key_id": f"{tenant}-key",
        "principalId": f"{tenant}/{tenant}-key",
    }
    return built


@pytest.fixture
def fast_switching():
    """Switch threads every microsecond, so a state shared between requests would show at once."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def test_concurrent_requests_of_two_tenants_never_see_each_other(local_container, fast_switching):
    # Given two tenants with the same collection and document ids, every text naming its tenant
    for tenant, marker in TENANTS.items():
        assert (
            api.handler(
                event(tenant, "PUT", "/v1/collections/shared", {"title": marker, "allow_guests": True}), Context()
            )["statusCode"]
            == 201
        )
        assert (
            api.handler(
                event(
                    tenant,
                    "PUT",
                    "/v1/collections/shared/documents/d1",
                    {"title": marker, "content": f"{marker} leave policy"},
                ),
                Context(),
            )["statusCode"]
            == 201
        )

    def one(n: int) -> str | None:
        tenant = list(TENANTS)[n % 2]
        marker, other = TENANTS[tenant], TENANTS[list(TENANTS)[(n + 1) % 2]]
        kind = n % 3
        if kind == 0:
            response = api.handler(event(tenant, "GET", "/v1/collections/shared"), Context())
        elif kind == 1:
            response = api.handler(event(tenant, "GET", "/v1/collections/shared/documents/d1"), Context())
        else:
            response = query.handler(
                event(tenant, "POST", "/v1/collections/shared/query", {"query": f"{marker} policy", "mode": "keyword"}),
                Context(),
            )
        if response["statusCode"] != 200 or other in response["body"] or (kind < 2 and marker not in response["body"]):
            return f"{tenant} {kind} {response['statusCode']} {response['body'][:200]}"
        return None

    # When 16 threads resolve 1,200 requests of both tenants through the same function modules
    with ThreadPoolExecutor(16) as pool:
        failures = [f for f in pool.map(one, range(1200)) if f]

    # Then no answer carries the other tenant's data or fails
    assert failures == []
