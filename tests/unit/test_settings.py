"""The settings table: every environment variable a deployment sets keeps its name, a bad value fails at start with
the variable and the field named, and code overrides by field name win over the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from kindex.settings import ENV_NAMES, ApiSettings, Settings, SettingsError, load_settings

pytestmark = pytest.mark.unit

# The names deployments (the stack, .env files, docs) already use: a rename would silently drop a setting.
DEPLOYED_NAMES = {
    "backend": "KINDEX_BACKEND",
    "data_dir": "KINDEX_DATA_DIR",
    "host": "KINDEX_HOST",
    "port": "KINDEX_PORT",
    "default_embedding_model": "KINDEX_DEFAULT_EMBEDDING_MODEL",
    "max_body_bytes": "KINDEX_MAX_BODY_BYTES",
    "max_file_bytes": "KINDEX_MAX_FILE_BYTES",
    "max_chunks_per_document": "KINDEX_MAX_CHUNKS_PER_DOCUMENT",
    "request_budget_s": "KINDEX_REQUEST_BUDGET_S",
    "openai_api_key": "OPENAI_API_KEY",
    "openai_base_url": "OPENAI_BASE_URL",
    "openai_secret_name": "KINDEX_OPENAI_SECRET_NAME",
    "opensearch_endpoint": "KINDEX_OPENSEARCH_ENDPOINT",
    "opensearch_engine": "KINDEX_OPENSEARCH_ENGINE",
    "search_url": "KINDEX_SEARCH_URL",
    "search_index_prefix": "KINDEX_SEARCH_INDEX_PREFIX",
    "opensearch_shards": "KINDEX_OPENSEARCH_SHARDS",
    "opensearch_replicas": "KINDEX_OPENSEARCH_REPLICAS",
    "opensearch_routing_shards": "KINDEX_OPENSEARCH_ROUTING_SHARDS",
    "opensearch_routing_partition_size": "KINDEX_OPENSEARCH_ROUTING_PARTITION_SIZE",
    "opensearch_hnsw_m": "KINDEX_OPENSEARCH_HNSW_M",
    "opensearch_ef_construction": "KINDEX_OPENSEARCH_EF_CONSTRUCTION",
    "opensearch_ef_search": "KINDEX_OPENSEARCH_EF_SEARCH",
    "opensearch_compression": "KINDEX_OPENSEARCH_COMPRESSION",
    "opensearch_refresh_interval": "KINDEX_OPENSEARCH_REFRESH_INTERVAL",
    "opensearch_refresh": "KINDEX_OPENSEARCH_REFRESH",
    "public_url": "KINDEX_PUBLIC_URL",
    "secrets_prefix": "KINDEX_SECRETS_PREFIX",
    "ingest_queue_url": "KINDEX_INGEST_QUEUE_URL",
    "reindex_queue_url": "KINDEX_REINDEX_QUEUE_URL",
    "reindex_interval_seconds": "KINDEX_REINDEX_INTERVAL_SECONDS",
    "usage_recount_hour": "KINDEX_USAGE_RECOUNT_HOUR",
    "ingest_workers": "KINDEX_INGEST_WORKERS",
    "remote_embed_slice": "KINDEX_REMOTE_EMBED_SLICE",
    "query_batching": "KINDEX_QUERY_BATCHING",
    "table_name": "KINDEX_TABLE_NAME",
    "bucket_name": "KINDEX_BUCKET_NAME",
    "bootstrap_tenant": "KINDEX_BOOTSTRAP_TENANT",
    "rights_allowed_networks": "KINDEX_RIGHTS_ALLOWED_NETWORKS",
    "usage_plans": "KINDEX_USAGE_PLANS",
    "gateway_key_scope": "KINDEX_GATEWAY_KEY_SCOPE",
}


def test_every_deployed_variable_keeps_its_name():
    # Given the names deployments set / Then each setting is read from exactly that variable
    assert {field: ENV_NAMES[field] for field in DEPLOYED_NAMES} == DEPLOYED_NAMES


def test_every_variable_is_read_from_the_environment():
    # Given a value for each deployed name that differs from its default
    environ = {
        "KINDEX_PORT": "9999",
        "OPENAI_API_KEY": "sk-test",
        "KINDEX_OPENAI_SECRET_NAME": "s",
        "KINDEX_DATA_DIR": "/d",
    }
    # When the settings are loaded / Then each arrives in its field
    settings = load_settings(environ)
    assert (settings.port, settings.openai_api_key, settings.openai_secret_name) == (9999, "sk-test", "s")
    assert settings.data_dir == Path("/d")


def test_a_bad_value_names_the_variable_the_field_and_the_value():
    # Given a port that is not a number / When the settings are loaded
    with pytest.raises(SettingsError) as refused:
        load_settings({"KINDEX_PORT": "eighty"})
    # Then the message names the variable, the field and what was given
    assert "KINDEX_PORT (port)" in str(refused.value)
    assert "'eighty'" in str(refused.value)


def test_a_bad_secret_is_named_but_never_repeated():
    # Given an API key that is not a string pydantic accepts (a hand-built environment with a non-string)
    with pytest.raises(SettingsError) as refused:
        load_settings({"OPENAI_API_KEY": ["sk-secret-value"]})  # type: ignore[dict-item]
    # Then the variable is named and the value is not
    assert "OPENAI_API_KEY (openai_api_key)" in str(refused.value)
    assert "sk-secret-value" not in str(refused.value)


def test_a_function_missing_a_required_variable_fails_naming_it():
    # Given the API function on aws without its bucket and domain / Then the message names the missing variables
    with pytest.raises(SettingsError, match="ApiSettings on aws needs KINDEX_BUCKET_NAME, KINDEX_OPENSEARCH_ENDPOINT"):
        load_settings({"KINDEX_BACKEND": "aws", "KINDEX_TABLE_NAME": "t"}, model=ApiSettings)


def test_an_override_by_field_name_wins_over_the_environment():
    # Given a port in the environment and another one from the command line / Then the command line's applies
    assert load_settings({"KINDEX_PORT": "8081"}, port=0).port == 0
    # And code builds settings by field name, as before
    assert Settings(data_dir=Path("/x"), port=1).port == 1


def test_empty_variables_are_unset():
    # Given variables that are set but empty (as a shell's `VAR=` leaves them) / Then the defaults apply
    assert load_settings({"KINDEX_PORT": "", "KINDEX_BACKEND": ""}) == load_settings({})
