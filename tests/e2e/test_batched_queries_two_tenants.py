"""`kindex serve` with the default local model and query batching on: 16 clients query two tenants with the same
collection and document ids at once. Each answer holds only its own tenant's documents, with exactly the scores the
same query gets alone (the int8 model runs each query's window alone: a batch changes no vector)."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import start_server
from tests.support.waiting import wait_settled

pytestmark = pytest.mark.e2e

MODEL = "local:bge-small-en-v1.5-q"
CLIENTS = 16
REQUESTS = 320
TENANTS = {"alpha": "ALPHA", "beta": "BETA"}
TOPICS = {
    "leave": "staff get twenty days of paid leave each year, more after five years",
    "stadium": "the stadium was rebuilt after the fire and now seats forty thousand people",
    "insulin": "insulin resistance in muscle and liver drives type 2 diabetes",
    "telescope": "the space telescope measured the light of distant galaxies",
}
QUESTIONS = ["how many days off do employees get", "how large is the arena", "what causes diabetes", "early universe"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server on the default local model, batching on (its default); both tenants hold `shared` with the same
    document ids, every text naming its tenant."""
    server = start_server(tmp_path_factory.mktemp("batching") / "data", {"KINDEX_DEFAULT_EMBEDDING_MODEL": MODEL})
    try:
        keys = {}
        for tenant, marker in TENANTS.items():
            keys[tenant] = server.create_key(tenant, "admin")
            session = server.session(keys[tenant])
            url = server.url("/v1/collections/shared")
            assert session.put(url, json={"allow_guests": True}).status_code == 201
            for doc, text in TOPICS.items():
                response = session.put(
                    f"{url}/documents/{doc}", json={"title": f"{marker} {doc}", "content": f"{marker}: {text}."}
                )
                assert response.status_code == 201, response.text
            assert wait_settled(session, url, list(TOPICS), timeout=120) == dict.fromkeys(TOPICS, "indexed")
        yield server, keys
    finally:
        server.stop()


def ask(session, url: str, question: str, mode: str) -> list[tuple[str, str, float]]:
    response = session.post(url, json={"query": question, "k": 4, "mode": mode})
    assert response.status_code == 200, response.text
    return [(r["title"], r["content"], r["score"]) for r in response.json()["results"]]


def test_sixteen_clients_of_two_tenants_get_their_own_results_with_their_scores_alone(served):
    server, keys = served
    url = server.url("/v1/collections/shared/query")
    work = [(t, q, m) for t in TENANTS for q in QUESTIONS for m in ("vector", "hybrid")]
    # Given each tenant's answer to each question when it is asked alone
    alone = {(t, q, m): ask(server.session(keys[t]), url, q, m) for t, q, m in work}
    for (tenant, _, _), results in alone.items():
        assert results and all(title.startswith(TENANTS[tenant]) for title, _, _ in results)
    local = threading.local()

    def one(n: int):
        if not hasattr(local, "sessions"):
            local.sessions = {t: server.session(key) for t, key in keys.items()}
        tenant, question, mode = random.Random(n).choice(work)
        return (tenant, question, mode), ask(local.sessions[tenant], url, question, mode)

    # When 16 clients ask the same questions of both tenants at once (their queries batched per tenant)
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(one, range(REQUESTS)))

    # Then every answer is its own tenant's, exactly as when asked alone: same documents, order and scores
    for key, results in answers:
        tenant = key[0]
        other = next(marker for t, marker in TENANTS.items() if t != tenant)
        assert all(other not in title and other not in content for title, content, _ in results), (key, results)
        assert results == alone[key], key
