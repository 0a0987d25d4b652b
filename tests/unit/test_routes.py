"""The route table derived from the resolvers, and the local gateway built from it."""

import pytest

from kindex.api.routes import ApiRoute, api_routes

pytestmark = pytest.mark.unit


def test_pattern_matches_one_encoded_segment_per_parameter():
    route = ApiRoute("/v1/collections/{collection}/documents/{document}", ("GET",), "api")
    assert route.pattern.fullmatch("/v1/collections/My%20Coll/documents/a.b")
    assert not route.pattern.fullmatch("/v1/collections/a/b/documents/c")
    assert not route.pattern.fullmatch("/v1/collections/a/documents/")


def test_query_routes_are_served_by_the_query_function_even_though_the_api_lists_them():
    from functions import api, query

    routes = {
        (r.path, m): r for r in api_routes({"query": query.resolver, "api": api.resolver}, "api") for m in r.methods
    }
    assert routes[("/v1/query", "POST")].function == "query"
    assert routes[("/v1/collections/{collection}/query", "POST")].function == "query"
    assert routes[("/v1/collections/{collection}", "PUT")].function == "api"
    assert routes[("/docs", "GET")].public and not routes[("/v1/collections", "GET")].public
    assert routes[("/console", "GET")].public and routes[("/console/{asset}", "GET")].function == "api"
    assert {path for (path, _), r in routes.items() if r.public} == {
        "/v1/openapi.json",
        "/docs",
        "/docs/{asset}",
        "/console",
        "/console/{asset}",
    }
    assert len(routes) == len(
        {(r.path, m) for r in api_routes({"query": query.resolver, "api": api.resolver}, "api") for m in r.methods}
    )


def test_local_gateway_serves_exactly_the_derived_routes(tmp_path, monkeypatch):
    from functions import api, query
    from kindex.settings import Settings
    from kindex_local.deployment import build_gateway

    gateway = build_gateway(Settings(data_dir=tmp_path))
    derived = {
        (m, r.path) for r in api_routes({"query": query.resolver, "api": api.resolver}, "api") for m in r.methods
    }
    assert {(r.method, r.pattern.pattern) for r in gateway.routes} == {
        (m, ApiRoute(p, (m,), "x").pattern.pattern) for m, p in derived
    }
    assert gateway.route("GET", "/v1/nowhere") is None
    assert gateway.route("PATCH", "/v1/collections/x") is None
    assert gateway.route("POST", "/v1/query").function_name == "kindex-query"
    assert gateway.route("GET", "/console/app.js").public and gateway.route("GET", "/console/a/b.js") is None
