"""Collection and document validation, partial-update merging, keys and cursors."""

import subprocess
import sys

import pytest
from pydantic import ValidationError

from kindex.adapters.embedders.registry import known_model
from kindex.app.catalog import merge_collection
from kindex.domain import keys
from kindex.domain.errors import InvalidInput
from kindex.domain.models import (
    DEFAULT_PAGE_SIZE,
    MAX_CHUNK_SIZE,
    MAX_PAGE_SIZE,
    ChunkingMethod,
    Collection,
    CollectionInput,
    Document,
    DocumentInput,
    PageRequest,
    check_id,
    check_url,
    is_safe_url,
    normalize_id,
)
from kindex.domain.query import CitationDocument, QueryRequest
from kindex.domain.transfer import TransferDocument

pytestmark = pytest.mark.unit

MODEL = "local:all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "My Document",
        "déjà vu",
        "x" * 255,
        "a#b%c",
        "日本語",
        "emoji 😀",
        "...",
        ".hidden",
        ".tmp-x",
        "%2E",
        "é" * 42,
    ],
)
def test_valid_ids(value):
    assert check_id(value) == value


@pytest.mark.parametrize("value", ["", "x" * 256, "a/b", "tab\there", "nl\n", "nul\x00", "del\x7f"])
def test_invalid_ids(value):
    with pytest.raises(ValueError):
        check_id(value)


@pytest.mark.parametrize(
    "value, message",
    [
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("a\ud800b", "surrogate"),
        ("é" * 43, "258 bytes once URL-encoded, at most 255"),  # one file name per id in the folder store
        ("a b" * 64, "at most 255"),
    ],
)
def test_new_ids_must_map_to_one_storage_path(value, message):
    with pytest.raises(ValueError, match=message):
        check_id(value)


def test_records_stored_before_the_id_rules_tightened_still_load():
    # Given ids a previous version accepted and stored / When their records are read back / Then they load,
    # so a tenant's listing, reindex pass or delete never fails on them
    assert Document(id="..", collection="é" * 100).collection == "é" * 100
    assert Collection(id=".", embedding_model="hash:384").id == "."


def test_new_collection_gets_deployment_default_model_and_maxchars_defaults():
    # Given an empty body, When the collection is created
    collection = merge_collection(None, "c", {}, MODEL)
    # Then XWiki defaults apply
    assert (collection.embedding_model, collection.chunking_method.value) == (MODEL, "maxChars")
    assert (collection.chunking_max_size, collection.chunking_overlap_offset) == (2000, 0)
    assert collection.rights_check_method == "public" and collection.config_version == 1


def test_tokens_method_defaults_and_limits():
    collection = merge_collection(None, "c", {"chunking_method": "tokens"}, MODEL)
    assert (collection.chunking_max_size, collection.chunking_overlap_offset) == (800, 400)
    for size in (99, 8193):
        with pytest.raises(InvalidInput, match="between 100 and 8192"):
            merge_collection(
                None, "c", {"chunking_method": "tokens", "chunking_max_size": size, "chunking_overlap_offset": 0}, MODEL
            )
    with pytest.raises(InvalidInput, match="half"):
        merge_collection(
            None, "c", {"chunking_method": "tokens", "chunking_max_size": 200, "chunking_overlap_offset": 101}, MODEL
        )
    # overlap may be exactly half for tokens
    assert (
        merge_collection(
            None, "c", {"chunking_method": "tokens", "chunking_max_size": 200, "chunking_overlap_offset": 100}, MODEL
        ).chunking_overlap_offset
        == 100
    )


def test_maxchars_limits():
    with pytest.raises(InvalidInput, match="at least 10"):
        merge_collection(None, "c", {"chunking_max_size": 9}, MODEL)
    with pytest.raises(InvalidInput, match="less than half"):
        merge_collection(None, "c", {"chunking_max_size": 100, "chunking_overlap_offset": 50}, MODEL)
    assert (
        merge_collection(
            None, "c", {"chunking_max_size": 100, "chunking_overlap_offset": 49}, MODEL
        ).chunking_overlap_offset
        == 49
    )


def test_external_rights_check_needs_http_url():
    for config in ({}, {"url": "ftp://x"}, {"url": "not a url"}, {"url": 5}):
        with pytest.raises(InvalidInput, match="url"):
            merge_collection(
                None, "c", {"rights_check_method": "external", "rights_check_method_configuration": config}, MODEL
            )
    ok = merge_collection(
        None,
        "c",
        {
            "rights_check_method": "external",
            "rights_check_method_configuration": {"url": "https://rights.example/check"},
        },
        MODEL,
    )
    assert ok.rights_check_method == "external"
    with pytest.raises(InvalidInput, match="rights_check_method"):
        merge_collection(None, "c", {"rights_check_method": "magic"}, MODEL)


def test_query_groups_accept_comma_separated_string():
    body = CollectionInput.model_validate({"query_groups": " admins, , readers "})
    assert merge_collection(None, "c", body.changes(), MODEL).query_groups == ["admins", "readers"]


def test_unknown_field_rejected_and_read_only_fields_ignored():
    with pytest.raises(Exception, match="bogus"):
        CollectionInput.model_validate({"bogus": 1})
    body = CollectionInput.model_validate(
        {"title": "t", "document_count": 99, "config_version": 7, "created_at": "whenever"}
    )
    assert body.changes() == {"title": "t"}


def test_partial_update_changes_only_present_fields_and_bumps_config_version_on_config_change():
    # Given a collection with a title and groups
    original = merge_collection(None, "c", {"title": "T", "query_groups": ["g"]}, MODEL)
    # When only the title changes
    renamed = merge_collection(original, "c", {"title": "U"}, MODEL)
    # Then nothing else changes and the config version stays
    assert renamed.query_groups == ["g"] and renamed.config_version == 1 and renamed.title == "U"
    # When the chunking size changes, the config version is bumped
    rechunked = merge_collection(renamed, "c", {"chunking_max_size": 500}, MODEL)
    assert rechunked.config_version == 2 and rechunked.title == "U"
    # When the method changes without sizes, the new method's defaults apply
    tokens = merge_collection(rechunked, "c", {"chunking_method": "tokens"}, MODEL)
    assert (tokens.chunking_max_size, tokens.chunking_overlap_offset, tokens.config_version) == (800, 400, 3)


def test_null_for_a_writable_field_is_invalid():
    with pytest.raises(InvalidInput, match="title"):
        merge_collection(None, "c", {"title": None}, MODEL)


def test_embedding_model_shape_checked():
    with pytest.raises(InvalidInput, match="embedding_model"):
        merge_collection(None, "c", {"embedding_model": "gpt"}, MODEL)
    assert merge_collection(None, "c", {"embedding_model": "openai:text-embedding-3-small"}, MODEL)


def test_blob_keys_round_trip_and_s3_event_decoding():
    # ('/' cannot be in an id: `check_id` refuses it, and a key whose part decodes to one names no document)
    key = keys.blob_key("t 1", "My Coll", "déjà#vu?", "report 2024.pdf")
    assert key == "tenants/t%201/collections/My%20Coll/documents/d%C3%A9j%C3%A0%23vu%3F/report%202024.pdf"
    assert keys.parse_blob_key(key) == ("t 1", "My Coll", "déjà#vu?", "report 2024.pdf")
    # S3 notifications form-encode the key: '%' becomes %25 and spaces would be '+'
    as_in_event = key.replace("%", "%25").replace("/", "%2F")
    assert keys.decode_s3_event_key(as_in_event) == key
    assert keys.parse_blob_key("tenants/x/other") is None


def test_cursor_round_trip_and_garbage():
    assert keys.decode_cursor(keys.encode_cursor("déjà vu")) == "déjà vu"
    assert keys.decode_cursor(keys.encode_cursor("\U0001f600")) == "\U0001f600"
    # a lone surrogate spelt in the cursor's JSON ("\\ud800") is no id of ours, and no store could encode it
    for garbage in ("!!!", "eyJ4IjogMX0", "", keys.encode_cursor("\ud800"), keys.encode_cursor("a\udfffb")):
        with pytest.raises(InvalidInput):
            keys.decode_cursor(garbage)


def test_collection_model_rejects_unknown_fields_at_storage_level():
    with pytest.raises(ValidationError) as refused:
        Collection.model_validate({"id": "c", "embedding_model": MODEL, "nope": 1})
    assert [(e["type"], e["loc"]) for e in refused.value.errors()] == [("extra_forbidden", ("nope",))]


# --- strict, bounded numbers and the embedding-model value type -----------------------------------------


@pytest.mark.parametrize("field", ["chunking_max_size", "chunking_overlap_offset"])
@pytest.mark.parametrize("value", ["500", 500.0, True, [500]])
def test_chunking_sizes_must_be_json_integers(field, value):
    with pytest.raises(ValidationError) as caught:
        CollectionInput.model_validate({field: value})
    assert caught.value.errors()[0]["loc"] == (field,)


def test_chunking_max_size_has_a_documented_maximum():
    # Given the largest maxChars size, it is accepted; one more is refused at the edge, naming the field
    largest = MAX_CHUNK_SIZE[ChunkingMethod.MAX_CHARS]
    body = CollectionInput.model_validate({"chunking_max_size": largest})
    assert merge_collection(None, "c", body.changes(), MODEL).chunking_max_size == largest
    with pytest.raises(ValidationError, match="chunking_max_size"):
        CollectionInput.model_validate({"chunking_max_size": largest + 1})
    with pytest.raises(ValidationError, match="chunking_overlap_offset"):
        CollectionInput.model_validate({"chunking_overlap_offset": largest})
    # And a save judges the size even when it did not come through the edge
    with pytest.raises(InvalidInput, match="chunking_max_size must be at most 100000"):
        merge_collection(None, "c", {"chunking_max_size": 10**4000}, MODEL)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("hash:0384", "hash:384"),
        ("local:all-MiniLM-L6-v2", "local:all-MiniLM-L6-v2"),
        ("openai:text-embedding-3-small@1536", "openai:text-embedding-3-small"),
    ],
)
def test_embedding_model_is_canonicalised_at_the_edge(given, stored):
    body = CollectionInput.model_validate({"embedding_model": given})
    assert merge_collection(None, "c", body.changes(), MODEL).embedding_model == stored


@pytest.mark.parametrize(
    "model", ["local:foo", "hash:4", "openai:unknown-model", "openai:x?dimensions=5", "gpt", "LOCAL:all-MiniLM-L6-v2"]
)
def test_embedding_models_the_registry_cannot_build_are_refused_when_saved(model):
    # The same value type the registry builds from: what passes here always builds at ingest
    assert not known_model(model)
    with pytest.raises(ValidationError, match="embedding_model"):
        CollectionInput.model_validate({"embedding_model": model})
    with pytest.raises(InvalidInput, match="embedding_model"):
        merge_collection(None, "c", {"embedding_model": model}, MODEL)


def test_a_stored_collection_with_a_model_that_is_now_refused_still_loads_and_is_judged_at_its_next_save():
    # Given a collection stored before the registry check (its model passed the old pattern)
    stored = Collection.model_validate_json(Collection(id="c", embedding_model="local:foo").model_dump_json())
    # When it is read it loads; when it is saved again with only a new title, the save names the model
    assert stored.embedding_model == "local:foo"
    with pytest.raises(InvalidInput, match="embedding_model"):
        merge_collection(stored, "c", {"title": "new"}, MODEL)
    # And a save with a model the registry knows repairs it
    assert merge_collection(stored, "c", {"embedding_model": "hash:384"}, MODEL).embedding_model == "hash:384"


@pytest.mark.slow
def test_domain_models_and_model_names_import_no_numerical_library():
    script = (
        "import sys; import kindex.domain.models, kindex.domain.query; "
        "from kindex.adapters.embedders.registry import known_model as k; "
        "assert all(k(m) for m in ('hash:8', 'local:all-MiniLM-L6-v2', 'openai:text-embedding-3-small')); "
        "print(sorted(m for m in ('numpy', 'onnxruntime', 'openai', 'tiktoken') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


@pytest.mark.parametrize("k", ["5", True, 5.0, 0, 101, None])
def test_query_k_must_be_a_json_integer_within_bounds(k):
    with pytest.raises(ValidationError) as caught:
        QueryRequest.model_validate({"query": "q", "k": k})
    assert caught.value.errors()[0]["loc"] == ("k",)


@pytest.mark.parametrize("min_score", ["0.5", True, float("nan"), float("inf"), 1e7])
def test_query_min_score_must_be_a_finite_bounded_json_number(min_score):
    with pytest.raises(ValidationError, match="min_score"):
        QueryRequest.model_validate({"query": "q", "min_score": min_score})


def test_query_numbers_of_the_right_kind_pass():
    request = QueryRequest.model_validate({"query": "q", "k": 5, "min_score": 0})
    assert (request.k, request.min_score) == (5, 0.0)


@pytest.mark.parametrize("pages", [["3"], [True], [1.0], [0], [10**7], list(range(1, 1002))])
def test_cited_pages_are_bounded_json_integers(pages):
    with pytest.raises(ValidationError, match="pages"):
        CitationDocument.model_validate({"document_id": "d", "pages": pages})


@pytest.mark.parametrize("field, value", [("allow_guests", "true"), ("allow_guests", 1)])
def test_booleans_must_be_json_booleans(field, value):
    with pytest.raises(ValidationError, match=field):
        CollectionInput.model_validate({field: value})


@pytest.mark.parametrize(
    ("number", "served"), [(1, 1), (100, 100), (MAX_PAGE_SIZE, MAX_PAGE_SIZE), (-1, MAX_PAGE_SIZE)]
)
def test_page_size_is_bounded_and_minus_one_is_the_largest_page(number, served):
    assert PageRequest(number=number).number == served
    assert PageRequest().number == DEFAULT_PAGE_SIZE <= 100


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("number", 0),
        ("number", -2),
        ("number", MAX_PAGE_SIZE + 1),
        ("number", 2**63),
        ("start", -1),
        ("start", 10**9 + 1),
        ("start", 2**63),
    ],
)
def test_page_requests_out_of_bounds_are_refused_naming_the_field(field, value):
    with pytest.raises(ValidationError) as caught:
        PageRequest.model_validate({field: value})
    assert caught.value.errors()[0]["loc"] == (field,)


NFD_CAFE = "cafe\u0301"


def test_ids_are_compared_in_nfc_form_and_new_ones_must_be_nfc():
    # Given the decomposed 'café' a macOS file name carries / Then its one form is the precomposed one
    assert normalize_id(NFD_CAFE) == "caf\u00e9" and normalize_id("caf\u00e9") == "caf\u00e9"
    # And a new id sent decomposed (only a body can: path ids are normalized first) is refused, saying why
    with pytest.raises(ValueError, match="NFC"):
        check_id(NFD_CAFE)


@pytest.mark.parametrize(
    "value, message",
    [
        ("a\u200bb", "format or bidi characters \\(U\\+200B ZERO WIDTH SPACE\\)"),
        ("a\u200db", "U\\+200D"),
        ("a\u00adb", "U\\+00AD SOFT HYPHEN"),
        ("\ufeffa", "U\\+FEFF"),
        ("invoice\u202efdp.exe", "U\\+202E RIGHT-TO-LEFT OVERRIDE"),
        ("a\u2066b\u2069", "U\\+2066"),
        ("a\u200fb", "U\\+200F RIGHT-TO-LEFT MARK"),
        ("a\u2028b", "line separator"),
        ("a\u2029b", "paragraph separator"),
        ("hr\uff0fpolicy", "stand for '/' \\(U\\+FF0F FULLWIDTH SOLIDUS\\)"),
        ("\u2100", "U\\+2100"),
        ("hr\u2215policy", "U\\+2215 DIVISION SLASH"),
        ("1\u20442", "U\\+2044 FRACTION SLASH"),
        ("a\x85b", "control"),
    ],
)
def test_new_ids_refuse_invisible_bidi_and_slash_like_characters(value, message):
    with pytest.raises(ValueError, match=message):
        check_id(value)


@pytest.mark.parametrize(
    "value",
    [
        "a>b",
        "<excerpt>",
        'say "hi"',
        "a, b",
        "AT&T",
        "it's",
        "x  y",
        " lead",
        "日本語 <文書>",
        "ノート",
        "Ölfeld",
        "\\back",
        "emoji 😀",
    ],
)
def test_punctuation_spaces_and_unicode_stay_accepted(value):
    assert check_id(value) == value


def test_stored_ids_with_now_refused_characters_still_load():
    # Given records stored before the rules tightened / When read back / Then they load (readable and deletable)
    assert Document(id=NFD_CAFE, collection="a\u200bb").id == NFD_CAFE
    assert Collection(id="hr\uff0fpolicy", embedding_model="hash:8").id == "hr\uff0fpolicy"


@pytest.mark.parametrize(
    "url",
    [
        "https://wiki.example/a",
        "http://h:8080/x?y=1#z",
        "HTTPS://H/x",
        "/wiki/page",
        "page.html",
        "../up",
        "//cdn.example/x",
        "docs/a:b",
        "https://e.example/a b)c",
    ],
)
def test_safe_urls(url):
    assert is_safe_url(url) and check_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "java\tscript:alert(1)",
        " javascript:alert(1)",
        "javascript:alert(1) ",
        "data:text/html,<b>x</b>",
        "vbscript:x",
        "file:///etc/passwd",
        "mailto:a@b.c",
        "https:no-host",
        "c:\\x",
        "\u200bjavascript:x",
        "https://[::1",
    ],
)
def test_unsafe_urls_are_refused_on_write(url):
    assert not is_safe_url(url)
    with pytest.raises(ValidationError, match="url"):
        DocumentInput(url=url)
    with pytest.raises(ValidationError, match="url"):
        TransferDocument(id="d", url=url, chunk_count=1)


def test_a_stored_unsafe_url_reads_as_no_link():
    # Given a record written before the url rule / When it is read / Then it loads, without the link
    stored = Document(id="d", collection="c", url="javascript:alert(document.domain)")
    assert stored.url == ""
    assert Document(id="d", collection="c", url="https://ok.example").url == "https://ok.example"
