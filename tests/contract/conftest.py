"""Shared by the contract suites: a moto DynamoDB client with the metadata table, for the AWS side of each port, and
the real OpenSearch node for the search index's. Each port's tests are a mixin in `tests/contract/mixins/`, run by one
`Test*` subclass per adapter."""

from collections.abc import Iterator

import pytest
from moto import mock_aws

from tests.support.aws import create_metadata_table, fake_aws_env, moto_client
from tests.support.opensearch_node import ENV_URL, OpenSearchNode, find_node

# The contract mixins hold the tests' asserts; rewrite them as pytest rewrites a test module's (before any import).
pytest.register_assert_rewrite("tests.contract.mixins")


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    fake_aws_env(monkeypatch)
    with mock_aws():
        client = moto_client("dynamodb")
        create_metadata_table(client)
        yield client


# What the run did about the real node, for the one-line summary at the end.
_node_outcome: list[str] = []


@pytest.fixture(scope="session")
def opensearch_node() -> Iterator[OpenSearchNode]:
    """The real OpenSearch node (see tests/support/opensearch_node.py): skipped with the reason when none is up,
    failed when KINDEX_TEST_OPENSEARCH_URL names one that is not usable. Indices of this run are dropped at the
    end even if a test's own cleanup did not get to run."""
    node, reason, required = find_node()
    if node is None:
        _node_outcome.append(f"NOT USED, its tests were {'errors' if required else 'skipped'}: {reason}")
        if required:
            pytest.fail(f"{ENV_URL} is set but {reason}")
        pytest.skip(f"no real OpenSearch node: {reason}")
    _node_outcome.append(f"used: OpenSearch {node.version} at {node.url}, indices {node.run_prefix}-*")
    yield node
    node.delete_indices(node.run_prefix)


def pytest_terminal_summary(terminalreporter) -> None:
    """One line saying whether the real-node tests ran, so a skip cannot pass unnoticed among the dots."""
    if _node_outcome:
        terminalreporter.write_line(f"real OpenSearch node {_node_outcome[0]}")
