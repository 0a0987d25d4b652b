"""The rights-check HTTP transport against real servers on 127.0.0.1: addresses judged after resolution (DNS
rebinding), the connection pinned to the judged address with TLS still verifying the name, one deadline against a
dripping answer, and a huge answer that is never read past the cap."""

import ipaddress
import json
import time
import tracemalloc

import pytest

from kindex.adapters import http_rights
from kindex.adapters.http_rights import MAX_ANSWER_BYTES, HttpRightsEndpoint
from kindex.domain.rights_policy import RightsCallFailed, RightsUrlPolicy
from tests.support.rights_server import RightsServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
BODY = json.dumps({"document_ids": ["a", "b"]}).encode()


@pytest.fixture
def server():
    running = RightsServer()
    running.allowed = {"a"}
    yield running
    running.close()


@pytest.fixture
def tls_server():
    running = RightsServer(tls=True)
    running.allowed = {"a"}
    yield running
    running.close()


def endpoint(policy=None, **kwargs):
    return HttpRightsEndpoint(policy or RightsUrlPolicy(schemes=("http", "https"), allowed_networks=LOOPBACK), **kwargs)


def post(client, url, seconds=2.0):
    return client.post(url, BODY, {"Content-Type": "application/json"}, time.monotonic() + seconds)


def test_a_name_is_judged_by_what_it_resolves_to_at_call_time(server, monkeypatch):
    # Given a name that resolves to the loopback server (admitted here)
    answers = {"rights.test": ["127.0.0.1"]}
    monkeypatch.setattr(http_rights, "resolve", lambda host, port: answers[host])
    client = endpoint()
    # When it is called, the request reaches the server under its name
    assert post(client, f"http://rights.test:{server.port}/check") == (200, b'{"a": true, "b": false}')
    assert server.requests[-1]["headers"]["Host"] == f"rights.test:{server.port}"
    # When the name is re-pointed at the metadata service (DNS rebinding), a new connection is refused before it
    # is made, and so is a mixed answer with one private address among admitted ones
    for rebound in (["169.254.169.254"], ["::ffff:169.254.169.254"], ["127.0.0.1", "10.0.0.1"], []):
        answers["rights.test"] = rebound
        with pytest.raises(RightsCallFailed) as failed:
            post(endpoint(), f"http://rights.test:{server.port}/check")
        assert failed.value.reason == ("resolve" if not rebound else "refused")
    assert len(server.requests) == 1


def test_localhost_is_refused_when_the_allowlist_leaves_loopback_out(server, monkeypatch):
    # Given a deployment that admits no loopback, and a name that the real resolver maps to localhost
    real_resolve = http_rights.resolve
    monkeypatch.setattr(http_rights, "resolve", lambda host, port: real_resolve("localhost", port))
    client = endpoint(RightsUrlPolicy(schemes=("http",), allowed_networks=()))
    # Then neither the literal name nor a name resolving to it gets through, and the server hears nothing
    for url in (
        f"http://localhost:{server.port}/check",
        f"http://rights.test:{server.port}/check",
        f"http://127.0.0.1:{server.port}/check",
    ):
        with pytest.raises(RightsCallFailed) as failed:
            post(client, url)
        assert failed.value.reason == "refused"
    assert server.requests == []


def test_tls_verifies_the_name_while_connecting_to_the_pinned_address(tls_server, monkeypatch):
    monkeypatch.setattr(http_rights, "resolve", lambda host, port: ["127.0.0.1"])
    client = endpoint(
        RightsUrlPolicy(schemes=("https",), allowed_networks=LOOPBACK), ssl_context=tls_server.client_ssl_context()
    )
    # The certificate names rights.test: the call succeeds although the socket goes to 127.0.0.1
    assert post(client, f"https://rights.test:{tls_server.port}/check")[0] == 200
    # A name the certificate does not carry fails, although it resolves to the same address
    with pytest.raises(RightsCallFailed) as failed:
        post(client, f"https://other.test:{tls_server.port}/check")
    assert failed.value.reason == "connect"
    # And the system's roots do not trust the test CA
    with pytest.raises(RightsCallFailed):
        post(
            endpoint(RightsUrlPolicy(schemes=("https",), allowed_networks=LOOPBACK)),
            f"https://rights.test:{tls_server.port}/check",
        )


def test_a_dripping_answer_ends_at_the_deadline(server):
    # Given an endpoint that sends one byte every 0.1 s (no single read ever times out)
    server.mode, server.drip_interval = "drip", 0.1
    client = endpoint()
    started = time.monotonic()
    with pytest.raises(RightsCallFailed) as failed:
        post(client, server.url, seconds=0.5)
    # Then the call ends at its deadline, not when the answer would be complete (~10,000 s)
    assert failed.value.reason == "timeout"
    assert 0.45 <= time.monotonic() - started < 5
    # And the connection is closed: the server stops dripping, having sent a few of the answer's 100,000 bytes (100
    # would be 10 s of dripping)
    wait_until(
        lambda: server.active,
        until=lambda active: active == 0,
        timeout=30,
        message="the server is still dripping: the connection was not closed",
    )
    assert server.sent_bytes < 100


def test_headers_that_never_come_end_at_the_deadline(server):
    # Given an endpoint that answers only after 30 s
    server.mode, server.hang_seconds = "hang", 30
    started = time.monotonic()
    with pytest.raises(RightsCallFailed) as failed:
        post(endpoint(), server.url, seconds=0.3)
    # Then the call ends at its 0.3 s deadline: far sooner than the answer
    assert failed.value.reason == "timeout" and time.monotonic() - started < 5


@pytest.mark.parametrize("declares_length", [True, False])
def test_a_huge_answer_is_not_read_past_the_cap(server, declares_length):
    # Given an endpoint answering 200 with a 64 MiB body (declared, or streamed until the connection closes)
    server.mode, server.huge_declares_length = "huge", declares_length
    client = endpoint()
    tracemalloc.start()
    try:
        with pytest.raises(RightsCallFailed) as failed:
            post(client, server.url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then the call fails as too large, holding at most about the cap in memory
    assert failed.value.reason == "too_large"
    assert peak < MAX_ANSWER_BYTES + 1024 * 1024
    # And the server could only push what fits in the sockets' buffers before the connection was closed
    wait_until(
        lambda: server.active,
        until=lambda active: active == 0,
        timeout=30,
        message="the server is still sending: the connection was not closed",
    )
    assert server.sent_bytes < 16 * 1024 * 1024


def test_an_answer_at_the_cap_is_read(server):
    # One byte under the cap is still an answer (a JSON object padded with spaces)
    server.mode = "allow"
    client = endpoint(max_answer_bytes=64)
    assert post(client, server.url)[0] == 200
    tiny = endpoint(max_answer_bytes=10)
    with pytest.raises(RightsCallFailed) as failed:
        post(tiny, server.url)
    assert failed.value.reason == "too_large"


def test_non_200_is_returned_without_reading_and_a_closed_port_fails(server):
    server.mode = "error"
    assert post(endpoint(), server.url) == (500, b"")
    closed = RightsServer()
    url = closed.url
    closed.close()
    with pytest.raises(RightsCallFailed) as failed:
        post(endpoint(), url)
    assert failed.value.reason == "connect"


def test_a_deadline_already_passed_makes_no_connection(server):
    with pytest.raises(RightsCallFailed) as failed:
        endpoint().post(server.url, BODY, {}, time.monotonic() - 1)
    assert failed.value.reason == "timeout" and server.requests == []
