"""`kindex ingest PATH --collection C`: put a file or a folder into a collection and wait for it to be indexed."""

from __future__ import annotations

import time
from pathlib import Path

from kindex.domain.errors import InvalidInput
from kindex.domain.models import CollectionInput, DocumentStatus, normalize_id

TERMINAL = (DocumentStatus.INDEXED, DocumentStatus.FAILED)
CHECK_SECONDS = 1.0  # how often the pending documents' statuses are read
LIST_PAGE = 1000  # records per listing query when the statuses are read through the collection's listing


def document_id_for(path: Path, root: Path) -> str:
    """Files in sub-folders get their relative path as id, with ':' for '/' (ids cannot hold '/'); in NFC form, the
    form ids are stored in (macOS writes file names decomposed)."""
    return normalize_id(path.name if path == root else path.relative_to(root).as_posix().replace("/", ":"))


def files_under(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                        p.relative_to(root).parts))


def ingest_path(services, tenant: str, collection_id: str, root: Path, *, worker=None, timeout: float = 3600,
                progress: bool = True) -> dict[str, list[str]]:
    """Write every file as a document, then wait until each is indexed or failed. With `worker`, this process
    runs the queue itself (no server running); otherwise the server's worker does and we only watch."""
    from tqdm import tqdm

    catalog = services.catalog
    if services.adapters.metadata.get_collection(tenant, collection_id) is None:
        catalog.put_collection(tenant, collection_id, CollectionInput())
        print(f"Created collection '{collection_id}'")
    files = files_under(root)
    pending: dict[str, str] = {}
    outcome: dict[str, list[str]] = {"indexed": [], "failed": [], "unchanged": []}
    sent: dict[str, Path] = {}
    for path in files:
        doc_id = document_id_for(path, root)
        if doc_id in sent:  # `a/b.md` and a file named `a:b.md`: the second would overwrite the first
            outcome["failed"].append(f"{doc_id}: {path} has the same document id as {sent[doc_id]}; not written")
            continue
        sent[doc_id] = path
        try:
            document, written = catalog.put_file(tenant, collection_id, doc_id, path.name, path.read_bytes())
        except InvalidInput as error:  # a name no id may have: that file is refused, the others go on
            outcome["failed"].append(f"{doc_id}: {error}")
            continue
        if written or document.status not in TERMINAL:
            pending[doc_id] = str(path)
        else:
            outcome["unchanged"].append(doc_id)
    deadline = time.monotonic() + timeout
    checked = 0.0
    with tqdm(total=len(files), initial=len(files) - len(pending), unit="file", disable=not progress) as bar:
        while pending and time.monotonic() < deadline:
            if worker is None or not worker.run_once():
                time.sleep(0.2)
            # Reading every pending document after each batch of ten made a large folder quadratic (10,000 files:
            # ~5M reads): look at most every CHECK_SECONDS.
            if time.monotonic() - checked < CHECK_SECONDS:
                continue
            checked = time.monotonic()
            current = _current(services.adapters.metadata, tenant, collection_id, list(pending))
            for doc_id in list(pending):
                document = current.get(doc_id)
                if document is None:
                    pending.pop(doc_id)
                    bar.update(1)
                elif document.status in TERMINAL:
                    pending.pop(doc_id)
                    key = "indexed" if document.status is DocumentStatus.INDEXED else "failed"
                    outcome[key].append(f"{doc_id}: {document.failure_reason}" if key == "failed" else doc_id)
                    bar.update(1)
    outcome["timed_out"] = sorted(pending)
    return outcome


def _current(metadata, tenant: str, collection_id: str, wanted: list[str]) -> dict:
    """The named documents' records (a missing one is absent), read through the collection's listing when that
    takes fewer queries than one read per document."""
    if metadata.count_documents(tenant, collection_id) // LIST_PAGE + 1 >= len(wanted):
        return {doc_id: document for doc_id in wanted
                if (document := metadata.get_document(tenant, collection_id, doc_id)) is not None}
    named, found, after = set(wanted), {}, None
    while True:
        page = metadata.list_documents(tenant, collection_id, after=after, offset=0, limit=LIST_PAGE)
        found.update((document.id, document) for document in page if document.id in named)
        if len(page) < LIST_PAGE:
            return found
        after = page[-1].id
