"""`KINDEX_SEARCH_URL`: `kindex serve` on an OpenSearch cluster instead of the embedded index (settings, the local
composition, the data directory id that names the server's indices)."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from kindex.adapters.aws.opensearch_index import OpenSearchIndex
from kindex.adapters.local.data_dir_id import ID_FILE, data_dir_id
from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.compose.local import LocalAdapters
from kindex.settings import SettingsError, load_settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9200",
        "https://search.example.com",
        "https://search.example.com/",
        "https://kindex:p%40ss@search.example.com:9243",
        "http://[::1]:9200",
    ],
)
def test_cluster_urls_are_accepted(url):
    assert load_settings({"KINDEX_SEARCH_URL": url}).search_url == url


@pytest.mark.parametrize(
    "url",
    [
        "127.0.0.1:9200",
        "ftp://host",
        "http://",
        "http://host:99999",
        "http://host:port",
        "http://host/opensearch",
        "http://host?x=1",
        "http://host/#f",
        "search.example.com",
    ],
)
def test_anything_but_a_cluster_url_stops_the_start(url):
    # When the URL is not scheme://host[:port] / Then a settings error that names the variable
    with pytest.raises(SettingsError, match="KINDEX_SEARCH_URL"):
        load_settings({"KINDEX_SEARCH_URL": url})


def test_a_password_in_the_url_is_in_no_message_and_no_repr():
    # Given a URL with a password and something wrong with it
    with pytest.raises(SettingsError) as refused:
        load_settings({"KINDEX_SEARCH_URL": "http://kindex:topsecret@host/path", "KINDEX_PORT": "-1"})
    # Then the message names both problems and never the password
    assert "topsecret" not in str(refused.value)
    assert "KINDEX_SEARCH_URL" in str(refused.value) and "KINDEX_PORT" in str(refused.value)
    # And a valid one is not in the settings' repr either
    assert "topsecret" not in repr(load_settings({"KINDEX_SEARCH_URL": "http://kindex:topsecret@host"}))


@pytest.mark.parametrize("prefix", ["kindex", "team-a_1", "0x", "a" * 64])
def test_index_prefixes_that_make_valid_index_names_are_accepted(prefix):
    assert load_settings({"KINDEX_SEARCH_INDEX_PREFIX": prefix}).search_index_prefix == prefix


@pytest.mark.parametrize("prefix", ["Kindex", "-x", "_x", "a/b", "a*", "a b", "a,b", "a:b", "é", "a" * 65])
def test_index_prefixes_that_are_no_index_name_are_refused(prefix):
    with pytest.raises(SettingsError, match="search_index_prefix"):
        load_settings({"KINDEX_SEARCH_INDEX_PREFIX": prefix})


def adapters(tmp_path, **environ) -> LocalAdapters:
    return LocalAdapters(load_settings({"KINDEX_DATA_DIR": str(tmp_path), **environ}))


def test_without_the_setting_the_server_keeps_the_embedded_index(tmp_path):
    # Given no KINDEX_SEARCH_URL / Then the embedded index in the data directory, and no id file is written
    assert isinstance(adapters(tmp_path).search_index, LocalSearchIndex)
    assert not (tmp_path / ID_FILE).exists()


def test_with_the_setting_the_server_uses_the_cluster_with_lucene_and_a_prefix_of_its_data_directory(tmp_path):
    # Given KINDEX_SEARCH_URL and nothing else
    index = adapters(tmp_path, KINDEX_SEARCH_URL="http://127.0.0.1:9200").search_index
    # Then an OpenSearch index with the lucene engine, unsigned, named after the data directory's id
    assert isinstance(index, OpenSearchIndex) and index.engine == "lucene"
    assert index._sigv4 is False
    assert index._prefix == f"kindex-local-{(tmp_path / ID_FILE).read_text().strip()}"
    # And another process on the same directory gets the same prefix; another directory another one
    assert adapters(tmp_path, KINDEX_SEARCH_URL="http://127.0.0.1:9200").search_index._prefix == index._prefix
    other = adapters(tmp_path / "other", KINDEX_SEARCH_URL="http://127.0.0.1:9200").search_index
    assert other._prefix != index._prefix


def test_the_configured_prefix_and_engine_win(tmp_path):
    index = adapters(
        tmp_path,
        KINDEX_SEARCH_URL="http://127.0.0.1:9200",
        KINDEX_SEARCH_INDEX_PREFIX="team-a",
        KINDEX_OPENSEARCH_ENGINE="faiss",
    ).search_index
    assert index._prefix == "team-a" and index.engine == "faiss"
    assert not (tmp_path / ID_FILE).exists()


@pytest.mark.parametrize(
    "url, sigv4",
    [
        ("https://search-kx-abc.eu-west-1.es.amazonaws.com", True),
        ("https://vpc-kx-abc.us-east-1.es.amazonaws.com:443", True),
        ("https://user:pw@search-kx-abc.eu-west-1.es.amazonaws.com", False),
        ("https://search.example.com", False),
        ("http://127.0.0.1:9200", False),
    ],
)
def test_only_an_amazon_domain_without_a_user_is_sigv4_signed(tmp_path, url, sigv4):
    assert adapters(tmp_path, KINDEX_SEARCH_URL=url).search_index._sigv4 is sigv4


def test_the_data_directory_id_is_created_once_private_and_the_same_for_racing_processes(tmp_path):
    # When many threads ask for the id of a new directory at once
    found: list[str] = []
    threads = [threading.Thread(target=lambda: found.append(data_dir_id(tmp_path / "data"))) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then they all got the one id, 12 hex digits, in an owner-only file, with no temporary file left over
    assert len(set(found)) == 1 and len(found[0]) == 12 and int(found[0], 16) >= 0
    assert stat.S_IMODE(os.stat(tmp_path / "data" / ID_FILE).st_mode) == 0o600
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [ID_FILE]


def test_a_damaged_id_file_stops_the_start_instead_of_naming_new_indices(tmp_path):
    # Given an id file that does not hold an id
    (tmp_path / ID_FILE).write_text("../../etc\n")
    # When the cluster index is built / Then a settings error, not a fresh prefix that would orphan the indices
    with pytest.raises(SettingsError, match="data directory id"):
        adapters(tmp_path, KINDEX_SEARCH_URL="http://127.0.0.1:9200").search_index  # noqa: B018
