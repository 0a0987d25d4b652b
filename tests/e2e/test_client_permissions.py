"""Document attributes, access lists and attribute filters through the SDK (sync and async) and the `kindex` command,
against a real `kindex serve` (issue 23 item 8): what is written comes back, a filter built with `F` selects what
the reference semantics say, an access list hides a document from whoever it does not name (a revocation at once),
a collection that requires access lists hides a document without one, and a refused filter is the API's 422 naming
the place. Two tenants with the same collection, document and attribute key of different types never mix."""

import asyncio
import json
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from kindex.client import AsyncKindex, F, InvalidFilter, Kindex
from kindex.client.models import DocumentStatus
from kindex.domain.validation import describe
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.e2e

HANDBOOK = {
    "leave-eu": (
        "Staff in the EU get twenty-five days of paid leave.",
        {"region": "eu", "year": 2024, "tags": ["hr", "policy"]},
    ),
    "leave-us": ("Staff in the US get fifteen days of paid leave.", {"region": "us", "year": 2019.0, "tags": ["hr"]}),
    "leave-old": ("Old rules: staff got twenty days of paid leave.", None),
}


def indexed(client: Kindex, collection: str, documents) -> None:
    done = client.wait_for_documents(collection, documents, timeout=120)
    assert {d: s.status for d, s in done.items()} == dict.fromkeys(documents, DocumentStatus.INDEXED), done


def found(answer) -> list[str]:
    return sorted({r.document_id for r in answer.results})


@pytest.fixture(scope="module")
def admin(server):
    with Kindex(server.base_url, server.admin_key) as client:
        client.put_collection("perm-handbook", allow_guests=True)
        for document, (text, attributes) in HANDBOOK.items():
            client.put_document(
                "perm-handbook", document, content=text, **({"attributes": attributes} if attributes else {})
            )
        indexed(client, "perm-handbook", HANDBOOK)
        yield client


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_filter_built_with_F_selects_exactly_the_documents_it_describes_in_every_mode(admin, mode):
    def ask(flt):
        return found(admin.query("perm-handbook", "How many days of paid leave?", k=10, mode=mode, filters=flt))

    # Then each filter finds what the reference semantics say, whatever the mode
    assert ask(F.eq("region", "eu")) == ["leave-eu"]
    assert ask(F.eq("region", "eu") & F.gte("year", 2020)) == ["leave-eu"]
    assert ask(F.lt("year", 2020)) == ["leave-us"]  # 2019.0 is a number like 2019
    assert ask(F.any_of(F.eq("region", "us"), F.contains("tags", "policy"))) == ["leave-eu", "leave-us"]
    assert ask(F.ne("region", "eu")) == ["leave-old", "leave-us"]  # a document without the key is "not eu"
    assert ask(F.exists("region", False)) == ["leave-old"]
    assert ask(F.in_("region", [])) == []
    # And the JSON form and a dict holding a Filter are the same request
    assert ask({"attributes": {"region": "eu"}}) == ask({"attributes": F.eq("region", "eu")}) == ["leave-eu"]


def test_a_refused_filter_fails_before_any_request_with_the_message_of_the_apis_422(admin, server):
    bad = {"$or": [{"a": 1}, {"year": {"$gte": "x"}}]}
    # The SDK checks the body with the API's own model: the same place is named, nothing is sent
    with pytest.raises(ValidationError) as early:
        admin.query("perm-handbook", "leave", filters={"attributes": bad})
    assert describe(early.value).startswith("filters.attributes.$or[1].year.$gte: $gte compares numbers")
    with pytest.raises(InvalidFilter, match=r"filter.\$or\[1\].year.\$gte"):
        F.parse(bad)
    # And the API answers the same body sent by hand with a 422 naming the same place
    answer = server.session(server.admin_key).post(
        server.url("/v1/collections/perm-handbook/query"), json={"query": "leave", "filters": {"attributes": bad}}
    )
    assert answer.status_code == 422 and "filters.attributes.$or[1].year.$gte" in answer.json()["message"]


def test_attributes_and_access_written_through_the_sdk_come_back_and_an_access_list_hides_at_once(admin, server):
    # Given a document uploaded with attributes and an access list in its ticket
    admin.put_collection("perm-files", allow_guests=True)
    pdf = SHARED_DATA / "docs/pdf/docling-multi_page.pdf"
    ticket = admin.upload_file(
        "perm-files", "paper", pdf, attributes={"kind": "paper", "pages": 9}, access={"groups": ["research"]}
    )
    assert ticket.attributes == {"kind": "paper", "pages": 9}
    indexed(admin, "perm-files", ["paper"])
    stored = admin.get_document("perm-files", "paper")
    assert stored.attributes == {"kind": "paper", "pages": 9} and list(stored.access.groups) == ["research"]
    summary = next(s for s in admin.iter_document_summaries("perm-files") if s.id == "paper")
    assert summary.attributes == stored.attributes and list(summary.access.groups) == ["research"]

    def who_sees(**asker) -> list[str]:
        return found(admin.query("perm-files", "document conversion", mode="keyword", **asker))

    # Then a member of the group sees it, a guest and another group do not, and a deny wins
    assert who_sees(user="ann", groups=["research"]) == ["paper"]
    assert who_sees() == [] and who_sees(user="bob", groups=["sales"]) == []
    admin.put_document("perm-files", "paper", access={"groups": ["research"], "deny_users": ["ann"]})
    # (the record is the truth: no waiting for the index to be rewritten)
    assert who_sees(user="ann", groups=["research"]) == []
    assert who_sees(user="cat", groups=["research"]) == ["paper"]
    # And removing the access list (null) makes it visible to whoever passes the collection gate again
    admin.put_document("perm-files", "paper", access=None)
    indexed(admin, "perm-files", ["paper"])
    assert who_sees() == ["paper"]
    assert admin.get_document("perm-files", "paper").access is None


def test_a_collection_that_requires_access_lists_hides_documents_without_one(admin):
    created = admin.put_collection("perm-required", allow_guests=True, document_access="required")
    assert created.document_access == "required"
    admin.put_document("perm-required", "open", content="Nobody listed may read this handbook page.")
    admin.put_document(
        "perm-required", "listed", content="Listed staff may read this handbook page.", access={"users": ["ann"]}
    )
    indexed(admin, "perm-required", ["open", "listed"])
    answer = admin.query("perm-required", "handbook page", mode="keyword", user="ann")
    assert found(answer) == ["listed"]
    assert found(admin.query("perm-required", "handbook page", mode="keyword", user="bob")) == []


def test_the_async_client_sends_the_same_filters_and_metadata(server, admin):
    async def run():
        async with AsyncKindex(server.base_url, server.admin_key) as client:
            await client.put_document(
                "perm-handbook",
                "async-note",
                content="Async staff get paid leave too.",
                attributes={"region": "apac", "year": 2025},
            )
            await asyncio.to_thread(indexed, admin, "perm-handbook", ["async-note"])
            answer = await client.query(
                "perm-handbook",
                "paid leave",
                mode="keyword",
                filters=F.eq("region", "apac") & F.between("year", 2025, 2025),
            )
            several = await client.query_collections(
                ["perm-handbook"], "paid leave", mode="keyword", filters={"attributes": {"region": {"$in": ["apac"]}}}
            )
            await client.delete_document("perm-handbook", "async-note")
            return found(answer), found(several)

    assert asyncio.run(run()) == (["async-note"], ["async-note"])


def test_two_tenants_with_the_same_ids_and_the_same_key_of_different_types_never_mix(server):
    # Given two tenants, each with collection "same" and document "d", whose attribute "year" differs in type
    other_key = server.create_key("perm-other", "admin")
    with Kindex(server.base_url, server.admin_key) as mine, Kindex(server.base_url, other_key) as theirs:
        for client, year in ((mine, 2024), (theirs, "2024")):
            client.put_collection("perm-same", allow_guests=True)
            client.put_document(
                "perm-same", "d", content="The same page in two tenants about leave.", attributes={"year": year}
            )
            indexed(client, "perm-same", ["d"])
        # Then each tenant's filter reads its own type only
        assert found(mine.query("perm-same", "leave", mode="keyword", filters=F.gte("year", 2020))) == ["d"]
        assert found(mine.query("perm-same", "leave", mode="keyword", filters=F.eq("year", "2024"))) == []
        assert found(theirs.query("perm-same", "leave", mode="keyword", filters=F.gte("year", 2020))) == []
        assert found(theirs.query("perm-same", "leave", mode="keyword", filters=F.eq("year", "2024"))) == ["d"]
        assert theirs.get_document("perm-same", "d").attributes == {"year": "2024"}


# -- the kindex command -------------------------------------------------------------------------------------------


def kindex(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KINDEX_")}
    return subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=300,
    )


def test_the_cli_ingests_with_attributes_and_access_and_queries_with_a_filter(server, tmp_path):
    deployment = {"KINDEX_URL": server.base_url, "KINDEX_API_KEY": server.admin_key}
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "eu.md").write_text("EU staff get twenty-five days of paid leave.", encoding="utf-8")
    kindex("collections", "put", "perm-cli", "--allow-guests", "true", "--document-access", "optional", env=deployment)
    # When a folder is ingested with attributes of each kind and an access group
    ingest = kindex(
        "ingest",
        str(folder),
        "--collection",
        "perm-cli",
        "--attribute",
        "region=eu",
        "--attribute",
        "year:=2024",
        "--attribute",
        'tags:=["hr"]',
        "--access-group",
        "staff",
        "--json",
        env=deployment,
    )
    assert ingest.returncode == 0, ingest.stderr
    assert json.loads(ingest.stdout)["indexed"] == ["eu.md"]
    # Then `documents get` shows them
    shown = json.loads(kindex("documents", "get", "perm-cli", "eu.md", env=deployment).stdout)
    assert shown["attributes"] == {"region": "eu", "year": 2024, "tags": ["hr"]}
    assert shown["access"]["groups"] == ["staff"]

    # And `query --filter` finds it for a staff member only when the filter matches
    def query(*flags):
        done = kindex("query", "paid leave", "-c", "perm-cli", "--mode", "keyword", "--json", *flags, env=deployment)
        assert done.returncode == 0, done.stderr
        return sorted({r["document_id"] for r in json.loads(done.stdout)["results"]})

    assert query("--group", "staff", "--filter", '{"year": {"$gte": 2020}}') == ["eu.md"]
    assert query("--group", "staff", "--filter", '{"region": "us"}') == []
    assert query("--group", "sales", "--filter", '{"region": "eu"}') == []
    # When the same folder is ingested again with another access group: nothing is uploaded, only the list changes
    again = kindex(
        "ingest",
        str(folder),
        "--collection",
        "perm-cli",
        "--attribute",
        "region=eu",
        "--attribute",
        "year:=2024",
        "--attribute",
        'tags:=["hr"]',
        "--access-group",
        "sales",
        "--json",
        env=deployment,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["indexed"] == ["eu.md"]
    assert query("--group", "sales", "--filter", '{"region": "eu"}') == ["eu.md"]
    assert query("--group", "staff") == []
    # And unchanged metadata a third time is "unchanged"
    third = kindex(
        "ingest",
        str(folder),
        "--collection",
        "perm-cli",
        "--attribute",
        "region=eu",
        "--attribute",
        "year:=2024",
        "--attribute",
        'tags:=["hr"]',
        "--access-group",
        "sales",
        "--json",
        env=deployment,
    )
    assert json.loads(third.stdout)["unchanged"] == ["eu.md"]
    # And `documents put` changes the attributes alone
    put = kindex("documents", "put", "perm-cli", "eu.md", "--attribute", "region=apac", "--wait", env=deployment)
    assert put.returncode == 0, put.stderr
    assert json.loads(put.stdout)["attributes"] == {"region": "apac"}
    # And a refused filter is exit 2 with the API's message naming the place
    refused = kindex("query", "leave", "-c", "perm-cli", "--filter", '{"year": {"$gt": "2020"}}', env=deployment)
    assert refused.returncode == 2
    assert "filters.attributes.year.$gt" in refused.stderr
    bad = kindex("query", "leave", "-c", "perm-cli", "--filter", "{not json", env=deployment)
    assert bad.returncode == 2 and "--filter is not JSON" in bad.stderr


def test_the_local_ingest_writes_attributes_and_access_before_the_file(server, tmp_path):
    # Given a file, and the running server's data directory (its worker indexes what the local ingest writes)
    (tmp_path / "note.md").write_text("A local note about the ferry timetable.", encoding="utf-8")
    # When it is ingested locally with attributes and access
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kindex_local.cli",
            "ingest",
            str(tmp_path),
            "--collection",
            "perm-local",
            "--data-dir",
            str(server.data_dir),
            "--quiet",
            "--attribute",
            "kind=note",
            "--attribute",
            "rev:=3",
            "--access-user",
            "ann",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "indexed 1" in done.stdout, done.stdout + done.stderr
    # Then the stored document holds them, and the access list applies to queries
    with Kindex(server.base_url, server.admin_key) as admin:
        stored = admin.get_document("perm-local", "note.md")
        assert stored.attributes == {"kind": "note", "rev": 3} and list(stored.access.users) == ["ann"]
        admin.put_collection("perm-local", allow_guests=True)
        assert found(admin.query("perm-local", "ferry timetable", mode="keyword", user="ann")) == ["note.md"]
        assert found(admin.query("perm-local", "ferry timetable", mode="keyword", user="bob")) == []
    # And an invalid attribute stops the command before anything is written
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kindex_local.cli",
            "ingest",
            str(tmp_path),
            "--collection",
            "perm-local-bad",
            "--data-dir",
            str(server.data_dir),
            "--quiet",
            "--attribute",
            "year:=1e999",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--attribute.year: must be a finite number" in bad.stderr
