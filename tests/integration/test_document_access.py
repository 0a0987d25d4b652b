"""Document attributes and access lists through the local stack (SQLite, folder blobs, the embedded index, the
durable queue): stored and shown, enforced on every query, a revocation at once, a filter-field change rewritten
without embedding, sidecars of dropped files, and a user who may see 1 % of a collection (issue 23)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from kindex.domain.errors import InvalidInput
from kindex.domain.filters import parse_filter
from kindex.domain.keys import blob_key
from kindex.domain.models import CollectionInput, DocumentInput, DocumentStatus, PageRequest
from kindex.domain.query import QueryRequest
from kindex.domain.types import Principals, SearchFilters
from kindex.domain.validation import validated
from kindex_local.deployment import build_worker
from tests.support.rights_server import RightsServer

pytestmark = pytest.mark.integration


class CountingEmbedder:
    """The real embedder, with a count of the texts it was asked to embed (passages only)."""

    def __init__(self, embedder):
        self.inner = embedder
        self.dimensions = embedder.dimensions
        self.texts = 0
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        self.texts += len(texts)
        return self.inner.embed(texts)

    def embed_queries(self, texts):
        return self.inner.embed_queries(texts)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def env(local_container):
    services = local_container
    services.worker = build_worker()
    embedders: dict[str, CountingEmbedder] = {}
    real = services.embeddings.embedder_for

    def counted(model):
        if model not in embedders:
            embedders[model] = CountingEmbedder(real(model))
        return embedders[model]

    services.embeddings.embedder_for = counted
    services.counting = embedders
    return services


def put(services, collection, document, tenant="t", **fields):
    return services.catalog.put_document(tenant, collection, document, validated(lambda: DocumentInput(**fields)))[0]


def ask(services, collections, tenant="t", multi=False, **request):
    request.setdefault("groups", ["staff"])
    return services.query.query(tenant, collections, validated(lambda: QueryRequest(**request)), multi=multi)


def found(services, collections, **request) -> set[str]:
    return {r.document_id for r in ask(services, collections, **request).results}


def test_attributes_and_access_are_stored_shown_and_listed(env):
    # Given a document PUT with attributes (every value type) and an access list
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    attributes = {"region": "eu", "year": 2024, "score": 0.5, "draft": False, "tags": ["hr", "policy"]}
    put(
        env,
        "c",
        "d1",
        content="annual leave policy",
        attributes=attributes,
        access={"users": ["ann"], "groups": ["hr", "hr"], "deny_groups": ["contractors"]},
    )
    # Then GET and the list's items show them as written (duplicates dropped), types kept
    document, _ = env.catalog.get_document("t", "c", "d1")
    assert document.attributes == attributes and isinstance(document.attributes["draft"], bool)
    assert document.access.groups == ("hr",) and document.access.deny_groups == ("contractors",)
    item = env.catalog.list_documents("t", "c", PageRequest()).documents[0]
    assert item.attributes == attributes and item.access == document.access
    # And a PUT of other fields keeps them; null removes one
    put(env, "c", "d1", title="Leave")
    assert env.adapters.metadata.get_document("t", "c", "d1").attributes == attributes
    put(env, "c", "d1", access=None)
    stored = env.adapters.metadata.get_document("t", "c", "d1")
    assert stored.access is None and stored.attributes == attributes and stored.title == "Leave"


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"attributes": {"a": {"b": {"c": {"d": {"e": 1}}}}}}, "attributes.a"),
        ({"attributes": {f"k{i}": i for i in range(65)}}, "attributes"),
        ({"attributes": {"year": 2**63}}, "attributes.year"),
        ({"attributes": {"x": float("nan")}}, "attributes.x"),
        ({"attributes": {"tags": ["x"] * 101}}, "attributes.tags"),
        ({"attributes": {"s": "\ud800"}}, "attributes.s"),
        ({"attributes": {"": 1}}, "attributes"),
        ({"attributes": {"tags": ["ok", 3]}}, "attributes.tags[1]"),
        ({"access": {"groups": ["a", "b", "c", ""]}}, "access.groups[3]"),
        ({"access": {"users": [f"u{i}" for i in range(1001)]}}, "access.users"),
        ({"access": {"groups": ["g" * 257]}}, "access.groups[0]"),
        ({"access": {"owner": ["x"]}}, "access.owner"),
    ],
)
def test_hostile_fields_are_refused_naming_the_field_and_change_nothing(env, fields, named):
    # Given a stored document with attributes and an access list
    env.catalog.put_collection("t", "c", CollectionInput())
    put(env, "c", "d1", content="text", attributes={"year": 2020}, access={"groups": ["hr"]})
    before = env.adapters.metadata.get_document("t", "c", "d1")
    # When a PUT sends a hostile value, Then it is InvalidInput naming the place
    with pytest.raises(InvalidInput) as refused:
        put(env, "c", "d1", **fields)
    assert refused.value.message.startswith(named + ":") or f"; {named}:" in refused.value.message, (
        refused.value.message
    )
    # And nothing stored changed
    assert env.adapters.metadata.get_document("t", "c", "d1") == before


def test_a_query_sees_only_what_its_access_lists_admit_and_document_access_required_fails_closed(env):
    # Given an optional and a required collection, with documents with and without access lists
    env.catalog.put_collection("t", "open", CollectionInput(query_groups=["staff"]))
    env.catalog.put_collection("t", "strict", CollectionInput(query_groups=["staff"], document_access="required"))
    for name in ("open", "strict"):
        put(env, name, "nolist", content="penguin colony facts")
        put(env, name, "hr", content="penguin colony salaries", access={"groups": ["hr"]})
        put(env, name, "ann", content="penguin colony notes", access={"users": ["ann"], "deny_groups": ["temp"]})
    env.worker.drain()
    for mode in ("keyword", "vector", "hybrid"):
        # Then without access: only a list-less document of the optional collection
        assert found(env, ["open"], query="penguin colony", user="bob", mode=mode) == {"nolist"}
        assert found(env, ["strict"], query="penguin colony", user="bob", mode=mode) == set()
        # A group admits, a user admits, a deny wins
        assert found(env, ["strict"], query="penguin colony", groups=["staff", "hr"], mode=mode) == {"hr"}
        assert found(env, ["strict"], query="penguin colony", user="ann", mode=mode) == {"ann"}
        assert found(env, ["strict"], query="penguin colony", user="ann", groups=["staff", "temp"], mode=mode) == set()
        # And several collections in one query each apply their own document_access
        assert found(env, ["open", "strict"], multi=True, query="penguin colony", user="ann", mode=mode) == {
            "nolist",
            "ann",
        }
    # And the collection field is stored and shown
    assert env.catalog.get_collection("t", "strict").document_access == "required"
    assert env.catalog.get_collection("t", "open").document_access == "optional"


def test_attribute_filters_on_queries_and_their_422s(env):
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    put(env, "c", "eu-new", content="penguin report", attributes={"region": "eu", "year": 2024})
    put(env, "c", "eu-old", content="penguin report", attributes={"region": "eu", "year": 2019})
    put(env, "c", "us", content="penguin report", attributes={"region": "us", "year": 2024, "tags": ["hr"]})
    put(env, "c", "none", content="penguin report")
    env.worker.drain()
    for mode in ("keyword", "vector", "hybrid"):

        def where(expression, mode=mode):
            return found(env, ["c"], query="penguin report", mode=mode, filters={"attributes": expression})

        assert where({"region": "eu", "year": {"$gte": 2020}}) == {"eu-new"}
        assert where({"$or": [{"tags": {"$contains": "hr"}}, {"year": {"$lt": 2020}}]}) == {"us", "eu-old"}
        assert where({"region": {"$ne": "eu"}}) == {"us", "none"}
        assert where({"region": {"$exists": False}}) == {"none"}
    # A bad expression is a 422 naming the place in it
    for expression, place in (
        ({"year": {"$gte": "2020"}}, "filters.attributes.year.$gte"),
        ({"$or": [{"a": 1}, {"b": {"$regex": "x"}}]}, "filters.attributes.$or[1].b.$regex"),
        ({"a": {"b": 1}}, "filters.attributes.a.b"),
        (
            {"$and": [{"$and": [{"$and": [{"$and": [{"x": 1}]}]}]}]},
            "filters.attributes.$and[0].$and[0].$and[0].$and[0]",
        ),
    ):
        with pytest.raises(InvalidInput, match="^" + re.escape(place) + ":"):
            ask(env, ["c"], query="penguin", filters={"attributes": expression})
    with pytest.raises(InvalidInput, match="filters.attributes"):
        ask(env, ["c"], query="penguin", filters={"attributes": {f"k{i}": i for i in range(10_000)}})


def test_a_fields_only_put_rewrites_the_index_without_embedding(env):
    # Given an indexed document
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"], chunking_max_size=60))
    put(env, "c", "d1", content="penguin colony antarctic. " * 20, attributes={"region": "us"})
    env.worker.drain()
    indexed = env.adapters.metadata.get_document("t", "c", "d1")
    assert indexed.status is DocumentStatus.INDEXED and indexed.chunk_count > 3
    chunk_ids = {c.chunk_id for c in env.adapters.chunks.list_chunks("t", "c", "d1")}
    embedded = env.counting["hash:384"].texts
    # When only its attributes, access list, language and mimetype change
    document = put(
        env,
        "c",
        "d1",
        attributes={"region": "eu"},
        access={"groups": ["staff"]},
        language="en",
        mimetype="text/markdown",
    )
    # Then it shows in_progress until the ingest has rewritten its entries; it is still served meanwhile, and the
    # fields it no longer has no longer find it (its record is checked), though its entries still carry them
    assert document.status is DocumentStatus.IN_PROGRESS and document.fields_stale
    assert found(env, ["c"], query="penguin") == {"d1"}
    assert found(env, ["c"], query="penguin", filters={"attributes": {"region": "us"}}) == set()
    env.worker.drain()
    done = env.adapters.metadata.get_document("t", "c", "d1")
    assert done.status is DocumentStatus.INDEXED and not done.fields_stale and done.version == indexed.version
    # And nothing was embedded, the chunks are the same
    assert env.counting["hash:384"].texts == embedded
    assert {c.chunk_id for c in env.adapters.chunks.list_chunks("t", "c", "d1")} == chunk_ids
    # And the index itself now filters on the new fields (every leg)
    vector = env.embeddings.embed_query("hash:384", "penguin")
    eu = SearchFilters(
        attributes=parse_filter({"region": "eu"}), language="en", principals=Principals(groups=("staff",))
    )
    us = SearchFilters(attributes=parse_filter({"region": "us"}), principals=Principals(groups=("staff",)))
    assert len(env.adapters.search_index.knn_search("hash:384", "t", ["c"], vector, 50, eu)) == done.chunk_count
    assert len(env.adapters.search_index.keyword_search("hash:384", "t", ["c"], "penguin", 50, eu)) == done.chunk_count
    assert env.adapters.search_index.knn_search("hash:384", "t", ["c"], vector, 50, us) == []
    assert env.adapters.search_index.keyword_search("hash:384", "t", ["c"], "penguin", 50, us) == []
    # And a PUT of the same values changes nothing (no new version of the fields, nothing to rewrite)
    again = put(env, "c", "d1", attributes={"region": "eu"}, language="en")
    assert again.fields_version == done.fields_version and again.status is DocumentStatus.INDEXED


def test_the_fields_only_puts_of_one_batch_share_its_one_keyword_commit(env, monkeypatch):
    # Given five indexed documents, and the index's writes counted
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"], chunking_max_size=60))
    for n in range(5):
        put(env, "c", f"d{n}", content=f"penguin colony {n}. " * 12, attributes={"region": "us"})
    env.worker.drain()
    index = env.adapters.search_index
    immediate: list[int] = []
    commits: list[list[int]] = []
    upsert, commit_deferred = index.upsert, index.commit_deferred
    monkeypatch.setattr(
        index, "upsert", lambda model, records: immediate.append(len(records)) or upsert(model, records)
    )
    monkeypatch.setattr(
        index, "commit_deferred", lambda writes: commits.append(list(writes)) or commit_deferred(writes)
    )
    embedded = env.counting["hash:384"].texts
    # When each gets new attributes, and the worker takes the five events in one batch
    for n in range(5):
        assert put(env, "c", f"d{n}", attributes={"region": "eu"}).fields_stale
    assert env.worker.run_once() == 5
    # Then their entries were written with one keyword commit for all five, none on its own, nothing embedded
    assert immediate == [] and len(commits) == 1 and len(commits[0]) == 5
    assert env.counting["hash:384"].texts == embedded
    # And each is indexed with its new fields, which the index itself filters on
    for n in range(5):
        done = env.adapters.metadata.get_document("t", "c", f"d{n}")
        assert done.status is DocumentStatus.INDEXED and not done.fields_stale
    eu = SearchFilters(attributes=parse_filter({"region": "eu"}), principals=Principals(groups=("staff",)))
    us = SearchFilters(attributes=parse_filter({"region": "us"}), principals=Principals(groups=("staff",)))
    hits = index.keyword_search("hash:384", "t", ["c"], "penguin", 100, eu)
    assert {h.document_id for h in hits} == {f"d{n}" for n in range(5)}
    assert index.keyword_search("hash:384", "t", ["c"], "penguin", 100, us) == []


def test_a_revocation_takes_effect_before_the_index_is_rewritten(env):
    # Given a document the user may see
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    put(env, "c", "d1", content="penguin colony", access={"users": ["ann"]})
    env.worker.drain()
    assert found(env, ["c"], query="penguin", user="ann") == {"d1"}
    # When the access list changes (the ingest has not run yet: its entries still admit ann)
    put(env, "c", "d1", access={"users": ["bob"]})
    # Then ann sees nothing at once, in every mode, and bob does
    for mode in ("keyword", "vector", "hybrid"):
        assert found(env, ["c"], query="penguin", user="ann", mode=mode) == set()
    # (bob is admitted by the record; the index, still holding ann, finds him once the entries are rewritten)
    env.worker.drain()
    for mode in ("keyword", "vector", "hybrid"):
        assert found(env, ["c"], query="penguin", user="bob", mode=mode) == {"d1"}
        assert found(env, ["c"], query="penguin", user="ann", mode=mode) == set()
    # And a deny added takes effect at once too
    put(env, "c", "d1", access={"users": ["bob"], "deny_users": ["bob"]})
    assert found(env, ["c"], query="penguin", user="bob") == set()


def test_16_concurrent_clients_never_see_a_document_revoked_before_their_query_began(env):
    # Given 40 documents all visible to ann
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    ids = [f"d{i:02d}" for i in range(40)]
    for doc_id in ids:
        put(env, "c", doc_id, content=f"penguin colony report {doc_id}", access={"users": ["ann"]})
    env.worker.drain()
    revoked_at: dict[str, float] = {}
    violations: list[tuple[str, float, float]] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    queries = [0]

    def client(mode: str) -> None:
        try:
            while not stop.is_set():
                began = time.monotonic()
                for result in ask(env, ["c"], query="penguin colony report", user="ann", k=40, mode=mode).results:
                    when = revoked_at.get(result.document_id)
                    if when is not None and when < began:
                        violations.append((result.document_id, when, began))
                queries[0] += 1
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    # When 16 clients query while the access lists are revoked one by one (and the ingest rewrites them)
    threads = [threading.Thread(target=client, args=(("keyword", "vector", "hybrid")[i % 3],)) for i in range(16)]
    for thread in threads:
        thread.start()
    env.worker.start()
    try:
        for doc_id in ids:
            put(env, "c", doc_id, access={"users": ["bob"]})
            revoked_at[doc_id] = time.monotonic()  # the PUT has committed: every query from now on must not see it
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        env.worker.stop()
    # Then no query that began after a revocation returned that document
    assert errors == [] and violations == [] and queries[0] >= 16
    env.worker.drain()
    assert found(env, ["c"], query="penguin colony report", user="ann", k=40) == set()


def test_a_user_who_may_see_1_percent_of_2000_documents_gets_k_results_in_every_mode(env):
    # Given 2,000 documents that all match, of which 20 (1 %) are visible to ann through their access lists
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"], document_access="required"))
    visible = {f"d{i:04d}" for i in range(0, 2000, 100)}
    for i in range(2000):
        doc_id = f"d{i:04d}"
        put(
            env,
            "c",
            doc_id,
            content=f"quarterly penguin census report number {i}",
            access={"users": ["ann"]} if doc_id in visible else {"groups": ["board"]},
            attributes={"shard": i % 100},
        )
    env.worker.drain(timeout=600)
    # Then a k=10 query returns 10 results in every mode, all visible to her, with no warning
    for mode in ("keyword", "vector", "hybrid"):
        response = ask(env, ["c"], query="penguin census report", user="ann", k=10, mode=mode)
        assert len(response.results) == 10 and {r.document_id for r in response.results} <= visible, mode
        assert response.warnings == []
        # And the same through an attribute filter that 1 % of the documents pass
        filtered = ask(
            env,
            ["c"],
            query="penguin census report",
            groups=["staff", "board"],
            k=10,
            mode=mode,
            filters={"attributes": {"shard": 7}},
        )
        assert len(filtered.results) == 10 and all(int(r.document_id[1:]) % 100 == 7 for r in filtered.results)


def test_the_external_rights_check_at_1_percent_returns_k_or_says_it_stopped(env):
    # Given 2,000 documents that all match and an external check that allows 1 % of them
    server = RightsServer()
    try:
        server.secret = env.rights_secrets.rotate("t").encode()
        env.catalog.put_collection(
            "t",
            "ext",
            CollectionInput(
                query_groups=["staff"],
                rights_check_method="external",
                rights_check_method_configuration={"url": server.url, "timeout": 5},
            ),
        )
        for i in range(2000):
            put(env, "ext", f"d{i:04d}", content=f"quarterly penguin census report number {i}")
        env.worker.drain(timeout=600)
        server.mode, server.allowed = "allow", {f"d{i:04d}" for i in range(0, 2000, 100)}
        for mode in ("keyword", "vector", "hybrid"):
            server.requests.clear()
            # When ann asks for 10
            response = ask(env, ["ext"], query="penguin census report", user="ann", k=10, mode=mode)
            # Then she gets 10, all allowed, in a few rounds (one call each), or a warning that it stopped early
            ids = {r.document_id for r in response.results}
            assert ids <= server.allowed
            assert len(response.results) == 10 or [w.code for w in response.warnings] == ["stopped_early"], mode
            assert len(response.results) == 10, (mode, len(response.results), len(server.requests))
            assert len(server.requests) <= 5
    finally:
        server.close()


def test_two_tenants_with_the_same_ids_and_keys_of_different_types_never_meet(env):
    # Given tenants t and u with the same collection and document ids, and "year" a number in t, a string in u
    for tenant in ("t", "u"):
        env.catalog.put_collection(tenant, "c", CollectionInput(query_groups=["staff"]))
    put(env, "c", "d1", tenant="t", content="penguin colony", attributes={"year": 2024}, access={"groups": ["staff"]})
    put(env, "c", "d1", tenant="u", content="penguin colony", attributes={"year": "2024"}, access={"groups": ["other"]})
    env.worker.drain()
    # Then each tenant's filter and access lists act on its own document only
    assert found(env, ["c"], tenant="t", query="penguin", filters={"attributes": {"year": {"$gte": 2020}}}) == {"d1"}
    assert (
        found(
            env,
            ["c"],
            tenant="u",
            query="penguin",
            groups=["staff", "other"],
            filters={"attributes": {"year": {"$gte": 2020}}},
        )
        == set()
    )
    assert found(
        env, ["c"], tenant="u", query="penguin", groups=["staff", "other"], filters={"attributes": {"year": "2024"}}
    ) == {"d1"}
    assert found(env, ["c"], tenant="u", query="penguin", groups=["staff"]) == set()
    assert env.adapters.metadata.get_document("t", "c", "d1").attributes == {"year": 2024}
    assert env.adapters.metadata.get_document("u", "c", "d1").attributes == {"year": "2024"}


# -- sidecars of files dropped into the data directory ---------------------------------------------------------


def drop(env, tenant: str, collection: str, document: str, filename: str, data: bytes) -> Path:
    """A file written straight into the data directory's blob folder, as a user copying files in would."""
    path = Path(env.settings.data_dir) / "blobs" / blob_key(tenant, collection, document, filename)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def notice(env, collection: str = "c") -> None:
    """Local mode notices dropped files in its reindex pass (hourly in `kindex serve`; `kindex reindex` runs one):
    the pass of one collection, as its reindex task runs it."""
    env.reindex_worker.reindex_collection("t", env.adapters.metadata.get_collection("t", collection), clean=False)
    env.worker.drain()


def test_a_sidecar_gives_a_dropped_file_its_attributes_and_access_before_or_after_it(env):
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    # Given a sidecar dropped before its file, in Bedrock's shape (plain and typed values) with an access list
    drop(
        env,
        "t",
        "c",
        "report",
        "report.txt.metadata.json",
        (
            b'{"metadataAttributes": {"region": "eu", "year": {"value": {"type": "NUMBER", "numberValue": 2024}, '
            b'"includeForEmbedding": true}}, "access": {"groups": ["hr"]}}'
        ),
    )
    notice(env)
    assert env.adapters.metadata.get_document("t", "c", "report") is None  # a sidecar is never a document
    drop(env, "t", "c", "report", "report.txt", b"penguin colony census for the board")
    notice(env)
    # Then the document has the sidecar's fields, and queries apply them
    document = env.adapters.metadata.get_document("t", "c", "report")
    assert document.status is DocumentStatus.INDEXED and document.title == "report.txt"
    assert document.attributes == {"region": "eu", "year": 2024} and document.access.groups == ("hr",)
    assert found(env, ["c"], query="penguin census", groups=["staff"]) == set()
    assert found(
        env, ["c"], query="penguin census", groups=["staff", "hr"], filters={"attributes": {"year": 2024}}
    ) == {"report"}
    embedded = env.counting["hash:384"].texts
    # When the sidecar changes after the file was indexed
    drop(
        env,
        "t",
        "c",
        "report",
        "report.txt.metadata.json",
        b'{"metadataAttributes": {"region": "us"}, "access": {"groups": ["staff"]}}',
    )
    notice(env)
    # Then the fields follow, without embedding anything
    document = env.adapters.metadata.get_document("t", "c", "report")
    assert document.attributes == {"region": "us"} and document.access.groups == ("staff",)
    assert document.status is DocumentStatus.INDEXED and not document.fields_stale
    assert env.counting["hash:384"].texts == embedded
    assert found(env, ["c"], query="penguin census", filters={"attributes": {"region": "us"}}) == {"report"}
    # And only one document exists
    assert env.catalog.list_documents("t", "c", PageRequest()).documents[0].id == "report"
    assert len(env.catalog.list_documents("t", "c", PageRequest()).documents) == 1


def test_a_refused_sidecar_fails_its_document_closed_and_a_fixed_one_restores_it(env):
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    drop(env, "t", "c", "memo", "memo.txt", b"penguin colony salaries")
    drop(
        env,
        "t",
        "c",
        "memo",
        "memo.txt.metadata.json",
        b'{"metadataAttributes": {"year": 9223372036854775808}, "access": {"groups": ["hr"]}}',
    )
    notice(env)
    # Then the document is failed, naming the sidecar and the field, and never served
    document = env.adapters.metadata.get_document("t", "c", "memo")
    assert document.status is DocumentStatus.FAILED
    assert "memo.txt.metadata.json" in document.failure_reason and "metadataAttributes.year" in document.failure_reason
    assert found(env, ["c"], query="penguin colony", groups=["staff", "hr"]) == set()
    # When the sidecar is fixed, Then the document is indexed with its fields
    drop(
        env,
        "t",
        "c",
        "memo",
        "memo.txt.metadata.json",
        b'{"metadataAttributes": {"year": 2024}, "access": {"groups": ["hr"]}}',
    )
    notice(env)
    document = env.adapters.metadata.get_document("t", "c", "memo")
    assert document.status is DocumentStatus.INDEXED and document.attributes == {"year": 2024}
    assert found(env, ["c"], query="penguin colony", groups=["staff", "hr"]) == {"memo"}
    assert found(env, ["c"], query="penguin colony", groups=["staff"]) == set()


def test_a_sidecar_written_through_the_blob_store_is_applied_by_its_event(env):
    # Given a dropped file indexed without a sidecar (the blob store notifies, as S3 does)
    env.catalog.put_collection("t", "c", CollectionInput(query_groups=["staff"]))
    key = blob_key("t", "c", "notes", "notes.md")
    env.adapters.blobs.put_blob(key, b"# Penguins\n\npenguin colony notes", "text/markdown")
    env.worker.drain()
    assert env.adapters.metadata.get_document("t", "c", "notes").access is None
    # When its sidecar arrives, Then the access list applies; when it is deleted, it goes again
    env.adapters.blobs.put_blob(key + ".metadata.json", b'{"access": {"users": ["ann"]}}', "application/json")
    env.worker.drain()
    assert env.adapters.metadata.get_document("t", "c", "notes").access.users == ("ann",)
    assert found(env, ["c"], query="penguin colony", user="bob") == set()
    env.adapters.blobs.delete_blob(key + ".metadata.json")
    env.worker.drain()
    assert env.adapters.metadata.get_document("t", "c", "notes").access is None
    assert found(env, ["c"], query="penguin colony", user="bob") == {"notes"}


def test_export_and_import_carry_attributes_and_access_without_embedding(env):
    from kindex.domain.transfer import ImportRequest

    env.catalog.put_collection("t", "src", CollectionInput(query_groups=["staff"]))
    env.catalog.put_collection("t", "dst", CollectionInput(query_groups=["staff"]))
    put(
        env,
        "src",
        "d1",
        content="penguin colony census",
        attributes={"region": "eu", "tags": ["hr"]},
        access={"groups": ["hr"], "deny_users": ["mallory"]},
    )
    env.worker.drain()
    page = env.transfer.export_page("t", "src", None)
    assert page.documents[0].attributes == {"region": "eu", "tags": ["hr"]}
    assert page.documents[0].access.deny_users == ("mallory",)
    embedded = env.counting["hash:384"].texts
    body = ImportRequest.model_validate(
        {
            "format_version": 1,
            "embedding_model": page.embedding_model,
            "dimensions": page.dimensions,
            "documents": [d.model_dump(mode="json") for d in page.documents],
            "chunks": [c.model_dump(mode="json") for c in page.chunks],
        }
    )
    result = env.transfer.import_batch("t", "dst", body)
    assert result.texts_embedded == 0 and env.counting["hash:384"].texts == embedded
    env.worker.drain()
    imported = env.adapters.metadata.get_document("t", "dst", "d1")
    assert imported.attributes == {"region": "eu", "tags": ["hr"]} and imported.access.groups == ("hr",)
    assert found(
        env, ["dst"], query="penguin", groups=["staff", "hr"], filters={"attributes": {"tags": {"$contains": "hr"}}}
    ) == {"d1"}
    assert found(env, ["dst"], query="penguin", user="mallory", groups=["staff", "hr"]) == set()


class SteppingClock:
    """The monotonic clock, moved `step` seconds further at every reading: each over-fetch round then seems to take
    `step` seconds or more, whatever the machine does (the rights check's own real-clock deadlines are unaffected:
    this clock is never behind the real one)."""

    def __init__(self, step: float):
        self.offset, self.step = 0.0, step

    def __call__(self) -> float:
        self.offset += self.step
        return time.monotonic() + self.offset


def test_the_over_fetch_stops_within_the_request_budget_and_says_so(env):
    from kindex.domain import budget

    # Given an external check that allows one document of 60
    server = RightsServer()
    try:
        server.secret = env.rights_secrets.rotate("t").encode()
        env.catalog.put_collection(
            "t",
            "ext",
            CollectionInput(
                query_groups=["staff"],
                rights_check_method="external",
                rights_check_method_configuration={"url": server.url, "timeout": 5},
            ),
        )
        for i in range(60):
            put(env, "ext", f"d{i:02d}", content=f"penguin census report {i}")
        env.worker.drain()
        server.mode, server.allowed = "allow", {"d59"}
        # When the request's budget has room for one round only (each round seems to take 4 s of 10)
        env.query.clock = SteppingClock(2.0)
        with budget.for_request(None, limit_s=10, clock=env.query.clock):
            response = ask(env, ["ext"], query="penguin census report", user="ann", k=5, mode="keyword")
        # Then it stops after that round and says so, naming the collection
        assert len(server.requests) == 1
        assert [(w.collection, w.code) for w in response.warnings] == [("ext", "stopped_early")]
        assert len(response.results) < 5
        # And with time to spare it goes on until every candidate was seen, without the warning
        env.query.clock = time.monotonic
        server.requests.clear()
        response = ask(env, ["ext"], query="penguin census report", user="ann", k=5, mode="keyword")
        assert [r.document_id for r in response.results] == ["d59"] and response.warnings == []
        assert len(server.requests) >= 2
    finally:
        server.close()
