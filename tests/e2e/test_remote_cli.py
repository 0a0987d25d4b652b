"""The `kindex` command against a real `kindex serve` over HTTP: every remote command, ingest of real files twice,
profiles, and the exit codes scripts rely on."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from kindex.client import Kindex
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.e2e

REAL_FILES = [
    "md/pypdf-extract-text.md",
    "md/opensearch-approximate-knn.md",
    "md/eng_spa_mult.md",
    "html/wiki_duck.html",
    "pdf/docling-multi_page.pdf",
    "docx/docx-tables.docx",
]


def kindex(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KINDEX_")}
    return subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        input=stdin,
        timeout=300,
    )


@pytest.fixture(scope="module")
def deployment(server) -> dict[str, str]:
    return {"KINDEX_URL": server.base_url, "KINDEX_API_KEY": server.admin_key}


def test_collections_put_get_list_delete(deployment):
    # When a collection is created with flags and more fields from --body
    put = kindex(
        "collections",
        "put",
        "cli-col",
        "--title",
        "CLI",
        "--query-groups",
        "staff, hr",
        "--body",
        '{"allow_guests": true}',
        env=deployment,
    )
    # Then the stored collection is printed as JSON
    assert put.returncode == 0, put.stderr
    stored = json.loads(put.stdout)
    assert (stored["title"], stored["query_groups"], stored["allow_guests"]) == ("CLI", ["staff", "hr"], True)
    assert json.loads(kindex("collections", "get", "cli-col", env=deployment).stdout)["id"] == "cli-col"
    listed = kindex("collections", "list", env=deployment)
    assert "cli-col" in listed.stdout.splitlines() and listed.stderr == ""
    assert "cli-col" in json.loads(kindex("collections", "list", "--json", env=deployment).stdout)
    # And a partial change leaves the rest
    changed = json.loads(kindex("collections", "put", "cli-col", "--allow-guests", "false", env=deployment).stdout)
    assert (changed["title"], changed["allow_guests"]) == ("CLI", False)
    # When it is deleted (waiting for its delete job) / Then the job's line is printed, and the collection is gone
    deleted = kindex("collections", "delete", "cli-col", "--wait", "--wait-timeout", "120", env=deployment)
    assert deleted.returncode == 0, deleted.stderr
    job_id, collection, status, progress = deleted.stdout.strip().split("\t")
    assert (collection, status, progress) == ("cli-col", "completed", "3/3") and job_id
    gone = kindex("collections", "get", "cli-col", env=deployment)
    assert gone.returncode == 4 and gone.stdout == ""
    assert gone.stderr.strip() == "error: not_found: collection 'cli-col' does not exist"


def test_documents_put_get_list_chunks_delete(deployment, tmp_path):
    kindex("collections", "put", "cli-docs", env=deployment)
    text = kindex(
        "documents",
        "put",
        "cli-docs",
        "note one",
        "--content",
        "The ferry leaves at nine.",
        "--title",
        "Ferry",
        "--document-url",
        "https://example.org/ferry",
        "--wait",
        env=deployment,
    )
    assert text.returncode == 0, text.stderr
    assert json.loads(text.stdout)["status"] == "indexed"
    pdf = SHARED_DATA / "docs/pdf/docling-multi_page.pdf"
    uploaded = kindex(
        "documents", "put", "cli-docs", "paper", "--file", str(pdf), "--title", "Paper", "--wait", env=deployment
    )
    assert uploaded.returncode == 0, uploaded.stderr
    paper = json.loads(uploaded.stdout)
    assert (paper["status"], paper["title"], paper["content_length"]) == ("indexed", "Paper", pdf.stat().st_size)
    assert kindex("documents", "list", "cli-docs", env=deployment).stdout.splitlines() == ["note one", "paper"]
    got = json.loads(kindex("documents", "get", "cli-docs", "note one", env=deployment).stdout)
    assert got["url"] == "https://example.org/ferry" and got["content"] is None
    with_text = json.loads(kindex("documents", "get", "cli-docs", "note one", "--content", env=deployment).stdout)
    assert with_text["content"] == "The ferry leaves at nine."
    chunks = json.loads(kindex("documents", "chunks", "cli-docs", "paper", "--json", env=deployment).stdout)
    assert len(chunks) == paper["chunk_count"] and chunks[0]["page_start"] == 1
    readable = kindex("documents", "chunks", "cli-docs", "paper", env=deployment).stdout.splitlines()
    assert readable[0].split() == ["#", "pages", "chars", "text"] and len(readable) == len(chunks) + 1
    assert kindex("documents", "delete", "cli-docs", "note one", env=deployment).returncode == 0
    assert kindex("documents", "get", "cli-docs", "note one", env=deployment).returncode == 4
    both = kindex("documents", "put", "cli-docs", "x", "--file", str(pdf), "--content", "y", env=deployment)
    assert both.returncode == 2 and "not both" in both.stderr


def test_ingest_a_folder_of_real_files_twice_the_second_run_sends_nothing(deployment, tmp_path, server):
    # Given a folder of real files in sub-folders, and one that cannot be indexed
    folder = tmp_path / "docs"
    for name in REAL_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SHARED_DATA / "docs" / name, folder / name)
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\nnot really a pdf")
    # When it is ingested into a new collection
    first = kindex("ingest", str(folder), "--collection", "cli-ingest", "--query-groups", "staff,hr", env=deployment)
    # Then every good file is indexed, the broken one fails with its reason, the exit code says so
    assert first.returncode == 1, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == f"indexed {len(REAL_FILES)}, unchanged 0, failed 1"
    assert lines[1].startswith("  failed broken.pdf: CorruptFile") or lines[1].startswith("  failed broken.pdf: ")
    assert first.stderr == "created collection 'cli-ingest'\n"  # and no progress bar without a terminal
    with Kindex(server.base_url, server.admin_key) as client:
        ids = sorted(client.iter_documents("cli-ingest"))
        versions = {doc_id: client.get_document("cli-ingest", doc_id).version for doc_id in ids}
        assert client.get_collection("cli-ingest").query_groups == ["staff", "hr"]
    assert ids == sorted(["broken.pdf", *[name.replace("/", ":") for name in REAL_FILES]])
    # When it runs again on the same files
    second = kindex("ingest", str(folder), "--collection", "cli-ingest", "--json", env=deployment)
    # Then nothing is sent again: every good file is unchanged, the broken one is reported, not re-uploaded
    summary = json.loads(second.stdout)
    assert second.returncode == 1
    assert (summary["indexed"], sorted(summary["unchanged"])) == ([], sorted(v for v in ids if v != "broken.pdf"))
    assert [f["document"] for f in summary["failed"]] == ["broken.pdf"]
    assert "not sent again" in summary["failed"][0]["reason"]
    with Kindex(server.base_url, server.admin_key) as client:
        assert {doc_id: client.get_document("cli-ingest", doc_id).version for doc_id in ids} == versions
    # And a changed file is the only one sent
    (folder / "md/eng_spa_mult.md").write_text("# Changed\n\nNew text about lighthouses.\n")
    (folder / "broken.pdf").unlink()
    third = kindex("ingest", str(folder), "--collection", "cli-ingest", env=deployment)
    assert third.returncode == 0 and third.stdout.splitlines() == [
        f"indexed 1, unchanged {len(REAL_FILES) - 1}, failed 0"
    ]


def test_query_cite_reindex_and_jobs(deployment):
    kindex("collections", "put", "cli-q", "--query-groups", "staff", env=deployment)
    kindex(
        "documents",
        "put",
        "cli-q",
        "ferry",
        "--content",
        "The ferry to the island leaves at nine.",
        "--wait",
        env=deployment,
    )
    table = kindex("query", "When does the ferry leave?", "-c", "cli-q", "--group", "staff", "-k", "3", env=deployment)
    assert table.returncode == 0, table.stderr
    header, columns, first_row = table.stdout.splitlines()[:3]
    assert header.startswith("query_id ") and header.endswith("1 result(s), 0 denied")
    assert columns.split() == ["cite", "score", "document", "pages", "text"]
    assert first_row.split()[0] == "[1]" and "ferry" in first_row
    answer = json.loads(kindex("query", "ferry", "-c", "cli-q", "--group", "staff", "--json", env=deployment).stdout)
    assert answer["results"][0]["document_id"] == "ferry"
    cited = kindex("cite", "-", "--query-id", answer["query_id"], stdin="At nine <CIT ferry />.", env=deployment)
    assert cited.returncode == 0 and cited.stdout.startswith("At nine[^1].") and "[^1]: ferry" in cited.stdout
    refused = kindex("query", "ferry", "-c", "cli-q", "--group", "outsiders", env=deployment)
    assert refused.returncode == 3 and refused.stderr.startswith("error: forbidden: ")
    started = kindex("reindex", "--collection", "cli-q", env=deployment)
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    followed = kindex("jobs", job_id, "--wait", env=deployment)
    assert followed.returncode == 0 and followed.stdout.split("\t")[:3] == [job_id, "cli-q", "completed"]
    assert json.loads(kindex("jobs", job_id, "--json", env=deployment).stdout)["id"] == job_id


def test_profiles_name_a_deployment_and_flags_override_them(server, tmp_path):
    config = tmp_path / "config"
    (config / "kindex").mkdir(parents=True)
    profiles = config / "kindex" / "profiles.toml"
    profiles.write_text(
        f'[staging]\nurl = "{server.base_url}"\nkey = "{server.admin_key}"\n\n'
        f'[broken]\nurl = "{server.base_url}"\nkey = "kdx_wrong"\n'
    )
    profiles.chmod(0o600)
    env = {"XDG_CONFIG_HOME": str(config)}
    assert kindex("collections", "list", "--profile", "staging", env=env).returncode == 0
    assert kindex("collections", "list", env={**env, "KINDEX_PROFILE": "staging"}).returncode == 0
    assert kindex("collections", "list", "--profile", "broken", env=env).returncode == 3
    fixed = kindex("collections", "list", "--profile", "broken", "--key", server.admin_key, env=env)
    assert fixed.returncode == 0
    unknown = kindex("collections", "list", "--profile", "prod", env=env)
    assert unknown.returncode == 2 and "no profile 'prod'" in unknown.stderr and "broken, staging" in unknown.stderr
    profiles.chmod(0o644)
    assert "readable by others" in kindex("collections", "list", "--profile", "staging", env=env).stderr


def test_exit_codes_scripts_can_rely_on(server, deployment, tmp_path):
    nowhere = kindex("collections", "list")
    assert nowhere.returncode == 2 and "--url and --key" in nowhere.stderr
    bad_key = kindex("collections", "list", "--url", server.base_url, "--key", "kdx_wrong")
    assert bad_key.returncode == 3 and bad_key.stderr.startswith("error: unauthorized: ")
    query_key = server.create_key("default", "query")
    assert kindex("collections", "list", "--url", server.base_url, "--key", query_key).returncode == 3
    invalid = kindex("collections", "put", "x", "--embedding-model", "nope:1", env=deployment)
    assert invalid.returncode == 2 and "embedding_model" in invalid.stderr
    assert kindex("documents", "list", "no-such-collection", env=deployment).returncode == 4
    assert kindex("jobs", "no-such-job", env=deployment).returncode == 4
    unreachable = kindex("collections", "list", "--url", "http://127.0.0.1:9", "--key", "k")
    assert unreachable.returncode == 6 and unreachable.stderr.startswith("error: ")
    assert kindex("query", "x", env=deployment).returncode == 2  # argparse: --collection is required
    local_only = kindex("ingest", str(tmp_path), "--collection", "c", "--data-dir", str(tmp_path), env=deployment)
    assert local_only.returncode == 2 and "--data-dir" in local_only.stderr
    assert kindex("reindex", "--collection", "c", "--data-dir", str(tmp_path / "d")).returncode == 2
    missing = kindex("ingest", str(tmp_path / "absent"), "--collection", "c", env=deployment)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_a_reader_that_stops_early_is_not_an_error(deployment):
    kindex("collections", "put", "cli-pipe", env=deployment)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KINDEX_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "kindex_local.cli", "collections", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**clean, **deployment},
    )
    process.stdout.close()  # like `| head -0`: gone before the command writes
    assert process.wait(timeout=60) == 0
    assert process.stderr.read() == b""


def test_ingest_shows_a_progress_bar_only_on_a_terminal(deployment, tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    folder = tmp_path / "two"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha.\n")
    (folder / "b.md").write_text("# B\n\nBravo.\n")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a width
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KINDEX_")}
    done = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "ingest", str(folder), "--collection", "cli-tty"],
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**clean, **deployment},
        timeout=120,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            block = os.read(leader, 65536)
        except OSError:
            break
        if not block:
            break
        shown += block
    os.close(leader)
    assert done.returncode == 0 and done.stdout.decode().strip() == "indexed 2, unchanged 0, failed 0"
    assert b"2/2" in shown and b"file" in shown
    quiet = kindex("ingest", str(folder), "--collection", "cli-tty", "--quiet", env=deployment)
    assert quiet.stderr == "" and quiet.stdout.strip() == "indexed 0, unchanged 2, failed 0"


def test_ingest_refuses_two_files_that_would_share_a_document_id_and_names_that_need_encoding(
    deployment, tmp_path, server
):
    folder = tmp_path / "clash"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "x.md").write_text("# One\n\nfrom the sub-folder\n")
    (folder / "sub:x.md").write_text("# Two\n\nfrom the top\n")
    (folder / "50% off? #1 Ünïcode.md").write_text("# Three\n\nA name that needs encoding.\n")
    done = kindex("ingest", str(folder), "--collection", "cli-clash", "--json", env=deployment)
    summary = json.loads(done.stdout)
    assert done.returncode == 1
    assert sorted(summary["indexed"]) == ["50% off? #1 Ünïcode.md", "sub:x.md"]
    assert [f["document"] for f in summary["failed"]] == ["sub:x.md"]
    assert "same document id" in summary["failed"][0]["reason"]
    with Kindex(server.base_url, server.admin_key) as client:
        (chunk,) = client.iter_chunks("cli-clash", "sub:x.md")  # the first in path order, whole
        assert chunk.text == "# One\n\nfrom the sub-folder\n"
