"""Contract of the UsagePlanKeys port: what every adapter (API Gateway, the tests' in-memory one) must do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kindex.domain.errors import NotFound

if TYPE_CHECKING:
    from kindex.domain.ports import UsagePlanKeys

PLANS = ("default", "gold", "trial")


class UsagePlanKeysContract:
    """Subclass in a `Test*` class that provides `plan_keys`: a UsagePlanKeys over the plans PLANS, with no keys."""

    @pytest.fixture
    def plan_keys(self) -> UsagePlanKeys:
        raise NotImplementedError(f"{type(self).__name__} must provide the `plan_keys` fixture")

    def test_a_tenant_without_a_key_is_in_no_plan(self, plan_keys):
        assert plan_keys.attached_plan("acme") is None

    def test_attaching_creates_the_key_once_and_is_idempotent(self, plan_keys):
        assert plan_keys.attach("acme", "gold") is True
        assert plan_keys.attached_plan("acme") == "gold"
        assert plan_keys.attach("acme", "gold") is False
        assert plan_keys.attached_plan("acme") == "gold"

    def test_moving_a_tenant_leaves_it_in_the_new_plan_only(self, plan_keys):
        plan_keys.attach("acme", "gold")
        assert plan_keys.attach("acme", "trial") is True
        assert plan_keys.attached_plan("acme") == "trial"
        assert plan_keys.attach("acme", "default") is True
        assert plan_keys.attached_plan("acme") == "default"

    def test_tenants_are_independent_even_when_their_ids_look_alike(self, plan_keys):
        tenants = {"acme": "gold", "Acme": "trial", "a#b": "default", "a%23b": "gold", "тенант": "trial"}
        for tenant, plan in tenants.items():
            plan_keys.attach(tenant, plan)
        plan_keys.attach("acme", "default")
        assert {tenant: plan_keys.attached_plan(tenant) for tenant in tenants} == {**tenants, "acme": "default"}

    def test_a_plan_the_deployment_does_not_have_is_not_found_and_changes_nothing(self, plan_keys):
        with pytest.raises(NotFound):
            plan_keys.attach("acme", "platinum")
        assert plan_keys.attached_plan("acme") is None
