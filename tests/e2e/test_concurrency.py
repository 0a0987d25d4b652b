"""`kindex serve` under concurrent traffic: two tenants with identical ids, 16 clients, mixed reads, writes and
queries. No answer may carry the other tenant's data and none may be a 5xx."""

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.waiting import wait_settled

pytestmark = pytest.mark.e2e

CLIENTS = 16
REQUESTS = 2400
DOCUMENTS = [f"doc-{n}" for n in range(8)]
TENANTS = {"alpha": "ALPHA", "beta": "BETA"}


def content(marker: str, doc: str, round_: int) -> str:
    return f"{marker} handbook page {doc} revision {round_}: {marker} staff get {round_} days of leave."


@pytest.fixture(scope="module")
def tenants(server):
    """Two tenants, each with collection `shared` and the same document ids; every text names its tenant."""
    sessions = {}
    for tenant, marker in TENANTS.items():
        session = server.session(server.create_key(tenant, "admin"))
        url = server.url("/v1/collections/shared")
        assert session.put(url, json={"title": marker, "allow_guests": True}).status_code == 201
        for doc in DOCUMENTS:
            response = session.put(
                f"{url}/documents/{doc}", json={"title": f"{marker} {doc}", "content": content(marker, doc, 0)}
            )
            assert response.status_code == 201, response.text
        sessions[tenant] = session
    for session in sessions.values():
        assert wait_settled(session, server.url("/v1/collections/shared"), DOCUMENTS) == dict.fromkeys(
            DOCUMENTS, "indexed"
        )
    return sessions


def test_sixteen_clients_two_tenants_never_mix(server, tenants):
    """Given two tenants with identical collection and document ids
    When 16 clients send mixed reads, writes and queries for both at once
    Then every answer carries only its own tenant's data, and none is a 5xx."""
    url = server.url("/v1/collections/shared")
    local = threading.local()
    keys = {tenant: session.headers["Authorization"] for tenant, session in tenants.items()}
    statuses: Counter = Counter()
    leaks: list[str] = []
    lock = threading.Lock()

    def client():
        if not hasattr(local, "sessions"):
            local.sessions = {t: server.session() for t in TENANTS}
            for tenant, session in local.sessions.items():
                session.headers["Authorization"] = keys[tenant]
        return local.sessions

    def one(n: int) -> None:
        rng = random.Random(n)
        tenant = rng.choice(list(TENANTS))
        marker, other = TENANTS[tenant], next(m for t, m in TENANTS.items() if t != tenant)
        session = client()[tenant]
        doc = rng.choice(DOCUMENTS)
        kind = rng.choice(["collection", "document", "query", "query", "list", "write"])
        if kind == "collection":
            response = session.get(url)
            ok = response.status_code == 200 and response.json()["title"] == marker
        elif kind == "document":
            response = session.get(f"{url}/documents/{doc}")
            body = response.json()
            ok = (
                response.status_code == 200 and body["title"] == f"{marker} {doc}" and marker in (body["content"] or "")
            )
        elif kind == "list":
            response = session.get(f"{url}/documents", params={"start": 0, "number": 20})
            ok = response.status_code == 200 and response.json()["documents"] == DOCUMENTS
        elif kind == "write":
            response = session.put(f"{url}/documents/{doc}", json={"content": content(marker, doc, n)})
            ok = response.status_code in (200, 409)
        else:
            response = session.post(
                f"{url}/query",
                json={
                    "query": f"{marker} staff leave days",
                    "k": 5,
                    "mode": rng.choice(["vector", "keyword", "hybrid"]),
                },
            )
            results = response.json().get("results", [])
            ok = response.status_code == 200 and all(
                marker in r["content"] and other not in r["content"] for r in results
            )
        with lock:
            statuses[response.status_code] += 1
            if not ok or other in response.text:
                leaks.append(f"{tenant} {kind} {response.status_code} {response.text[:300]}")

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one, range(REQUESTS)))

    assert sum(statuses.values()) == REQUESTS
    assert not [s for s in statuses if s >= 500], statuses
    assert leaks == [], leaks[:5]
