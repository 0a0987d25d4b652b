"""Metering on AWS under moto: the usage records (CloudWatch EMF lines on stdout, as Lambda writes them to its log
group) that the billing query of docs/aws.md sums, from real ingest, query and rights-check paths."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kindex.adapters.http_rights import HttpRightsEndpoint
from kindex.domain import metering
from kindex.domain.models import CollectionInput, DocumentInput
from kindex.domain.query import QueryRequest
from tests.support.aws_deployment import AwsStack, aws_stack
from tests.support.rights_server import RightsServer

pytestmark = pytest.mark.integration

AWS_MD = Path(__file__).resolve().parents[2] / "docs" / "aws.md"


def billing_query() -> str:
    """The Logs Insights query docs/aws.md gives for a month's usage per tenant."""
    text = AWS_MD.read_text()
    return re.search(r"<!-- usage-query:start -->\n```\n(.*?)```\n<!-- usage-query:end -->", text, re.S).group(1)


def usage_records(stdout: str) -> list[dict]:
    """The EMF records the billing query selects (its `filter ispresent(...)`)."""
    [present] = re.findall(r"filter ispresent\((\w+)\)", billing_query())
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"_aws"')]
    return [r for r in records if present in r]


def billed(records: list[dict]) -> Counter:
    """What the billing query computes: sum(<quantity>) by <tenant>, <usage>."""
    query = billing_query()
    [quantity] = re.findall(r"sum\((\w+)\)", query)
    [by] = re.findall(r"\bby (\w+), (\w+)", query)
    totals: Counter = Counter()
    for record in records:
        totals[(record[by[0]], record[by[1]])] += record[quantity]
    return totals


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    with aws_stack(monkeypatch, {"KINDEX_RIGHTS_ALLOWED_NETWORKS": "127.0.0.0/8"}) as stack:
        yield stack


def test_the_billing_query_names_exactly_the_fields_every_usage_record_carries():
    # Given the query in docs/aws.md
    query = billing_query()
    # Then it reads the tenant, the usage name and the quantity, by the names the records are written with
    assert set(re.findall(r"ispresent\((\w+)\)|sum\((\w+)\)", query)[0]) - {""} == {metering.QUANTITY}
    assert re.findall(r"\bby (\w+), (\w+)", query) == [(metering.TENANT, metering.USAGE)]


def test_two_tenants_with_the_same_ids_are_billed_their_own_chunks_texts_and_queries(stack, capsys):
    services = stack.services
    # Given two tenants with the same collection and document ids, one document each, of different sizes
    for tenant, facts in (("acme", 4), ("globex", 12)):
        services.catalog.put_collection(tenant, "c", CollectionInput(query_groups=["staff"], chunking_max_size=60))
        text = " ".join(f"Penguin fact number {n} is about ice." for n in range(facts))  # no two chunks alike
        services.catalog.put_document(tenant, "c", "d", DocumentInput(content=text))
    stack.drain()
    # When acme queries twice and globex once
    for tenant in ("acme", "acme", "globex"):
        services.query.query(tenant, ["c"], QueryRequest(query="penguins", k=3, groups=["staff"]), multi=False)
    records = usage_records(capsys.readouterr().out)
    # Then each record names its tenant as a property, never as a metric dimension
    for record in records:
        dimensions = {d for ds in record["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for d in ds}
        assert metering.TENANT not in dimensions and record[metering.USAGE] in metering.USAGE_EVENTS
    # And the month's bill is each tenant's own: chunks as stored, texts embedded, queries answered
    totals = billed(records)
    for tenant in ("acme", "globex"):
        chunks = services.adapters.metadata.get_document(tenant, "c", "d").chunk_count
        assert totals[(tenant, metering.CHUNKS_WRITTEN)] == chunks
        assert totals[(tenant, metering.EMBEDDED_TEXTS)] == chunks + {"acme": 2, "globex": 1}[tenant]
    assert totals[("acme", metering.CHUNKS_WRITTEN)] < totals[("globex", metering.CHUNKS_WRITTEN)]
    assert (totals[("acme", metering.QUERIES)], totals[("globex", metering.QUERIES)]) == (2, 1)
    # And the hash model bills no tokens (only a provider that bills by token is metered in tokens)
    assert not any(usage == metering.EMBEDDING_TOKENS for _, usage in totals)


def test_rights_check_calls_are_billed_to_the_tenant_whose_endpoint_was_called(stack, capsys):
    services = stack.services
    server = RightsServer(tls=True)
    try:
        services.adapters.__dict__["rights_endpoint"] = HttpRightsEndpoint(
            services.adapters.rights_policy, ssl_context=server.client_ssl_context()
        )
        server.secret = services.rights_secrets.rotate("acme").encode()
        server.allowed = {"d1"}
        # Given two external collections of one tenant and a public one of another
        for name in ("e1", "e2"):
            services.catalog.put_collection(
                "acme",
                name,
                CollectionInput(
                    query_groups=["staff"],
                    rights_check_method="external",
                    rights_check_method_configuration={"url": server.url, "timeout": 2.0},
                ),
            )
            services.catalog.put_document("acme", name, "d1", DocumentInput(content="penguin facts"))
        services.catalog.put_collection("globex", "e1", CollectionInput(query_groups=["staff"]))
        services.catalog.put_document("globex", "e1", "d1", DocumentInput(content="penguin facts"))
        stack.drain()
        capsys.readouterr()
        # When each queries all of its collections
        request = QueryRequest(query="penguin", k=3, user="ann", groups=["staff"])
        services.query.query("acme", ["e1", "e2"], request, multi=True)
        services.query.query("globex", ["e1"], QueryRequest(query="penguin", k=3, groups=["staff"]), multi=True)
        # Then acme is billed one call per external collection, globex none
        totals = billed(usage_records(capsys.readouterr().out))
        assert totals[("acme", metering.RIGHTS_CHECK_CALLS)] == len(server.requests) == 2
        assert totals[("globex", metering.RIGHTS_CHECK_CALLS)] == 0
    finally:
        server.close()
