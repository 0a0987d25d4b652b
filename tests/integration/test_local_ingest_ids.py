"""`kindex ingest FOLDER` (local): files whose paths map to one document id, or to no valid id, are refused one by
one; nothing overwrites another file's document and the other files are indexed."""

from __future__ import annotations

import pytest

from kindex.domain.models import CollectionInput
from kindex_local.app import build_worker
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
    chunks = local_container.chunks.list_chunks("t", "c", "a:b.md")
    assert "alpha bravo" in " ".join(chunk.text for chunk in chunks)
    assert "charlie" not in " ".join(chunk.text for chunk in chunks)
    assert local_container.metadata.get_document("t", "c", "bad\x01name.md") is None
