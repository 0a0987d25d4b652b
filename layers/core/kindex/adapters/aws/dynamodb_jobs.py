"""DynamoDB adapter of JobStore, in the metadata table (`pk`/`sk` strings).

| item        | pk                | sk         | attributes             |
|-------------|-------------------|------------|------------------------|
| reindex job | `T#{tenant}#JOBS` | `{job_id}` | body, expires_at (TTL) |

One partition per tenant: a job is read by (tenant, id), so another tenant's id is simply a different key and
can never be found. The tenant part is escaped with `dynamodb_store.escape_part` (so `JOBS` cannot meet a
collection's `C#...` partition) and an over-long key is hashed by `dynamodb_chunks.fit_partition_key`, as for the
other items of the table. The body is the job's JSON; it is read back into `ReindexJob` and its own tenant is
checked against the one asked for, so a key collision could never leak a job.

Jobs are kept for 30 days: every write sets `expires_at` (the table's TTL attribute, epoch seconds) to 30 days
after it. TTL deletion is lazy (typically within days), so reads treat an item past its expiry as gone.
Requests are built by the pure functions below; `DynamoDbTable._call` turns botocore errors into
`DependencyFailed`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from kindex.adapters.aws.dynamodb_chunks import fit_partition_key
from kindex.adapters.aws.dynamodb_query_log import TTL_ATTRIBUTE
from kindex.adapters.aws.dynamodb_table import (
    DynamoDbTable,
    addressable,
    escape_part,
    item_key,
)
from kindex.domain.models import ReindexJob

JOB_TTL_SECONDS = 30 * 24 * 3600


def jobs_pk(tenant: str) -> str:
    """The partition holding one tenant's reindex jobs."""
    return fit_partition_key(f"T#{escape_part(tenant)}#JOBS")


def build_job_item(job: ReindexJob, expires_at: int) -> dict[str, dict[str, Any]]:
    return {
        **item_key(jobs_pk(job.tenant), job.id),
        "body": {"S": job.model_dump_json()},
        TTL_ATTRIBUTE: {"N": str(expires_at)},
    }


def build_get_job_request(table: str, tenant: str, job_id: str) -> dict[str, Any]:
    # Strongly consistent: `GET /v1/jobs/{id}` right after `POST .../reindex` must find the job it was given.
    return {"TableName": table, "Key": item_key(jobs_pk(tenant), job_id), "ConsistentRead": True}


class DynamoDbJobStore(DynamoDbTable):
    """Implements JobStore: one item per job in its tenant's partition, expiring 30 days after its last write.

    `client` is a boto3 DynamoDB client (the shared one, created lazily, when omitted); `clock` gives epoch
    seconds (tests move it).
    """

    def __init__(self, table_name: str, *, client: Any = None, clock: Callable[[], float] = time.time):
        super().__init__(table_name, client=client)
        self.clock = clock

    def put_job(self, job: ReindexJob) -> None:
        # Whole seconds, rounded up: TTL wants epoch seconds, and rounding down could end the job's record early.
        expires_at = math.ceil(self.clock() + JOB_TTL_SECONDS)
        self._call("put_item", {"TableName": self.table_name, "Item": build_job_item(job, expires_at)})

    def get_job(self, tenant: str, job_id: str) -> ReindexJob | None:
        if not addressable(jobs_pk(tenant), job_id):
            return None  # DynamoDB refuses such a key, so no job can have it
        item = self._call("get_item", build_get_job_request(self.table_name, tenant, job_id)).get("Item")
        if item is None or float(item[TTL_ATTRIBUTE]["N"]) < self.clock():
            return None
        job = ReindexJob.model_validate_json(item["body"]["S"])
        return job if job.tenant == tenant else None
