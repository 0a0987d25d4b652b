"""Shared by the contract suites: a moto DynamoDB client with the metadata table, for the AWS side of each port."""

from collections.abc import Iterator

import pytest
from moto import mock_aws

from tests.support.aws import create_metadata_table, fake_aws_env, moto_client


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    fake_aws_env(monkeypatch)
    with mock_aws():
        client = moto_client("dynamodb")
        create_metadata_table(client)
        yield client
