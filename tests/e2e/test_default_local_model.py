"""`kindex serve` with no model configured: new collections get bge-small-en-v1.5 (int8), read from the files
`make install` fetched, with no network at all (every proxy points at a closed port, the Hugging Face hub is off)."""

from __future__ import annotations

import pytest

from tests.conftest import start_server
from tests.support.waiting import wait_settled

pytestmark = pytest.mark.e2e

CLOSED = "http://127.0.0.1:9"  # discard port: nothing listens, so any download attempt fails at once
DOCUMENTS = {
    "insulin": "Insulin resistance in muscle and liver is the main driver of type 2 diabetes.",
    "stadium": "The stadium was rebuilt in 1998 after the fire and now seats forty thousand people.",
    "telescope": "The space telescope measured the light of distant galaxies to date the early universe.",
}


def test_serve_uses_bge_small_by_default_offline(tmp_path):
    server = start_server(
        tmp_path / "data",
        {
            "KINDEX_DEFAULT_EMBEDDING_MODEL": None,
            "HF_HUB_OFFLINE": "1",
            "HTTP_PROXY": CLOSED,
            "HTTPS_PROXY": CLOSED,
            "http_proxy": CLOSED,
            "https_proxy": CLOSED,
            "NO_PROXY": "",
            "no_proxy": "",
        },
    )
    try:
        admin = server.session(server.admin_key)
        url = server.url("/v1/collections/papers")
        # Given a collection created without a model (open to any caller: rights are not what this tests)
        created = admin.put(url, json={"allow_guests": True})
        assert created.status_code == 201, created.text
        collection = admin.get(url).json()
        assert collection["embedding_model"] == "local:bge-small-en-v1.5-q"
        # And its default chunks fit the model's 512-token window
        assert collection["embedding_window"]["window_tokens"] == 512
        assert collection["embedding_window"]["exceeds_window"] is False
        for doc_id, text in DOCUMENTS.items():
            assert admin.put(f"{url}/documents/{doc_id}", json={"content": text}).status_code in (200, 201)
        assert wait_settled(admin, url, list(DOCUMENTS), timeout=120) == {d: "indexed" for d in DOCUMENTS}
        # When a question is asked in other words than its answer, by vector search alone
        response = admin.post(
            f"{url}/query", json={"query": "what causes adult-onset diabetes?", "mode": "vector", "k": 3}
        )
        # Then the model finds it
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["document_id"] == "insulin"
    finally:
        server.stop()


def test_serve_without_the_model_files_fails_documents_and_queries_with_the_command_to_run(tmp_path):
    # Given `kindex serve` whose models dir is empty (make install not run)
    server = start_server(
        tmp_path / "data", {"KINDEX_DEFAULT_EMBEDDING_MODEL": None, "KINDEX_MODELS_DIR": str(tmp_path / "no-models")}
    )
    try:
        admin = server.session(server.admin_key)
        url = server.url("/v1/collections/papers")
        assert admin.put(url, json={"allow_guests": True}).status_code == 201
        assert admin.put(f"{url}/documents/d", json={"content": "hello world"}).status_code in (200, 201)
        # Then the document fails, retryably, saying what to run; the server keeps serving
        assert wait_settled(admin, url, ["d"], timeout=120) == {"d": "failed"}
        document = admin.get(f"{url}/documents/d").json()
        command = "python -m kindex.adapters.embedders.model_files --model local:bge-small-en-v1.5-q"
        assert document["failure_retryable"] is True and command in document["failure_reason"]
        # And a query is a 503 naming the command, with no path of the server in it
        response = admin.post(f"{url}/query", json={"query": "hello", "mode": "vector"})
        assert response.status_code == 503
        body = response.json()
        assert body["error"] == "dependency_unavailable" and command in body["message"]
        assert str(tmp_path) not in response.text
    finally:
        server.stop()
