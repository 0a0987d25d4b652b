"""Contract of the ChunkStore port: what every adapter (SQLite, DynamoDB...) must do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kindex.domain.types import ChunkRange, ChunkRef, StoredChunk

if TYPE_CHECKING:
    from kindex.domain.ports import ChunkStore

# Ids that stress key building: separators, escapes, spaces, unicode, and the longest ids the API accepts.
AWKWARD = ["a#b", "a%23b", "T#x#C#y", "é 日本", "D", "\U0001f600" * 255]


def chunk(document_id: str, index: int, *, collection: str = "c", text: str | None = None, **changes) -> StoredChunk:
    text = f"chunk {index} of {document_id}" if text is None else text
    fields = dict(
        chunk_id=f"{document_id}-{index}",
        collection=collection,
        document_id=document_id,
        index=index,
        start=index * 100,
        end=index * 100 + len(text),
        text=text,
    )
    return StoredChunk(**{**fields, **changes})


def ref(c: StoredChunk) -> ChunkRef:
    return ChunkRef(c.collection, c.document_id, c.chunk_id)


class ChunkStoreContract:
    """Subclass in a `Test*` class that provides `store`: a fresh, empty ChunkStore."""

    @pytest.fixture
    def store(self) -> ChunkStore:
        raise NotImplementedError(f"{type(self).__name__} must provide the `store` fixture")

    @pytest.mark.slow
    def test_chunks_round_trip_every_field(self, store):
        # Given chunks with and without pages, unicode, an empty text and a text of tens of KB
        chunks = [
            chunk("d1", 0, page_start=1, page_end=2, text="Ünïcode ✓ 日本語\nline two"),
            chunk("d1", 1, page_start=2, page_end=2, text=""),
            chunk("d1", 2, text="x" * 40_000),
        ]
        # When stored and read back by ref and by listing
        store.put_chunks("t", chunks)
        # Then every field is identical, and None pages stay None
        assert store.get_chunks("t", [ref(c) for c in chunks]) == {c.chunk_id: c for c in chunks}
        assert store.list_chunks("t", "c", "d1") == chunks
        assert store.list_chunks("t", "c", "d1")[2].page_start is None

    def test_sections_and_table_headers_round_trip_and_their_absence_stays_none(self, store):
        # Given a chunk with a heading path and a table header, one with a unicode path only, one with neither
        chunks = [
            chunk(
                "d1",
                0,
                section="Handbook > CHAPTER 2 > E. SURETY BONDS",
                table_header="| Food | Calories |\n| --- | --- |",
            ),
            chunk("d1", 1, section="Étymologie > 日本"),
            chunk("d1", 2),
        ]
        # When stored and read back by ref, by listing and by iterating
        store.put_chunks("t", chunks)
        # Then both fields are identical, and a chunk without them reads None
        assert store.get_chunks("t", [ref(c) for c in chunks]) == {c.chunk_id: c for c in chunks}
        assert store.list_chunks("t", "c", "d1") == chunks
        assert list(store.iter_chunks("t", "c", "d1")) == chunks
        assert (chunks[2].section, chunks[2].table_header) == (None, None)

    def test_list_chunks_is_in_index_order_whatever_the_ids(self, store):
        # Given chunks written out of order, whose ids sort differently from their indexes
        chunks = [chunk("d1", i, chunk_id=f"id-{(7 * i) % 12:02d}") for i in range(12)]
        store.put_chunks("t", list(reversed(chunks)))
        # When listing / Then index order
        assert [c.index for c in store.list_chunks("t", "c", "d1")] == list(range(12))

    @pytest.mark.slow
    def test_iter_chunks_walks_index_then_id_order_from_any_position(self, store):
        # Given 250 chunks (more than one read batch) written out of order, two of them sharing an index (a document
        # being re-chunked holds old and new chunks for a moment), and a neighbouring document
        chunks = [chunk("d1", i, chunk_id=f"id-{(7 * i) % 250:03d}") for i in range(250)]
        twin = chunk("d1", 5, chunk_id="id-000-twin")
        store.put_chunks("t", list(reversed(chunks)) + [twin, chunk("d2", 0)])
        expected = sorted(chunks + [twin], key=lambda c: (c.index, c.chunk_id))
        # When iterating from the start, from a position, from a position that no longer exists, and with an offset
        everything = list(store.iter_chunks("t", "c", "d1"))
        after_twin = list(store.iter_chunks("t", "c", "d1", after=(5, "id-000-twin")))
        after_gone = list(store.iter_chunks("t", "c", "d1", after=(5, "id-000-twin-deleted")))
        skipped = list(store.iter_chunks("t", "c", "d1", after=(5, chunks[5].chunk_id), offset=3))
        # Then each is the same order, resumed exactly where asked, never a chunk twice or of another document
        assert everything == expected
        position = expected.index(twin)
        assert after_twin == after_gone == expected[position + 1 :]
        assert skipped == expected[expected.index(chunks[5]) + 1 + 3 :]
        assert list(store.iter_chunks("t", "c", "d1", offset=251)) == []
        assert list(store.iter_chunks("t", "c", "nope")) == [] and list(store.iter_chunks("u", "c", "d1")) == []

    def test_put_is_idempotent_and_replaces_by_chunk_id(self, store):
        # Given a stored chunk
        store.put_chunks("t", [chunk("d1", 0, text="old")])
        # When the same chunk id is written twice more, once with new text
        store.put_chunks("t", [chunk("d1", 0, text="old")])
        store.put_chunks("t", [chunk("d1", 0, text="new")])
        # Then there is one chunk, with the latest text
        assert [c.text for c in store.list_chunks("t", "c", "d1")] == ["new"]

    def test_get_chunks_returns_only_existing_chunks_across_documents(self, store):
        # Given chunks of two documents in two collections
        a, b = chunk("d1", 0), chunk("d2", 0, collection="c2")
        store.put_chunks("t", [a, b])
        # When asking for them, a missing chunk, a ref with the wrong document, and a duplicate ref
        refs = [ref(a), ref(b), ChunkRef("c", "d1", "nope"), ChunkRef("c", "d2", a.chunk_id), ref(a)]
        # Then exactly the two existing chunks come back
        assert store.get_chunks("t", refs) == {a.chunk_id: a, b.chunk_id: b}
        assert store.get_chunks("t", []) == {}

    def test_chunk_ranges_read_neighbours_by_index_across_documents_in_order(self, store):
        # Given two documents of 6 chunks (ids that do not sort like indexes) and a third of 2
        for document_id in ("d1", "d2"):
            store.put_chunks("t", [chunk(document_id, i, chunk_id=f"{document_id}-{9 - i}") for i in range(6)])
        store.put_chunks("t", [chunk("d3", i) for i in range(2)])
        # When ranges are read: two overlapping ones of d1, one of d2, one past d3's end and one of a missing doc
        ranges = [
            ChunkRange("c", "d1", 1, 2),
            ChunkRange("c", "d1", 2, 3),
            ChunkRange("c", "d2", 4, 8),
            ChunkRange("c", "d3", 1, 3),
            ChunkRange("c", "nope", 0, 3),
        ]
        found = store.get_chunk_ranges("t", ranges)
        # Then each chunk in a range comes once, in (collection, document, index) order, whole
        assert [(c.document_id, c.index) for c in found] == [
            ("d1", 1), ("d1", 2), ("d1", 3), ("d2", 4), ("d2", 5), ("d3", 1)
        ]  # fmt: skip
        assert found[0] == chunk("d1", 1, chunk_id="d1-8")
        assert store.get_chunk_ranges("t", []) == []

    def test_chunk_ranges_of_one_tenant_never_read_another_tenants_chunks(self, store):
        # Given two tenants with the same collection, document and chunk ids
        store.put_chunks("t1", [chunk("d1", i, text=f"t1 {i}") for i in range(3)])
        store.put_chunks("t2", [chunk("d1", i, text=f"t2 {i}") for i in range(3)])
        # When each reads the same range
        # Then each sees only its own texts
        for tenant in ("t1", "t2"):
            found = store.get_chunk_ranges(tenant, [ChunkRange("c", "d1", 0, 2)])
            assert [c.text for c in found] == [f"{tenant} {i}" for i in range(3)]
        assert store.get_chunk_ranges("t3", [ChunkRange("c", "d1", 0, 2)]) == []

    @pytest.mark.slow
    def test_many_chunk_ranges_in_one_call(self, store):
        # Given 150 documents of 3 chunks
        store.put_chunks("t", [chunk(f"d{n}", i) for n in range(150) for i in range(3)])
        # When the middle chunk and its neighbours of every document are read in one call
        found = store.get_chunk_ranges("t", [ChunkRange("c", f"d{n}", 0, 2) for n in range(150)])
        # Then all 450 come back
        assert len(found) == 450

    def test_tenants_are_isolated(self, store):
        # Given the same chunk under two tenants with different texts
        store.put_chunks("t1", [chunk("d1", 0, text="one")])
        store.put_chunks("t2", [chunk("d1", 0, text="two")])
        # When tenant t1 reads / Then it sees only its own chunk, and deleting t2's collection leaves it
        store.delete_chunks("t2", "c")
        assert store.get_chunks("t1", [ref(chunk("d1", 0))])["d1-0"].text == "one"
        assert store.get_chunks("t2", [ref(chunk("d1", 0))]) == {}

    @pytest.mark.slow
    def test_many_chunks_round_trip(self, store):
        # Given more chunks than one BatchWriteItem (25) and one BatchGetItem (100) take
        chunks = [chunk("d1", i) for i in range(230)]
        store.put_chunks("t", chunks)
        # When reading them all back by ref / Then all of them come back
        assert store.get_chunks("t", [ref(c) for c in chunks]) == {c.chunk_id: c for c in chunks}
        assert len(store.list_chunks("t", "c", "d1")) == 230

    def test_delete_given_chunk_ids(self, store):
        chunks = [chunk("d1", i) for i in range(5)]
        store.put_chunks("t", chunks)
        # When deleting two chunks and one that does not exist
        store.delete_chunks("t", "c", document_id="d1", chunk_ids=["d1-1", "d1-3", "missing"])
        # Then only the other three remain
        assert [c.index for c in store.list_chunks("t", "c", "d1")] == [0, 2, 4]

    def test_delete_a_document_spares_its_neighbours(self, store):
        # Given documents whose ids extend each other
        store.put_chunks("t", [chunk("d1", 0), chunk("d1", 1), chunk("d10", 0), chunk("d1", 0, collection="c2")])
        # When deleting d1 of collection c
        store.delete_chunks("t", "c", document_id="d1")
        # Then d1 is gone there and the others remain
        assert store.list_chunks("t", "c", "d1") == []
        assert len(store.list_chunks("t", "c", "d10")) == 1
        assert len(store.list_chunks("t", "c2", "d1")) == 1

    @pytest.mark.slow
    def test_delete_a_collection_removes_every_document_and_only_those(self, store):
        # Given many documents in a collection, and neighbours sharing its id as a prefix or living in another tenant
        for i in range(30):
            store.put_chunks("t", [chunk(f"d{i}", 0), chunk(f"d{i}", 1)])
        store.put_chunks("t", [chunk("d0", 0, collection="c#2"), chunk("d0", 0, collection="cc")])
        store.put_chunks("u", [chunk("d0", 0)])
        # When deleting the collection's chunks, twice (the second finds nothing)
        store.delete_chunks("t", "c")
        store.delete_chunks("t", "c")
        # Then none is left, and the neighbours are intact
        assert all(store.list_chunks("t", "c", f"d{i}") == [] for i in range(30))
        assert len(store.list_chunks("t", "c#2", "d0")) == 1
        assert len(store.list_chunks("t", "cc", "d0")) == 1
        assert len(store.list_chunks("u", "c", "d0")) == 1

    def test_deleting_a_document_then_rewriting_it_is_still_found_by_collection_delete(self, store):
        # Given a document whose chunks were deleted and then written again
        store.put_chunks("t", [chunk("d1", 0)])
        store.delete_chunks("t", "c", document_id="d1")
        store.put_chunks("t", [chunk("d1", 1)])
        # When the collection is deleted / Then the rewritten chunk goes too
        store.delete_chunks("t", "c")
        assert store.list_chunks("t", "c", "d1") == []

    @pytest.mark.slow
    @pytest.mark.parametrize("awkward", AWKWARD)
    def test_awkward_ids_round_trip_and_delete(self, store, awkward):
        # Given a chunk whose tenant, collection, document and chunk ids are all awkward (even the longest ones)
        c = chunk(awkward, 0, collection=awkward, chunk_id=awkward)
        store.put_chunks(awkward, [c])
        store.put_chunks(awkward, [chunk("other", 0, collection=awkward)])
        # When reading it back by ref and listing / Then it is found
        assert store.get_chunks(awkward, [ref(c)]) == {awkward: c}
        assert store.list_chunks(awkward, awkward, awkward) == [c]
        # And deleting its collection removes everything of it
        store.delete_chunks(awkward, awkward)
        assert store.get_chunks(awkward, [ref(c)]) == {}
        assert store.list_chunks(awkward, awkward, "other") == []
