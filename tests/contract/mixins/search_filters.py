"""Contract of the SearchIndex port for attribute filters and access lists (issue 23): every adapter applies
`SearchFilters.attributes` and `.principals` inside both searches (k-NN and keyword; hybrid is the query service's
fusion of the two), before the top k, exactly as `kindex.domain.filters.matches` / `admits` say.

Subclass `SearchFiltersContract` beside `SearchIndexContract` in a `Test*` class that provides `index`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kindex.domain.filters import Access, admits, matches, parse_filter
from kindex.domain.types import IndexRecord, Principals, SearchFilters
from tests.contract.mixins.search_index import MODEL, ids, near, unit

# Documents of one collection: ints and floats, lists, booleans, unicode values (keys are ASCII:
# filters.KEY_PATTERN), missing keys, none at all.
ATTRIBUTES = {
    "d-1": {"year": 2020, "region": "eu", "tags": ["alpha", "beta"], "public": True, "score": 0.5},
    "d-2": {"year": 2021.5, "region": "us", "tags": ["beta"], "public": False},
    "d-3": {"year": -3, "region": "日本", "name": "значение", "tags": []},
    "d-4": None,
    "d-5": {"year": 2020.0, "region": "eu-west", "title": "Ünïcode \U0001f600"},
    "d-6": {"year": "2020", "score": 1},
}
ACCESS = {
    "d-1": Access(users=("alice",)),
    "d-2": Access(groups=("eng", "ops")),
    "d-3": Access(groups=("eng",), deny_users=("alice",)),
    "d-5": Access(users=("bob",), deny_groups=("ops",)),
    "d-6": Access(),  # every list empty: admits nobody
}
FILTERS = [
    {"year": 2020},
    {"year": {"$gte": 2020}},
    {"year": {"$lt": 0}},
    {"year": "2020"},
    {"year": {"$ne": 2020}},
    {"year": {"$in": [2020, -3]}},
    {"year": {"$nin": [2020]}},
    {"score": {"$gt": 0.25, "$lte": 1}},
    {"region": {"$starts_with": "eu"}},
    {"region": "日本"},
    {"name": "значение"},
    {"title": "Ünïcode \U0001f600"},
    {"tags": "beta"},
    {"tags": {"$contains": "alpha"}},
    {"tags": {"$exists": False}},
    {"public": True},
    {"public": {"$ne": True}},
    {"missing": {"$exists": False}},
    {"missing": 1},
    {"$or": [{"region": "us"}, {"year": {"$lt": 0}}]},
    {"region": "eu", "year": {"$gte": 2020}},
]
PRINCIPALS = [
    Principals(),
    Principals(user="alice"),
    Principals(user="alice", groups=("eng",)),
    Principals(user="bob", groups=("ops",)),
    Principals(user="bob"),
    Principals(groups=("eng",)),
    Principals(user="carol", groups=tuple(f"group-{i}" for i in range(999)) + ("ops",)),
    Principals(user="alice", required=True),
    Principals(groups=("eng",), required=True),
]
CHUNKS_PER_DOCUMENT = 2


def chunk(
    document_id: str,
    i: int,
    vector: np.ndarray,
    *,
    tenant: str = "acme",
    text: str = "harbour report",
    attributes=None,
    access: Access | None = None,
) -> IndexRecord:
    return IndexRecord(
        tenant=tenant,
        collection="handbook",
        document_id=document_id,
        chunk_id=f"{document_id}.{i}",
        vector=tuple(float(x) for x in vector),
        text=text,
        language="en",
        mimetype="text/plain",
        attributes=attributes,
        access=access,
    )


def documents(query: np.ndarray, *, tenant: str = "acme", attributes=ATTRIBUTES, access=ACCESS) -> list[IndexRecord]:
    """Each document's chunks, carrying its attributes and access list; plus, nearest to `query`, ten chunks of a
    document that no filter or principal below admits (so a filter applied after the top k would find nothing)."""
    records = [
        chunk(
            document_id,
            i,
            unit(100 + 10 * n + i),
            tenant=tenant,
            attributes=attributes[document_id],
            access=access.get(document_id),
        )
        for n, document_id in enumerate(attributes)
        for i in range(CHUNKS_PER_DOCUMENT)
    ]
    decoys = [
        chunk(
            "decoy",
            i,
            near(query, i, 0.01),
            tenant=tenant,
            attributes={"decoy": True},
            access=Access(users=("nobody",)),
        )
        for i in range(10)
    ]
    return records + decoys


def expected_chunks(document_ids) -> set[str]:
    return {f"{document_id}.{i}" for document_id in document_ids for i in range(CHUNKS_PER_DOCUMENT)}


def both_legs(
    index,
    filters: SearchFilters,
    k: int,
    *,
    tenant: str = "acme",
    query: np.ndarray | None = None,
    words: str = "harbour",
) -> tuple[set[str], set[str]]:
    query = unit(7) if query is None else query
    knn = index.knn_search(MODEL, tenant, ["handbook"], query.tolist(), k, filters)
    keyword = index.keyword_search(MODEL, tenant, ["handbook"], words, k, filters)
    assert len(ids(knn)) == len(set(ids(knn))) and len(ids(keyword)) == len(set(ids(keyword)))
    return set(ids(knn)), set(ids(keyword))


class SearchFiltersContract:
    """Attribute filters and access lists inside the index: every operator, missing keys, types, tenants."""

    @pytest.mark.parametrize("expression", FILTERS, ids=[str(f) for f in FILTERS])
    def test_an_attribute_filter_applies_on_both_legs_before_the_top_k(self, index, expression):
        # Given documents with typed attributes, and ten chunks nearer the query that the filter excludes
        index.upsert(MODEL, documents(unit(7)))
        parsed = parse_filter(expression)
        # (a search that names no principals is one by nobody: only documents without an access list pass it)
        wanted = expected_chunks(
            d
            for d, attributes in ATTRIBUTES.items()
            if matches(parsed, attributes) and admits(ACCESS.get(d), None, (), False)
        )
        # When both legs search with the filter, for as many results as match
        knn, keyword = both_legs(index, SearchFilters(attributes=parsed), len(wanted) + 10)
        # Then each leg returns exactly the matching chunks, as the reference says (decoys only where they pass)
        decoys = (
            {f"decoy.{i}" for i in range(10)}
            if matches(parsed, {"decoy": True}) and admits(Access(users=("nobody",)), None, (), False)
            else set()
        )
        assert knn == wanted | decoys
        assert keyword == wanted | decoys

    @pytest.mark.slow
    @pytest.mark.parametrize("principals", PRINCIPALS, ids=lambda p: f"{p.user}-{len(p.groups)}-{p.required}")
    def test_an_access_list_applies_on_both_legs_before_the_top_k(self, index, principals):
        # Given documents with access lists (and some without), and decoys nearer the query visible to nobody here
        index.upsert(MODEL, documents(unit(7)))
        wanted = expected_chunks(
            d for d in ATTRIBUTES if admits(ACCESS.get(d), principals.user, principals.groups, principals.required)
        )
        # When both legs search on behalf of the principals
        knn, keyword = both_legs(index, SearchFilters(principals=principals), len(wanted) + 10)
        # Then exactly the documents the reference admits come back (deny wins, no groups match no group, a list
        # with nothing in it admits nobody, `required` hides documents without a list)
        assert knn == wanted and keyword == wanted

    def test_a_filter_and_an_access_list_combine(self, index):
        # Given the documents
        index.upsert(MODEL, documents(unit(7)))
        # When a user of group eng filters on a region
        filters = SearchFilters(
            attributes=parse_filter({"region": {"$in": ["us", "日本", "eu"]}}),
            principals=Principals(user="dave", groups=("eng",)),
        )
        knn, keyword = both_legs(index, filters, 20)
        # Then only what both admit: d-2 (us, eng) and d-3 (日本, eng); d-1 is alice's, d-4 has no region
        assert knn == keyword == expected_chunks(["d-2", "d-3"])

    def test_two_tenants_with_the_same_ids_and_keys_of_other_types_never_mix(self, index):
        # Given two tenants whose documents have the same ids, where one tenant's `year` is a number and the other's
        # a string, and whose access lists name the same users differently
        index.upsert(
            MODEL,
            documents(
                unit(7),
                tenant="acme",
                attributes={d: {"year": 2020} for d in ATTRIBUTES},
                access={d: Access(users=("alice",)) for d in ATTRIBUTES},
            ),
        )
        index.upsert(
            MODEL,
            documents(
                unit(7),
                tenant="globex",
                attributes={d: {"year": "2020"} for d in ATTRIBUTES},
                access={d: Access(users=("bob",)) for d in ATTRIBUTES},
            ),
        )
        everything = expected_chunks(ATTRIBUTES)
        # When each tenant searches with a number, a string, and for each user
        # Then a tenant's filter sees its own types only, and its own access lists only
        for tenant, number, string, user, stranger in (
            ("acme", everything, set(), "alice", "bob"),
            ("globex", set(), everything, "bob", "alice"),
        ):
            seen_by = Principals(user=user)
            assert both_legs(
                index, SearchFilters(attributes=parse_filter({"year": 2020}), principals=seen_by), 40, tenant=tenant
            ) == (number, number)
            assert both_legs(
                index,
                SearchFilters(attributes=parse_filter({"year": {"$gte": 2000}}), principals=seen_by),
                40,
                tenant=tenant,
            ) == (number, number)
            assert both_legs(
                index, SearchFilters(attributes=parse_filter({"year": "2020"}), principals=seen_by), 40, tenant=tenant
            ) == (string, string)
            assert both_legs(index, SearchFilters(principals=Principals(user=user)), 40, tenant=tenant) == (
                everything,
                everything,
            )
            assert both_legs(index, SearchFilters(principals=Principals(user=stranger)), 40, tenant=tenant) == (
                set(),
                set(),
            )

    @pytest.mark.slow
    def test_a_user_in_a_thousand_groups_is_one_set_membership(self, index):
        # Given documents each visible to one of a thousand groups
        index.upsert(MODEL, [chunk(f"g{i}", 0, unit(i), access=Access(groups=(f"group-{i}",))) for i in range(40)])
        # When a user in 1,000 groups (of which 3 grant access) searches
        groups = tuple(f"other-{i}" for i in range(997)) + ("group-3", "group-17", "group-39")
        knn, keyword = both_legs(index, SearchFilters(principals=Principals(user="u", groups=groups)), 10)
        # Then exactly those three documents come back, on both legs
        assert knn == keyword == {"g3.0", "g17.0", "g39.0"}

    @pytest.mark.slow
    @pytest.mark.parametrize("share, k", [(0.01, 10), (0.001, 5)])
    def test_a_user_who_may_see_a_small_share_still_gets_k_results(self, index, share, k):
        # Given 5,000 chunks (one a document) with a bucket attribute and a group, all holding the query word
        total = 5_000
        stride = round(1 / share)
        index.upsert(
            MODEL,
            [
                chunk(
                    f"c{i}",
                    0,
                    unit(10_000 + i),
                    text="ledger entry",
                    attributes={"bucket": i % stride},
                    access=Access(groups=(f"g{i % stride}",)),
                )
                for i in range(total)
            ],
        )
        visible = {f"c{i}.0" for i in range(total) if i % stride == 3}
        assert len(visible) == total * share >= k
        # When a user who may see `share` of them searches, by access list and by attribute filter
        for filters in (
            SearchFilters(principals=Principals(user="u", groups=("g3",))),
            SearchFilters(attributes=parse_filter({"bucket": 3}), principals=Principals(user="u", groups=("g3", "g4"))),
            SearchFilters(
                attributes=parse_filter({"bucket": {"$gte": 2.5, "$lt": 3.5}}), principals=Principals(groups=("g3",))
            ),
        ):
            knn, keyword = both_legs(index, filters, k, words="ledger")
            # Then k results come back on both legs, all of them visible ones, in one call
            assert len(knn) == k and knn <= visible
            assert len(keyword) == k and keyword <= visible
        # And the vector leg's k are the nearest visible chunks (exact), not any k
        query = unit(7)
        scores = {f"c{i}.0": float(unit(10_000 + i) @ query) for i in range(total) if i % stride == 3}
        best = set(sorted(scores, key=lambda c: -scores[c])[:k])
        hits = index.knn_search(
            MODEL, "acme", ["handbook"], query.tolist(), k, SearchFilters(principals=Principals(groups=("g3",)))
        )
        assert set(ids(hits)) == best

    def test_rewriting_a_documents_chunks_changes_its_attributes_and_access_on_both_legs(self, index):
        # Given a document visible to group eng, with region eu
        first = [
            chunk("doc", i, unit(i), attributes={"region": "eu"}, access=Access(groups=("eng",))) for i in range(3)
        ]
        index.upsert(MODEL, first)
        eng, ops = Principals(groups=("eng",)), Principals(groups=("ops",))
        everything = {"doc.0", "doc.1", "doc.2"}
        assert both_legs(index, SearchFilters(principals=eng), 5) == (everything, everything)
        # When its chunks are written again, same ids and vectors, with another region and only ops
        index.upsert(
            MODEL, [replace(record, attributes={"region": "us"}, access=Access(groups=("ops",))) for record in first]
        )
        # Then eng sees none of them and ops all, the old region matches nothing and the new one all
        assert both_legs(index, SearchFilters(principals=eng), 5) == (set(), set())
        assert both_legs(index, SearchFilters(principals=ops), 5) == (everything, everything)
        assert both_legs(index, SearchFilters(attributes=parse_filter({"region": "eu"}), principals=ops), 5) == (
            set(),
            set(),
        )
        assert both_legs(index, SearchFilters(attributes=parse_filter({"region": "us"}), principals=ops), 5) == (
            everything,
            everything,
        )
        # And written once more without attributes or access list, it has neither (no stale terms left)
        index.upsert(MODEL, [replace(record, attributes=None, access=None) for record in first])
        assert both_legs(
            index, SearchFilters(attributes=parse_filter({"region": {"$exists": True}}), principals=ops), 5
        ) == (set(), set())
        assert both_legs(index, SearchFilters(principals=eng), 5) == (everything, everything)
        assert both_legs(index, SearchFilters(principals=Principals(groups=("eng",), required=True)), 5) == (
            set(),
            set(),
        )
        assert len(index.chunk_ids(MODEL, "acme", "handbook")) == 3

    def test_a_deleted_document_is_gone_from_filtered_searches_and_a_new_one_of_its_id_starts_clean(self, index):
        # Given two documents visible to eng with a tag
        index.upsert(
            MODEL,
            [
                chunk(d, i, unit(10 * n + i), attributes={"tag": "x"}, access=Access(groups=("eng",)))
                for n, d in enumerate(("keep", "gone"))
                for i in range(2)
            ],
        )
        filters = SearchFilters(attributes=parse_filter({"tag": "x"}), principals=Principals(groups=("eng",)))
        # When one is deleted
        index.delete(MODEL, "acme", "handbook", document_ids=["gone"])
        # Then filtered searches find only the other
        assert both_legs(index, filters, 10) == ({"keep.0", "keep.1"}, {"keep.0", "keep.1"})
        # And a new document of the deleted id, without attributes, does not inherit the old ones
        index.upsert(MODEL, [chunk("gone", 0, unit(50))])
        assert both_legs(index, filters, 10) == ({"keep.0", "keep.1"}, {"keep.0", "keep.1"})
        assert both_legs(index, SearchFilters(principals=Principals(groups=("eng",))), 10) == (
            {"keep.0", "keep.1", "gone.0"},
            {"keep.0", "keep.1", "gone.0"},
        )

    def test_chunks_written_without_attributes_or_access_behave_as_having_none(self, index):
        # Given chunks written as before attributes existed
        index.upsert(MODEL, [chunk("old", i, unit(i)) for i in range(3)])
        everything = {"old.0", "old.1", "old.2"}
        # Then $exists: false, $ne and $nin match them, every other operator does not; they are visible unless the
        # collection requires an access list
        for expression, found in (
            ({"year": {"$exists": False}}, everything),
            ({"year": {"$ne": 1}}, everything),
            ({"year": {"$nin": [1]}}, everything),
            ({"year": 1}, set()),
            ({"year": {"$gte": 0}}, set()),
            ({"tags": {"$contains": "x"}}, set()),
        ):
            assert both_legs(index, SearchFilters(attributes=parse_filter(expression)), 5) == (found, found)
        assert both_legs(index, SearchFilters(principals=Principals(user="anyone")), 5) == (everything, everything)
        assert both_legs(index, SearchFilters(principals=Principals(user="anyone", required=True)), 5) == (set(), set())
