"""What every DynamoDB adapter shares: the table client, key escaping and limits, batched reads and writes with
retries, paged queries, and the one translation of botocore errors into domain errors (`DynamoDbTable._call`).
The key layout of each kind of item is described by its adapter (dynamodb_metadata, dynamodb_chunks, ...)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any

from kindex.adapters.aws import boto
from kindex.domain.errors import Conflict, DependencyFailed

logger = logging.getLogger(__name__)

BATCH_WRITE_MAX = 25
BATCH_WRITE_ATTEMPTS = 8
BATCH_GET_MAX = 100
BATCH_GET_ATTEMPTS = 8
# DynamoDB rejects key values longer than this; such ids cannot exist, so lookups answer "missing" without a call.
MAX_PK_BYTES = 2048
MAX_SK_BYTES = 1024

ConditionFailed = Callable[[dict | None], Exception]  # a domain error, or an adapter's own to catch
#: A transaction's failed condition: the position of the first item that failed, and that item as it was.
ItemConditionFailed = Callable[[int, dict | None], Exception]


@lru_cache(maxsize=3)
def dynamodb_client(profile: str = boto.BACKGROUND) -> Any:
    """The shared boto3 DynamoDB client of a profile (`boto.client_config`), created on first use (boto3 is
    imported here to keep cold starts short)."""
    import boto3

    return boto3.client("dynamodb", config=boto.client_config(profile))


# Pure key and request building
def escape_part(value: str) -> str:
    """A key part with '%' and '#' escaped, so it never contains the '#' separator (see module docstring)."""
    return value.replace("%", "%25").replace("#", "%23")


def item_key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def addressable(pk: str, sk: str) -> bool:
    """Whether DynamoDB accepts this key at all (non-empty, within its byte limits)."""
    return bool(sk) and len(pk.encode("utf-8")) <= MAX_PK_BYTES and len(sk.encode("utf-8")) <= MAX_SK_BYTES


def fit_sort_key(after: str) -> str:
    """`after` cut to the longest prefix DynamoDB accepts as a key value, which selects exactly the same items.

    Every stored sort key is at most 1,024 bytes, so none can extend the cut part into a longer prefix of `after`:
    `sk > after` holds exactly when `sk > cut`.
    """
    cut = after.encode("utf-8")[:MAX_SK_BYTES]
    return cut.decode("utf-8", errors="ignore")


def _pause(attempt: int) -> None:
    """Back off before re-sending unprocessed batch items (DynamoDB returns them when a partition is throttled)."""
    time.sleep(min(0.05 * 2**attempt, 2.0))


def build_batch_get_requests(
    table: str, keys: Sequence[dict], *, projection: str | None = None, consistent: bool = False
) -> Iterator[dict[str, Any]]:
    """BatchGetItem requests for the keys, at most 100 per request (DynamoDB's limit)."""
    for start in range(0, len(keys), BATCH_GET_MAX):
        entry: dict[str, Any] = {"Keys": list(keys[start : start + BATCH_GET_MAX]), "ConsistentRead": consistent}
        if projection:
            entry["ProjectionExpression"] = projection
        yield {"RequestItems": {table: entry}}


def build_batch_write_requests(
    table: str, puts: Sequence[dict] = (), deletes: Sequence[dict] = ()
) -> Iterator[dict[str, Any]]:
    """BatchWriteItem requests putting items and deleting keys, at most 25 per request (DynamoDB's limit)."""
    writes = [{"PutRequest": {"Item": item}} for item in puts] + [{"DeleteRequest": {"Key": key}} for key in deletes]
    for start in range(0, len(writes), BATCH_WRITE_MAX):
        yield {"RequestItems": {table: writes[start : start + BATCH_WRITE_MAX]}}


class DynamoDbTable:
    """The I/O every DynamoDB adapter shares: batched reads and writes with retries, paged queries, and the one
    translation of botocore errors into domain errors."""

    def __init__(self, table_name: str, *, client: Any = None):
        self.table_name = table_name
        self._client = client

    @property
    def client(self) -> Any:
        """The client given, else the shared one of the current profile (short timeouts inside an API request)."""
        return self._client if self._client is not None else boto.shared_client(dynamodb_client, "the metadata store")

    def _batch_get(
        self, keys: Sequence[dict], *, projection: str | None = None, consistent: bool = False
    ) -> Iterator[dict]:
        """Every existing item among the keys: one BatchGetItem per 100 keys, re-sending UnprocessedKeys (which
        DynamoDB returns when throttled or over 16 MB per response) until none are left."""
        for request in build_batch_get_requests(self.table_name, keys, projection=projection, consistent=consistent):
            for attempt in range(BATCH_GET_ATTEMPTS):
                response = self._call("batch_get_item", request)
                yield from response.get("Responses", {}).get(self.table_name, [])
                unprocessed = response.get("UnprocessedKeys") or {}
                if not unprocessed:
                    break
                request = {"RequestItems": unprocessed}
                _pause(attempt)
            else:
                logger.error(
                    "batch read left unprocessed keys", extra={"table": self.table_name, "attempts": BATCH_GET_ATTEMPTS}
                )
                raise DependencyFailed("metadata store is throttling reads; try again later")

    def _batch_write(self, puts: Sequence[dict] = (), deletes: Sequence[dict] = ()) -> None:
        for request in build_batch_write_requests(self.table_name, puts, deletes):
            for attempt in range(BATCH_WRITE_ATTEMPTS):
                unprocessed = self._call("batch_write_item", request).get("UnprocessedItems") or {}
                if not unprocessed:
                    break
                request = {"RequestItems": unprocessed}
                _pause(attempt)
            else:
                logger.error(
                    "batch write left unprocessed items",
                    extra={"table": self.table_name, "attempts": BATCH_WRITE_ATTEMPTS},
                )
                raise DependencyFailed("metadata store is throttling writes; try again later")

    def _query_items(self, pk: str, *, projection: str | None = None) -> Iterator[dict]:
        """Every item of one partition in sort-key order (strongly consistent), following LastEvaluatedKey."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}},
            "ConsistentRead": True,
        }
        if projection:
            request["ProjectionExpression"] = projection
        while True:
            page = self._call("query", request)
            yield from page.get("Items", [])
            if not page.get("LastEvaluatedKey"):
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _call(
        self,
        operation: str,
        request: dict[str, Any],
        *,
        on_condition_failed: ConditionFailed | None = None,
        on_item_failed: ItemConditionFailed | None = None,
    ) -> dict[str, Any]:
        """Send one request; the single place where botocore errors become domain errors.

        A failed write condition becomes whatever `on_condition_failed` makes of the item as it was (None when it
        did not exist); in a transaction, `on_item_failed` is told which of its items failed first (its position)
        instead. Throttling, missing tables, network trouble and everything else become DependencyFailed.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, operation)(**request)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if on_condition_failed is not None and code == "ConditionalCheckFailedException":
                raise on_condition_failed(error.response.get("Item") or None) from error
            if (on_condition_failed or on_item_failed) is not None and code == "TransactionCanceledException":
                reasons = error.response.get("CancellationReasons") or []
                failed = [(i, r) for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
                if failed and on_item_failed is not None:
                    raise on_item_failed(failed[0][0], failed[0][1].get("Item") or None) from error
                if failed and on_condition_failed is not None:
                    raise on_condition_failed(failed[0][1].get("Item") or None) from error
                if any(r.get("Code") == "TransactionConflict" for r in reasons):
                    raise Conflict("a concurrent write touched the same item; try again") from error
            logger.error(
                "dynamodb request failed", extra={"operation": operation, "error_code": code, "table": self.table_name}
            )
            raise DependencyFailed("metadata store request failed") from error
        except BotoCoreError as error:
            logger.error(
                "dynamodb unreachable",
                extra={"operation": operation, "error_type": type(error).__name__, "table": self.table_name},
            )
            raise DependencyFailed("metadata store is unreachable") from error
