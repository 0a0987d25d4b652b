"""Reindex through `kindex serve`: a chunking change, the job's progress, and the model switch."""

import pytest

from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def poll_job(session, url):
    return wait_until(
        lambda: session.get(url).json(),
        until=lambda job: job["status"] == "completed",
        interval=0.2,
        message="the reindex job did not complete",
    )


def test_reindex_job_over_http(server):
    admin = server.session(server.admin_key)
    url = server.url("/v1/collections/re")
    admin.put(url, json={"allow_guests": True})
    for i in range(4):
        admin.put(f"{url}/documents/d{i}", json={"content": f"Document {i} text about topic {i}. " * 10})
    wait_until(
        lambda: [admin.get(f"{url}/documents/d{i}").json()["status"] for i in range(4)],
        until=lambda statuses: statuses == ["indexed"] * 4,
        message="the documents were not indexed",
    )
    # a model change: queries keep answering until the new model is complete
    changed = admin.put(url, json={"embedding_model": "hash:256", "chunking_max_size": 500}).json()
    assert changed["embedding_model"] == "hash:256" and changed["active_embedding_model"] == "hash:384"
    started = admin.post(f"{url}/reindex", json={})
    assert started.status_code == 202, started.text
    job = started.json()
    assert admin.post(f"{url}/query", json={"query": "topic 2"}).json()["results"]
    done = poll_job(admin, server.url(f"/v1/jobs/{job['id']}"))
    assert done["done"] == done["total"] == 4
    assert admin.get(url).json()["active_embedding_model"] == "hash:256"
    assert admin.post(f"{url}/query", json={"query": "topic 2"}).json()["results"][0]["document_id"] == "d2"
    # errors
    assert admin.get(server.url("/v1/jobs/unknown")).status_code == 404
    assert admin.post(server.url("/v1/collections/none/reindex"), json={}).status_code == 404
    assert admin.post(f"{url}/reindex", json={"clean": "yes please"}).status_code == 422
    reader = server.session(server.create_key("default", "query"))
    assert reader.post(f"{url}/reindex", json={}).status_code == 403
