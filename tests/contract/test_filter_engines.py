"""Every engine answers an attribute filter and an access check exactly as the reference does
(`kindex.domain.filters.matches` / `admits`): the real OpenSearch node (both legs, the k-NN query's efficient
filter and the keyword query's bool filter), tantivy, and the embedded vector half's document table.

One table of documents - two tenants that use the same keys with different types, values that look like the term
encoding's separator, unicode, -0.0, 2^53 - 1, no attributes at all - and one table of filters; each engine must
return, per tenant, exactly the ids the reference picks."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import requests
import tantivy

from kindex.adapters.aws.opensearch_filters import (
    build_access_filter,
    build_attribute_filter,
    build_document_filters,
    index_fields,
    mapping_properties,
)
from kindex.adapters.local.search.filters import DocumentTable, TantivyFilters, add_schema_fields, tantivy_fields
from kindex.domain.filters import Access, admits, matches, parse_filter, validate_attributes

pytestmark = pytest.mark.contract

DOCUMENTS = {
    # tenant a: year is a number
    "a1": ("a", {"year": 2020, "region": "eu", "tags": ["x", "y"], "public": True, "score": 0.5}),
    "a2": ("a", {"year": 2021.5, "region": "us", "tags": [], "public": False}),
    "a3": ("a", {"year": -3, "region": "日本", "tags": ["y"], "title": ""}),
    "a4": ("a", None),
    "a5": ("a", {"year": 2**53 - 1, "region": "eu\x1fregion", "tags": ["eu"], "title": "a.b(c)*+?[x]{2}|^$\\"}),
    "a6": ("a", {"year": 0.0, "zero": -0.0, "title": "a.bc", "score": 1}),
    "a7": ("a", {"year": -(2**53 - 1), "score": -0.5, "tags": ["x\x1f"], "region": "eu "}),
    # tenant b: the same keys with other types
    "b1": ("b", {"year": "2020", "region": ["eu", "us"], "tags": "x", "public": "true"}),
    "b2": ("b", {"year": True, "region": 1, "tags": ["x"], "score": "0.5"}),
    "b3": ("b", {"year": 2020, "region": "eu"}),
}

FILTERS = [
    {},
    {"year": 2020},
    {"year": 2020.0},
    {"year": "2020"},
    {"year": True},
    {"year": {"$ne": 2020}},
    {"year": {"$gt": 2020}},
    {"year": {"$gte": 2020}},
    {"year": {"$lt": 0}},
    {"year": {"$lte": 0}},
    {"year": {"$gt": -0.0}},
    {"year": {"$gte": 0}},
    {"year": {"$lt": 2**53 - 1}},
    {"year": {"$lte": 2**53 - 1}},
    {"year": {"$gt": -(2**53 - 1)}},
    {"year": {"$gte": -1e308, "$lt": 1e308}},
    {"year": {"$gt": 1.7976931348623157e308}},
    {"year": {"$lt": -1.7976931348623157e308}},
    {"score": {"$gt": -1, "$lt": 0.75}},
    {"zero": 0},
    {"year": {"$in": [2020, "2020", True]}},
    {"year": {"$in": []}},
    {"year": {"$nin": []}},
    {"year": {"$nin": [2020, -3]}},
    {"region": "eu"},
    {"region": {"$ne": "eu"}},
    {"region": {"$in": ["eu", 1]}},
    {"region": "eu\x1fregion"},
    {"region": "日本"},
    {"region": {"$starts_with": "eu"}},
    {"region": {"$starts_with": ""}},
    {"region": {"$starts_with": "日"}},
    {"region": {"$starts_with": "eu\x1f"}},
    {"title": ""},
    {"title": {"$starts_with": "a.b"}},
    {"title": {"$starts_with": "a.b(c)*+?[x]{2}|^$\\"}},
    {"title": {"$starts_with": "a."}},
    {"tags": "x"},
    {"tags": {"$contains": "x"}},
    {"tags": {"$contains": "eu"}},
    {"tags": {"$ne": "y"}},
    {"tags": {"$nin": ["x", "y"]}},
    {"tags": {"$contains": "x\x1f"}},
    {"region": {"$contains": "eu"}},
    {"public": True},
    {"public": False},
    {"public": {"$ne": True}},
    {"public": "true"},
    {"tags": {"$exists": True}},
    {"tags": {"$exists": False}},
    {"title": {"$exists": True}},
    {"missing": {"$exists": False}},
    {"missing": {"$ne": 1}},
    {"missing": {"$nin": ["x"]}},
    {"missing": 1},
    {"$or": [{"year": {"$lt": 0}}, {"region": "us"}]},
    {"$or": [{"tags": "y"}, {"tags": {"$exists": False}}]},
    {"$and": [{"year": {"$gte": 0}}, {"$or": [{"public": True}, {"title": {"$exists": True}}]}]},
    {"region": "eu", "year": {"$gte": 2020}},
    {
        "$or": [
            {"$and": [{"year": {"$gt": 2000}}, {"$or": [{"tags": "x"}, {"region": {"$starts_with": "u"}}]}]},
            {"score": {"$lt": 0}},
        ]
    },
]

ACCESS = {
    "a1": Access(users=("alice",)),
    "a2": Access(groups=("g1", "g2")),
    "a3": Access(groups=("g1",), deny_users=("alice",)),
    "a5": Access(users=("bob",), deny_groups=("g2",)),
    "a6": Access(),
    "b1": Access(users=("alice",)),
}
PRINCIPALS = [
    (None, []),
    ("alice", []),
    ("alice", ["g1"]),
    ("bob", ["g2"]),
    ("bob", ["g1"]),
    (None, ["g1"]),
    ("carol", [f"x{i}" for i in range(999)] + ["g2"]),
]


def reference(tenant: str, expression) -> set[str]:
    return {i for i, (t, attributes) in DOCUMENTS.items() if t == tenant and matches(expression, attributes)}


def reference_access(tenant: str, user, groups, required: bool) -> set[str]:
    return {i for i, (t, _) in DOCUMENTS.items() if t == tenant and admits(ACCESS.get(i), user, groups, required)}


def test_the_documents_are_valid_attributes():
    for _, attributes in DOCUMENTS.values():
        if attributes is not None:
            assert validate_attributes(attributes) == attributes


def test_the_reference_is_not_vacuous():
    # A few answers by hand, so that a broken `matches` cannot make every engine agree on nonsense.
    assert reference("a", parse_filter({"year": {"$gte": 2020}})) == {"a1", "a2", "a5"}
    assert reference("b", parse_filter({"year": 2020})) == {"b3"}
    assert reference("a", parse_filter({"tags": {"$exists": False}})) == {"a4", "a6"}
    assert reference("b", parse_filter({"region": "eu"})) == {"b1", "b3"}
    assert reference_access("a", "alice", ["g1"], True) == {"a1", "a2"}


# -- OpenSearch (the real node) ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def opensearch(opensearch_node):
    prefix = opensearch_node.new_prefix()
    index = f"{prefix}-filters"
    body = {
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "tenant": {"type": "keyword"},
                "chunk": {"type": "keyword"},
                "text": {"type": "text"},
                "vector": {
                    "type": "knn_vector",
                    "dimension": 4,
                    "method": {"name": "hnsw", "engine": "lucene", "space_type": "innerproduct"},
                },
                **mapping_properties(),
            },
        },
    }
    requests.put(f"{opensearch_node.url}/{index}", json=body, timeout=60).raise_for_status()
    rng = np.random.default_rng(3)
    lines = []
    for chunk, (tenant, attributes) in DOCUMENTS.items():
        vector = rng.standard_normal(4)
        vector = list(vector / np.linalg.norm(vector))
        lines += [
            {"index": {"_index": index, "_id": chunk}},
            {
                "tenant": tenant,
                "chunk": chunk,
                "text": "common words",
                "vector": vector,
                **index_fields(attributes, ACCESS.get(chunk)),
            },
        ]
    payload = "".join(f"{json.dumps(line)}\n" for line in lines)
    response = requests.post(
        f"{opensearch_node.url}/_bulk",
        params={"refresh": "true"},
        data=payload,
        headers={"Content-Type": "application/x-ndjson"},
        timeout=60,
    )
    response.raise_for_status()
    assert not response.json()["errors"], response.json()
    yield opensearch_node.url, index
    opensearch_node.delete_indices(prefix)


def search_both_legs(url: str, index: str, tenant: str, clauses: list[dict]) -> set[str]:
    """The ids the k-NN query (k = every document) and the BM25 query return under `clauses`; they must agree."""
    where = {"bool": {"filter": [{"term": {"tenant": tenant}}, *clauses]}}
    knn = {
        "size": 100,
        "_source": ["chunk"],
        "query": {"knn": {"vector": {"vector": [0.5, 0.5, 0.5, 0.5], "k": 100, "filter": where}}},
    }
    keyword = {
        "size": 100,
        "_source": ["chunk"],
        "query": {"bool": {"must": [{"match": {"text": "common"}}], "filter": where["bool"]["filter"]}},
    }
    found = []
    for body in (knn, keyword):
        response = requests.post(f"{url}/{index}/_search", json=body, timeout=60)
        assert response.status_code == 200, response.text
        found.append({hit["_source"]["chunk"] for hit in response.json()["hits"]["hits"]})
    assert found[0] == found[1], "the k-NN and keyword legs disagree"
    return found[0]


@pytest.mark.parametrize("raw", FILTERS, ids=[str(f) for f in FILTERS])
def test_opensearch_returns_what_the_reference_says(opensearch, raw):
    # Given the documents of two tenants on the real node, and one filter
    url, index = opensearch
    expression = parse_filter(raw)
    for tenant in ("a", "b"):
        # When both legs search the tenant with the compiled clause
        found = search_both_legs(url, index, tenant, [build_attribute_filter(expression)])
        # Then they return exactly the documents the reference admits
        assert found == reference(tenant, expression), (tenant, raw)


@pytest.mark.parametrize(("user", "groups"), PRINCIPALS, ids=[f"{u}-{len(g)}" for u, g in PRINCIPALS])
def test_opensearch_access_lists_match_admits(opensearch, user, groups):
    url, index = opensearch
    for tenant, required in itertools.product(("a", "b"), (False, True)):
        found = search_both_legs(url, index, tenant, [build_access_filter(user, groups, required=required)])
        assert found == reference_access(tenant, user, groups, required), (tenant, user, required)


def test_opensearch_filter_and_access_together(opensearch):
    url, index = opensearch
    expression = parse_filter({"year": {"$gte": 2020}})
    found = search_both_legs(url, index, "a", build_document_filters(expression, "alice", ["g1"], required=False))
    assert found == reference("a", expression) & reference_access("a", "alice", ["g1"], False) == {"a1", "a2"}


def test_a_thousand_groups_are_one_terms_clause():
    clause = build_access_filter("u", [f"g{i}" for i in range(1000)], required=True)
    groups = [c for c in clause["bool"]["should"] if "terms" in c]
    assert len(groups) == 1 and len(groups[0]["terms"]["access_groups"]) == 1000
    assert len(clause["bool"]["must_not"]) == 2


# -- tantivy ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tantivy_index():
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunk", stored=True, tokenizer_name="raw")
    builder.add_text_field("tenant", tokenizer_name="raw")
    add_schema_fields(builder)
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(15_000_000, 1)
    for chunk, (tenant, attributes) in DOCUMENTS.items():
        writer.add_document(
            tantivy.Document(chunk=chunk, tenant=tenant, **tantivy_fields(attributes, ACCESS.get(chunk)))
        )
    writer.commit()
    index.reload()
    return schema, index


def tantivy_search(schema, index, tenant: str, query) -> set[str]:
    searcher = index.searcher()
    combined = tantivy.Query.boolean_query(
        [(tantivy.Occur.Must, tantivy.Query.term_query(schema, "tenant", tenant)), (tantivy.Occur.Must, query)]
    )
    return {searcher.doc(address)["chunk"][0] for _, address in searcher.search(combined, 100).hits}


@pytest.mark.parametrize("raw", FILTERS, ids=[str(f) for f in FILTERS])
def test_tantivy_returns_what_the_reference_says(tantivy_index, raw):
    schema, index = tantivy_index
    expression = parse_filter(raw)
    for tenant in ("a", "b"):
        found = tantivy_search(schema, index, tenant, TantivyFilters(schema).attributes(expression))
        assert found == reference(tenant, expression), (tenant, raw)


@pytest.mark.parametrize(("user", "groups"), PRINCIPALS, ids=[f"{u}-{len(g)}" for u, g in PRINCIPALS])
def test_tantivy_access_lists_match_admits(tantivy_index, user, groups):
    schema, index = tantivy_index
    for tenant, required in itertools.product(("a", "b"), (False, True)):
        query = TantivyFilters(schema).access(user, groups, required=required)
        assert tantivy_search(schema, index, tenant, query) == reference_access(tenant, user, groups, required)


# -- the vector half: the document table ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tables():
    """One table per tenant (a partition is one tenant's collection), document codes in insertion order."""
    found: dict[str, tuple[DocumentTable, list[str]]] = {}
    for chunk, (tenant, attributes) in DOCUMENTS.items():
        table, codes = found.setdefault(tenant, (DocumentTable(), []))
        table.put(len(codes), attributes, ACCESS.get(chunk))
        codes.append(chunk)
    return found


def table_search(tables, tenant: str, expression, user=None, groups=(), required=False) -> set[str]:
    table, codes = tables[tenant]
    mask = table.mask(expression, user, groups, required=required)
    return {codes[code] for code in np.flatnonzero(mask)}


@pytest.mark.parametrize("raw", FILTERS, ids=[str(f) for f in FILTERS])
def test_the_document_table_returns_what_the_reference_says(tables, raw):
    expression = parse_filter(raw)
    for tenant in ("a", "b"):
        # No access lists asked for: documents with a list are hidden, so compare with that in mind.
        expected = reference(tenant, expression) & reference_access(tenant, None, [], False)
        assert table_search(tables, tenant, expression) == expected, (tenant, raw)
        assert table_search(tables, tenant, expression, "alice", ["g1", "g2"]) == reference(
            tenant, expression
        ) & reference_access(tenant, "alice", ["g1", "g2"], False)


@pytest.mark.parametrize(("user", "groups"), PRINCIPALS, ids=[f"{u}-{len(g)}" for u, g in PRINCIPALS])
def test_the_document_table_access_lists_match_admits(tables, user, groups):
    for tenant, required in itertools.product(("a", "b"), (False, True)):
        assert table_search(tables, tenant, None, user, groups, required) == reference_access(
            tenant, user, groups, required
        )


def test_the_document_table_forgets_replaced_and_removed_documents():
    # Given a document put, then put again with other attributes, and another removed
    table = DocumentTable()
    table.put(0, {"year": 2020, "region": "eu", "tags": ["x"]}, None)
    table.put(1, {"year": 2021, "region": "eu"}, Access(users=("alice",)))
    table.put(0, {"year": 1999, "region": "us"}, None)
    table.remove(1)
    # When filtered on the old values
    old = parse_filter(
        {"$or": [{"year": 2020}, {"region": {"$starts_with": "e"}}, {"tags": "x"}, {"year": {"$gt": 2000}}]}
    )
    # Then nothing matches; the new values do; a removed document is never visible
    assert not table.mask(old, "alice", [], required=False).any()
    assert list(table.mask(parse_filter({"year": {"$lt": 2000}, "region": "us"}), None, [], required=False)) == [
        True,
        False,
    ]
    assert list(table.mask(None, "alice", [], required=True)) == [False, False]
    # And a code the table never saw is invisible (fail closed), whatever the mask's length
    assert list(table.mask(None, None, [], required=False, documents=3)) == [True, False, False]
    assert list(table.mask(None, None, [], required=False, documents=1)) == [True]


@pytest.mark.slow
def test_tantivy_prefixes_of_every_ascii_character_match_the_reference():
    # Given titles made of every ASCII character (regex meta characters, controls, NUL) and some unicode
    import random

    rng = random.Random(4)
    alphabet = [chr(c) for c in range(128)] + ["é", "日", "\u2028", "\U0001f600"]
    titles = {f"t{i}": "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 6))) for i in range(300)}
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunk", stored=True, tokenizer_name="raw")
    add_schema_fields(builder)
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(15_000_000, 1)
    for chunk, title in titles.items():
        writer.add_document(tantivy.Document(chunk=chunk, **tantivy_fields({"title": title}, None)))
    writer.commit()
    index.reload()
    searcher = index.searcher()
    compiler = TantivyFilters(schema)
    # When each title's prefixes are asked for
    for title in list(titles.values())[:120]:
        for prefix in {title[:1], title[:2], title}:
            expression = parse_filter({"title": {"$starts_with": prefix}})
            found = {
                searcher.doc(address)["chunk"][0]
                for _, address in searcher.search(compiler.attributes(expression), 400).hits
            }
            # Then tantivy finds exactly the titles the reference does
            assert found == {c for c, t in titles.items() if matches(expression, {"title": t})}, repr(prefix)


def test_an_index_from_before_takes_the_fields_with_a_mapping_update_and_its_chunks_read_as_unlisted(opensearch_node):
    # Given an index created before the filter fields existed, holding one chunk, with a strict mapping
    prefix = opensearch_node.new_prefix()
    index, url = f"{prefix}-old", opensearch_node.url
    try:
        requests.put(
            f"{url}/{index}",
            timeout=60,
            json={
                "settings": {"index": {"number_of_replicas": 0}},
                "mappings": {
                    "dynamic": "strict",
                    "properties": {"tenant": {"type": "keyword"}, "chunk": {"type": "keyword"}},
                },
            },
        ).raise_for_status()
        requests.put(
            f"{url}/{index}/_doc/old", params={"refresh": "true"}, timeout=60, json={"tenant": "a", "chunk": "old"}
        ).raise_for_status()
        # When the new properties are added in place and a new chunk is written with them
        requests.put(
            f"{url}/{index}/_mapping", json={"properties": mapping_properties()}, timeout=60
        ).raise_for_status()
        requests.put(
            f"{url}/{index}/_doc/new",
            params={"refresh": "true"},
            timeout=60,
            json={"tenant": "a", "chunk": "new", **index_fields({"year": 2020}, Access(users=("alice",)))},
        ).raise_for_status()

        def found(clauses):
            body = {"size": 10, "query": {"bool": {"filter": [{"term": {"tenant": "a"}}, *clauses]}}}
            response = requests.post(f"{url}/{index}/_search", json=body, timeout=60)
            assert response.status_code == 200, response.text
            return {hit["_id"] for hit in response.json()["hits"]["hits"]}

        # Then the old chunk reads as "no attributes, no access list", exactly as the reference says
        assert found([build_access_filter(None, [], required=False)]) == {"old"}
        assert found([build_access_filter("alice", [], required=True)]) == {"new"}
        assert found([build_attribute_filter(parse_filter({"year": {"$ne": 2020}}))]) == {"old"}
        assert found([build_attribute_filter(parse_filter({"year": {"$exists": True}}))]) == {"new"}
    finally:
        opensearch_node.delete_indices(prefix)


def test_opensearch_prefixes_of_every_ascii_character_match_the_reference(opensearch_node):
    # Given titles made of every ASCII character and some unicode, on the real node
    import random

    rng = random.Random(4)
    alphabet = [chr(c) for c in range(128)] + ["é", "日", "\u2028", "\U0001f600"]
    titles = {f"t{i}": "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 6))) for i in range(300)}
    prefix = opensearch_node.new_prefix()
    index, url = f"{prefix}-prefixes", opensearch_node.url
    try:
        requests.put(
            f"{url}/{index}",
            timeout=60,
            json={
                "settings": {"index": {"number_of_replicas": 0}},
                "mappings": {"dynamic": "strict", "properties": {"chunk": {"type": "keyword"}, **mapping_properties()}},
            },
        ).raise_for_status()
        payload = "".join(
            f"{json.dumps(line)}\n"
            for chunk, title in titles.items()
            for line in (
                {"index": {"_index": index, "_id": chunk}},
                {"chunk": chunk, **index_fields({"title": title}, None)},
            )
        )
        response = requests.post(
            f"{url}/_bulk",
            params={"refresh": "true"},
            data=payload.encode("utf-8"),
            headers={"Content-Type": "application/x-ndjson"},
            timeout=60,
        )
        assert not response.json()["errors"]
        # When each title's prefixes are asked for
        for title in list(titles.values())[:60]:
            for start in {title[:1], title[:2], title}:
                expression = parse_filter({"title": {"$starts_with": start}})
                body = {"size": 400, "query": {"bool": {"filter": [build_attribute_filter(expression)]}}}
                hits = requests.post(f"{url}/{index}/_search", json=body, timeout=60).json()["hits"]["hits"]
                # Then the node finds exactly the titles the reference does
                assert {hit["_id"] for hit in hits} == {
                    c for c, t in titles.items() if matches(expression, {"title": t})
                }, repr(start)
    finally:
        opensearch_node.delete_indices(prefix)
