"""`kindex export` and `kindex import` against real `kindex serve` processes: a collection with a real PDF moves into
another collection, another tenant and another server without one embedding call when the model matches (the second
server's embedding cache stays empty), is re-embedded when it does not, and answers queries the same afterwards."""

import gzip
import json
import sqlite3
import subprocess
import sys
from urllib.parse import quote

import pytest
import requests

from tests.conftest import SHARED_DATA, start_server
from tests.support.local_queue import server_queue_depth
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

TEXTS = {
    "leave": "Staff get twenty-five days of paid leave each year. Unused leave carries over until March. " * 3,
    "expenses": "Travel expenses are refunded within thirty days when the receipts are attached. " * 4,
}
QUESTIONS = ("How many days of leave?", "When are travel expenses refunded?", "transformer layout analysis")


def cli(*args, env=None, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=stdin,
    )


def wait_indexed(session, url):
    body = wait_until(
        lambda: session.get(url).json(),
        until=lambda b: b["status"] in ("indexed", "failed"),
        message=f"{url} was not indexed",
    )
    assert body["status"] == "indexed", body["failure_reason"]
    return body


def everything(server, key, collection):
    """Each document with its chunk viewer's answer, read through the API."""
    session = server.session(key)
    base = server.url(f"/v1/collections/{quote(collection, safe='')}/documents")
    ids = session.get(base, params={"number": 1000}).json()["documents"]
    out = {}
    for document_id in ids:
        chunks = session.get(f"{base}/{quote(document_id, safe='')}/chunks", params={"number": 1000}).json()["chunks"]
        out[document_id] = [
            (c["index"], c["start"], c["end"], c["page_start"], c["page_end"], c["text"]) for c in chunks
        ]
    return out


def unscored(answered):
    return [[row[:-1] for row in rows] for rows in answered]


def answers(server, key, collection, mode="hybrid"):
    session = server.session(key)
    out = []
    for question in QUESTIONS:
        response = session.post(
            server.url(f"/v1/collections/{collection}/query"),
            json={"query": question, "k": 4, "mode": mode, "user": "ann", "groups": ["staff"]},
        )
        assert response.status_code == 200, response.text
        out.append(
            [
                (r["document_id"], r["title"], r["content"], r["page_start"], r["page_end"], round(r["score"], 5))
                for r in response.json()["results"]
            ]
        )
    return out


def cached_vectors(server, model):
    """Rows of the server's embedding cache: every text an embedder sees goes through it (none yet: no table)."""
    db = sqlite3.connect(server.data_dir / "kindex.sqlite3")
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'tenant_embedding_cache'").fetchone():
            return 0
        return db.execute("SELECT COUNT(*) FROM tenant_embedding_cache WHERE model = ?", (model,)).fetchone()[0]
    finally:
        db.close()


def unhandled_events(server) -> int:
    """Messages on the server's queue that its worker has not handled yet (waiting or in flight; a handled one is
    deleted, a dead-lettered one is counted too)."""
    return sum(server_queue_depth(server.data_dir))


@pytest.fixture(scope="module")
def source(server):
    """A collection with two text documents and a five-page PDF, indexed by the module's server."""
    admin = server.session(server.admin_key)
    assert (
        admin.put(
            server.url("/v1/collections/handbook"),
            json={"title": "Handbook", "chunking_max_size": 400, "query_groups": ["staff"]},
        ).status_code
        == 201
    )
    for name, text in TEXTS.items():
        assert admin.put(
            server.url(f"/v1/collections/handbook/documents/{name}"),
            json={"content": text, "title": name.title(), "url": f"https://example.com/{name}"},
        ).ok
    pdf = (SHARED_DATA / "docs" / "pdf" / "docling-multi_page.pdf").read_bytes()
    doc_url = server.url("/v1/collections/handbook/documents/" + quote("Multi page", safe=""))
    ticket = admin.post(doc_url + "/upload", json={"filename": "multi page.pdf", "size": len(pdf)}).json()
    assert requests.put(ticket["url"], data=pdf, headers=ticket["headers"]).status_code == 200
    for document_id in (*TEXTS, "Multi page"):
        wait_indexed(admin, server.url(f"/v1/collections/handbook/documents/{quote(document_id, safe='')}"))
    return "handbook"


@pytest.fixture(scope="module")
def exported(server, source, tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "handbook.jsonl.gz"
    done = cli("export", "--collection", source, "-o", str(path), "--url", server.base_url, "--key", server.admin_key)
    assert done.returncode == 0, done.stderr
    assert "exported 3 documents" in done.stdout
    return path


@pytest.fixture(scope="module")
def second_server(tmp_path_factory):
    running = start_server(tmp_path_factory.mktemp("kindex-second"))
    yield running
    running.stop()


def test_the_export_is_one_versioned_json_lines_file(exported):
    # Given the gzip file / When it is read line by line
    lines = [json.loads(line) for line in gzip.open(exported, "rt", encoding="utf-8")]
    header, records, trailer = lines[0], lines[1:-1], lines[-1]
    # Then the header names the format, the collection's configuration, the model and its dimensions
    assert (header["format"], header["format_version"]) == ("kindex-export", 1)
    assert (header["embedding_model"], header["dimensions"]) == ("hash:384", 384)
    assert header["collection"]["chunking_max_size"] == 400 and header["collection"]["query_groups"] == ["staff"]
    # And every document comes before its chunks, each chunk with its offsets, pages, text and vector
    seen = set()
    for record in records:
        if record["type"] == "document":
            seen.add(record["id"])
        else:
            assert record["type"] == "chunk" and record["document_id"] in seen
            assert len(record["vector"]) == 384 and record["end"] - record["start"] == len(record["text"])
    pdf_chunks = [r for r in records if r["type"] == "chunk" and r["document_id"] == "Multi page"]
    assert pdf_chunks[0]["page_start"] == 1 and pdf_chunks[-1]["page_end"] == 5
    assert trailer == {"type": "end", "documents": 3, "chunks": len([r for r in records if r["type"] == "chunk"])}


def test_import_into_another_collection_and_tenant_keeps_chunks_and_answers(server, source, exported):
    other_tenant = server.create_key("other-tenant", "admin")
    before = cached_vectors(server, "hash:384")
    for key, collection in ((server.admin_key, "handbook-copy"), (other_tenant, source)):
        # When the file is imported (the collection is created from the file's configuration)
        done = cli("import", str(exported), "--collection", collection, "--url", server.base_url, "--key", key)
        assert done.returncode == 0, done.stderr
        assert "imported 3 documents" in done.stdout and "(created)" in done.stdout
        assert "; 0 texts embedded" in done.stdout
        # Then the chunk viewer shows the same chunks, offsets and pages, and queries answer the same
        assert everything(server, key, collection) == everything(server, server.admin_key, source)
        # (hybrid scores carry the tenant's own BM25 statistics, which an import into another tenant changes:
        # the hybrid ranking must match, and the vector answers to their scores)
        assert unscored(answers(server, key, collection)) == unscored(answers(server, server.admin_key, source))
        assert answers(server, key, collection, "vector") == answers(server, server.admin_key, source, "vector")
    assert cached_vectors(server, "hash:384") == before
    # (the file may come on stdin, compressed or not)
    with open(exported, "rb") as piped:
        done = cli(
            "import",
            "-",
            "--collection",
            "from-stdin",
            "--url",
            server.base_url,
            "--key",
            server.admin_key,
            stdin=piped,
        )
    assert done.returncode == 0 and "imported 3 documents" in done.stdout, done.stderr
    # And the tenants stay apart: the other tenant's copy is its own
    other = server.session(other_tenant)
    assert other.get(server.url("/v1/collections/handbook-copy")).status_code == 404
    assert other.get(server.url(f"/v1/collections/{source}/export")).json()["documents"]


def test_import_on_a_second_server_embeds_nothing_when_the_model_matches(second_server, exported, server, source):
    # Given a fresh server whose embedding cache is empty
    assert cached_vectors(second_server, "hash:384") == 0
    # When the export is imported there
    done = cli(
        "import",
        str(exported),
        "--collection",
        "moved",
        "--url",
        second_server.base_url,
        "--key",
        second_server.admin_key,
    )
    assert done.returncode == 0, done.stderr
    # Then nothing was embedded (the cache, which every embedding goes through, is still empty)...
    assert "0 texts embedded" in done.stdout
    # (once the worker has handled the content blobs' events: it finds the documents current)
    wait_until(
        lambda: unhandled_events(second_server),
        until=lambda count: count == 0,
        message="the worker did not handle the import's events",
    )
    assert cached_vectors(second_server, "hash:384") == 0
    # ... and the moved collection holds the same chunks and the same vectors: vector search answers exactly as the
    # original (BM25 statistics are the index's, across collections, so keyword scores differ between servers)
    assert everything(second_server, second_server.admin_key, "moved") == everything(server, server.admin_key, source)
    assert answers(second_server, second_server.admin_key, "moved", "vector") == answers(
        server, server.admin_key, source, "vector"
    )
    # And the moved collection moves on again without embedding anything (a chain of moves)
    again = exported.with_name("moved.jsonl")
    done = cli(
        "export",
        "--collection",
        "moved",
        "-o",
        str(again),
        "--url",
        second_server.base_url,
        "--key",
        second_server.admin_key,
    )
    assert done.returncode == 0, done.stderr
    done = cli(
        "import",
        str(again),
        "--collection",
        "moved-again",
        "--url",
        second_server.base_url,
        "--key",
        second_server.admin_key,
    )
    assert done.returncode == 0 and "; 0 texts embedded" in done.stdout, done.stdout + done.stderr
    assert cached_vectors(second_server, "hash:384") == 0


def test_import_into_a_collection_of_another_model_re_embeds(second_server, exported):
    # Given a hash:256 collection on the second server
    admin = second_server.session(second_server.admin_key)
    assert (
        admin.put(
            second_server.url("/v1/collections/small"), json={"embedding_model": "hash:256", "query_groups": ["staff"]}
        ).status_code
        == 201
    )
    # When the hash:384 export is imported into it
    done = cli(
        "import",
        str(exported),
        "--collection",
        "small",
        "--url",
        second_server.base_url,
        "--key",
        second_server.admin_key,
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    # Then its texts were embedded with the collection's model, and queries find the documents
    chunks = sum(1 for line in gzip.open(exported, "rt") if '"type":"chunk"' in line)
    assert f"; {chunks} texts embedded" in done.stdout
    assert cached_vectors(second_server, "hash:256") > 0
    hits = admin.post(
        second_server.url("/v1/collections/small/query"),
        json={"query": "travel expenses receipts", "groups": ["staff"], "mode": "vector"},
    ).json()
    assert hits["results"][0]["document_id"] == "expenses"


def test_roles_and_hostile_import_bodies_get_4xx_json(server, source):
    admin, reader = server.session(server.admin_key), server.session(server.create_key("default", "reader"))
    query_key = server.session(server.create_key("default", "query"))
    url = server.url(f"/v1/collections/{source}/import")
    base = {
        "format_version": 1,
        "embedding_model": "hash:384",
        "dimensions": 384,
        "documents": [{"id": "x", "chunk_count": 1}],
        "chunks": [{"document_id": "x", "index": 0, "start": 0, "end": 2, "text": "hi", "vector": [0.5] * 384}],
    }
    assert reader.post(url, json=base).status_code == 403
    assert query_key.get(server.url(f"/v1/collections/{source}/export")).status_code == 403
    assert reader.get(server.url(f"/v1/collections/{source}/export"), params={"number": 1}).status_code == 200
    hostile = [
        (json.dumps({**base, "dimensions": 3}), 422),
        (json.dumps(base).replace("[0.5, 0.5", "[NaN, 0.5", 1), 422),
        (json.dumps({**base, "chunks": [{**base["chunks"][0], "vector": [0.5] * 10}]}), 422),
        (json.dumps({**base, "documents": [{"id": "a/b", "chunk_count": 1}]}), 422),
        (json.dumps({**base, "chunks": [{**base["chunks"][0], "index": i} for i in range(1001)]}), 422),
        (json.dumps({**base, "documents": [], "chunks": [{**base["chunks"][0], "document_id": "handbook"}]}), 409),
        ("{" + '"pad": "' + "x" * (11 * 1024 * 1024) + '"}', 413),
    ]
    for body, status in hostile:
        response = admin.post(url, data=body, headers={"Content-Type": "application/json"})
        assert response.status_code == status, (status, response.text[:300])
        assert set(response.json()) == {"error", "message"}
    assert admin.get(server.url(f"/v1/collections/{source}/documents/x")).status_code == 404


def test_cli_errors_are_clear(server, exported, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    done = cli("export", "--collection", "handbook", "-o", str(tmp_path / "x.jsonl"), env=env)
    assert done.returncode == 2 and "--url and --key" in done.stderr
    done = cli(
        "export",
        "--collection",
        "missing",
        "-o",
        str(tmp_path / "x.jsonl"),
        "--url",
        server.base_url,
        "--key",
        server.admin_key,
    )
    # the remote commands' exit codes: 4 is a 404; no file is left behind
    assert done.returncode == 4 and "not_found" in done.stderr and not (tmp_path / "x.jsonl").exists()
    done = cli(
        "import",
        str(exported),
        "--collection",
        "x",
        "--url",
        server.base_url,
        "--key",
        server.create_key("default", "reader"),
    )
    assert done.returncode == 3 and "forbidden" in done.stderr  # a reader may export, not import
    # a file cut short is refused at its end, and says how far it got
    lines = gzip.open(exported, "rt").read().splitlines()
    (tmp_path / "cut.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    done = cli(
        "import",
        str(tmp_path / "cut.jsonl"),
        "--collection",
        "cut",
        "--url",
        server.base_url,
        "--key",
        server.admin_key,
    )
    assert done.returncode == 1 and "cut short" in done.stderr
    # a record the API's model refuses is caught before the request, naming where it is
    broken = [lines[0], lines[1].replace('"chunk_count":', '"chunk_count":-', 1)]
    (tmp_path / "bad.jsonl").write_text("\n".join(broken) + "\n")
    done = cli(
        "import",
        str(tmp_path / "bad.jsonl"),
        "--collection",
        "bad",
        "--url",
        server.base_url,
        "--key",
        server.admin_key,
    )
    assert done.returncode == 1 and "not a valid batch" in done.stderr and "chunk_count" in done.stderr
    (tmp_path / "other.jsonl").write_text('{"hello": 1}\n')
    done = cli(
        "import",
        str(tmp_path / "other.jsonl"),
        "--collection",
        "cut2",
        "--url",
        server.base_url,
        "--key",
        server.admin_key,
    )
    assert done.returncode == 1 and "not a kindex export" in done.stderr


def test_import_into_a_server_on_opensearch_embeds_nothing_and_answers_the_same(
    opensearch_node, exported, server, source, tmp_path
):
    # Given a server whose index is the real OpenSearch node (lucene engine)
    prefix = opensearch_node.new_prefix()
    cluster = start_server(
        tmp_path / "data",
        {
            "KINDEX_SEARCH_URL": opensearch_node.url,
            "KINDEX_SEARCH_INDEX_PREFIX": prefix,
            "KINDEX_OPENSEARCH_ENGINE": "lucene",
        },
    )
    try:
        # When the export is imported there
        done = cli(
            "import", str(exported), "--collection", "on-cluster", "--url", cluster.base_url, "--key", cluster.admin_key
        )
        assert done.returncode == 0, done.stderr
        # Then nothing was embedded, the node holds every chunk, and vector search answers as the original
        assert "; 0 texts embedded" in done.stdout and cached_vectors(cluster, "hash:384") == 0
        chunks = sum(1 for line in gzip.open(exported, "rt") if '"type":"chunk"' in line)
        requests.post(f"{opensearch_node.url}/{prefix}-*/_refresh").raise_for_status()
        count = requests.get(f"{opensearch_node.url}/{prefix}-*/_count").json()["count"]
        assert count == chunks
        assert everything(cluster, cluster.admin_key, "on-cluster") == everything(server, server.admin_key, source)
        assert answers(cluster, cluster.admin_key, "on-cluster", "vector") == answers(
            server, server.admin_key, source, "vector"
        )
    finally:
        cluster.stop()
        opensearch_node.delete_indices(prefix)


def test_the_sdk_exports_and_imports_page_by_page(server, source):
    from kindex.client import Kindex

    with Kindex(server.base_url, server.admin_key) as client:
        # When a program moves the collection with the SDK, one page and one batch at a time
        client.put_collection("sdk-copy", query_groups=["staff"], chunking_max_size=400)
        cursor, embedded = None, 0
        while True:
            page = client.export_collection(source, cursor, number=7)
            result = client.import_batch(
                "sdk-copy",
                {
                    "format_version": 1,
                    "embedding_model": page.embedding_model,
                    "dimensions": page.dimensions,
                    "chunking": {
                        name: page.collection.model_dump(mode="json")[name]
                        for name in ("chunking_method", "chunking_max_size", "chunking_overlap_offset")
                    },
                    "documents": [d.model_dump() for d in page.documents],
                    "chunks": [c.model_dump() for c in page.chunks],
                },
            )
            embedded += result.texts_embedded
            cursor = page.next_cursor
            if cursor is None:
                break
    # Then the copy holds the same chunks, nothing was embedded, and it answers the same
    assert embedded == 0
    assert everything(server, server.admin_key, "sdk-copy") == everything(server, server.admin_key, source)
    assert answers(server, server.admin_key, "sdk-copy", "vector") == answers(
        server, server.admin_key, source, "vector"
    )
