"""`kindex serve` on an OpenSearch cluster (`KINDEX_SEARCH_URL`): the local e2e path once more, against the real node.

The real documents of ../shared/data/docs are ingested by two tenants under the same collection and document ids;
vector, keyword and hybrid queries run with and without filters; deletes are checked by asking the node itself
(`_count` with term filters), and a model change goes through reindex. Skipped, with the reason, when no node is up
(see tests/support/opensearch_node.py); required in CI, where `KINDEX_TEST_OPENSEARCH_URL` is set.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.conftest import SHARED_DATA, RunningServer, start_server
from tests.support.opensearch_node import OpenSearchNode
from tests.support.waiting import wait_settled, wait_until

pytestmark = pytest.mark.e2e

FORMATS = ("pdf", "docx", "html", "md")
TENANTS = ("default", "acme")
VICKSBURG_PDF = "Seige_of_Vicksburg_Sample_OCR.pdf"
VICKSBURG = f"pdf:{VICKSBURG_PDF}"
# A query and the document that answers it, for every mode (each word is in that document, and rare elsewhere).
ANSWERS = {
    "siege of Vicksburg": VICKSBURG,
    "efficient k-NN filtering": "md:opensearch-efficient-knn-filtering.md",
    "extract text from a PDF page": "md:pypdf-extract-text.md",
}
MODES = ("vector", "keyword", "hybrid")


@dataclass
class ClusterServer:
    server: RunningServer
    node: OpenSearchNode
    prefix: str
    env: dict[str, str]
    admins: dict[str, requests.Session]

    def index(self, model: str, dims: int) -> str:
        """The alias the adapter writes `model` to (`{prefix}-{model slug}-{dims}`)."""
        return f"{self.prefix}-{model.replace(':', '-')}-{dims}"

    def count(self, index: str | None = None, **terms: str) -> int:
        """Chunks in the node matching every term, asked of the node itself (refreshed first, so nothing is
        pending)."""
        return node_count(self.node, index or f"{self.prefix}-*", **terms)

    def ingest(self, tenant: str, collection: str, folder: Path) -> str:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "kindex_local.cli",
                "ingest",
                str(folder),
                "--tenant",
                tenant,
                "--collection",
                collection,
                "--data-dir",
                str(self.server.data_dir),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=cli_env(self.env),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def query(self, tenant: str, collection: str, body: dict) -> dict:
        response = self.admins[tenant].post(self.server.url(f"/v1/collections/{collection}/query"), json=body)
        assert response.status_code == 200, response.text
        return response.json()


def node_count(node: OpenSearchNode, index: str, **terms: str) -> int:
    requests.post(f"{node.url}/{index}/_refresh", timeout=60).raise_for_status()
    body = {"query": {"bool": {"filter": [{"term": {field: value}} for field, value in terms.items()]}}}
    response = requests.post(f"{node.url}/{index}/_count", json=body, timeout=60)
    response.raise_for_status()
    return response.json()["count"]


def cli_env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "KINDEX_DEFAULT_EMBEDDING_MODEL": "hash:384", **extra}


def stop(server: RunningServer) -> None:
    server.stop()


def documents_of(session: requests.Session, server: RunningServer, collection: str) -> dict[str, dict]:
    url = server.url(f"/v1/collections/{collection}/documents")
    return {doc_id: session.get(f"{url}/{doc_id}").json() for doc_id in session.get(url).json()["documents"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The real documents, one folder per format (the manifest and licence texts left out)."""
    root = tmp_path_factory.mktemp("corpus")
    for fmt in FORMATS:
        shutil.copytree(SHARED_DATA / "docs" / fmt, root / fmt)
    return root


@pytest.fixture(scope="module")
def cluster(opensearch_node, tmp_path_factory, corpus) -> Iterator[ClusterServer]:
    """`kindex serve` with KINDEX_SEARCH_URL naming the node and an index prefix of this test run; both tenants
    have ingested the real documents into `docs`."""
    prefix = opensearch_node.new_prefix()
    env = {"KINDEX_SEARCH_URL": opensearch_node.url, "KINDEX_SEARCH_INDEX_PREFIX": prefix}
    server = start_server(tmp_path_factory.mktemp("kindex-on-opensearch"), env)
    try:
        admins = {
            "default": server.session(server.admin_key),
            "acme": server.session(server.create_key("acme", "admin")),
        }
        running = ClusterServer(server, opensearch_node, prefix, env, admins)
        files = sum(1 for path in corpus.rglob("*") if path.is_file())
        for tenant in TENANTS:
            admins[tenant].put(server.url("/v1/collections/docs"), json={"allow_guests": True}).raise_for_status()
            assert f"indexed {files}, unchanged 0, failed 0" in running.ingest(tenant, "docs", corpus)
        yield running
    finally:
        stop(server)
        opensearch_node.delete_indices(prefix)


def test_the_real_documents_are_in_the_cluster_and_nothing_in_the_data_directory(cluster):
    # Given the server started with KINDEX_SEARCH_URL and both tenants' real documents ingested
    server = cluster.server
    assert any("Search index: OpenSearch at" in line and cluster.prefix in line for line in server.output)
    for tenant in TENANTS:
        documents = documents_of(cluster.admins[tenant], server, "docs")
        assert {d["status"] for d in documents.values()} == {"indexed"}
        assert {d["mimetype"] for d in documents.values()} >= {"application/pdf", "text/html", "text/markdown"}
        # Then the node holds exactly the chunks the server counted, under the tenant, for every document
        chunks = sum(d["chunk_count"] for d in documents.values())
        assert chunks > 500
        assert cluster.count(tenant=tenant, collection="docs") == chunks
        for doc_id, document in documents.items():
            assert cluster.count(tenant=tenant, document_id=doc_id) == document["chunk_count"], doc_id
    # And the embedded index was never created, and the node's index uses the lucene engine (the local default)
    assert not (server.data_dir / "index").exists()
    mapping = requests.get(f"{cluster.node.url}/{cluster.index('hash:384', 384)}/_mapping", timeout=10).json()
    (index,) = mapping.values()
    assert index["mappings"]["properties"]["vector"]["method"]["engine"] == "lucene"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tenant", TENANTS)
def test_each_mode_finds_the_document_that_answers(cluster, mode, tenant):
    for query, expected in ANSWERS.items():
        # When a tenant asks in this mode / Then the best result comes from the document that answers
        body = cluster.query(tenant, "docs", {"query": query, "mode": mode, "k": 5})
        assert body["results"][0]["document_id"] == expected, (query, body["results"])
        assert body["results"][0]["content"] and body["context"]


@pytest.mark.parametrize("mode", MODES)
def test_filters_narrow_every_mode(cluster, mode):
    # Given a query whose best answers are elsewhere
    query = "efficient k-NN filtering with OpenSearch"
    # When it is narrowed to one other document / Then every result comes from that document
    only = cluster.query(
        "default", "docs", {"query": query + " siege", "mode": mode, "k": 10, "filters": {"document_ids": [VICKSBURG]}}
    )
    assert only["results"] and {r["document_id"] for r in only["results"]} == {VICKSBURG}
    # When it is narrowed to PDFs / Then every result is a PDF (by id: the folder of the file)
    pdfs = cluster.query(
        "acme", "docs", {"query": query, "mode": mode, "k": 10, "filters": {"mimetype": "application/pdf"}}
    )
    assert pdfs["results"] and all(r["document_id"].startswith("pdf:") for r in pdfs["results"])
    # When the filter matches nothing / Then nothing, not an error
    none = cluster.query("default", "docs", {"query": query, "mode": mode, "filters": {"document_ids": ["nope"]}})
    assert none["results"] == []


def test_a_query_across_collections_and_a_tenant_that_owns_nothing(cluster, corpus):
    # Given a second collection of acme's holding only the markdown files
    acme = cluster.admins["acme"]
    acme.put(cluster.server.url("/v1/collections/notes"), json={"allow_guests": True}).raise_for_status()
    cluster.ingest("acme", "notes", corpus / "md")
    # When acme asks both collections / Then results come from both, each labelled with its collection
    body = acme.post(
        cluster.server.url("/v1/query"),
        json={"query": "extract text from a PDF page", "k": 20, "collections": ["docs", "notes"]},
    )
    assert body.status_code == 200, body.text
    assert {r["collection"] for r in body.json()["results"]} == {"docs", "notes"}
    # And a tenant without the collections sees nothing of them (same collection names, its own empty space)
    other = cluster.server.session(cluster.server.create_key("other", "admin"))
    assert other.post(cluster.server.url("/v1/collections/notes/query"), json={"query": "pdf"}).status_code == 404
    assert cluster.count(tenant="other") == 0


def test_deleting_a_document_then_the_collection_leaves_nothing_of_them_in_the_cluster(cluster, corpus):
    # Given both tenants holding the same documents under the same ids in collection `gone` (ingested from the pdf
    # folder itself, so the ids are the bare file names)
    for tenant in TENANTS:
        cluster.admins[tenant].put(cluster.server.url("/v1/collections/gone"), json={"allow_guests": True})
        cluster.ingest(tenant, "gone", corpus / "pdf")
    acme_chunks = cluster.count(tenant="acme", collection="gone")
    assert acme_chunks > 0
    assert cluster.count(tenant="default", collection="gone", document_id=VICKSBURG_PDF) > 0
    admin = cluster.admins["default"]
    # When tenant default deletes one document
    deleted = admin.delete(cluster.server.url(f"/v1/collections/gone/documents/{VICKSBURG_PDF}"))
    assert deleted.status_code in (200, 204), deleted.text
    # Then the node holds none of its chunks, queries no longer find it, and acme's copy is untouched
    assert cluster.count(tenant="default", collection="gone", document_id=VICKSBURG_PDF) == 0
    for mode in MODES:
        results = cluster.query("default", "gone", {"query": "siege of Vicksburg", "mode": mode, "k": 20})["results"]
        assert VICKSBURG_PDF not in {r["document_id"] for r in results}, mode
    assert cluster.count(tenant="acme", collection="gone") == acme_chunks
    assert cluster.query("acme", "gone", {"query": "siege of Vicksburg"})["results"][0]["document_id"] == VICKSBURG_PDF
    assert cluster.count(tenant="default", collection="gone") > 0
    # When it deletes the whole collection / Then nothing of it is left in any of the server's indices
    deleted = admin.delete(cluster.server.url("/v1/collections/gone"))
    assert deleted.status_code == 202, deleted.text
    assert admin.get(cluster.server.url("/v1/collections/gone")).status_code == 404
    poll_job(admin, cluster.server.url(f"/v1/jobs/{deleted.json()['id']}"))
    assert cluster.count(tenant="default", collection="gone") == 0
    # And acme's collection of the same name, and tenant default's other collection, are whole
    assert cluster.count(tenant="acme", collection="gone") == acme_chunks
    assert cluster.count(tenant="default", collection="docs") > 0


def poll_job(session: requests.Session, url: str, timeout: float = 300.0) -> dict:
    return wait_until(
        lambda: session.get(url).json(),
        until=lambda job: job["status"] == "completed",
        timeout=timeout,
        interval=0.2,
        message="the reindex job did not complete",
    )


def test_a_model_switch_by_reindex_moves_the_collection_to_the_new_index(cluster, corpus):
    # Given tenant default's collection `switch` of real documents embedded with hash:384, and acme's collection of
    # the same name
    admin, server = cluster.admins["default"], cluster.server
    url = server.url("/v1/collections/switch")
    for tenant in TENANTS:
        cluster.admins[tenant].put(url, json={"allow_guests": True}).raise_for_status()
        cluster.ingest(tenant, "switch", corpus / "md")
    old, new = cluster.index("hash:384", 384), cluster.index("hash:256", 256)
    chunks = cluster.count(old, tenant="default", collection="switch")
    acme_chunks = cluster.count(old, tenant="acme", collection="switch")
    assert chunks > 0 and acme_chunks > 0
    # When its model changes and a reindex runs
    changed = admin.put(url, json={"embedding_model": "hash:256"}).json()
    assert changed["active_embedding_model"] == "hash:384"
    started = admin.post(f"{url}/reindex", json={})
    assert started.status_code == 202, started.text
    # Then queries answer while it runs
    query = "extract text from a PDF page"
    answers = []
    job_url = server.url(f"/v1/jobs/{started.json()['id']}")
    while admin.get(job_url).json()["status"] != "completed":
        answers.append(cluster.query("default", "switch", {"query": query, "mode": "vector"})["results"])
    assert all(results and results[0]["document_id"] == "pypdf-extract-text.md" for results in answers)
    done = poll_job(admin, job_url)
    assert done["done"] == done["total"] == len(list((corpus / "md").iterdir()))
    # And afterwards the collection queries the new model, whose index holds all its chunks, and the old model's
    # index holds nothing of it
    assert admin.get(url).json()["active_embedding_model"] == "hash:256"
    for mode in MODES:
        body = cluster.query("default", "switch", {"query": query, "mode": mode})
        assert body["results"][0]["document_id"] == "pypdf-extract-text.md", mode
    assert cluster.count(new, tenant="default", collection="switch") == chunks
    assert cluster.count(old, tenant="default", collection="switch") == 0
    # And acme's collection of the same name still answers from the old model, whole
    assert cluster.count(old, tenant="acme", collection="switch") == acme_chunks
    assert cluster.count(new, tenant="acme") == 0
    assert cluster.query("acme", "switch", {"query": query})["results"][0]["document_id"] == "pypdf-extract-text.md"


def test_two_servers_on_one_cluster_with_their_own_data_directories_never_meet(opensearch_node, tmp_path):
    # Given two servers on the same cluster with nothing but KINDEX_SEARCH_URL: the same tenant, collection and
    # document id in both, with different texts
    env = {"KINDEX_SEARCH_URL": opensearch_node.url}
    servers = [start_server(tmp_path / name, env) for name in ("one", "two")]
    prefixes = ["kindex-local-" + (s.data_dir / "data-dir-id").read_text().strip() for s in servers]
    try:
        assert prefixes[0] != prefixes[1]
        texts = ["Ravens nest on the northern cliffs.", "Otters swim in the southern river."]
        for server, text in zip(servers, texts):
            admin = server.session(server.admin_key)
            admin.put(server.url("/v1/collections/c"), json={"allow_guests": True}).raise_for_status()
            admin.put(server.url("/v1/collections/c/documents/d"), json={"content": text}).raise_for_status()
        for server in servers:
            wait_indexed(server, "c", "d")
        # When each queries / Then each finds only its own text
        for server, text in zip(servers, texts):
            results = (
                server.session(server.admin_key)
                .post(server.url("/v1/collections/c/query"), json={"query": "ravens otters", "k": 10})
                .json()
            )
            assert [r["content"] for r in results["results"]] == [text]
        # When the first deletes the collection / Then the second's chunks are all still in the cluster
        first = servers[0]
        deleted = first.session(first.admin_key).delete(first.url("/v1/collections/c"))
        assert deleted.status_code == 202, deleted.text
        poll_job(first.session(first.admin_key), first.url(f"/v1/jobs/{deleted.json()['id']}"))
        assert node_count(opensearch_node, f"{prefixes[0]}-*", collection="c") == 0
        assert node_count(opensearch_node, f"{prefixes[1]}-*", collection="c") == 1
    finally:
        for server, prefix in zip(servers, prefixes):
            stop(server)
            opensearch_node.delete_indices(prefix)


def test_a_data_directory_moves_from_the_embedded_index_to_the_cluster_with_one_reindex(opensearch_node, tmp_path):
    # Given a data directory whose document was indexed by the embedded index
    embedded = start_server(tmp_path)
    try:
        admin = embedded.session(embedded.admin_key)
        admin.put(embedded.url("/v1/collections/c"), json={"allow_guests": True}).raise_for_status()
        admin.put(embedded.url("/v1/collections/c/documents/d"), json={"content": "Ravens nest on the cliffs."})
        wait_indexed(embedded, "c", "d")
    finally:
        stop(embedded)
    # When the server restarts on the cluster / Then the document is not there yet
    prefix = opensearch_node.new_prefix()
    env = {"KINDEX_SEARCH_URL": opensearch_node.url, "KINDEX_SEARCH_INDEX_PREFIX": prefix}
    server = start_server(tmp_path, env)
    try:
        admin = server.session(server.admin_key)
        url = server.url("/v1/collections/c/query")
        assert admin.post(url, json={"query": "ravens"}).json()["results"] == []
        # When `kindex reindex --full` runs once / Then it queues a sweep of the collection (and the tenant's blob
        # check); the running server's worker finds the missing vectors and writes them to the cluster
        result = subprocess.run(
            [sys.executable, "-m", "kindex_local.cli", "reindex", "--full", "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            env=cli_env(env),
        )
        assert "1 collection(s), 2 task(s) queued" in result.stdout, result.stdout + result.stderr
        assert "the running server's worker does the tasks" in result.stdout

        def answer() -> dict:
            found = admin.post(url, json={"query": "ravens"}).json()
            # While the worker creates the cluster index, a search can meet its shard before it has started (the
            # node answers 503 "all shards failed"): the API says so with a retryable 503, which a client retries.
            # Any other error fails.
            assert found.get("error", "dependency_unavailable") == "dependency_unavailable", found
            return found

        wait_until(
            answer,
            until=lambda found: found.get("results"),
            interval=0.2,
            message="the document never reached the cluster",
        )
        assert node_count(opensearch_node, f"{prefix}-*", tenant="default", collection="c", document_id="d") == 1
    finally:
        stop(server)
        opensearch_node.delete_indices(prefix)


def wait_indexed(server: RunningServer, collection: str, doc_id: str, timeout: float = 60.0) -> None:
    statuses = wait_settled(
        server.session(server.admin_key), server.url(f"/v1/collections/{collection}"), [doc_id], timeout=timeout
    )
    assert statuses == {doc_id: "indexed"}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_cluster_is_a_json_error_that_names_no_credential(tmp_path):
    # Given a server whose cluster URL (with a password) points where nothing listens
    server = start_server(
        tmp_path / "data",
        {
            "KINDEX_SEARCH_URL": f"http://kindex:s3cret-pw@127.0.0.1:{closed_port()}",
            "KINDEX_SEARCH_INDEX_PREFIX": "kindex-unreachable",
        },
    )
    try:
        admin = server.session(server.admin_key)
        admin.put(server.url("/v1/collections/c"), json={"allow_guests": True}).raise_for_status()
        # When a query needs the cluster / Then a 503 JSON error that says what failed and nothing secret
        response = admin.post(server.url("/v1/collections/c/query"), json={"query": "anything"})
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "dependency_unavailable" and "s3cret-pw" not in response.text
        assert response.headers["Retry-After"] == "2"
    finally:
        stop(server)
    # And the password was printed nowhere
    assert "s3cret-pw" not in "".join(server.output)
    assert any("Search index: OpenSearch at http://127.0.0.1:" in line for line in server.output)


def test_kindex_serve_with_a_bad_url_says_so_and_exits_2(tmp_path):
    # Given KINDEX_SEARCH_URL with a path and a password
    env = {**os.environ, "KINDEX_SEARCH_URL": "http://kindex:topsecret@127.0.0.1:9200/os"}
    # When starting the server / Then it stops at once with a message naming the variable, not the password
    result = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "serve", "--port", "0", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 2
    assert "KINDEX_SEARCH_URL" in result.stderr and "topsecret" not in result.stderr + result.stdout
