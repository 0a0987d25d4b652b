"""Attribute filters and access lists through the OpenSearch adapter (`OpenSearchIndex`), on the double and on the
real node: what is indexed with each chunk (`IndexRecord.attributes/access`) and what every search applies
(`SearchFilters.attributes/principals`), on both legs - the k-NN query's efficient filter and the keyword query's
bool filter must return the same chunks, exactly those `kindex.domain.filters.matches` / `admits` pick.

Beside the filter table of tests/contract/test_filter_engines.py (every operator, missing keys, lists, ints and
floats, unicode, two tenants whose keys have different types) run through the adapter: selective filters that still
return k, a thousand groups, the mapping of an index from before attributes existed, rewriting a chunk whole, and -
on the node - that a partial `_update` loses the vector and the text (why the adapter never sends one).
(When tests/contract/mixins/search_filters.py lands, its SearchFiltersContract belongs on these classes too.)
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

from kindex.adapters.aws.opensearch_filters import (
    ACCESS_FIELDS,
    HAS_ACCESS,
    build_document_filters,
    index_fields,
    mapping_properties,
)
from kindex.adapters.aws.opensearch_index import OpenSearchIndex, opensearch_client
from kindex.adapters.aws.opensearch_requests import (
    build_index_body,
    concrete_index,
    document_id,
    index_alias,
    routing_key,
)
from kindex.adapters.filter_terms import ATTRIBUTE_FIELDS
from kindex.domain.filters import Access, parse_filter
from kindex.domain.types import IndexRecord, Principals, SearchFilters
from tests.contract.test_filter_engines import ACCESS, DOCUMENTS, FILTERS, PRINCIPALS, reference, reference_access
from tests.support.opensearch_double import OpenSearchDouble
from tests.support.opensearch_node import ENGINE as NODE_ENGINE

pytestmark = pytest.mark.contract

MODEL = "local:filters"
DIMS = 16
COLLECTION = "handbook"
WORDS = "common words"
FILTER_FIELDS = (*ATTRIBUTE_FIELDS, *ACCESS_FIELDS, HAS_ACCESS)


def unit(seed: int) -> list[float]:
    vector = np.random.RandomState(seed).normal(size=DIMS)
    return (vector / np.linalg.norm(vector)).tolist()


QUERY = unit(10_000)


def chunk(
    chunk_id: str, *, tenant: str = "a", attributes=None, access=None, vector=None, document=None, text: str = WORDS
) -> IndexRecord:
    return IndexRecord(
        tenant=tenant,
        collection=COLLECTION,
        document_id=document or chunk_id,
        chunk_id=chunk_id,
        vector=vector or unit(zlib.crc32(chunk_id.encode()) % 10_000),
        text=text,
        language="en",
        mimetype="text/plain",
        attributes=attributes,
        access=access,
    )


def both_legs(
    index: OpenSearchIndex, tenant: str, filters: SearchFilters | None, k: int = 100, query: str = "common"
) -> set[str]:
    """The chunk ids the k-NN and the keyword leg return for one search; the legs must agree."""
    knn = {hit.chunk_id for hit in index.knn_search(MODEL, tenant, [COLLECTION], QUERY, k, filters)}
    keyword = {hit.chunk_id for hit in index.keyword_search(MODEL, tenant, [COLLECTION], query, k, filters)}
    assert knn == keyword, f"the legs disagree: k-NN only {knn - keyword}, keyword only {keyword - knn}"
    return knn


def legs_apart(index: OpenSearchIndex, tenant: str, filters: SearchFilters | None, k: int) -> tuple[list, list]:
    return (
        index.knn_search(MODEL, tenant, [COLLECTION], QUERY, k, filters),
        index.keyword_search(MODEL, tenant, [COLLECTION], "common", k, filters),
    )


def table_records() -> list[IndexRecord]:
    return [
        chunk(chunk_id, tenant=tenant, attributes=attributes, access=ACCESS.get(chunk_id))
        for chunk_id, (tenant, attributes) in DOCUMENTS.items()
    ]


class OpenSearchFilters:
    """Subclasses provide `fresh`, a factory of adapters over the engine under test: `fresh()` one with indices of
    its own, `fresh(same_as=other)` another process's adapter on `other`'s indices; and `raw_client`, an
    opensearch-py client of that engine."""

    @pytest.fixture(scope="class")
    @classmethod
    def table(cls, fresh) -> OpenSearchIndex:
        index = fresh()
        index.upsert(MODEL, table_records())
        return index

    # -- the table --------------------------------------------------------------------------------------------------

    @pytest.mark.slow
    @pytest.mark.parametrize("raw", FILTERS, ids=[str(f) for f in FILTERS])
    def test_every_filter_returns_what_the_reference_says_on_both_legs(self, table, raw):
        # Given two tenants' chunks with attributes and access lists, and one filter
        expression = parse_filter(raw)
        for tenant, (user, groups) in itertools.product(("a", "b"), ((None, ()), ("alice", ("g1", "g2")))):
            # When both legs search with the filter, on behalf of nobody and of alice in g1 and g2
            found = both_legs(table, tenant, SearchFilters(attributes=expression, principals=Principals(user, groups)))
            # Then they return exactly what the reference admits and matches
            assert found == reference(tenant, expression) & reference_access(tenant, user, groups, False), (
                tenant,
                user,
                raw,
            )

    @pytest.mark.slow
    @pytest.mark.parametrize(("user", "groups"), PRINCIPALS, ids=[f"{u}-{len(g)}" for u, g in PRINCIPALS])
    def test_access_lists_admit_exactly_whom_the_reference_admits_on_both_legs(self, table, user, groups):
        for tenant, required in itertools.product(("a", "b"), (False, True)):
            found = both_legs(table, tenant, SearchFilters(principals=Principals(user, tuple(groups), required)))
            assert found == reference_access(tenant, user, groups, required), (tenant, user, required)

    def test_no_principals_at_all_see_only_documents_without_a_list(self, table):
        # Given filters that name no principals, and no filters at all
        for filters in (None, SearchFilters(), SearchFilters(language="en")):
            # Then documents with an access list stay hidden (an absent principal is never "no filter")
            assert both_legs(table, "a", filters) == reference_access("a", None, [], False) == {"a4", "a7"}

    def test_the_old_filters_still_narrow_beside_the_new_ones(self, table):
        filters = SearchFilters(
            document_ids=("a1", "a2", "a4"),
            language="en",
            attributes=parse_filter({"year": {"$gte": 2020}}),
            principals=Principals("alice", ("g1",)),
        )
        assert both_legs(table, "a", filters) == {"a1", "a2"}
        assert both_legs(table, "a", SearchFilters(language="de", principals=Principals("alice", ("g1",)))) == set()

    # -- tenants, principals, concurrency -----------------------------------------------------------------------------

    @pytest.mark.slow
    def test_two_tenants_with_the_same_ids_and_the_same_keys_of_different_types_never_meet(self, fresh):
        # Given two tenants with the very same collection, document and chunk ids, principals and keys - `year` a
        # number for one, a string for the other, `tags` a list for one and a string for the other
        index = fresh()
        index.upsert(
            MODEL,
            [
                chunk(
                    f"c{i}",
                    tenant="acme",
                    document="d",
                    vector=unit(i),
                    attributes={"year": 2020 + i, "tags": ["x"]},
                    access=Access(groups=("staff",)),
                )
                for i in range(3)
            ],
        )
        index.upsert(
            MODEL,
            [
                chunk(
                    f"c{i}",
                    tenant="globex",
                    document="d",
                    vector=unit(i),
                    attributes={"year": str(2020 + i), "tags": "x"},
                    access=Access(groups=("staff",)),
                )
                for i in range(3)
            ],
        )
        staff = Principals("u", ("staff",))

        def found(tenant, raw):
            return both_legs(index, tenant, SearchFilters(attributes=parse_filter(raw), principals=staff))

        # Then each tenant's filter reads its own types only
        assert found("acme", {"year": {"$gte": 2021}}) == {"c1", "c2"}
        assert found("globex", {"year": {"$gte": 2021}}) == set()
        assert found("globex", {"year": "2021"}) == {"c1"}
        assert found("acme", {"year": "2021"}) == set()
        assert found("acme", {"tags": {"$contains": "x"}}) == {"c0", "c1", "c2"}
        assert found("globex", {"tags": {"$contains": "x"}}) == set()
        assert found("globex", {"tags": "x"}) == {"c0", "c1", "c2"}
        # And the same group name admits each tenant's own chunks only (the hits carry no tenant: the filter does)
        hits = index.knn_search(MODEL, "acme", [COLLECTION], QUERY, 10, SearchFilters(principals=staff))
        assert len(hits) == 3

    @pytest.mark.slow
    def test_a_user_in_a_thousand_groups_is_admitted_by_the_last_one_and_denied_by_it_too(self, fresh):
        # Given a document listed for group g999 only, one that denies g999, and a user in 1,000 groups
        index = fresh()
        index.upsert(
            MODEL,
            [
                chunk("listed", access=Access(groups=("g999",))),
                chunk("denied", access=Access(users=("u",), deny_groups=("g999",))),
                chunk("other", access=Access(groups=("g1000",))),
            ],
        )
        groups = tuple(f"g{i}" for i in range(1000))
        # When they search / Then the last of their groups admits the first and denies the second, on both legs
        assert both_legs(index, "a", SearchFilters(principals=Principals("u", groups))) == {"listed"}
        assert both_legs(index, "a", SearchFilters(principals=Principals("u", groups[:999]))) == {"denied"}

    def test_unicode_principals_attributes_and_an_empty_string_value_are_exact(self, fresh):
        index = fresh()
        index.upsert(
            MODEL,
            [
                chunk(
                    "u1",
                    attributes={"title": "Zoë 🙂", "team": ""},
                    access=Access(users=("Zoë 🙂",), groups=("グループ",)),
                ),
                chunk("u2", attributes={"title": "Zoe", "team": "x"}, access=Access(users=("Zoe",))),
            ],
        )

        def found(user, groups, raw=None):
            return both_legs(
                index,
                "a",
                SearchFilters(attributes=parse_filter(raw) if raw else None, principals=Principals(user, groups)),
            )

        assert found("Zoë 🙂", ()) == {"u1"}
        assert found("Zoe", ()) == {"u2"}
        assert found(None, ("グループ",)) == {"u1"}
        assert found(None, ("グルー",)) == set()
        assert found("Zoe", ("グループ",), {"title": {"$starts_with": "Zo"}}) == {"u1", "u2"}
        assert found("Zoe", ("グループ",), {"title": {"$starts_with": "Zoë"}}) == {"u1"}
        assert found("Zoe", ("グループ",), {"team": ""}) == {"u1"}

    @pytest.mark.slow
    def test_sixteen_concurrent_users_each_get_their_own_documents_only(self, fresh):
        # Given 16 users, each listed on the 5 documents of their own among 80, in one tenant
        index = fresh()
        index.upsert(
            MODEL,
            [
                chunk(f"c{i}", vector=unit(i), access=Access(users=(f"user-{i % 16}",)), attributes={"owner": i % 16})
                for i in range(80)
            ],
        )
        own = {user: {f"c{i}" for i in range(80) if i % 16 == user} for user in range(16)}

        def client(user: int) -> list[set[str]]:
            filters = SearchFilters(principals=Principals(f"user-{user}"))
            return [both_legs(index, "a", filters, k=10) for _ in range(3)]

        # When the 16 search at once, three times each
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(client, range(16)))
        # Then each always got exactly their own five documents, never another user's
        for user, rounds in enumerate(answers):
            assert all(found == own[user] for found in rounds), user

    # -- selectivity ----------------------------------------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def crowd(cls, fresh) -> OpenSearchIndex:
        """10,000 chunks of one tenant, chunk i in bucket i % 1000 (an attribute) and listed for group g<bucket>, so
        bucket < 10 and groups g0..g9 keep 1 % (100 chunks), bucket < 1 and g0 keep 0.1 % (10 chunks); plus the
        same vectors in another tenant, without lists and in bucket 0, that no query may return."""
        index = fresh()
        records = [
            chunk(f"c{i}", vector=unit(i), attributes={"bucket": i % 1000}, access=Access(groups=(f"g{i % 1000}",)))
            for i in range(10_000)
        ]
        index.upsert(MODEL, records)
        index.upsert(
            MODEL,
            [chunk(f"o{i}", tenant="other", vector=unit(i), attributes={"bucket": 0}) for i in range(0, 10_000, 7)],
        )
        return index

    @pytest.mark.slow
    @pytest.mark.parametrize(("buckets", "expected"), [(10, 100), (1, 10)], ids=["1%", "0.1%"])
    def test_a_user_who_may_see_little_still_gets_k_results_on_both_legs(self, crowd, buckets, expected):
        k = 10
        allowed = {f"c{i}" for i in range(10_000) if i % 1000 < buckets}
        assert len(allowed) == expected
        for filters in (
            SearchFilters(principals=Principals("u", tuple(f"g{b}" for b in range(buckets)))),
            SearchFilters(
                attributes=parse_filter({"bucket": {"$lt": buckets}}),
                principals=Principals("u", tuple(f"g{b}" for b in range(1000))),
            ),
        ):
            # When the user searches for k=10 on each leg
            knn, keyword = legs_apart(crowd, "a", filters, k)
            # Then each leg returns k results, every one of them allowed, none another tenant's
            for leg, hits in (("knn", knn), ("keyword", keyword)):
                assert len(hits) == k, (leg, filters)
                assert {hit.chunk_id for hit in hits} <= allowed, leg
            # And the k-NN leg found the true nearest among the allowed chunks (the filter ran inside the search,
            # exactly, rather than after an approximate top-k)
            vectors = {chunk_id: np.array(unit(int(chunk_id[1:]))) for chunk_id in allowed}
            truth = sorted(allowed, key=lambda chunk_id: -float(vectors[chunk_id] @ np.array(QUERY)))[:k]
            assert [hit.chunk_id for hit in knn] == truth

    # -- rewriting and migrating -----------------------------------------------------------------------------------

    def test_rewriting_a_chunk_whole_with_new_attributes_and_access_keeps_both_legs_right(self, fresh):
        # Given a chunk listed for g1 with year 2020, and its neighbour
        index = fresh()
        first = chunk("c1", vector=unit(1), attributes={"year": 2020, "tags": ["a"]}, access=Access(groups=("g1",)))
        index.upsert(MODEL, [first, chunk("c2", vector=unit(2), access=Access(groups=("g1", "g2")))])
        g1 = SearchFilters(principals=Principals("u", ("g1",)))
        before = index.knn_search(MODEL, "a", [COLLECTION], QUERY, 5, g1)
        # When it is written again whole - same vector and text - listed for g2, with other attributes
        index.upsert(MODEL, [replace(first, attributes={"year": 2021}, access=Access(groups=("g2",)))])

        def found(groups, raw=None):
            return both_legs(
                index,
                "a",
                SearchFilters(attributes=parse_filter(raw) if raw else None, principals=Principals("u", groups)),
            )

        # Then g1 no longer sees it and g2 does, on both legs; the old attributes are gone, the new ones there
        assert found(("g1",)) == {"c2"}
        assert found(("g2",)) == {"c1", "c2"}
        assert found(("g2",), {"year": 2020}) == set()
        assert found(("g2",), {"tags": {"$exists": True}}) == set()
        assert found(("g2",), {"year": 2021}) == {"c1"}
        # And its k-NN score is what it was: the vector came back with it
        after = index.knn_search(MODEL, "a", [COLLECTION], QUERY, 5, SearchFilters(principals=Principals("u", ("g2",))))
        score = {hit.chunk_id: hit.score for hit in before}["c1"]
        assert {hit.chunk_id: hit.score for hit in after}["c1"] == pytest.approx(score, abs=1e-6)

    def test_an_index_from_before_gets_the_fields_once_and_its_chunks_read_as_no_attributes_no_list(
        self, fresh, raw_client
    ):
        # Given an index laid out as before this change (no filter fields in its strict mapping), holding a chunk
        writer = fresh()
        alias = index_alias(writer.index_prefix, MODEL, DIMS)
        old_body = build_index_body(DIMS, alias=alias, design=writer.design)
        for field in FILTER_FIELDS:
            del old_body["mappings"]["properties"][field]
        raw_client.indices.create(index=concrete_index(alias), body=old_body)
        old = chunk("old", vector=unit(1))
        raw_client.index(
            index=alias,
            id=document_id("a", COLLECTION, "old"),
            routing=routing_key("a"),
            refresh=True,
            body={
                "tenant": "a",
                "collection": COLLECTION,
                "document_id": "old",
                "chunk_id": "old",
                "language": "en",
                "mimetype": "text/plain",
                "text": old.text,
                "vector": old.vector,
            },
        )
        # When a reader searches it before any writer touched it
        reader = fresh(same_as=writer)
        filters = SearchFilters(attributes=parse_filter({"year": {"$exists": False}}), principals=Principals("u"))
        # Then the old chunk reads as "no attributes, no access list", on both legs, and nothing fails
        assert both_legs(reader, "a", filters) == {"old"}
        assert both_legs(reader, "a", SearchFilters(principals=Principals("u", required=True))) == set()
        assert both_legs(reader, "a", SearchFilters(attributes=parse_filter({"year": 1}))) == set()
        # When a writer (a new process) writes a chunk with attributes and a list into it
        writer.upsert(MODEL, [chunk("new", vector=unit(2), attributes={"year": 2020}, access=Access(users=("u",)))])
        writer.upsert(MODEL, [chunk("newer", vector=unit(3), attributes={"year": 2021})])
        # Then the index has the fields now, and both chunks answer as the reference says
        mapping = raw_client.indices.get_mapping(index=alias)[concrete_index(alias)]["mappings"]["properties"]
        assert {field: mapping[field] for field in FILTER_FIELDS} == mapping_properties()
        assert both_legs(reader, "a", SearchFilters(principals=Principals("u"))) == {"old", "new", "newer"}
        assert both_legs(reader, "a", SearchFilters(principals=Principals("u", required=True))) == {"new"}
        assert both_legs(reader, "a", SearchFilters(principals=Principals("v"))) == {"old", "newer"}
        assert both_legs(
            reader, "a", SearchFilters(attributes=parse_filter({"year": {"$ne": 2020}}), principals=Principals("u"))
        ) == {"old", "newer"}
        assert both_legs(
            reader, "a", SearchFilters(attributes=parse_filter({"year": {"$gte": 2020}}), principals=Principals("u"))
        ) == {"new", "newer"}


def _put_mappings(double: OpenSearchDouble) -> list:
    return [request for request in double.requests if request.method == "PUT" and request.path.endswith("/_mapping")]


class TestFiltersOnTheDouble(OpenSearchFilters):
    @pytest.fixture(scope="class")
    @classmethod
    def double(cls) -> Iterator[OpenSearchDouble]:
        double = OpenSearchDouble()
        yield double
        # A request the spec rejects must fail the tests even if the adapter had swallowed the error.
        assert double.spec_violations == []

    @pytest.fixture(scope="class")
    @classmethod
    def fresh(cls, double):
        prefixes = itertools.count()

        def adapter(same_as: OpenSearchIndex | None = None) -> OpenSearchIndex:
            prefix = same_as.index_prefix if same_as is not None else f"kx{next(prefixes)}"
            return OpenSearchIndex(double.client(), index_prefix=prefix, number_of_replicas=0)

        return adapter

    @pytest.fixture
    def raw_client(self, double):
        return double.client()

    def test_the_mapping_is_brought_up_to_date_once_per_process_and_never_on_an_index_it_created(self):
        # Given a process that creates its index, and another that meets it
        double = OpenSearchDouble()
        creator = OpenSearchIndex(double.client(), number_of_replicas=0)
        creator.upsert(MODEL, [chunk("c1")])
        creator.upsert(MODEL, [chunk("c2")])
        assert _put_mappings(double) == []
        later = OpenSearchIndex(double.client(), number_of_replicas=0)
        # When the second writes three times
        for name in ("c3", "c4", "c5"):
            later.upsert(MODEL, [chunk(name)])
        # Then it sent one mapping update, to the alias, before its first bulk; its searches sent none
        later.knn_search(MODEL, "a", [COLLECTION], QUERY, 3)
        (update,) = _put_mappings(double)
        assert update.path == f"/{index_alias('kindex', MODEL, DIMS)}/_mapping"
        assert update.body == {"properties": mapping_properties()}
        assert double.requests.index(update) < double.requests.index(double.requests_to("_bulk")[2])
        assert double.spec_violations == []

    def test_the_double_refuses_a_mapping_update_that_changes_a_type(self):
        # (OpenSearch does: a mapped field's type cannot change; the adapter must never depend on it.)
        double = OpenSearchDouble()
        client = double.client()
        client.indices.create(index="x", body={"mappings": {"properties": {"access_set": {"type": "keyword"}}}})
        with pytest.raises(Exception, match="cannot be changed"):
            client.indices.put_mapping(index="x", body={"properties": mapping_properties()})


class TestFiltersOnANode(OpenSearchFilters):
    """The real node (every test here is skipped, with the reason, when none is up)."""

    @pytest.fixture(scope="class")
    @classmethod
    def fresh(cls, opensearch_node) -> Iterator:
        client = opensearch_client(opensearch_node.url, sigv4=False)
        prefix = opensearch_node.new_prefix()
        counter = itertools.count()

        def adapter(same_as: OpenSearchIndex | None = None) -> OpenSearchIndex:
            name = same_as.index_prefix if same_as is not None else f"{prefix}-{next(counter)}"
            return OpenSearchIndex(client, index_prefix=name, engine=NODE_ENGINE, number_of_replicas=0)

        yield adapter
        opensearch_node.delete_indices(prefix)

    @pytest.fixture
    def raw_client(self, opensearch_node):
        return opensearch_client(opensearch_node.url, sigv4=False)

    def test_a_partial_update_loses_the_vector_and_the_text_so_the_adapter_never_sends_one(self, fresh, raw_client):
        # Given a chunk written through the adapter (vector and text kept out of _source, as designed)
        index = fresh()
        record = chunk("c1", vector=unit(1), access=Access(groups=("g1",)))
        index.upsert(MODEL, [record])
        alias = index_alias(index.index_prefix, MODEL, DIMS)
        g1, g2 = SearchFilters(principals=Principals("u", ("g1",))), SearchFilters(principals=Principals("u", ("g2",)))
        assert both_legs(index, "a", g1) == {"c1"}
        # When only its access list is changed by a partial update, as `_update` / `_update_by_query` would do it
        raw_client.update(
            index=alias,
            id=document_id("a", COLLECTION, "c1"),
            routing=routing_key("a"),
            refresh=True,
            body={"doc": index_fields(None, Access(groups=("g2",)))},
        )
        # Then the filter fields changed (a plain filtered search finds it for g2) ...
        where = {"query": {"bool": {"filter": [{"term": {"tenant": "a"}}, {"terms": {"access_groups": ["g2"]}}]}}}
        assert raw_client.search(index=alias, body=where)["hits"]["total"]["value"] == 1
        # ... but the chunk fell out of both the k-NN and the BM25 index: neither leg finds it for anyone
        assert legs_apart(index, "a", g2, 5) == ([], [])
        assert legs_apart(index, "a", g1, 5) == ([], [])
        # And written again whole (vector and text from the caller, as the re-upsert from the embedding cache does)
        # it is back on both legs
        index.upsert(MODEL, [replace(record, access=Access(groups=("g2",)))])
        assert both_legs(index, "a", g2) == {"c1"}
        assert both_legs(index, "a", g1) == set()

    def test_a_search_meets_no_error_on_fields_an_index_does_not_map(self, opensearch_node, raw_client):
        # Given a bare index with none of the filter fields (not even the vector's neighbours)
        prefix = opensearch_node.new_prefix()
        try:
            raw_client.indices.create(
                index=f"{prefix}-bare",
                body={
                    "settings": {"number_of_replicas": 0},
                    "mappings": {"properties": {"tenant": {"type": "keyword"}}},
                },
            )
            raw_client.index(index=f"{prefix}-bare", id="1", body={"tenant": "a"}, refresh=True)
            for raw in (
                {"year": {"$gt": 1}},
                {"t": {"$starts_with": "x"}},
                {"t": {"$nin": ["x"]}},
                {"tags": {"$contains": "x"}},
                {"b": True},
            ):
                clauses = build_document_filters(parse_filter(raw), "u", ["g"], required=False)
                body = {"query": {"bool": {"filter": [{"term": {"tenant": "a"}}, *clauses]}}}
                total = raw_client.search(index=f"{prefix}-bare", body=body)["hits"]["total"]["value"]
                # Then each filter answers as for a document without attributes and without a list
                assert total == (1 if "$nin" in str(raw) else 0), raw
        finally:
            opensearch_node.delete_indices(prefix)
