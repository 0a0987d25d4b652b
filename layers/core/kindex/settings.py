"""Deployment settings, read from the environment once and validated at cold start: `Settings` for local mode and
the CLI, and one model per Lambda function naming what that function cannot run without on AWS."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if TYPE_CHECKING:
    from kindex.domain.rights_policy import IPNetwork
    from kindex.domain.usage_plans import UsagePlans

from kindex.domain.embedding_models import EmbeddingModelName

LOCAL_DEFAULT_MODEL = "local:bge-small-en-v1.5-q"
AWS_DEFAULT_MODEL = "openai:text-embedding-3-small"
# What `{prefix}-{model}-{dims}-v1` needs to be a valid OpenSearch index name: lowercase, no `\/*?"<>| ,#:`,
# not starting with `-`, `_` or `+`.
SEARCH_INDEX_PREFIX = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


# The two variables the OpenAI SDK reads itself keep its names; every other setting is `KINDEX_<FIELD NAME>`.
UNPREFIXED = frozenset({"openai_api_key", "openai_base_url"})


def env_name(field: str) -> str:
    """The environment variable a setting is read from."""
    return field.upper() if field in UNPREFIXED else f"KINDEX_{field.upper()}"


def check_search_url(url: str) -> None:
    """An http(s) URL naming a host, with an optional port and `user:password@`, and nothing after the host: a
    path, query or fragment would be ignored by the client, so it is refused rather than silently dropped."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in 0-65535
    except ValueError as error:
        raise ValueError("the port is not a number from 0 to 65535") from error
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:9200")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("must name only the cluster (scheme, host, port), without a path, query or fragment")


class Settings(BaseModel):
    """Deployment settings. Local mode needs only `data_dir`; AWS mode needs the resource names. Validated from the
    environment by variable name (`env_name`), from code by field name."""

    # pydantic-settings does the same (an env prefix and aliases) but adds 50-150 ms to a function's cold import
    # (asyncio, dotenv, its CLI source): docs/decisions.md, 2026-12-01.
    model_config = ConfigDict(alias_generator=AliasGenerator(validation_alias=env_name), populate_by_name=True)

    backend: Literal["local", "aws"] = "local"
    data_dir: Path = Path(".kindex")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    default_embedding_model: EmbeddingModelName | None = None  # checked at cold start, as the API checks it
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    max_file_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    max_chunks_per_document: int = Field(default=20_000, gt=0)
    # How long one API request may spend on its dependencies (kindex.domain.budget): under API Gateway's 29 s.
    request_budget_s: float = Field(default=25.0, gt=0, le=28)
    openai_api_key: str | None = Field(default=None, repr=False)
    openai_base_url: str | None = None
    openai_secret_name: str | None = None
    opensearch_endpoint: str | None = None
    # faiss: Amazon OpenSearch Service's default; lucene: no native library (the Maven-assembled test node, any
    # distribution). Unset: faiss on AWS, lucene for `kindex serve` on a cluster (`search_engine`).
    opensearch_engine: Literal["faiss", "lucene"] | None = None
    # `kindex serve` on an OpenSearch cluster instead of the embedded index: http(s)://[user:password@]host[:port].
    # May carry a password, so never in a repr or a log.
    search_url: str | None = Field(default=None, repr=False)
    # Index names of a local server on that cluster: `{prefix}-{model}-{dims}`. Unset: `kindex-local-<id>`, with an
    # id created once per data directory, so two servers (two data directories) never share or delete each other's
    # chunks.
    search_index_prefix: str | None = None
    # The index design (docs/scale.md): read when an index is created, so changing them needs a new index (-v2).
    # Combinations OpenSearch would refuse are refused when the adapter is built (IndexDesign).
    opensearch_shards: int = Field(default=1, ge=1, le=1024)
    opensearch_replicas: int = Field(default=1, ge=0, le=15)
    opensearch_routing_shards: int = Field(default=0, ge=0, le=1024)  # 0: OpenSearch's default
    opensearch_routing_partition_size: int = Field(default=1, ge=1, le=1023)
    opensearch_hnsw_m: int = Field(default=16, ge=2, le=100)
    opensearch_ef_construction: int = Field(default=128, ge=1, le=4096)
    opensearch_ef_search: int = Field(default=100, ge=1, le=10_000)
    opensearch_compression: Literal["none", "fp16", "16x", "32x"] = "none"
    opensearch_refresh_interval: str = Field(default="1s", pattern=r"^[1-9]\d*(ms|s|m)$")
    # wait_for: a write is searchable when it returns; false: within the refresh interval (bulk backfills).
    opensearch_refresh: Literal["wait_for", "false"] = "wait_for"
    public_url: str | None = None
    secrets_prefix: str = "kindex"
    ingest_queue_url: str | None = None
    reindex_queue_url: str | None = None  # AWS: the reindex work queue (planner -> worker)
    reindex_interval_seconds: float = Field(default=3600.0, gt=0)
    # The UTC hour whose reindex passes also recount every tenant's usage counters (-1: only full passes do).
    usage_recount_hour: int = Field(default=0, ge=-1, le=23)
    # Local mode's ingest threads. One tenant may use all but one of them, so 3 keeps both cores of a small machine
    # busy with one tenant's work and still has a thread ready for another tenant's.
    ingest_workers: int = Field(default=3, ge=1, le=64)
    # Texts per call to a remote embedding model (OpenAI): fewer requests when larger, finer `chunks_done` progress
    # when smaller.
    remote_embed_slice: int = Field(default=1024, ge=1, le=2048)
    # Concurrent queries of one tenant and model embedded in one call (kindex.app.query_batching); false embeds each
    # query alone: the reference the concurrency benchmark measures beside it.
    query_batching: bool = True
    # Local mode: requests computing at once (kindex.app.cpu_slots); a request waiting on the network (a rights check,
    # a remote model, the OpenSearch node) gives its slot back. Unset: the cores this process may use, plus one. 0: no
    # limit (every one of the server's 32 request threads computes at once, and a hybrid query's keyword leg runs on a
    # second thread: the reference the concurrency benchmark measures beside it).
    cpu_slots: int | None = Field(default=None, ge=0, le=1024)
    # Local mode: processes that answer `kindex serve`'s queries beside it (kindex_local.query_processes), each with its
    # own interpreter and its own copy of the embedded index, which follows the server's writes. Unset: one per core
    # this process may use when it may use two or more, else none. 0: the server answers queries on its own threads.
    query_processes: int | None = Field(default=None, ge=0, le=64)
    # Set by `kindex serve` in its query processes' environment only: open the embedded index as a follower (reads
    # the server's files, never writes them; LocalSearchIndex `follower`). `kindex serve` refuses it.
    index_follower: bool = False
    table_name: str | None = None
    bucket_name: str | None = None
    bootstrap_tenant: str = "default"
    # Loopback/private networks that rights-check URLs may reach (CIDRs, comma-separated, or "none"). Unset: loopback
    # in local mode, none on AWS. Link-local and metadata addresses are refused whatever this says.
    rights_allowed_networks: str | None = None
    # Per-tenant throttling plans, JSON in the shape of `kindex.domain.usage_plans.UsagePlans`. `kindex serve`
    # enforces them itself (unset: no per-tenant limit); on AWS the stack's `UsagePlans` output (with the usage
    # plan ids) lets `kindex keys` put each tenant's API Gateway key into its plan.
    usage_plans: str | None = None
    # The authorizer's scope for usage identifiers (`kindex-<stage>`): set on AWS, where it returns each tenant's
    # `usageIdentifierKey`; unset locally.
    gateway_key_scope: str | None = Field(default=None, pattern=r"^kindex-[a-z][a-z0-9-]{0,19}$")

    @field_validator("usage_plans")
    @classmethod
    def _usage_plans_parse(cls, value: str | None) -> str | None:
        if value is not None:
            from kindex.domain.usage_plans import UsagePlans

            UsagePlans.model_validate_json(value)
        return value

    @property
    def plans(self) -> UsagePlans | None:
        """The parsed usage plans; None when unset."""
        if self.usage_plans is None:
            return None
        from kindex.domain.usage_plans import UsagePlans

        return UsagePlans.model_validate_json(self.usage_plans)

    @field_validator("search_url")
    @classmethod
    def _search_url_is_http(cls, value: str | None) -> str | None:
        if value is not None:
            check_search_url(value)
        return value

    @field_validator("search_index_prefix")
    @classmethod
    def _prefix_is_an_index_name(cls, value: str | None) -> str | None:
        if value is not None and not SEARCH_INDEX_PREFIX.fullmatch(value):
            raise ValueError("must be 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit")
        return value

    @property
    def search_engine(self) -> str:
        """The k-NN engine of new indices: the one configured, else faiss on AWS and lucene for `kindex serve`
        (pure Java: present on every OpenSearch distribution, with or without the native libraries)."""
        return self.opensearch_engine or ("faiss" if self.backend == "aws" else "lucene")

    @field_validator("rights_allowed_networks")
    @classmethod
    def _networks_parse(cls, value: str | None) -> str | None:
        if value is not None:  # imported only when set: every function reads settings at cold start
            from kindex.domain.rights_policy import parse_networks

            parse_networks(value)
        return value

    @property
    def rights_networks(self) -> tuple[IPNetwork, ...] | None:
        """The parsed allowlist; None when unset (the backend's default applies)."""
        from kindex.domain.rights_policy import parse_networks

        return parse_networks(self.rights_allowed_networks)

    @property
    def embedding_model(self) -> str:
        if self.default_embedding_model:
            return self.default_embedding_model
        return LOCAL_DEFAULT_MODEL if self.backend == "local" else AWS_DEFAULT_MODEL


ENV_NAMES = {field: env_name(field) for field in Settings.model_fields}
FIELDS_BY_ENV_NAME = {name: field for field, name in ENV_NAMES.items()}


class SettingsError(Exception):
    """The environment does not describe a usable deployment."""


class FunctionSettings(Settings):
    """One Lambda function's settings: on AWS, the variables in `aws_requires` must be set (checked at cold start,
    so a misconfigured deployment fails its first invocation with a message naming them, not a request later)."""

    aws_requires: ClassVar[tuple[str, ...]] = ("table_name",)

    @model_validator(mode="after")
    def _aws_requirements(self) -> FunctionSettings:
        missing = [ENV_NAMES[name] for name in self.aws_requires if self.backend == "aws" and not getattr(self, name)]
        if missing:
            raise ValueError(f"{type(self).__name__} on aws needs {', '.join(missing)}")
        return self


class AuthorizerSettings(FunctionSettings):
    aws_requires = ("table_name",)


class ApiSettings(FunctionSettings):
    aws_requires = ("table_name", "bucket_name", "opensearch_endpoint")


class QuerySettings(FunctionSettings):
    aws_requires = ("table_name", "opensearch_endpoint")


class IngestSettings(FunctionSettings):
    aws_requires = ("table_name", "bucket_name", "opensearch_endpoint")


class ReindexPlannerSettings(FunctionSettings):
    """The scheduled planner: it reads keys and collection ids and sends tasks, nothing else."""

    aws_requires = ("table_name", "reindex_queue_url")


class ReindexSettings(FunctionSettings):
    """The reindex worker: one task per message."""

    aws_requires = ("table_name", "bucket_name", "opensearch_endpoint", "ingest_queue_url", "reindex_queue_url")


class RouterSettings(FunctionSettings):
    """The ingest router: it reads S3's notifications and re-sends them to the fair ingest queue, nothing else."""

    aws_requires = ("ingest_queue_url",)


# Fields whose values may hold a credential: a message about them never repeats the value.
SECRET_FIELDS = frozenset({"openai_api_key", "search_url"})


def _describe(error: ValidationError) -> str:
    """One line per problem naming the variable and the field, with the value given unless it may be a secret."""
    lines = [f"{error.error_count()} invalid setting(s)"]
    for detail in error.errors(include_url=False):
        variable, *inside = [*map(str, detail["loc"])] or ["settings"]  # inside: a path within a JSON setting
        field = FIELDS_BY_ENV_NAME.get(variable)
        where = " ".join([f"{variable} ({field})" if field else variable, *([".".join(inside)] if inside else [])])
        line = f"{where}: {detail['msg']}"
        if field and field not in SECRET_FIELDS and "input" in detail and not inside:
            line += f" (got {detail['input']!r})"
        lines.append(line)
    return "\n".join(lines)


def load_settings(environ: dict[str, str] | None = None, *, model: type[Settings] = Settings, **overrides) -> Settings:
    """`model` validated from the environment (and explicit overrides); SettingsError says what is wrong."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    values = {name: env[name] for name in ENV_NAMES.values() if env.get(name)}
    values.update({ENV_NAMES[field]: value for field, value in overrides.items() if value is not None})
    try:
        settings = model.model_validate(values)
    except ValidationError as error:
        raise SettingsError(_describe(error)) from error
    if settings.backend == "aws" and not (settings.table_name and settings.bucket_name) and model is Settings:
        raise SettingsError("aws backend needs KINDEX_TABLE_NAME and KINDEX_BUCKET_NAME")
    return settings
