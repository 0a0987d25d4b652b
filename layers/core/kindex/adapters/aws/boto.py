"""How the AWS adapters configure botocore: profiles for background work and for the request path.

Ingest and reindex can wait: botocore's standard retry mode (5 retries) and its default 60 s timeouts. An API
request cannot (API Gateway gives up after 29 s): inside a request budget (`kindex.domain.budget`) the adapters
use clients with a 1 s connect and 2 s read timeout and one retry - or no retry when the budget no longer holds
two attempts, and no call at all when it does not hold one. botocore has no per-call timeout, so the choice is
made per call among a few cached clients (`profile`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kindex.domain import budget

BACKGROUND = "background"
REQUEST = "request"  # one retry
LAST_TRY = "last-try"  # no retry: what is left of the budget holds one attempt only

BACKGROUND_RETRIES = 5
REQUEST_CONNECT_TIMEOUT_S = 1.0
REQUEST_READ_TIMEOUT_S = 2.0
ATTEMPT_WORST_S = REQUEST_CONNECT_TIMEOUT_S + REQUEST_READ_TIMEOUT_S
# Two attempts timing out, plus the standard mode's backoff before the retry (at most 1 s for the first).
REQUEST_WORST_S = 2 * ATTEMPT_WORST_S + 1.0
TOTAL_ATTEMPTS = {REQUEST: 2, LAST_TRY: 1}


def client_config(profile: str = BACKGROUND, **options: Any) -> Any:
    """A botocore Config for the profile (`options` adds service specifics such as the signature version)."""
    from botocore.config import Config

    if profile == BACKGROUND:
        return Config(retries={"mode": "standard", "max_attempts": BACKGROUND_RETRIES}, **options)
    return Config(
        connect_timeout=REQUEST_CONNECT_TIMEOUT_S,
        read_timeout=REQUEST_READ_TIMEOUT_S,
        retries={"mode": "standard", "total_max_attempts": TOTAL_ATTEMPTS[profile]},
        **options,
    )


def profile(what: str) -> str:
    """The profile for the next call to `what`: background outside a request; inside one, the retrying profile
    while the budget holds its worst case, else a single attempt while one fits, else BudgetSpent (a
    DependencyFailed: HTTP 503) without calling."""
    left = budget.remaining()
    if left is None:
        return BACKGROUND
    if left >= REQUEST_WORST_S:
        return REQUEST
    budget.require(ATTEMPT_WORST_S, what)
    return LAST_TRY


def shared_client(factory: Callable[..., Any], what: str) -> Any:
    """The cached client `factory` makes for the current profile (`factory()` for the background one, so that
    the lru_cache holds one entry per profile whichever way it is called)."""
    chosen = profile(what)
    return factory() if chosen == BACKGROUND else factory(chosen)
