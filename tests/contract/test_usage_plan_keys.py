"""The UsagePlanKeys contract (tests/contract/mixins/usage_plan_keys.py) against API Gateway (moto) and the tests'
in-memory adapter, plus the API Gateway adapter's request building and error translation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.stub import Stubber
from moto import mock_aws

from kindex.adapters.aws.apigateway_usage_plans import ApiGatewayUsagePlanKeys, build_create_key_request
from kindex.domain.errors import DependencyFailed
from kindex.domain.usage_identifier import usage_identifier
from tests.contract.mixins.usage_plan_keys import PLANS, UsagePlanKeysContract
from tests.support.aws import fake_aws_env, moto_client
from tests.support.usage_plan_keys import MemoryUsagePlanKeys

pytestmark = pytest.mark.contract

SCOPE = "kindex-test"


class TestMemoryUsagePlanKeys(UsagePlanKeysContract):
    @pytest.fixture
    def plan_keys(self) -> MemoryUsagePlanKeys:
        return MemoryUsagePlanKeys(PLANS)


class TestApiGatewayUsagePlanKeys(UsagePlanKeysContract):
    @pytest.fixture
    def plan_keys(self, monkeypatch) -> Iterator[ApiGatewayUsagePlanKeys]:
        fake_aws_env(monkeypatch)
        with mock_aws():
            client = moto_client("apigateway")
            api_id = client.create_rest_api(name=SCOPE, apiKeySource="AUTHORIZER")["id"]
            ids = {
                name: client.create_usage_plan(name=f"{SCOPE}-{name}", apiStages=[{"apiId": api_id, "stage": "test"}])[
                    "id"
                ]
                for name in PLANS
            }
            # A usage plan of another API in the account: never touched, never reported.
            client.create_usage_plan(name="someone-elses")
            yield ApiGatewayUsagePlanKeys(SCOPE, ids, client=client)


def test_the_key_request_carries_the_derived_value_and_a_name_without_the_tenant_id():
    request = build_create_key_request(SCOPE, "a/b#c d")
    assert request["value"] == usage_identifier(SCOPE, "a/b#c d") and request["enabled"] is True
    assert request["name"].startswith(f"{SCOPE}-tenant-") and "a/b" not in request["name"]


def test_api_gateway_errors_become_dependency_failures_that_name_the_code_only(monkeypatch):
    fake_aws_env(monkeypatch)
    client = moto_client("apigateway")
    adapter = ApiGatewayUsagePlanKeys(SCOPE, {"default": "p1"}, client=client)
    with Stubber(client) as stub:
        stub.add_client_error(
            "get_api_keys",
            service_error_code="TooManyRequestsException",
            service_message=f"slow down {usage_identifier(SCOPE, 'acme')}",
            http_status_code=429,
        )
        with pytest.raises(DependencyFailed) as raised:
            adapter.attach("acme", "default")
    assert str(raised.value) == "API Gateway get_api_keys failed: TooManyRequestsException"


def test_a_concurrent_attach_to_another_plan_is_reported_not_ignored(monkeypatch):
    """Given the key is attached elsewhere between this run's read and its attach (API Gateway answers Conflict),
    Then the adapter does not claim success."""
    fake_aws_env(monkeypatch)
    client = moto_client("apigateway")
    adapter = ApiGatewayUsagePlanKeys(SCOPE, {"default": "p1", "gold": "p2"}, client=client)
    name, value = build_create_key_request(SCOPE, "acme")["name"], usage_identifier(SCOPE, "acme")
    key = {"id": "k1", "name": name, "value": value, "enabled": True}
    with Stubber(client) as stub:
        stub.add_response("get_api_keys", {"items": [key]})
        stub.add_response("get_usage_plans", {"items": []})
        stub.add_client_error("create_usage_plan_key", service_error_code="ConflictException", http_status_code=409)
        stub.add_response("get_usage_plans", {"items": [{"id": "p2"}]})
        with pytest.raises(DependencyFailed, match="another plan meanwhile"):
            adapter.attach("acme", "default")
