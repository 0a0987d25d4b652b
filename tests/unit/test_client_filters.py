"""The SDK's filter builder (kindex.client.filters): pure, each constructor gives the JSON the API reads, that JSON
parses back to the same expression with the server's own parser, and means what the reference semantics say."""

import pytest

from kindex.client import F, Filter, InvalidFilter
from kindex.client.filters import expression_json
from kindex.domain.filters import MAX_CLAUSES, matches, parse_filter

pytestmark = pytest.mark.unit

DOCUMENTS = {
    "eu-2021": {"region": "eu", "year": 2021, "tags": ["policy", "hr"], "path": "hr/leave.md", "draft": False},
    "us-2019": {"region": "us", "year": 2019.0, "tags": ["sales"], "path": "sales/q3.md", "draft": True},
    "bare": {},
}


def passing(flt: Filter) -> list[str]:
    return sorted(name for name, attributes in DOCUMENTS.items() if matches(flt.expression, attributes))


@pytest.mark.parametrize(
    ("flt", "wire"),
    [
        (F.eq("region", "eu"), {"region": {"$eq": "eu"}}),
        (F.ne("region", "eu"), {"region": {"$ne": "eu"}}),
        (F.gt("year", 2020), {"year": {"$gt": 2020}}),
        (F.gte("year", 2020.5), {"year": {"$gte": 2020.5}}),
        (F.lt("year", 2020), {"year": {"$lt": 2020}}),
        (F.lte("year", 2020), {"year": {"$lte": 2020}}),
        (F.in_("region", ("eu", "us")), {"region": {"$in": ["eu", "us"]}}),
        (F.not_in("region", ["eu"]), {"region": {"$nin": ["eu"]}}),
        (F.exists("tags"), {"tags": {"$exists": True}}),
        (F.exists("tags", False), {"tags": {"$exists": False}}),
        (F.contains("tags", "policy"), {"tags": {"$contains": "policy"}}),
        (F.starts_with("path", "hr/"), {"path": {"$starts_with": "hr/"}}),
        (F.eq("draft", True), {"draft": {"$eq": True}}),
    ],
)
def test_each_operator_builds_the_json_the_api_reads_and_it_parses_back_to_the_same_expression(flt, wire):
    # When a filter is built / Then its JSON is the API's form, and the server's parser reads it back unchanged
    assert flt.to_json() == wire
    assert parse_filter(wire) == flt.expression


def test_and_or_combine_and_flatten_so_long_chains_stay_one_level_deep():
    # Given three comparisons chained with & and one alternative with |
    recent_eu = F.eq("region", "eu") & F.gte("year", 2020) & F.exists("tags")
    either = recent_eu | F.starts_with("path", "sales/")
    # Then the chain is one $and (not nested), the alternative one $or holding it
    assert recent_eu.to_json() == {
        "$and": [{"region": {"$eq": "eu"}}, {"year": {"$gte": 2020}}, {"tags": {"$exists": True}}]
    }
    assert either.to_json() == {"$or": [recent_eu.to_json(), {"path": {"$starts_with": "sales/"}}]}
    # And they mean what the reference semantics say
    assert passing(recent_eu) == ["eu-2021"]
    assert passing(either) == ["eu-2021", "us-2019"]
    assert F.all_of(F.eq("region", "eu"), F.lt("year", 2020)).to_json() == {
        "$and": [{"region": {"$eq": "eu"}}, {"year": {"$lt": 2020}}]
    }
    assert passing(F.any_of(F.eq("region", "us"), F.contains("tags", "hr"))) == ["eu-2021", "us-2019"]


def test_the_builder_keeps_the_documented_meaning_of_missing_keys_types_and_lists():
    # A document without the key passes only the "is not" operators
    assert passing(F.ne("region", "eu")) == ["bare", "us-2019"]
    assert passing(F.not_in("region", ["eu", "us"])) == ["bare"]
    assert passing(F.exists("region", False)) == ["bare"]
    # Numbers compare as numbers, int and float alike; a string never equals a number
    assert passing(F.eq("year", 2019)) == ["us-2019"]
    assert passing(F.eq("region", "eu") & F.between("year", 2021, 2021.0)) == ["eu-2021"]
    assert passing(F.in_("year", ["2021"])) == []
    # $contains holds on lists only; $in holds when any item of a list does
    assert passing(F.contains("path", "hr")) == []
    assert passing(F.in_("tags", ["sales", "none"])) == ["us-2019"]
    assert passing(F.in_("region", [])) == []
    assert passing(F.all_of()) == ["bare", "eu-2021", "us-2019"] and F.all_of().to_json() == {}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: F.gt("year", "2020"), "filter.year.$gt: $gt compares numbers, not a string"),
        (lambda: F.gte("year", True), "filter.year.$gte: $gte compares numbers, not a boolean"),
        (lambda: F.eq("1st", "x"), 'filter.1st: "1st" is not a valid attribute key'),
        (lambda: F.eq("region", ["eu"]), "filter.region.$eq: $eq compares one value; use $in for a list"),
        (lambda: F.eq("year", float("nan")), "filter.year.$eq: must be a finite number"),
        (lambda: F.eq("year", 2**63), "filter.year.$eq: an integer must lie within"),
        (lambda: F.in_("region", [None]), "filter.region.$in[0]: must be a string, a number or a boolean"),
        (lambda: F.starts_with("path", "\ud800"), "filter.path.$starts_with: contains a lone surrogate"),
        (lambda: F.in_("region", ["x"] * 1001), "filter.region.$in: at most 1,000 values"),
        (lambda: F.any_of(), "any_of needs at least one filter"),
    ],
)
def test_a_filter_the_api_would_refuse_fails_where_it_is_built_naming_the_place(build, message):
    # When a filter breaks a rule of the language / Then InvalidFilter (a ValueError) says where, as the 422 would
    with pytest.raises(InvalidFilter) as refused:
        build()
    assert str(refused.value).startswith(message), str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_the_limits_hold_for_the_whole_expression_not_only_for_its_parts():
    # Given MAX_CLAUSES comparisons, each valid
    parts = [F.eq(f"k{i}", i) for i in range(MAX_CLAUSES)]
    assert len(F.all_of(*parts).to_json()["$and"]) == MAX_CLAUSES
    # When one more is added / Then the combination is refused, like the server refuses it
    with pytest.raises(InvalidFilter, match=rf"filter.\$and: at most {MAX_CLAUSES} clauses"):
        F.all_of(*parts) & F.eq("one_more", 1)
    # And two halves that each pass but together hold one comparison too many
    half = MAX_CLAUSES // 2
    with pytest.raises(InvalidFilter, match=f"more than {MAX_CLAUSES} comparisons in one filter"):
        F.all_of(*parts[:half]) | F.all_of(*parts[half:], F.eq("one_more", 1))
    # And alternating AND/OR deeper than the depth limit is refused too
    deep = F.eq("a", 1)
    with pytest.raises(InvalidFilter, match="nested deeper than 4 levels"):
        for i in range(5):
            deep = (deep | F.eq(f"b{i}", i)) if i % 2 == 0 else (deep & F.eq(f"c{i}", i))
    with pytest.raises(TypeError):
        F.eq("a", 1) & {"b": {"$eq": 2}}


def test_parse_reads_the_json_form_and_expression_json_writes_it_back():
    # Given the filter language's shorthand (keys side by side, a bare value for $eq)
    parsed = F.parse({"region": "eu", "year": {"$gte": 2020, "$lt": 2030}, "$or": [{"a": 1}, {"b": {"$ne": 2}}]})
    # Then it is the same filter the builder makes, and its JSON round-trips through the server's parser
    assert parsed == F.eq("region", "eu") & F.gte("year", 2020) & F.lt("year", 2030) & (F.eq("a", 1) | F.ne("b", 2))
    assert parse_filter(parsed.to_json()) == parsed.expression
    assert expression_json(parse_filter({"x": {"$in": [1, True, "1"]}})) == {"x": {"$in": [1, True, "1"]}}
    with pytest.raises(InvalidFilter, match=r"filter.\$or\[1\].year.\$gte: \$gte compares numbers"):
        F.parse({"$or": [{"a": 1}, {"year": {"$gte": "2020"}}]})
    with pytest.raises(InvalidFilter, match=r"filter.\$nor: unknown operator"):
        F.parse({"$nor": [{"a": 1}]})
