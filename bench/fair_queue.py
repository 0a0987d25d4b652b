"""Fair ingest on AWS, measured on a model: how long one tenant's single document waits behind another tenant's
10,000-file upload, with the ingest event source as infra/ingest.py declares it (MAX_CONCURRENCY invocations at
once, BATCH_SIZE messages each), for an SQS standard queue without message groups and for an SQS fair queue.

Neither moto nor anything on this machine delivers messages as SQS fair queues do, so delivery follows the rule the
SQS developer guide states ("How Amazon SQS fair queues work"): a tenant is noisy while it holds more than 10 % of
the messages in flight and at least 30 of its own, or while its share of the consumers' recent processing time is
over 10 %; a receive hands out the quiet tenants' messages first (oldest first), then the noisy tenants' (the one
with the fewest in flight first). Without groups, a standard queue is modelled as oldest first (it only
approximately preserves order; the backlog ahead of a message is what matters).
The process is discrete-event: time is simulated, never measured, so the figures do not depend on this machine.

    python -m bench.fair_queue            # the table that docs/aws.md ("Fair ingest") quotes (the single document
                                          # takes 2 s; about 30 s on 2 cores)
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass

from infra.ingest import BATCH_SIZE, FAIR_QUEUE_NOISY_IN_FLIGHT, MAX_CONCURRENCY

NOISY_SHARE = 0.10
# The guide gives no window for "recent" processing time; a tenant stops being noisy after five minutes without
# sending, so the model counts the processing time of invocations that ended in the last five minutes.
RECENT_WINDOW = 300.0


@dataclass(frozen=True)
class Message:
    tenant: str
    sent_at: float
    seconds: float  # how long the ingest function works on this document


@dataclass(frozen=True)
class Outcome:
    sent_at: float
    done_at: float

    @property
    def dwell(self) -> float:
        """From the message's arrival on the ingest queue to the end of the invocation that indexed it."""
        return self.done_at - self.sent_at


def oldest_first(lanes: dict[str, deque[Message]], tenants: set[str], count: int) -> list[Message]:
    """Up to `count` messages of `tenants`, oldest first across them (each lane is in arrival order)."""
    taken: list[Message] = []
    while len(taken) < count:
        heads = [(lanes[t][0].sent_at, t) for t in tenants if lanes.get(t)]
        if not heads:
            break
        taken.append(lanes[min(heads)[1]].popleft())
    return taken


def receive(
    lanes: dict[str, deque[Message]], in_flight: dict[str, int], recent_work: dict[str, float], batch: int, fair: bool
) -> list[Message]:
    """The messages one ReceiveMessage hands out (removed from the tenants' lanes). `recent_work` is each tenant's
    processing time in the recent window, for the guide's second measure (a share of over 10 % is noisy)."""
    tenants = {t for t, lane in lanes.items() if lane}
    if not fair:
        return oldest_first(lanes, tenants, batch)
    total, work = sum(in_flight.values()), sum(recent_work.values())
    noisy = {
        t
        for t in tenants
        if (in_flight.get(t, 0) >= FAIR_QUEUE_NOISY_IN_FLIGHT and in_flight[t] > NOISY_SHARE * total)
        or (work > 0 and recent_work.get(t, 0.0) > NOISY_SHARE * work)
    }
    taken = oldest_first(lanes, tenants - noisy, batch)
    for tenant in sorted(noisy, key=lambda t: in_flight.get(t, 0)):
        taken += oldest_first(lanes, {tenant}, batch - len(taken))
    return taken


def simulate(
    messages: list[Message],
    *,
    fair: bool,
    consumers: int = MAX_CONCURRENCY,
    batch: int = BATCH_SIZE,
) -> dict[int, Outcome]:
    """Each of `consumers` invocations receives up to `batch` visible messages, works through them one after the
    other, then deletes them and receives again; an idle one receives as soon as a message arrives. Returns each
    message's outcome, by its position in `messages`."""
    pending = sorted(range(len(messages)), key=lambda i: messages[i].sent_at)
    pending.reverse()  # popped from the end: the earliest arrival last
    lanes: dict[str, deque[Message]] = {}
    finished: deque[tuple[float, str, float]] = deque()  # (end, tenant, seconds) of recent work
    recent_work: dict[str, float] = {}
    index_of = {id(m): i for i, m in enumerate(messages)}
    in_flight: dict[str, int] = {}
    outcomes: dict[int, Outcome] = {}
    busy: list[tuple[float, int, list[Message]]] = []  # (end, tie-breaker, messages) of running invocations
    order = itertools.count()
    free, now = consumers, 0.0
    while True:
        while pending and messages[pending[-1]].sent_at <= now:
            m = messages[pending.pop()]
            lanes.setdefault(m.tenant, deque()).append(m)
        while finished and finished[0][0] < now - RECENT_WINDOW:
            _, tenant, seconds = finished.popleft()
            recent_work[tenant] -= seconds
        while free and any(lanes.values()):
            taken = receive(lanes, in_flight, recent_work, batch, fair)
            for m in taken:
                in_flight[m.tenant] = in_flight.get(m.tenant, 0) + 1
            heapq.heappush(busy, (now + sum(m.seconds for m in taken), next(order), taken))
            free -= 1
        # The next moment something happens: an invocation ends, or a message arrives.
        upcoming = [busy[0][0]] if busy else []
        upcoming += [messages[pending[-1]].sent_at] if pending else []
        if not upcoming:
            break
        now = min(upcoming)
        while busy and busy[0][0] <= now:  # every invocation ending now releases its messages before any receive
            end, _, done = heapq.heappop(busy)
            for m in done:
                in_flight[m.tenant] -= 1
                outcomes[index_of[id(m)]] = Outcome(m.sent_at, end)
                finished.append((end, m.tenant, m.seconds))
                recent_work[m.tenant] = recent_work.get(m.tenant, 0.0) + m.seconds
            free += 1
    return outcomes


def bulk_and_one(
    *, bulk: int = 10_000, doc_seconds: float = 2.0, one_at: float = 60.0, one_seconds: float = 2.0
) -> list[Message]:
    """Tenant `bulk` uploads `bulk` files at once at t=0; tenant `one` sends one document at `one_at`. The single
    document is the last message."""
    return [Message("bulk", 0.0, doc_seconds) for _ in range(bulk)] + [Message("one", one_at, one_seconds)]


def worst_single_dwell(
    *, fair: bool, doc_seconds: float = 2.0, one_seconds: float = 2.0, bulk: int = 10_000, offsets: int = 10
) -> float:
    """The longest wait of the single document over `offsets` arrival times spread across one batch period (the
    worst case is an arrival just after every invocation took a fresh batch)."""
    period = BATCH_SIZE * doc_seconds
    worst = 0.0
    for k in range(offsets):
        one_at = 60.0 + period * k / offsets
        messages = bulk_and_one(bulk=bulk, doc_seconds=doc_seconds, one_at=one_at, one_seconds=one_seconds)
        worst = max(worst, simulate(messages, fair=fair)[len(messages) - 1].dwell)
    return worst


def fair_bound(doc_seconds: float, one_seconds: float) -> float:
    """The bound docs/aws.md states: the quiet document waits for the first invocation to end (at most one batch
    of the bulk tenant's documents), then for its own batch (itself and at most BATCH_SIZE - 1 of the others)."""
    return BATCH_SIZE * doc_seconds + (BATCH_SIZE - 1) * doc_seconds + one_seconds


def main() -> None:
    print(f"ingest event source: {MAX_CONCURRENCY} invocations x {BATCH_SIZE} messages; 10,000 files vs 1 document")
    print("| seconds per bulk document | standard queue, no groups | fair queue (tenant groups) | bound |")
    print("|---|---|---|---|")
    for doc_seconds in (0.5, 2.0, 10.0):
        plain = worst_single_dwell(fair=False, doc_seconds=doc_seconds)
        fair = worst_single_dwell(fair=True, doc_seconds=doc_seconds)
        print(f"| {doc_seconds} | {plain:,.0f} s | {fair:,.1f} s | {fair_bound(doc_seconds, 2.0):,.1f} s |")


if __name__ == "__main__":
    main()
