"""The web dashboard: sweepq's jobs, sweeps, keys, cron and queues in a browser, with actions.

Install the extra (`pip install 'sweepq[web]'`) and run `sweepq web`, or mount
`create_app(app)` in any ASGI application (FastAPI, Starlette, Django's ASGI). The dashboard
guide says how to sign in, run it read-only, and serve it behind a proxy.
"""

from __future__ import annotations

from .app import create_app
from .server import serve

__all__ = ["create_app", "serve"]
