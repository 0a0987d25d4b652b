"""DynamoDB adapter of the metadata ports (CollectionStore, DocumentStore, KeyStore): one on-demand table, `pk`/`sk`.

Item layout (every item carries the model's JSON in `body`; documents also carry `version`, a number):

| item                 | pk                                   | sk                        |
|----------------------|--------------------------------------|---------------------------|
| collection           | `T#{tenant}#COLLECTIONS`             | `{collection_id}`         |
| document             | `T#{tenant}#C#{collection_id}`       | `{document_id}`           |
| API key              | `KEY#{key_id}`                       | `KEY`                     |
| key listing (all)    | `KEYS`                               | `{created_at}#{key_id}`   |
| key listing (tenant) | `T#{tenant}#KEYS`                    | `{created_at}#{key_id}`   |

Key construction. Ids may contain '#', '%', spaces and any unicode, so the parts of a partition key are escaped:
`%` becomes `%25` and `#` becomes `%23` (and nothing else changes). Escaped parts never contain '#', so the '#'
separators are unambiguous and two different (tenant, collection) pairs can never build the same pk; after the tenant
the next token (`COLLECTIONS`, `KEYS` or `C`) tells the item kinds apart. Sort keys are the raw ids, never escaped:
the sort key is the only thing in its position so it cannot collide, and listing relies on DynamoDB ordering sort
keys by UTF-8 bytes, which is the code point order the ports promise (percent-encoding would break that order).
Escaping only two characters (rather than percent-encoding everything or length-prefixing) also keeps the keys
within DynamoDB's limits for the longest ids the models accept: 255 characters of 4-byte UTF-8 is 1,020 bytes, so an
sk stays under 1,024 bytes and a document pk (two such parts plus 5 separator bytes) under 2,048 bytes.

Key listings are denormalised copies of the key item written in the same TransactWriteItems, so listing keys (all,
or one tenant's) is a Query, never a Scan. `{created_at}#{key_id}` sorts like the local store's
`ORDER BY created_at, key_id` because '#' sorts below every character an ISO timestamp can continue with.
No GSI is needed.

Reads are strongly consistent: services read-modify-write with version checks, and a stale read there would only
turn into a spurious Conflict. Requests are built by the pure functions below; `DynamoDbMetadataStore._call` is the
one place that turns botocore errors into domain errors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any

from kindex.domain.errors import Conflict, DependencyFailed, KindexError, NotFound
from kindex.domain.models import ApiKey, Collection, Document

logger = logging.getLogger(__name__)

KEYS_PARTITION = "KEYS"
KEY_ITEM_SK = "KEY"
BATCH_WRITE_MAX = 25
BATCH_WRITE_ATTEMPTS = 8
BATCH_GET_MAX = 100
BATCH_GET_ATTEMPTS = 8
# DynamoDB rejects key values longer than this; such ids cannot exist, so lookups answer "missing" without a call.
MAX_PK_BYTES = 2048
MAX_SK_BYTES = 1024

ConditionFailed = Callable[[dict | None], KindexError]


@lru_cache(maxsize=1)
def dynamodb_client() -> Any:
    """The shared boto3 DynamoDB client, created on first use (boto3 is imported here to keep cold starts short)."""
    import boto3
    from botocore.config import Config

    return boto3.client("dynamodb", config=Config(retries={"mode": "standard", "max_attempts": 5}))


# Pure key and request building
def escape_part(value: str) -> str:
    """A key part with '%' and '#' escaped, so it never contains the '#' separator (see module docstring)."""
    return value.replace("%", "%25").replace("#", "%23")


def collections_pk(tenant: str) -> str:
    return f"T#{escape_part(tenant)}#COLLECTIONS"


def documents_pk(tenant: str, collection_id: str) -> str:
    return f"T#{escape_part(tenant)}#C#{escape_part(collection_id)}"


def key_pk(key_id: str) -> str:
    return f"KEY#{key_id}"


def tenant_keys_pk(tenant: str) -> str:
    return f"T#{escape_part(tenant)}#KEYS"


def key_listing_sk(key: ApiKey) -> str:
    return f"{key.created_at.isoformat()}#{key.key_id}"


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


def build_item(pk: str, sk: str, body: str, *, version: int | None = None) -> dict[str, dict[str, str]]:
    item = {**item_key(pk, sk), "body": {"S": body}}
    if version is not None:
        item["version"] = {"N": str(version)}
    return item


def build_put_request(table: str, item: dict, *, create: bool, expected_version: int | None = None) -> dict[str, Any]:
    """A conditional PutItem: create needs the item absent; update needs it present (and at `expected_version`)."""
    request: dict[str, Any] = {"TableName": table, "Item": item,
                               "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    if create:
        request["ConditionExpression"] = "attribute_not_exists(pk)"
    elif expected_version is None:
        request["ConditionExpression"] = "attribute_exists(pk)"
    else:
        request["ConditionExpression"] = "attribute_exists(pk) AND #version = :expected"
        request["ExpressionAttributeNames"] = {"#version": "version"}
        request["ExpressionAttributeValues"] = {":expected": {"N": str(expected_version)}}
    return request


def build_page_query(table: str, pk: str, *, after: str | None = None, count: bool = False) -> dict[str, Any]:
    """A Query over one partition in sort-key order, strictly after `after` when given.

    `sk > :after` is used rather than ExclusiveStartKey: it is exact whether or not an item with that id exists.
    """
    condition = "pk = :pk"
    values = {":pk": {"S": pk}}
    if after:  # an empty `after` excludes nothing, and DynamoDB refuses empty key values
        condition += " AND sk > :after"
        values[":after"] = {"S": fit_sort_key(after)}
    request: dict[str, Any] = {"TableName": table, "KeyConditionExpression": condition,
                               "ExpressionAttributeValues": values, "ConsistentRead": True}
    if count:
        request["Select"] = "COUNT"
    else:
        request["ProjectionExpression"] = "sk"
    return request




def _pause(attempt: int) -> None:
    """Back off before re-sending unprocessed batch items (DynamoDB returns them when a partition is throttled)."""
    time.sleep(min(0.05 * 2 ** attempt, 2.0))


def build_batch_get_requests(table: str, keys: Sequence[dict], *, projection: str | None = None,
                             consistent: bool = False) -> Iterator[dict[str, Any]]:
    """BatchGetItem requests for the keys, at most 100 per request (DynamoDB's limit)."""
    for start in range(0, len(keys), BATCH_GET_MAX):
        entry: dict[str, Any] = {"Keys": list(keys[start:start + BATCH_GET_MAX]), "ConsistentRead": consistent}
        if projection:
            entry["ProjectionExpression"] = projection
        yield {"RequestItems": {table: entry}}


def build_batch_write_requests(table: str, puts: Sequence[dict] = (), deletes: Sequence[dict] = ()
                               ) -> Iterator[dict[str, Any]]:
    """BatchWriteItem requests putting items and deleting keys, at most 25 per request (DynamoDB's limit)."""
    writes = [{"PutRequest": {"Item": item}} for item in puts] + [{"DeleteRequest": {"Key": key}} for key in deletes]
    for start in range(0, len(writes), BATCH_WRITE_MAX):
        yield {"RequestItems": {table: writes[start:start + BATCH_WRITE_MAX]}}



class DynamoDbTable:
    """The I/O every DynamoDB adapter shares: batched reads and writes with retries, paged queries, and the one
    translation of botocore errors into domain errors."""

    def __init__(self, table_name: str, *, client: Any = None):
        self.table_name = table_name
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = dynamodb_client()
        return self._client

    def _batch_get(self, keys: Sequence[dict], *, projection: str | None = None,
                   consistent: bool = False) -> Iterator[dict]:
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
                logger.error("batch read left unprocessed keys", extra={"table": self.table_name,
                                                                         "attempts": BATCH_GET_ATTEMPTS})
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
                logger.error("batch write left unprocessed items", extra={"table": self.table_name,
                                                                           "attempts": BATCH_WRITE_ATTEMPTS})
                raise DependencyFailed("metadata store is throttling writes; try again later")

    def _query_items(self, pk: str, *, projection: str | None = None) -> Iterator[dict]:
        """Every item of one partition in sort-key order (strongly consistent), following LastEvaluatedKey."""
        request: dict[str, Any] = {"TableName": self.table_name, "KeyConditionExpression": "pk = :pk",
                                   "ExpressionAttributeValues": {":pk": {"S": pk}}, "ConsistentRead": True}
        if projection:
            request["ProjectionExpression"] = projection
        while True:
            page = self._call("query", request)
            yield from page.get("Items", [])
            if not page.get("LastEvaluatedKey"):
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _call(self, operation: str, request: dict[str, Any], *,
              on_condition_failed: ConditionFailed | None = None) -> dict[str, Any]:
        """Send one request; the single place where botocore errors become domain errors.

        A failed write condition becomes whatever `on_condition_failed` makes of the item as it was (None when it
        did not exist); throttling, missing tables, network trouble and everything else become DependencyFailed.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, operation)(**request)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if on_condition_failed is not None and code == "ConditionalCheckFailedException":
                raise on_condition_failed(error.response.get("Item") or None) from error
            if on_condition_failed is not None and code == "TransactionCanceledException":
                reasons = error.response.get("CancellationReasons") or []
                failed = [r for r in reasons if r.get("Code") == "ConditionalCheckFailed"]
                if failed:
                    raise on_condition_failed(failed[0].get("Item") or None) from error
                if any(r.get("Code") == "TransactionConflict" for r in reasons):
                    raise Conflict("a concurrent write touched the same item; try again") from error
            logger.error("dynamodb request failed", extra={"operation": operation, "error_code": code,
                                                           "table": self.table_name})
            raise DependencyFailed("metadata store request failed") from error
        except BotoCoreError as error:
            logger.error("dynamodb unreachable", extra={"operation": operation, "error_type": type(error).__name__,
                                                        "table": self.table_name})
            raise DependencyFailed("metadata store is unreachable") from error


class DynamoDbMetadataStore(DynamoDbTable):
    """Collections, documents and API keys in one DynamoDB table (implements CollectionStore, DocumentStore, KeyStore).

    `client` is a boto3 DynamoDB client (created lazily when omitted). `page_size`, when set, caps the items per Query
    page (DynamoDB's own cap is 1 MB); tests use it to exercise paging.
    """

    def __init__(self, table_name: str, *, client: Any = None, page_size: int | None = None):
        super().__init__(table_name, client=client)
        self.page_size = page_size

    # Collections
    def get_collection(self, tenant: str, collection_id: str) -> Collection | None:
        body = self._get_body(collections_pk(tenant), collection_id)
        return Collection.model_validate_json(body) if body is not None else None

    def put_collection(self, tenant: str, collection: Collection, *, create: bool) -> None:
        item = build_item(collections_pk(tenant), collection.id, collection.model_dump_json())
        self._call("put_item", build_put_request(self.table_name, item, create=create), on_condition_failed=(
            lambda _old: Conflict(f"collection {collection.id!r} already exists") if create
            else NotFound(f"collection {collection.id!r} does not exist")))

    def delete_collection(self, tenant: str, collection_id: str) -> bool:
        pk = collections_pk(tenant)
        if not addressable(pk, collection_id):
            return False
        # Documents first: if this fails half-way the collection still exists, so a retry finds it and finishes.
        doc_pk = documents_pk(tenant, collection_id)
        deleted = 0
        pending: list[dict] = []
        # Deleting while paging is safe (LastEvaluatedKey does not need the item to exist) and bounds memory.
        for sort_key in self._sort_keys(doc_pk, after=None):
            pending.append(item_key(doc_pk, sort_key))
            if len(pending) == BATCH_WRITE_MAX:
                self._batch_write(deletes=pending)
                deleted, pending = deleted + len(pending), []
        self._batch_write(deletes=pending)
        deleted += len(pending)
        response = self._call("delete_item", {"TableName": self.table_name, "Key": item_key(pk, collection_id),
                                              "ReturnValues": "ALL_OLD"})
        existed = "Attributes" in response
        logger.info("collection deleted", extra={"tenant": tenant, "collection": collection_id,
                                                 "documents_deleted": deleted, "existed": existed})
        return existed

    def list_collections(self, tenant: str, *, after: str | None, offset: int, limit: int | None) -> list[str]:
        return self._list_ids(collections_pk(tenant), after=after, offset=offset, limit=limit)

    # Documents
    def get_document(self, tenant: str, collection_id: str, document_id: str) -> Document | None:
        body = self._get_body(documents_pk(tenant, collection_id), document_id)
        return Document.model_validate_json(body) if body is not None else None

    def put_document(self, tenant: str, document: Document, *, create: bool, expected_version: int | None = None) -> None:
        item = build_item(documents_pk(tenant, document.collection), document.id, document.model_dump_json(),
                          version=document.version)

        def condition_failed(old: dict | None) -> KindexError:
            if create:
                return Conflict(f"document {document.id!r} already exists")
            # ALL_OLD returns the stored item when the version check failed; read it back in case it is not there.
            if old is None and self._get_body(item["pk"]["S"], document.id) is None:
                return NotFound(f"document {document.id!r} does not exist")
            return Conflict(f"document {document.id!r} changed meanwhile")

        request = build_put_request(self.table_name, item, create=create, expected_version=expected_version)
        self._call("put_item", request, on_condition_failed=condition_failed)

    def delete_document(self, tenant: str, collection_id: str, document_id: str) -> bool:
        pk = documents_pk(tenant, collection_id)
        if not addressable(pk, document_id):
            return False
        response = self._call("delete_item", {"TableName": self.table_name, "Key": item_key(pk, document_id),
                                              "ReturnValues": "ALL_OLD"})
        return "Attributes" in response

    def list_documents(self, tenant: str, collection_id: str, *, after: str | None, offset: int,
                       limit: int | None) -> list[str]:
        return self._list_ids(documents_pk(tenant, collection_id), after=after, offset=offset, limit=limit)

    def count_documents(self, tenant: str, collection_id: str) -> int:
        request = build_page_query(self.table_name, documents_pk(tenant, collection_id), count=True)
        return sum(page["Count"] for page in self._query_pages(request))

    # API keys
    def put_key(self, key: ApiKey) -> None:
        self._write_key(key, create=True)

    def get_key(self, key_id: str) -> ApiKey | None:
        body = self._get_body(key_pk(key_id), KEY_ITEM_SK)
        return ApiKey.model_validate_json(body) if body is not None else None

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        pk = KEYS_PARTITION if tenant is None else tenant_keys_pk(tenant)
        request = build_page_query(self.table_name, pk)
        request["ProjectionExpression"] = "body"
        return [ApiKey.model_validate_json(item["body"]["S"])
                for page in self._query_pages(request) for item in page["Items"]]

    def revoke_key(self, key_id: str) -> bool:
        key = self.get_key(key_id)
        if key is None:
            return False
        self._write_key(key.model_copy(update={"revoked": True}), create=False)
        return True

    # Internals
    def _write_key(self, key: ApiKey, *, create: bool) -> None:
        """The key item and its two listing copies, all or nothing."""
        body = key.model_dump_json()
        listing_sk = key_listing_sk(key)
        condition = "attribute_not_exists(pk)" if create else "attribute_exists(pk)"
        items = [
            {"Put": {"TableName": self.table_name, "Item": build_item(key_pk(key.key_id), KEY_ITEM_SK, body),
                     "ConditionExpression": condition}},
            {"Put": {"TableName": self.table_name, "Item": build_item(KEYS_PARTITION, listing_sk, body)}},
            {"Put": {"TableName": self.table_name, "Item": build_item(tenant_keys_pk(key.tenant), listing_sk, body)}},
        ]
        self._call("transact_write_items", {"TransactItems": items}, on_condition_failed=(
            lambda _old: Conflict("key id already exists") if create else NotFound("key does not exist")))

    def _get_body(self, pk: str, sk: str) -> str | None:
        if not addressable(pk, sk):
            return None
        response = self._call("get_item", {"TableName": self.table_name, "Key": item_key(pk, sk),
                                           "ConsistentRead": True, "ProjectionExpression": "body"})
        item = response.get("Item")
        return item["body"]["S"] if item else None

    def _query_pages(self, request: dict[str, Any],
                     needed: Callable[[], int | None] = lambda: None) -> Iterator[dict]:
        """Every page of a Query, following LastEvaluatedKey; `needed` bounds the next page's size when known."""
        request = dict(request)
        while True:
            caps = [cap for cap in (self.page_size, needed()) if cap is not None]
            if caps:
                request["Limit"] = max(1, min(caps))
            else:
                request.pop("Limit", None)
            page = self._call("query", request)
            yield page
            last_key = page.get("LastEvaluatedKey")
            if not last_key:
                return
            request["ExclusiveStartKey"] = last_key

    def _sort_keys(self, pk: str, *, after: str | None) -> Iterator[str]:
        for page in self._query_pages(build_page_query(self.table_name, pk, after=after)):
            for item in page["Items"]:
                yield item["sk"]["S"]

    def _list_ids(self, pk: str, *, after: str | None, offset: int, limit: int | None) -> list[str]:
        if limit is not None and limit <= 0:
            return []
        ids: list[str] = []
        to_skip = max(offset, 0)

        def needed() -> int | None:
            # DynamoDB cannot skip items server-side, so the skipped ones are read too; read no more than that.
            return None if limit is None else to_skip + limit - len(ids)

        for page in self._query_pages(build_page_query(self.table_name, pk, after=after), needed):
            for item in page["Items"]:
                if to_skip:
                    to_skip -= 1
                    continue
                ids.append(item["sk"]["S"])
                if limit is not None and len(ids) >= limit:
                    return ids
        return ids
