"""The shared resolver builds every route's middleware stack once before serving: Powertools builds it lazily and
unguarded, so two threads calling a route for the first time at once left that route answering 500 for good."""

from __future__ import annotations

import json
import threading

import pytest

from kindex.api.resolver import IsolatedRestResolver

pytestmark = pytest.mark.unit


def fresh_resolver() -> IsolatedRestResolver:
    resolver = IsolatedRestResolver(enable_validation=True)

    @resolver.get("/v1/things/<thing>")
    def thing(thing: str):
        return {"thing": thing}

    @resolver.get("/v1/other")
    def other():
        return {"other": True}

    return resolver


def event(path: str) -> dict:
    return {"httpMethod": "GET", "path": path, "resource": path, "headers": {}, "requestContext": {}, "body": None}


def test_the_first_request_builds_every_routes_stack():
    # Given a resolver with two routes, none called yet
    resolver = fresh_resolver()
    # When one request to one route is served
    assert resolver.resolve(event("/v1/other"), None)["statusCode"] == 200
    # Then every route's middleware stack is built (the lazy, unguarded build never runs in a request thread)
    assert all(route._middleware_stack_built for route in resolver._static_routes + resolver._dynamic_routes)


@pytest.mark.slow
def test_sixteen_first_requests_at_once_all_answer_and_the_route_stays_sound():
    for _ in range(20):
        # Given a fresh resolver, and 16 threads that call the same route for the first time together
        resolver = fresh_resolver()
        barrier = threading.Barrier(16)
        statuses: list[int] = []

        def call(n: int, resolver=resolver, barrier=barrier, statuses=statuses) -> None:
            barrier.wait()
            statuses.append(resolver.resolve(event(f"/v1/things/t{n}"), None)["statusCode"])

        threads = [threading.Thread(target=call, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Then every one answered, and so does the next request
        assert statuses == [200] * 16
        after = resolver.resolve(event("/v1/things/x"), None)
        assert after["statusCode"] == 200 and json.loads(after["body"]) == {"thing": "x"}
