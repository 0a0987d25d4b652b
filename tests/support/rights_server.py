"""A real rights-check endpoint on 127.0.0.1 whose behaviour each test scripts: allow some ids, deny, omit ids,
answer 500, hang past the timeout, send garbage or non-booleans, drip its answer one byte at a time, or send a huge
answer. It verifies kindex's HMAC signature like a tenant's server would, and records every request. With
`tls=True` it serves HTTPS with a certificate for 127.0.0.1 and localhost from a throw-away CA
(`client_ssl_context()` trusts it)."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import ipaddress
import json
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class RightsServer:
    def __init__(self, secret: bytes | None = None, *, tls: bool = False):
        self.secret = secret
        self.mode = "allow"
        self.allowed: set[str] = set()
        self.hang_seconds = 5.0
        self.drip_interval = 0.1
        self.huge_bytes = 64 * 1024 * 1024
        self.huge_declares_length = True
        self.requests: list[dict] = []
        self.bad_signatures = 0
        self.sent_bytes = 0  # body bytes written in "drip" and "huge" modes, until the client hung up
        self.active = 0  # requests being answered right now
        self.max_active = 0
        self._lock = threading.Lock()
        self._cert_dir = tempfile.TemporaryDirectory(prefix="rights-tls-") if tls else None
        self.httpd = _HttpServer(self)
        self.httpd.daemon_threads = True
        # Clients that hang up or refuse the certificate are part of the tests, not errors worth printing.
        self.httpd.handle_error = lambda request, client_address: None
        if self._cert_dir is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self._make_certificates(Path(self._cert_dir.name)))
            # The handshake runs in each handler's thread, not in the accept loop.
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/check"
        # A short poll interval: close() waits for the serve loop to notice, once per test.
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def count_sent(self, n: int) -> None:
        with self._lock:
            self.sent_bytes += n

    def signature_ok(self, header: str, body: bytes) -> bool:
        try:
            parts = dict(part.split("=", 1) for part in header.split(","))
            expected = hmac.new(self.secret, f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
        except (ValueError, KeyError):
            return False
        return hmac.compare_digest(expected, parts["v1"]) and abs(time.time() - int(parts["t"])) < 300

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts this server's CA (and nothing else)."""
        context = ssl.create_default_context(cafile=str(Path(self._cert_dir.name) / "ca.pem"))
        return context

    @staticmethod
    def _make_certificates(folder: Path) -> tuple[str, str]:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kindex test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName("rights.test"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
        (folder / "leaf.pem").write_bytes(leaf.public_bytes(pem))
        (folder / "leaf.key").write_bytes(
            leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        return str(folder / "leaf.pem"), str(folder / "leaf.key")

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._cert_dir is not None:
            self._cert_dir.cleanup()


class _Handler(BaseHTTPRequestHandler):
    """Answers each rights check as its `RightsServer` is scripted to."""

    server: _HttpServer

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as a real server would; else keep-alive requests stall ~40 ms

    def do_POST(self):  # noqa: N802 - stdlib name
        rights = self.server.rights
        with rights._lock:
            rights.active += 1
            rights.max_active = max(rights.max_active, rights.active)
        try:
            self.answer()
        finally:
            with rights._lock:
                rights.active -= 1

    def answer(self):
        rights = self.server.rights
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        payload = json.loads(body)
        rights.requests.append({"body": payload, "headers": dict(self.headers)})
        signature = self.headers.get("X-Kindex-Signature", "")
        if rights.secret is not None and not rights.signature_ok(signature, body):
            rights.bad_signatures += 1
            return self.reply(401, b'{"error": "bad signature"}')
        ids = payload["document_ids"]
        mode = rights.mode
        if mode == "allow":
            return self.reply(200, json.dumps({i: i in rights.allowed for i in ids}).encode())
        if mode == "omit":
            return self.reply(200, json.dumps({i: True for i in ids if i in rights.allowed}).encode())
        if mode == "strings":
            return self.reply(200, json.dumps({i: "true" for i in ids}).encode())
        if mode == "list":
            return self.reply(200, json.dumps(ids).encode())
        if mode == "error":
            return self.reply(500, json.dumps({i: True for i in ids}).encode())
        if mode == "garbage":
            return self.reply(200, b"<html>not json")
        if mode == "hang":
            time.sleep(rights.hang_seconds)
            return self.reply(200, json.dumps({i: True for i in ids}).encode())
        if mode == "drip":
            return self.drip(json.dumps({i: True for i in ids}).encode())
        if mode == "huge":
            return self.huge()
        raise AssertionError(mode)

    def reply(self, status: int, body: bytes):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def drip(self, body: bytes):
        """A valid answer, one byte every `drip_interval` seconds: no single read ever waits long."""
        rights = self.server.rights
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body) + 100_000))
        self.end_headers()
        payload = body + b" " * 100_000
        try:
            for i in range(len(payload)):
                self.wfile.write(payload[i : i + 1])
                self.wfile.flush()
                rights.count_sent(1)
                time.sleep(rights.drip_interval)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    def huge(self):
        """A 200 whose JSON object never ends (64 MiB by default), with or without a Content-Length."""
        rights = self.server.rights
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if rights.huge_declares_length:
            self.send_header("Content-Length", str(rights.huge_bytes))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        piece = b'{"' + b"x" * (64 * 1024 - 2)
        try:
            while rights.sent_bytes < rights.huge_bytes:
                self.wfile.write(piece)
                rights.count_sent(len(piece))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    def log_message(self, *args):
        pass


class _HttpServer(ThreadingHTTPServer):
    """The HTTP server of a `RightsServer`, which its handlers script themselves from."""

    def __init__(self, rights: RightsServer):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.rights = rights
