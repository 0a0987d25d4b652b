"""The QueryLog and SecretStore contracts (tests/contract/mixins/query_log.py, secret_store.py) run against the local
adapters and DynamoDB / Secrets Manager (moto), plus the AWS adapters' expiry, caching and escaping."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from botocore.stub import Stubber
from moto import mock_aws

from kindex.adapters.aws import secrets_manager
from kindex.adapters.aws.dynamodb_query_log import DynamoDbQueryLog, query_pk
from kindex.adapters.aws.secrets_manager import SecretsManagerStore, secret_name
from kindex.adapters.local.file_secrets import FileSecretStore
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_query_log import SqliteQueryLog
from kindex.domain.errors import DependencyFailed
from tests.contract.mixins.clock import T0, Clock
from tests.contract.mixins.query_log import DOCUMENTS, QueryLogContract
from tests.contract.mixins.secret_store import SecretStoreContract
from tests.support.aws import TABLE, fake_aws_env, moto_client

pytestmark = pytest.mark.contract

PREFIX = "kindex-test"


# QueryLog
class TestSqliteQueryLog(QueryLogContract):
    @pytest.fixture
    def query_log(self, tmp_path, clock) -> SqliteQueryLog:
        return SqliteQueryLog(SqliteDatabase(tmp_path / "x.sqlite3"), clock=clock)


class TestDynamoDbQueryLog(QueryLogContract):
    @pytest.fixture
    def query_log(self, dynamodb, clock) -> DynamoDbQueryLog:
        return DynamoDbQueryLog(TABLE, client=dynamodb, clock=clock)

    def test_query_item_carries_its_ttl_in_epoch_seconds(self, dynamodb, clock):
        # Given a query logged at T0 + 0.5 s for 60 s
        clock.now = T0 + 0.5
        DynamoDbQueryLog(TABLE, client=dynamodb, clock=clock).put_query("acme", "q1", DOCUMENTS, ttl_seconds=60)
        # Then the item's `expires_at` (the table's TTL attribute) is a whole number of seconds, not before the expiry
        item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": query_pk("acme", "q1")}, "sk": {"S": "Q"}})
        assert item["Item"]["expires_at"] == {"N": str(int(T0) + 61)}
        ttl = dynamodb.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
        assert ttl["AttributeName"] == "expires_at"


# SecretStore
class TestFileSecretStore(SecretStoreContract):
    @pytest.fixture
    def secrets(self, tmp_path) -> FileSecretStore:
        return FileSecretStore(tmp_path / "secrets")


def count_calls(client, operation: str) -> list[str]:
    calls: list[str] = []
    client.meta.events.register(f"before-call.secrets-manager.{operation}", lambda **_: calls.append(operation))
    return calls


class TestSecretsManagerStore(SecretStoreContract):
    """Beyond the contract: naming, caching, secrets created or deleted elsewhere, errors."""

    @pytest.fixture
    def secretsmanager(self, monkeypatch: pytest.MonkeyPatch) -> Iterator:
        fake_aws_env(monkeypatch)
        with mock_aws():
            yield moto_client("secretsmanager")

    @pytest.fixture
    def secrets(self, secretsmanager) -> SecretsManagerStore:
        return SecretsManagerStore(PREFIX, client=secretsmanager)

    def test_secret_name_keeps_plain_names_readable_and_escapes_the_rest(self):
        assert secret_name("kindex", "tenants/acme/rights-check-signing") == "kindex/tenants/acme/rights-check-signing"
        assert secret_name("kindex", "tenants/a b=é/x") == "kindex/tenants/a=20b=3D=C3=A9/x"
        long_name = secret_name("kindex", "\U0001f600" * 255)
        assert long_name.startswith("kindex/==") and len(long_name) == len("kindex/==") + 64

    def test_longest_names_are_distinct_secrets(self, secretsmanager):
        # Given names of the longest tenant ids (escaped, far beyond Secrets Manager's 512 characters)
        store = SecretsManagerStore(PREFIX, client=secretsmanager)
        names = ["tenants/" + "\U0001f600" * 255 + "/s", "tenants/" + "\U0001f600" * 254 + "/s"]
        store.put_secret(names[0], b"one")
        store.put_secret(names[1], b"two")
        # When a fresh process reads them / Then each has its own value
        fresh = SecretsManagerStore(PREFIX, client=secretsmanager)
        assert [fresh.get_secret(n) for n in names] == [b"one", b"two"]

    def test_reads_are_cached_for_five_minutes(self, secretsmanager):
        # Given a secret, and a second process's store that caches it
        client = secretsmanager
        clock = Clock()
        writer = SecretsManagerStore(PREFIX, client=client)
        reader = SecretsManagerStore(PREFIX, client=client, clock=clock)
        writer.put_secret("s", b"one")
        fetches = count_calls(client, "GetSecretValue")
        assert reader.get_secret("s") == b"one"
        # When the secret changes elsewhere and the reader asks again within five minutes
        writer.put_secret("s", b"two")
        clock.now = T0 + 299
        # Then it answers from its cache without calling Secrets Manager
        assert reader.get_secret("s") == b"one"
        assert len(fetches) == 1
        # And after five minutes it reads the new value
        clock.now = T0 + 301
        assert reader.get_secret("s") == b"two"
        assert len(fetches) == 2

    def test_misses_are_cached_but_a_write_is_seen_at_once_by_the_writer(self, secretsmanager):
        client = secretsmanager
        store = SecretsManagerStore(PREFIX, client=client, clock=Clock())
        fetches = count_calls(client, "GetSecretValue")
        assert store.get_secret("s") is None
        assert store.get_secret("s") is None
        assert len(fetches) == 1
        store.put_secret("s", b"fresh")
        assert store.get_secret("s") == b"fresh"
        assert len(fetches) == 1

    def test_secret_set_by_hand_as_a_string_is_read_as_its_bytes(self, secretsmanager):
        secretsmanager.create_secret(Name=f"{PREFIX}/manual", SecretString="héllo")
        assert SecretsManagerStore(PREFIX, client=secretsmanager).get_secret("manual") == "héllo".encode()

    def test_secret_scheduled_for_deletion_reads_as_none(self, secretsmanager):
        # Given a secret someone deleted with a recovery window / When a fresh process reads it / Then None
        client = secretsmanager
        SecretsManagerStore(PREFIX, client=client).put_secret("s", b"old")
        client.delete_secret(SecretId=f"{PREFIX}/s", RecoveryWindowInDays=7)
        assert SecretsManagerStore(PREFIX, client=client).get_secret("s") is None

    @pytest.mark.parametrize("refused", ["create_secret", "put_secret_value"])
    def test_writing_a_secret_scheduled_for_deletion_restores_it(self, monkeypatch, refused):
        # Given Secrets Manager refusing the write as AWS does for a secret scheduled for deletion (moto does not)
        fake_aws_env(monkeypatch)
        client = moto_client("secretsmanager")
        name = f"{PREFIX}/s"
        with Stubber(client) as stub:
            if refused == "create_secret":
                stub.add_client_error("create_secret", service_error_code="InvalidRequestException")
            else:
                stub.add_client_error("create_secret", service_error_code="ResourceExistsException")
                stub.add_client_error("put_secret_value", service_error_code="InvalidRequestException")
            stub.add_response("restore_secret", {"Name": name}, expected_params={"SecretId": name})
            stub.add_response(
                "put_secret_value", {"Name": name}, expected_params={"SecretId": name, "SecretBinary": b"new"}
            )
            # When the secret is written / Then it is restored and given the new value
            store = SecretsManagerStore(PREFIX, client=client)
            store.put_secret("s", b"new")
            stub.assert_no_pending_responses()
        assert store.get_secret("s") == b"new"

    def test_errors_become_dependency_failed_and_never_reveal_the_value(self, monkeypatch, caplog):
        # Given a client that is denied everything
        fake_aws_env(monkeypatch)
        client = moto_client("secretsmanager")
        store = SecretsManagerStore(PREFIX, client=client)
        caplog.set_level(logging.DEBUG, logger="kindex")
        with Stubber(client) as stub:
            stub.add_client_error("create_secret", service_error_code="AccessDeniedException")
            stub.add_client_error("get_secret_value", service_error_code="AccessDeniedException")
            # When writing and reading / Then DependencyFailed, and neither logs nor the error mention the value
            with pytest.raises(DependencyFailed) as raised:
                store.put_secret("s", b"TOP-SECRET-VALUE")
            with pytest.raises(DependencyFailed):
                store.get_secret("s")
        assert raised.value.__cause__ is None and "TOP-SECRET" not in str(raised.value)
        assert "TOP-SECRET" not in caplog.text
        assert [r.error_code for r in caplog.records] == ["AccessDeniedException"] * 2

    def test_client_is_created_lazily(self, secretsmanager):
        secrets_manager.secretsmanager_client.cache_clear()
        try:
            store = SecretsManagerStore(PREFIX)
            store.put_secret("lazy", b"x")
            assert store.client is secrets_manager.secretsmanager_client()
            assert secretsmanager.get_secret_value(SecretId=f"{PREFIX}/lazy")["SecretBinary"] == b"x"
        finally:
            secrets_manager.secretsmanager_client.cache_clear()
