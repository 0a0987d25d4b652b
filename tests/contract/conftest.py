"""Shared by the contract suites: a moto DynamoDB client with the metadata table, for the AWS side of each port (the
real OpenSearch node for the search index's is the `opensearch_node` fixture of tests/conftest.py). Each port's tests
are a mixin in `tests/contract/mixins/`, run by one `Test*` subclass per adapter."""

from collections.abc import Iterator

import pytest
from moto import mock_aws

from tests.support.aws import create_metadata_table, fake_aws_env, moto_client

# The contract mixins hold the tests' asserts; rewrite them as pytest rewrites a test module's (before any import).
pytest.register_assert_rewrite("tests.contract.mixins")


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    fake_aws_env(monkeypatch)
    with mock_aws():
        client = moto_client("dynamodb")
        create_metadata_table(client)
        yield client
