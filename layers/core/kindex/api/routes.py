"""The route table, read from the resolvers that serve it. API Gateway's resources (infra/api.py) and the local
gateway (local/kindex_local/deployment.py) are both derived from here, so a route exists everywhere or nowhere."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
# Served without an API key: the API description, its page (Swagger UI and its files) and the web console's static
# files (none holds tenant data; the console asks for a key and sends it to /v1 itself). They stay out of the OpenAPI
# document, so they are named here.
PUBLIC_ROUTES = {
    "/v1/openapi.json": ("GET",),
    "/docs": ("GET",),
    "/docs/{asset}": ("GET",),
    "/console": ("GET",),
    "/console/{asset}": ("GET",),
}


@dataclass(frozen=True)
class ApiRoute:
    path: str  # OpenAPI form, with {name} parameters
    methods: tuple[str, ...]
    function: str  # the function that serves it
    public: bool = False

    @property
    def pattern(self) -> re.Pattern:
        """Matches the route's percent-encoded request paths (a parameter is one segment)."""
        parts = re.split(r"(\{[^}/]+\})", self.path)
        return re.compile("".join("[^/]+" if part.startswith("{") else re.escape(part) for part in parts))


def operations(resolver: Any) -> dict[str, tuple[str, ...]]:
    """Path -> methods of every route in the resolver's OpenAPI document."""
    schema = resolver.get_openapi_schema()
    return {
        path: tuple(m.upper() for m in HTTP_METHODS if getattr(item, m, None) is not None)
        for path, item in (schema.paths or {}).items()
    }


def api_routes(resolvers: dict[str, Any], public_function: str) -> list[ApiRoute]:
    """Every route, served by the first function (in `resolvers` order) whose resolver has it; the public routes
    by `public_function`. A function may list another's routes in its OpenAPI document (the API function lists the
    query routes so that its document is complete): the order says who serves them."""
    served: dict[tuple[str, str], str] = {}
    for function, resolver in resolvers.items():
        for path, methods in operations(resolver).items():
            for method in methods:
                served.setdefault((path, method), function)
    by_target: dict[tuple[str, str], list[str]] = {}
    for (path, method), function in served.items():
        by_target.setdefault((path, function), []).append(method)
    routes = [
        ApiRoute(path, tuple(sorted(methods)), function) for (path, function), methods in sorted(by_target.items())
    ]
    routes += [ApiRoute(path, methods, public_function, public=True) for path, methods in PUBLIC_ROUTES.items()]
    return routes
