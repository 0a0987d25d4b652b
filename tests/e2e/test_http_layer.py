"""The HTTP layer of `kindex serve`, over raw sockets: chunked bodies, smuggling attempts, bad Content-Length,
slow and oversized heads. Every error answer is JSON, and nothing a malformed request carries is ever run."""

import json
import socket
import time
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.e2e


def connect(server) -> socket.socket:
    parts = urlsplit(server.base_url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=15)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response (Content-Length framed, as kindex always answers)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a full head: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


def closed(sock: socket.socket, wait: float = 10.0) -> bool:
    sock.settimeout(wait)
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, socket.timeout):
        return False


def send(sock: socket.socket, raw: str | bytes) -> None:
    sock.sendall(raw.encode("latin-1") if isinstance(raw, str) else raw)


@pytest.fixture(scope="module")
def victim(server):
    """A collection whose survival shows that no smuggled DELETE ran."""
    session = server.session(server.admin_key)
    assert session.put(server.url("/v1/collections/victim"), json={"title": "keep me"}).status_code == 201
    return server.url("/v1/collections/victim")


def test_chunked_body_is_read_as_the_body(server):
    # Given a PUT whose JSON body comes in three chunks
    body = json.dumps({"title": "chunked"}).encode()
    pieces = [body[:5], body[5:11], body[11:]]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    with connect(server) as sock:
        send(
            sock,
            f"PUT /v1/collections/chunky HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_key}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        send(sock, chunked)
        status, _, answer = read_response(sock)
    # Then it is the request's body, not a next request
    assert status == 201, answer
    assert json.loads(answer)["title"] == "chunked"


def test_smuggled_request_in_a_chunked_body_never_runs(server, victim):
    # Given a request framed by Transfer-Encoding and a short Content-Length (TE.CL), whose chunk hides a DELETE:
    # a server that framed it by Content-Length would run the DELETE as the next request on the connection
    smuggled = (
        f"DELETE /v1/collections/victim HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_key}\r\n"
        "Content-Length: 0\r\n\r\n"
    )
    size_line = f"{len(smuggled):x}\r\n"
    with connect(server) as sock:
        send(
            sock,
            f"PUT /v1/collections/front HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_key}\r\n"
            f"Content-Length: {len(size_line)}\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"{size_line}{smuggled}\r\n0\r\n\r\n",
        )
        status, _, body = read_response(sock)
        try:
            sock.settimeout(2)
            follow = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            follow = b""
    # Then the chunk is the PUT's body (not JSON: refused, or the request refused as a whole), and nothing follows
    assert 400 <= status < 500 and json.loads(body)["error"]
    assert follow == b""
    assert server.session(server.admin_key).get(victim).status_code == 200


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "10, 20"])
def test_bad_content_length_is_a_json_400(server, victim, length):
    with connect(server) as sock:
        send(
            sock,
            f"PUT /v1/collections/victim HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_key}\r\n"
            f"Content-Length: {length}\r\n\r\n" + json.dumps({"title": "overwritten"}),
        )
        status, headers, body = read_response(sock)
        assert closed(sock)
    assert status == 400
    assert headers["content-type"] == "application/json" and json.loads(body)["error"] == "bad_request"
    assert server.session(server.admin_key).get(victim).json()["title"] == "keep me"


def test_bad_request_line_is_a_json_400(server):
    with connect(server) as sock:
        send(sock, "THIS IS NOT HTTP\r\n\r\n")
        status, headers, body = read_response(sock)
    assert status == 400 and json.loads(body)["error"] == "bad_request"


def test_long_url_is_a_json_414_and_huge_head_a_json_431(server):
    with connect(server) as sock:
        send(sock, f"GET /v1/collections/{'a' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = read_response(sock)
    assert status == 414 and json.loads(body)["error"] == "uri_too_long"
    with connect(server) as sock:
        padding = "".join(f"X-Pad-{n}: {'p' * 1000}\r\n" for n in range(40))
        send(sock, "GET /v1/collections HTTP/1.1\r\nHost: x\r\n" + padding + "\r\n")
        status, _, body = read_response(sock)
    assert status == 431 and json.loads(body)["error"] == "request_header_fields_too_large"
    # the same head sent in pieces, as a client that trickles it would
    with connect(server) as sock:
        send(sock, "GET /v1/collections HTTP/1.1\r\nHost: x\r\n")
        try:
            for n in range(40):
                send(sock, f"X-Pad-{n}: {'p' * 1000}\r\n")
                time.sleep(0.01)
        except OSError:
            pass
        status, _, body = read_response(sock)
    assert status == 431 and json.loads(body)["error"] == "request_header_fields_too_large"


def test_oversized_chunked_body_is_refused_without_buffering_it(server):
    # Given a chunked API body that never declares its size and grows past the 10 MiB limit
    with connect(server) as sock:
        send(
            sock,
            f"PUT /v1/collections/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_key}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n",
        )
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
        try:
            for _ in range(12):
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, _, body = read_response(sock)
    # Then it is a JSON 413 and nothing was created
    assert status == 413 and json.loads(body)["error"] == "payload_too_large"
    assert server.session(server.admin_key).get(server.url("/v1/collections/big")).status_code == 404


def test_slow_head_is_cut_off_and_never_served(server, victim):
    # Given a client that sends half a request head and then stalls
    with connect(server) as sock:
        send(sock, f"DELETE /v1/collections/victim HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_key}\r\n")
        started = time.monotonic()
        # Then the server closes the connection within its header timeout (10 s), long before 45 s
        assert closed(sock, wait=25)
        assert time.monotonic() - started < 20
        with pytest.raises(OSError):
            send(sock, "Content-Length: 0\r\n\r\n")
            sock.settimeout(2)
            if sock.recv(65536) == b"":
                raise ConnectionResetError
    assert server.session(server.admin_key).get(victim).status_code == 200


def test_dripping_head_is_cut_off_too(server):
    # Given a client that keeps sending one header byte at a time (slowloris)
    with connect(server) as sock:
        send(sock, "GET /v1/collections HTTP/1.1\r\nX-Drip: ")
        started = time.monotonic()
        cut = False
        while time.monotonic() - started < 25:
            try:
                send(sock, "a")
            except OSError:
                cut = True
                break
            time.sleep(0.5)
            sock.settimeout(0.01)
            try:
                if sock.recv(1) == b"":
                    cut = True
                    break
            except socket.timeout:
                pass
    # Then the whole head had a deadline, however busy the client kept the connection
    assert cut and time.monotonic() - started < 20


def test_keep_alive_serves_several_requests_on_one_connection(server):
    with connect(server) as sock:
        for _ in range(3):
            send(sock, f"GET /v1/collections HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.admin_key}\r\n\r\n")
            status, _, body = read_response(sock)
            assert status == 200 and "collections" in json.loads(body)


def test_unknown_route_and_method_are_json(server):
    admin = server.session(server.admin_key)
    response = admin.get(server.url("/nowhere"))
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    response = admin.request("PATCH", server.url("/v1/collections/victim"))
    assert response.status_code in (404, 405) and response.json()["error"]


def test_answers_given_before_the_body_is_read_close_the_connection(server):
    """A 414 or 413 is sent without reading the body, after which the server ends the connection: the answer says
    so (Connection: close), so a client never sends its next request into a connection that is going away."""
    admin = server.session(server.admin_key)
    long_url = admin.put(server.url("/v1/collections/" + "a" * 9000), data=b"{}" * 1000)
    assert long_url.status_code == 414 and long_url.headers["connection"].lower() == "close"
    too_big = admin.put(server.url("/v1/collections/big"), data=b" " * (11 << 20))
    assert too_big.status_code == 413 and too_big.headers["connection"].lower() == "close"
    # and the session goes on working on a fresh connection
    for _ in range(3):
        assert admin.get(server.url("/v1/collections")).status_code == 200
