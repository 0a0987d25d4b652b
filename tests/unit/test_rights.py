"""Rights checks: request building, response parsing, the per-tenant limit and one query's session (budget, failures
that deny and warn, a failed call that costs its whole budget). The endpoint here is an in-memory double that
records its calls; the real HTTP transport is tested against real servers in tests/integration/test_rights_http.py."""

import hashlib
import hmac
import json
import threading
import time

import pytest

from kindex.adapters.local.file_secrets import FileSecretStore
from kindex.app.rights import (
    CHECK_FAILED,
    SECRET_MISSING,
    RightsChecks,
    TenantLimiter,
    build_rights_request,
    parse_rights_response,
    rights_secret_name,
    sign,
)
from kindex.domain.errors import Conflict, InvalidInput
from kindex.domain.models import Collection
from kindex.domain.rights_policy import RightsCallFailed, RightsUrlPolicy

pytestmark = pytest.mark.unit


def test_request_body_and_signature():
    body, headers = build_rights_request("ann", "c1", ["a", "b"], b"secret", 1700000000)
    assert json.loads(body) == {
        "document_ids": ["a", "b"],
        "username": "ann",
        "xwiki_username": "ann",
        "collection": "c1",
    }
    expected = hmac.new(b"secret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert headers == {"Content-Type": "application/json", "X-Kindex-Signature": f"t=1700000000,v1={expected}"}
    assert sign(b"other", body, 1700000000) != headers["X-Kindex-Signature"]


@pytest.mark.parametrize(
    "status, payload, allowed",
    [
        (200, b'{"a": true, "b": false}', {"a"}),
        (200, b'{"a": true}', {"a"}),  # b missing -> denied
        (200, b'{"a": "true", "b": 1}', None),  # non-booleans: no valid answer (denies, and warns)
        (200, b'{"a": true, "b": null}', None),
        (200, b'{"a": true, "zzz": "yes"}', {"a"}),  # only the requested ids' values matter
        (200, b'{"a": true, "b": true, "zzz": true}', {"a", "b"}),  # unknown ids are ignored
        (200, b'["a", "b"]', None),  # not an object: no valid answer
        (200, b"not json", None),
        (200, b"\xff\xfe", None),
        (500, b'{"a": true, "b": true}', None),  # any non-200 is no answer, whatever the body says
        (201, b'{"a": true, "b": true}', None),
    ],
)
def test_response_parsing_fails_closed(status, payload, allowed):
    assert parse_rights_response(status, payload, ["a", "b"]) == allowed


def test_tenant_limiter_bounds_one_tenant_without_touching_another():
    limiter = TenantLimiter(limit=2)
    soon = time.monotonic() + 0.15
    assert limiter.acquire("a", soon) and limiter.acquire("a", soon)
    # Given tenant a holds both its slots, its third call waits until its deadline and gives up: not before it, and
    # not long after it (a wait without end, or for a release, would be far longer)
    assert limiter.acquire("a", soon) is False
    assert soon <= time.monotonic() < soon + 5
    # while tenant b is not affected at all
    assert limiter.acquire("b", time.monotonic()) and limiter.in_flight("b") == 1
    # And a released slot wakes a waiter at once: long before its deadline, which is all a waiter that is never
    # woken would see (it finds the free slot then too)
    threading.Timer(0.05, limiter.release, args=("a",)).start()
    started = time.monotonic()
    assert limiter.acquire("a", started + 30)
    assert time.monotonic() - started < 10
    for tenant in ("a", "a", "b"):
        limiter.release(tenant)
    assert limiter.in_flight("a") == 0 and limiter.in_flight("b") == 0


class FakeClock:
    """The session's clock (time.monotonic's stand-in): it moves only when a call says it took time, so a budget is
    checked exactly, whatever the machine's load. Real waits (a future's result) still use real time, so budgets
    here are seconds long: a wait that uses one ends at once in practice."""

    def __init__(self):
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance_to(self, moment: float) -> None:
        with self.lock:
            self.now = max(self.now, moment)


class RecordingEndpoint:
    """The RightsEndpoint port in memory: answers from a script, records calls (thread-safe)."""

    def __init__(self, answer):
        self.answer = answer
        self.calls: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def post(self, url, body, headers, deadline):
        with self.lock:
            self.calls.append((url, json.loads(body)))
        return self.answer(url, json.loads(body), deadline)


def external(name, url="https://rights.example/check", timeout=0.3):
    return Collection(
        id=name,
        embedding_model="hash:8",
        rights_check_method="external",
        rights_check_method_configuration={"url": url, "timeout": timeout},
    )


@pytest.fixture
def secrets(tmp_path):
    return FileSecretStore(tmp_path / "secrets")


def checks_with(secrets, answer, sleeps=None, **kwargs):
    sleep = time.sleep if sleeps is None else sleeps.append
    return RightsChecks(
        RightsUrlPolicy.for_backend("aws", None), secrets, RecordingEndpoint(answer), sleep=sleep, **kwargs
    )


def test_public_collections_need_no_call(secrets):
    checks = checks_with(secrets, lambda *a: pytest.fail("no call expected"))
    session = checks.session("t", [Collection(id="pub", embedding_model="hash:8")])
    assert session.allowed("ann", {"pub": ["a", "b"]}) == {"pub": {"a", "b"}}
    assert session.warnings == []


def test_no_secret_denies_with_a_warning_and_no_call(secrets):
    sleeps = []
    checks = checks_with(secrets, lambda *a: pytest.fail("no call without a secret"), sleeps)
    session = checks.session("t", [external("ext")])
    assert session.allowed("ann", {"ext": ["a"]}) == {"ext": set()}
    assert session.allowed("ann", {"ext": ["b"]}) == {"ext": set()}
    # Then one warning names the route that creates the secret; nothing is padded (no network was touched)
    assert [(w.collection, w.code) for w in session.warnings] == [("ext", SECRET_MISSING)]
    assert "POST /v1/rights-check-secret" in session.warnings[0].message
    assert sleeps == []


@pytest.mark.parametrize(
    "answer",
    [
        lambda *a: (_ for _ in ()).throw(RightsCallFailed("connect")),
        lambda *a: (_ for _ in ()).throw(RightsCallFailed("refused", "never")),
        lambda *a: (500, b""),
        lambda *a: (200, b"[]"),
        lambda *a: (_ for _ in ()).throw(RuntimeError("anything unforeseen")),
    ],
)
def test_a_failed_call_denies_warns_once_and_costs_its_whole_budget(secrets, answer):
    secrets.put_secret(rights_secret_name("t"), b"s")
    sleeps = []
    clock = FakeClock()

    def after_a_while(*args):
        clock.advance_to(clock() + 2.5)  # the failed call took 2.5 s of its 8 s budget
        return answer(*args)

    checks = checks_with(secrets, after_a_while, sleeps, clock=clock)
    session = checks.session("t", [external("ext", timeout=8.0)])
    assert session.allowed("ann", {"ext": ["a", "b"]}) == {"ext": set()}
    # Then the query is told, without any address or cause in the message
    assert [(w.collection, w.code) for w in session.warnings] == [("ext", CHECK_FAILED)]
    assert "rights.example" not in session.warnings[0].message
    # And the call is padded to its deadline (2.5 s spent, 5.5 s slept), so a closed port answers as late as a
    # filtered one
    assert sleeps == [pytest.approx(5.5)]
    # And a later over-fetch round neither calls again nor warns twice
    calls = len(checks.endpoint.calls)
    assert session.allowed("ann", {"ext": ["c"]}) == {"ext": set()}
    assert len(checks.endpoint.calls) == calls and len(session.warnings) == 1


def test_a_valid_denial_is_no_failure(secrets):
    secrets.put_secret(rights_secret_name("t"), b"s")
    sleeps = []
    checks = checks_with(secrets, lambda url, body, deadline: (200, b'{"a": true, "b": false}'), sleeps)
    session = checks.session("t", [external("ext")])
    assert session.allowed("ann", {"ext": ["a", "b", "c"]}) == {"ext": {"a"}}
    assert session.warnings == [] and sleeps == []


def test_one_budget_for_the_query_and_calls_in_parallel(secrets):
    secrets.put_secret(rights_secret_name("t"), b"s")
    clock = FakeClock()
    sleeps: list[float] = []
    all_five_out = threading.Barrier(5, timeout=30)
    deadlines: list[float] = []
    in_flight = {"now": 0, "max": 0}

    def slow_until_deadline(url, body, deadline):
        with checks.endpoint.lock:
            deadlines.append(deadline)
            in_flight["now"] += 1
            in_flight["max"] = max(in_flight["max"], in_flight["now"])
        if deadline > clock():
            all_five_out.wait()  # calls made one after another would never all be out at once
            clock.advance_to(deadline)  # each answers only when its deadline has come
        with checks.endpoint.lock:
            in_flight["now"] -= 1
        raise RightsCallFailed("timeout")

    checks = checks_with(secrets, slow_until_deadline, sleeps, clock=clock)
    session = checks.session("t", [external(f"c{i}", timeout=4.0) for i in range(5)])
    started = clock()
    verdicts = session.allowed("ann", {f"c{i}": ["a"] for i in range(5)})
    # Then the five calls were out at once, all with the deadline of the query's one budget
    assert verdicts == {f"c{i}": set() for i in range(5)}
    assert in_flight["max"] == 5 and deadlines == [started + 4.0] * 5
    # And five slow collections cost one budget, not five: the query ends at that deadline, with nothing to pad
    assert clock() == started + 4.0 and sleeps == [0.0]
    assert sorted(w.collection for w in session.warnings) == [f"c{i}" for i in range(5)]
    # And a later round of the same query has no budget left: it fails at once, its call given a deadline already
    # passed (the HTTP endpoint then makes no connection), with nothing to wait for
    fresh = checks.session("t", [external("late", timeout=4.0)])
    fresh._started = clock() - 5
    assert fresh.allowed("ann", {"late": ["a"]}) == {"late": set()}
    assert deadlines[-1] < clock() == started + 4.0 and sleeps == [0.0, 0.0]
    assert fresh.warnings[0].code == CHECK_FAILED


def test_save_checks_policy_then_secret(secrets):
    checks = checks_with(secrets, lambda *a: pytest.fail("saving never calls"))
    checks.check_collection("t", Collection(id="pub", embedding_model="hash:8"))  # public: nothing to check
    with pytest.raises(InvalidInput, match=r"rights_check_method_configuration\.url: .*https"):
        checks.check_collection("t", external("ext", url="http://rights.example/check"))
    with pytest.raises(InvalidInput, match="link-local"):
        checks.check_collection("t", external("ext", url="https://169.254.169.254/"))
    with pytest.raises(Conflict, match="POST /v1/rights-check-secret"):
        checks.check_collection("t", external("ext"))
    secrets.put_secret(rights_secret_name("t"), b"s")
    checks.check_collection("t", external("ext"))
    # the secret is the tenant's own: another tenant still has none
    with pytest.raises(Conflict):
        checks.check_collection("u", external("ext"))
