"""DynamoDB adapter of the metadata ports (CollectionStore, DocumentStore, KeyStore): one on-demand table, `pk`/`sk`.

Item layout (every item carries the model's JSON in `body`; documents also carry `version` and `revision`, numbers,
and collections `revision`):

| item                 | pk                                   | sk                        |
|----------------------|--------------------------------------|---------------------------|
| collection           | `T#{tenant}#COLLECTIONS`             | `{collection_id}`         |
| document             | `T#{tenant}#C#{collection_id}`       | `{document_id}`           |
| API key              | `KEY#{key_id}`                       | `KEY`                     |
| key listing (all)    | `KEYS`                               | `{created_at}#{key_id}`   |
| key listing (tenant) | `T#{tenant}#KEYS`                    | `{created_at}#{key_id}`   |
| reindex state        | `T#{tenant}#REINDEX`                 | `{collection_id}`         |
| collection deleting  | `T#{tenant}#DELETING`                | `{collection_id}`         |
| stored usage         | `T#{tenant}#USAGE`                   | `STORED`                  |
| metered day          | `T#{tenant}#USAGE`                   | `D#{yyyy-mm-dd}`          |
| metered month (old)¹ | `T#{tenant}#USAGE`                   | `M#{yyyy-mm}`             |

A metered day holds the day's query count and embedding tokens (one UpdateItem per query); a month's tokens are the
sum of its days. ¹ Before 2026-12-02 a month's tokens had an item of their own; it is still read, never written.

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
One sparse GSI, `attention` (partition key `attention`, sort key `sk`, keys only): a document item carries the
`attention` attribute (its own pk) only while it `needs_attention` (pending, in progress, failed and retryable), so
the index holds just those documents and the reindex finds them with a Query whose cost follows their number, not
the collection's size. A reindex state item carries `revision` (a number) for its conditional writes.
A collection being deleted has its item moved, in one TransactWriteItems, from the collections partition to the
`DELETING` one (with `job`, its delete job's id); a create of the collection checks in the same way that no such
item is there, so no read, listing or create can see the collection until its delete job ends the deletion.
A document or collection item's `revision` changes on every write and every update is conditional on it
(`build_put_request`); items written before they had revisions lack the attribute, which counts as revision 0, so
they stay updatable without a migration.

Usage. The stored-usage item holds the tenant's counters (`documents`, `chunks`, `bytes`, `collections`, numbers) and
`writes`, bumped by every change. A record write that changes a counter is one TransactWriteItems: the record's own
conditional write and an `ADD` to the counters, conditional on each counter the write increases being at most
`limit - increase` (`build_usage_update`), so no number of concurrent writers can pass a quota. Deleting a collection's
documents gives their usage back batch by batch (not atomically: the reindex pass recounts, `reconcile`). Metered
items (`D#`, `M#`) are plain `ADD`s and expire (TTL) a year after their period.

Reads are strongly consistent: services read-modify-write with revision checks, and a stale read there would only
turn into a spurious Conflict. Requests are built by the pure functions below; `DynamoDbMetadataStore._call` is the
one place that turns botocore errors into domain errors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kindex.adapters.aws.dynamodb_query_log import TTL_ATTRIBUTE
from kindex.adapters.aws.dynamodb_table import (
    BATCH_WRITE_MAX,
    MAX_PK_BYTES,
    DynamoDbTable,
    addressable,
    escape_part,
    fit_sort_key,
    item_key,
)
from kindex.domain.errors import Conflict, KindexError, NotFound
from kindex.domain.models import ApiKey, Collection, Document, PendingDeletion
from kindex.domain.quotas import COLLECTION_USAGE, QUOTA_NAMES, Metered, QuotaLimits, Usage, document_usage
from kindex.domain.reindex import ReindexState, needs_attention

logger = logging.getLogger(__name__)

KEYS_PARTITION = "KEYS"
KEY_ITEM_SK = "KEY"
ATTENTION_INDEX = "attention"
ATTENTION_ATTRIBUTE = "attention"
USAGE_SK = "STORED"
# Metered items are kept this long after their period began (a bill is read within the year).
METERED_TTL_SECONDS = 400 * 86_400


# Pure key and request building
def collections_pk(tenant: str) -> str:
    return f"T#{escape_part(tenant)}#COLLECTIONS"


def documents_pk(tenant: str, collection_id: str) -> str:
    return f"T#{escape_part(tenant)}#C#{escape_part(collection_id)}"


def reindex_state_pk(tenant: str) -> str:
    return f"T#{escape_part(tenant)}#REINDEX"


def deleting_pk(tenant: str) -> str:
    return f"T#{escape_part(tenant)}#DELETING"


def usage_pk(tenant: str) -> str:
    return f"T#{escape_part(tenant)}#USAGE"


def build_usage_update(table: str, tenant: str, delta: Usage, ceilings: dict[str, int]) -> dict[str, Any]:
    """The Update (of a TransactWriteItems) that adds `delta` to the tenant's stored counters, only while each
    counter named in `ceilings` holds at most its ceiling (`QuotaLimits.ceilings`; a missing counter is 0)."""
    names, values = {"#writes": "writes"}, {":one": {"N": "1"}}
    adds = ["#writes :one"]
    for name in QUOTA_NAMES:
        if amount := getattr(delta, name):
            names[f"#{name}"] = name
            values[f":{name}"] = {"N": str(amount)}
            adds.append(f"#{name} :{name}")
    conditions = []
    for name, ceiling in ceilings.items():
        names[f"#{name}"] = name
        values[f":max_{name}"] = {"N": str(ceiling)}
        conditions.append(f"(attribute_not_exists(#{name}) OR #{name} <= :max_{name})")
    update: dict[str, Any] = {
        "TableName": table,
        "Key": item_key(usage_pk(tenant), USAGE_SK),
        "UpdateExpression": "ADD " + ", ".join(adds),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    if conditions:
        update["ConditionExpression"] = " AND ".join(conditions)
    return update


def build_usage_reset(table: str, tenant: str, usage: Usage, seen_writes: int | None) -> dict[str, Any]:
    """A PutItem setting the counters to `usage`, only if no write changed them since they were read (`writes` still
    `seen_writes`; None: there was no item)."""
    item = {
        **item_key(usage_pk(tenant), USAGE_SK),
        **{name: {"N": str(getattr(usage, name))} for name in QUOTA_NAMES},
        "writes": {"N": str((seen_writes or 0) + 1)},
    }
    request: dict[str, Any] = {"TableName": table, "Item": item}
    if seen_writes is None:
        request["ConditionExpression"] = "attribute_not_exists(pk)"
    else:
        request["ConditionExpression"] = "#writes = :seen"
        request["ExpressionAttributeNames"] = {"#writes": "writes"}
        request["ExpressionAttributeValues"] = {":seen": {"N": str(seen_writes)}}
    return request


def build_metered_add(table: str, tenant: str, day: str, counts: dict[str, int], expires_at: int) -> dict:
    """One UpdateItem adding every non-zero count of `counts` to the day's item (which expires `expires_at`, epoch
    seconds): a query meters its count and its tokens in one write. A month's tokens are the sum of its days."""
    added = {name: amount for name, amount in counts.items() if amount}
    names = {f"#c{i}": name for i, name in enumerate(added)}
    return {
        "TableName": table,
        "Key": item_key(usage_pk(tenant), f"D#{day}"),
        "UpdateExpression": "ADD "
        + ", ".join(f"#c{i} :c{i}" for i in range(len(added)))
        + " SET #ttl = if_not_exists(#ttl, :expires)",
        "ExpressionAttributeNames": {**names, "#ttl": TTL_ATTRIBUTE},
        "ExpressionAttributeValues": {
            **{f":c{i}": {"N": str(amount)} for i, amount in enumerate(added.values())},
            ":expires": {"N": str(expires_at)},
        },
    }


def build_month_days_query(table: str, tenant: str, month: str) -> dict:
    """The day items of `month` (at most 31, a few dozen bytes each): one Query of the usage partition."""
    return {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :last",
        "ExpressionAttributeValues": {
            ":pk": {"S": usage_pk(tenant)},
            ":first": {"S": f"D#{month}-"},
            ":last": {"S": f"D#{month}-~"},
        },
        "ProjectionExpression": "sk, queries, embedding_tokens",
        "ConsistentRead": True,
    }


def _period_start(period: str) -> int:
    from datetime import datetime, timezone

    parts = [int(p) for p in period.split("-")] + [1]
    return int(datetime(parts[0], parts[1], parts[2], tzinfo=timezone.utc).timestamp())


def _stored_usage(item: dict | None) -> Usage:
    item = item or {}
    return Usage(**{name: int(item[name]["N"]) for name in QUOTA_NAMES if name in item})


def at_revision(revision: int) -> dict[str, Any]:
    """The condition parts of a write that needs the item present at `revision` (an item without the attribute,
    written before revisions existed, is at revision 0)."""
    condition = "#revision = :expected"
    if revision == 0:
        condition = f"(attribute_not_exists(#revision) OR {condition})"
    return {
        "ConditionExpression": f"attribute_exists(pk) AND {condition}",
        "ExpressionAttributeNames": {"#revision": "revision"},
        "ExpressionAttributeValues": {":expected": {"N": str(revision)}},
    }


def build_mark_deleting(table: str, tenant: str, collection: Collection, job: str) -> dict[str, Any]:
    """One TransactWriteItems: the collection item goes (only at the revision read; an item without the attribute
    is at 0), and its pending-deletion item, carrying the record and the job, takes its place."""
    pending = build_item(deleting_pk(tenant), collection.id, collection.model_dump_json())
    pending["job"] = {"S": job}
    return {
        "TransactItems": [
            {
                "Delete": {
                    "TableName": table,
                    "Key": item_key(collections_pk(tenant), collection.id),
                    **at_revision(collection.revision),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {"Put": {"TableName": table, "Item": pending}},
            {"Update": build_usage_update(table, tenant, Usage() - COLLECTION_USAGE, {})},
        ]
    }


def build_create_collection(table: str, tenant: str, item: dict, ceilings: dict[str, int]) -> dict[str, Any]:
    """One TransactWriteItems: put the new collection item where none is, while no deletion of that id is pending,
    and count it (within `ceilings`, see `build_usage_update`)."""
    return {
        "TransactItems": [
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": item_key(deleting_pk(tenant), item["sk"]["S"]),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {"Put": {"TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}},
            {"Update": build_usage_update(table, tenant, COLLECTION_USAGE, ceilings)},
        ]
    }


def build_attention_query(table: str, pk: str, *, after: str | None, limit: int) -> dict[str, Any]:
    """A keys-only Query of the sparse `attention` GSI: the documents of one collection that need attention.
    GSIs are read eventually consistent (half the read units); the reindex tolerates a moment's lag."""
    condition = "#attention = :pk"
    values = {":pk": {"S": pk}}
    if after:
        condition += " AND sk > :after"
        values[":after"] = {"S": fit_sort_key(after)}
    return {
        "TableName": table,
        "IndexName": ATTENTION_INDEX,
        "KeyConditionExpression": condition,
        "ExpressionAttributeNames": {"#attention": ATTENTION_ATTRIBUTE},
        "ExpressionAttributeValues": values,
        "ProjectionExpression": "sk",
        "Limit": max(1, limit),
    }


def build_state_put(table: str, tenant: str, state: ReindexState) -> dict[str, Any]:
    """A PutItem of the state that succeeds only over the revision before it (or no item, for revision 1)."""
    item = build_item(reindex_state_pk(tenant), state.collection, state.model_dump_json())
    item["revision"] = {"N": str(state.revision)}
    request: dict[str, Any] = {"TableName": table, "Item": item}
    if state.revision <= 1:
        request["ConditionExpression"] = "attribute_not_exists(pk)"
    else:
        request["ConditionExpression"] = "#revision = :expected"
        request["ExpressionAttributeNames"] = {"#revision": "revision"}
        request["ExpressionAttributeValues"] = {":expected": {"N": str(state.revision - 1)}}
    return request


def key_pk(key_id: str) -> str:
    return f"KEY#{key_id}"


def tenant_keys_pk(tenant: str) -> str:
    return f"T#{escape_part(tenant)}#KEYS"


def key_listing_sk(key: ApiKey) -> str:
    return f"{key.created_at.isoformat()}#{key.key_id}"


def build_item(
    pk: str, sk: str, body: str, *, version: int | None = None, revision: int | None = None
) -> dict[str, dict[str, str]]:
    item = {**item_key(pk, sk), "body": {"S": body}}
    if version is not None:
        item["version"] = {"N": str(version)}
    if revision is not None:
        item["revision"] = {"N": str(revision)}
    return item


def build_delete_request(table: str, key: dict, revision: int | None) -> dict[str, Any]:
    """A DeleteItem of a document item; with `revision`, only while the item is at it (0: an item without one)."""
    request: dict[str, Any] = {"TableName": table, "Key": key, "ReturnValues": "ALL_OLD"}
    if revision is not None:
        request.update(at_revision(revision), ReturnValuesOnConditionCheckFailure="ALL_OLD")
    return request


#: Reads of a document delete without a revision that races writers of the record, before it answers Conflict.
DELETE_READS = 8


class _Gone(Exception):
    """A conditional delete found no item (its condition's attribute_exists failed)."""


def build_put_request(table: str, item: dict, *, create: bool, expected_revision: int = 0) -> dict[str, Any]:
    """A conditional PutItem of a document or collection item: create needs the item absent; update needs it present
    at `expected_revision` (an item without the attribute, written before revisions existed, is at revision 0)."""
    request: dict[str, Any] = {"TableName": table, "Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    if create:
        request["ConditionExpression"] = "attribute_not_exists(pk)"
    else:
        request.update(at_revision(expected_revision))
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
    request: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": condition,
        "ExpressionAttributeValues": values,
        "ConsistentRead": True,
    }
    if count:
        request["Select"] = "COUNT"
    else:
        request["ProjectionExpression"] = "sk"
    return request


def _pending(item: dict) -> PendingDeletion:
    return PendingDeletion(job=item["job"]["S"], collection=Collection.model_validate_json(item["body"]["S"]))


class DynamoDbMetadataStore(DynamoDbTable):
    """Collections, documents and API keys in one DynamoDB table (implements CollectionStore, DocumentStore, KeyStore,
    ReindexLedger, CollectionDeletions).

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

    def put_collection(
        self, tenant: str, collection: Collection, *, create: bool, limits: QuotaLimits | None = None
    ) -> None:
        item = build_item(
            collections_pk(tenant), collection.id, collection.model_dump_json(), revision=collection.revision
        )
        if create:
            ceilings = self._ceilings(tenant, COLLECTION_USAGE, limits)
            self._call(
                "transact_write_items",
                build_create_collection(self.table_name, tenant, item, ceilings),
                on_item_failed=self._counted_failure(
                    tenant,
                    COLLECTION_USAGE,
                    limits,
                    ceilings,
                    lambda _old: Conflict(f"collection {collection.id!r} already exists, or is being deleted"),
                    counter_at=2,
                ),
            )
            return
        self._put_revisioned(item, create=create, what=f"collection {collection.id!r}")

    # Collections being deleted
    def mark_deleting(self, tenant: str, collection: Collection, job: str) -> None:
        def condition_failed(old: dict | None) -> KindexError:
            if old is None:
                return NotFound(f"collection {collection.id!r} does not exist")
            return Conflict(f"collection {collection.id!r} changed meanwhile")

        if not addressable(collections_pk(tenant), collection.id):
            raise NotFound(f"collection {collection.id!r} does not exist")
        self._call(
            "transact_write_items",
            build_mark_deleting(self.table_name, tenant, collection, job),
            on_condition_failed=condition_failed,
        )

    def pending_deletion(self, tenant: str, collection_id: str) -> PendingDeletion | None:
        pk = deleting_pk(tenant)
        if not addressable(pk, collection_id):
            return None
        item = self._call(
            "get_item",
            {
                "TableName": self.table_name,
                "Key": item_key(pk, collection_id),
                "ConsistentRead": True,
                "ProjectionExpression": "body, job",
            },
        ).get("Item")
        return _pending(item) if item else None

    def pending_deletions(self, tenant: str) -> list[PendingDeletion]:
        return [_pending(item) for item in self._query_items(deleting_pk(tenant), projection="body, job")]

    def end_deletion(self, tenant: str, collection_id: str, job: str) -> bool:
        pk = deleting_pk(tenant)
        if not addressable(pk, collection_id):
            return False
        try:
            self._call(
                "delete_item",
                {
                    "TableName": self.table_name,
                    "Key": item_key(pk, collection_id),
                    "ConditionExpression": "job = :job",
                    "ExpressionAttributeValues": {":job": {"S": job}},
                },
                on_condition_failed=lambda _old: NotFound("no such pending deletion"),
            )
        except NotFound:
            return False
        return True

    def delete_collection(self, tenant: str, collection_id: str) -> bool:
        pk = collections_pk(tenant)
        if not addressable(pk, collection_id):
            return False
        # Documents first: if this fails half-way the collection still exists, so a retry finds it and finishes.
        doc_pk = documents_pk(tenant, collection_id)
        deleted = 0
        pending: list[dict] = []
        freed = Usage()
        # Deleting while paging is safe (LastEvaluatedKey does not need the item to exist) and bounds memory. The
        # bodies are read (not only the keys) for the usage each batch gives back once it is deleted.
        request = build_page_query(self.table_name, doc_pk)
        request["ProjectionExpression"] = "sk, body"
        for page in self._query_pages(request):
            for item in page["Items"]:
                pending.append(item_key(doc_pk, item["sk"]["S"]))
                freed += document_usage(Document.model_validate_json(item["body"]["S"]))
                if len(pending) == BATCH_WRITE_MAX:
                    self._batch_write(deletes=pending)
                    self._add_usage(tenant, Usage() - freed)
                    deleted, pending, freed = deleted + len(pending), [], Usage()
        deleted += len(pending)
        # The collection's reindex state goes with its last documents (a missing item deletes as a no-op).
        self._batch_write(deletes=[*pending, item_key(reindex_state_pk(tenant), collection_id)])
        response = self._call(
            "delete_item", {"TableName": self.table_name, "Key": item_key(pk, collection_id), "ReturnValues": "ALL_OLD"}
        )
        existed = "Attributes" in response
        self._add_usage(tenant, Usage() - freed - (COLLECTION_USAGE if existed else Usage()))
        logger.info(
            "collection deleted",
            extra={"tenant": tenant, "collection": collection_id, "documents_deleted": deleted, "existed": existed},
        )
        return existed

    def list_collections(self, tenant: str, *, after: str | None, offset: int, limit: int | None) -> list[str]:
        return self._list_items(collections_pk(tenant), "sk", after=after, offset=offset, limit=limit)

    # Documents
    def get_document(self, tenant: str, collection_id: str, document_id: str) -> Document | None:
        body = self._get_body(documents_pk(tenant, collection_id), document_id)
        return Document.model_validate_json(body) if body is not None else None

    def get_documents(self, tenant: str, refs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Document]:
        keys = [
            item_key(documents_pk(tenant, collection_id), document_id)
            for collection_id, document_id in dict.fromkeys(refs)
        ]
        # Strongly consistent, as get_document: a query must not skip a document indexed a moment ago.
        found: dict[tuple[str, str], Document] = {}
        for item in self._batch_get(
            [key for key in keys if addressable(key["pk"]["S"], key["sk"]["S"])], projection="body", consistent=True
        ):
            document = Document.model_validate_json(item["body"]["S"])
            found[(document.collection, document.id)] = document
        return found

    def put_document(
        self,
        tenant: str,
        document: Document,
        *,
        create: bool,
        previous: Document | None = None,
        limits: QuotaLimits | None = None,
    ) -> None:
        item = build_item(
            documents_pk(tenant, document.collection),
            document.id,
            document.model_dump_json(),
            version=document.version,
            revision=document.revision,
        )
        if needs_attention(document):
            item[ATTENTION_ATTRIBUTE] = {"S": item["pk"]["S"]}
        what = f"document {document.id!r}"
        if create or (previous is not None and previous.revision == document.revision - 1):
            replaced = previous
        else:  # read what it replaces; a record not at the revision before makes the plain write below refuse it
            replaced = self.get_document(tenant, document.collection, document.id)
            if replaced is None or replaced.revision != document.revision - 1:
                self._put_revisioned(item, create=create, what=what)
                return
        delta = document_usage(document) - document_usage(None if create else replaced)
        if not delta:
            self._put_revisioned(item, create=create, what=what)
            return
        # The record and its usage in one transaction: both or neither.
        ceilings = self._ceilings(tenant, delta, limits)
        put = build_put_request(self.table_name, item, create=create, expected_revision=document.revision - 1)
        self._call(
            "transact_write_items",
            {"TransactItems": [{"Put": put}, {"Update": build_usage_update(self.table_name, tenant, delta, ceilings)}]},
            on_item_failed=self._counted_failure(
                tenant, delta, limits, ceilings, self._revision_failed(item, create=create, what=what)
            ),
        )

    def delete_document(
        self, tenant: str, collection_id: str, document_id: str, *, revision: int | None = None
    ) -> bool:
        pk = documents_pk(tenant, collection_id)
        if not addressable(pk, document_id):
            return False
        # The record is read first for what it counts, then deleted at the revision read, with its usage given back
        # in the same transaction. Without `revision`, a write that commits in between makes it read again.
        for _ in range(DELETE_READS):
            stored = self.get_document(tenant, collection_id, document_id)
            if stored is None:
                return False
            if revision is not None and stored.revision != revision:
                raise Conflict(f"document {document_id!r} changed since revision {revision}")
            request = build_delete_request(self.table_name, item_key(pk, document_id), stored.revision)
            request.pop("ReturnValues")

            def changed(_position: int, item: dict | None) -> Exception:
                # The item as it was: None when it did not exist (nothing to delete), else at another revision.
                return _Gone() if item is None else Conflict(f"document {document_id!r} changed meanwhile")

            update = build_usage_update(self.table_name, tenant, Usage() - document_usage(stored), {})
            try:
                self._call(
                    "transact_write_items",
                    {"TransactItems": [{"Delete": request}, {"Update": update}]},
                    on_item_failed=changed,
                )
            except _Gone:
                return False
            except Conflict:
                if revision is not None:
                    raise Conflict(f"document {document_id!r} changed since revision {revision}") from None
                continue
            return True
        raise Conflict(f"document {document_id!r} kept changing while it was deleted")

    def list_documents(
        self, tenant: str, collection_id: str, *, after: str | None, offset: int, limit: int | None
    ) -> list[Document]:
        # The bodies cost no more read units than the keys: DynamoDB charges a Query by the items' whole size.
        bodies = self._list_items(documents_pk(tenant, collection_id), "body", after=after, offset=offset, limit=limit)
        return [Document.model_validate_json(body) for body in bodies]

    def count_documents(self, tenant: str, collection_id: str) -> int:
        request = build_page_query(self.table_name, documents_pk(tenant, collection_id), count=True)
        return sum(page["Count"] for page in self._query_pages(request))

    # Reindex ledger
    def get_state(self, tenant: str, collection_id: str) -> ReindexState | None:
        body = self._get_body(reindex_state_pk(tenant), collection_id)
        return ReindexState.model_validate_json(body) if body is not None else None

    def put_state(self, tenant: str, state: ReindexState) -> None:
        self._call(
            "put_item",
            build_state_put(self.table_name, tenant, state),
            on_condition_failed=(lambda _old: Conflict(f"reindex state of {state.collection!r} changed meanwhile")),
        )

    def attention_documents(self, tenant: str, collection_id: str, *, after: str | None, limit: int) -> list[str]:
        pk = documents_pk(tenant, collection_id)
        if limit <= 0 or len(pk.encode("utf-8")) > MAX_PK_BYTES:
            return []
        ids: list[str] = []
        request = build_attention_query(self.table_name, pk, after=after, limit=limit)
        while len(ids) < limit:
            page = self._call("query", request)
            ids.extend(item["sk"]["S"] for item in page.get("Items", []))
            if not page.get("LastEvaluatedKey"):
                break
            request = {**request, "ExclusiveStartKey": page["LastEvaluatedKey"], "Limit": max(1, limit - len(ids))}
        return ids[:limit]

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
        return [
            ApiKey.model_validate_json(item["body"]["S"])
            for page in self._query_pages(request)
            for item in page["Items"]
        ]

    def revoke_key(self, key_id: str) -> bool:
        key = self.get_key(key_id)
        if key is None:
            return False
        self._write_key(key.model_copy(update={"revoked": True}), create=False)
        return True

    # Internals
    def _put_revisioned(self, item: dict, *, create: bool, what: str) -> None:
        """Put a document or collection item (which carries its `revision`): a create only where none exists
        (Conflict), an update only over the revision before (Conflict) of an existing item (NotFound)."""
        revision = int(item["revision"]["N"])
        request = build_put_request(self.table_name, item, create=create, expected_revision=revision - 1)
        self._call("put_item", request, on_condition_failed=self._revision_failed(item, create=create, what=what))

    def _revision_failed(self, item: dict, *, create: bool, what: str) -> Callable[[dict | None], KindexError]:
        def condition_failed(old: dict | None) -> KindexError:
            if create:
                return Conflict(f"{what} already exists")
            # ALL_OLD returns the stored item when the revision check failed; read it back in case it is not there.
            if old is None and self._get_body(item["pk"]["S"], item["sk"]["S"]) is None:
                return NotFound(f"{what} does not exist")
            return Conflict(f"{what} changed meanwhile")

        return condition_failed

    # Usage
    def _ceilings(self, tenant: str, delta: Usage, limits: QuotaLimits | None) -> dict[str, int]:
        """The counters' ceilings for a write adding `delta`; QuotaExceeded, without a write, when the write alone
        passes a limit."""
        ceilings = limits.ceilings(delta) if limits is not None else {}
        for name, ceiling in ceilings.items():
            if ceiling < 0:
                raise limits.exceeded(name, self.usage(tenant), delta)  # type: ignore[union-attr]
        return ceilings

    def _counted_failure(
        self,
        tenant: str,
        delta: Usage,
        limits: QuotaLimits | None,
        ceilings: dict[str, int],
        record_failed: Callable[[dict | None], KindexError],
        *,
        counter_at: int = 1,
    ) -> Callable[[int, dict | None], KindexError]:
        """What a counted write's failed transaction means: the counters' condition (item `counter_at`) is
        QuotaExceeded naming the limit, with the usage read again; any other item's is `record_failed`'s."""

        def failed(position: int, old: dict | None) -> KindexError:
            if position != counter_at:
                return record_failed(old)
            current = self.usage(tenant)
            for name, ceiling in ceilings.items():
                if getattr(current, name) > ceiling:
                    return limits.exceeded(name, current, delta)  # type: ignore[union-attr]
            return Conflict("the tenant's usage changed meanwhile; try again")  # freed since: a retry may fit

        return failed

    def _add_usage(self, tenant: str, delta: Usage) -> None:
        if delta:
            self._call("update_item", build_usage_update(self.table_name, tenant, delta, {}))

    def _usage_item(self, tenant: str) -> dict | None:
        return self._call(
            "get_item",
            {"TableName": self.table_name, "Key": item_key(usage_pk(tenant), USAGE_SK), "ConsistentRead": True},
        ).get("Item")

    def usage(self, tenant: str) -> Usage:
        return _stored_usage(self._usage_item(tenant))

    def reconcile(self, tenant: str) -> tuple[Usage, Usage] | None:
        item = self._usage_item(tenant)
        before = _stored_usage(item)
        collections = self._list_items(collections_pk(tenant), "sk", after=None, offset=0, limit=None)
        # Documents of collections being deleted count until their delete job removes them, as the writes count.
        partitions = [*collections, *(p.collection.id for p in self.pending_deletions(tenant))]
        counted = Usage(collections=len(collections))
        for collection_id in dict.fromkeys(partitions):
            for body in self._list_items(documents_pk(tenant, collection_id), "body", after=None, offset=0, limit=None):
                counted += document_usage(Document.model_validate_json(body))
        if counted == before:
            return before, counted
        seen = int(item["writes"]["N"]) if item and "writes" in item else (0 if item else None)
        try:
            self._call(
                "put_item",
                build_usage_reset(self.table_name, tenant, counted, seen),
                on_condition_failed=lambda _old: Conflict("usage changed while it was counted"),
            )
        except Conflict:
            return None
        return before, counted

    def add_metered(self, tenant: str, *, day: str, month: str, queries: int = 0, embedding_tokens: int = 0) -> None:
        if queries or embedding_tokens:
            expires = _period_start(day) + METERED_TTL_SECONDS
            counts = {"queries": queries, "embedding_tokens": embedding_tokens}
            self._call("update_item", build_metered_add(self.table_name, tenant, day, counts, expires))

    def metered(self, tenant: str, *, day: str, month: str) -> Metered:
        pk = usage_pk(tenant)
        days = build_month_days_query(self.table_name, tenant, month)
        month_items = [item for page in self._query_pages(days) for item in page["Items"]]
        by_sk = {item["sk"]["S"]: item for item in month_items}
        # The month's own item holds tokens metered before a day's item held them; the day is read apart only when it
        # is not one of the month's (the query just read it otherwise).
        in_month = day.startswith(f"{month}-")
        keys = [item_key(pk, f"M#{month}")] + ([] if in_month else [item_key(pk, f"D#{day}")])
        found = {
            item["sk"]["S"]: item
            for item in self._batch_get(keys, projection="sk, queries, embedding_tokens", consistent=True)
        }
        if f"M#{month}" in found:
            month_items.append(found[f"M#{month}"])
        day_item = by_sk.get(f"D#{day}") or found.get(f"D#{day}", {})
        queries = day_item.get("queries", {"N": "0"})["N"]
        tokens = sum(int(item.get("embedding_tokens", {"N": "0"})["N"]) for item in month_items)
        return Metered(queries_today=int(queries), embedding_tokens_month=tokens)

    def _write_key(self, key: ApiKey, *, create: bool) -> None:
        """The key item and its two listing copies, all or nothing."""
        body = key.model_dump_json()
        listing_sk = key_listing_sk(key)
        condition = "attribute_not_exists(pk)" if create else "attribute_exists(pk)"
        items = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": build_item(key_pk(key.key_id), KEY_ITEM_SK, body),
                    "ConditionExpression": condition,
                }
            },
            {"Put": {"TableName": self.table_name, "Item": build_item(KEYS_PARTITION, listing_sk, body)}},
            {"Put": {"TableName": self.table_name, "Item": build_item(tenant_keys_pk(key.tenant), listing_sk, body)}},
        ]
        self._call(
            "transact_write_items",
            {"TransactItems": items},
            on_condition_failed=(
                lambda _old: Conflict("key id already exists") if create else NotFound("key does not exist")
            ),
        )

    def _get_body(self, pk: str, sk: str) -> str | None:
        if not addressable(pk, sk):
            return None
        response = self._call(
            "get_item",
            {
                "TableName": self.table_name,
                "Key": item_key(pk, sk),
                "ConsistentRead": True,
                "ProjectionExpression": "body",
            },
        )
        item = response.get("Item")
        return item["body"]["S"] if item else None

    def _query_pages(self, request: dict[str, Any], needed: Callable[[], int | None] = lambda: None) -> Iterator[dict]:
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

    def _list_items(self, pk: str, attribute: str, *, after: str | None, offset: int, limit: int | None) -> list[str]:
        """The string `attribute` (`sk`: the ids; `body`: the records) of the partition's items in sort-key order."""
        if limit is not None and limit <= 0:
            return []
        values: list[str] = []
        to_skip = max(offset, 0)

        def needed() -> int | None:
            # DynamoDB cannot skip items server-side, so the skipped ones are read too; read no more than that.
            return None if limit is None else to_skip + limit - len(values)

        request = build_page_query(self.table_name, pk, after=after)
        request["ProjectionExpression"] = attribute
        for page in self._query_pages(request, needed):
            for item in page["Items"]:
                if to_skip:
                    to_skip -= 1
                    continue
                values.append(item[attribute]["S"])
                if limit is not None and len(values) >= limit:
                    return values
        return values
