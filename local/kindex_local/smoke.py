"""`kindex smoke`: an end-to-end check of any deployment over HTTP(S), the way a tenant's backend uses it.

Creates a collection of its own, uploads one file through a presigned URL, waits until it is indexed, queries it
and renders a citation, checks that a user outside the collection's groups is refused, then deletes everything
and checks that nothing is left. Each step is printed with its time; the exit code is 0 only when every step
passed. It needs an admin key of the tenant it runs under, and leaves nothing behind (the collection is deleted
even when a step fails)."""

from __future__ import annotations

import mimetypes
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

# A short text whose words are unlikely elsewhere, so the query can only be answered by the uploaded file.
DEFAULT_TEXT = (
    "# Kindex smoke check\n\nThe quartermaster of the smoke check counts seventeen lanterns in the "
    "observatory. Each lantern is cleaned on Tuesdays.\n"
)
QUERY = "How many lanterns does the quartermaster count in the observatory?"


class SmokeFailed(Exception):
    """A step did not do what a working deployment does."""


@dataclass
class Smoke:
    """One run against `url` with an admin `key`; `out` receives one line per step."""

    url: str
    key: str
    file: Path | None = None
    timeout: float = 300.0
    out: Callable[[str], None] = print
    client: Any = None
    collection: str = field(default_factory=lambda: f"kindex-smoke-{secrets.token_hex(4)}")
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        import httpx

        self.url = self.url.rstrip("/")
        self.client = self.client or httpx.Client(timeout=30.0, headers={"Authorization": f"Bearer {self.key}"})

    # -- HTTP ---------------------------------------------------------------------------------------------------

    def call(self, method: str, path: str, expect: tuple[int, ...], **kwargs) -> Any:
        response = self.client.request(method, self.url + path, **kwargs)
        if response.status_code not in expect:
            raise SmokeFailed(f"{method} {path} answered {response.status_code}: {response.text[:300]}")
        return response.json() if response.content and "json" in response.headers.get("content-type", "") else None

    def step(self, name: str, action: Callable[[], str]) -> None:
        began = time.monotonic()
        try:
            detail = action()
        except SmokeFailed as error:
            self.out(f"FAIL {name} ({(time.monotonic() - began) * 1000:.0f} ms): {error}")
            raise
        self.out(f"ok   {name} ({(time.monotonic() - began) * 1000:.0f} ms){': ' + detail if detail else ''}")

    # -- steps --------------------------------------------------------------------------------------------------

    def run(self) -> None:
        collection = f"/v1/collections/{quote(self.collection, safe='')}"
        try:
            self.step("create collection", lambda: self.create(collection))
            self.step("upload a file by presigned URL", lambda: self.upload(collection))
            self.step("wait until indexed", lambda: self.wait_indexed(collection))
            self.step("query with a citation", lambda: self.query(collection))
            self.step("refuse a user outside the collection's groups", lambda: self.denied(collection))
        finally:
            self.step("delete the collection", lambda: self.delete(collection))
        self.step("nothing is left", lambda: self.nothing_left(collection))
        self.out(f"smoke check passed in {time.monotonic() - self.started:.1f} s")

    def create(self, collection: str) -> str:
        self.call("PUT", collection, (201,), json={"title": "kindex smoke check", "query_groups": ["smoke"]})
        return self.collection

    def upload(self, collection: str) -> str:
        data = self.file.read_bytes() if self.file else DEFAULT_TEXT.encode()
        filename = self.file.name if self.file else "smoke.md"
        mimetype = mimetypes.guess_type(filename)[0] or "text/markdown"
        ticket = self.call(
            "POST",
            f"{collection}/documents/smoke/upload",
            (200,),
            json={"filename": filename, "size": len(data), "mimetype": mimetype},
        )
        import httpx

        # The presigned URL carries its own signature: no API key goes to the blob store.
        response = httpx.request(
            ticket["method"], ticket["url"], content=data, headers=ticket["headers"], timeout=120.0
        )
        if response.status_code not in (200, 204):
            raise SmokeFailed(f"the presigned upload answered {response.status_code}: {response.text[:300]}")
        return f"{filename}, {len(data)} bytes"

    def wait_indexed(self, collection: str) -> str:
        deadline = time.monotonic() + self.timeout
        while True:
            document = self.call("GET", f"{collection}/documents/smoke", (200,))
            if document["status"] == "indexed":
                return f"{document['chunk_count']} chunks"
            if document["status"] == "failed":
                raise SmokeFailed(f"indexing failed: {document['failure_reason']}")
            if time.monotonic() > deadline:
                raise SmokeFailed(f"still {document['status']} after {self.timeout:.0f} s")
            time.sleep(0.5)

    def query(self, collection: str) -> str:
        answer = self.call(
            "POST",
            f"{collection}/query",
            (200,),
            json={
                "query": QUERY if not self.file else "What is this document about?",
                "k": 3,
                "user": "smoke",
                "groups": ["smoke"],
                "mode": "hybrid",
            },
        )
        if not answer["results"] or answer["results"][0]["document_id"] != "smoke":
            raise SmokeFailed(f"the uploaded document was not retrieved: {answer['results'][:1]}")
        cited = self.call(
            "POST", "/v1/citations", (200,), json={"text": "Seventeen <CIT smoke />.", "query_id": answer["query_id"]}
        )
        if "[^1]" not in cited["markdown"]:
            raise SmokeFailed(f"the citation was not rendered: {cited['markdown'][:200]}")
        return f"{len(answer['results'])} results, citation [^1]"

    def denied(self, collection: str) -> str:
        refused = self.call(
            "POST", f"{collection}/query", (403,), json={"query": QUERY, "user": "outsider", "groups": ["not-smoke"]}
        )
        return refused["error"]

    def delete(self, collection: str) -> str:
        """A collection delete is a job (202): the collection is gone from reads at once, and the job removes its
        documents, chunks, vectors and blobs; wait for it, so "nothing is left" checks the finished work."""
        job = self.call("DELETE", collection, (202, 404))
        if job is None:
            return "already gone"
        deadline = time.monotonic() + self.timeout
        while job["status"] != "completed":
            if time.monotonic() > deadline:
                raise SmokeFailed(f"the delete job {job['id']} is still {job['status']} after {self.timeout:.0f} s")
            time.sleep(0.5)
            job = self.call("GET", f"/v1/jobs/{quote(job['id'], safe='')}", (200,))
        return f"job {job['id']} completed"

    def nothing_left(self, collection: str) -> str:
        self.call("GET", collection, (404,))
        self.call("GET", f"{collection}/documents/smoke", (404,))
        self.call("POST", f"{collection}/query", (404,), json={"query": QUERY, "groups": ["smoke"]})
        listed = self.call("GET", "/v1/collections", (200,), params={"number": 1000})
        if self.collection in listed["collections"]:
            raise SmokeFailed("the deleted collection is still listed")
        return "collection, document and query all 404"


def run(url: str, key: str, file: Path | None = None, timeout: float = 300.0) -> int:
    try:
        Smoke(url, key, file=file, timeout=timeout).run()
    except SmokeFailed:
        print("smoke check FAILED", file=sys.stderr)
        return 1
    except Exception as error:  # the deployment is unreachable, or answered something that is not JSON
        print(f"smoke check FAILED: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0
