"""Hostile rights-check endpoints and URLs against the local deployment (issue 10): the SSRF list refused when a
collection is saved through the API and when a name resolves to a forbidden address at call time; a closed port
that answers like a filtered one; a dripping endpoint that cannot starve another tenant; a huge answer; and five slow
collections that share one query budget. Every rights server is a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import copy
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from functions import api
from kindex.adapters import http_rights
from kindex.domain.models import CollectionInput, DocumentInput
from kindex.domain.query import QueryRequest
from kindex_local.deployment import build_worker
from tests.conftest import load_event
from tests.support.rights_server import RightsServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SSRF_LIST = [
    ("http://169.254.169.254/latest/meta-data/iam/security-credentials/", "link-local"),
    ("http://10.0.0.1/check", "private"),
    ("http://[::1]:8080/check", "private"),  # this deployment admits 127.0.0.0/8 only
    ("http://[fd00:ec2::254]/latest/meta-data/", "link-local"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://0x7f000001/check", "four decimal numbers"),
    ("http://2130706433/check", "four decimal numbers"),
    ("http://0177.0.0.1/check", "four decimal numbers"),
    ("http://127.0.0.1:99999/check", "port"),
    ("http://127.0.0.1:8080/a b", "spaces"),
    ("http://127.0.0.1:8080/check\r\nX-Injected: 1", "control characters"),
    ("http://user:password@127.0.0.1:8080/check", "credentials"),
    ("http://[::ffff:169.254.169.254]/", "link-local"),
]


class Context:
    function_name = "kindex-api"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:kindex-api"
    aws_request_id = "req-1"


def put_collection(tenant: str, collection: str, body: dict) -> tuple[int, dict]:
    """PUT /v1/collections/{collection} through the API function, as an admin of `tenant`."""
    event = copy.deepcopy(load_event("api_put_collection.json"))
    event.update(path=f"/v1/collections/{collection}", pathParameters={"collection": collection}, body=json.dumps(body))
    event["requestContext"]["path"] = f"/prod/v1/collections/{collection}"
    event["requestContext"]["authorizer"].update(tenant=tenant, principalId=f"{tenant}/0123456789abcdef")
    response = api.handler(event, Context())
    return response["statusCode"], json.loads(response["body"])


@pytest.fixture
def loopback_v4_only(monkeypatch):
    monkeypatch.setenv("KINDEX_RIGHTS_ALLOWED_NETWORKS", "127.0.0.0/8")


@pytest.fixture
def env(loopback_v4_only, local_container):
    services = local_container
    services.worker = build_worker()
    for tenant in ("t", "u"):
        services.rights_secrets.rotate(tenant)
    return services


def make_collection(env, name, url, tenant="t", timeout=1.0, docs=("d1",)):
    env.catalog.put_collection(
        tenant,
        name,
        CollectionInput(
            query_groups=["staff"],
            rights_check_method="external",
            rights_check_method_configuration={"url": url, "timeout": timeout},
        ),
    )
    for doc_id in docs:
        env.catalog.put_document(tenant, name, doc_id, DocumentInput(content=f"penguin colony report {doc_id}"))


def query(env, collections, tenant="t"):
    return env.query.query(
        tenant,
        collections,
        QueryRequest(query="penguin colony", user="ann", groups=["staff"]),
        multi=len(collections) > 1,
    )


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


@pytest.mark.parametrize("url, rule", SSRF_LIST)
def test_ssrf_list_is_refused_when_saved_through_the_api(env, url, rule):
    # Given tenant t has its signing secret (so only the URL can be at fault)
    # When a collection is saved with a hostile rights-check URL
    status, body = put_collection(
        "t", "ext", {"rights_check_method": "external", "rights_check_method_configuration": {"url": url}}
    )
    # Then 422 naming the field and the rule, and nothing is stored
    assert status == 422 and body["error"] == "invalid_input", body
    assert body["message"].startswith("rights_check_method_configuration.url: ") and rule in body["message"]
    assert env.adapters.metadata.get_collection("t", "ext") is None


def test_saving_through_the_api_without_the_secret_is_refused(env):
    status, body = put_collection(
        "nosecret",
        "ext",
        {"rights_check_method": "external", "rights_check_method_configuration": {"url": "http://127.0.0.1:9/"}},
    )
    assert status == 409 and body["error"] == "conflict" and "POST /v1/rights-check-secret" in body["message"]
    status, _ = put_collection(
        "t",
        "ext",
        {"rights_check_method": "external", "rights_check_method_configuration": {"url": "http://127.0.0.1:9/x"}},
    )
    assert status == 201


def test_a_name_resolving_to_a_forbidden_address_at_call_time_is_not_called(env, monkeypatch):
    server = RightsServer(secret=env.adapters.secrets.get_secret("tenants/t/rights-check-signing"))
    server.allowed = {"d1"}
    answers = {"rights.test": ["127.0.0.1"]}
    monkeypatch.setattr(http_rights, "resolve", lambda host, port: answers[host])
    try:
        # Given a collection whose name resolved to the (admitted) loopback server when it was first called
        make_collection(env, "ext", f"http://rights.test:{server.port}/check", timeout=1.0)
        env.worker.drain()
        assert [r.document_id for r in query(env, ["ext"]).results] == ["d1"]
        assert server.requests[-1]["headers"]["Host"] == f"rights.test:{server.port}"
        # When the name is re-pointed at the metadata service and a new connection is needed
        answers["rights.test"] = ["169.254.169.254"]
        env.adapters.rights_endpoint.close()
        response, elapsed = timed(lambda: query(env, ["ext"]))
        # Then nothing is sent, the results are denied, and the warning names neither the address nor the host
        assert response.results == [] and response.denied_count == 1 and len(server.requests) == 1
        assert [(w.collection, w.code) for w in response.warnings] == [("ext", "rights_check_failed")]
        assert "169.254" not in response.warnings[0].message and "rights.test" not in response.warnings[0].message
        # And the refusal took the whole budget, like any other failure
        assert elapsed >= 1.0
    finally:
        server.close()


def test_localhost_is_refused_at_call_time_when_loopback_is_not_admitted(monkeypatch, tmp_path, local_container):
    # Given a local deployment that admits no private network at all, and a name the resolver maps to localhost
    from kindex.compose import container

    monkeypatch.setenv("KINDEX_RIGHTS_ALLOWED_NETWORKS", "none")
    container.cache_clear()
    services = container()
    services.rights_secrets.rotate("t")
    server = RightsServer()
    real_resolve = http_rights.resolve
    monkeypatch.setattr(http_rights, "resolve", lambda host, port: real_resolve("localhost", port))
    try:
        # Then `localhost` itself is refused when saved
        status, body = put_collection(
            "t",
            "ext",
            {
                "rights_check_method": "external",
                "rights_check_method_configuration": {"url": server.url.replace("127.0.0.1", "localhost")},
            },
        )
        assert status == 422 and "KINDEX_RIGHTS_ALLOWED_NETWORKS" in body["message"]
        # And a name that resolves to it is refused when called
        make_collection(services, "ext", f"http://rights.test:{server.port}/check", timeout=0.3)
        build_worker().drain()
        response = query(services, ["ext"])
        assert response.results == [] and response.warnings[0].code == "rights_check_failed"
        assert server.requests == []
    finally:
        server.close()


def test_a_closed_port_answers_like_a_filtered_one(env):
    # Given one collection on a port where nothing listens, and one on an endpoint that never answers in time
    closed = RightsServer()
    closed_url = closed.url
    closed.close()
    hanging = RightsServer()
    hanging.mode, hanging.hang_seconds = "hang", 30
    try:
        make_collection(env, "closed", closed_url, timeout=0.6)
        make_collection(env, "filtered", hanging.url, timeout=0.6)
        env.worker.drain()
        (a, closed_s), (b, filtered_s) = timed(lambda: query(env, ["closed"])), timed(lambda: query(env, ["filtered"]))
        # Then both responses say the same thing and both take the whole timeout (and no more: far less than the
        # filtered endpoint's 30 s)
        assert [(w.code, w.message) for w in a.warnings] == [(w.code, w.message) for w in b.warnings]
        assert (a.results, a.denied_count) == (b.results, b.denied_count) == ([], 1)
        assert 0.6 <= closed_s < 5 and 0.6 <= filtered_s < 5
        assert a.timing_ms["rights"] >= 600 and b.timing_ms["rights"] >= 600
    finally:
        hanging.close()


def test_a_dripping_endpoint_cannot_starve_another_tenant(env, monkeypatch):
    # Given tenant t's endpoint drips its answer one byte every 0.1 s (t's calls last their whole 3 s budget), and
    # tenant u's answers at once (u's budget is 1 s: a call of u's that waited for one of t's would fail and warn)
    drip = RightsServer(secret=env.adapters.secrets.get_secret("tenants/t/rights-check-signing"))
    drip.mode, drip.drip_interval = "drip", 0.1
    fine = RightsServer(secret=env.adapters.secrets.get_secret("tenants/u/rights-check-signing"))
    fine.allowed = {"d1"}
    in_flight = _count_calls_in_flight(env, monkeypatch, drip.url)
    try:
        make_collection(env, "slow", drip.url, tenant="t", timeout=T_BUDGET)
        make_collection(env, "fast", fine.url, tenant="u", timeout=1.0)
        env.worker.drain()
        # When tenant t fires 20 queries at once (more than the old shared pool's 16 threads)
        with ThreadPoolExecutor(max_workers=20) as pool:
            slow = [pool.submit(timed, lambda: query(env, ["slow"], tenant="t")) for _ in range(20)]
            wait_until(
                lambda: in_flight["now"],
                until=lambda calls: calls >= 8,
                message="tenant t's calls did not fill its 8 slots",
            )
            # Then tenant u's queries meanwhile get their allowed results, promptly and without warnings: sooner
            # than any of t's calls ends
            for _ in range(5):
                response, elapsed = timed(lambda: query(env, ["fast"], tenant="u"))
                assert [r.document_id for r in response.results] == ["d1"] and response.warnings == []
                assert elapsed < T_BUDGET
            outcomes = [future.result() for future in slow]
        # And each of t's queries ends within its budget, denied and warned (the waiting ones too: one that got its
        # slot late and then dripped for a budget of its own would take twice as long)
        for response, elapsed in outcomes:
            assert response.results == [] and response.warnings[0].code == "rights_check_failed"
            assert elapsed < T_BUDGET + 2.5
        # And after they returned nothing keeps working for them: connections closed, threads gone
        wait_until(
            lambda: (drip.active, _rights_threads("t")),
            until=lambda left: left == (0, []),
            timeout=30,
            message="tenant t's calls went on after its queries returned (connections, threads)",
        )
        assert env.rights_checks.limiter.in_flight("t") == 0
        # And at most 8 of t's calls were ever in flight at once (the per-tenant limit)
        assert 2 <= in_flight["max"] <= 8
    finally:
        drip.close()
        fine.close()


T_BUDGET = 3.0  # tenant t's rights-check timeout in the dripping test


def _count_calls_in_flight(env, monkeypatch, url: str) -> dict[str, int]:
    """Counts the deployment's concurrent calls to `url`, as they leave (the server sees hang-ups late)."""
    counts, lock = {"now": 0, "max": 0}, threading.Lock()
    real_post = env.adapters.rights_endpoint.post

    def counting_post(target, *args):
        if target != url:
            return real_post(target, *args)
        with lock:
            counts["now"] += 1
            counts["max"] = max(counts["max"], counts["now"])
        try:
            return real_post(target, *args)
        finally:
            with lock:
                counts["now"] -= 1

    monkeypatch.setattr(env.adapters.rights_endpoint, "post", counting_post)
    return counts


def _rights_threads(tenant: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(f"rights-check-{tenant}_")]


def test_a_huge_answer_is_denied_with_a_warning(env):
    server = RightsServer(secret=env.adapters.secrets.get_secret("tenants/t/rights-check-signing"))
    server.mode = "huge"
    try:
        make_collection(env, "ext", server.url, timeout=1.0)
        env.worker.drain()
        response = query(env, ["ext"])
        assert response.results == [] and response.warnings[0].code == "rights_check_failed"
        wait_until(
            lambda: server.active,
            until=lambda active: active == 0,
            timeout=30,
            message="the server is still sending: the connection was not closed",
        )
        assert server.sent_bytes < 16 * 1024 * 1024
    finally:
        server.close()


def test_five_slow_collections_share_one_query_budget(env):
    # Given five collections whose endpoints take 30 s, each with a 2 s timeout
    server = RightsServer(secret=env.adapters.secrets.get_secret("tenants/t/rights-check-signing"))
    server.mode, server.hang_seconds = "hang", 30
    fast = RightsServer(secret=env.adapters.secrets.get_secret("tenants/t/rights-check-signing"))
    fast.allowed = {"ok"}
    try:
        names = [f"slow{i}" for i in range(5)]
        for name in names:
            make_collection(env, name, server.url, timeout=2.0)
        make_collection(env, "fast", fast.url, timeout=1.0, docs=("ok",))
        env.worker.drain()
        # When one query names all of them
        response, elapsed = timed(lambda: query(env, [*names, "fast"]))
        # Then it takes one budget, not five (10 s), and the fast collection's result still comes back
        assert 2.0 <= elapsed < 5.0
        assert [r.document_id for r in response.results] == ["ok"]
        assert sorted(w.collection for w in response.warnings) == names
        assert len(server.requests) == 5
    finally:
        server.close()
        fast.close()
