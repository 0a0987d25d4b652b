"""A follower of the embedded index (LocalSearchIndex `follower=True`, what `kindex serve`'s query processes open)
sees every write the writer acknowledged before its search began - upserts, deletes, access-list changes,
compactions, graph partitions - and never writes a file of the folder. Real files, a real writer; the follower is a
second instance on the same folder, as in a query process."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from kindex.adapters.local.search import ann
from kindex.adapters.local.search import log as vector_log
from kindex.adapters.local.search.index import FollowerWrite, LocalSearchIndex
from kindex.domain.filters import Access
from kindex.domain.types import IndexRecord, Principals, SearchFilters

MODEL = "hash:8"
DIMS = 8


def _vector(seed: int) -> list[float]:
    return np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32).tolist()


def _records(tenant: str, document: str, count: int, *, words: str = "", access: Access | None = None, seed: int = 0):
    return [
        IndexRecord(
            tenant=tenant,
            collection="docs",
            document_id=document,
            chunk_id=f"{document}-{i}",
            vector=_vector(seed * 10_000 + i),
            text=f"{words} chunk {i} of {document}",
            access=access,
        )
        for i in range(count)
    ]


def _knn_documents(index: LocalSearchIndex, tenant: str, seed: int, k: int = 50, filters=None) -> set[str]:
    return {hit.document_id for hit in index.knn_search(MODEL, tenant, ["docs"], _vector(seed), k, filters)}


def _keyword_documents(index: LocalSearchIndex, tenant: str, words: str, filters=None) -> set[str]:
    return {hit.document_id for hit in index.keyword_search(MODEL, tenant, ["docs"], words, 50, filters)}


def _folder_state(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_mode)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def pair(tmp_path):
    writer = LocalSearchIndex(tmp_path / "index")
    follower = LocalSearchIndex(tmp_path / "index", follower=True)
    yield writer, follower
    follower.close()
    writer.close()


def test_a_follower_sees_each_upsert_and_delete_the_writer_acknowledged(pair):
    writer, follower = pair
    assert _knn_documents(follower, "acme", 1) == set()  # nothing written yet: no files, no error
    writer.upsert(MODEL, _records("acme", "d1", 3, words="zebra"))
    assert _knn_documents(follower, "acme", 1) == {"d1"}
    assert _keyword_documents(follower, "acme", "zebra") == {"d1"}
    # Given a second write (the log's tail) and a third tenant's write with the same ids
    writer.upsert(MODEL, _records("acme", "d2", 2, words="giraffe"))
    writer.upsert(MODEL, _records("globex", "d1", 2, words="zebra"))
    assert _knn_documents(follower, "acme", 1) == {"d1", "d2"}
    assert _keyword_documents(follower, "acme", "giraffe") == {"d2"}
    # Then each tenant finds only its own chunks, through both legs
    acme = {hit.chunk_id for hit in follower.knn_search(MODEL, "acme", ["docs"], _vector(1), 50)}
    assert acme == {"d1-0", "d1-1", "d1-2", "d2-0", "d2-1"}
    assert len(follower.keyword_search(MODEL, "globex", ["docs"], "zebra", 50)) == 2
    # When the writer deletes a document, the follower's next search no longer finds it
    writer.delete(MODEL, "acme", "docs", document_ids=["d1"])
    assert _knn_documents(follower, "acme", 1) == {"d2"}
    assert _keyword_documents(follower, "acme", "zebra") == set()
    assert _keyword_documents(follower, "globex", "zebra") == {"d1"}
    # And a chunk deleted by id is gone too
    writer.delete(MODEL, "acme", "docs", chunk_ids=["d2-0"])
    assert {hit.chunk_id for hit in follower.knn_search(MODEL, "acme", ["docs"], _vector(1), 50)} == {"d2-1"}


def test_a_narrower_access_list_applies_in_the_follower_at_once(pair):
    writer, follower = pair
    everyone = Access(groups=("staff",))
    writer.upsert(MODEL, _records("acme", "plan", 4, words="merger", access=everyone))
    staff = SearchFilters(principals=Principals(user="ann", groups=("staff",)))
    assert _knn_documents(follower, "acme", 1, filters=staff) == {"plan"}
    assert _keyword_documents(follower, "acme", "merger", staff) == {"plan"}
    # When the document is rewritten for the board only (same vectors: only its access list changes)
    board = Access(groups=("board",))
    writer.upsert(MODEL, _records("acme", "plan", 4, words="merger", access=board))
    # Then the follower's next search of a staff member finds it through neither leg
    assert _knn_documents(follower, "acme", 1, filters=staff) == set()
    assert _keyword_documents(follower, "acme", "merger", staff) == set()
    member = SearchFilters(principals=Principals(user="bob", groups=("board",)))
    assert _knn_documents(follower, "acme", 1, filters=member) == {"plan"}


def test_a_follower_reads_again_after_a_compaction_and_after_the_collection_is_emptied(pair, monkeypatch):
    writer, follower = pair
    monkeypatch.setattr(vector_log, "COMPACT_MAX_RECORDS", 3)
    folder = writer.root / "vectors"
    writer.upsert(MODEL, _records("acme", "d1", 2))
    assert _knn_documents(follower, "acme", 1) == {"d1"}
    # When enough writes arrive that the writer compacts (a new snapshot, the log removed)
    for number in range(2, 6):
        writer.upsert(MODEL, _records("acme", f"d{number}", 2, seed=number))
    assert list(folder.glob("*.npz"))
    # Then the follower holds what the writer holds, and goes on following the new log
    assert _knn_documents(follower, "acme", 1) == {f"d{n}" for n in range(1, 6)}
    writer.delete(MODEL, "acme", "docs", document_ids=["d3"])
    assert _knn_documents(follower, "acme", 1) == {"d1", "d2", "d4", "d5"}
    # When the whole collection is deleted (its files removed) and written again
    writer.delete(MODEL, "acme", "docs")
    assert _knn_documents(follower, "acme", 1) == set()
    assert not list(folder.glob("*"))
    writer.upsert(MODEL, _records("acme", "fresh", 1, seed=9))
    assert _knn_documents(follower, "acme", 1) == {"fresh"}


def test_a_record_still_being_appended_is_left_alone_and_applied_once_complete(pair):
    writer, follower = pair
    writer.upsert(MODEL, _records("acme", "d1", 2))
    assert _knn_documents(follower, "acme", 1) == {"d1"}
    (log,) = (writer.root / "vectors").glob("*.log")
    # Given an append cut in two, as the follower may see it between the writer's two `write` calls
    record = vector_log.frame_record(
        vector_log.OP_UPSERT,
        {"rows": [["late-0", "late", "", ""]], "documents": {}},
        np.asarray([_vector(5)], dtype="<f4").tobytes(),
    )
    with open(log, "ab") as handle:
        handle.write(record[: len(record) // 2])
    size = log.stat().st_size
    # Then the follower searches what was complete, and neither truncates nor changes the log
    assert _knn_documents(follower, "acme", 1) == {"d1"}
    assert log.stat().st_size == size
    with open(log, "ab") as handle:
        handle.write(record[len(record) // 2 :])
    assert _knn_documents(follower, "acme", 1) == {"d1", "late"}


def test_a_log_rewritten_under_the_same_name_is_read_anew(pair):
    writer, follower = pair
    writer.upsert(MODEL, _records("acme", "d1", 2))
    assert _knn_documents(follower, "acme", 1) == {"d1"}
    (log,) = (writer.root / "vectors").glob("*.log")
    data = log.read_bytes()
    # Given the log rewritten in place with another record of the same length (its opening record kept): the size
    # alone does not tell
    opening = next(vector_log.read_records(data))[3]
    record = vector_log.frame_record(
        vector_log.OP_UPSERT,
        {"rows": [["e1-0", "e1", "", ""], ["e1-1", "e1", "", ""]], "documents": {"e1": [None, None]}},
        np.asarray([_vector(7), _vector(8)], dtype="<f4").tobytes(),
    )
    assert opening + len(record) == len(data)
    with open(log, "r+b") as handle:
        handle.seek(opening)
        handle.write(record)
    # Then the follower reads it again from the start rather than trusting what it had read
    assert _knn_documents(follower, "acme", 1) == {"e1"}


def test_a_follower_writes_nothing_and_refuses_writes(pair):
    writer, follower = pair
    writer.upsert(MODEL, _records("acme", "d1", 3, words="zebra"))
    writer.upsert(MODEL, _records("acme", "d2", 3, words="zebra"))
    before = _folder_state(writer.root)
    assert _knn_documents(follower, "acme", 1) == {"d1", "d2"}
    assert _keyword_documents(follower, "acme", "zebra") == {"d1", "d2"}
    assert follower.chunk_ids(MODEL, "acme", "docs") == {f"d{d}-{i}" for d in (1, 2) for i in range(3)}
    with pytest.raises(FollowerWrite):
        follower.upsert(MODEL, _records("acme", "d3", 1))
    with pytest.raises(FollowerWrite):
        follower.delete(MODEL, "acme", "docs", document_ids=["d1"])
    with pytest.raises(FollowerWrite):
        follower.upsert_deferred(MODEL, _records("acme", "d3", 1))
    follower.close()
    assert _folder_state(writer.root) == before
    assert _knn_documents(writer, "acme", 1) == {"d1", "d2"}


def test_a_follower_loads_the_graph_saved_with_the_snapshot_and_follows_its_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(ann, "MIN_ROWS", 300)
    writer = LocalSearchIndex(tmp_path / "index")
    follower = LocalSearchIndex(tmp_path / "index", follower=True)
    try:
        writer.upsert(MODEL, [r for d in range(40) for r in _records("acme", f"d{d}", 10, seed=d)])
        assert list((tmp_path / "index" / "vectors").glob("*.usearch"))
        writer.upsert(MODEL, _records("acme", "late", 5, seed=99))
        for seed in (1, 2, 3, 4):
            expected = [hit.chunk_id for hit in writer.knn_search(MODEL, "acme", ["docs"], _vector(seed), 10)]
            found = [hit.chunk_id for hit in follower.knn_search(MODEL, "acme", ["docs"], _vector(seed), 10)]
            assert found == expected
        key = (MODEL, "acme", "docs")
        assert follower._slots[key].partition.graph is not None
        assert len(follower._slots[key].partition) == 405
    finally:
        follower.close()
        writer.close()


@pytest.mark.slow
def test_sixteen_follower_threads_never_see_a_document_deleted_before_their_search_began(pair):
    writer, follower = pair
    deleted: set[str] = set()
    guard = threading.Lock()
    failures: list[str] = []
    stop = threading.Event()

    def write() -> None:
        try:
            for number in range(40):
                writer.upsert(MODEL, _records("acme", f"d{number}", 3, words="zebra", seed=number))
                if number:
                    writer.delete(MODEL, "acme", "docs", document_ids=[f"d{number - 1}"])
                    with guard:
                        deleted.add(f"d{number - 1}")
        finally:
            stop.set()

    def search(seed: int) -> None:
        while not stop.is_set():
            with guard:
                gone = set(deleted)
            found = _knn_documents(follower, "acme", seed) | _keyword_documents(follower, "acme", "zebra")
            if found & gone:
                failures.append(f"found deleted {sorted(found & gone)}")
                return

    threads = [threading.Thread(target=search, args=(seed,)) for seed in range(16)]
    for thread in threads:
        thread.start()
    write()
    for thread in threads:
        thread.join()
    assert failures == []
    assert _knn_documents(follower, "acme", 1) == {"d39"}
    assert os.listdir(writer.root / "vectors")


def _open_deleted_files(root: Path) -> list[str]:
    """This process's open files under `root` that were deleted (what `ls -l /proc/self/fd` shows as "(deleted)")."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)) and target.endswith("(deleted)"):
            found.append(target)
    return found


def test_a_sweep_lets_go_of_a_deleted_collection_in_memory_and_on_disk(pair):
    writer, follower = pair
    writer.upsert(MODEL, _records("acme", "secret", 3, words="zebra"))
    writer.upsert(MODEL, _records("acme", "other", 2, words="lion"))
    assert _knn_documents(follower, "acme", 1) == {"secret", "other"}
    key = (MODEL, "acme", "docs")
    assert follower.sweep() == 0  # nothing changed: nothing let go
    # When the writer deletes the whole collection (its log removed) and the follower does not search it again
    writer.delete(MODEL, "acme", "docs")
    assert _open_deleted_files(writer.root)  # the follower still holds the removed log
    # Then a sweep lets go of the log and of the rows
    assert follower.sweep() == 1
    assert _open_deleted_files(writer.root) == []
    assert follower._slots[key].partition is None and not follower._slots[key].loaded
    assert _knn_documents(follower, "acme", 1) == set()


def test_a_sweep_moves_the_keyword_searchers_to_the_last_commit(pair):
    writer, follower = pair
    writer.upsert(MODEL, _records("acme", "secret", 3, words="zebra"))
    assert _keyword_documents(follower, "acme", "zebra") == {"secret"}
    (tenant,) = follower._keywords._open_tenants()
    writer.delete(MODEL, "acme", "docs", document_ids=["secret"])
    assert tenant.meta != (tenant.path / "meta.json").read_bytes()
    follower.sweep()
    assert tenant.meta == (tenant.path / "meta.json").read_bytes()
    assert tenant.index.searcher().num_docs == 0
