"""Permission-aware retrieval on the local backend, with a real rights-check server on 127.0.0.1."""

import threading
import time

import pytest

from kindex.app.cpu_slots import CpuSlots
from kindex.domain.errors import Conflict, Forbidden, NotFound
from kindex.domain.models import CollectionInput, DocumentInput
from kindex.domain.query import QueryRequest
from kindex_local.deployment import build_worker
from tests.support.rights_server import RightsServer

pytestmark = pytest.mark.integration

TOPICS = [
    "volcano eruption lava",
    "penguin colony antarctic",
    "violin concerto orchestra",
    "tax return deadline",
    "marathon training plan",
    "coral reef bleaching",
    "quantum entanglement photon",
    "sourdough bread starter",
]


@pytest.fixture
def env(local_container):
    services = local_container
    worker = build_worker()

    def collection(name, **fields):
        services.catalog.put_collection("t", name, CollectionInput(**fields))

    def document(coll, doc_id, text, tenant="t", **fields):
        services.catalog.put_document(tenant, coll, doc_id, DocumentInput(content=text, **fields))

    def query(colls, multi=False, tenant="t", **request):
        request.setdefault("groups", ["staff"])
        return services.query.query(tenant, colls, QueryRequest(**request), multi=multi)

    services.helpers = (collection, document, query, worker)
    return services


def test_collection_gate(env):
    collection, document, query, worker = env.helpers
    collection("guests", allow_guests=True)
    collection("staff-only", query_groups=["staff", "hr"])
    document("guests", "g1", "public text about volcanoes")
    document("staff-only", "s1", "internal text about volcanoes")
    worker.drain()
    # guests: anyone, even with no user at all
    assert len(query(["guests"], query="volcanoes", user=None, groups=[]).results) == 1
    # groups must intersect query_groups
    assert len(query(["staff-only"], query="volcanoes", user="ann", groups=["hr"]).results) == 1
    with pytest.raises(Forbidden):
        query(["staff-only"], query="volcanoes", user="bob", groups=["sales"])
    with pytest.raises(NotFound):
        query(["missing"], query="volcanoes")
    # several collections: the ones failing the gate are left out and named
    response = query(["guests", "staff-only"], multi=True, query="volcanoes", user="bob", groups=["sales"])
    assert {r.document_id for r in response.results} == {"g1"}
    assert response.denied_collections == ["staff-only"]


def test_results_citations_and_context(env):
    collection, document, query, worker = env.helpers
    collection("c", query_groups=["staff"], chunking_max_size=60)
    for i, topic in enumerate(TOPICS):
        document("c", f"doc-{i}", f"{topic}. " * 6, title=f"Title {i}", url=f"https://example.com/{i}")
    worker.drain()
    response = query(["c"], query="penguin colony antarctic", k=4, mode="hybrid")
    assert response.results[0].document_id == "doc-1"
    first = response.results[0]
    assert (first.title, first.url, first.collection, first.citation) == ("Title 1", "https://example.com/1", "c", 1)
    assert first.content and "penguin" in first.content
    # citations are numbered by first appearance of each document
    order = list(dict.fromkeys(r.document_id for r in response.results))
    assert [c.document_id for c in response.citations] == order
    assert [c.n for c in response.citations] == list(range(1, len(order) + 1))
    assert all(r.citation == order.index(r.document_id) + 1 for r in response.results)
    assert 'document-id="doc-1"' in response.context and "<CIT document-id />" in response.context
    assert set(response.timing_ms) == {"embed", "search", "rights", "fetch"}


def test_only_indexed_documents_are_returned(env):
    collection, document, query, worker = env.helpers
    collection("c", query_groups=["staff"])
    document("c", "d1", "penguin colony antarctic")
    worker.drain()
    assert [r.document_id for r in query(["c"], query="penguin").results] == ["d1"]
    # new content not yet processed: the document is pending, its old chunks must not be served
    document("c", "d1", "something else entirely")
    assert query(["c"], query="penguin").results == []


def test_filters(env):
    collection, document, query, worker = env.helpers
    collection("c", query_groups=["staff"])
    document("c", "en", "penguin colony", language="en")
    document("c", "fr", "penguin colonie", language="fr")
    document("c", "md", "penguin notes", mimetype="text/markdown")
    worker.drain()

    def found(filters: dict) -> set[str]:
        return {r.document_id for r in query(["c"], query="penguin", filters=filters).results}

    assert found({"language": "fr"}) == {"fr"}
    assert found({"document_ids": ["en", "md"]}) == {"en", "md"}
    assert found({"mimetype": "text/markdown"}) == {"md"}


def test_hybrid_finds_what_each_single_mode_misses(env):
    collection, document, query, worker = env.helpers
    collection("c", query_groups=["staff"])
    # keyword-only hit: the exact words, buried in a long unrelated text (the vector is diluted)
    filler = " ".join(f"{t}" for t in TOPICS[2:] for _ in range(3))
    document("c", "lexical", f"{filler} running quickly {filler}")
    # vector-only hit: different word forms, same character trigrams (no token or English stem for BM25)
    document("c", "fuzzy", "runners runner quicker quickest")
    # a decoy: closer to the query than "lexical" in character trigrams, without its words, so the vector
    # top 2 misses "lexical" (vector ranks: fuzzy 0.36, decoy 0.28, lexical 0.17 with hash:384)
    document("c", "decoy", "runnable quickie runnels")
    for i, topic in enumerate(TOPICS):
        document("c", f"noise-{i}", f"{topic} " * 5)
    worker.drain()
    relevant = {"lexical", "fuzzy"}

    def found(mode):
        return {r.document_id for r in query(["c"], query="running quickly", k=2, mode=mode).results} & relevant

    keyword, vector, hybrid = found("keyword"), found("vector"), found("hybrid")
    assert keyword == {"lexical"} and vector == {"fuzzy"}
    assert hybrid == relevant


def _recording_legs(monkeypatch, index):
    """Which thread ran each leg of the index's searches, in order."""
    ran: list[tuple[str, int]] = []
    for leg in ("knn_search", "keyword_search"):
        search = getattr(index, leg)

        def recorded(*args, _leg=leg, _search=search, **kwargs):
            ran.append((_leg, threading.get_ident()))
            return _search(*args, **kwargs)

        monkeypatch.setattr(index, leg, recorded)
    return ran


def test_hybrid_legs_run_in_the_request_thread_under_a_cpu_slot(env, monkeypatch):
    # Given an embedded index with documents both legs find, and each leg's thread recorded
    collection, document, query, worker = env.helpers
    collection("c", query_groups=["staff"])
    for i, topic in enumerate(TOPICS):
        document("c", f"doc-{i}", f"{topic}. " * 4)
    worker.drain()
    index = env.query.index
    assert index.computes_locally
    ran = _recording_legs(monkeypatch, index)
    here = threading.get_ident()

    def ask():
        ran.clear()
        response = query(["c"], query="penguin colony violin", k=5, mode="hybrid")
        return [(r.chunk_id, r.score) for r in response.results], dict(ran)

    # When a hybrid query runs without a slot, then holding one (as `kindex serve` runs a request)
    overlapped, overlapped_threads = ask()
    with CpuSlots(1).held():
        in_slot, in_slot_threads = ask()

    # Then without a slot the keyword leg ran on a second thread while the vector leg ran here; in a slot both ran
    # here, one after the other; and the answer is the same
    assert overlapped_threads["knn_search"] == here and overlapped_threads["keyword_search"] != here
    assert in_slot_threads == {"knn_search": here, "keyword_search": here}
    assert in_slot == overlapped and len(in_slot) == 5


def test_hybrid_legs_of_a_remote_index_overlap_even_in_a_cpu_slot(env, monkeypatch):
    # Given an index whose searches wait on a remote engine (as the OpenSearch adapter's do)
    collection, document, query, worker = env.helpers
    collection("c", query_groups=["staff"])
    document("c", "d", "penguin colony antarctic")
    worker.drain()
    index = env.query.index
    monkeypatch.setattr(index, "computes_locally", False)
    ran = _recording_legs(monkeypatch, index)
    # When a hybrid query runs holding a CPU slot
    with CpuSlots(1).held():
        response = query(["c"], query="penguin", k=1, mode="hybrid")
    # Then the keyword leg still ran on a second thread
    threads = dict(ran)
    assert response.results and threads["knn_search"] == threading.get_ident()
    assert threads["keyword_search"] != threading.get_ident()


def test_min_score(env):
    collection, document, query, worker = env.helpers
    collection("c", query_groups=["staff"])
    document("c", "d", "penguin colony antarctic")
    worker.drain()
    assert query(["c"], query="penguin colony antarctic", mode="vector", min_score=0.99).results
    assert query(["c"], query="penguin colony antarctic", mode="vector", min_score=1.01).results == []


def test_two_tenants_never_see_each_others_chunks(env):
    collection, document, query, worker = env.helpers
    for tenant in ("t", "u"):
        env.catalog.put_collection(tenant, "same", CollectionInput(query_groups=["staff"]))
        document("same", "same-doc", f"penguin colony belonging to tenant {tenant}", tenant=tenant)
    worker.drain()
    for tenant in ("t", "u"):
        for mode in ("vector", "keyword", "hybrid"):
            response = query(["same"], tenant=tenant, query="penguin colony tenant", mode=mode, k=10)
            assert [r.content for r in response.results] == [f"penguin colony belonging to tenant {tenant}"]


@pytest.fixture
def rights_timeout():
    """The collection's rights-check timeout: short where a test waits for it to pass (a hanging endpoint); the tests
    of an endpoint that answers take a long one, so a loaded machine cannot turn its answer into a timeout."""
    return 0.5


@pytest.fixture
def rights(env, rights_timeout):
    server = RightsServer()
    secret = env.rights_secrets.rotate("t")
    server.secret = secret.encode()
    collection, document, query, worker = env.helpers
    collection(
        "ext",
        query_groups=["staff"],
        rights_check_method="external",
        rights_check_method_configuration={"url": server.url, "timeout": rights_timeout},
    )
    for i in range(30):
        document("ext", f"d{i:02d}", f"penguin report number {i} " + "antarctic ice " * (i % 5))
    worker.drain()
    yield server
    server.close()


@pytest.mark.parametrize("rights_timeout", [10.0])
def test_external_rights_allow_subset_and_signature(env, rights):
    _, _, query, _ = env.helpers
    rights.allowed = {"d03", "d07"}
    response = query(["ext"], query="penguin report", user="ann", k=5)
    assert {r.document_id for r in response.results} == {"d03", "d07"}
    assert response.denied_count > 0
    sent = rights.requests[0]
    assert sent["body"]["username"] == "ann" and sent["body"]["xwiki_username"] == "ann"
    assert sent["body"]["collection"] == "ext" and sent["headers"]["Content-Type"] == "application/json"
    assert rights.bad_signatures == 0
    assert response.warnings == []


@pytest.mark.parametrize("rights_timeout", [10.0])
def test_overfetch_fills_k_when_early_candidates_are_denied(env, rights):
    _, _, query, _ = env.helpers
    # Given only the six documents ranked lowest are allowed
    rights.mode, rights.allowed = "allow", {f"d{i:02d}" for i in range(30)}
    everything = [r.document_id for r in query(["ext"], query="penguin antarctic ice", k=30, mode="hybrid").results]
    rights.allowed = set(list(dict.fromkeys(everything))[-6:])
    rights.requests.clear()
    # When asking for k=5
    response = query(["ext"], query="penguin antarctic ice", k=5, mode="hybrid")
    # Then k results are still returned, over more than one round, one call per round
    assert len(response.results) == 5 and {r.document_id for r in response.results} <= rights.allowed
    assert 2 <= len(rights.requests) <= 3


@pytest.mark.parametrize("mode", ["deny", "omit", "strings", "list", "error", "garbage", "hang", "bad-signature"])
def test_rights_failures_fail_closed(env, rights, mode):
    _, _, query, _ = env.helpers
    rights.allowed = {"d01"} if mode == "omit" else set()
    rights.mode = {"deny": "allow", "bad-signature": "allow"}.get(mode, mode)
    rights.hang_seconds = 30  # "hang": an answer that would come 30 s late
    if mode == "bad-signature":
        rights.allowed = {f"d{i:02d}" for i in range(30)}
        env.adapters.secrets.put_secret("tenants/t/rights-check-signing", b"not the secret the server knows")
    started = time.monotonic()
    response = query(["ext"], query="penguin report", user="ann", k=5)
    elapsed = time.monotonic() - started
    allowed = {r.document_id for r in response.results}
    assert allowed <= ({"d01"} if mode == "omit" else set())
    assert response.denied_count > 0
    # the whole query, over-fetch rounds included, returns at the timeout (0.5 s): far sooner than a late answer
    # (30 s), or than a round each waiting for its own timeout would add up to
    assert elapsed < 5
    if mode in ("deny", "omit"):
        # a valid answer that denies is no failure
        assert response.warnings == []
    else:
        # any failure says so, and costs the whole timeout (a fast failure would tell a closed port from a slow one)
        assert [(w.collection, w.code) for w in response.warnings] == [("ext", "rights_check_failed")]
        assert elapsed >= 0.5 and response.timing_ms["rights"] >= 500
        # (once: the failed collection is denied for the rest of the query, its later rounds make no call)
        assert len(rights.requests) == 1


def test_external_rights_cannot_be_saved_without_the_secret(env):
    collection, _, _, _ = env.helpers
    server = RightsServer()
    try:
        # Given tenant t has no signing secret: saving an external check is refused, naming the route that fixes it
        with pytest.raises(Conflict, match="POST /v1/rights-check-secret"):
            collection(
                "ext2",
                query_groups=["staff"],
                rights_check_method="external",
                rights_check_method_configuration={"url": server.url},
            )
        assert env.adapters.metadata.get_collection("t", "ext2") is None
        # Nor can an existing collection be switched to it
        collection("ext2", query_groups=["staff"])
        with pytest.raises(Conflict):
            collection("ext2", rights_check_method="external", rights_check_method_configuration={"url": server.url})
        assert env.adapters.metadata.get_collection("t", "ext2").rights_check_method == "public"
        # Once the secret exists it saves
        env.rights_secrets.rotate("t")
        collection("ext2", rights_check_method="external", rights_check_method_configuration={"url": server.url})
    finally:
        server.close()


def test_no_secret_at_query_time_denies_and_says_so(env):
    collection, document, query, worker = env.helpers
    server = RightsServer()
    try:
        # Given an external collection stored while the tenant had no secret (saved before the check existed)
        collection("ext2", query_groups=["staff"])
        stored = env.adapters.metadata.get_collection("t", "ext2")
        stored = stored.model_copy(
            update={
                "rights_check_method": "external",
                "revision": stored.revision + 1,
                "rights_check_method_configuration": {"url": server.url},
            }
        )
        env.adapters.metadata.put_collection("t", stored, create=False)
        collection("pub", query_groups=["staff"])
        document("ext2", "d", "penguin")
        document("pub", "p", "penguin")
        worker.drain()
        # When it is queried with a public collection
        response = query(["ext2", "pub"], multi=True, query="penguin")
        # Then its results stay denied, the public ones come back, and the response says why
        assert [r.document_id for r in response.results] == ["p"] and response.denied_count == 1
        assert [(w.collection, w.code) for w in response.warnings] == [("ext2", "rights_check_secret_missing")]
        assert "POST /v1/rights-check-secret" in response.warnings[0].message
        assert server.requests == []
    finally:
        server.close()
