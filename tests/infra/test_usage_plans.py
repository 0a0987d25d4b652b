"""Per-tenant throttling in the synthesized template: API keys from the authorizer, one usage plan per configured
plan, the operator's key-provisioning policy, and the output `kindex keys` reads the plans from.

Synthesized once with two named plans on top of cdk.json, so the overrides are in the template under test."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Annotations, Match

from infra import build_app
from infra.config import ConfigError, StackConfig
from kindex.domain.usage_plans import UsagePlans
from kindex.settings import load_settings
from tests.infra.test_stack import cdk_json_context, function_id, of_type, placeholder_layers, statements

pytestmark = pytest.mark.infra

NAMED_PLANS = {
    "gold": {"rate_limit": 200, "burst_limit": 400, "quota_per_day": 5_000_000, "tenants": ["acme", "globex"]},
    "trial": {
        "rate_limit": 2,
        "burst_limit": 5,
        "quota_per_day": 1_000,
        "quotas": {"documents": 100, "bytes": 10_000_000},
        "tenants": ["initech"],
    },
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    root = tmp_path_factory.mktemp("plans")
    context = {
        **cdk_json_context(),
        "layer_build_dir": str(placeholder_layers(root / "layers")),
        "stage": "prod",
        "api_usage_plans": NAMED_PLANS,
        "api_quota_per_day": 100_000,
        "api_quotas": {"documents": 100_000, "chunks": 2_000_000, "collections": 100},
    }
    app, stack = build_app(context=context, outdir=str(root / "cdk.out"))
    app.synth()
    from aws_cdk.assertions import Template

    return stack, Template.from_stack(stack).to_json()


@pytest.fixture(scope="module")
def resources(synthesized):
    return synthesized[1]["Resources"]


def plans_by_name(resources: dict) -> dict[str, tuple[str, dict]]:
    return {
        plan["Properties"]["UsagePlanName"]: (lid, plan["Properties"])
        for lid, plan in of_type(resources, "AWS::ApiGateway::UsagePlan").items()
    }


def test_api_keys_come_from_the_authorizer_and_every_keyed_method_requires_one(resources):
    [api] = of_type(resources, "AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["ApiKeySourceType"] == "AUTHORIZER"
    methods = {
        f"{m['Properties']['HttpMethod']} {m['Properties']['ResourceId']}": m["Properties"]
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
    }
    keyed = [props for props in methods.values() if props["AuthorizationType"] == "CUSTOM"]
    public = [props for props in methods.values() if props["AuthorizationType"] == "NONE"]
    from kindex.api.routes import PUBLIC_ROUTES

    assert len(keyed) > 10 and len(public) == sum(len(methods) for methods in PUBLIC_ROUTES.values())
    assert all(props["ApiKeyRequired"] is True for props in keyed)
    # The public docs and console have no authorizer to name a key: requiring one would make them unreachable.
    assert not any(props.get("ApiKeyRequired") for props in public)


def test_each_configured_plan_is_a_usage_plan_of_the_stage_with_its_throttle_and_daily_quota(resources):
    plans = plans_by_name(resources)
    assert set(plans) == {"kindex-prod", "kindex-prod-gold", "kindex-prod-trial"}
    context = cdk_json_context()
    expected = {
        "kindex-prod": (context["api_rate_limit"], context["api_burst_limit"], 100_000),
        "kindex-prod-gold": (200, 400, 5_000_000),
        "kindex-prod-trial": (2, 5, 1_000),
    }
    [api_id] = of_type(resources, "AWS::ApiGateway::RestApi")
    [stage_id] = of_type(resources, "AWS::ApiGateway::Stage")
    for name, (rate, burst, quota) in expected.items():
        props = plans[name][1]
        assert props["Throttle"] == {"RateLimit": rate, "BurstLimit": burst}, name
        assert props["Quota"] == {"Limit": quota, "Period": "DAY"}, name
        assert props["ApiStages"] == [{"ApiId": {"Ref": api_id}, "Stage": {"Ref": stage_id}, "Throttle": {}}], name


def test_without_a_quota_the_plan_has_none_and_enforcement_can_be_off_for_an_upgrade(tmp_path):
    """Given api_enforce_usage_plans=false (as `-c` text), Then no method requires a key (stage limits only), while
    the plans and the authorizer's identifiers are in place for `kindex keys sync-plans`."""
    context = {
        **cdk_json_context(),
        "layer_build_dir": str(placeholder_layers(tmp_path / "layers")),
        "api_enforce_usage_plans": "false",
    }
    app, stack = build_app(context=context, outdir=str(tmp_path / "out"), checks=False)
    from aws_cdk.assertions import Template

    resources = Template.from_stack(stack).to_json()["Resources"]
    [plan] = of_type(resources, "AWS::ApiGateway::UsagePlan").values()
    assert "Quota" not in plan["Properties"]
    methods = of_type(resources, "AWS::ApiGateway::Method").values()
    assert not any(m["Properties"].get("ApiKeyRequired") for m in methods)
    [api] = of_type(resources, "AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["ApiKeySourceType"] == "AUTHORIZER"


def test_enforcement_must_be_a_boolean():
    context = {**cdk_json_context(), "api_enforce_usage_plans": "sometimes"}
    with pytest.raises(ConfigError, match="api_enforce_usage_plans must be true or false"):
        StackConfig.from_context(context.get)


def test_gateway_errors_for_throttling_quota_and_a_tenant_without_a_plan_are_json(resources):
    responses = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in of_type(resources, "AWS::ApiGateway::GatewayResponse").values()
    }
    throttled = responses["THROTTLED"]
    assert throttled["StatusCode"] == "429" and throttled["ResponseParameters"] == {
        "gatewayresponse.header.Retry-After": "'1'"
    }
    assert json.loads(throttled["ResponseTemplates"]["application/json"])["error"] == "throttled"
    assert responses["QUOTA_EXCEEDED"]["StatusCode"] == "429"
    assert json.loads(responses["QUOTA_EXCEEDED"]["ResponseTemplates"]["application/json"])["error"] == "quota_exceeded"
    invalid = responses["INVALID_API_KEY"]
    assert invalid["StatusCode"] == "403"
    assert json.loads(invalid["ResponseTemplates"]["application/json"])["error"] == "no_usage_plan"


def test_only_the_authorizer_gets_the_usage_identifier_scope_and_no_function_may_call_api_gateway(resources):
    functions = of_type(resources, "AWS::Lambda::Function")
    authorizer = functions[function_id(resources, "authorizer")]
    assert authorizer["Properties"]["Environment"]["Variables"]["KINDEX_GATEWAY_KEY_SCOPE"] == "kindex-prod"
    others = [f for lid, f in functions.items() if lid != function_id(resources, "authorizer")]
    assert all(
        "KINDEX_GATEWAY_KEY_SCOPE" not in (f["Properties"].get("Environment") or {}).get("Variables", {})
        for f in others
    )
    for name in ("api", "query", "ingest", "authorizer", "reindex"):
        actions = [a for s in statements(resources, name) for a in _list(s["Action"])]
        assert not any(a.startswith("apigateway:") for a in actions), name


def _list(value):
    return value if isinstance(value, list) else [value]


def _arn_text(resource) -> str:
    """An ARN built with Fn::Join as text, with each reference shown as <Ref:id>."""
    if isinstance(resource, str):
        return resource
    if "Fn::GetAtt" in resource:
        return "<GetAtt:{}.{}>".format(*resource["Fn::GetAtt"])
    parts = resource["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else f"<Ref:{p.get('Ref', p)}>" for p in parts)


def test_the_key_provisioning_policy_reaches_only_this_apis_plans_and_the_key_items(resources):
    [policy] = of_type(resources, "AWS::IAM::ManagedPolicy").values()
    granted = {}
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        for action in _list(statement["Action"]):
            granted.setdefault(action, []).append(
                ([_arn_text(r) for r in _list(statement["Resource"])], statement.get("Condition"))
            )
    assert set(granted) == {
        "apigateway:GET",
        "apigateway:POST",
        "apigateway:DELETE",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
    }
    plan_ids = {lid for lid, _ in plans_by_name(resources).values()}
    apigateway = "arn:<Ref:AWS::Partition>:apigateway:<Ref:AWS::Region>::"
    gets = {r for resources_, _ in granted["apigateway:GET"] for r in resources_}
    assert gets == {f"{apigateway}/apikeys", f"{apigateway}/usageplans"}
    posts = {r for resources_, _ in granted["apigateway:POST"] for r in resources_}
    assert posts == {f"{apigateway}/apikeys"} | {f"{apigateway}/usageplans/<Ref:{p}>/keys" for p in plan_ids}
    deletes = {r for resources_, _ in granted["apigateway:DELETE"] for r in resources_}
    assert deletes == {f"{apigateway}/usageplans/<Ref:{p}>/keys/*" for p in plan_ids}
    [table_id] = of_type(resources, "AWS::DynamoDB::Table")
    for action in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"):
        [(arns, condition)] = granted[action]
        assert arns == [f"<GetAtt:{table_id}.Arn>"]  # the table itself, no index
        assert condition == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["KEY#*", "KEYS", "T#*#KEYS"]}}


def test_the_usage_plans_output_is_what_kindex_keys_reads(synthesized, resources):
    """Given the UsagePlans output with its references resolved to ids, When the CLI's settings read it, Then every
    plan has its usage plan id, the scope is the authorizer's, and the tenants are in their plans."""
    template = synthesized[1]
    value = template["Outputs"]["UsagePlans"]["Value"]
    parts = value["Fn::Join"][1] if isinstance(value, dict) else [value]
    text = "".join(p if isinstance(p, str) else f"id{p['Ref']}"[:60].replace("UsagePlan", "") for p in parts)
    settings = load_settings(
        {"KINDEX_BACKEND": "aws", "KINDEX_TABLE_NAME": "t", "KINDEX_BUCKET_NAME": "b", "KINDEX_USAGE_PLANS": text}
    )
    plans = settings.plans
    assert isinstance(plans, UsagePlans) and plans.scope == "kindex-prod"
    ids = plans.plan_ids()
    assert ids is not None and set(ids) == {"default", "gold", "trial"} and len(set(ids.values())) == 3
    assert plans.plan_for("globex")[0] == "gold" and plans.plan_for("initech")[0] == "trial"
    assert plans.plan_for("someone-else") == ("default", plans.default)
    assert plans.default.quota_per_day == 100_000


def test_the_stack_with_named_plans_passes_cdk_nag(synthesized):
    errors = Annotations.from_stack(synthesized[0]).find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert errors == []


@pytest.mark.parametrize(
    ("plans", "extra", "message"),
    [
        (
            {
                "gold": {"rate_limit": 1, "burst_limit": 1, "tenants": ["a"]},
                "silver": {"rate_limit": 1, "burst_limit": 1, "tenants": ["a"]},
            },
            {},
            "in two plans",
        ),
        ({"default": {"rate_limit": 1, "burst_limit": 1, "tenants": ["a"]}}, {}, "plan name"),
        ({"Gold Plan": {"rate_limit": 1, "burst_limit": 1}}, {}, "plan name"),
        ({"gold": {"rate_limit": 900, "burst_limit": 10, "tenants": ["a"]}}, {}, "exceeds the stage"),
        ({}, {"api_rate_limit": 600}, "exceeds the stage"),
        ({"gold": {"rate_limit": 0, "burst_limit": 1}}, {}, "greater than 0"),
        ({"gold": {"rate_limit": 1, "burst_limit": 1, "tenants": ["a/b"]}}, {}, "must not contain '/'"),
        ({"gold": {"rate_limit": 1, "burst_limit": 1, "rate": 5}}, {}, "Extra inputs"),
        ({"gold": {"rate_limit": 1, "burst_limit": 1, "id": "abc"}}, {}, "assigns the ids"),
        ("{not json", {}, "not JSON"),
        (["gold"], {}, "must map plan names"),
    ],
)
def test_plans_the_runtime_would_refuse_stop_the_synth(plans, extra, message):
    context = {**cdk_json_context(), "api_usage_plans": plans, **extra}
    with pytest.raises(ConfigError, match=message):
        StackConfig.from_context(context.get)


def test_plans_given_on_the_command_line_as_json_text_are_read():
    context = {**cdk_json_context(), "api_usage_plans": json.dumps(NAMED_PLANS)}
    config = StackConfig.from_context(context.get)
    assert config.usage_plans.plan_for("acme")[0] == "gold"


def test_the_functions_that_enforce_quotas_read_the_plans_with_their_quotas(resources):
    # Given each function's environment
    env = {
        name: resources[function_id(resources, name)]["Properties"]["Environment"]["Variables"]
        for name in ("api", "query", "ingest", "authorizer", "reindex", "reindexworker")
    }
    # Then exactly the api (writes, uploads, imports) and the ingest (a document's chunks) get KINDEX_USAGE_PLANS
    assert {name for name, e in env.items() if "KINDEX_USAGE_PLANS" in e} == {"api", "ingest"}
    # And what they read is the plans with each plan's quotas, as the runtime parses them
    plans = UsagePlans.model_validate_json(env["api"]["KINDEX_USAGE_PLANS"])
    assert plans.quota_limits("someone").quotas.model_dump() == {
        "documents": 100_000,
        "chunks": 2_000_000,
        "bytes": None,
        "collections": 100,
    }
    assert plans.quota_limits("initech").plan == "trial"
    assert plans.quota_limits("initech").quotas.bytes == 10_000_000
    assert env["ingest"]["KINDEX_USAGE_PLANS"] == env["api"]["KINDEX_USAGE_PLANS"]


def test_plans_too_large_for_a_function_environment_are_refused_at_synth():
    # Given a named plan listing so many tenants that the plans outgrow Lambda's 4 KB environment
    many = {"big": {"rate_limit": 5, "burst_limit": 5, "tenants": [f"tenant-{n:05d}" for n in range(400)]}}
    # When the stack's configuration is read / Then ConfigError says why
    with pytest.raises(ConfigError, match="Lambda allows 4 KB"):
        StackConfig.from_context({**cdk_json_context(), "api_usage_plans": many}.get)
