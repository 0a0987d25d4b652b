"""`kindex ingest FOLDER` (local): files whose paths map to one document id, or to no valid id, are refused one by
one; nothing overwrites another file's document and the other files are indexed."""

from __future__ import annotations

import pytest

from kindex.domain.models import CollectionInput
from kindex_local.deployment import build_worker
from kindex_local.ingest_cli import ingest_path

pytestmark = pytest.mark.integration


def test_a_file_whose_id_another_file_already_has_is_not_written(local_container, tmp_path):
    # Given a folder where `a/b.md` and a file named `a:b.md` both map to the id `a:b.md`
    folder = tmp_path / "docs"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "b.md").write_text("# From the sub-folder\n\nalpha bravo")
    (folder / "a:b.md").write_text("# From the top\n\ncharlie delta")
    (folder / "c.md").write_text("# Another\n\necho foxtrot")
    (folder / "bad\x01name.md").write_text("control characters are no id")
    local_container.catalog.put_collection("t", "c", CollectionInput())
    # When the folder is ingested
    outcome = ingest_path(local_container, "t", "c", folder, worker=build_worker(), timeout=120, progress=False)
    # Then the first file keeps the id, the second is reported and not written, the bad name is refused alone
    assert sorted(outcome["indexed"]) == ["a:b.md", "c.md"]
    assert len(outcome["failed"]) == 2, outcome
    clash = next(line for line in outcome["failed"] if line.startswith("a:b.md: "))
    assert "has the same document id as" in clash and "not written" in clash
    assert any(line.startswith("bad\x01name.md: ") for line in outcome["failed"])
    chunks = local_container.adapters.chunks.list_chunks("t", "c", "a:b.md")
    assert "alpha bravo" in " ".join(chunk.text for chunk in chunks)
    assert "charlie" not in " ".join(chunk.text for chunk in chunks)
    assert local_container.adapters.metadata.get_document("t", "c", "bad\x01name.md") is None


def test_pending_statuses_are_read_through_the_listing_or_one_read_each_with_the_same_answer(
    local_container, monkeypatch
):
    from kindex.domain.models import DocumentInput
    from kindex_local import ingest_cli

    # Given a collection of 25 documents, and another tenant with the same collection and document ids
    for tenant in ("t", "u"):
        local_container.catalog.put_collection(tenant, "c", CollectionInput())
        for i in range(25):
            local_container.catalog.put_document(tenant, "c", f"d{i:02d}", DocumentInput(content=f"{tenant} {i}"))
    wanted = [f"d{i:02d}" for i in (3, 7, 11, 24)] + ["missing"]
    monkeypatch.setattr(ingest_cli, "LIST_PAGE", 4)  # 25 documents: 7 pages of listing
    # When 5 are wanted (5 reads are fewer than 7 pages) and when 13 are (the listing is)
    one_each = ingest_cli._current(local_container.adapters.metadata, "t", "c", wanted)
    many = wanted[:4] + [f"d{i:02d}" for i in range(12, 20)] + ["missing"]
    calls = []
    original = local_container.adapters.metadata.list_documents
    monkeypatch.setattr(
        local_container.adapters.metadata, "list_documents", lambda *a, **k: calls.append(k) or original(*a, **k)
    )
    listed = ingest_cli._current(local_container.adapters.metadata, "t", "c", many)
    # Then both ways find the same records of this tenant only, and a missing document is absent
    assert sorted(one_each) == wanted[:4] and "missing" not in listed
    assert sorted(listed) == sorted(many[:-1]) and len(calls) == 7
    assert all(document.id == doc_id and document.status.value == "pending" for doc_id, document in listed.items())
    own = {
        doc_id: local_container.adapters.metadata.get_document("t", "c", doc_id).content_sha256 for doc_id in many[:-1]
    }
    assert {doc_id: document.content_sha256 for doc_id, document in listed.items()} == own
    assert {doc_id: document.content_sha256 for doc_id, document in one_each.items()} == {
        doc_id: own[doc_id] for doc_id in one_each
    }
