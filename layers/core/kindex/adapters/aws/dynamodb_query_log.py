"""DynamoDB adapter of QueryLog: one item per query (`T#{tenant}#Q#{query_id}`, its own partition so a tenant's
busy query traffic spreads). `expires_at` is the table's TTL attribute; TTL deletion is lazy (up to days late),
so reads check the expiry themselves."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

from kindex.adapters.aws.dynamodb_chunks import fit_partition_key
from kindex.adapters.aws.dynamodb_table import (
    DynamoDbTable,
    addressable,
    escape_part,
    item_key,
)

TTL_ATTRIBUTE = "expires_at"
QUERY_ITEM_SK = "Q"


def query_pk(tenant: str, query_id: str) -> str:
    return fit_partition_key(f"T#{escape_part(tenant)}#Q#{escape_part(query_id)}")


def build_query_item(tenant: str, query_id: str, documents: list[dict], expires_at: int) -> dict[str, dict[str, Any]]:
    return {
        **item_key(query_pk(tenant, query_id), QUERY_ITEM_SK),
        "body": {"S": json.dumps(documents)},
        TTL_ATTRIBUTE: {"N": str(expires_at)},
    }


class DynamoDbQueryLog(DynamoDbTable):
    """Implements QueryLog: one item per query, expiring through the table's TTL on `expires_at`."""

    def __init__(self, table_name: str, *, client: Any = None, clock: Callable[[], float] = time.time):
        super().__init__(table_name, client=client)
        self.clock = clock

    def put_query(self, tenant: str, query_id: str, documents: list[dict], ttl_seconds: int) -> None:
        # Whole seconds, rounded up: TTL wants epoch seconds, and rounding down could end the entry early.
        expires_at = math.ceil(self.clock() + ttl_seconds)
        self._call(
            "put_item",
            {"TableName": self.table_name, "Item": build_query_item(tenant, query_id, documents, expires_at)},
        )

    def get_query(self, tenant: str, query_id: str) -> list[dict] | None:
        pk = query_pk(tenant, query_id)
        if not addressable(pk, QUERY_ITEM_SK):
            return None
        item = self._call(
            "get_item", {"TableName": self.table_name, "Key": item_key(pk, QUERY_ITEM_SK), "ConsistentRead": True}
        ).get("Item")
        # TTL deletes expired items lazily (typically within days), so an item may outlive its expiry.
        if item is None or float(item[TTL_ATTRIBUTE]["N"]) < self.clock():
            return None
        return json.loads(item["body"]["S"])
