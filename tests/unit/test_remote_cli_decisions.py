"""The remote CLI's decisions without a server: what ingest sends again, where it connects, which exit code an
error gets."""

import argparse
import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from kindex.api.models import DocumentOut
from kindex.client import errors
from kindex.domain.models import Collection, DocumentSummary
from kindex_local import remote_cli, remote_ingest

pytestmark = pytest.mark.unit


class StoredDocuments:
    """Just the calls `stored_summaries` and `send_file` make, over a dict; records the reads and the uploads."""

    def __init__(self, documents: dict[str, DocumentOut]):
        self.documents = documents
        self.uploaded: list[str] = []
        self.reads: list[str] = []

    def get_collection(self, collection: str) -> Collection:
        self.reads.append("collection")
        return Collection(id=collection, embedding_model="hash:384", document_count=len(self.documents))

    def iter_document_summaries(self, collection: str, page_size: int):
        pages = -(-len(self.documents) // page_size)
        self.reads.extend(["list"] * pages)
        return iter([DocumentSummary.of(d) for _, d in sorted(self.documents.items())])

    def get_document(self, collection: str, document: str) -> DocumentOut:
        self.reads.append(document)
        if document not in self.documents:
            raise errors.NotFound(404, "not_found", "no such document")
        return self.documents[document]

    def upload_file(self, collection: str, document: str, path) -> None:
        self.uploaded.append(document)


@pytest.mark.parametrize(
    "stored, expected, sent",
    [
        (None, "uploaded", True),
        ({"status": "indexed"}, "unchanged", False),
        ({"status": "pending"}, "waiting", False),
        ({"status": "in_progress"}, "waiting", False),
        (
            {"status": "failed", "failure_reason": "CorruptFile: bad xref", "failure_retryable": False},
            "failed:CorruptFile: bad xref (unchanged file, not sent again)",
            False,
        ),
        ({"status": "failed", "failure_reason": "EmbeddingFailed: 503", "failure_retryable": True}, "uploaded", True),
        ({"status": "indexed", "content_sha256": "0" * 64}, "uploaded", True),  # the file changed
    ],
)
def test_ingest_sends_a_file_only_when_the_deployment_does_not_hold_these_bytes_for_good(
    tmp_path, stored, expected, sent
):
    path = tmp_path / "a.md"
    path.write_bytes(b"# A\n\nalpha\n")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    documents = (
        {}
        if stored is None
        else {"a.md": DocumentOut(id="a.md", collection="c", **{"content_sha256": digest, **stored})}
    )
    client = StoredDocuments(documents)
    with ThreadPoolExecutor(2) as pool:
        summary = remote_ingest.stored_summaries(client, "c", ["a.md"], pool)["a.md"]
    assert remote_ingest.send_file(client, "c", "a.md", path, summary) == expected
    assert client.uploaded == (["a.md"] if sent else [])


@pytest.mark.slow
@pytest.mark.parametrize(
    "stored, asked, reads",
    [
        (3, ["d0", "missing"], ["collection", "list"]),  # one page beats two GETs
        (3, ["d0"], ["collection", "d0"]),  # one GET beats one page
        (
            2500,
            ["d0", "d1", "missing"],
            ["collection", "d0", "d1", "missing"],
        ),  # three GETs are no more than three pages
        (2500, ["d0", "d1", "d2", "missing"], ["collection", "list", "list", "list"]),
        (0, [], ["collection"]),
    ],
)
def test_ingest_reads_what_the_deployment_holds_in_the_fewest_requests(stored, asked, reads):
    # Given a deployment holding `stored` documents
    client = StoredDocuments({f"d{i}": DocumentOut(id=f"d{i}", collection="c", title=f"t{i}") for i in range(stored)})
    # When the CLI asks for the named ones
    with ThreadPoolExecutor(1) as pool:
        found = remote_ingest.stored_summaries(client, "c", asked, pool)
    # Then it reads them through the listing or by GET, whichever takes fewer requests, and a missing one is None
    assert client.reads == reads
    assert found == {d: None if d == "missing" else DocumentSummary.of(client.documents[d]) for d in asked}


def namespace(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"url": None, "key": None, "profile": None, **given})


def test_flags_win_over_the_profile_and_the_profile_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "kindex").mkdir()
    (tmp_path / "kindex" / "profiles.toml").write_text('[p]\nurl = "http://profile"\nkey = "profile-key"\n')
    (tmp_path / "kindex" / "profiles.toml").chmod(0o600)
    monkeypatch.setenv("KINDEX_URL", "http://env")
    monkeypatch.setenv("KINDEX_API_KEY", "env-key")
    monkeypatch.delenv("KINDEX_PROFILE", raising=False)
    assert remote_cli.target(namespace()) == ("http://env", "env-key")
    assert remote_cli.target(namespace(profile="p")) == ("http://profile", "profile-key")
    assert remote_cli.target(namespace(profile="p", key="flag-key")) == ("http://profile", "flag-key")
    assert remote_cli.target(namespace(url="http://flag", profile="p")) == ("http://flag", "profile-key")


@pytest.mark.parametrize(
    "content, problem",
    [
        ('[p]\nurl = "u"\nkey = 5\n', "only string values"),
        ('[p]\nurl = "u"\nsecret = "x"\n', "only string values"),
        ("[p\n", "not valid TOML"),
        ('p = "x"\n', "no profile 'p'"),
    ],
)
def test_a_profile_that_cannot_be_used_is_a_usage_error(tmp_path, monkeypatch, content, problem):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "kindex").mkdir()
    (tmp_path / "kindex" / "profiles.toml").write_text(content)
    with pytest.raises(remote_cli.UsageError, match=problem):
        remote_cli.target(namespace(profile="p"))


def test_ingest_and_reindex_stay_local_unless_a_deployment_is_named(monkeypatch):
    for name in ("KINDEX_URL", "KINDEX_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    assert not remote_cli.remote_requested(namespace())
    assert remote_cli.remote_requested(namespace(url="http://x"))
    assert remote_cli.remote_requested(namespace(profile="p"))
    monkeypatch.setenv("KINDEX_URL", "http://x")
    assert remote_cli.remote_requested(namespace())


@pytest.mark.parametrize(
    "error, code",
    [
        (errors.InvalidInput(422, "invalid_input", "x"), 2),
        (errors.BadRequest(400, "bad_request", "x"), 2),
        (errors.PayloadTooLarge(413, "payload_too_large", "x"), 2),
        (errors.Unauthorized(401, "unauthorized", "x"), 3),
        (errors.Forbidden(403, "forbidden", "x"), 3),
        (errors.NotFound(404, "not_found", "x"), 4),
        (errors.Conflict(409, "conflict", "x"), 5),
        (errors.Throttled(429, "throttled", "x"), 6),
        (errors.ServiceUnavailable(503, "unavailable", "x"), 6),
        (errors.ConnectionFailed("refused"), 6),
        (errors.ServerError(500, "internal_error", "x"), 1),
        (errors.ApiError(418, "teapot", "x"), 1),
    ],
)
def test_each_error_class_has_its_documented_exit_code(error, code):
    assert remote_cli._exit_code(error) == code
    assert code in remote_cli.EXIT_CODES


def test_the_table_pads_columns_and_cuts_the_free_text_to_one_line(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    text = remote_cli.table([["[1]", "0.5", "a\nlong   text " * 10]], ["cite", "score", "text"])
    header, row = text.splitlines()
    assert header.split() == ["cite", "score", "text"]
    assert row.startswith("[1]   0.5    a long text") and row.endswith("…") and len(row) <= 40
