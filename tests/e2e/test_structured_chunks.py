"""Tables and sections through `kindex serve` (issue 28 items 1, 2): real DOCX files from ../shared/data/docs (read in
place) uploaded over HTTP, then asked about a table cell."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "docs"
FILES = (
    "docx/docling-word_sample.docx",
    "docx/docx-tables.docx",
    "docx/eng_spa_mult.docx",
    "md/eng_spa_mult.md",
    "md/docling-wiki-ibm.md",
)


def wait_indexed(session, url, ids, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = {d: session.get(f"{url}/documents/{d}").json()["status"] for d in ids}
        if all(s in ("indexed", "failed") for s in statuses.values()):
            return statuses
        time.sleep(0.2)
    raise AssertionError(statuses)


def test_a_docx_table_cell_is_answered_in_the_top_3_with_its_section_and_header(server):
    # Given a collection of small chunks holding five real documents, among them a DOCX with a food table
    admin = server.session(server.admin_key)
    url = server.url("/v1/collections/structured")
    assert admin.put(url, json={"allow_guests": True, "chunking_max_size": 120}).status_code == 201
    ids = []
    for relative in FILES:
        doc_id = relative.replace("/", "-").replace(".", "-")
        ids.append(doc_id)
        data = (DOCS / relative).read_bytes()
        ticket = admin.post(
            f"{url}/documents/{doc_id}/upload", json={"filename": Path(relative).name, "size": len(data)}
        )
        assert ticket.status_code in (200, 201), ticket.text
        upload = ticket.json()
        assert requests.put(upload["url"], data=data, headers=upload["headers"]).status_code == 200
    assert set(wait_indexed(admin, url, ids).values()) == {"indexed"}
    # When a reader asks about one cell of the table's last row
    response = admin.post(f"{url}/query", json={"query": "How many calories per portion does grain have?", "k": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    # Then a top-3 result holds the whole row, knows the table's columns and the heading it sits under
    row = [r for r in body["results"] if "| Grain | Corn, Buckwheat, Barley | 200 |" in r["content"]]
    assert row, [r["content"] for r in body["results"]]
    hit = row[0]
    assert hit["document_id"] == "docx-docling-word_sample-docx"
    assert hit["section"] == "Let’s swim! > Let’s eat"
    assert "Calories per portion" in hit["table_header"] and "Calories" not in hit["content"]
    # And the content is exactly the document's text at the chunk's offsets (the section and header are apart)
    chunks = admin.get(f"{url}/documents/{hit['document_id']}/chunks").json()["chunks"]
    (listed,) = [c for c in chunks if c["chunk_id"] == hit["chunk_id"]]
    assert (listed["text"], listed["section"], listed["table_header"]) == (
        hit["content"],
        hit["section"],
        hit["table_header"],
    )
    # And the context block and the citations carry the section
    assert 'section="Let’s swim! &gt; Let’s eat"' in body["context"]
    (citation,) = [c for c in body["citations"] if c["document_id"] == hit["document_id"]]
    assert "Let’s swim! > Let’s eat" in citation["sections"]
