"""DynamoDB read units of one scheduled reindex pass, from the code's own access pattern and item layouts.

    .venv/bin/python scripts/reindex_reads.py [--write docs/scale.md | --check docs/scale.md]

The requests per pass follow `kindex.app.reindex` (planner, tenant task, collection task in a steady state: every
collection's configuration covered by a sweep, a fraction of documents needing attention) and its `ReindexLimits`;
the item sizes come from items built by the DynamoDB adapters' own builders (`build_item`, `build_chunk_item`,
`build_state_put`) and sized with DynamoDB's rules. tests/unit/test_reindex_reads.py checks the request counts
against the requests a real pass sends under moto, and that docs/scale.md holds this script's output.

Read unit rules (DynamoDB developer guide, "Read/write capacity mode"): a strongly consistent GetItem costs one
unit per 4 KB of the item (rounded up); a Query costs one unit per 4 KB of all items it read, summed per request
(ProjectionExpression does not lower it); eventually consistent reads, and every GSI read, cost half; a GSI item's
size is its projected attributes plus 100 bytes.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT / "layers" / "core")]

from kindex.adapters.aws.dynamodb_chunks import build_chunk_item  # noqa: E402
from kindex.adapters.aws.dynamodb_metadata import (  # noqa: E402
    ATTENTION_ATTRIBUTE,
    KEYS_PARTITION,
    build_item,
    build_state_put,
    collections_pk,
    documents_pk,
    key_listing_sk,
)
from kindex.app.reindex import ReindexLimits  # noqa: E402
from kindex.domain.keys import write_blob_key  # noqa: E402
from kindex.domain.models import ApiKey, Collection, Document, DocumentStatus, Role  # noqa: E402
from kindex.domain.reindex import ReindexState  # noqa: E402
from kindex.domain.types import StoredChunk  # noqa: E402

START = "<!-- reindex-reads:start (scripts/reindex_reads.py --write docs/scale.md) -->"
END = "<!-- reindex-reads:end -->"
UNIT = 4096
GSI_OVERHEAD = 100


@dataclass(frozen=True)
class Workload:
    name: str
    chunks: int
    chunks_per_document: int
    tenants: int
    collections: int
    keys_per_tenant: int = 3
    attention_fraction: float = 0.001  # documents pending, in progress or failed-retryable at any moment
    chunk_chars: int = 1800  # average chunk text (maxChars, 2,000 by default)
    largest_collection_share: float = 0.0  # of all documents, for the drift cycle of the largest collection

    @property
    def documents(self) -> int:
        return self.chunks // self.chunks_per_document


WORKLOADS = (
    Workload(
        "1M chunks", chunks=1_000_000, chunks_per_document=20, tenants=10, collections=20, largest_collection_share=0.5
    ),
    Workload(
        "100M chunks",
        chunks=100_000_000,
        chunks_per_document=20,
        tenants=1_000,
        collections=2_000,
        largest_collection_share=0.9,
    ),
)


@dataclass(frozen=True)
class Row:
    who: str
    request: str  # "<operation> <what>": the category tests compare with the requests really sent
    requests: float
    items_per_request: float
    item_bytes: int
    rule: str
    units: float


# DynamoDB item sizes
def attribute_size(name: str, value: dict) -> int:
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(name.encode()) + len(raw.encode())
    if kind == "N":
        digits = raw.lstrip("-").replace(".", "").strip("0") or "0"
        return len(name.encode()) + math.ceil(len(digits) / 2) + 1
    raise ValueError(kind)


def item_size(item: dict) -> int:
    return sum(attribute_size(name, value) for name, value in item.items())


def sample_items(chunk_chars: int) -> dict[str, int]:
    """Bytes of each item kind a pass reads, built by the adapters' own builders with typical values."""
    tenant, collection, document_id = "tenant-0042", "handbook-2024", "policies-leave-and-absence-v3"
    key = ApiKey(key_id="k" * 22, tenant=tenant, role=Role.ADMIN, secret_sha256="0" * 64)
    model = "openai:text-embedding-3-small"
    stored_collection = Collection(
        id=collection, title="Staff handbook", embedding_model=model, query_groups=["staff", "hr"]
    )
    source = write_blob_key(tenant, collection, document_id, "leave-policy.pdf", version=3)
    document = Document(
        id=document_id,
        collection=collection,
        title="Leave and absence policy",
        language="en",
        url="https://intranet.example.com/policies/leave-and-absence",
        mimetype="application/pdf",
        status=DocumentStatus.INDEXED,
        chunk_count=20,
        chunks_done=20,
        content_sha256="0" * 64,
        content_length=48_722,
        source=source,
        version=3,
        revision=9,
        indexed_version=3,
        indexed_model="openai:text-embedding-3-small",
        indexed_config_version=1,
    )
    document_item = build_item(
        documents_pk(tenant, collection), document_id, document.model_dump_json(), version=3, revision=9
    )
    chunk = StoredChunk(
        chunk_id="c" * 64,
        collection=collection,
        document_id=document_id,
        index=7,
        start=12_600,
        end=12_600 + chunk_chars,
        text="x" * chunk_chars,
        page_start=4,
        page_end=5,
    )
    attention_projection = {
        "pk": document_item["pk"],
        "sk": document_item["sk"],
        ATTENTION_ATTRIBUTE: document_item["pk"],
    }
    state = ReindexState(
        collection=collection,
        collection_created_at=stored_collection.created_at,
        swept_config_version=1,
        swept_model="openai:text-embedding-3-small",
        drift_after=document_id,
        blob_after=source,
        revision=1234,
    )
    return {
        "key": item_size(build_item(KEYS_PARTITION, key_listing_sk(key), key.model_dump_json())),
        "collection": item_size(build_item(collections_pk(tenant), collection, stored_collection.model_dump_json())),
        "state": item_size(build_state_put("t", tenant, state)["Item"]),
        "document": item_size(document_item),
        "attention": item_size(attention_projection) + GSI_OVERHEAD,
        "chunk": item_size(build_chunk_item(tenant, chunk)),
    }


def get_units(size: int, *, consistent: bool = True) -> float:
    units = math.ceil(size / UNIT)
    return units if consistent else units / 2


def query_units(items: float, size: int, *, consistent: bool = True) -> float:
    units = max(1, math.ceil(items * size / UNIT))
    return units if consistent else units / 2


def rows(workload: Workload, limits: ReindexLimits, sizes: dict[str, int]) -> list[Row]:
    """The reads of one pass in a steady state: planner, then one tenant task per tenant and one collection task
    per collection (documents spread evenly over collections, one blob per document)."""
    t, c = workload.tenants, workload.collections
    per_collection = workload.documents / c
    attention = workload.attention_fraction * per_collection
    drift_documents = min(limits.drift_page_documents, per_collection)  # one Query of their records
    blob_documents = min(limits.blob_page, per_collection)  # one GetItem per blob's document
    pages_per_tenant = max(1, math.ceil(c / t / limits.planner_batch))
    return [
        Row(
            "planner",
            "Query key listing",
            1,
            t * workload.keys_per_tenant,
            sizes["key"],
            "strong Query",
            query_units(t * workload.keys_per_tenant, sizes["key"]),
        ),
        Row(
            "planner",
            "Query collection ids",
            t * pages_per_tenant,
            c / t / pages_per_tenant,
            sizes["collection"],
            "strong Query",
            t * pages_per_tenant * query_units(c / t / pages_per_tenant, sizes["collection"]),
        ),
        # Collections being deleted (their delete jobs resumed): a partition that is empty but while one runs.
        Row("planner", "Query pending deletions", t, 0, sizes["collection"], "strong Query", t * query_units(0, 0)),
        Row(
            "tenant task",
            "GetItem collection",
            c,
            1,
            sizes["collection"],
            "strong GetItem",
            c * get_units(sizes["collection"]),
        ),
        Row(
            "collection task",
            "GetItem collection",
            c,
            1,
            sizes["collection"],
            "strong GetItem",
            c * get_units(sizes["collection"]),
        ),
        Row(
            "collection task",
            "GetItem reindex state",
            c,
            1,
            sizes["state"],
            "strong GetItem",
            c * get_units(sizes["state"]),
        ),
        Row(
            "collection task",
            "Query attention index",
            c,
            attention,
            sizes["attention"],
            "GSI Query (half)",
            c * query_units(attention, sizes["attention"], consistent=False),
        ),
        Row(
            "collection task",
            "GetItem attention document",
            c * attention,
            1,
            sizes["document"],
            "strong GetItem",
            c * attention * get_units(sizes["document"]),
        ),
        Row(
            "collection task",
            "Query document page",
            c,
            drift_documents,
            sizes["document"],
            "strong Query",
            c * query_units(drift_documents, sizes["document"]),
        ),
        Row(
            "collection task",
            "GetItem blob's document",
            c * blob_documents,
            1,
            sizes["document"],
            "strong GetItem",
            c * blob_documents * get_units(sizes["document"]),
        ),
        Row("collection task", "Query chunks", 0, 0, sizes["chunk"], "strong Query", 0),
    ]


def full_read_units(workload: Workload, sizes: dict[str, int]) -> float:
    """What reading every document and chunk item costs (the old pass, every hour; now a sweep's cost, once per
    configuration change): one GetItem per document, one strong Query per document's chunks."""
    chunk_query = query_units(workload.chunks_per_document, sizes["chunk"])
    return workload.documents * (get_units(sizes["document"]) + chunk_query)


def render(workloads=WORKLOADS, limits: ReindexLimits | None = None) -> str:
    limits = limits or ReindexLimits()
    lines = [START, ""]
    for workload in workloads:
        sizes = sample_items(workload.chunk_chars)
        table = rows(workload, limits, sizes)
        total = sum(row.units for row in table)
        largest = workload.documents * workload.largest_collection_share
        drift_documents = min(
            limits.drift_page_documents, max(1, math.ceil(limits.drift_page_chunks / workload.chunks_per_document))
        )
        blob_cycle = largest / limits.blob_page
        lines += [
            f"**{workload.name}**: {workload.documents:,} documents of {workload.chunks_per_document} chunks, "
            f"{workload.tenants:,} tenants ({workload.keys_per_tenant} keys each), {workload.collections:,} "
            f"collections, {workload.attention_fraction:.1%} of documents needing attention.",
            "",
            "| function | request | requests | items each | item bytes | rule | read units |",
            "|---|---|---:|---:|---:|---|---:|",
        ]
        lines += [
            f"| {r.who} | {r.request} | {r.requests:,.0f} | {r.items_per_request:,.1f} | {r.item_bytes:,} | "
            f"{r.rule} | {r.units:,.0f} |"
            for r in table
        ]
        lines += [
            f"| **total per pass** | | | | | | **{total:,.0f}** |",
            "",
            f"Per month (730 passes): {total * 730 / 1e6:,.1f} M read units. Reading every document and chunk "
            f"item (the old pass, every hour; now what a sweep after a configuration change reads once): "
            f"{full_read_units(workload, sizes) / 1e6:,.1f} M read units. A full drift cycle of the largest "
            f"collection ({largest:,.0f} documents, {drift_documents} a pass): "
            f"{largest / drift_documents:,.0f} passes; of its blobs ({limits.blob_page} a pass): "
            f"{blob_cycle:,.0f} passes.",
            "",
        ]
    lines.append(END)
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    start, end = text.index(START), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, help="replace the block between the markers in this file")
    group.add_argument("--check", type=Path, help="exit 1 if the block in this file is stale")
    args = parser.parse_args(argv)
    block = render()
    if args.write:
        args.write.write_text(replace_block(args.write.read_text(), block))
    elif args.check:
        text = args.check.read_text()
        if replace_block(text, block) != text:
            print(f"{args.check} is stale: run scripts/reindex_reads.py --write {args.check}", file=sys.stderr)
            return 1
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
