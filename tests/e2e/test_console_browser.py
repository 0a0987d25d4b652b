"""The web console in a real browser: Debian's headless Chromium, driven by Playwright (tests/browser/console.mjs)
against `kindex serve`. Node.js, Chromium and tests/browser/node_modules are requirements of this test, installed by
`make test` (scripts/provision.py): when one is missing the test fails, saying what to install, rather than
skipping."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO, SHARED_DATA

pytestmark = pytest.mark.e2e

BROWSER_DIR = REPO / "tests" / "browser"
CHROMIUM = Path(os.environ.get("KINDEX_TEST_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = REPO / "build" / "console-screenshots"


def _require_browser_tools() -> str:
    node = shutil.which("node")
    missing = [
        what
        for what, ok in [
            ("node (apt-get install -y nodejs)", node),
            (f"{CHROMIUM} (apt-get install -y chromium)", CHROMIUM.is_file()),
            (
                "tests/browser/node_modules/playwright-core (cd tests/browser && npm ci)",
                (BROWSER_DIR / "node_modules" / "playwright-core" / "package.json").is_file(),
            ),
        ]
        if not ok
    ]
    if missing:
        pytest.fail("the browser test needs " + ", ".join(missing) + " (make test installs them)")
    return node


def test_console_page_is_served_with_a_strict_policy_over_http(server):
    # Given the running server / When the console is fetched without a key
    page = requests.get(server.url("/console"), timeout=10)
    script = requests.get(server.url("/console/api.js"), timeout=10)
    # Then it is served, typed, and locked down: no inline code, no framing, no other origins
    assert page.status_code == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert script.status_code == 200 and script.headers["Content-Type"] == "text/javascript; charset=utf-8"
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["Referrer-Policy"] == "no-referrer"
    assert not page.cookies and "Set-Cookie" not in page.headers
    again = requests.get(server.url("/console/api.js"), headers={"If-None-Match": script.headers["ETag"]}, timeout=10)
    assert again.status_code == 304
    missing = requests.get(server.url("/console/secrets.js"), timeout=10)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    # And `kindex serve` says where it is
    assert any(f"console: {server.base_url}/console)" in line for line in server.output)


def test_console_end_to_end_in_chromium(server):
    # Given Node, Debian's Chromium and playwright-core, and a real PDF and Markdown file
    node = _require_browser_tools()
    pdf = SHARED_DATA / "docs" / "pdf" / "docling-multi_page.pdf"
    markdown = SHARED_DATA / "docs" / "md" / "pypdf-extract-text.md"
    assert pdf.is_file() and markdown.is_file(), f"the shared documents are missing under {SHARED_DATA}"
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    # When the script signs in, creates a collection, drops the files, waits for indexed, opens the chunks,
    # queries, renders a citation, edits a document's attributes and access and runs filtered queries, reindexes,
    # reads the usage page, shows hostile ids as text, checks 375 px and the keyboard, deletes and signs out; then
    # another tenant signs in in the same tab, then a query key
    env = {
        **os.environ,
        "KINDEX_URL": server.base_url,
        "KINDEX_KEY": server.admin_key,
        "CONSOLE_PDF": str(pdf),
        "KINDEX_OTHER_TENANT_KEY": server.create_key("other-tenant", "admin"),
        "KINDEX_QUERY_KEY": server.create_key("default", "query"),
        "CONSOLE_MD": str(markdown),
        "SCREENSHOT_DIR": str(SCREENSHOTS),
        "CHROMIUM": str(CHROMIUM),
    }
    done = subprocess.run([node, "console.mjs"], cwd=BROWSER_DIR, env=env, capture_output=True, text=True, timeout=600)
    # Then every step passed, with no browser error, CSP violation or request outside /console, /v1 and uploads
    assert done.returncode == 0, done.stdout + done.stderr + "\nserver:\n" + "".join(server.output[-40:])
    assert '"ok":true' in done.stdout
    steps = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    assert len(steps) == 14, done.stdout
    # And the screenshots of the main screens are there (CI keeps build/console-screenshots/ as artifacts)
    shots = sorted(p.name for p in SCREENSHOTS.glob("*.png"))
    assert shots == [
        "01-sign-in.png",
        "02-collection-validation.png",
        "03-documents.png",
        "04-chunks.png",
        "05-query.png",
        "06-reindex-job.png",
        "06b-usage.png",
        "07-documents-375px.png",
    ]
    # And the test left nothing behind
    left = server.session(server.admin_key).get(server.url("/v1/collections"), params={"number": 1000}).json()
    assert not [c for c in left["collections"] if c.startswith("console-e2e-")]
