"""The embedded index's attribute filters and access lists beyond the port's contract: durable (log, snapshot, a
writer killed mid-write), cheap to rewrite, fail closed while a document's chunks are being rewritten, under
concurrent searches, and data directories whose tenant keyword indices predate the filter fields."""

from __future__ import annotations

import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tantivy

from kindex.adapters.local.search import ann
from kindex.adapters.local.search import index as search_index
from kindex.adapters.local.search import log as search_log
from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.adapters.local.search.keyword import ANALYZER, base_schema_builder, tenant_folder, text_analyzer
from kindex.domain.filters import Access, parse_filter
from kindex.domain.types import IndexRecord, Principals, SearchFilters
from tests.support.crash import kill_writer_after
from tests.unit.test_search_keyword import chunk_store

pytestmark = pytest.mark.unit

MODEL = "hash:16"
DIMS = 16
ENG, OPS = Principals(groups=("eng",)), Principals(groups=("ops",))


def unit(seed: int) -> np.ndarray:
    vector = np.random.RandomState(seed).normal(size=DIMS)
    return vector / np.linalg.norm(vector)


def chunks(
    document_id: str,
    count: int,
    *,
    seed: int = 0,
    tenant: str = "acme",
    attributes=None,
    access: Access | None = None,
    text: str = "tidal survey",
) -> list[IndexRecord]:
    return [
        IndexRecord(
            tenant=tenant,
            collection="c",
            document_id=document_id,
            chunk_id=f"{document_id}.{i}",
            vector=tuple(unit(seed + i)),
            text=text,
            language="en",
            attributes=attributes,
            access=access,
        )
        for i in range(count)
    ]


def knn(index, filters: SearchFilters, k: int = 50, tenant: str = "acme") -> set[str]:
    return {hit.chunk_id for hit in index.knn_search(MODEL, tenant, ["c"], unit(999).tolist(), k, filters)}


def words(index, filters: SearchFilters, k: int = 50, tenant: str = "acme", query: str = "tidal") -> set[str]:
    return {hit.chunk_id for hit in index.keyword_search(MODEL, tenant, ["c"], query, k, filters)}


@pytest.mark.parametrize("compacted", [False, True], ids=["from the log", "from a snapshot"])
def test_attributes_and_access_lists_survive_a_reopen(tmp_path, compacted):
    # Given documents with attributes and access lists, one of them rewritten and one deleted
    first = LocalSearchIndex(tmp_path / "index")
    first.upsert(MODEL, chunks("a", 3, attributes={"year": 2020, "tags": ["x"]}, access=Access(groups=("eng",))))
    first.upsert(MODEL, chunks("b", 2, seed=10, attributes={"year": 2021.5}, access=Access(users=("bob",))))
    first.upsert(MODEL, chunks("c", 2, seed=20))
    first.upsert(
        MODEL,
        chunks("a", 3, attributes={"year": 1999, "tags": ["y"]}, access=Access(groups=("ops",), deny_users=("eve",))),
    )
    first.upsert(MODEL, chunks("d", 1, seed=30, attributes={"year": 2020}, access=Access(groups=("eng",))))
    first.delete(MODEL, "acme", "c", document_ids=["d"])
    if compacted:
        first._maybe_compact((MODEL, "acme", "c"), first._partition(MODEL, "acme", "c"), force=True)
        assert not list((tmp_path / "index" / "vectors").glob("*.log"))
    first.close()
    # When the folder is opened again
    second = LocalSearchIndex(tmp_path / "index")
    # Then both legs filter as before the restart: the rewrite holds, the deleted document is gone
    a, b, c = {"a.0", "a.1", "a.2"}, {"b.0", "b.1"}, {"c.0", "c.1"}
    # (attribute filters searched for a user who may see a, b and c, so that only the filter decides)
    everyone = Principals(user="bob", groups=("ops", "eng"))
    for leg in (knn, words):
        assert leg(second, SearchFilters(attributes=parse_filter({"year": 1999}), principals=everyone)) == a
        assert leg(second, SearchFilters(attributes=parse_filter({"year": {"$gt": 2000}}), principals=everyone)) == b
        assert (
            leg(second, SearchFilters(attributes=parse_filter({"tags": {"$contains": "x"}}), principals=everyone))
            == set()
        )
        assert leg(second, SearchFilters(principals=OPS)) == a | c
        assert leg(second, SearchFilters(principals=Principals(user="eve", groups=("ops",)))) == c
        assert leg(second, SearchFilters(principals=Principals(user="bob", required=True))) == b
        assert leg(second, SearchFilters(principals=ENG)) == c
    second.close()


@pytest.mark.slow
def test_an_attribute_only_rewrite_appends_no_vectors_and_leaves_the_graph_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(ann, "MIN_ROWS", 200)
    monkeypatch.setattr(ann, "BUILD_THREADS", 1)
    # Given a partition with a graph, and a document of 100 chunks in it
    index = LocalSearchIndex(tmp_path / "index")
    big = chunks("big", 100, attributes={"v": 1}, access=Access(groups=("eng",)))
    index.upsert(MODEL, chunks("rest", 200, seed=1_000) + big)
    partition = index._partition(MODEL, "acme", "c")
    assert partition.graph is not None and partition.log_bytes == 0  # the graph was saved with a snapshot
    graph_puts = []
    put = partition.graph.put
    monkeypatch.setattr(partition.graph, "put", lambda *args: (graph_puts.append(args), put(*args)))
    # When its chunks are written again with their own vectors and texts, only the access list and attributes new
    index.upsert(MODEL, [replace(record, attributes={"v": 2}, access=Access(groups=("ops",))) for record in big])
    # Then the log grew by one small record (100 rows of vectors would be 6,400 bytes), the graph was not touched,
    # and both legs see the change
    assert 0 < partition.log_bytes < 1_000
    assert graph_puts == []
    for leg in (knn, words):
        assert leg(index, SearchFilters(attributes=parse_filter({"v": 2}), principals=OPS), k=200) == {
            record.chunk_id for record in big
        }
        assert leg(index, SearchFilters(principals=Principals(groups=("eng",), required=True)), k=200) == set()
    # And writing exactly the same again appends nothing at all
    before = partition.log_bytes
    index.upsert(MODEL, [replace(record, attributes={"v": 2}, access=Access(groups=("ops",))) for record in big])
    assert partition.log_bytes == before
    # While a real change of type (1 is not true) is written
    index.upsert(MODEL, [replace(record, attributes={"v": True}, access=Access(groups=("ops",))) for record in big])
    assert partition.log_bytes > before
    assert knn(index, SearchFilters(attributes=parse_filter({"v": True}), principals=OPS), k=200) == {
        r.chunk_id for r in big
    }
    index.close()


def test_chunks_not_yet_rewritten_follow_their_documents_new_access_list_on_both_legs(tmp_path):
    # Given a document of four chunks visible to eng
    index = LocalSearchIndex(tmp_path / "index")
    first = chunks("doc", 4, access=Access(groups=("eng",)))
    index.upsert(MODEL, first)
    # When its access list becomes ops-only, and only two of its chunks have been written again so far
    index.upsert(MODEL, [replace(record, access=Access(groups=("ops",))) for record in first[:2]])
    # Then eng sees none of its chunks on either leg (the keyword index still holds eng on the other two, but the
    # document's new list is the word), and ops sees the rewritten ones on the keyword leg, all on the vector leg
    assert knn(index, SearchFilters(principals=ENG)) == set()
    assert words(index, SearchFilters(principals=ENG)) == set()
    assert words(index, SearchFilters(principals=OPS)) == {"doc.0", "doc.1"}
    assert knn(index, SearchFilters(principals=OPS)) == {"doc.0", "doc.1", "doc.2", "doc.3"}
    # And a user in ops and another group, who may see the whole collection, gets all four on the keyword leg too:
    # the words alone, then the document's list (a filter of several groups that admits most chunks stays out of
    # tantivy); one in eng and another group still sees none
    assert words(index, SearchFilters(principals=Principals(groups=("ops", "qa")))) == {
        "doc.0",
        "doc.1",
        "doc.2",
        "doc.3",
    }
    assert words(index, SearchFilters(principals=Principals(groups=("eng", "qa")))) == set()
    # And a search by nobody sees none of them (a document with an access list needs a principal it admits)
    assert len(words(index, SearchFilters())) == 0 and len(knn(index, SearchFilters())) == 0
    index.close()


@pytest.mark.slow
def test_sixteen_searchers_never_see_a_document_after_its_revocation_returned(tmp_path):
    # Given 12 documents visible to eng, searched by 16 threads on both legs (every revocation below lands while
    # all 16 search: each is a race of its own, so a dozen force it as surely as more would)
    index = LocalSearchIndex(tmp_path / "index")
    for d in range(12):
        index.upsert(MODEL, chunks(f"d{d}", 3, seed=10 * d, access=Access(groups=("eng",))))
    revoked: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()
    violations: list[tuple[str, set[str]]] = []
    searches = [0]

    def search(_: int) -> None:
        while not done.is_set():
            with lock:
                before = set(revoked)  # revocations that returned before this query began
            found = {
                hit.document_id
                for hit in index.knn_search(MODEL, "acme", ["c"], unit(7).tolist(), 120, SearchFilters(principals=ENG))
            } | {
                hit.document_id
                for hit in index.keyword_search(MODEL, "acme", ["c"], "tidal", 120, SearchFilters(principals=ENG))
            }
            with lock:
                searches[0] += 1
                if found & before:
                    violations.append(("seen after revocation", found & before))

    with ThreadPoolExecutor(max_workers=16) as pool:
        running = [pool.submit(search, i) for i in range(16)]
        # When the documents' access lists are changed to ops, one document at a time
        for d in range(12):
            index.upsert(MODEL, chunks(f"d{d}", 3, seed=10 * d, access=Access(groups=("ops",))))
            with lock:
                revoked.add(f"d{d}")
        done.set()
        for future in running:
            future.result()
    # Then no query that began after a revocation returned saw that document, and eng sees nothing at the end
    assert violations == []
    assert searches[0] >= 16
    assert knn(index, SearchFilters(principals=ENG), k=200) == set()
    assert len(knn(index, SearchFilters(principals=OPS), k=200)) == 36
    index.close()


def _rewrite_forever(root: str, ready) -> None:
    search_log.COMPACT_MAX_RECORDS = 5  # snapshots all the time, too
    index = LocalSearchIndex(root)
    for d in range(8):
        index.upsert(
            MODEL, chunks(f"d{d}", 5, seed=10 * d, attributes={"v": -d - 1}, access=Access(groups=(f"g{-d - 1}",)))
        )
    ready.set()
    i = 1
    while True:  # killed from outside, somewhere in a write, a compaction or a keyword commit
        index.upsert(
            MODEL, chunks(f"d{i % 8}", 5, seed=10 * (i % 8), attributes={"v": i}, access=Access(groups=(f"g{i}",)))
        )
        i += 1


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.4, 1.1])
def test_a_writer_killed_while_rewriting_access_lists_leaves_consistent_documents(tmp_path, delay):
    # Given a process rewriting documents' attributes and access lists, killed with SIGKILL at some point
    root = tmp_path / "index"
    kill_writer_after(_rewrite_forever, root, delay, ready_timeout=60)
    # When the folder is reopened
    index = LocalSearchIndex(root)
    partition = index._partition(MODEL, "acme", "c")
    # Then every document has one whole version (its attributes and access list written together), its five
    # chunks follow it on the vector leg, and the keyword leg never shows a chunk under another version's group
    for d in range(8):
        attributes, access = partition.document_filters(f"d{d}")
        version = attributes["v"]
        assert access == Access(groups=(f"g{version}",)), (d, attributes, access)
        group = Principals(groups=(f"g{version}",))
        assert knn(index, SearchFilters(principals=group)) >= {f"d{d}.{i}" for i in range(5)}
        assert knn(index, SearchFilters(attributes=parse_filter({"v": version}), principals=group)) == {
            f"d{d}.{i}" for i in range(5)
        }
        assert {c.split(".")[0] for c in words(index, SearchFilters(principals=group))} <= {f"d{d}"}
    # And writes go on
    index.upsert(MODEL, chunks("after", 1, seed=500, attributes={"v": 10**6}))
    assert words(index, SearchFilters(attributes=parse_filter({"v": 10**6}))) == {"after.0"}
    index.close()


# -- data directories whose tenant keyword indices predate the filter fields -----------------------------------


def old_schema() -> tantivy.Schema:
    """The schema of a tenant keyword index before attribute filters (issue 23)."""
    return base_schema_builder().build()


def write_old_tenant_index(folder: Path, records: list[IndexRecord]) -> None:
    def key(*parts):
        return json.dumps(parts, ensure_ascii=False, separators=(",", ":"))

    folder.mkdir(parents=True)
    index = tantivy.Index(old_schema(), path=str(folder))
    index.register_tokenizer(ANALYZER, text_analyzer())
    writer = index.writer(15_000_000, 1)
    for item in records:
        writer.add_document(
            tantivy.Document(
                text=item.text,
                partition=key(MODEL, item.tenant, item.collection),
                document=key(MODEL, item.tenant, item.collection, item.document_id),
                chunk=key(MODEL, item.tenant, item.collection, item.chunk_id),
                language=item.language or "en",
            )
        )
    writer.commit()
    writer.wait_merging_threads()


def older_data_directory(tmp_path: Path) -> tuple[Path, list[IndexRecord]]:
    """Vectors of two tenants written as before (no attributes), and their keyword indices in the old schema."""
    root = tmp_path / "index"
    records = chunks("a", 2, text="coral reef") + chunks("a", 2, tenant="globex", text="coral atoll")
    vectors = LocalSearchIndex(root)
    vectors.upsert(MODEL, records)
    vectors.close()
    shutil.rmtree(root / "keywords")
    for tenant in ("acme", "globex"):
        write_old_tenant_index(
            root / "keywords" / tenant_folder(tenant), [item for item in records if item.tenant == tenant]
        )
    return root, records


@pytest.mark.parametrize("interrupted", [None, "half built", "swapped out"])
def test_tenant_keyword_indices_without_the_filter_fields_are_rebuilt_from_the_chunk_store(tmp_path, interrupted):
    root, records = older_data_directory(tmp_path)
    store = chunk_store(tmp_path / "db.sqlite3", records)
    acme = root / "keywords" / tenant_folder("acme")
    if interrupted == "half built":  # a crash while the new index was being written: it is incomplete
        (root / "keywords" / f"{acme.name}.new").mkdir()
        (root / "keywords" / f"{acme.name}.new" / "garbage").write_text("x")
    # When it is opened without the chunk store / Then it refuses and changes nothing
    with pytest.raises(RuntimeError, match="chunk store"):
        LocalSearchIndex(root)
    assert "access_set" not in (acme / "meta.json").read_text()
    if interrupted == "swapped out":  # a crash between the two renames of a completed rebuild
        index = LocalSearchIndex(root, chunks=store)
        index.close()
        shutil.move(acme, root / "keywords" / f"{acme.name}.new")
        write_old_tenant_index(root / "keywords" / f"{acme.name}.old", [r for r in records if r.tenant == "acme"])
    # When it is opened with the chunk store
    index = LocalSearchIndex(root, chunks=store)
    # Then every tenant index has the filter fields, keyword search finds each tenant's own chunks, and they
    # behave as having no attributes and no access list
    assert sorted(path.name for path in (root / "keywords").iterdir()) == sorted(
        tenant_folder(tenant) for tenant in ("acme", "globex")
    )
    for tenant, word in (("acme", "reef"), ("globex", "atoll")):
        assert "access_set" in (root / "keywords" / tenant_folder(tenant) / "meta.json").read_text()
        assert words(index, SearchFilters(), tenant=tenant, query="coral") == {"a.0", "a.1"}
        assert words(index, SearchFilters(principals=Principals(user="anyone")), tenant=tenant, query=word) == {
            "a.0",
            "a.1",
        }
        assert (
            words(index, SearchFilters(principals=Principals(user="anyone", required=True)), tenant=tenant, query=word)
            == set()
        )
        assert words(index, SearchFilters(language="en"), tenant=tenant, query=word) == {"a.0", "a.1"}
    # And a document written now gets its fields on both legs; reopening rebuilds nothing (no store needed)
    index.upsert(MODEL, chunks("b", 1, seed=40, text="coral reef", access=Access(groups=("eng",))))
    assert words(index, SearchFilters(principals=ENG), query="reef") == {"a.0", "a.1", "b.0"}
    assert words(index, SearchFilters(principals=Principals(groups=("eng",), required=True)), query="reef") == {"b.0"}
    index.close()
    LocalSearchIndex(root).close()


def test_a_filtered_search_of_float16_rows_scores_only_the_matching_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(ann, "MIN_ROWS", 200)
    monkeypatch.setattr(ann, "BUILD_THREADS", 1)
    # Given a partition with a graph (float16 rows) where a filter keeps half the rows, below the graph's threshold
    index = LocalSearchIndex(tmp_path / "index")
    index.upsert(
        MODEL,
        chunks("eng", 150, access=Access(groups=("eng",)))
        + chunks("ops", 150, seed=500, access=Access(groups=("ops",))),
    )
    partition = index._partition(MODEL, "acme", "c")
    assert partition.vectors.dtype == np.float16
    scored = []
    scores = type(partition).scores
    monkeypatch.setattr(
        type(partition),
        "scores",
        lambda self, rows, query: (scored.append(None if rows is None else len(rows)), scores(self, rows, query))[1],
    )
    # When eng searches
    found = knn(index, SearchFilters(principals=ENG), k=5)
    # Then only the 150 matching rows were widened and scored (never the whole matrix), and the answer is exact
    assert scored == [150]
    wanted = sorted(range(150), key=lambda i: -float(unit(i) @ unit(999)))[:5]
    assert found == {f"eng.{i}" for i in wanted}
    index.close()


# -- a filter that admits most chunks (the keyword leg over-fetches and lets the partition's values decide) -------


def _one_chunk(document_id: str, text: str, access: Access) -> IndexRecord:
    return replace(chunks(document_id, 1, access=access, text=text)[0], chunk_id=f"{document_id}.0")


def _keyword_calls(index, monkeypatch) -> list[SearchFilters]:
    """The filters of every tantivy search the index makes from here on."""
    calls: list[SearchFilters] = []
    search = index._keywords.search

    def spy(model, tenant, collections, query, k, filters):
        calls.append(filters)
        return search(model, tenant, collections, query, k, filters)

    monkeypatch.setattr(index._keywords, "search", spy)
    return calls


THOUSAND = Principals(user="bob", groups=tuple(f"g{i}" for i in range(1000)))
SEEN, DENIED = Access(groups=("g5",)), Access(groups=("g5",), deny_groups=("g7",))


def test_a_filter_that_admits_most_chunks_gives_the_keyword_leg_the_same_top_k_as_the_filter_in_the_index(
    tmp_path, monkeypatch
):
    # Given 20 documents a user in 1,000 groups may see 16 of, the 4 denied ones the best keyword matches
    index = LocalSearchIndex(tmp_path / "index")
    records = [_one_chunk(f"no{i}", "tidal " * 4 + "survey", DENIED) for i in range(4)]
    records += [_one_chunk(f"ok{i:02d}", "tidal " + "survey " * i, SEEN) for i in range(16)]
    index.upsert(MODEL, records)
    calls = _keyword_calls(index, monkeypatch)
    # When the user asks for 5 by keyword
    wide = index.keyword_search(MODEL, "acme", ["c"], "tidal", 5, SearchFilters(principals=THOUSAND))
    # Then one tantivy search ran, without the access clause (the share admitted is 16 of 20 chunks)
    assert [filters.principals for filters in calls] == [None]
    # And the hits are the 5 best the user may see, the same hits and scores as with the filter in the index
    shipped = search_index.WIDE_FILTER_SHARE
    monkeypatch.setattr(search_index, "WIDE_FILTER_SHARE", 2.0)
    narrow = index.keyword_search(MODEL, "acme", ["c"], "tidal", 5, SearchFilters(principals=THOUSAND))
    assert calls[-1].principals == THOUSAND
    assert [(hit.chunk_id, hit.score) for hit in wide] == [(hit.chunk_id, hit.score) for hit in narrow]
    assert [hit.chunk_id for hit in wide] == ["ok00.0", "ok01.0", "ok02.0", "ok03.0", "ok04.0"]
    # And a document denied to the user a moment ago, the best match of all, with one of its two chunks rewritten
    # so far, is never among them: the partition's values are the word, not the chunk's own terms
    monkeypatch.setattr(search_index, "WIDE_FILTER_SHARE", shipped)
    revoked = chunks("rev", 2, access=SEEN, text="tidal " * 6)
    index.upsert(MODEL, revoked)
    index.upsert(MODEL, [replace(revoked[0], access=DENIED)])
    calls.clear()
    hits = index.keyword_search(MODEL, "acme", ["c"], "tidal", 5, SearchFilters(principals=THOUSAND))
    assert [filters.principals for filters in calls] == [None]
    assert [hit.chunk_id for hit in hits] == ["ok00.0", "ok01.0", "ok02.0", "ok03.0", "ok04.0"]
    index.close()


def test_when_the_over_fetched_hits_hold_too_few_admitted_the_keyword_leg_runs_the_filtered_query(
    tmp_path, monkeypatch
):
    # Given 40 documents a user may see 24 of (60 %): the 16 denied ones all hold the word, strongly, and only 4
    # of the visible ones hold it at all
    index = LocalSearchIndex(tmp_path / "index")
    records = [_one_chunk(f"no{i:02d}", "tidal " * 4, DENIED) for i in range(16)]
    records += [_one_chunk(f"ok{i:02d}", "tidal " + "survey " * (i + 1), SEEN) for i in range(4)]
    records += [_one_chunk(f"other{i:02d}", "harbour survey", SEEN) for i in range(20)]
    index.upsert(MODEL, records)
    calls = _keyword_calls(index, monkeypatch)
    # When the user asks for 3 by keyword
    hits = index.keyword_search(MODEL, "acme", ["c"], "tidal", 3, SearchFilters(principals=THOUSAND))
    # Then the over-fetch (8 hits, all denied) came first, then the filtered query, and the 3 best visible came back
    assert [filters.principals for filters in calls] == [None, THOUSAND]
    assert [hit.chunk_id for hit in hits] == ["ok00.0", "ok01.0", "ok02.0"]
    # And asked for more than exist, the user gets the 4 there are
    assert len(index.keyword_search(MODEL, "acme", ["c"], "tidal", 10, SearchFilters(principals=THOUSAND))) == 4
    index.close()


def test_a_lone_group_stays_in_the_keyword_index_without_a_share_computed(tmp_path, monkeypatch):
    # Given 10 documents a user in one group may see all of
    index = LocalSearchIndex(tmp_path / "index")
    index.upsert(MODEL, [_one_chunk(f"d{i}", "tidal survey", SEEN) for i in range(10)])
    calls = _keyword_calls(index, monkeypatch)
    shares = []
    monkeypatch.setattr(index, "_admitted_share", lambda *args: shares.append(args) or 1.0)
    # Then its keyword query runs one tantivy search with its term query, and no row mask is built for it
    assert len(words(index, SearchFilters(principals=Principals(groups=("g5",))))) == 10
    assert [filters.principals for filters in calls] == [Principals(groups=("g5",))] and shares == []
    index.close()


def test_a_filter_that_admits_few_chunks_stays_in_the_keyword_index(tmp_path, monkeypatch):
    # Given 10 documents a user may see 2 of
    index = LocalSearchIndex(tmp_path / "index")
    records = [_one_chunk(f"d{i}", "tidal survey", SEEN if i < 2 else DENIED) for i in range(10)]
    index.upsert(MODEL, records)
    calls = _keyword_calls(index, monkeypatch)
    # Then a keyword query runs one tantivy search, with the access clause, and finds the 2
    assert words(index, SearchFilters(principals=THOUSAND)) == {"d0.0", "d1.0"}
    assert [filters.principals for filters in calls] == [THOUSAND]
    index.close()
