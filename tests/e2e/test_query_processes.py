"""`kindex serve` with query processes (KINDEX_QUERY_PROCESSES, kindex_local.query_processes): the server's queries
answered by child processes over real HTTP. They see the server's writes at once, keep tenants apart under load,
are restarted when one dies (its requests get 502, none hangs), and go with the server on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.conftest import RunningServer, start_server
from tests.support.waiting import wait_settled, wait_until

pytestmark = pytest.mark.e2e

PROCESSES = 2
CLIENTS = 16
TENANTS = {"alpha": "ALPHA", "beta": "BETA"}
TOPICS = {
    "leave": "staff get twenty days of paid leave each year",
    "stadium": "the stadium was rebuilt after the fire",
    "insulin": "insulin resistance drives type 2 diabetes",
    "telescope": "the space telescope measured distant galaxies",
}


def children_of(pid: int) -> set[int]:
    """The processes whose parent is `pid` now (from /proc: no library needed)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def query_processes_serving(data_dir: Path) -> set[int]:
    """The query processes alive now of the server on `data_dir`, whoever their parent is now (an orphan's is 1)."""
    found = set()
    wanted = f"KINDEX_DATA_DIR={data_dir.resolve()}".encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"kindex_local.query_process" in cmdline.read_bytes():
                if wanted in (cmdline.parent / "environ").read_bytes().split(b"\0"):
                    found.add(int(cmdline.parent.name))
        except OSError:
            continue  # ended meanwhile, or not ours to read
    return found


def holds_a_vector_log(pid: int, data_dir: Path) -> bool:
    """Whether process `pid` has a partition's log of the embedded index open: a query process opens the log of each
    partition it searches (and keeps it open until the server replaces it), so this is true once it answered one."""
    vectors = data_dir.resolve() / "index" / "vectors"
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue  # closed meanwhile
        if target.parent == vectors and target.suffix == ".log":
            return True
    return False


def interrupt_and_expect_a_clean_stop(server: RunningServer, data_dir: Path) -> None:
    """Ctrl-C to the server's process group: it exits with 0 (within 30 s: a stop takes 1-2 s here, so the bound
    catches a Ctrl-C left unanswered), and no query process of its data directory is left, orphaned or not."""
    os.killpg(server.process.pid, signal.SIGINT)
    try:
        code = server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the server did not stop within 30 s of Ctrl-C:\n" + "".join(server.output[-40:]))
    assert code == 0, "".join(server.output[-40:])
    wait_until(lambda: query_processes_serving(data_dir), until=lambda alive: not alive)


def query(session: requests.Session, url: str, text: str) -> requests.Response:
    return session.post(url, json={"query": text, "k": 4}, timeout=60)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server with two query processes; tenants alpha and beta each hold collection `shared` with the same
    document ids, every text naming its tenant."""
    server = start_server(tmp_path_factory.mktemp("query-processes") / "data", {"KINDEX_QUERY_PROCESSES": "2"})
    try:
        keys = {}
        for tenant, marker in TENANTS.items():
            keys[tenant] = server.create_key(tenant, "admin")
            session = server.session(keys[tenant])
            url = server.url("/v1/collections/shared")
            assert session.put(url, json={"allow_guests": True}).status_code == 201
            for doc, text in TOPICS.items():
                response = session.put(
                    f"{url}/documents/{doc}", json={"title": f"{marker} {doc}", "content": f"{marker}: {text}."}
                )
                assert response.status_code == 201, response.text
            assert wait_settled(session, url, list(TOPICS)) == dict.fromkeys(TOPICS, "indexed")
        yield server, keys
    finally:
        server.stop()


@pytest.mark.slow
def test_the_server_has_its_query_processes_and_they_answer(served):
    server, keys = served
    url = server.url("/v1/collections/shared/query")
    # Given a server started with KINDEX_QUERY_PROCESSES=2: two child processes beside it
    children = wait_until(lambda: children_of(server.process.pid), until=lambda found: len(found) == PROCESSES)
    assert len(children) == 2
    assert any("Query processes: 2 (KINDEX_QUERY_PROCESSES)" in line for line in server.output)
    # When a tenant queries its indexed documents, once alone and then 16 times at once
    alone = query(server.session(keys["alpha"]), url, "paid leave")
    with ThreadPoolExecutor(CLIENTS) as pool:
        at_once = list(pool.map(lambda _: query(server.session(keys["alpha"]), url, "paid leave"), range(CLIENTS)))
    # Then every query is answered, with results (the one alone by the server itself, the others mostly by the
    # query processes: each of them has searched the collection's partition, whose log it now holds open)
    for response in [alone, *at_once]:
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["document_id"] == "leave"
    assert all(holds_a_vector_log(pid, server.data_dir) for pid in children)


@pytest.mark.slow
def test_a_query_sees_a_document_once_indexed_and_not_once_deleted(served):
    server, keys = served
    session = server.session(keys["alpha"])
    url = server.url("/v1/collections/shared")

    def at_once(text: str) -> list[requests.Response]:
        """Queries sent together: a request goes to the least busy process, so each process answers some."""
        with ThreadPoolExecutor(PROCESSES * 4) as pool:
            return list(pool.map(lambda _: query(server.session(keys["alpha"]), f"{url}/query", text), range(16)))

    # Given query processes that have both searched the collection (its index is open in each)
    assert all(response.status_code == 200 for response in at_once("paid leave"))
    # and a new document with a word nothing else holds, indexed by the server's worker
    put = session.put(f"{url}/documents/zebra", json={"content": "ALPHA: the quokka smiles at the zebra crossing."})
    assert put.status_code == 201, put.text
    assert wait_settled(session, url, ["zebra"]) == {"zebra": "indexed"}
    # When it is queried at once, and again at once after its delete
    found = at_once("quokka zebra crossing")
    assert session.delete(f"{url}/documents/zebra").status_code == 204
    gone = at_once("quokka zebra crossing")
    # Then every query process found it while it was there, and none after it was deleted
    for response in found + gone:
        assert response.status_code == 200, response.text
    assert all("zebra" in [r["document_id"] for r in response.json()["results"]] for response in found)
    assert all("zebra" not in [r["document_id"] for r in response.json()["results"]] for response in gone)


@pytest.mark.slow
def test_sixteen_clients_of_two_tenants_only_ever_see_their_own_chunks(served):
    server, keys = served
    url = server.url("/v1/collections/shared/query")
    local = threading.local()
    work = [(tenant, text) for tenant in TENANTS for text in TOPICS.values()]

    def one(n: int) -> tuple[str, list[dict]]:
        if not hasattr(local, "sessions"):
            local.sessions = {tenant: server.session(key) for tenant, key in keys.items()}
        tenant, text = work[n % len(work)]
        response = query(local.sessions[tenant], url, text)
        assert response.status_code == 200, response.text
        return tenant, response.json()["results"]

    # When 16 clients ask both tenants the same questions at once, for 160 queries
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(one, range(160)))

    # Then each answer holds its own tenant's chunks only
    for tenant, results in answers:
        other = next(marker for name, marker in TENANTS.items() if name != tenant)
        assert results and all(TENANTS[tenant] in r["content"] and other not in r["content"] for r in results)


@pytest.mark.slow
def test_a_killed_query_process_fails_its_requests_with_502_and_is_restarted(served):
    server, keys = served
    url = server.url("/v1/collections/shared/query")
    before = wait_until(lambda: children_of(server.process.pid), until=lambda found: len(found) == PROCESSES)
    statuses: list[int] = []
    stop = threading.Event()

    def client() -> None:
        session = server.session(keys["beta"])
        while not stop.is_set():
            statuses.append(query(session, url, "what did the telescope measure").status_code)  # timeout: no hang

    # Given 8 clients querying without a pause
    with ThreadPoolExecutor(8) as pool:
        running = [pool.submit(client) for _ in range(8)]
        try:
            wait_until(lambda: len(statuses) >= 20)
            # When one query process is killed in the middle of it
            victim = min(before)
            os.kill(victim, signal.SIGKILL)
            wait_until(
                lambda: children_of(server.process.pid) - {victim},
                until=lambda found: len(found) == PROCESSES,
                message="no query process took the killed one's place",
            )
            answered = len(statuses)
            wait_until(lambda: len(statuses) >= answered + 20)
        finally:
            stop.set()
        for future in running:
            future.result()  # a client that hung or failed raises here

    # Then each request got its answer or the 502 of a failed function, and a new process took the dead one's place
    assert set(statuses) <= {200, 502}, sorted(set(statuses))
    after = children_of(server.process.pid)
    assert victim not in after and len(after) == PROCESSES
    assert any("a query process ended" in line for line in server.output)
    # and the queries answer again, from both processes
    session = server.session(keys["beta"])
    assert all(query(session, url, "telescope").status_code == 200 for _ in range(PROCESSES * 2))


@pytest.mark.slow
def test_no_query_processes_the_server_answers_itself(tmp_path):
    server = start_server(tmp_path / "data", {"KINDEX_QUERY_PROCESSES": "0"})
    try:
        # Given a server started with KINDEX_QUERY_PROCESSES=0 and an indexed document
        admin = server.session(server.admin_key)
        url = server.url("/v1/collections/kb")
        assert admin.put(url, json={"allow_guests": True}).status_code == 201
        admin.put(f"{url}/documents/leave", json={"content": "Staff get 25 days of annual leave."})
        assert wait_settled(admin, url, ["leave"]) == {"leave": "indexed"}
        # When it is queried
        response = query(admin, f"{url}/query", "annual leave")
        # Then the server answers, without a child process
        assert response.status_code == 200 and response.json()["results"][0]["document_id"] == "leave"
        assert children_of(server.process.pid) == set()
    finally:
        server.stop()


@pytest.mark.slow
def test_ctrl_c_stops_the_server_and_its_query_processes(tmp_path):
    # Given a server with its query processes, leading a process group of its own as in a terminal
    server: RunningServer = start_server(tmp_path / "data", {"KINDEX_QUERY_PROCESSES": "2"}, own_process_group=True)
    try:
        children = wait_until(lambda: children_of(server.process.pid), until=lambda found: len(found) == PROCESSES)
        admin = server.session(server.admin_key)
        assert admin.put(server.url("/v1/collections/kb"), json={"allow_guests": True}).status_code == 201
        assert query(admin, server.url("/v1/collections/kb/query"), "anything").status_code == 200  # it serves
        # When Ctrl-C reaches the whole group
        # Then the server stops, cleanly, and its query processes are gone with it (none orphaned)
        interrupt_and_expect_a_clean_stop(server, tmp_path / "data")
        assert not {pid for pid in children if Path(f"/proc/{pid}").exists()}
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.slow
def test_ctrl_c_right_after_the_start_still_stops_everything_cleanly(tmp_path):
    # Given a server that has just said it listens (its query processes still starting)
    server = start_server(tmp_path / "data", {"KINDEX_QUERY_PROCESSES": "2"}, own_process_group=True)
    try:
        # When Ctrl-C reaches it at once
        # Then it stops as after a SIGTERM: exit code 0, and no query process left behind
        interrupt_and_expect_a_clean_stop(server, tmp_path / "data")
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.slow
def test_kindex_serve_refuses_the_follower_setting(tmp_path):
    env = {**os.environ, "KINDEX_INDEX_FOLLOWER": "true", "KINDEX_DEFAULT_EMBEDDING_MODEL": "hash:384"}
    out = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "KINDEX_INDEX_FOLLOWER is set by kindex serve for its query processes only" in out.stderr
