"""Usage plans: which plan a tenant is on, its usage identifier, the local per-tenant token buckets, and key creation
putting the tenant into its plan before the key exists."""

from __future__ import annotations

import threading

import pytest
from pydantic import ValidationError

from kindex.app.keys import KeyService
from kindex.app.usage_plans import UsagePlanService
from kindex.domain.errors import DependencyFailed
from kindex.domain.usage_identifier import usage_identifier, usage_key_name
from kindex.domain.usage_plans import UsagePlans
from kindex.settings import SettingsError, load_settings
from kindex_local.throttle import TenantThrottle
from tests.support.usage_plan_keys import MemoryUsagePlanKeys

pytestmark = pytest.mark.unit

PLANS = UsagePlans.model_validate(
    {
        "default": {"rate_limit": 10, "burst_limit": 20},
        "plans": {
            "trial": {"rate_limit": 2, "burst_limit": 3, "quota_per_day": 5, "tenants": ["initech"]},
            "gold": {"rate_limit": 100, "burst_limit": 200, "tenants": ["acme", "Acme"]},
        },
    }
)


class FakeClock:
    def __init__(self, now: float = 1_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_tenant_is_on_the_plan_that_names_it_and_otherwise_on_the_default():
    assert PLANS.plan_for("initech")[0] == "trial"
    assert PLANS.plan_for("acme")[0] == "gold" and PLANS.plan_for("Acme")[0] == "gold"
    # Ids are exact: no case folding, no prefix match.
    assert PLANS.plan_for("ACME") == ("default", PLANS.default)
    assert PLANS.plan_for("initech2") == ("default", PLANS.default)
    assert PLANS.plan_ids() is None  # no ids: local plans


@pytest.mark.parametrize(
    "document",
    [
        {
            "default": {"rate_limit": 1, "burst_limit": 1},
            "plans": {
                "a": {"rate_limit": 1, "burst_limit": 1, "tenants": ["t"]},
                "b": {"rate_limit": 1, "burst_limit": 1, "tenants": ["t"]},
            },
        },
        {"default": {"rate_limit": 0, "burst_limit": 1}},
        {"default": {"rate_limit": 1, "burst_limit": 1, "quota_per_day": -1}},
        {"default": {"rate_limit": 1, "burst_limit": 1}, "plans": {"default": {"rate_limit": 1, "burst_limit": 1}}},
        {"default": {"rate_limit": 1, "burst_limit": 1}, "plans": {"UPPER": {"rate_limit": 1, "burst_limit": 1}}},
        {
            "default": {"rate_limit": 1, "burst_limit": 1},
            "plans": {"a": {"rate_limit": 1, "burst_limit": 1, "tenants": ["x/y"]}},
        },
        {"default": {"rate_limit": 1, "burst_limit": 1, "burst": 5}},
        {"plans": {}},
    ],
)
def test_plans_that_cannot_be_enforced_are_refused(document):
    with pytest.raises(ValidationError):
        UsagePlans.model_validate(document)


def test_the_setting_is_validated_at_start_and_names_the_variable():
    with pytest.raises(SettingsError, match="usage_plans"):
        load_settings({"KINDEX_USAGE_PLANS": '{"default": {"rate_limit": 1}}'})
    with pytest.raises(SettingsError, match="usage_plans"):
        load_settings({"KINDEX_USAGE_PLANS": "not json"})
    settings = load_settings({"KINDEX_USAGE_PLANS": PLANS.model_dump_json()})
    assert settings.plans == PLANS


def test_usage_identifiers_differ_per_tenant_and_per_stage_and_are_valid_api_key_values():
    tenants = ["acme", "Acme", "acme ", "a#b", "a%23b", "a=23b", "тенант", "x" * 255]
    values = {usage_identifier("kindex-prod", tenant) for tenant in tenants}
    assert len(values) == len(tenants)
    assert usage_identifier("kindex-prod", "acme") != usage_identifier("kindex-dev", "acme")
    assert usage_identifier("kindex-prod", "acme") == usage_identifier("kindex-prod", "acme")  # stable
    for value in values:
        assert value.isascii() and value.isalnum() and 20 <= len(value) <= 128
    assert len({usage_key_name("kindex-prod", tenant) for tenant in tenants}) == len(tenants)
    # A scope and tenant cannot be shifted into each other ("a" + "\0b" vs "a\0" + "b").
    assert usage_identifier("kindex-a", "b") != usage_identifier("kindex-", "ab")


def test_a_tenant_gets_its_burst_then_429_with_retry_after_while_another_tenant_is_unaffected():
    clock = FakeClock()
    throttle = TenantThrottle(PLANS, clock=clock, wall=lambda: 0.0)
    admitted = [throttle.admit("initech") is None for _ in range(10)]
    assert admitted == [True] * 3 + [False] * 7  # burst 3
    refusal = throttle.admit("initech")
    assert refusal.code == "throttled" and refusal.retry_after_seconds == 1
    assert all(throttle.admit("globex") is None for _ in range(20))  # default plan: burst 20, its own bucket
    assert throttle.admit("globex") is not None
    clock.now += 0.5  # 2/s: one token back
    assert throttle.admit("initech") is None and throttle.admit("initech") is not None


def test_retry_after_is_the_time_until_a_token_rounded_up():
    plans = UsagePlans.model_validate({"default": {"rate_limit": 0.1, "burst_limit": 1}})
    clock = FakeClock()
    throttle = TenantThrottle(plans, clock=clock)
    assert throttle.admit("t") is None
    assert throttle.admit("t").retry_after_seconds == 10
    clock.now += 7.5
    assert throttle.admit("t").retry_after_seconds == 3


def test_the_bucket_never_holds_more_than_the_burst_after_idling():
    clock = FakeClock()
    throttle = TenantThrottle(PLANS, clock=clock, wall=lambda: 0.0)
    clock.now += 3600
    assert sum(throttle.admit("acme") is None for _ in range(500)) == 200


def test_the_daily_quota_refuses_until_the_next_utc_day():
    clock, wall = FakeClock(), FakeClock(86_400 * 20_000 + 86_000.0)  # 400 s before midnight UTC
    throttle = TenantThrottle(PLANS, clock=clock, wall=wall)
    used = 0
    for _ in range(20):
        clock.now += 1.0  # plenty of tokens: only the quota refuses
        used += throttle.admit("initech") is None
    assert used == 5
    refusal = throttle.admit("initech")
    assert refusal.code == "quota_exceeded" and refusal.retry_after_seconds == 400
    wall.now += 400  # a new UTC day
    clock.now += 1.0
    assert throttle.admit("initech") is None


def test_concurrent_requests_of_one_tenant_never_get_more_than_the_burst():
    """Given a frozen clock, When 16 threads race for one tenant's tokens, Then exactly the burst is admitted."""
    throttle = TenantThrottle(PLANS, clock=FakeClock(), wall=lambda: 0.0)
    admitted: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def client() -> None:
        start.wait()
        results = [throttle.admit("acme") is None for _ in range(50)]
        with lock:
            admitted.extend(results)

    threads = [threading.Thread(target=client) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 800 and sum(admitted) == 200


class MemoryKeyStore:
    def __init__(self):
        self.keys = {}

    def put_key(self, key):
        self.keys[key.key_id] = key

    def get_key(self, key_id):
        return self.keys.get(key_id)

    def list_keys(self, tenant=None):
        return [k for k in self.keys.values() if tenant is None or k.tenant == tenant]

    def revoke_key(self, key_id):
        return False


def test_creating_a_key_puts_the_tenant_into_its_plan_first():
    plan_keys, store = MemoryUsagePlanKeys(PLANS.all_plans()), MemoryKeyStore()
    keys = KeyService(store, UsagePlanService(PLANS, plan_keys))
    keys.create("initech", "query")
    keys.create("globex", "admin")
    assert plan_keys.attached == {"initech": "trial", "globex": "default"}
    assert keys.tenants() == ["initech", "globex"]


def test_when_the_plan_cannot_be_assigned_no_key_is_stored():
    store = MemoryKeyStore()
    failing = MemoryUsagePlanKeys(PLANS.all_plans(), fail=DependencyFailed("API Gateway down"))
    keys = KeyService(store, UsagePlanService(PLANS, failing))
    with pytest.raises(DependencyFailed):
        keys.create("acme", "admin")
    assert store.keys == {}


def test_assign_all_visits_each_tenant_once_and_reports_what_changed():
    plan_keys = MemoryUsagePlanKeys(PLANS.all_plans())
    plan_keys.attached["acme"] = "default"  # configured into gold since
    service = UsagePlanService(PLANS, plan_keys)
    assert service.assign_all(["acme", "globex", "acme"]) == [("acme", "gold", True), ("globex", "default", True)]
    assert service.assign_all(["acme", "globex"]) == [("acme", "gold", False), ("globex", "default", False)]
