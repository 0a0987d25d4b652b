"""The API's reference page at /docs: Swagger UI, served by the API function without a key, like the console and
on its origin, so under the same lock: every script and style is a file of this origin (Swagger UI's own bundle, as
Powertools ships it, and a start script), none inline, no other origin, no framing, no sniffing. Powertools'
`enable_swagger` page inlines the bundle and the document, which only `'unsafe-inline'` would let run."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from aws_lambda_powertools.event_handler.openapi import swagger_ui
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.routers.console import CONTENT_TYPES, Asset, Console, if_none_match, security_headers

SWAGGER_UI_DIR = Path(swagger_ui.__file__).parent
PAGE = "docs"
# Relative links: /docs resolves them under /docs/ (and under a stage prefix on API Gateway: /prod/docs/...).
PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>kindex API</title>
  <link rel="icon" href="console/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="docs/swagger-ui-bundle.js"></script>
  <script src="docs/start.js"></script>
</body>
</html>
"""
# The document from this deployment (its stage prefix included), and "Try it out" against it; no validator badge
# (it would send the document to validator.swagger.io).
START_JS = """"use strict";
(function () {
  var base = new URL(".", window.location.href);
  fetch(new URL("v1/openapi.json", base), { credentials: "omit" })
    .then(function (response) { return response.json(); })
    .then(function (spec) {
      spec.servers = [{ url: base.pathname.replace(/\\/$/, "") || "/" }];
      window.SwaggerUIBundle({ spec: spec, dom_id: "#swagger-ui", deepLinking: true, docExpansion: "list",
                               filter: true, validatorUrl: null, presets: [window.SwaggerUIBundle.presets.apis] });
    });
})();
"""


def content_security_policy() -> str:
    """The console's policy, plus `data:` images: Swagger UI's stylesheet draws its icons as data URLs."""
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def _asset(body: str, kind: str) -> Asset:
    return Asset(body, CONTENT_TYPES[kind], '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"')


@cache
def docs_page() -> Console:
    """The page and its files, read at the first request (1.7 MB of Swagger UI a cold start need not read)."""
    return Console(
        {
            PAGE: _asset(PAGE_HTML, "html"),
            "start.js": _asset(START_JS, "js"),
            "swagger-ui-bundle.js": _asset(
                (SWAGGER_UI_DIR / "swagger-ui-bundle.min.js").read_text(encoding="utf-8"), "js"
            ),
            "swagger-ui.css": _asset((SWAGGER_UI_DIR / "swagger-ui.min.css").read_text(encoding="utf-8"), "css"),
        },
        headers={**security_headers(), "Content-Security-Policy": content_security_policy()},
    )


def router_for() -> APIGatewayRouter:
    """GET /docs and GET /docs/{asset} (kindex.api.routes.PUBLIC_ROUTES lists them, so API Gateway deploys them
    keyless)."""
    router = APIGatewayRouter()

    @router.get("/docs", include_in_schema=False)
    def docs():
        return docs_page().respond(PAGE, if_none_match(router.current_event.headers))

    @router.get("/docs/<asset>", include_in_schema=False)
    def docs_asset(asset: str):
        return docs_page().respond("" if asset == PAGE else asset, if_none_match(router.current_event.headers))

    return router
