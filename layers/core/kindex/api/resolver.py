"""The REST resolver every API function uses, with its per-request state kept per request.

Powertools' `APIGatewayRestResolver` keeps the current event, the Lambda context and the route context on the
resolver (and the event on `BaseRouter`, a class attribute): right for Lambda, where one instance runs one request
at a time, but the local server runs many requests at once through the same function module. Two concurrent
requests then read each other's event (tenant, path, body) - a cross-tenant leak. This subclass keeps that state
in a `ContextVar`, the way Powertools' own ASGI resolver (`HttpResolverLocal`) does, so each thread (or task)
sees only the request it is resolving. On Lambda it behaves exactly like its parent.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver


@dataclass
class _RequestState:
    event: Any = None
    lambda_context: Any = None
    context: dict = field(default_factory=dict)
    processed_stack_frames: list[str] = field(default_factory=list)


# One variable for every resolver: routers included in several resolvers (the query routes) delegate to whichever
# resolver included them last, and must still see the request being resolved.
_REQUEST: ContextVar[_RequestState | None] = ContextVar("kindex_request", default=None)


class IsolatedRestResolver(APIGatewayRestResolver):
    """`APIGatewayRestResolver` whose request state (event, Lambda context, route context) is per request."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._startup = _RequestState()  # what routes and routers register before any request (include_router)
        self._stacks_built = False
        self._stacks_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def _build_route_stacks(self) -> None:
        """Build every route's middleware stack once, under a lock, before the first request is served. Powertools
        builds a route's stack lazily on its first call and unguarded: two threads calling a route for the first
        time at once both wrap it, and the route answers 500 (`MiddlewareFrame.__call__() got an unexpected keyword
        argument`) for the rest of the process - in `kindex serve`, whose request threads share this resolver."""
        if self._stacks_built:
            return
        with self._stacks_lock:
            if self._stacks_built:
                return
            for route in self._static_routes + self._dynamic_routes:
                if not route._middleware_stack_built:
                    route._build_middleware_stack(router_middlewares=self._router_middlewares, app=self)
            self._stacks_built = True

    @property
    def _state(self) -> _RequestState:
        return _REQUEST.get() or self._startup

    # Powertools declares these as plain attributes; properties keep that interface and point at this request.
    @property
    def current_event(self) -> Any:
        return self._state.event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._state.event = value

    @property
    def lambda_context(self) -> Any:
        return self._state.lambda_context

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._state.lambda_context = value

    @property
    def context(self) -> dict:
        return self._state.context

    @context.setter
    def context(self, value: dict) -> None:
        self._state.context = value

    @property
    def processed_stack_frames(self) -> list[str]:
        return self._state.processed_stack_frames

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._state.processed_stack_frames = value

    def resolve(self, event: Any, context: Any) -> dict[str, Any]:
        self._build_route_stacks()
        state = _RequestState(
            event=self._to_proxy_event(dict(event)), lambda_context=context, context=dict(self._startup.context)
        )
        token = _REQUEST.set(state)
        try:
            # The parent also writes its class-level `BaseRouter.current_event`; nothing here reads it.
            return super().resolve(event, context)
        finally:
            _REQUEST.reset(token)
