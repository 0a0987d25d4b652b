"""Local mode's equivalent of the CDK API definition: which function serves which route, and start-up."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from kindex.local.server import Gateway, LocalServer, Route
from kindex.settings import ENV_NAMES, Settings

logger = logging.getLogger(__name__)


def export_settings(settings: Settings) -> None:
    """Hand the settings to the functions the way Lambda does: through their environment."""
    for field, name in ENV_NAMES.items():
        value = getattr(settings, field)
        if value is not None:
            os.environ[name] = str(value.resolve() if isinstance(value, Path) else value)


def build_gateway(settings: Settings) -> Gateway:
    from functions import api, authorizer

    routes = [Route(None, re.compile(r"/docs|/v1/.*"), "kindex-api", api.handler)]
    return Gateway(authorizer.handler, routes, settings.max_body_bytes)


def write_admin_key(data_dir: Path, token: str) -> Path:
    """Write the first admin key where only the owner can read it (0600 from creation, never wider)."""
    path = data_dir / "admin-key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def start(settings: Settings) -> LocalServer:
    """Prepare the data directory, the first admin key and the server (not yet serving)."""
    from kindex.wiring import container

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    export_settings(settings)
    container.cache_clear()
    services = container()
    token = services.keys.ensure_bootstrap_key(settings.bootstrap_tenant)
    if token is not None:
        path = write_admin_key(settings.data_dir, token)
        print(f"Created tenant '{settings.bootstrap_tenant}' with an admin API key (shown once, also in {path}):")
        print(token, flush=True)
    return LocalServer(build_gateway(settings), settings.host, settings.port)
