"""The monthly cost of a deployment that serves no traffic, computed from a synthesized template.

    .venv/bin/python scripts/idle_cost.py [--template cdk.out/kindex-dev.template.json] [--write docs/aws.md]

Reads the resources that bill by the hour or month whatever the traffic (OpenSearch nodes and their volumes,
secrets, alarms, dashboards, the ingest queue's idle polling) and prices them from scripts/prices-us-east-1.json,
where every price names its source and the date it was recorded. Everything else in the template bills per
request or per GB stored and is listed as such. Prints a Markdown table; `--write FILE` replaces the block
between the `idle-cost` markers in FILE (docs/aws.md) instead; `--check FILE` exits 1 if that block is stale.
An instance type missing from the price table is an error, never a guess.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PRICES = Path(__file__).resolve().parent / "prices-us-east-1.json"
START, END = "<!-- idle-cost:start (scripts/idle_cost.py --write docs/aws.md) -->", "<!-- idle-cost:end -->"
# Resource types that cost nothing without traffic (per request, per GB stored, or free), named in the output.
PER_USE = {
    "AWS::Lambda::Function": "Lambda functions",
    "AWS::ApiGateway::RestApi": "API Gateway REST API",
    "AWS::DynamoDB::Table": "DynamoDB on-demand table",
    "AWS::S3::Bucket": "S3 buckets",
    "AWS::SQS::Queue": "SQS queues",
    "AWS::Scheduler::Schedule": "EventBridge Scheduler schedule",
    "AWS::Logs::LogGroup": "CloudWatch log groups",
    "AWS::SNS::Topic": "SNS topic",
}


class UnknownPrice(KeyError):
    """The template uses something the price table has no price for."""


@dataclass(frozen=True)
class Line:
    item: str
    quantity: str
    monthly_usd: float


def idle_lines(template: dict, prices: dict) -> list[Line]:
    resources = template["Resources"]
    table, hours = prices["prices"], prices["hours_per_month"]
    lines: list[Line] = []
    for resource in _of_type(resources, "AWS::OpenSearchService::Domain"):
        lines.extend(_domain_lines(resource["Properties"], table, hours))
    counted = Counter(r["Type"] for r in resources.values())
    if counted["AWS::SecretsManager::Secret"]:
        n = counted["AWS::SecretsManager::Secret"]
        lines.append(
            Line("Secrets Manager secrets created by the stack", f"{n} x $0.40", n * table["secret_month"]["value"])
        )
    if counted["AWS::CloudWatch::Alarm"]:
        n = counted["AWS::CloudWatch::Alarm"]
        lines.append(
            Line(
                "CloudWatch alarms (standard resolution)",
                f"{n} x ${table['alarm_month']['value']:.2f}",
                n * table["alarm_month"]["value"],
            )
        )
    if counted["AWS::CloudWatch::Dashboard"]:
        n = counted["AWS::CloudWatch::Dashboard"]
        lines.append(
            Line(
                "CloudWatch dashboard",
                f"{n} x ${table['dashboard_month']['value']:.2f}",
                n * table["dashboard_month"]["value"],
            )
        )
    sqs_sources = [
        r
        for r in _of_type(resources, "AWS::Lambda::EventSourceMapping")
        if _source_type(resources, r["Properties"].get("EventSourceArn")) == "AWS::SQS::Queue"
    ]
    if sqs_sources:
        polling = prices["idle_sqs_polling"]
        requests = len(sqs_sources) * polling["pollers"] * (3600 / polling["long_poll_seconds"]) * hours
        lines.append(
            Line(
                f"SQS requests of the {len(sqs_sources)} queue triggers' idle long polling (estimate)",
                f"{requests / 1e6:.2f} M requests",
                requests / 1e6 * table["sqs_million_requests"]["value"],
            )
        )
    return lines


def modest_lines(template: dict, prices: dict) -> list[Line]:
    """What a modest month adds on top of the idle cost: `modest_load` in the price file (1M API requests, 200k new
    chunks) times the per-use prices. The per-request figures (function time, read units, log bytes) are estimates,
    stated beside the prices, not measured."""
    table, load = prices["prices"], prices["modest_load"]
    price = {name: entry["value"] for name, entry in table.items() if isinstance(entry, dict) and "value" in entry}
    requests, chunks = load["requests"], load["chunks"]
    documents = chunks / load["chunks_per_document"]
    queries = requests * load["query_share"]
    invocations = requests * (1 + load["authorizer_invocations_per_request"]) + documents
    gb_seconds = (
        requests * load["request_function_seconds"] * load["request_function_gb"]
        + requests * load["authorizer_invocations_per_request"] * load["authorizer_seconds"] * load["authorizer_gb"]
        + documents * load["ingest_seconds_per_document"] * load["ingest_gb"]
    )
    write_units = chunks * load["write_units_per_chunk"] + queries * load["write_units_per_query"]
    read_units = requests * load["read_units_per_request"]
    tokens = chunks * load["tokens_per_chunk"] + queries * load["tokens_per_query"]
    log_gb = requests * load["log_bytes_per_request"] / 1e9
    return [
        Line(
            "API Gateway REST requests",
            f"{requests / 1e6:g} M",
            requests / 1e6 * price["apigateway_rest_million_requests"],
        ),
        Line(
            "Lambda invocations (api/query, authorizer, ingest)",
            f"{invocations / 1e6:.2f} M",
            invocations / 1e6 * price["lambda_million_requests"],
        ),
        Line("Lambda compute, arm64", f"{gb_seconds / 1e3:.0f} k GB-s", gb_seconds * price["lambda_arm_gb_second"]),
        Line(
            "DynamoDB writes (chunks, documents, query log)",
            f"{write_units / 1e6:.2f} M WRU",
            write_units / 1e6 * price["dynamodb_million_write_units"],
        ),
        Line(
            "DynamoDB reads", f"{read_units / 1e6:.1f} M RRU", read_units / 1e6 * price["dynamodb_million_read_units"]
        ),
        Line(
            "OpenAI embeddings (text-embedding-3-small)",
            f"{tokens / 1e6:.0f} M tokens",
            tokens / 1e6 * price["openai_embedding_million_tokens"],
        ),
        Line("CloudWatch Logs ingested", f"{log_gb:.1f} GB", log_gb * price["logs_gb_ingested"]),
    ]


def _domain_lines(props: dict, table: dict, hours: int) -> list[Line]:
    cluster = props["ClusterConfig"]
    lines = []
    for kind, type_key, count_key in (
        ("data", "InstanceType", "InstanceCount"),
        ("dedicated master", "DedicatedMasterType", "DedicatedMasterCount"),
    ):
        if kind != "data" and not cluster.get("DedicatedMasterEnabled"):
            continue
        instance_type, count = cluster[type_key], int(cluster.get(count_key, 1))
        hourly = table["opensearch_instance_hour"].get(instance_type)
        if hourly is None:
            raise UnknownPrice(f"no price for {instance_type} in {PRICES.name}: add it with its source")
        lines.append(
            Line(
                f"OpenSearch {kind} nodes, {instance_type}", f"{count} x {hours} h x ${hourly}", count * hours * hourly
            )
        )
    ebs = props.get("EBSOptions", {})
    if ebs.get("EBSEnabled"):
        if ebs.get("VolumeType") != "gp3":
            raise UnknownPrice(f"no price for {ebs.get('VolumeType')} volumes in {PRICES.name}")
        gib = int(ebs["VolumeSize"]) * int(cluster.get("InstanceCount", 1))
        price = table["opensearch_gp3_gb_month"]["value"]
        lines.append(Line("OpenSearch gp3 storage", f"{gib} GiB x ${price}", gib * price))
    return lines


def _source_type(resources: dict, arn) -> str | None:
    """The resource type an event source ARN points at: a `Fn::GetAtt` of a resource here, else None."""
    if isinstance(arn, dict) and "Fn::GetAtt" in arn:
        return resources.get(arn["Fn::GetAtt"][0], {}).get("Type")
    return None


def _of_type(resources: dict, cfn_type: str) -> list[dict]:
    return [r for r in resources.values() if r["Type"] == cfn_type]


def per_use_items(template: dict) -> list[str]:
    counted = Counter(r["Type"] for r in template["Resources"].values())
    return [f"{name} ({counted[t]})" for t, name in PER_USE.items() if counted[t]]


def render(template: dict, prices: dict) -> str:
    lines = idle_lines(template, prices)
    modest = modest_lines(template, prices)
    total = sum(line.monthly_usd for line in lines)
    rows = [f"| {line.item} | {line.quantity} | ${line.monthly_usd:.2f} |" for line in lines]
    return "\n".join(
        [
            f"Idle cost of the synthesized stack, {prices['region']} on-demand list prices "
            f"recorded {prices['recorded']} "
            "(free tiers ignored; sources in `scripts/prices-us-east-1.json`):",
            "",
            "| billed whatever the traffic | quantity | per month |",
            "|---|---|---|",
            *rows,
            f"| **total** | | **${total:.2f}** |",
            "",
            "Billed per use only (nothing when idle): " + ", ".join(per_use_items(template)) + ".",
            "",
            f"A modest month on top ({prices['modest_load']['requests']:,} API requests, "
            f"{prices['modest_load']['chunks']:,} new chunks; the per-request assumptions are `modest_load` "
            "in the price "
            "file):",
            "",
            "| per use | quantity | per month |",
            "|---|---|---|",
            *(f"| {line.item} | {line.quantity} | ${line.monthly_usd:.2f} |" for line in modest),
            f"| **total with the idle cost** | | **${total + sum(line.monthly_usd for line in modest):.2f}** |",
        ]
    )


def replace_block(text: str, block: str) -> str:
    if START not in text or END not in text:
        raise ValueError(f"the file has no {START} ... {END} block")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{block}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Idle monthly cost of a synthesized kindex template.")
    parser.add_argument("--template", type=Path, default=REPO_ROOT / "cdk.out" / "kindex-dev.template.json")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", type=Path, help="replace the idle-cost block of this Markdown file")
    action.add_argument("--check", type=Path, help="exit 1 if this Markdown file's idle-cost block is stale")
    args = parser.parse_args(argv)
    if not args.template.is_file():
        print(f"error: {args.template} not found: synthesize first (make synth, or npx aws-cdk synth)", file=sys.stderr)
        return 1
    try:
        block = render(json.loads(args.template.read_text()), json.loads(PRICES.read_text()))
    except UnknownPrice as error:
        print(f"error: {error.args[0]}", file=sys.stderr)
        return 1
    if args.write:
        args.write.write_text(replace_block(args.write.read_text(), block))
    elif args.check:
        if replace_block(args.check.read_text(), block) != args.check.read_text():
            print(
                f"{args.check}: the idle cost block is stale; run scripts/idle_cost.py --write {args.check}",
                file=sys.stderr,
            )
            return 1
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
