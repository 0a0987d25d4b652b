"""The strict request-body parser: what it refuses, where it says the problem is, and that it stays linear."""

import json
import time

import pytest

from kindex.api.strict_json import (
    MAX_DEPTH,
    MAX_INTEGER,
    JsonBodyError,
    check_depth,
    parse,
)

pytestmark = pytest.mark.unit


def refusal(text: str) -> JsonBodyError:
    with pytest.raises(JsonBodyError) as caught:
        parse(text)
    return caught.value


@pytest.mark.parametrize(
    "text",
    [
        '{"title": "t", "k": 5, "min_score": 0.25, "groups": ["a", "b"], "filters": {"language": "en"}}',
        "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        json.dumps({"k": MAX_INTEGER, "j": -MAX_INTEGER, "f": 1.5e300, "z": -0.0}),
        json.dumps({"content": "[[[{{{" * 1000 + '"\\'}),  # brackets, quotes and backslashes inside a string
        json.dumps({"emoji": "😀 déjà"}),  # escaped as a valid surrogate pair by json.dumps
        '"just a string"',
    ],
)
def test_ordinary_bodies_parse_as_json_loads_parses_them(text):
    assert parse(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("[" * 10_000 + "]" * 10_000, ""),
        ('{"a": 1, "filters": ' + "[" * 65 + "]" * 65 + "}", "filters"),
        ('{"s": "{{{{", "deep": ' + '{"x": ' * 70 + "1" + "}" * 70 + "}", "deep"),
        ('{"open": ' + "[" * 100_000, "open"),  # unterminated as well as deep
    ],
)
def test_nesting_deeper_than_the_limit_is_malformed_and_names_the_top_level_field(text, path):
    # When a body nests deeper than 64 levels
    error = refusal(text)
    # Then it is refused before json.loads could recurse, naming the field it is under
    assert error.malformed and error.path == path
    assert f"nested deeper than {MAX_DEPTH} levels" in str(error)


def test_depth_counts_only_brackets_outside_strings():
    # Given 1,000 brackets inside strings, escaped quotes and backslashes included, at a real depth of 2
    text = json.dumps({"a": ["[" * 500 + '\\"' + "{" * 500, "\\", '"']})
    # Then the depth check passes
    check_depth(text)
    assert parse(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"title": "a", "title": "b"}', "title"),
        ('{"filters": {"language": "en", "mimetype": "x", "language": "fr"}}', "filters.language"),
        ('{"documents": [{"document_id": "a"}, {"document_id": "b", "document_id": "c"}]}', "documents.1.document_id"),
    ],
)
def test_duplicate_keys_are_refused_naming_the_key(text, path):
    error = refusal(text)
    assert not error.malformed and error.path == path and str(error) == f"{path}: duplicate key"


@pytest.mark.parametrize(
    ("text", "path", "word"),
    [
        ('{"k": NaN}', "k", "NaN"),
        ('{"min_score": Infinity}', "min_score", "Infinity"),
        (
            '{"rights_check_method_configuration": {"timeout": -Infinity}}',
            "rights_check_method_configuration.timeout",
            "-Infinity",
        ),
        ('{"min_score": 1e999}', "min_score", "overflows"),
        ('{"pages": [1, 2, -1e400]}', "pages.2", "overflows"),
        ("NaN", "", "NaN"),
    ],
)
def test_non_finite_numbers_are_refused_naming_the_field(text, path, word):
    error = refusal(text)
    assert not error.malformed and error.path == path and word in str(error)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"chunking_max_size": ' + "9" * 4000 + "}", "chunking_max_size"),
        ('{"chunking_max_size": ' + "9" * 5000 + "}", "chunking_max_size"),  # past Python's int conversion limit
        ('{"k": 9007199254740992}', "k"),
        ('{"a": {"b": [-' + "1" * 30 + "]}}", "a.b.0"),
    ],
)
def test_integers_beyond_the_json_safe_range_are_refused_naming_the_field(text, path):
    error = refusal(text)
    assert not error.malformed and error.path == path and "integer out of range" in str(error)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"content": "a\\ud800b"}', "content"),
        ('{"groups": ["ok", "\\udc00"]}', "groups.1"),
        ('{"x": {"\\ud83d": 1}}', "x"),
    ],
)
def test_lone_surrogates_are_refused_naming_the_field(text, path):
    error = refusal(text)
    assert not error.malformed and error.path == path and "surrogate" in str(error)


@pytest.mark.parametrize("text", ["{not json", "[1, 2", "", '{"a": 1,}', '"unterminated'])
def test_invalid_json_is_malformed(text):
    error = refusal(text)
    assert error.malformed and "not valid JSON" in str(error)


@pytest.mark.slow
@pytest.mark.parametrize(
    "hostile",
    [
        '"' + '\\"' * 2_000_000,  # an unterminated string of escaped quotes (quadratic for a string regex)
        "[" + ",".join(["[]"] * 1_000_000) + "]",  # a million brackets, never deep
        '{"x": ' + "[]," * 1_000_000 + "[" * 70,  # deep only at the very end
    ],
)
def test_hostile_bodies_are_judged_in_linear_time(hostile):
    # When a few MB of hostile JSON are parsed
    started = time.perf_counter()
    try:
        parse(hostile)
    except JsonBodyError:
        pass
    # Then it ends: measured 0.03-1.2 s (several times that on a loaded CI machine), where a quadratic scan of a
    # million tokens would run for hours; the bound is loose so that only the latter can fail it
    assert time.perf_counter() - started < 60
