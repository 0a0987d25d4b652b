"""A folder into a collection of a deployment, through the SDK (`kindex.client`): the work behind `kindex ingest
PATH --collection C --url ...` (remote_cli.py parses the arguments and prints the outcome).

Sending again is cheap: a file whose bytes the deployment already holds, indexed, is not sent; one whose bytes
failed for good (a corrupt or unsupported file) is not sent either, as it would only fail again. What the deployment
holds is read through the collection's listing or one document at a time, whichever takes fewer requests."""

from __future__ import annotations

import hashlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kindex.client import calls, errors
from kindex.client.sync import Kindex
from kindex.domain.models import MAX_PAGE_SIZE, DocumentSummary
from kindex_local.ingest_cli import metadata_changes


@dataclass
class IngestOutcome:
    indexed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # uploaded, not yet indexed when the wait ended

    def as_json(self) -> dict[str, Any]:
        return {
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "pending": self.pending,
            "failed": [{"document": d, "reason": r} for d, r in self.failed],
        }


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def stored_summaries(
    client: Kindex, collection: str, doc_ids: list[str], pool: ThreadPoolExecutor
) -> dict[str, DocumentSummary | None]:
    """What the deployment holds of these documents (None: nothing): through the collection's listing when that takes
    fewer requests, else one GET per document, `--jobs` at a time."""
    if calls.listing_is_cheaper(client.get_collection(collection).document_count, len(doc_ids)):
        named = set(doc_ids)  # keep only those: a large collection's summaries would not fit in memory
        listed = {s.id: s for s in client.iter_document_summaries(collection, page_size=MAX_PAGE_SIZE) if s.id in named}
        return {doc_id: listed.get(doc_id) for doc_id in doc_ids}

    def one(doc_id: str) -> tuple[str, DocumentSummary | None]:
        try:
            return doc_id, DocumentSummary.of(client.get_document(collection, doc_id))
        except errors.NotFound:
            return doc_id, None

    return dict(pool.map(one, doc_ids))


def send_file(
    client: Kindex,
    collection: str,
    doc_id: str,
    path: Path,
    stored: DocumentSummary | None,
    metadata: dict[str, Any] | None = None,
) -> str:
    """'unchanged' when the deployment holds exactly these bytes (and `metadata`: attributes, access), indexed;
    'waiting' when it holds them and is still indexing them, or only the metadata had to change (a PUT of those
    alone: nothing is embedded again); 'failed:<reason>' when these bytes failed for good (a corrupt or unsupported
    file fails again); else uploads the file with its metadata in the ticket ('uploaded')."""
    metadata = metadata or {}
    if stored is None or stored.content_sha256 != sha256_of(path):
        client.upload_file(collection, doc_id, path, **metadata)
        return "uploaded"
    if stored.status.value == "failed":
        if not stored.failure_retryable:
            return f"failed:{stored.failure_reason or 'failed'} (unchanged file, not sent again)"
        client.upload_file(collection, doc_id, path, **metadata)
        return "uploaded"
    if changes := metadata_changes(stored, metadata):
        put_metadata(client, collection, doc_id, changes)
        return "waiting"
    return "unchanged" if stored.status.value == "indexed" else "waiting"


def put_metadata(client: Kindex, collection: str, document: str, fields: dict[str, Any], attempts: int = 5):
    """A PUT of some of a document's fields (title, attributes, ...) beside its file: the file's indexing writes the
    same document, and a write that loses that race is a 409 that changed nothing, so it is sent again."""
    for attempt in range(attempts):
        try:
            return client.put_document(collection, document, fields)
        except errors.Conflict:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def ensure_collection(client: Kindex, collection: str, query_groups: str | None) -> None:
    """Create the collection if needed; `query_groups` sets who may query it (created or not)."""
    try:
        client.get_collection(collection)
    except errors.NotFound:
        client.put_collection(collection, {"query_groups": query_groups} if query_groups is not None else None)
        print(f"created collection {collection!r}", file=sys.stderr)
        return
    if query_groups is not None:
        client.put_collection(collection, query_groups=query_groups)


def ingest_folder(
    client: Kindex,
    collection: str,
    root: Path,
    *,
    jobs: int = 4,
    query_groups: str | None = None,
    wait: bool = True,
    wait_timeout: float = 3600.0,
    poll_interval: float = 1.0,
    progress: bool = False,
    metadata: dict[str, Any] | None = None,
) -> IngestOutcome:
    """Send every file under `root` (or the file `root`) that the deployment does not hold for good, `jobs` at a
    time, creating the collection if needed; with `wait`, until each is indexed or failed or `wait_timeout` seconds
    have passed (those left are `pending`). `progress`: a progress bar on stderr. `metadata` (attributes, access)
    goes on every document, with the upload (or alone where only it differs)."""
    from tqdm import tqdm

    from kindex_local.ingest_cli import document_id_for, files_under

    ensure_collection(client, collection, query_groups)
    outcome = IngestOutcome()
    files: dict[str, Path] = {}
    for path in files_under(root):
        doc_id = document_id_for(path, root)
        if doc_id in files:  # `a/b.md` and a file named `a:b.md` would overwrite each other
            outcome.failed.append((doc_id, f"{path} has the same document id as {files[doc_id]}; not sent"))
        else:
            files[doc_id] = path
    waiting: list[str] = []
    with (
        tqdm(total=len(files), unit="file", disable=not progress, file=sys.stderr) as bar,
        ThreadPoolExecutor(max_workers=jobs) as pool,
    ):
        stored = stored_summaries(client, collection, list(files), pool) if files else {}

        def send(item: tuple[str, Path]) -> tuple[str, str]:
            doc_id, path = item
            try:
                return doc_id, send_file(client, collection, doc_id, path, stored[doc_id], metadata)
            except (errors.ApiError, errors.ConnectionFailed, OSError) as error:
                detail = f"{error.error}: {error.message}" if isinstance(error, errors.ApiError) else str(error)
                return doc_id, f"failed:upload refused: {detail}"

        for doc_id, state in pool.map(send, files.items()):
            if state == "unchanged":
                outcome.unchanged.append(doc_id)
                bar.update(1)
            elif state.startswith("failed:"):
                outcome.failed.append((doc_id, state.removeprefix("failed:")))
                bar.update(1)
            else:
                waiting.append(doc_id)
        if wait:
            _wait_indexed(
                client, collection, waiting, outcome, pool, bar, timeout=wait_timeout, poll_interval=poll_interval
            )
        else:
            outcome.pending = waiting
    return outcome


def _wait_indexed(
    client: Kindex,
    collection: str,
    waiting: list[str],
    outcome: IngestOutcome,
    pool: ThreadPoolExecutor,
    bar,
    *,
    timeout: float,
    poll_interval: float,
) -> None:
    deadline = time.monotonic() + timeout
    while waiting:
        states = stored_summaries(client, collection, waiting, pool)
        waiting = []
        for doc_id, document in states.items():
            if document is None:
                outcome.failed.append((doc_id, "deleted while it was being indexed"))
            elif document.status.value == "indexed":
                outcome.indexed.append(document.id)
            elif document.status.value == "failed":
                outcome.failed.append((document.id, document.failure_reason or "failed"))
            else:
                waiting.append(document.id)
                continue
            bar.update(1)
        if waiting and time.monotonic() >= deadline:
            outcome.pending = waiting
            return
        if waiting:
            time.sleep(poll_interval)
