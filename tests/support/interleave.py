"""Forcing a race at an exact moment: a document store that runs a hook in the middle of the next write."""

from __future__ import annotations

from collections.abc import Callable


class Interleave:
    """Wraps a catalog's document store and runs `hook()` once, at a chosen moment of the next write:
    `after_read` - the write has read the document and stored nothing yet;
    `before_commit` - the write has stored its blob and not yet made its version-checked commit."""

    def __init__(self, inner, hook: Callable[[], object], moment: str):
        if moment not in ("after_read", "before_commit"):
            raise ValueError(moment)
        self.inner, self.hook, self.moment, self.fired = inner, hook, moment, False

    def _fire(self, moment: str) -> None:
        if self.moment == moment and not self.fired:
            self.fired = True
            self.hook()

    def get_document(self, *args):
        found = self.inner.get_document(*args)
        self._fire("after_read")
        return found

    def put_document(self, tenant, document, **kwargs):
        self._fire("before_commit")
        return self.inner.put_document(tenant, document, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)
