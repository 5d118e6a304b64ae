"""`serve`: run the dashboard with uvicorn (what `sweepq web` calls).

It refuses to listen on anything but a loopback address unless someone is asked who they are
(an `auth` callable, or the token of `SWEEPQ_WEB_TOKEN`): a dashboard that can retry and cancel
jobs is not left open to a network.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

import uvicorn

from sweepq.core.app import DEFAULT_SCHEMA
from sweepq.core.errors import ConfigurationError
from sweepq.sweeps.app import App

from .app import create_app
from .security import Auth
from .site import TOKEN_VARIABLE, token_from_environment


def serve(
    app_or_dsn: App | str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    schema: str = DEFAULT_SCHEMA,
    auth: Auth | None = None,
    read_only: bool = False,
    base_path: str = "/",
    log_level: str = "info",
) -> None:
    """Serve the dashboard over HTTP until interrupted (uvicorn, one process).

    Args:
        app_or_dsn: a `sweepq.App`, or a DSN (see `create_app`).
        host: the address to listen on; anything but loopback needs `auth` or
            `SWEEPQ_WEB_TOKEN`.
        port: the TCP port.
        schema: sweepq's schema, with a DSN.
        auth: the host's check of a request (see `create_app`).
        read_only: hide and refuse every action.
        base_path: the path it is served under behind a proxy.
        log_level: uvicorn's log level.

    Raises:
        ConfigurationError: a host other than loopback with nobody asked who they are.
    """
    check_host(host, auth_configured=auth is not None or token_from_environment() is not None)
    web = create_app(app_or_dsn, schema=schema, auth=auth, read_only=read_only, base_path=base_path)
    show_actions()
    uvicorn.run(web, host=host, port=port, log_level=log_level, proxy_headers=False)


def show_actions() -> None:
    """Print the dashboard's log (who did what, logger `sweepq.web`) beside uvicorn's, unless
    the process set up logging itself."""
    logger = logging.getLogger("sweepq.web")
    if logging.getLogger().handlers or logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def check_host(host: str, *, auth_configured: bool) -> None:
    """Refuse an address other than loopback when nobody is asked who they are.

    Raises:
        ConfigurationError: saying how to allow it.
    """
    if auth_configured or is_loopback(host):
        return
    raise ConfigurationError(
        f"refusing to serve the dashboard on {host!r} without auth: anyone who can reach it "
        f"could retry and cancel jobs. Set {TOKEN_VARIABLE} (a long random token), pass "
        "auth= to create_app, or listen on 127.0.0.1"
    )


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback address (`localhost` included)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses
    )
