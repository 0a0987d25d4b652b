"""Linearizable document writes through `kindex serve` over HTTP (issue 9, item 3).

16 clients PUT different content to one document at the same instant, several rounds in a row. Whatever answers
they get, the content that is stored, chunked, indexed and returned must be that of a write that answered 2xx
(the one with the highest version), and a write that answered 409 must leave no blob, chunk or vector behind.
A second tenant with the same collection and document ids must not be touched."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.conftest import start_server
from tests.support.together import run_together
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

WRITERS = 16
ROUNDS = 5
COLLECTION = "shared"
DOCUMENT = "the doc"


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("kindex-writes"))
    yield server
    server.stop()


def marker(tenant: str, round_: int, writer: int) -> str:
    # One word that appears in this write's content only: a keyword query for it finds this write or nothing.
    return f"mark{tenant}r{round_}w{writer}x"


def content_of(tenant: str, round_: int, writer: int) -> str:
    return (
        f"Round {round_} writer {writer} of tenant {tenant}. "
        + marker(tenant, round_, writer)
        + " "
        + " ".join(f"word{writer}y{n}" for n in range(40))
    )


def document_blobs(data_dir: Path, tenant: str) -> list[Path]:
    folder = (
        data_dir
        / "blobs"
        / "tenants"
        / quote(tenant, safe="")
        / "collections"
        / COLLECTION
        / "documents"
        / quote(DOCUMENT, safe="")
    )
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".tmp-")) if folder.exists() else []


def wait_for_version(session, url: str, version: int) -> dict:
    return wait_until(
        lambda: session.get(url).json(),
        until=lambda body: body["version"] >= version and body["status"] in ("indexed", "failed"),
        message=f"the document did not reach version {version} indexed",
    )


def warm(session, url: str) -> None:
    """Open the session's keep-alive connection beforehand (a GET is safe to repeat), so the barrier releases the
    PUTs themselves, not 16 TCP handshakes."""

    def connects() -> bool:
        try:
            session.get(url, timeout=30)
            return True
        except requests.ConnectionError:
            return False

    wait_until(connects, interval=0.1, message=f"could not connect to {url}")


def put_together(url: str, sessions: list, bodies: list[dict]) -> list[tuple[int, dict]]:
    """Every PUT released by one barrier (each session connected first); returns (status, body) per writer, or
    (None, the error) for one that raised."""

    def put(i: int) -> tuple[int, dict]:
        response = sessions[i].put(url, json=bodies[i], timeout=60)
        return response.status_code, response.json()

    answers = run_together([lambda i=i: put(i) for i in range(len(bodies))], ready=lambda i: warm(sessions[i], url))
    return [(None, repr(answer)) if isinstance(answer, Exception) else answer for answer in answers]


def test_simultaneous_puts_to_one_document_keep_the_content_of_the_last_successful_write(running):
    # Given two tenants with the same collection and document ids
    keys = {"a": running.create_key("a", "admin"), "b": running.create_key("b", "admin")}
    doc_path = f"/v1/collections/{COLLECTION}/documents/{quote(DOCUMENT, safe='')}"
    for key in keys.values():
        admin = running.session(key)
        assert admin.put(running.url(f"/v1/collections/{COLLECTION}"), json={"allow_guests": True}).status_code == 201
    other = running.session(keys["b"])
    other_content = content_of("b", 0, 0)
    assert other.put(running.url(doc_path), json={"content": other_content}).status_code == 201
    sessions = [running.session(keys["a"]) for _ in range(WRITERS)]
    reader = running.session(keys["a"])
    outcomes = []
    for round_ in range(1, ROUNDS + 1):
        # When 16 clients PUT different content to tenant a's document at the same instant
        bodies = [{"content": content_of("a", round_, i), "title": f"r{round_}w{i}"} for i in range(WRITERS)]
        answers = put_together(running.url(doc_path), sessions, bodies)
        statuses = [status for status, _ in answers]
        assert set(statuses) <= {200, 201, 409}, (answers, "".join(running.output)[-3000:])
        succeeded = [(body["version"], i) for i, (status, body) in enumerate(answers) if status in (200, 201)]
        assert succeeded, answers
        for status, body in answers:
            if status == 409:
                assert body["error"] == "conflict" and body["message"]
        # Then, once the worker is done, everything shows the write with the highest version that answered 2xx
        version, winner = max(succeeded)
        assert len({v for v, _ in succeeded}) == len(succeeded), "two successful writes got the same version"
        expected = content_of("a", round_, winner)
        document = wait_for_version(reader, running.url(doc_path), version)
        assert document["version"] == version and document["status"] == "indexed", document
        assert document["content"] == expected and document["title"] == f"r{round_}w{winner}"
        chunks = reader.get(running.url(doc_path + "/chunks")).json()["chunks"]
        assert " ".join(c["text"] for c in chunks) == expected
        hits = reader.post(
            running.url(f"/v1/collections/{COLLECTION}/query"),
            json={"query": marker("a", round_, winner), "mode": "keyword", "k": 5},
        ).json()["results"]
        assert [h["content"] for h in hits] == [c["text"] for c in chunks if marker("a", round_, winner) in c["text"]]
        # And no losing (or superseded) write left a chunk or a vector that a query could find
        for i in range(WRITERS):
            if i != winner:
                found = reader.post(
                    running.url(f"/v1/collections/{COLLECTION}/query"),
                    json={"query": marker("a", round_, i), "mode": "keyword", "k": 5},
                ).json()["results"]
                assert found == [], (i, found)
        # And the document's folder holds exactly one blob: the content it shows
        blobs = document_blobs(running.data_dir, "a")
        assert len(blobs) == 1 and blobs[0].read_text() == expected, blobs
        outcomes.append((statuses.count(409), len(succeeded)))
    # And the other tenant's document with the same ids was never touched
    untouched = other.get(running.url(doc_path)).json()
    assert untouched["content"] == other_content and untouched["version"] == 1
    blobs = document_blobs(running.data_dir, "b")
    assert len(blobs) == 1 and blobs[0].read_text() == other_content
    # (the rounds really raced: at least one write lost somewhere, else the test proved nothing)
    assert sum(conflicts for conflicts, _ in outcomes) > 0, outcomes


FIELDS = ("title", "language", "url", "mimetype")


def field_value(field: str, label: str) -> str:
    """A value each field accepts (a URL is http(s), a mimetype a media type), distinct per label."""
    return {"url": f"https://example.com/{label}", "mimetype": f"text/x-{label}"}.get(field, label)


def test_simultaneous_puts_of_different_fields_all_land_and_tenants_never_mix(running):
    # Given two tenants with the same collection and document ids, each document with content
    keys = {"a": running.create_key("a", "admin"), "b": running.create_key("b", "admin")}
    path = f"/v1/collections/fields/documents/{quote(DOCUMENT, safe='')}"
    for tenant, key in keys.items():
        admin = running.session(key)
        admin.put(running.url("/v1/collections/fields"), json={"allow_guests": True})
        assert admin.put(running.url(path), json={"content": f"Text of tenant {tenant}."}).status_code == 201
    sessions = [running.session(keys["ab"[i % 2]]) for i in range(WRITERS)]
    readers = {tenant: running.session(key) for tenant, key in keys.items()}
    for reader in readers.values():
        wait_for_version(reader, running.url(path), 1)  # the worker's status writes are done: only the PUTs remain
    for round_ in range(3):
        starts = {
            tenant: reader.put(
                running.url(path), json={name: field_value(name, f"{tenant}-{round_}") for name in FIELDS}
            ).json()
            for tenant, reader in readers.items()
        }
        # When 16 clients (8 per tenant) each PUT one field of their tenant's document at the same instant
        bodies = [
            {FIELDS[(i // 2) % 4]: field_value(FIELDS[(i // 2) % 4], f"{'ab'[i % 2]}-{round_}-w{i}")}
            for i in range(WRITERS)
        ]
        answers = put_together(running.url(path), sessions, bodies)
        # Then every PUT answered 200
        assert [status for status, _ in answers] == [200] * WRITERS, (answers, "".join(running.output)[-3000:])
        for t, tenant in enumerate("ab"):
            mine = [i for i in range(WRITERS) if i % 2 == t]
            document = readers[tenant].get(running.url(path)).json()
            # And every field holds one of its own tenant's writers' values, and the content is untouched
            for name in FIELDS:
                assert document[name] in {bodies[i][name] for i in mine if name in bodies[i]}, (tenant, name)
            assert document["content"] == f"Text of tenant {tenant}." and document["version"] == 1
            # And the 8 answers are one chain of revisions after the start: each its predecessor plus its own field.
            # (A language or mimetype PUT also sends the document to the ingest, which rewrites its index entries: the
            # ingest's status writes take revisions between the PUTs, and change none of these fields.)
            chain = sorted((answers[i][1] for i in mine), key=lambda body: body["revision"])
            revisions = [body["revision"] for body in chain]
            assert len(set(revisions)) == len(mine) and revisions[0] > starts[tenant]["revision"], revisions
            previous = starts[tenant]
            for body in chain:
                changed = {name for name in FIELDS if body[name] != previous[name]}
                own = {name for i in mine if answers[i][1] is body for name in bodies[i]}
                assert changed <= own and all(body[name] == previous[name] for name in FIELDS if name not in own)
                previous = body
            assert {name: document[name] for name in FIELDS} == {name: previous[name] for name in FIELDS}


COLLECTION_FIELDS = (
    "title",
    "query_groups",
    "document_spaces",
    "allow_guests",
    "chunking_max_size",
    "chunking_overlap_offset",
    "rights_check_method",
)


def collection_value(field: str, tenant: str, round_: int, writer: int):
    return {
        "title": f"{tenant}-{round_}-w{writer}",
        "query_groups": [f"{tenant}-group-{writer}"],
        "document_spaces": [f"{tenant}-space-{writer}"],
        "allow_guests": round_ % 2 == 0,
        "chunking_max_size": 300 + writer,
        "chunking_overlap_offset": 1 + writer,
        "rights_check_method": "public",
    }[field]


def test_simultaneous_puts_of_one_collection_all_land_and_tenants_never_mix(running):
    # Given two tenants with the same collection id, each with a document (so a chunking change matters)
    keys = {"a": running.create_key("a", "admin"), "b": running.create_key("b", "admin")}
    path = "/v1/collections/settings"
    readers = {tenant: running.session(key) for tenant, key in keys.items()}
    for tenant, reader in readers.items():
        assert reader.put(running.url(path), json={"title": "start"}).status_code == 201
        assert reader.put(running.url(f"{path}/documents/d"), json={"content": f"Text of {tenant}."}).status_code == 201
    sessions = [running.session(keys["ab"[i % 2]]) for i in range(WRITERS)]
    for round_ in range(3):
        starts = {
            tenant: reader.put(
                running.url(path),
                json={
                    "title": f"{tenant}-start-{round_}",
                    "query_groups": [f"{tenant}-start"],
                    "document_spaces": [],
                    "allow_guests": round_ % 2 == 1,
                    "chunking_max_size": 200,
                    "chunking_overlap_offset": 0,
                },
            ).json()
            for tenant, reader in readers.items()
        }
        # When 16 clients (8 per tenant) each PUT one field of their tenant's collection at the same instant
        bodies = []
        for i in range(WRITERS):
            field = COLLECTION_FIELDS[(i // 2) % len(COLLECTION_FIELDS)]
            bodies.append({field: collection_value(field, "ab"[i % 2], round_, i)})
        answers = put_together(running.url(path), sessions, bodies)
        # Then every PUT answered 200
        assert [status for status, _ in answers] == [200] * WRITERS, (answers, "".join(running.output)[-3000:])
        for t, tenant in enumerate("ab"):
            mine = [i for i in range(WRITERS) if i % 2 == t]
            collection = readers[tenant].get(running.url(path)).json()
            # And every field written holds one of its own tenant's writers' values (no revoked group came back)
            for name in {name for i in mine for name in bodies[i]}:
                assert collection[name] in [bodies[i][name] for i in mine if name in bodies[i]], (tenant, name)
            # And config_version moved once per chunking write (a title or access change does not move it)
            chunking = sum(1 for i in mine if {"chunking_max_size", "chunking_overlap_offset"} & set(bodies[i]))
            assert collection["config_version"] == starts[tenant]["config_version"] + chunking
            # And the 8 answers are one chain of revisions after the start: each its predecessor plus its own field
            chain = sorted((answers[i][1] for i in mine), key=lambda body: body["revision"])
            assert [body["revision"] for body in chain] == list(
                range(starts[tenant]["revision"] + 1, starts[tenant]["revision"] + 1 + len(mine))
            )
            previous = starts[tenant]
            for body in chain:
                own = {name for i in mine if answers[i][1] is body for name in bodies[i]}
                assert all(body[name] == previous[name] for name in COLLECTION_FIELDS if name not in own)
                previous = body
            assert {name: collection[name] for name in COLLECTION_FIELDS} == {
                name: previous[name] for name in COLLECTION_FIELDS
            }
