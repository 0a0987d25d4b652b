"""The CLI's attribute and access options (`kindex ingest`, `kindex documents put`) and `kindex query --filter`:
how a value is typed, what is refused before anything is sent, and when a stored document needs them written."""

import argparse

import pytest

from kindex.domain.errors import InvalidInput
from kindex.domain.filters import Access
from kindex.domain.models import Document
from kindex_local.cli import build_parser
from kindex_local.ingest_cli import attribute_option, document_metadata, metadata_changes

pytestmark = pytest.mark.unit


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["ingest", "docs", "--collection", "c", *argv])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("region=eu", ("region", "eu")),
        ("year=2020", ("year", "2020")),  # '=' is always text: a zip code or an id keeps its leading zeros
        ("zip=007", ("zip", "007")),
        ("year:=2020", ("year", 2020)),
        ("ratio:=0.25", ("ratio", 0.25)),
        ("draft:=false", ("draft", False)),
        ('tags:=["hr", "policy"]', ("tags", ["hr", "policy"])),
        ('name:="a=b"', ("name", "a=b")),
        ("formula=a=b", ("formula", "a=b")),  # the first '=' separates: a key holds no '='
        ("empty=", ("empty", "")),
    ],
)
def test_an_attribute_is_text_after_equals_and_json_after_colon_equals(text, expected):
    assert attribute_option(text) == expected


@pytest.mark.parametrize("text", ["region", "=eu", ":=1", "year:=20x0", 'tags:=["a"'])
def test_an_attribute_without_a_key_or_with_broken_json_is_a_usage_error(text):
    with pytest.raises(argparse.ArgumentTypeError):
        attribute_option(text)


def test_the_flags_give_attributes_and_a_whole_access_list_checked_like_the_api_checks_them(capsys):
    # Given an ingest with attributes of each kind and access flags
    args = parsed(
        "--attribute",
        "region=eu",
        "--attribute",
        "year:=2024",
        "--attribute",
        'tags:=["hr"]',
        "--access-group",
        "staff",
        "--access-group",
        "hr",
        "--access-user",
        "ann",
        "--deny-user",
        "bob",
    )
    # Then the metadata is exactly that, with every access list present (the flags replace the whole list)
    assert document_metadata(args) == {
        "attributes": {"region": "eu", "year": 2024, "tags": ["hr"]},
        "access": {"users": ["ann"], "groups": ["staff", "hr"], "deny_users": ["bob"], "deny_groups": []},
    }
    assert capsys.readouterr().err == ""
    # And without any of these flags there is nothing to write (a document keeps what it has)
    assert document_metadata(parsed()) == {}


def test_a_number_given_as_text_is_kept_as_text_with_a_note_saying_how_to_give_the_number(capsys):
    assert document_metadata(parsed("--attribute", "year=2020")) == {"attributes": {"year": "2020"}}
    assert "year:=2020 gives the number" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--attribute", "region=eu", "--attribute", "region=us"], "--attribute region: given twice"),
        (["--attribute", "1st=x"], '--attribute: "1st" is not a valid attribute key'),
        (["--attribute", "year:=1e400"], "--attribute.year: must be a finite number"),
        (["--attribute", "tags:=[1, 2]"], "--attribute.tags[0]: a list holds strings only"),
        (["--attribute", 'nested:={"a": 1}'], "--attribute.nested: must be a string, a number or a boolean"),
        (["--attribute", "big=" + "x" * 1025], "--attribute.big: longer than 1,024 characters"),
        (["--access-group", ""], "--access-group[0]: a principal is a non-empty string"),
        (["--deny-user", "u" * 257], "--deny-user[0]: longer than 256 characters"),
    ],
)
def test_a_value_the_api_would_refuse_stops_the_command_naming_the_flag(argv, message):
    with pytest.raises(InvalidInput) as refused:
        document_metadata(parsed(*argv))
    assert str(refused.value).startswith(message), str(refused.value)


def test_a_bad_attribute_fails_the_ingest_with_exit_2_before_any_data_directory_is_opened(tmp_path, capsys):
    # Given a data directory that does not exist yet
    from kindex_local.cli import main

    data_dir = tmp_path / "never-created"
    # When an ingest names an invalid attribute key / Then it exits 2 naming the flag, and nothing was created
    code = main(["ingest", str(tmp_path), "--collection", "c", "--data-dir", str(data_dir), "--attribute", "bad key=x"])
    assert code == 2
    assert "--attribute" in capsys.readouterr().err
    assert not data_dir.exists()


def test_only_the_metadata_that_differs_from_the_stored_document_is_written_again():
    wanted = {
        "attributes": {"region": "eu", "year": 2024},
        "access": {"users": [], "groups": ["staff"], "deny_users": [], "deny_groups": []},
    }
    # A new document: everything
    assert metadata_changes(None, wanted) == wanted
    # A stored document holding the same values (an Access model, the year as a float): nothing
    same = type("Stored", (), {"attributes": {"year": 2024.0, "region": "eu"}, "access": Access(groups=("staff",))})()
    assert metadata_changes(same, wanted) == {}
    # A stored document whose access list differs (a deny added meanwhile): only the access list
    denied = type(
        "Stored",
        (),
        {"attributes": {"year": 2024, "region": "eu"}, "access": {"groups": ["staff"], "deny_users": ["bob"]}},
    )()
    assert metadata_changes(denied, wanted) == {"access": wanted["access"]}
    # A document from before attributes existed (no such field): both are written
    assert metadata_changes(Document(id="d", collection="c"), wanted) == wanted


def test_query_and_collection_commands_take_the_filter_and_the_document_access_mode():
    parser = build_parser()
    query = parser.parse_args(["query", "leave", "-c", "h", "--filter", '{"region": "eu"}'])
    assert query.filter == '{"region": "eu"}'
    put = parser.parse_args(["collections", "put", "h", "--document-access", "required"])
    assert put.document_access == "required"
    with pytest.raises(SystemExit):
        parser.parse_args(["collections", "put", "h", "--document-access", "sometimes"])
    documents = parser.parse_args(["documents", "put", "h", "d", "--attribute", "year:=2024", "--access-group", "g"])
    assert document_metadata(documents)["attributes"] == {"year": 2024}
