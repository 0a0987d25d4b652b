"""Reindex bookkeeping: what a collection's last complete sweep covered (`ReindexState`), which documents need a
look without any sweep (`needs_attention`), and the bounded unit of work the planner sends to the worker
(`ReindexTask`)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kindex.domain.models import DocumentStatus, ResourceId

if TYPE_CHECKING:
    from kindex.domain.models import Collection, Document

# One task is a small JSON object of at most three ids (tenant, collection, a document id or blob key): an id is at
# most 255 characters, 12 bytes each once JSON-escaped (a surrogate pair), and `after` at most 2,048 bytes, so a task
# stays under 16 KiB, far below SQS's 256 KiB; decoding refuses anything larger before parsing it.
MAX_TASK_BYTES = 16 * 1024
TASK_MARKER = "kindex_reindex"


def needs_attention(document: Document) -> bool:
    """Waiting for the ingest, being indexed, or failed for a reason worth retrying: the documents a pass looks at
    without sweeping their collection (the stores index exactly these: a sparse GSI on DynamoDB, a partial index in
    SQLite)."""
    if document.status is DocumentStatus.FAILED:
        return document.failure_retryable
    return document.status in (DocumentStatus.PENDING, DocumentStatus.IN_PROGRESS)


class ReindexState(BaseModel):
    """What the reindex knows about one collection between passes (one small record beside the collection).

    `swept_*`: the configuration under which a complete sweep last found every document current; while they match
    the collection, a pass does not sweep it. `resent_*`: the configuration under which a complete sweep re-sent
    work; the sweeps that then confirm it are shallow (chunk items are read only on pages still out of step).
    `drift_after`: where the next bounded drift page starts (None: at the beginning). `blob_after`: the same for the
    collection's blobs. `sweeping_since`: a chain of sweep pages is in flight (another is not started while it is
    recent). `revision` makes writes conditional: two workers never overwrite each other's cursor silently."""

    model_config = ConfigDict(extra="forbid")

    collection: ResourceId
    collection_created_at: datetime | None = None
    swept_config_version: int = 0
    swept_model: str | None = None
    resent_config_version: int = 0
    resent_model: str | None = None
    drift_after: str | None = None
    blob_after: str | None = None
    sweeping_since: datetime | None = None
    revision: int = 0

    def covers(self, collection: Collection) -> bool:
        """Whether a complete sweep found the collection, as it is configured now, fully indexed."""
        return (
            self.collection_created_at == collection.created_at
            and not collection.switching
            and self.swept_config_version == collection.config_version
            and self.swept_model == collection.embedding_model
        )

    def resent(self, collection: Collection) -> bool:
        """Whether a complete sweep under the collection's current configuration already re-sent its work."""
        return (
            self.collection_created_at == collection.created_at
            and self.resent_config_version == collection.config_version
            and self.resent_model == collection.embedding_model
        )


class ReindexTask(BaseModel):
    """One message of reindex work, bounded in size and in the work it asks for.

    kind `tenant`: delete blobs of collections that no longer exist, walking collection prefixes from `after` (a
    blob key); with `recount`, first recount the tenant's usage counters from its records (it reads every document
    item of the tenant, so the planner asks for it once a day and on full passes, not every hour). kind
    `collection`: one collection's pass (documents needing attention, one bounded drift page, one blob page; a sweep
    when its configuration changed). kind `sweep`: one page of a sweep, documents strictly after
    `after`; `total`/`done`/`enqueued` carry the counts of the sweep's earlier pages; `job` is the reindex job it
    reports to (POST .../reindex), `clean` rebuilds from scratch, `deep` reads every page's chunk items. kind
    `delete`: the next step of the delete job `job` (DELETE /v1/collections/{c}), after the step named by `after`
    (None: the first; kindex/app/collection_deletion.py)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["tenant", "collection", "sweep", "delete"]
    tenant: ResourceId
    collection: ResourceId | None = None
    after: str | None = None
    clean: bool = False
    deep: bool = True  # a sweep page compares the chunk store too (False: only pages whose counts disagree)
    recount: bool = False  # kind tenant: recount the usage counters (UsageService.reconcile)
    job: str | None = Field(default=None, max_length=64)
    total: int = Field(default=0, ge=0)
    done: int = Field(default=0, ge=0)
    enqueued: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _collection_when_needed(self) -> ReindexTask:
        if (self.collection is None) != (self.kind == "tenant"):
            raise ValueError("a collection, sweep or delete task names a collection; a tenant task does not")
        if self.kind == "delete" and not self.job:
            raise ValueError("a delete task names its job")
        if self.after is not None and len(self.after.encode("utf-8", errors="replace")) > 2048:
            raise ValueError(
                "after is a document id or a blob key (S3 keys are at most 1,024 bytes): at most 2,048 bytes"
            )
        return self

    def encode(self) -> str:
        body = json.dumps(
            {
                TASK_MARKER: self.model_dump(mode="json", exclude_defaults=True)
                | {"kind": self.kind, "tenant": self.tenant}
            },
            separators=(",", ":"),
        )
        if len(body.encode("utf-8")) > MAX_TASK_BYTES:  # cannot happen with valid ids; a guard, not a path
            raise ValueError("reindex task over its size bound")
        return body

    @property
    def lane(self) -> str:
        """Local queue lane (tenants take turns) and group (one task per collection at a time)."""
        return self.tenant

    @property
    def group(self) -> str:
        return json.dumps(["reindex", self.tenant, self.collection])


def is_task_body(body: str) -> bool:
    """Whether a queue message body is a reindex task (rather than an S3 notification for the ingest)."""
    return body.startswith('{"' + TASK_MARKER + '"')


def decode_task(body: str) -> ReindexTask:
    """The task in a message body; ValueError for anything else (oversized, not JSON, wrong shape)."""
    if len(body.encode("utf-8")) > MAX_TASK_BYTES:
        raise ValueError("reindex task body over its size bound")
    data = json.loads(body)
    if not isinstance(data, dict) or set(data) != {TASK_MARKER}:
        raise ValueError("not a reindex task")
    return ReindexTask.model_validate(data[TASK_MARKER])
