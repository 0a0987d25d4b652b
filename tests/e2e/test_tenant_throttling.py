"""Per-tenant throttling against a real `kindex serve`: a tenant over its plan gets 429 JSON with Retry-After, while
another tenant's requests in the same window all succeed."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import requests

from tests.conftest import RunningServer, start_server

pytestmark = pytest.mark.e2e

# Tenant "slow" is on a plan of 1 request per second with a burst of 2 (80 requests cannot all pass even on a
# machine slow enough to need a minute for them); everyone else is on a plan they cannot exhaust in this test.
RATE, BURST = 1, 2
PLANS = {
    "default": {"rate_limit": 1000, "burst_limit": 1000},
    "plans": {"trial": {"rate_limit": RATE, "burst_limit": BURST, "tenants": ["slow"]}},
}
CLIENTS = 16
REQUESTS_PER_CLIENT = 5


@pytest.fixture(scope="module")
def throttled_server(tmp_path_factory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("kindex-throttle"), {"KINDEX_USAGE_PLANS": json.dumps(PLANS)})
    yield running
    running.stop()


def test_sixteen_clients_of_one_tenant_get_429s_while_another_tenants_requests_all_succeed(throttled_server):
    slow_key = throttled_server.create_key("slow", "reader")
    other_key = throttled_server.create_key("other", "reader")
    url = throttled_server.url("/v1/collections")
    slow: list[requests.Response] = []
    other: list[requests.Response] = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS + 1)

    def client(key: str, into: list, count: int) -> None:
        session = throttled_server.session(key)
        start.wait()
        responses = [session.get(url, timeout=30) for _ in range(count)]
        with lock:
            into.extend(responses)

    threads = [threading.Thread(target=client, args=(slow_key, slow, REQUESTS_PER_CLIENT)) for _ in range(CLIENTS)]
    threads.append(threading.Thread(target=client, args=(other_key, other, 40)))
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began

    statuses = Counter(response.status_code for response in slow)
    assert set(statuses) == {200, 429} and sum(statuses.values()) == CLIENTS * REQUESTS_PER_CLIENT
    # The bucket: its burst, plus its rate over the window (and one token of rounding).
    assert statuses[200] <= BURST + RATE * elapsed + 1, (statuses, elapsed)
    refused = next(response for response in slow if response.status_code == 429)
    assert refused.headers["Content-Type"].startswith("application/json")
    assert refused.json() == {"error": "throttled", "message": "too many requests"}
    assert int(refused.headers["Retry-After"]) >= 1
    assert [response.status_code for response in other] == [200] * 40


def test_a_throttled_tenant_is_admitted_again_after_retry_after(throttled_server):
    key = throttled_server.create_key("slow", "query")  # the tenant's bucket, not the key's: shared by its keys
    session = throttled_server.session(key)
    url = throttled_server.url("/v1/query")
    body = {"query": "anything", "collections": ["none"], "user": "u"}
    responses = [session.post(url, json=body, timeout=30) for _ in range(10)]
    refused = [r for r in responses if r.status_code == 429]
    assert refused, [r.status_code for r in responses]
    time.sleep(int(refused[-1].headers["Retry-After"]))
    assert session.post(url, json=body, timeout=30).status_code != 429


def test_bad_keys_are_refused_before_any_plan_and_public_routes_are_not_counted(throttled_server):
    session = throttled_server.session("kdx_nope_" + "x" * 43)
    assert {session.get(throttled_server.url("/v1/collections"), timeout=30).status_code for _ in range(10)} == {401}
    public = throttled_server.session()
    assert {public.get(throttled_server.url("/v1/openapi.json"), timeout=30).status_code for _ in range(10)} == {200}


def test_the_server_says_which_limits_it_applies(throttled_server):
    assert any(
        "Per-tenant limits: default 1000/s burst 1000; trial 1/s burst 2 (1 tenant(s))" in line
        for line in throttled_server.output
    )
