"""The web console's files (kindex/console/) and the rules they keep: no inline code, only /v1 calls, a light page."""

import re
from html.parser import HTMLParser

import pytest

from kindex.api.routers.console import (
    ASSETS_DIR,
    INDEX,
    Console,
    content_security_policy,
    load_assets,
    upload_origins,
)

pytestmark = pytest.mark.unit

ASSETS = load_assets()
SCRIPTS = {name: asset.body for name, asset in ASSETS.items() if name.endswith(".js")}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        if self.tags and self.tags[-1][0] in ("script", "style"):
            self.script_text += data.strip()


def test_every_file_of_the_folder_is_served_and_the_page_is_light():
    # Given the console folder / Then every file in it is a servable asset, and all of them are under 200 KB
    on_disk = {p.name for p in ASSETS_DIR.iterdir() if p.is_file()}
    assert set(ASSETS) == on_disk
    assert {INDEX, "app.js", "api.js", "style.css"} <= set(ASSETS)
    assert sum(len(a.body.encode()) for a in ASSETS.values()) < 200_000


def test_the_page_has_no_inline_script_style_or_handler_and_loads_only_its_own_files():
    parser = _Tags()
    parser.feed(ASSETS[INDEX].body)
    assert parser.script_text == ""  # no inline <script> or <style> body (the CSP would block it anyway)
    for tag, attrs in parser.tags:
        assert not [a for a in attrs if a.startswith("on") or a == "style"], (tag, attrs)
        for link in (attrs.get("src"), attrs.get("href")):
            # relative to /console (works under an API Gateway stage prefix), never another origin
            assert link is None or link.startswith(("console/", "#")), link
    assert ("script", {"type": "module", "src": "console/app.js"}) in parser.tags


def test_scripts_import_only_each_other_and_call_only_the_v1_api():
    for name, body in SCRIPTS.items():
        for module in re.findall(r'^import .* from "([^"]+)";', body, flags=re.M):
            assert re.fullmatch(r"\./[a-z]+\.js", module) and module[2:] in ASSETS, (name, module)
        assert "eval(" not in body and "new Function" not in body and "innerHTML" not in body, name
        assert "localStorage" not in body and "document.cookie" not in body, name  # the key: sessionStorage only
    # The network is reached in api.js only: fetch for /v1 routes, XHR for the upload URL the API hands out
    assert [n for n, b in SCRIPTS.items() if re.search(r"\bfetch\(|XMLHttpRequest", b)] == ["api.js"]
    assert 'if (!path.startsWith("/v1/"))' in SCRIPTS["api.js"]
    # Every call names a /v1 path: a literal, docPath() (a /v1 template) or query.js's `path` (one of two /v1 literals)
    calls = [(n, c) for n, b in SCRIPTS.items() for c in re.findall(r'\bapi\("(?:GET|PUT|POST|DELETE)", ([^,]+)', b)]
    assert len(calls) > 15
    for name, first in calls:
        assert re.match(r'[`"]/v1/|`\$\{docPath\(|docPath\(|path$', first), (name, first)
    assert "const docPath = (c, d) => `/v1/collections/" in SCRIPTS["documents.js"]


def test_the_key_is_never_put_in_a_url():
    # Given the one place that sends the key / Then it goes in the Authorization header, never in a query string
    api = SCRIPTS["api.js"]
    assert "Authorization: `Bearer ${session.key}`" in api
    for body in SCRIPTS.values():
        assert not re.search(r"[?&](key|api_key|token)=", body)


def test_content_security_policy_is_strict():
    policy = dict(
        part.strip().split(" ", 1) for part in content_security_policy(("https://b.s3.amazonaws.com",)).split(";")
    )
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"
    assert policy["connect-src"] == "'self' https://b.s3.amazonaws.com"
    assert "unsafe" not in content_security_policy()


def test_upload_origins_are_the_bucket_or_the_public_url_and_never_carry_credentials():
    assert upload_origins("kindex-docs", "eu-west-1", None) == (
        "https://kindex-docs.s3.amazonaws.com",
        "https://kindex-docs.s3.eu-west-1.amazonaws.com",
    )
    assert upload_origins(None, None, "http://files.example:8080/base") == ("http://files.example:8080",)
    assert upload_origins(None, None, "https://user:pw@files.example") == ()
    assert upload_origins(None, None, "javascript:alert(1)") == ()
    assert upload_origins(None, None, None) == ()


@pytest.mark.parametrize(
    "name",
    ["", "index.html", "../pyproject.toml", "..%2Fapi.js", "APP.JS", "app.js.map", "app.py", ".hidden.js", "a/b.js"],
)
def test_only_known_flat_file_names_are_served(tmp_path, name):
    # Given a console over a folder that also holds files it must never serve
    (tmp_path / "app.js").write_text("export {};")
    (tmp_path / "app.py").write_text("secret = 1")
    (tmp_path / ".hidden.js").write_text("x")
    (tmp_path / "index.html").write_text("<!doctype html>")
    assets = load_assets(tmp_path)
    assert set(assets) == {"app.js", "index.html"}
    # When a name other than a known asset is asked for / Then 404 (index.html only through /console itself)
    assets.pop("index.html") if name == "index.html" else None
    assert Console(assets).respond(name, None).status_code == 404


def test_assets_carry_their_type_an_etag_and_revalidate():
    console = Console(ASSETS)
    page = console.respond(INDEX, None)
    script = console.respond("app.js", None)
    assert page.status_code == 200 and page.content_type == "text/html; charset=utf-8"
    assert script.content_type == "text/javascript; charset=utf-8"
    assert console.respond("style.css", None).content_type == "text/css; charset=utf-8"
    assert script.headers["Cache-Control"] == "no-cache" and script.headers["X-Content-Type-Options"] == "nosniff"
    etag = script.headers["ETag"]
    assert etag != page.headers["ETag"]
    assert console.respond("app.js", f'"other", {etag}').status_code == 304
    assert console.respond("app.js", '"other"').status_code == 200


def _luminance(hex_colour: str) -> float:
    if len(hex_colour) == 4:  # #fff
        hex_colour = "#" + "".join(c * 2 for c in hex_colour[1:])
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_text_colours_meet_wcag_aa_contrast_on_their_backgrounds():
    # Given the palette the stylesheet declares
    css = ASSETS["style.css"].body
    palette = dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-f]{6}|#[0-9a-f]{3})\b", css))
    # Then every text colour reaches 4.5:1 (WCAG AA, normal text) on each background it is used on
    pairs = [
        ("fg", "bg"),
        ("fg", "card"),
        ("muted", "bg"),
        ("muted", "card"),
        ("accent", "card"),
        ("accent", "bg"),
        ("danger", "card"),
        ("ok", "card"),
        ("warn", "card"),
        ("accent-fg", "accent"),
    ]
    for text, background in pairs:
        assert _contrast(palette[text], palette[background]) >= 4.5, (text, background)
    # And the fixed colours of the header, badges, alerts and context block do too
    for text, background in [
        ("#f9fafb", "#111827"),
        ("#d1d5db", "#111827"),
        ("#f9fafb", "#374151"),
        ("#166534", "#f0fdf4"),
        ("#b91c1c", "#fef2f2"),
        ("#92400e", "#fffbeb"),
        ("#e5e7eb", "#111827"),
        ("#1a1d23", "#fef2f2"),
        ("#1a1d23", "#fffbeb"),
    ]:
        assert text in css and background in css, (text, background)
        assert _contrast(text, background) >= 4.5, (text, background)
