"""Per-tenant quotas (what a tenant may store) and usage (what it stores, and what it used today and this month).

A plan's `quotas` sit beside its rate limits in the usage plans (`kindex.domain.usage_plans`): documents, chunks,
stored bytes (files and text) and collections, each optional (missing: no limit). The stored usage is a function of
the records: every document counts 1, its `chunk_count` and its `content_length`; every collection counts 1. The
metadata store keeps a tenant's counters in the same atomic write as the record that changes them
(`document_usage` before and after), so a counter can never count a write twice or miss one that committed; the
reindex pass recounts them from the records (`UsageCounters.reconcile`) in case anything drifted anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from kindex.domain.errors import QuotaExceeded

if TYPE_CHECKING:
    from kindex.domain.models import Document

#: The stored quantities a plan may limit, in the order messages and listings show them.
QUOTA_NAMES = ("documents", "chunks", "bytes", "collections")


class Quotas(BaseModel):
    """What a plan lets each of its tenants store; a missing (None) limit is no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    documents: int | None = Field(default=None, ge=0)
    chunks: int | None = Field(default=None, ge=0)
    bytes: int | None = Field(default=None, ge=0)
    collections: int | None = Field(default=None, ge=0)


@dataclass(frozen=True)
class Usage:
    """What a tenant stores (or what one write adds to it: a delta, whose parts may be negative)."""

    documents: int = 0
    chunks: int = 0
    bytes: int = 0
    collections: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __sub__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def document_usage(document: Document | None) -> Usage:
    """What one document record counts (nothing for no record)."""
    if document is None:
        return Usage()
    return Usage(documents=1, chunks=document.chunk_count, bytes=document.content_length)


COLLECTION_USAGE = Usage(collections=1)


@dataclass(frozen=True)
class QuotaLimits:
    """The limits that apply to one tenant, and the plan they come from (named in every refusal)."""

    plan: str
    quotas: Quotas

    def ceilings(self, delta: Usage) -> dict[str, int]:
        """For each limited quantity that `delta` increases: the most the counter may hold before the write for the
        write to stay within the limit (negative: the write alone passes it). A store writes only while every
        counter is at or under its ceiling, atomically with the record."""
        ceilings = {}
        for name in QUOTA_NAMES:
            limit, added = getattr(self.quotas, name), getattr(delta, name)
            if limit is not None and added > 0:
                ceilings[name] = limit - added
        return ceilings

    def check(self, current: Usage, delta: Usage) -> None:
        """QuotaExceeded naming the first limit that `current + delta` would pass (a write that adds nothing to a
        quantity, or takes from it, never passes its limit: deletes and smaller content always work)."""
        for name, ceiling in self.ceilings(delta).items():
            if getattr(current, name) > ceiling:
                raise self.exceeded(name, current, delta)

    def exceeded(self, name: str, current: Usage, delta: Usage) -> QuotaExceeded:
        return QuotaExceeded(
            limit=name,
            used=getattr(current, name),
            maximum=getattr(self.quotas, name),
            adding=getattr(delta, name),
            plan=self.plan,
        )


@dataclass(frozen=True)
class Metered:
    """What a tenant used that is not stored: queries this UTC day, estimated embedding tokens this UTC month."""

    queries_today: int = 0
    embedding_tokens_month: int = 0


def meter_periods(at: datetime) -> tuple[str, str]:
    """The UTC day (`2026-12-01`) and month (`2026-12`) a metered event at `at` (aware, UTC) counts in."""
    return at.strftime("%Y-%m-%d"), at.strftime("%Y-%m")


def estimated_tokens(text: str) -> int:
    """The embedding tokens a text is metered as: its length over the characters an English token averages (the
    providers' own counts are not reported through the Embedder port; docs/decisions.md, 2026-12-01)."""
    from kindex.domain.models import CHARS_PER_TOKEN_ENGLISH

    return -(-len(text) // CHARS_PER_TOKEN_ENGLISH)


class UsageReport(BaseModel):
    """`GET /v1/usage`: what the tenant stores and used, and what its plan allows (a null limit is no limit)."""

    plan: str
    documents: int
    chunks: int
    bytes: int
    collections: int
    queries_today: int
    embedding_tokens_month: int
    day: str = Field(description="the UTC day `queries_today` counts, YYYY-MM-DD")
    month: str = Field(description="the UTC month `embedding_tokens_month` counts, YYYY-MM")
    limits: Quotas
