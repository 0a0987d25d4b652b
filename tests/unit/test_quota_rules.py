"""The quota rules (kindex.domain.quotas) and their place in the usage plans."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kindex.domain.errors import QuotaExceeded
from kindex.domain.models import Document
from kindex.domain.quotas import QuotaLimits, Quotas, Usage, document_usage, estimated_tokens, meter_periods
from kindex.domain.usage_plans import UsagePlans
from kindex.settings import SettingsError, load_settings

pytestmark = pytest.mark.unit

FAST = {"rate_limit": 10, "burst_limit": 10}


def test_a_write_may_bring_a_counter_exactly_to_its_limit_and_not_one_past_it():
    limits = QuotaLimits(plan="p", quotas=Quotas(documents=10, chunks=100))
    # Given 9 documents, a write adding one is within the limit, at exactly 10
    limits.check(Usage(documents=9, chunks=0), Usage(documents=1, chunks=100))
    # And at 10 it is refused, naming the limit, the use, the maximum and the plan
    with pytest.raises(QuotaExceeded) as refused:
        limits.check(Usage(documents=10), Usage(documents=1))
    assert refused.value.details == {"limit": "documents", "used": 10, "max": 10, "plan": "p"}
    assert "documents quota exceeded: 10 of 10 used on plan 'p'" in refused.value.message
    # And a write adding nothing to a counter, or taking from it, is never refused, whatever the use
    limits.check(Usage(documents=50, chunks=500), Usage(documents=0, chunks=-5))
    # And the ceilings a store conditions its write on are limit - increase, for increased limited counters only
    assert limits.ceilings(Usage(documents=1, chunks=3, bytes=99)) == {"documents": 9, "chunks": 97}
    assert limits.ceilings(Usage(documents=-1)) == {}


def test_usage_is_what_the_records_count():
    document = Document(id="d", collection="c", chunk_count=4, content_length=120)
    assert document_usage(document) == Usage(documents=1, chunks=4, bytes=120)
    assert document_usage(None) == Usage() and not Usage()
    assert document_usage(document) - document_usage(None) + Usage(collections=1) == Usage(1, 4, 120, 1)


def test_metering_periods_and_token_estimates():
    from datetime import datetime, timezone

    assert meter_periods(datetime(2026, 12, 31, 23, 59, tzinfo=timezone.utc)) == ("2026-12-31", "2026-12")
    assert [estimated_tokens(t) for t in ("", "abc", "abcd", "abcde")] == [0, 1, 1, 2]


def test_plans_carry_quotas_per_plan_and_a_missing_key_is_no_limit():
    plans = UsagePlans.model_validate(
        {
            "default": {**FAST, "quotas": {"documents": 100}},
            "plans": {"gold": {**FAST, "quotas": {"chunks": 5}, "tenants": ["acme"]}, "free": {**FAST}},
        }
    )
    assert plans.quota_limits("someone") == QuotaLimits("default", Quotas(documents=100))
    assert plans.quota_limits("acme") == QuotaLimits("gold", Quotas(chunks=5))
    assert plans.quota_limits("acme").quotas.documents is None  # gold sets no document limit: none applies


@pytest.mark.parametrize(
    "quotas, field",
    [({"document": 5}, "document"), ({"documents": -1}, "documents"), ({"bytes": "10GB"}, "bytes")],
)
def test_a_quota_that_is_not_a_known_non_negative_integer_is_refused_at_start_naming_it(quotas, field):
    with pytest.raises(SettingsError, match=field):
        load_settings(
            {
                "KINDEX_USAGE_PLANS": '{"default": {"rate_limit": 1, "burst_limit": 1, "quotas": %s}}'
                % str(quotas).replace("'", '"')
            }
        )
    with pytest.raises(ValidationError):
        Quotas.model_validate(quotas)
