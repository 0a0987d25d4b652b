"""The API's reference page (/docs, Swagger UI) over HTTP against `kindex serve` (issue 26, item 12): it shares the
console's origin, so it is locked down the same way, with every script and style served from this origin; and it
still works in a real browser under that policy (Debian's Chromium, driven by tests/browser/docs.mjs)."""

import os
import re
import subprocess

import pytest
import requests

from tests.e2e.test_console_browser import BROWSER_DIR, CHROMIUM, _require_browser_tools

pytestmark = pytest.mark.e2e

FILES = {
    "/docs": "text/html; charset=utf-8",
    "/docs/swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "/docs/swagger-ui.css": "text/css; charset=utf-8",
    "/docs/start.js": "text/javascript; charset=utf-8",
}


def test_the_page_and_its_files_come_from_this_origin_with_a_strict_policy(server):
    for path, content_type in FILES.items():
        # When the page or one of its files is fetched without a key
        response = requests.get(server.url(path), timeout=10)
        # Then it is served, typed, and locked down: no inline code, no other origin, no framing, no sniffing
        assert response.status_code == 200 and response.headers["Content-Type"] == content_type, path
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self';" in policy and "style-src 'self';" in policy
        assert "frame-ancestors 'none'" in policy and "unsafe" not in policy and "http" not in policy, policy
        assert response.headers["X-Frame-Options"] == "DENY", path
        assert response.headers["X-Content-Type-Options"] == "nosniff", path
        assert response.headers["Referrer-Policy"] == "no-referrer" and "Set-Cookie" not in response.headers
        again = requests.get(server.url(path), headers={"If-None-Match": response.headers["ETag"]}, timeout=10)
        assert again.status_code == 304, path
    page = requests.get(server.url("/docs"), timeout=10).text
    # And the page itself has no inline script or style, and names no other origin
    assert re.findall(r"<script\b[^>]*>", page) == [
        '<script src="docs/swagger-ui-bundle.js">',
        '<script src="docs/start.js">',
    ]
    assert "<style" not in page and "style=" not in page and "//" not in page.replace("<!doctype html>", "")


@pytest.mark.parametrize(
    "path", ["/docs/docs", "/docs/nope.js", "/docs/swagger-ui-bundle.min.js", "/docs/%2e%2e%2fapi.py"]
)
def test_nothing_else_under_docs_is_served(server, path):
    response = requests.get(server.url(path), timeout=10)
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_swagger_ui_runs_under_the_policy_in_chromium(server):
    # Given Node, Debian's Chromium and playwright-core
    node = _require_browser_tools()
    # When the page is opened and "Try it out" runs the collection list
    done = subprocess.run(
        [node, "docs.mjs"],
        cwd=BROWSER_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KINDEX_URL": server.base_url, "CHROMIUM": str(CHROMIUM)},
    )
    # Then the operations render styled, the request reaches this server (401 without a key), and there was no
    # browser error, CSP violation or request outside this origin's /docs and /v1
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"ok":true' in done.stdout
