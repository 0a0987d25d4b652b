"""The fair-ingest bound (docs/aws.md, "Fair ingest") on the delivery model of bench/fair_queue.py, with the ingest
event source as infra/ingest.py declares it. Simulated time: nothing here depends on this machine's speed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.slow]  # imports the CDK (infra/ingest.py): seconds before the first test


@pytest.fixture(scope="module")
def model() -> SimpleNamespace:
    """bench/fair_queue.py and the constants of infra/ingest.py, imported when a test here runs rather than when
    pytest collects this module on every worker: infra/ imports the CDK (seconds of start-up, `make unit`)."""
    from bench.fair_queue import Message, fair_bound, simulate, worst_single_dwell
    from infra.ingest import BATCH_SIZE, MAX_CONCURRENCY

    return SimpleNamespace(
        Message=Message,
        fair_bound=fair_bound,
        simulate=simulate,
        worst_single_dwell=worst_single_dwell,
        BATCH_SIZE=BATCH_SIZE,
        MAX_CONCURRENCY=MAX_CONCURRENCY,
    )


def test_one_document_waits_at_most_two_batches_behind_a_bulk_upload_on_the_fair_queue(model):
    # Given a 2,000-file upload of one tenant and one document of another arriving while the backlog is deep
    # When the ingest queue is a fair queue (every message in its tenant's group)
    worst = model.worst_single_dwell(fair=True, doc_seconds=2.0, one_seconds=3.0, bulk=2_000, offsets=5)
    # Then the single document is indexed within one batch of the bulk tenant plus its own batch
    assert worst <= model.fair_bound(2.0, 3.0)


def test_without_groups_the_same_document_waits_for_the_backlog_ahead_of_it(model):
    # Given the same load on a standard queue without message groups (what S3 -> SQS gave before)
    worst = model.worst_single_dwell(fair=False, doc_seconds=2.0, one_seconds=3.0, bulk=2_000, offsets=5)
    # Then the document waits for most of the backlog: far past the fair bound (the model tells the two apart)
    backlog_left = (2_000 - 60 / (model.BATCH_SIZE * 2.0) * model.MAX_CONCURRENCY * model.BATCH_SIZE) / (
        model.MAX_CONCURRENCY * model.BATCH_SIZE
    )
    assert worst >= backlog_left * model.BATCH_SIZE * 2.0 > 5 * model.fair_bound(2.0, 3.0)


def test_the_bulk_tenant_still_gets_every_consumer_when_nobody_else_waits(model):
    # Given only one tenant's upload on the fair queue
    messages = [model.Message("bulk", 0.0, 1.0) for _ in range(1_000)]
    # When it is drained
    outcomes = model.simulate(messages, fair=True)
    # Then fairness costs it nothing: all consumers work for it, batch after batch, with no idle gap
    assert max(o.done_at for o in outcomes.values()) == pytest.approx(1_000 / model.MAX_CONCURRENCY)
    assert len(outcomes) == 1_000
