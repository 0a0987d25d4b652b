"""The embedded index's keyword half (tantivy): migration from the older FTS5 index, a writer killed mid-commit,
tenants and partitions sharing ids, deletes never found again, filters before the top k, words as FTS5 saw them."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.adapters.local.search.keyword import tenant_folder
from kindex.domain.types import IndexRecord, SearchFilters
from tests.support.crash import kill_writer_after

pytestmark = pytest.mark.unit

MODEL = "hash:4"
VECTOR = (1.0, 0.0, 0.0, 0.0)


def record(
    chunk_id: str,
    text: str,
    *,
    tenant: str = "acme",
    collection: str = "c",
    document_id: str = "d",
    language: str | None = "en",
    mimetype: str | None = "text/plain",
) -> IndexRecord:
    return IndexRecord(
        tenant=tenant,
        collection=collection,
        document_id=document_id,
        chunk_id=chunk_id,
        vector=VECTOR,
        text=text,
        language=language,
        mimetype=mimetype,
    )


def ids(hits) -> list[str]:
    return [hit.chunk_id for hit in hits]


@pytest.fixture
def index(tmp_path):
    adapter = LocalSearchIndex(tmp_path / "index")
    yield adapter
    adapter.close()


def test_two_tenants_and_two_collections_with_the_same_ids_never_meet(index):
    # Given the same chunk and document ids in two tenants and in two collections of one tenant
    index.upsert(
        MODEL,
        [
            record("x", "alpha shared words", tenant="acme"),
            record("x", "beta shared words", tenant="globex"),
            record("x", "gamma shared words", tenant="acme", collection="other"),
        ],
    )
    # When one tenant deletes its document and the other searches
    index.delete(MODEL, "acme", "c", document_ids=["d"])
    # Then only the deleted copy is gone: the other tenant's and the other collection's remain, scored alike
    assert index.keyword_search(MODEL, "acme", ["c"], "shared", 10) == []
    assert [(h.chunk_id, h.collection) for h in index.keyword_search(MODEL, "globex", ["c"], "shared beta", 10)] == [
        ("x", "c")
    ]
    assert index.keyword_search(MODEL, "globex", ["c"], "alpha gamma", 10) == []
    assert [h.collection for h in index.keyword_search(MODEL, "acme", ["c", "other"], "shared", 10)] == ["other"]


def test_ids_that_look_like_key_separators_cannot_reach_another_partition(index):
    # Given ids chosen so that a joined key "acme|c" + "|x" would collide
    index.upsert(
        MODEL,
        [
            record("x", "secret words", tenant="acme|c", collection="x"),
            record("c|x", "public words", tenant="acme", collection="c"),
        ],
    )
    # Then each tenant finds only its own chunk, and deleting one leaves the other
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "secret words", 10)) == ["c|x"]
    index.delete(MODEL, "acme|c", "x", chunk_ids=["x"])
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "words", 10)) == ["c|x"]
    assert index.keyword_search(MODEL, "acme|c", ["x"], "words", 10) == []


def test_an_update_replaces_the_text_and_a_delete_by_chunk_and_document_removes_only_that_pair(index):
    # Given two documents' chunks, one updated in place
    index.upsert(
        MODEL, [record("a", "old lighthouse", document_id="d1"), record("b", "keeper words", document_id="d2")]
    )
    index.upsert(MODEL, [record("a", "new harbour", document_id="d1")])
    assert index.keyword_search(MODEL, "acme", ["c"], "lighthouse", 10) == []
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "harbour", 10)) == ["a"]
    # When chunk "b" is deleted as a chunk of the wrong document, then of its own
    index.delete(MODEL, "acme", "c", document_ids=["d1"], chunk_ids=["b"])
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "keeper", 10)) == ["b"]
    index.delete(MODEL, "acme", "c", document_ids=["d2"], chunk_ids=["b"])
    # Then it is gone, the other stays, and the ids say the same
    assert index.keyword_search(MODEL, "acme", ["c"], "keeper", 10) == []
    assert index.chunk_ids(MODEL, "acme", "c") == {"a"}


def test_filters_apply_before_the_top_k_and_never_change_scores(index):
    # Given many strong matches in one document and one weak match in another, with other languages and types
    strong = [record(f"s{i}", "budget budget budget report", document_id="big") for i in range(30)]
    index.upsert(
        MODEL,
        strong
        + [
            record("weak", "budget and many other words here", document_id="small"),
            record("fr", "budget", document_id="small", language="fr"),
            record("none", "budget", document_id="small", language=None, mimetype=None),
        ],
    )
    unfiltered = {h.chunk_id: h.score for h in index.keyword_search(MODEL, "acme", ["c"], "budget", 100)}
    # When filtering to the small document, to a language, to a type
    by_document = index.keyword_search(MODEL, "acme", ["c"], "budget", 1, SearchFilters(document_ids=("small",)))
    by_language = index.keyword_search(
        MODEL, "acme", ["c"], "budget", 100, SearchFilters(document_ids=("small",), language="fr")
    )
    by_type = index.keyword_search(MODEL, "acme", ["c"], "budget", 100, SearchFilters(mimetype="text/plain"))
    # Then the filter decides before k, and a hit's score is its unfiltered score
    assert ids(by_document) == [max(("weak", "fr", "none"), key=unfiltered.get)]
    assert ids(by_language) == ["fr"] and by_language[0].score == pytest.approx(unfiltered["fr"])
    assert "none" not in ids(by_type) and len(by_type) == 32


def test_words_match_across_case_and_diacritics_and_stopwords_are_left_out(index):
    index.upsert(MODEL, [record("a", "Café CRÈME brûlée"), record("b", "the of and")])
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "cafe creme", 10)) == ["a"]
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "BRÛLÉE", 10)) == ["a"]
    # A query of stopwords only still searches for them
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "the", 10)) == ["b"]
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "the café", 10)) == ["a"]


@pytest.mark.slow
def test_deleted_chunks_are_never_returned_even_among_many_segments(index):
    # Given a hundred small commits (many segments), then every other chunk deleted in separate calls
    for i in range(100):
        index.upsert(MODEL, [record(f"c{i}", f"common word{i}", document_id=f"d{i}")])
    for i in range(0, 100, 2):
        index.delete(MODEL, "acme", "c", chunk_ids=[f"c{i}"])
    # Then no search and no id listing returns a deleted one
    found = ids(index.keyword_search(MODEL, "acme", ["c"], "common", 100))
    assert sorted(found) == sorted(f"c{i}" for i in range(1, 100, 2))
    assert index.chunk_ids(MODEL, "acme", "c") == {f"c{i}" for i in range(1, 100, 2)}


@pytest.mark.slow
def test_an_older_fts5_keyword_database_is_migrated_once_and_removed(tmp_path):
    # Given a data directory whose keywords an older version kept in SQLite FTS5 (external content), beside the
    # vector partitions of the same chunks (a keyword hit must find its document in the vector half: fail closed)
    root = tmp_path / "index"
    older = LocalSearchIndex(root)
    older.upsert(MODEL, [record("a", "fjord glacier", tenant="acme"), record("a", "desert", tenant="globex")])
    older.close()
    for folder in (root / "keywords", root / "keyword"):
        shutil.rmtree(folder, ignore_errors=True)  # that version had no tantivy keyword index
    db = sqlite3.connect(root / "keyword.sqlite")
    db.executescript("""
        CREATE TABLE chunk (rowid INTEGER PRIMARY KEY, model TEXT NOT NULL, tenant TEXT NOT NULL,
            collection TEXT NOT NULL, chunk_id TEXT NOT NULL, document_id TEXT NOT NULL, language TEXT, mimetype TEXT,
            UNIQUE (model, tenant, collection, chunk_id));
        CREATE TABLE chunk_text (rowid INTEGER PRIMARY KEY, text TEXT NOT NULL);
        CREATE VIRTUAL TABLE chunk_fts USING fts5(text, content='chunk_text', content_rowid='rowid');
    """)
    for rowid, (tenant, chunk_id, text) in enumerate([("acme", "a", "fjord glacier"), ("globex", "a", "desert")], 1):
        db.execute("INSERT INTO chunk VALUES (?, ?, ?, 'c', ?, 'd', 'en', NULL)", (rowid, MODEL, tenant, chunk_id))
        db.execute("INSERT INTO chunk_text VALUES (?, ?)", (rowid, text))
    db.commit()
    db.close()
    # When the index is opened
    index = LocalSearchIndex(root)
    # Then the keywords are searchable with their tenants and filters, and the SQLite files are gone
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "glacier", 10, SearchFilters(language="en"))) == ["a"]
    assert index.keyword_search(MODEL, "acme", ["c"], "desert", 10) == []
    assert ids(index.keyword_search(MODEL, "globex", ["c"], "desert", 10)) == ["a"]
    assert not (root / "keyword.sqlite").exists()
    index.upsert(MODEL, [record("b", "glacier again")])
    index.close()
    # And reopening migrates nothing twice
    again = LocalSearchIndex(root)
    assert sorted(ids(again.keyword_search(MODEL, "acme", ["c"], "glacier", 10))) == ["a", "b"]
    again.close()


def _write_forever(root: str, ready) -> None:
    index = LocalSearchIndex(root)
    i = 0
    while True:  # killed from outside, somewhere inside a commit sooner or later
        index.upsert(MODEL, [record(f"k{i}-{j}", f"batch{i} word{j} common") for j in range(20)])
        index.delete(MODEL, "acme", "c", chunk_ids=[f"k{i}-{j}" for j in range(0, 20, 2)])
        ready.set()  # at least one batch is committed
        i += 1


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.3, 0.7, 1.1])
def test_a_writer_killed_mid_write_leaves_a_consistent_index_that_accepts_writes(tmp_path, delay):
    # Given a process that upserts batches and deletes half of each, killed with SIGKILL at some point after its
    # first batch
    root = tmp_path / "index"
    kill_writer_after(_write_forever, root, delay, ready_timeout=60)
    # When the folder is reopened
    index = LocalSearchIndex(root)
    # Then every batch that keyword search finds is whole: its upsert alone, or its upsert and its delete
    found = set(ids(index.keyword_search(MODEL, "acme", ["c"], "common", 10_000)))
    batches: dict[int, set[int]] = {}
    for chunk_id in found:
        batch, j = chunk_id[1:].split("-")
        batches.setdefault(int(batch), set()).add(int(j))
    assert batches, "the writer committed nothing before it was killed"
    for batch, members in batches.items():
        assert members in (set(range(20)), set(range(1, 20, 2))), (batch, sorted(members))
    # And the ids (vectors and keywords) hold at least those, and new writes work (the killed writer's lock is gone)
    assert index.chunk_ids(MODEL, "acme", "c") >= found
    index.upsert(MODEL, [record("after", "after crash")])
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "after crash", 10)) == ["after"]
    index.close()


def test_the_migrated_keyword_record_is_a_json_key_so_ids_with_quotes_round_trip(index):
    odd = 'chunk "quoted" ,[]\\ \u00e9'
    index.upsert(MODEL, [record(odd, "unusual id text", document_id=json.dumps(["d"]))])
    hit = index.keyword_search(MODEL, "acme", ["c"], "unusual", 10)[0]
    assert (hit.chunk_id, hit.document_id) == (odd, json.dumps(["d"]))
    assert index.chunk_ids(MODEL, "acme", "c") == {odd}


def test_paths_are_not_shared_between_two_folders(tmp_path):
    first, second = LocalSearchIndex(tmp_path / "one"), LocalSearchIndex(tmp_path / "two")
    first.upsert(MODEL, [record("a", "only here")])
    assert second.keyword_search(MODEL, "acme", ["c"], "only", 10) == []
    assert Path(tmp_path / "one" / "keywords" / tenant_folder("acme") / "meta.json").exists()
    first.close()
    second.close()


def test_a_second_process_can_read_while_the_first_holds_the_writer(tmp_path):
    # Given a server-like owner that has written (and so holds tantivy's writer lock)
    owner = LocalSearchIndex(tmp_path / "index")
    owner.upsert(MODEL, [record("a", "first words")])
    # When another instance opens the folder to read (as `kindex reindex` does beside a running server)
    reader = LocalSearchIndex(tmp_path / "index")
    # Then it reads the owner's commits, including ones made after it opened
    assert reader.chunk_ids(MODEL, "acme", "c") == {"a"}
    owner.upsert(MODEL, [record("b", "second words")])
    assert reader.chunk_ids(MODEL, "acme", "c") == {"a", "b"}
    reader.close()
    owner.close()


# -- deferred commits (an ingest batch's writes) ---------------------------------------------------------------


class CommitFailsOnce:
    """Stands in for the tantivy writer: its next commit fails (a full disk), everything else goes to the real one."""

    def __init__(self, writer):
        self.writer, self.failed = writer, False

    def commit(self):
        if not self.failed:
            self.failed = True
            raise OSError("no space left on device (test)")
        return self.writer.commit()

    def __getattr__(self, name):
        return getattr(self.writer, name)


def counting_commits(index, monkeypatch) -> list[int]:
    keywords, made = index._keywords, []
    original = keywords._commit
    monkeypatch.setattr(keywords, "_commit", lambda tenant: (made.append(1), original(tenant))[1])
    return made


def test_deferred_writes_are_searchable_only_after_their_commit_and_one_commit_serves_many(index, monkeypatch):
    commits = counting_commits(index, monkeypatch)
    # Given three deferred upserts
    writes = [
        index.upsert_deferred(MODEL, [record(f"c{i}", f"deferred heron{i}", document_id=f"d{i}")]) for i in range(3)
    ]
    # Then keyword search does not see them yet (vectors, written durably, do), and nothing was committed
    assert index.keyword_search(MODEL, "acme", ["c"], "deferred", 10) == []
    assert index.chunk_ids(MODEL, "acme", "c") == {"c0", "c1", "c2"}
    assert commits == []
    # When they are committed, one commit makes all visible; committing them again costs nothing
    index.commit_deferred(writes)
    assert sorted(ids(index.keyword_search(MODEL, "acme", ["c"], "deferred", 10))) == ["c0", "c1", "c2"]
    index.commit_deferred(writes[:1])
    assert len(commits) == 1


def test_a_delete_commits_at_once_and_carries_the_deferred_writes_along(index, monkeypatch):
    # Given a committed chunk and two deferred upserts
    index.upsert(MODEL, [record("gone", "doomed stork")])
    writes = [
        index.upsert_deferred(MODEL, [record("kept", "pending stork")]),
        index.upsert_deferred(MODEL, [record("later", "pending crane", document_id="e")]),
    ]
    commits = counting_commits(index, monkeypatch)
    # When a chunk is deleted
    index.delete(MODEL, "acme", "c", chunk_ids=["gone"])
    # Then it is never found again once delete returned, and the deferred writes rode along with its commit
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "stork", 10)) == ["kept"]
    index.commit_deferred(writes)
    assert len(commits) == 1


def test_a_deferred_write_added_before_a_document_delete_is_deleted_with_it(index):
    # Given a deferred write of document d, then d deleted (an API delete while the batch runs)
    written = index.upsert_deferred(MODEL, [record("c1", "ephemeral swift")])
    index.delete(MODEL, "acme", "c", document_ids=["d"])
    # When the batch commits / Then the chunk is not found
    index.commit_deferred([written])
    assert index.keyword_search(MODEL, "acme", ["c"], "ephemeral", 10) == []


def test_writes_rolled_back_by_a_failed_commit_are_reported_lost_never_done(index):
    from kindex.adapters.local.search.keyword import KeywordWritesLost
    from kindex.domain.errors import DependencyFailed

    # Given a deferred write, then another caller's upsert whose commit fails (the writer rolls everything back)
    lost = index.upsert_deferred(MODEL, [record("c1", "vanished egret")])
    keywords = index._keywords._tenant("acme", create=False)
    keywords.writer = CommitFailsOnce(keywords.writer)
    with pytest.raises(OSError):
        index.upsert(MODEL, [record("c2", "failed egret")])
    # When the deferred write's owner commits it
    # Then it learns its write is lost (a DependencyFailed: retried), and keyword search has neither
    with pytest.raises(KeywordWritesLost) as raised:
        index.commit_deferred([lost])
    assert isinstance(raised.value, DependencyFailed)
    assert index.keyword_search(MODEL, "acme", ["c"], "egret", 10) == []
    # And later writes work and commit as ever, without reviving the lost one
    later = index.upsert_deferred(MODEL, [record("c3", "later egret")])
    index.commit_deferred([later])
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "egret", 10)) == ["c3"]
    with pytest.raises(KeywordWritesLost):
        index.commit_deferred([lost, later])


def test_deferred_writes_dropped_by_close_are_reported_lost(tmp_path):
    from kindex.adapters.local.search.keyword import KeywordWritesLost

    root = tmp_path / "index"
    index = LocalSearchIndex(root)
    written = index.upsert_deferred(MODEL, [record("c1", "unsaid plover")])
    index.close()
    with pytest.raises(KeywordWritesLost):
        index.commit_deferred([written])
    again = LocalSearchIndex(root)
    assert again.keyword_search(MODEL, "acme", ["c"], "plover", 10) == []
    again.close()


def test_two_tenants_deferred_in_one_commit_never_meet(index):
    writes = [
        index.upsert_deferred(MODEL, [record("a", "otter shared", tenant=tenant)]) for tenant in ("acme", "globex")
    ]
    writes.append(index.upsert_deferred(MODEL, [record("a", "beaver shared", tenant="globex")]))
    index.commit_deferred(writes)
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "otter", 10)) == ["a"]
    assert index.keyword_search(MODEL, "globex", ["c"], "otter", 10) == []  # replaced by its later write
    assert ids(index.keyword_search(MODEL, "globex", ["c"], "beaver", 10)) == ["a"]


# -- one index per tenant (issue 26: BM25 statistics crossed tenants) -------------------------------------------


def scores(hits) -> list[tuple[str, str, float]]:
    return [(hit.document_id, hit.chunk_id, hit.score) for hit in hits]


@pytest.mark.slow
def test_a_tenants_scores_are_computed_over_its_own_documents_only(index, tmp_path):
    # Given evil's chunks holding its term, and the very same chunks alone in an index of their own
    mine = [
        record("e1", "projectfalcon nonce", tenant="evil"),
        record("e2", "projectfalcon and a longer text around the nonce", tenant="evil", document_id="d2"),
        record("e3", "only the nonce", tenant="evil", document_id="d3"),
    ]
    index.upsert(MODEL, mine)
    alone = LocalSearchIndex(tmp_path / "alone")
    alone.upsert(MODEL, mine)
    before = scores(index.keyword_search(MODEL, "evil", ["c"], "projectfalcon nonce", 10))
    # When acme indexes ten chunks holding the term under the same collection, document and chunk ids, then deletes
    # them one document at a time
    acme = [
        record(f"e{i}", "projectfalcon projectfalcon acme words", tenant="acme", document_id=f"d{i}") for i in range(10)
    ]
    index.upsert(MODEL, acme)
    during = scores(index.keyword_search(MODEL, "evil", ["c"], "projectfalcon nonce", 10))
    acme_during = scores(index.keyword_search(MODEL, "acme", ["c"], "projectfalcon", 10))
    for i in range(10):
        index.delete(MODEL, "acme", "c", document_ids=[f"d{i}"])
    after = scores(index.keyword_search(MODEL, "evil", ["c"], "projectfalcon nonce", 10))
    # Then evil's ranking and scores never moved, and are exactly those of its chunks alone
    assert before == during == after == scores(alone.keyword_search(MODEL, "evil", ["c"], "projectfalcon nonce", 10))
    assert [chunk for _, chunk, _ in before] == ["e1", "e2", "e3"]
    # And acme's were over acme's chunks only: ten equal matches, none of evil's documents among them
    assert len(acme_during) == 10 and len({score for _, _, score in acme_during}) == 1
    assert index.keyword_search(MODEL, "acme", ["c"], "projectfalcon", 10) == []
    alone.close()


def test_a_collection_delete_of_one_tenant_leaves_the_same_ids_of_another_with_their_scores(index):
    # Given two tenants with the same collection, document and chunk ids and texts
    for tenant in ("acme", "globex"):
        index.upsert(
            MODEL, [record(f"x{i}", f"heron word{i} marsh", tenant=tenant, document_id=f"d{i}") for i in range(4)]
        )
    globex_before = scores(index.keyword_search(MODEL, "globex", ["c"], "heron marsh word1", 10))
    # When acme deletes the whole collection
    index.delete(MODEL, "acme", "c")
    # Then acme finds nothing and lists nothing; globex finds all of its own with unchanged scores
    assert index.keyword_search(MODEL, "acme", ["c"], "heron", 10) == []
    assert index.chunk_ids(MODEL, "acme", "c") == set()
    assert scores(index.keyword_search(MODEL, "globex", ["c"], "heron marsh word1", 10)) == globex_before
    assert index.chunk_ids(MODEL, "globex", "c") == {f"x{i}" for i in range(4)}


def test_a_deferred_batch_over_two_tenants_commits_each_tenants_index_once(index, monkeypatch):
    commits = counting_commits(index, monkeypatch)
    # Given one batch's deferred writes for two tenants with the same ids, one of them a single upsert of both
    writes = [
        index.upsert_deferred(
            MODEL, [record("a", "deferred ibis", tenant="acme"), record("a", "deferred ibis", tenant="globex")]
        ),
        index.upsert_deferred(MODEL, [record("b", "deferred ibis", tenant="globex", document_id="e")]),
    ]
    assert index.keyword_search(MODEL, "globex", ["c"], "ibis", 10) == []
    # When the batch commits
    index.commit_deferred(writes)
    # Then each tenant sees its own, after one commit of each tenant's index
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "ibis", 10)) == ["a"]
    assert sorted(ids(index.keyword_search(MODEL, "globex", ["c"], "ibis", 10))) == ["a", "b"]
    assert len(commits) == 2


def test_one_tenants_failed_commit_loses_only_that_tenants_deferred_writes(index):
    from kindex.adapters.local.search.keyword import KeywordWritesLost

    # Given deferred writes of two tenants in one batch, and globex's next commit fails (a full disk)
    acme_write = index.upsert_deferred(MODEL, [record("a", "deferred crane", tenant="acme")])
    globex_write = index.upsert_deferred(MODEL, [record("a", "deferred crane", tenant="globex")])
    globex = index._keywords._tenant("globex", create=False)
    globex.writer = CommitFailsOnce(globex.writer)
    # When the batch commits both
    with pytest.raises(OSError):
        index.commit_deferred([acme_write, globex_write])
    # Then acme's write is committed and searchable, globex's is reported lost and is nowhere
    index.commit_deferred([acme_write])
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "crane", 10)) == ["a"]
    with pytest.raises(KeywordWritesLost):
        index.commit_deferred([globex_write])
    assert index.keyword_search(MODEL, "globex", ["c"], "crane", 10) == []


@pytest.mark.slow
def test_beyond_the_open_bound_indices_are_reopened_and_pending_writes_are_never_dropped(index, monkeypatch):
    from kindex.adapters.local.search import keyword

    monkeypatch.setattr(keyword, "MAX_OPEN_TENANTS", 2)
    # Given a deferred write of tenant t0, then five more tenants writing and searching (more than stay open)
    pending = index.upsert_deferred(MODEL, [record("p", "pending gannet", tenant="t0")])
    for i in range(1, 6):
        index.upsert(MODEL, [record("x", f"gannet of t{i}", tenant=f"t{i}")])
        assert ids(index.keyword_search(MODEL, f"t{i}", ["c"], "gannet", 10)) == ["x"]
    # Then no more than the bound stay open besides the one with pending writes, which was kept
    assert len(index._keywords._tenants) <= 3
    # When the deferred write commits / Then it is searchable, and every other tenant still finds its own (reopened)
    index.commit_deferred([pending])
    assert ids(index.keyword_search(MODEL, "t0", ["c"], "gannet", 10)) == ["p"]
    for i in range(1, 6):
        assert ids(index.keyword_search(MODEL, f"t{i}", ["c"], f"gannet t{i}", 10)) == ["x"]
        assert index.chunk_ids(MODEL, f"t{i}", "c") == {"x"}
    assert len(index._keywords._tenants) <= 2


@pytest.mark.slow
def test_sixteen_threads_of_eight_tenants_writing_deleting_and_searching_lose_nothing(index, monkeypatch):
    from kindex.adapters.local.search import keyword
    from tests.support.together import run_together

    monkeypatch.setattr(keyword, "MAX_OPEN_TENANTS", 3)  # tenants keep being evicted and reopened meanwhile

    def writer(tenant: str):
        def run():
            for i in range(15):
                written = index.upsert_deferred(
                    MODEL, [record(f"k{i}", f"pelican {tenant} n{i}", tenant=tenant, document_id=f"d{i}")]
                )
                index.commit_deferred([written])
                if i % 3 == 0:
                    index.delete(MODEL, tenant, "c", document_ids=[f"d{i}"])
                # read-your-writes, whatever the other threads evicted
                found = set(ids(index.keyword_search(MODEL, tenant, ["c"], "pelican", 100)))
                assert f"k{i}" in found or i % 3 == 0, (tenant, i, found)

        return run

    def reader(tenant: str):
        def run():
            for _ in range(30):
                for hit in index.keyword_search(MODEL, tenant, ["c"], f"pelican {tenant}", 100):
                    assert hit.collection == "c" and hit.chunk_id.startswith("k")

        return run

    tenants = [f"t{i}" for i in range(8)]
    outcomes = run_together([writer(t) for t in tenants] + [reader(t) for t in tenants])
    assert [outcome for outcome in outcomes if outcome is not None] == []
    for tenant in tenants:
        assert index.chunk_ids(MODEL, tenant, "c") == {f"k{i}" for i in range(15) if i % 3}
        assert len(index.keyword_search(MODEL, tenant, ["c"], f"pelican {tenant}", 100)) == 10


# -- migration from the one index all tenants shared --------------------------------------------------------------


def write_shared_keyword_index(folder: Path, rows: list[tuple[str, IndexRecord]]) -> None:
    """The layout older versions wrote: one tantivy index for every tenant under `keyword/`, texts not stored."""
    import tantivy

    from kindex.adapters.local.search.keyword import ANALYZER, _document, build_schema, text_analyzer

    folder.mkdir(parents=True)
    shared = tantivy.Index(build_schema(), path=str(folder))
    shared.register_tokenizer(ANALYZER, text_analyzer())
    writer = shared.writer(15_000_000, 1)
    for model, item in rows:
        writer.add_document(tantivy.Document(**_document(model, item)))
    writer.commit()
    writer.wait_merging_threads()


def chunk_store(path: Path, records: list[IndexRecord]):
    from kindex.adapters.local.sqlite_chunks import SqliteChunkStore
    from kindex.adapters.local.sqlite_db import SqliteDatabase
    from kindex.domain.types import StoredChunk

    store = SqliteChunkStore(SqliteDatabase(path))
    for item in records:
        store.put_chunks(
            item.tenant,
            [
                StoredChunk(
                    chunk_id=item.chunk_id,
                    collection=item.collection,
                    document_id=item.document_id,
                    index=0,
                    start=0,
                    end=len(item.text),
                    text=item.text,
                )
            ],
        )
    return store


@pytest.mark.slow
def test_a_keyword_index_shared_by_tenants_is_rebuilt_per_tenant_from_the_chunk_store(tmp_path):
    # Given a data directory of an older version: vectors per partition, and one keyword index for all tenants
    # holding two tenants' chunks with the same ids (and one chunk the chunk store no longer has)
    root = tmp_path / "index"
    records = [
        record("x", "fjord glacier", tenant="acme"),
        record("y", "glacier moraine", tenant="acme", document_id="e", language="fr"),
        record("x", "fjord glacier", tenant="globex"),
        record("y", "glacier glacier glacier", tenant="globex", document_id="e", mimetype="text/html"),
    ]
    vectors = LocalSearchIndex(root)
    vectors.upsert(MODEL, records)
    vectors.close()
    shutil.rmtree(root / "keywords")
    write_shared_keyword_index(
        root / "keyword",
        [(MODEL, item) for item in records]
        + [(MODEL, record("gone", "glacier ghost", tenant="acme", document_id="g"))],
    )
    # and a rebuild of it cut short earlier, which left a stale index for acme
    stale = LocalSearchIndex(tmp_path / "stale")
    stale.upsert(MODEL, [record("stale", "stale glacier", tenant="acme")])
    stale.close()
    shutil.copytree(tmp_path / "stale" / "keywords", root / "keywords")
    store = chunk_store(tmp_path / "db.sqlite3", records)
    # When it is opened without the chunk store / Then it refuses and changes nothing
    with pytest.raises(RuntimeError, match="chunk store"):
        LocalSearchIndex(root)
    assert (root / "keyword" / "meta.json").exists()
    # When it is opened with the chunk store
    index = LocalSearchIndex(root, chunks=store)
    # Then each tenant finds its own chunks, with their filter fields, scored over its own chunks only (as a fresh
    # index of them alone scores them), the stale and the textless chunks are gone, and so is the shared index
    fresh = LocalSearchIndex(tmp_path / "fresh")
    fresh.upsert(MODEL, records)
    for tenant in ("acme", "globex"):
        assert scores(index.keyword_search(MODEL, tenant, ["c"], "glacier fjord", 10)) == scores(
            fresh.keyword_search(MODEL, tenant, ["c"], "glacier fjord", 10)
        )
        assert index.chunk_ids(MODEL, tenant, "c") == {"x", "y"}
    assert ids(index.keyword_search(MODEL, "acme", ["c"], "glacier", 10, SearchFilters(language="fr"))) == ["y"]
    assert ids(index.keyword_search(MODEL, "globex", ["c"], "glacier", 10, SearchFilters(mimetype="text/html"))) == [
        "y"
    ]
    assert index.keyword_search(MODEL, "acme", ["c"], "stale ghost", 10) == []
    assert not (root / "keyword").exists()
    # And writes go on, and reopening rebuilds nothing again (no chunk store needed any more)
    index.upsert(MODEL, [record("z", "glacier again", tenant="acme", document_id="z")])
    index.close()
    again = LocalSearchIndex(root)
    assert again.chunk_ids(MODEL, "acme", "c") == {"x", "y", "z"}
    again.close()
    fresh.close()
