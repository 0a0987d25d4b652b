"""The hostile file set through a real `kindex serve`: bombs, binaries named `.txt`, a PDF named `.txt`, UTF-16
text. Each fails (or indexes) on its own, the server's memory stays within 1 GiB of its idle level, and the
ordinary documents queued behind them still index. Every hostile file is generated here, never committed."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.conftest import SHARED_DATA, RunningServer, start_server
from tests.support import hostile_files as hostile
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

GIB = 1024**3
MIB = 1024**2


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{pid}/status")


def reset_peak_rss(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux 4.0+, for a process we own); False if refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@pytest.fixture
def own_server(tmp_path) -> RunningServer:
    """A server of its own: its memory is what this test measures."""
    running = start_server(tmp_path / "data")
    yield running
    running.stop()


def upload(
    session: requests.Session, server: RunningServer, collection: str, document: str, filename: str, data: bytes
) -> None:
    url = server.url(f"/v1/collections/{collection}/documents/{quote(document, safe='')}/upload")
    ticket = session.post(url, json={"filename": filename, "size": len(data)})
    assert ticket.status_code == 200, ticket.text
    body = ticket.json()
    stored = requests.put(body["url"], data=data, headers=body["headers"], timeout=60)
    assert stored.status_code == 200, stored.text


def wait_terminal(
    session: requests.Session, server: RunningServer, collection: str, ids: list[str], timeout: float = 240.0
) -> dict[str, dict]:
    return wait_until(
        lambda: {
            d: session.get(server.url(f"/v1/collections/{collection}/documents/{quote(d, safe='')}")).json()
            for d in ids
        },
        until=lambda documents: all(doc["status"] in ("indexed", "failed") for doc in documents.values()),
        timeout=timeout,
        interval=0.25,
        message="the documents were neither all indexed nor failed",
    )


def test_hostile_files_fail_alone_within_a_memory_bound_and_the_documents_behind_them_index(own_server):
    server = own_server
    pid = server.process.pid
    admin = server.session(server.admin_key)
    created = admin.put(server.url("/v1/collections/h"), json={"chunking_max_size": 500, "allow_guests": True})
    assert created.status_code == 201
    japanese = hostile.JAPANESE * 30
    # Given the hostile set (what each must become), then ordinary documents queued behind it
    hostile_set = {
        "docx-bomb": ("bomb.docx", hostile.docx_bomb(1 << 30), "failed", "LimitExceeded: DOCX unpacks to "),
        "docx-liar": ("liar.docx", hostile.docx_lying_about_its_size(), "failed", "CorruptFile: "),
        "html-nested": (
            "deep.html",
            hostile.nested_html(2_000_000),
            "failed",
            "LimitExceeded: HTML nests deeper than 256 elements",
        ),
        "html-flat": (
            "flat.html",
            hostile.flat_html(300_000),
            "failed",
            "LimitExceeded: HTML has more than 250000 elements and comments",
        ),
        "pdf-bomb": ("bomb.pdf", hostile.pdf_stream_bomb(4, 64 * MIB), "failed", "LimitExceeded: PDF exceeds"),
        "random": ("random.txt", hostile.random_bytes(4 * MIB), "failed", "UnsupportedType: File content is binary"),
        "elf": ("elf.txt", hostile.elf_binary(4 * MIB), "failed", "UnsupportedType: File content is an ELF executable"),
        "pdf-as-txt": (
            "report.txt",
            hostile.text_pdf("quarterly report"),
            "failed",
            "UnsupportedType: File content is a PDF document, not plain text",
        ),
        "utf16-bom": ("japan-bom.txt", ("\ufeff" + japanese).encode("utf-16-le"), "indexed", None),
        "utf16": ("japan.txt", japanese.encode("utf-16-le"), "indexed", None),
    }
    ordinary = {
        "handbook": ("handbook.docx", (SHARED_DATA / "docs/docx/handbook-872p.docx").read_bytes()),
        "paper": ("paper.pdf", (SHARED_DATA / "docs/pdf/docling-multi_page.pdf").read_bytes()),
        "duck": ("duck.html", (SHARED_DATA / "docs/html/wiki_duck.html").read_bytes()),
        "notes": ("notes.md", (SHARED_DATA / "docs/md/pypdf-extract-text.md").read_bytes()),
    }
    time.sleep(1.0)  # let start-up settle before taking the idle baseline
    idle_rss = status_kib(pid, "VmRSS")
    hwm_was_reset = reset_peak_rss(pid)
    samples = [idle_rss]

    # When the hostile files are uploaded first and the ordinary ones after them
    for document, (filename, data, _, _) in hostile_set.items():
        upload(admin, server, "h", document, filename, data)
        samples.append(status_kib(pid, "VmRSS"))
    for document, (filename, data) in ordinary.items():
        upload(admin, server, "h", document, filename, data)

    # (sampling RSS while the worker runs, in case the kernel refused the peak reset)
    def sampled_documents() -> dict[str, dict]:
        samples.append(status_kib(pid, "VmRSS"))
        return {d: admin.get(server.url(f"/v1/collections/h/documents/{d}")).json() for d in [*hostile_set, *ordinary]}

    documents = wait_until(
        sampled_documents,
        timeout=240,
        interval=0.1,
        until=lambda docs: all(doc["status"] in ("indexed", "failed") for doc in docs.values()),
        message="the documents were neither all indexed nor failed",
    )
    peak = max(samples + ([status_kib(pid, "VmHWM")] if hwm_was_reset else []))

    # Then each hostile file ended as it should, with a reason that names what it is
    outcome = {d: (doc["status"], doc["failure_reason"]) for d, doc in documents.items()}
    for document, (_, _, status, reason) in hostile_set.items():
        assert outcome[document][0] == status, (document, outcome[document])
        if reason is not None:
            assert outcome[document][1].startswith(reason), (document, outcome[document])
    # And the ordinary documents behind them indexed
    for document in ordinary:
        assert outcome[document][0] == "indexed", (document, outcome[document])
    # And the server's peak memory stayed under 1 GiB above its idle level
    added = (peak - idle_rss) * 1024
    print(
        f"\nidle RSS {idle_rss / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, added {added / MIB:.0f} MiB"
        f" (peak from {'VmHWM' if hwm_was_reset else 'sampled VmRSS'})"
    )
    assert added < 1 * GIB
    # And the UTF-16 text reads as Japanese: its chunks hold it and a search for 日本語 finds both files
    for document in ("utf16", "utf16-bom"):
        chunks = admin.get(server.url(f"/v1/collections/h/documents/{document}/chunks")).json()["chunks"]
        assert chunks and chunks[0]["text"].startswith(hostile.JAPANESE)
    found = admin.post(server.url("/v1/collections/h/query"), json={"query": "日本語", "k": 5})
    assert found.status_code == 200, found.text
    assert {"utf16", "utf16-bom"} <= {hit["document_id"] for hit in found.json()["results"]}


def test_six_concurrent_maximum_uploads_stream_to_disk_within_a_small_memory_bound(own_server):
    """Given six clients uploading 50 MiB files (the default file limit) at the same moment
    Then the server streams them to disk: its memory grows by far less than the 300 MiB they carry together
    (it grew by about 900 MiB when uploads were held in memory), and all six are stored whole."""
    from concurrent.futures import ThreadPoolExecutor

    server = own_server
    admin = server.session(server.admin_key)
    assert admin.put(server.url("/v1/collections/up"), json={"title": "uploads"}).status_code == 201
    pid = server.process.pid
    size = 50 * MIB
    tickets = []
    for n in range(6):
        ticket = admin.post(
            server.url(f"/v1/collections/up/documents/big-{n}/upload"), json={"filename": f"big-{n}.txt", "size": size}
        )
        assert ticket.status_code == 200, ticket.text
        tickets.append(ticket.json())
    time.sleep(1.0)
    idle_rss = status_kib(pid, "VmRSS")
    hwm_was_reset = reset_peak_rss(pid)

    class GeneratedFile:
        """A file of `size` bytes made while it is read, so the test measures the server, not itself."""

        def __init__(self, n: int):
            self.line = f"A line of upload {n}.\n".encode()
            self.left = size

        def __len__(self) -> int:
            return self.left

        def read(self, amount: int = -1) -> bytes:
            amount = self.left if amount is None or amount < 0 else min(amount, self.left)
            self.left -= amount
            return (self.line * (amount // len(self.line) + 1))[:amount]

    def send(n: int):
        response = requests.put(tickets[n]["url"], data=GeneratedFile(n), headers=tickets[n]["headers"], timeout=120)
        return response.status_code if response.status_code == 200 else (response.status_code, response.text)

    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(send, range(6)))
    peak = status_kib(pid, "VmHWM") if hwm_was_reset else status_kib(pid, "VmRSS")
    assert statuses == [200] * 6
    added = (peak - idle_rss) * 1024
    print(f"\nsix concurrent 50 MiB uploads: idle {idle_rss / 1024:.0f} MiB, added {added / MIB:.0f} MiB")
    assert added < 150 * MIB
    blobs = [p for p in (server.data_dir / "blobs").rglob("*") if p.is_file() and ".tmp" not in p.parts]
    assert sorted(p.stat().st_size for p in blobs if "big-" in str(p)) == [size] * 6


def test_uploads_are_kept_only_at_their_signed_length(own_server):
    server = own_server
    admin = server.session(server.admin_key)
    assert admin.put(server.url("/v1/collections/up"), json={"title": "uploads"}).status_code == 201
    ticket = admin.post(
        server.url("/v1/collections/up/documents/d/upload"), json={"filename": "d.txt", "size": 10}
    ).json()
    # A chunked body has no Content-Length, so it cannot match the signature
    unsized = {name: value for name, value in ticket["headers"].items() if name != "Content-Length"}
    chunked = requests.put(ticket["url"], data=iter([b"0123456789"]), headers=unsized, timeout=30)
    assert chunked.status_code == 403 and chunked.json()["error"] == "forbidden"
    # Another length than the signed one is refused before the body is read
    longer = requests.put(ticket["url"], data=b"01234567890", headers=unsized, timeout=30)
    assert longer.status_code == 403
    # Nothing was stored; the signed length is
    assert not [p for p in (server.data_dir / "blobs").rglob("*") if p.is_file() and ".tmp" not in p.parts]
    exact = requests.put(ticket["url"], data=b"0123456789", headers=ticket["headers"], timeout=30)
    assert exact.status_code == 200
    assert [
        p.stat().st_size for p in (server.data_dir / "blobs").rglob("*") if p.is_file() and ".tmp" not in p.parts
    ] == [10]
