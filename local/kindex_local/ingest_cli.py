"""`kindex ingest PATH --collection C`: put a file or a folder into a collection and wait for it to be indexed; and
the document metadata options (`--attribute`, `--access-group`, ...) that `ingest` and `documents put` share."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kindex.domain.errors import Conflict, InvalidInput
from kindex.domain.filters import validate_attributes, validate_principals
from kindex.domain.models import CollectionInput, DocumentInput, DocumentStatus, normalize_id

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
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


# -- document metadata options -----------------------------------------------------------------------------------

#: access list field -> the flag (and argparse dest) that gives it
ACCESS_OPTIONS = {
    "users": "access_user",
    "groups": "access_group",
    "deny_users": "deny_user",
    "deny_groups": "deny_group",
}
ACCESS_FIELDS = tuple(ACCESS_OPTIONS)


def attribute_option(text: str) -> tuple[str, Any]:
    """One `--attribute`: `KEY=TEXT` is always the string TEXT (so `zip=007` stays "007"); `KEY:=JSON` is a JSON
    value - a number (`year:=2020`), true/false, a list of strings (`tags:='["a","b"]'`) or a JSON string. The key
    cannot hold '=' or ':', so the first '=' is the separator and the value may hold anything."""
    key, separator, raw = text.partition("=")
    if not separator or not key or key == ":":
        raise argparse.ArgumentTypeError(
            f"{text!r}: give KEY=TEXT (a string) or KEY:=JSON (a number, true/false or a list of strings)"
        )
    if not key.endswith(":"):
        return key, raw
    try:
        return key[:-1], json.loads(raw)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the value after ':=' is not JSON ({error.msg}); for text write {key[:-1]}={raw}"
        ) from None


def add_metadata_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("attributes and access (what filters and access lists see)")
    group.add_argument(
        "--attribute",
        action="append",
        type=attribute_option,
        metavar="KEY=TEXT|KEY:=JSON",
        help="an attribute (repeat for several): KEY=TEXT is a string, KEY:=JSON a number, true/false "
        "or a list of strings, e.g. --attribute region=eu --attribute year:=2024 --attribute "
        'tags:=\'["hr","policy"]\'; the attributes given replace the document\'s',
    )
    for field, dest in ACCESS_OPTIONS.items():
        who = "user" if "users" in field else "group"
        verb = "may never see it (deny wins)" if field.startswith("deny") else "may see the document"
        group.add_argument(
            f"--{dest.replace('_', '-')}",
            dest=dest,
            action="append",
            metavar=who.upper(),
            help=f"a {who} who {verb} (repeat for several); the access flags together replace the "
            "document's access list",
        )


def document_metadata(args: argparse.Namespace) -> dict[str, Any]:
    """`attributes` and `access` as the flags give them (only those given), checked like the API checks them, so a
    bad value stops the command before anything is sent or written (InvalidInput naming the flag)."""
    fields: dict[str, Any] = {}
    given = getattr(args, "attribute", None) or []
    attributes: dict[str, Any] = {}
    for key, value in given:
        if key in attributes:
            raise InvalidInput(f'--attribute {key}: given twice; a list is one value: {key}:=\'["a", "b"]\'')
        attributes[key] = value
    for key, value in attributes.items():
        if isinstance(value, str) and _looks_typed(value):
            print(
                f"note: --attribute {key}={value} is the string {json.dumps(value)}; {key}:={value} gives the "
                f"{'number' if value not in ('true', 'false') else 'boolean'}",
                file=sys.stderr,
            )
    if given:
        fields["attributes"] = validate_attributes(attributes, path="--attribute")
    access = {
        field: list(validate_principals(getattr(args, dest), path=f"--{dest.replace('_', '-')}"))
        for field, dest in ACCESS_OPTIONS.items()
        if getattr(args, dest, None)
    }
    if access:
        fields["access"] = {field: access.get(field, []) for field in ACCESS_FIELDS}
    return fields


def _looks_typed(text: str) -> bool:
    try:
        return isinstance(json.loads(text), int | float | bool)
    except json.JSONDecodeError:
        return False


def _normal(name: str, value: Any) -> Any:
    """attributes as a dict ({} for none); an access list (a dict or the domain's Access) as its four lists."""
    if name != "access":
        return dict(value or {})
    if value is None:
        return None
    read = value.get if isinstance(value, Mapping) else lambda field: getattr(value, field, None)
    return {field: list(read(field) or []) for field in ACCESS_FIELDS}


def metadata_changes(stored: Any, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `fields` (attributes, access) that differ from what the stored document (a record, a summary,
    or None) holds: only those need writing, so an ingest run again over the same folder changes nothing."""
    return {
        name: value
        for name, value in fields.items()
        if stored is None or _normal(name, getattr(stored, name, None)) != _normal(name, value)
    }


# -- ingest ---------------------------------------------------------------------------------------------------------


def ingest_path(
    services,
    tenant: str,
    collection_id: str,
    root: Path,
    *,
    worker=None,
    timeout: float = 3600,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, list[str]]:
    """Write every file as a document, then wait until each is indexed or failed. With `worker`, this process
    runs the queue itself (no server running); otherwise the server's worker does and we only watch. `metadata`
    (attributes, access) goes on every document, written before the file: the content is never in the index
    without its access list."""
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
            changed = _put_metadata(services, tenant, collection_id, doc_id, metadata) if metadata else False
            document, written = catalog.put_file(tenant, collection_id, doc_id, path.name, path.read_bytes())
        except (InvalidInput, Conflict) as error:  # a name no id may have: that file is refused, the others go on
            outcome["failed"].append(f"{doc_id}: {error}")
            continue
        if written or changed or document.status not in TERMINAL:
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


def _put_metadata(services, tenant: str, collection_id: str, doc_id: str, metadata: Mapping[str, Any]) -> bool:
    """Write the attributes and access that differ from the stored document's (True if any did). A change of these
    alone re-indexes no text: the index's filter fields are rewritten, and the document is indexed again after."""
    stored = services.adapters.metadata.get_document(tenant, collection_id, doc_id)
    changes = metadata_changes(stored, metadata)
    if changes:
        services.catalog.put_document(tenant, collection_id, doc_id, DocumentInput(**changes))
    return bool(changes)


def _current(metadata, tenant: str, collection_id: str, wanted: list[str]) -> dict:
    """The named documents' records (a missing one is absent), read through the collection's listing when that
    takes fewer queries than one read per document."""
    if metadata.count_documents(tenant, collection_id) // LIST_PAGE + 1 >= len(wanted):
        return {
            doc_id: document
            for doc_id in wanted
            if (document := metadata.get_document(tenant, collection_id, doc_id)) is not None
        }
    named, after = set(wanted), None
    found: dict = {}
    while True:
        page = metadata.list_documents(tenant, collection_id, after=after, offset=0, limit=LIST_PAGE)
        found.update((document.id, document) for document in page if document.id in named)
        if len(page) < LIST_PAGE:
            return found
        after = page[-1].id
