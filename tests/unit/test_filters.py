"""Document attributes, access lists and filter expressions (kindex.domain.filters): what is refused and how the
message names the place, and the reference semantics every engine is compared with (tests/contract/
test_filter_engines.py runs the same tables against OpenSearch, tantivy and the vector half)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ValidationError

from kindex.domain.errors import InvalidInput
from kindex.domain.filters import (
    MATCH_ALL,
    Access,
    AllOf,
    AnyOf,
    Attributes,
    Comparison,
    FilterExpression,
    admits,
    comparisons,
    matches,
    parse_filter,
    validate_access,
    validate_attributes,
    validate_principals,
)

pytestmark = pytest.mark.unit

# -- attributes -------------------------------------------------------------------------------------------------


def test_valid_attributes_come_back_as_given():
    # Given every kind of value, at the edges of the bounds
    attributes = {
        "year": 2020,
        "score": 0.5,
        "public": True,
        "region": "eu",
        "tags": ["x", "y"],
        "empty": "",
        "none": [],
        "big": 2**53 - 1,
        "small": -(2**53 - 1),
        "name": "日本語 ✓",
        "a" * 64: "k",
        "x.y-z_1": "s" * 1024,
        "many": ["i"] * 100,
    }
    # When validated
    # Then they are kept as they are
    assert validate_attributes(attributes) == attributes


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"1year": 1}, 'attributes: "1year" is not a valid attribute key'),
        ({"": 1}, 'attributes: "" is not a valid attribute key'),
        ({"région": 1}, 'attributes: "région" is not a valid attribute key'),
        ({"a" * 65: 1}, "is not a valid attribute key"),
        ({"a b": 1}, 'attributes: "a b" is not a valid attribute key'),
        ({"year\n": 1}, "is not a valid attribute key"),
        ({"year": None}, "attributes.year: must be a string, a number or a boolean, not null"),
        ({"year": {"a": 1}}, "attributes.year: must be a string, a number or a boolean, not an object"),
        ({"year": float("nan")}, "attributes.year: must be a finite number (not NaN or Infinity)"),
        ({"year": float("inf")}, "attributes.year: must be a finite number"),
        ({"year": 2**63}, "attributes.year: an integer must lie within +-(2^53 - 1)"),
        ({"year": -(2**53)}, "attributes.year: an integer must lie within"),
        ({"title": "s" * 1025}, "attributes.title: longer than 1,024 characters"),
        ({"title": "a\ud800b"}, "attributes.title: contains a lone surrogate"),
        ({"tags": ["x", 1]}, "attributes.tags[1]: a list holds strings only, not a number"),
        ({"tags": ["x", ["y"]]}, "attributes.tags[1]: a list holds strings only, not a list"),
        ({"tags": ["\udfff"]}, "attributes.tags[0]: contains a lone surrogate"),
        ({"tags": ["x"] * 101}, "attributes.tags: a list holds at most 100 items"),
        ({f"k{i}": i for i in range(65)}, "attributes: at most 64 keys"),
        ({f"k{i}": "v" * 1000 for i in range(11)}, "bytes as JSON, more than the 10,240 allowed"),
        ([1, 2], "attributes: must be an object, not a list"),
        ("eu", "attributes: must be an object, not a string"),
    ],
)
def test_bad_attributes_are_refused_naming_the_key(attributes, message):
    # Given attributes that break one rule
    # When validated
    with pytest.raises(InvalidInput) as raised:
        validate_attributes(attributes)
    # Then the message names the key (and the item) at fault
    assert message in raised.value.message


def test_the_attributes_field_type_refuses_in_a_request_body_with_the_key_named():
    # Given a request model with an Attributes field
    class Body(BaseModel):
        attributes: Attributes | None = None

    # When a body carries a good and a bad value
    assert Body.model_validate({"attributes": {"year": 2020}}).attributes == {"year": 2020}
    with pytest.raises(ValidationError) as raised:
        Body.model_validate({"attributes": {"year": float("nan")}})
    # Then pydantic reports the field, and the message the key
    detail = raised.value.errors()[0]
    assert detail["loc"] == ("attributes",) and "year: must be a finite number" in detail["msg"]
    assert Body.model_json_schema()["properties"]["attributes"]["anyOf"][0]["maxProperties"] == 64


# -- access lists -----------------------------------------------------------------------------------------------


def test_an_access_list_keeps_principals_opaque_and_drops_duplicates():
    access = validate_access({"users": ["alice", "alice", "ü\x1f*"], "groups": ["g"] * 3, "deny_users": ["x" * 256]})
    assert access == Access(users=("alice", "ü\x1f*"), groups=("g",), deny_users=("x" * 256,), deny_groups=())


@pytest.mark.parametrize(
    ("access", "message"),
    [
        ({"users": [""]}, "access.users[0]: a principal is a non-empty string"),
        ({"groups": ["ok", 7]}, "access.groups[1]: a principal is a non-empty string"),
        ({"deny_users": ["x" * 257]}, "access.deny_users[0]: longer than 256 characters"),
        ({"deny_groups": ["\ud800"]}, "access.deny_groups[0]: contains a lone surrogate"),
        ({"groups": [f"g{i}" for i in range(1001)]}, "access.groups: at most 1,000 principals"),
        ({"groups": "admins"}, "access.groups: must be a list of strings, not a string"),
        ({"roles": ["x"]}, "access.roles: unknown field"),
        (["alice"], "access: must be an object, not a list"),
    ],
)
def test_bad_access_lists_are_refused_naming_the_list_and_item(access, message):
    with pytest.raises(InvalidInput) as raised:
        validate_access(access)
    assert message in raised.value.message


def test_a_query_with_a_thousand_groups_is_accepted_and_one_more_is_not():
    assert len(validate_principals([f"g{i}" for i in range(1000)], path="groups")) == 1000
    with pytest.raises(InvalidInput, match=r"^groups: at most 1,000 principals$"):
        validate_principals([f"g{i}" for i in range(1001)], path="groups")


@pytest.mark.parametrize(
    ("access", "user", "groups", "required", "expected"),
    [
        (None, "alice", [], False, True),  # no list: the collection gate decides
        (None, "alice", ["g"], True, False),  # no list where one is required: nobody
        (Access(users=("alice",)), "alice", [], False, True),
        (Access(users=("alice",)), "bob", [], False, False),
        (Access(users=("alice",)), None, [], False, False),
        (Access(groups=("g1", "g2")), "bob", ["g2"], True, True),
        (Access(groups=("g1",)), "bob", [], False, False),  # no groups match no group
        (Access(users=("alice",), deny_users=("alice",)), "alice", [], False, False),  # deny wins
        (Access(groups=("g1",), deny_groups=("g2",)), "bob", ["g1", "g2"], False, False),
        (Access(users=("alice",), deny_groups=("g2",)), "alice", ["g2"], False, False),
        (Access(), "alice", ["g"], False, False),  # an empty list admits nobody
    ],
)
def test_admits_lets_deny_win_and_fails_closed(access, user, groups, required, expected):
    assert admits(access, user, groups, required) is expected
    # The same answer when the query's groups come as a set (what a query checking many records passes)
    assert admits(access, user, frozenset(groups), required) is expected


class CountingSet(frozenset):
    """A set that counts the membership tests made on it and the names read from it."""

    tests = 0

    def __contains__(self, item: object) -> bool:
        CountingSet.tests += 1
        return super().__contains__(item)

    def __iter__(self):
        for item in super().__iter__():
            CountingSet.tests += 1
            yield item


def test_a_record_check_for_a_user_in_a_thousand_groups_costs_the_document_s_lists_not_the_user_s_groups():
    # Given a user in 1,000 groups, as a set, and documents that list two groups and deny one
    groups = CountingSet([f"g{i}" for i in range(1000)])
    listed = Access(groups=("x", "g999"), deny_groups=("y",))
    unlisted = Access(groups=("x", "z"), deny_groups=("y",))
    CountingSet.tests = 0
    # Then each check tests only the document's three names against the user's groups
    assert admits(listed, "bob", groups, False) and not admits(unlisted, "bob", groups, False)
    assert CountingSet.tests <= 6
    # And the same groups as a list give the same answers
    assert admits(listed, "bob", list(groups), False) and not admits(unlisted, "bob", list(groups), False)


# -- parsing ----------------------------------------------------------------------------------------------------


def test_keys_side_by_side_and_operators_side_by_side_are_and():
    expression = parse_filter({"region": "eu", "year": {"$gte": 2020, "$lt": 2030}})
    assert expression == AllOf(
        (Comparison("region", "$eq", "eu"), Comparison("year", "$gte", 2020), Comparison("year", "$lt", 2030))
    )


def test_a_single_comparison_and_the_logical_operators_parse_to_a_small_tree():
    assert parse_filter({"year": {"$gt": 1.5}}) == Comparison("year", "$gt", 1.5)
    assert parse_filter({}) == MATCH_ALL
    expression = parse_filter(
        {"$or": [{"a": {"$in": ["x", 1, True, "x"]}}, {"$and": [{"b": {"$exists": False}}, {"c": {"$ne": 0}}]}]}
    )
    assert expression == AnyOf(
        (Comparison("a", "$in", ("x", 1, True)), AllOf((Comparison("b", "$exists", False), Comparison("c", "$ne", 0))))
    )
    assert [c.key for c in comparisons(expression)] == ["a", "b", "c"]


def nested(depth: int) -> dict:
    expression: dict = {"a": 1}
    for _ in range(depth - 1):
        expression = {"$and": [expression]}
    return expression


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            {"$or": [{"year": 1}, {"year": {"$gte": True}}]},
            "filters.attributes.$or[1].year.$gte: $gte compares numbers, not a boolean",
        ),
        ({"year": {"$gt": [1]}}, "filters.attributes.year.$gt: $gt compares numbers, not a list"),
        ({"year": {"$lt": "2020"}}, "filters.attributes.year.$lt: $lt compares numbers, not a string"),
        ({"year": {"$regex": "x"}}, "filters.attributes.year.$regex: unknown operator; use one of $eq"),
        ({"$not": {"a": 1}}, "filters.attributes.$not: unknown operator here: only $and and $or combine clauses"),
        ({"1a": 1}, 'filters.attributes.1a: "1a" is not a valid attribute key'),
        ({"clé": 1}, 'filters.attributes.clé: "clé" is not a valid attribute key'),
        ({"": 1}, 'filters.attributes: "" is not a valid attribute key'),
        ({"tags": {"$contains": 1}}, "filters.attributes.tags.$contains: $contains takes a string, not a number"),
        ({"t": {"$starts_with": None}}, "filters.attributes.t.$starts_with: $starts_with takes a string, not null"),
        ({"t": {"$exists": 1}}, "filters.attributes.t.$exists: $exists takes true or false, not a number"),
        ({"t": {"$eq": ["a"]}}, "filters.attributes.t.$eq: $eq compares one value; use $in for a list"),
        ({"t": {"$ne": ["a"]}}, "filters.attributes.t.$ne: $ne compares one value; use $nin for a list"),
        ({"t": {"$in": "a"}}, "filters.attributes.t.$in: $in takes a list of values, not a string"),
        ({"t": {"$in": [["a"]]}}, "filters.attributes.t.$in[0]: must be a string, a number or a boolean, not a list"),
        ({"t": {"$nin": list(range(1001))}}, "filters.attributes.t.$nin: at most 1,000 values"),
        ({"t": {"$eq": float("nan")}}, "filters.attributes.t.$eq: must be a finite number (not NaN or Infinity)"),
        ({"t": {"$gte": float("-inf")}}, "filters.attributes.t.$gte: must be a finite number"),
        ({"t": {"$eq": 2**63}}, "filters.attributes.t.$eq: an integer must lie within +-(2^53 - 1)"),
        ({"t": {"$in": [1, 2**53]}}, "filters.attributes.t.$in[1]: an integer must lie within"),
        ({"t": "\ud800"}, "filters.attributes.t: contains a lone surrogate"),
        ({"t": {"$starts_with": "x" * 1025}}, "filters.attributes.t.$starts_with: longer than 1,024 characters"),
        ({"t": {}}, "filters.attributes.t: needs at least one operator"),
        ({"t": None}, "filters.attributes.t: must be a string, a number or a boolean, not null"),
        ({"$and": []}, "filters.attributes.$and: must be a non-empty list of filter objects"),
        ({"$or": {"a": 1}}, "filters.attributes.$or: must be a non-empty list of filter objects"),
        ({"$or": [1]}, "filters.attributes.$or[0]: must be an object, not a number"),
        ([{"a": 1}], "filters.attributes: must be an object, not a list"),
        (nested(5), "filters.attributes.$and[0].$and[0].$and[0].$and[0]: nested deeper than 4 levels"),
        ({f"k{i}": i for i in range(65)}, "filters.attributes.k64: more than 64 comparisons in one filter"),
        ({"$or": [{"a": i} for i in range(10_000)]}, "filters.attributes.$or: at most 64 clauses"),
        (
            {"a": {"$in": [1]}, "$or": [{"b": {"$gt": 1, "$lt": 2}}] * 32},
            "filters.attributes.$or[31].b.$lt: more than 64 comparisons in one filter",
        ),
    ],
)
def test_bad_filters_are_refused_naming_the_path(expression, message):
    # Given a filter that breaks one rule
    # When parsed
    with pytest.raises(InvalidInput) as raised:
        parse_filter(expression)
    # Then the message starts with the path inside the expression
    assert raised.value.message.startswith(message), raised.value.message


def test_depth_four_is_allowed():
    assert matches(parse_filter(nested(4)), {"a": 1})


@pytest.mark.slow
def test_a_filter_nested_thousands_deep_is_refused_not_a_recursion_error():
    # Given JSON nested 50,000 levels (json.loads handles it iteratively in a string this deep? build it directly)
    deep: dict = {"a": 1}
    for _ in range(50_000):
        deep = {"$or": [deep]}
    with pytest.raises(InvalidInput, match=r"nested deeper than 4 levels"):
        parse_filter(deep)


def test_hostile_values_from_json_text_are_refused_the_same_way():
    # Given the JSON a client could send (Python's json accepts NaN and lone surrogates)
    for text, message in (
        ('{"a": NaN}', "filters.attributes.a: must be a finite number"),
        ('{"a": {"$gt": Infinity}}', "filters.attributes.a.$gt: must be a finite number"),
        ('{"a": 9223372036854775808}', "filters.attributes.a: an integer must lie within"),
        ('{"a": "\\ud800"}', "filters.attributes.a: contains a lone surrogate"),
    ):
        with pytest.raises(InvalidInput) as raised:
            parse_filter(json.loads(text))
        assert raised.value.message.startswith(message)


def test_the_filter_field_type_parses_in_a_request_body():
    class Filters(BaseModel):
        attributes: FilterExpression | None = None

    assert Filters.model_validate({"attributes": {"a": {"$gt": 1}}}).attributes == Comparison("a", "$gt", 1)
    with pytest.raises(ValidationError) as raised:
        Filters.model_validate({"attributes": {"$or": [{"a": {"$gt": "x"}}]}})
    assert "$or[0].a.$gt: $gt compares numbers, not a string" in raised.value.errors()[0]["msg"]


# -- the reference semantics ------------------------------------------------------------------------------------

DOCUMENT = {"year": 2020, "score": 0.5, "public": True, "region": "eu", "tags": ["x", "y"], "none": [], "blank": ""}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"year": 2020}, True),
        ({"year": 2020.0}, True),
        ({"year": "2020"}, False),
        ({"year": True}, False),
        ({"public": True}, True),
        ({"public": 1}, False),
        ({"score": {"$eq": 0.5}}, True),
        ({"year": {"$ne": 2020}}, False),
        ({"year": {"$ne": "2020"}}, True),
        ({"year": {"$gt": 2019.5}}, True),
        ({"year": {"$gt": 2020}}, False),
        ({"year": {"$gte": 2020}}, True),
        ({"year": {"$lt": 2020}}, False),
        ({"year": {"$lte": 2020.0}}, True),
        ({"region": {"$gt": 0}}, False),
        ({"public": {"$gte": 0}}, False),  # a boolean is not a number
        ({"year": {"$in": ["2020", 2020]}}, True),
        ({"year": {"$in": []}}, False),
        ({"year": {"$nin": []}}, True),
        ({"year": {"$nin": [2020.0]}}, False),
        ({"tags": "x"}, True),
        ({"tags": {"$eq": "z"}}, False),
        ({"tags": {"$ne": "x"}}, False),
        ({"tags": {"$in": ["z", "y"]}}, True),
        ({"tags": {"$nin": ["y"]}}, False),
        ({"tags": {"$contains": "y"}}, True),
        ({"region": {"$contains": "eu"}}, False),  # $contains: lists only
        ({"tags": {"$starts_with": ""}}, True),
        ({"region": {"$starts_with": "e"}}, True),
        ({"region": {"$starts_with": "eu!"}}, False),
        ({"year": {"$starts_with": "2"}}, False),
        ({"none": {"$exists": True}}, True),
        ({"none": "x"}, False),
        ({"none": {"$ne": "x"}}, True),
        ({"blank": ""}, True),
        ({"blank": {"$starts_with": ""}}, True),
        ({"$or": [{"year": 1}, {"region": "eu"}]}, True),
        ({"$and": [{"year": 2020}, {"region": "us"}]}, False),
    ],
)
def test_matches_on_a_document_with_the_key(expression, expected):
    assert matches(parse_filter(expression), DOCUMENT) is expected


@pytest.mark.parametrize(
    ("operator", "value", "expected"),
    [
        ("$eq", "x", False),
        ("$ne", "x", True),
        ("$gt", 1, False),
        ("$gte", 1, False),
        ("$lt", 1, False),
        ("$lte", 1, False),
        ("$in", ["x"], False),
        ("$nin", ["x"], True),
        ("$exists", True, False),
        ("$exists", False, True),
        ("$contains", "x", False),
        ("$starts_with", "", False),
    ],
)
def test_a_missing_key_fails_every_operator_but_ne_nin_and_exists_false(operator, value, expected):
    expression = parse_filter({"missing": {operator: value}})
    assert matches(expression, DOCUMENT) is expected
    assert matches(expression, None) is expected  # no attributes at all: every key missing
    assert matches(expression, {}) is expected


def test_a_key_or_operator_with_a_lone_surrogate_is_refused_with_a_message_that_encodes():
    for expression in ({"a\ud800": 1}, {"a": {"$e\udc00": 1}}):
        with pytest.raises(InvalidInput) as raised:
            parse_filter(expression)
        raised.value.message.encode("utf-8")
        assert "\\ud800" in raised.value.message or "\\udc00" in raised.value.message
    with pytest.raises(InvalidInput) as raised:
        validate_attributes({"\ud800": 1})
    assert raised.value.message.encode("utf-8")


def random_json(rng, depth: int = 0):
    """Arbitrary decoded JSON, biased towards what the parser looks at (operators, keys, edge numbers)."""
    atoms = [
        None,
        True,
        False,
        0,
        -0.0,
        1.5,
        2**53,
        2**63,
        -(2**64),
        float("nan"),
        float("inf"),
        "",
        "x",
        "\ud800",
        "é" * 1025,
        "$eq",
        [],
        {},
    ]
    keys = [
        "$and",
        "$or",
        "$eq",
        "$ne",
        "$gt",
        "$gte",
        "$lt",
        "$lte",
        "$in",
        "$nin",
        "$exists",
        "$contains",
        "$starts_with",
        "$not",
        "a",
        "b.c",
        "1x",
        "",
        "\udc00",
        "k" * 70,
    ]
    if depth > 6 or rng.random() < 0.3:
        return rng.choice(atoms)
    if rng.random() < 0.5:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


@pytest.mark.slow
def test_arbitrary_json_is_parsed_or_refused_with_invalid_input_never_another_exception():
    import random

    rng = random.Random(23)
    for _ in range(5_000):
        value = random_json(rng)
        for parse in (parse_filter, validate_attributes, validate_access):
            try:
                result = parse(value)
            except InvalidInput as error:
                error.message.encode("utf-8")  # every message can be sent
            else:
                if parse is parse_filter:
                    matches(result, {"a": 1, "b.c": ["x"]})  # whatever parses, evaluates
