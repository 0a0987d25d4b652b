"""Stack configuration: every knob comes from cdk.json context, validated once before any construct is built."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kindex.adapters.aws.opensearch_design import IndexDesign
from kindex.domain.usage_plans import UsagePlans
from kindex.settings import ENV_NAMES

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LAYER_BUILD_DIR = REPO_ROOT / "build" / "layers"

# API Gateway passes at most 10 MB, and a synchronous Lambda invocation carries at most 6 MB of event:
# below that the functions answer 413 themselves (KINDEX_MAX_BODY_BYTES) instead of failing with a 502.
DEFAULT_MAX_BODY_BYTES = 5 * 1024 * 1024

CONTEXT_DEFAULTS: dict[str, Any] = {
    "stage": "dev",
    "opensearch_instance_type": "t3.small.search",
    "opensearch_instance_count": 1,
    "opensearch_volume_gib": 10,
    "opensearch_engine_version": "2.19",
    "opensearch_existing_endpoint": "",
    "opensearch_existing_domain_arn": "",
    # The index design (docs/scale.md), passed to the functions' environment; read when an index is created.
    "opensearch_engine": "faiss",
    "opensearch_shards": 1,
    "opensearch_replicas": "",  # unset: 0 on the stack's own one-node domain, else 1
    "opensearch_routing_shards": 0,
    "opensearch_routing_partition_size": 1,
    "opensearch_hnsw_m": 16,
    "opensearch_ef_construction": 128,
    "opensearch_ef_search": 100,
    "opensearch_compression": "none",
    "opensearch_refresh_interval": "1s",
    "opensearch_refresh": "wait_for",
    # The vector size the domain's capacity is computed for (the synth prints it in chunks; a stack output carries
    # it): the default model's, openai:text-embedding-3-small.
    "opensearch_capacity_dimensions": 1536,
    "reindex_schedule": "rate(1 hour)",
    # 0: no reserved concurrency for the reindex planner (a new account's concurrency quota of 10 cannot reserve any:
    # Lambda keeps 100 unreserved). 1: at most one plan runs at a time, for accounts whose quota allows it.
    "reindex_planner_reserved_concurrency": 0,
    # Per tenant: the default usage plan (requests per second, burst, requests per UTC day; 0 = no quota) and named
    # plans for the tenants they list: {"<name>": {"rate_limit", "burst_limit", "quota_per_day"?, "tenants": [...]}}.
    "api_rate_limit": 50,
    "api_burst_limit": 100,
    "api_quota_per_day": 0,
    "api_usage_plans": {},
    # The default plan's quotas per tenant (a named plan sets its own as "quotas"): {"documents", "chunks", "bytes",
    # "collections"}, a missing one being no limit. The api and ingest functions refuse writes past them (403).
    "api_quotas": {},
    # false: methods do not require the tenant's API key, so only the stage's limits apply. For upgrading a stack
    # deployed before per-tenant plans: deploy with false, run `kindex keys sync-plans`, then deploy with true.
    "api_enforce_usage_plans": True,
    # The whole API, every tenant together (the stage's throttling): what the functions and OpenSearch are sized for.
    "api_stage_rate_limit": 500,
    "api_stage_burst_limit": 1000,
    # How long API Gateway caches the authorizer's answer per Authorization header: a revoked key keeps working
    # this long. 0 turns the cache off (every request invokes the authorizer); API Gateway allows up to 3600.
    "api_authorizer_cache_seconds": 60,
    "max_body_bytes": DEFAULT_MAX_BODY_BYTES,
    "alarm_email": "",
    "layer_build_dir": "",
}


class ConfigError(ValueError):
    """The cdk.json context does not describe a deployable stack."""


@dataclass(frozen=True)
class StackConfig:
    """Validated context values (see docs/aws.md for what each one does)."""

    stage: str
    opensearch_instance_type: str
    opensearch_instance_count: int
    opensearch_volume_gib: int
    opensearch_engine_version: str
    opensearch_existing_endpoint: str
    opensearch_existing_domain_arn: str
    opensearch_index: IndexDesign
    opensearch_refresh: str
    opensearch_capacity_dimensions: int
    reindex_schedule: str
    reindex_planner_reserved_concurrency: int
    api_rate_limit: int
    api_burst_limit: int
    api_stage_rate_limit: int
    api_stage_burst_limit: int
    usage_plans: UsagePlans
    api_enforce_usage_plans: bool
    api_authorizer_cache_seconds: int
    max_body_bytes: int
    alarm_email: str
    layer_build_dir: Path

    @property
    def secrets_prefix(self) -> str:
        """Every secret the stack or the functions create is named under this prefix."""
        return f"kindex-{self.stage}"

    @property
    def uses_existing_domain(self) -> bool:
        return bool(self.opensearch_existing_endpoint)

    def search_environment(self) -> dict[str, str]:
        """The index design as the functions' settings read it (kindex.settings.ENV_NAMES)."""
        design = self.opensearch_index
        values = {
            "opensearch_engine": design.engine,
            "opensearch_shards": design.number_of_shards,
            "opensearch_replicas": design.number_of_replicas,
            "opensearch_routing_shards": design.number_of_routing_shards,
            "opensearch_routing_partition_size": design.routing_partition_size,
            "opensearch_hnsw_m": design.m,
            "opensearch_ef_construction": design.ef_construction,
            "opensearch_ef_search": design.ef_search,
            "opensearch_compression": design.compression,
            "opensearch_refresh_interval": design.refresh_interval,
            "opensearch_refresh": self.opensearch_refresh,
        }
        return {ENV_NAMES[name]: str(value) for name, value in values.items()}

    @classmethod
    def from_context(cls, lookup) -> StackConfig:
        """`lookup` is `node.try_get_context`; missing keys take CONTEXT_DEFAULTS."""
        raw = {key: _or_default(lookup(key), default) for key, default in CONTEXT_DEFAULTS.items()}
        stage = str(raw["stage"])
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,19}", stage):
            raise ConfigError("stage must be 1-20 lowercase letters, digits or dashes, starting with a letter")
        endpoint = str(raw["opensearch_existing_endpoint"]).strip()
        if endpoint and not endpoint.startswith("https://"):
            endpoint = "https://" + endpoint.removeprefix("http://")
        domain_arn = str(raw["opensearch_existing_domain_arn"]).strip()
        domain_arn_pattern = r"arn:aws[a-z-]*:es:[a-z0-9-]+:\d{12}:domain/[a-z][a-z0-9-]{2,27}"
        if endpoint and not re.fullmatch(domain_arn_pattern, domain_arn):
            raise ConfigError(
                "opensearch_existing_endpoint needs opensearch_existing_domain_arn "
                "(arn:aws:es:<region>:<account>:domain/<name>) to scope the functions' permissions"
            )
        schedule = str(raw["reindex_schedule"]).strip()
        if not re.fullmatch(r"(rate|cron|at)\(.+\)", schedule):
            raise ConfigError(
                "reindex_schedule must be an EventBridge Scheduler expression: rate(...), cron(...) or at(...)"
            )
        layer_dir = Path(raw["layer_build_dir"]) if raw["layer_build_dir"] else DEFAULT_LAYER_BUILD_DIR
        if not layer_dir.is_absolute():
            layer_dir = REPO_ROOT / layer_dir
        config = cls(
            opensearch_index=_index_design(raw, uses_existing_domain=bool(endpoint)),
            opensearch_refresh=_one_of(raw, "opensearch_refresh", ("wait_for", "false")),
            opensearch_capacity_dimensions=_positive_int(raw, "opensearch_capacity_dimensions"),
            stage=stage,
            opensearch_instance_type=str(raw["opensearch_instance_type"]),
            opensearch_instance_count=_positive_int(raw, "opensearch_instance_count"),
            opensearch_volume_gib=_positive_int(raw, "opensearch_volume_gib"),
            opensearch_engine_version=str(raw["opensearch_engine_version"]),
            opensearch_existing_endpoint=endpoint,
            opensearch_existing_domain_arn=domain_arn,
            reindex_schedule=schedule,
            reindex_planner_reserved_concurrency=_non_negative_int(raw, "reindex_planner_reserved_concurrency"),
            api_rate_limit=_positive_int(raw, "api_rate_limit"),
            api_burst_limit=_positive_int(raw, "api_burst_limit"),
            api_stage_rate_limit=_positive_int(raw, "api_stage_rate_limit"),
            api_stage_burst_limit=_positive_int(raw, "api_stage_burst_limit"),
            usage_plans=_usage_plans(raw),
            api_enforce_usage_plans=_bool(raw, "api_enforce_usage_plans"),
            api_authorizer_cache_seconds=_non_negative_int(raw, "api_authorizer_cache_seconds"),
            max_body_bytes=_positive_int(raw, "max_body_bytes"),
            alarm_email=str(raw["alarm_email"]).strip(),
            layer_build_dir=layer_dir,
        )
        if config.reindex_planner_reserved_concurrency > 1:
            raise ConfigError("reindex_planner_reserved_concurrency is 0 (none) or 1 (one plan at a time)")
        if config.api_authorizer_cache_seconds > 3600:
            raise ConfigError("api_authorizer_cache_seconds must be 0 to 3600 (API Gateway's range)")
        if config.max_body_bytes > 6 * 1024 * 1024:
            raise ConfigError("max_body_bytes above 6 MB cannot reach a synchronously invoked Lambda function")
        return config


# What the plans may take of a function's environment (Lambda allows 4 KB for all its variables).
MAX_PLANS_ENV_BYTES = 2500


def _json_object(raw: dict[str, Any], name: str) -> Any:
    """A context value that is a JSON object, given as one or as text (`-c name='{...}'`)."""
    value = raw[name]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{name} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object")
    return value


def _usage_plans(raw: dict[str, Any]) -> UsagePlans:
    """The plans as the runtime reads them (kindex.domain.usage_plans), validated at synth; no plan may exceed the
    stage's limits, which every tenant shares (a larger plan could never be reached)."""
    named = raw["api_usage_plans"]
    if isinstance(named, str):  # `-c api_usage_plans='{...}'` arrives as text
        try:
            named = json.loads(named)
        except json.JSONDecodeError as error:
            raise ConfigError(f"api_usage_plans is not JSON: {error}") from error
    if not isinstance(named, dict) or any(not isinstance(plan, dict) or "id" in plan for plan in named.values()):
        raise ConfigError(
            "api_usage_plans must map plan names to {rate_limit, burst_limit, quota_per_day?, quotas?, tenants} "
            "(the stack assigns the ids)"
        )
    try:
        plans = UsagePlans.model_validate(
            {
                "default": {
                    "rate_limit": _positive_int(raw, "api_rate_limit"),
                    "burst_limit": _positive_int(raw, "api_burst_limit"),
                    "quota_per_day": _non_negative_int(raw, "api_quota_per_day"),
                    "quotas": _json_object(raw, "api_quotas"),
                },
                "plans": named,
            }
        )
    except ValidationError as error:
        details = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'plans'}: {e['msg']}" for e in error.errors(include_url=False)
        )
        raise ConfigError(f"api_usage_plans: {details}") from error
    if len(plans.model_dump_json(exclude_none=True).encode()) > MAX_PLANS_ENV_BYTES:
        raise ConfigError(
            f"api_usage_plans is over {MAX_PLANS_ENV_BYTES} bytes as JSON: the api and ingest functions read it "
            "from KINDEX_USAGE_PLANS, and Lambda allows 4 KB of environment in all"
        )
    rate, burst = _positive_int(raw, "api_stage_rate_limit"), _positive_int(raw, "api_stage_burst_limit")
    for name, plan in plans.all_plans().items():
        if plan.rate_limit > rate or plan.burst_limit > burst:
            raise ConfigError(
                f"usage plan {name!r} ({plan.rate_limit:g}/s, burst {plan.burst_limit}) exceeds the "
                f"stage's api_stage_rate_limit/api_stage_burst_limit ({rate}/s, burst {burst})"
            )
    return plans


def _index_design(raw: dict[str, Any], *, uses_existing_domain: bool) -> IndexDesign:
    """The adapter's own validation (IndexDesign), run at synth; plus the replicas the domain can place."""
    nodes = _positive_int(raw, "opensearch_instance_count")
    replicas = raw["opensearch_replicas"]
    if replicas in ("", None):
        replicas = 0 if nodes == 1 and not uses_existing_domain else 1
    elif not uses_existing_domain and _non_negative_int({"r": replicas}, "r") >= nodes:
        # A replica never shares a node with its primary: the index would stay yellow forever.
        raise ConfigError(f"opensearch_replicas must be below opensearch_instance_count ({nodes})")
    try:
        return IndexDesign(
            engine=_one_of(raw, "opensearch_engine", ("faiss", "lucene")),
            number_of_shards=_positive_int(raw, "opensearch_shards"),
            number_of_replicas=_non_negative_int({"opensearch_replicas": replicas}, "opensearch_replicas"),
            number_of_routing_shards=_non_negative_int(raw, "opensearch_routing_shards"),
            routing_partition_size=_positive_int(raw, "opensearch_routing_partition_size"),
            m=_positive_int(raw, "opensearch_hnsw_m"),
            ef_construction=_positive_int(raw, "opensearch_ef_construction"),
            ef_search=_positive_int(raw, "opensearch_ef_search"),
            compression=str(raw["opensearch_compression"]),
            refresh_interval=str(raw["opensearch_refresh_interval"]),
        )
    except ValueError as error:
        raise ConfigError(f"OpenSearch index design: {error}") from error


def _one_of(raw: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = str(raw[key])
    if value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join(choices)}")
    return value


def _bool(raw: dict[str, Any], key: str) -> bool:
    value = raw[key]
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):  # `-c key=false` arrives as text
        return str(value).lower() == "true"
    raise ConfigError(f"{key} must be true or false")


def _non_negative_int(raw: dict[str, Any], key: str) -> int:
    try:
        value = int(raw[key])
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{key} must be an integer") from error
    if value < 0:
        raise ConfigError(f"{key} cannot be negative")
    return value


def _or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _positive_int(raw: dict[str, Any], key: str) -> int:
    try:
        value = int(raw[key])
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{key} must be an integer") from error
    if value <= 0:
        raise ConfigError(f"{key} must be positive")
    return value
