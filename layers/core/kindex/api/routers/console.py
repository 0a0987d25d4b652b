"""The web console: a static page (kindex/console/) served by the API function without a key. It holds no tenant
data; the page asks for an API key, keeps it in sessionStorage and calls the public /v1 routes with it."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.http import error_body, json_response

ASSETS_DIR = Path(__file__).resolve().parents[2] / "console"
INDEX = "index.html"
# Only flat names of these kinds are served: no path can leave the folder, and every type is known.
ASSET_NAME = re.compile(r"[a-z0-9][a-z0-9-]*\.(html|js|css|svg)")
CONTENT_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}


@dataclass(frozen=True)
class Asset:
    body: str
    content_type: str
    etag: str


def load_assets(folder: Path = ASSETS_DIR) -> dict[str, Asset]:
    """Every servable file of the console, read once (a cold start reads about 60 KB)."""
    assets = {}
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = ASSET_NAME.fullmatch(path.name)
        if match and path.is_file():
            body = path.read_text(encoding="utf-8")
            etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"'
            assets[path.name] = Asset(body, CONTENT_TYPES[match.group(1)], etag)
    return assets


def content_security_policy(connect_origins: tuple[str, ...] = ()) -> str:
    """Scripts and styles only from this origin (no inline code, no eval), no framing, no plugins. `connect_origins`
    are where upload URLs point besides this origin (the S3 bucket on AWS, the public URL locally)."""
    connect = " ".join(("'self'", *connect_origins))
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
        f"connect-src {connect}; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def upload_origins(bucket_name: str | None, region: str | None, public_url: str | None) -> tuple[str, ...]:
    """Origins the upload URLs point to: the bucket's S3 endpoints (virtual-hosted, global and regional), or the
    configured public URL of a local server (otherwise uploads go to the page's own origin)."""
    origins = []
    if bucket_name:
        origins.append(f"https://{bucket_name}.s3.amazonaws.com")
        if region:
            origins.append(f"https://{bucket_name}.s3.{region}.amazonaws.com")
    if public_url:
        parts = urlsplit(public_url)
        if parts.scheme in ("http", "https") and parts.netloc and "@" not in parts.netloc:
            origins.append(f"{parts.scheme}://{parts.netloc}")
    return tuple(origins)


def security_headers(connect_origins: tuple[str, ...] = ()) -> dict[str, str]:
    return {
        "Content-Security-Policy": content_security_policy(connect_origins),
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
    }


class Console:
    """Answers GET /console and GET /console/{asset}: the files with their type, strict headers and an ETag.
    `Cache-Control: no-cache` makes browsers revalidate (a 304 costs one small request), so a deployment is seen
    at once and never mixes old and new modules."""

    def __init__(
        self, assets: dict[str, Asset], connect_origins: tuple[str, ...] = (), headers: dict[str, str] | None = None
    ):
        self.assets = assets
        self.headers = headers or security_headers(connect_origins)

    def respond(self, name: str, if_none_match: str | None) -> Response:
        asset = self.assets.get(name)
        if asset is None:
            return json_response(
                404, error_body("not_found", "no such console file"), {"X-Content-Type-Options": "nosniff"}
            )
        headers = {**self.headers, "Cache-Control": "no-cache", "ETag": asset.etag}
        if if_none_match and asset.etag in [tag.strip() for tag in if_none_match.split(",")]:
            return Response(status_code=304, headers=headers, body="")
        return Response(status_code=200, content_type=asset.content_type, body=asset.body, headers=headers)


def if_none_match(headers: dict[str, str] | None) -> str | None:
    for name, value in (headers or {}).items():
        if name.lower() == "if-none-match":
            return value
    return None


def router_for(console: Console) -> APIGatewayRouter:
    """The two public routes (kindex.api.routes.PUBLIC_ROUTES lists them, so API Gateway deploys them keyless)."""
    router = APIGatewayRouter()

    @router.get("/console", include_in_schema=False)
    def console_page():
        return console.respond(INDEX, if_none_match(router.current_event.headers))

    @router.get("/console/<asset>", include_in_schema=False)
    def console_asset(asset: str):
        # The page itself only at /console: its relative asset links resolve against that path alone.
        name = "" if asset == INDEX else asset
        return console.respond(name, if_none_match(router.current_event.headers))

    return router
