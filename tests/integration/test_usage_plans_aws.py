"""Per-tenant usage plans on the AWS backend, under moto: `kindex keys` puts each tenant's API Gateway key into its
plan (DynamoDB for the kindex keys, API Gateway for the usage plan keys), and the authorizer returns, for each
caller, exactly the value of its own tenant's key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from moto import mock_aws

from functions import authorizer
from kindex.adapters.aws import apigateway_usage_plans
from kindex.compose import container
from kindex.domain.usage_identifier import usage_identifier
from kindex.settings import AuthorizerSettings, load_settings
from tests.support.aws import BUCKET, TABLE, create_metadata_table, fake_aws_env, moto_client
from tests.support.aws_deployment import reset_process_caches

pytestmark = pytest.mark.integration

SCOPE = "kindex-prod"


@dataclass
class Deployment:
    apigateway: Any
    plan_ids: dict[str, str]
    monkeypatch: pytest.MonkeyPatch

    def configure(self, named: dict[str, list[str]]) -> None:
        """KINDEX_USAGE_PLANS as the stack outputs it, with `named` plans' tenants; a fresh process's container."""
        document = {
            "scope": SCOPE,
            "default": {"rate_limit": 50, "burst_limit": 100, "id": self.plan_ids["default"]},
            "plans": {
                name: {"rate_limit": 5, "burst_limit": 10, "tenants": tenants, "id": self.plan_ids[name]}
                for name, tenants in named.items()
            },
        }
        self.monkeypatch.setenv("KINDEX_USAGE_PLANS", json.dumps(document))
        reset_process_caches()

    def plan_key_values(self, plan: str) -> list[str]:
        return [key["value"] for key in self.apigateway.get_usage_plan_keys(usagePlanId=self.plan_ids[plan])["items"]]

    def api_keys(self) -> list[dict]:
        return self.apigateway.get_api_keys(includeValues=True)["items"]


@pytest.fixture
def deployment(monkeypatch) -> Iterator[Deployment]:
    fake_aws_env(monkeypatch)
    with mock_aws():
        create_metadata_table(moto_client("dynamodb"))
        apigateway = moto_client("apigateway")
        api_id = apigateway.create_rest_api(name=SCOPE, apiKeySource="AUTHORIZER")["id"]
        stage = [{"apiId": api_id, "stage": "prod"}]
        plan_ids = {
            name: apigateway.create_usage_plan(name=f"{SCOPE}-{name}", apiStages=stage)["id"]
            for name in ("default", "gold", "trial")
        }
        for name, value in {"KINDEX_BACKEND": "aws", "KINDEX_TABLE_NAME": TABLE, "KINDEX_BUCKET_NAME": BUCKET}.items():
            monkeypatch.setenv(name, value)
        apigateway_usage_plans.apigateway_client.cache_clear()
        deployment = Deployment(apigateway, plan_ids, monkeypatch)
        deployment.configure({"gold": ["acme"], "trial": []})
        try:
            yield deployment
        finally:
            reset_process_caches()
            apigateway_usage_plans.apigateway_client.cache_clear()


def authorize(token: str, scope: str | None = SCOPE) -> dict:
    event = {
        "type": "REQUEST",
        "headers": {"Authorization": f"Bearer {token}"},
        "methodArn": "arn:aws:execute-api:us-east-1:123456789012:abc/prod/GET/v1/collections",
    }
    return authorizer.handler(event, None, keys=container().keys, scope=scope)


def test_a_new_key_puts_its_tenant_into_its_plan_and_the_authorizer_names_that_key(deployment):
    _, acme_token = container().keys.create("acme", "admin")
    _, globex_token = container().keys.create("globex", "query")

    acme, globex = authorize(acme_token), authorize(globex_token)

    assert acme["usageIdentifierKey"] == usage_identifier(SCOPE, "acme")
    assert deployment.plan_key_values("gold") == [acme["usageIdentifierKey"]]
    assert deployment.plan_key_values("default") == [globex["usageIdentifierKey"]]
    assert deployment.plan_key_values("trial") == []
    assert acme["context"]["tenant"] == "acme" and globex["context"]["tenant"] == "globex"


def test_tenants_whose_ids_differ_only_in_case_or_escaping_get_keys_and_plans_of_their_own(deployment):
    tenants = ["acme", "Acme", "a#b", "a%23b", "a=23b", "тенант"]
    tokens = {tenant: container().keys.create(tenant, "reader")[1] for tenant in tenants}
    identifiers = {tenant: authorize(token)["usageIdentifierKey"] for tenant, token in tokens.items()}
    assert len(set(identifiers.values())) == len(tenants)
    assert deployment.plan_key_values("gold") == [identifiers["acme"]]  # only the exact id is in gold
    assert sorted(deployment.plan_key_values("default")) == sorted(v for t, v in identifiers.items() if t != "acme")
    assert len(deployment.api_keys()) == len(tenants)


def test_more_keys_for_a_tenant_reuse_its_one_api_gateway_key(deployment):
    tokens = [container().keys.create("acme", role)[1] for role in ("admin", "reader", "query")]
    assert {authorize(token)["usageIdentifierKey"] for token in tokens} == {usage_identifier(SCOPE, "acme")}
    assert len(deployment.api_keys()) == 1
    assert len(deployment.plan_key_values("gold")) == 1


def test_a_plan_change_in_configuration_takes_effect_with_sync_plans(deployment, capsys):
    """Given acme in gold and globex in default, When the configuration moves acme to trial and globex to gold and
    `kindex keys sync-plans` runs, Then each key is in its new plan only; a second run changes nothing."""
    from kindex_local.cli import main

    container().keys.create("acme", "admin")
    container().keys.create("globex", "admin")
    deployment.configure({"gold": ["globex"], "trial": ["acme"]})

    assert main(["keys", "sync-plans"]) == 0
    assert "acme\ttrial\tchanged" in capsys.readouterr().out
    assert deployment.plan_key_values("trial") == [usage_identifier(SCOPE, "acme")]
    assert deployment.plan_key_values("gold") == [usage_identifier(SCOPE, "globex")]
    assert deployment.plan_key_values("default") == []
    assert container().adapters.usage_plan_keys.attached_plan("acme") == "trial"

    assert main(["keys", "sync-plans"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 tenant(s), 0 changed"


def test_sync_plans_restores_a_key_someone_detached_or_deleted(deployment):
    container().keys.create("acme", "admin")
    [key] = deployment.api_keys()
    deployment.apigateway.delete_usage_plan_key(usagePlanId=deployment.plan_ids["gold"], keyId=key["id"])
    assert container().adapters.usage_plan_keys.attached_plan("acme") is None
    assert container().keys.usage_plans.assign("acme") == ("gold", True)
    assert deployment.plan_key_values("gold") == [usage_identifier(SCOPE, "acme")]
    # Deleting an API key takes it out of its plans (moto keeps the plan key, so detach it as AWS would).
    deployment.apigateway.delete_usage_plan_key(usagePlanId=deployment.plan_ids["gold"], keyId=key["id"])
    deployment.apigateway.delete_api_key(apiKey=key["id"])
    assert deployment.api_keys() == []
    assert container().keys.usage_plans.assign("acme") == ("gold", True)
    assert deployment.plan_key_values("gold") == [usage_identifier(SCOPE, "acme")]
    assert container().keys.usage_plans.assign("acme") == ("gold", False)


def test_without_the_stacks_plans_the_cli_creates_the_key_and_says_the_tenant_has_no_plan(deployment, capsys):
    from kindex_local.cli import main

    deployment.monkeypatch.delenv("KINDEX_USAGE_PLANS")
    reset_process_caches()
    assert main(["keys", "create", "--tenant", "acme", "--role", "admin"]) == 0
    captured = capsys.readouterr()
    assert "no_usage_plan" in captured.err and captured.out.strip().splitlines()[-1].startswith("kdx_")
    assert deployment.api_keys() == []
    assert main(["keys", "sync-plans"]) == 2
    assert "KINDEX_USAGE_PLANS" in capsys.readouterr().err


def test_the_authorizer_reads_its_scope_from_its_settings_and_returns_no_identifier_without_one(
    deployment, monkeypatch
):
    _, token = container().keys.create("acme", "admin")
    monkeypatch.setattr(
        authorizer,
        "SETTINGS",
        load_settings(
            {"KINDEX_BACKEND": "aws", "KINDEX_TABLE_NAME": TABLE, "KINDEX_GATEWAY_KEY_SCOPE": SCOPE},
            model=AuthorizerSettings,
        ),
    )
    assert authorize(token, scope=None)["usageIdentifierKey"] == usage_identifier(SCOPE, "acme")
    monkeypatch.setattr(
        authorizer,
        "SETTINGS",
        load_settings({"KINDEX_BACKEND": "aws", "KINDEX_TABLE_NAME": TABLE}, model=AuthorizerSettings),
    )
    assert "usageIdentifierKey" not in authorize(token, scope=None)


def test_a_revoked_or_bad_key_gets_no_identifier(deployment):
    key, token = container().keys.create("acme", "admin")
    container().keys.revoke(key.key_id)
    for bad in (token, token[:-1] + ("A" if token[-1] != "A" else "B"), "kdx_x_" + "y" * 43, ""):
        with pytest.raises(Exception, match="^Unauthorized$"):
            authorize(bad)


def test_a_key_an_operator_disabled_stays_disabled_through_sync_plans(deployment):
    container().keys.create("acme", "admin")
    [key] = deployment.api_keys()
    deployment.apigateway.update_api_key(
        apiKey=key["id"], patchOperations=[{"op": "replace", "path": "/enabled", "value": "false"}]
    )
    assert container().keys.usage_plans.assign("acme") == ("gold", False)
    [key] = deployment.api_keys()
    assert key["enabled"] is False


def test_sync_plans_refuses_a_tenant_id_that_cannot_exist(deployment, capsys):
    from kindex_local.cli import main

    assert main(["keys", "sync-plans", "--tenant", "a/b"]) == 2
    assert "tenant must not contain '/'" in capsys.readouterr().err
    assert deployment.api_keys() == []
