"""The Django app `sweepq.contrib.django` (label `sweepq`): `manage.py migrate` creates and
upgrades sweepq's schema, and `manage.py sweepq_worker` runs the workers.

Add `"sweepq.contrib.django"` to `INSTALLED_APPS`. After `manage.py migrate` has migrated a
database (a test database too), the schema of every `SweepqBackend` in `TASKS` that uses that
database is migrated with sweepq's own migrations (idempotent, safe from many processes).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

if TYPE_CHECKING:
    from sweepq import App


class SweepqConfig(AppConfig):
    """The app's configuration: connects the schema migration to `post_migrate`."""

    name = "sweepq.contrib.django"
    label = "sweepq"
    verbose_name = "sweepq"

    def ready(self) -> None:
        """Connect `migrate_schemas` to `post_migrate`."""
        post_migrate.connect(migrate_schemas, sender=self, dispatch_uid="sweepq.migrate_schemas")


def migrate_schemas(sender: AppConfig, *, using: str, verbosity: int = 1, **kwargs: Any) -> None:
    """Migrate the sweepq schema of every SweepqBackend on database `using`.

    Runs after `manage.py migrate` only: `flush` (which Django's test cases run between tests)
    sends `post_migrate` too, without a migration plan, and has nothing to migrate.
    """
    if "plan" not in kwargs:
        return
    from django.conf import settings

    from ._tasks import task_backends
    from .backend import SweepqBackend, run_in_thread

    for alias in getattr(settings, "TASKS", {}):
        backend = task_backends[alias]
        if not isinstance(backend, SweepqBackend) or backend.settings.database != using:
            continue
        applied = run_in_thread(functools.partial(_migrate, backend.app()))
        if applied and verbosity >= 1:
            stdout = kwargs.get("stdout")
            line = f"  sweepq: applied {', '.join(applied)} to schema {backend.schema!r}\n"
            if stdout is not None:
                stdout.write(line)
            else:
                print(line, end="")


async def _migrate(app: App) -> list[str]:
    async with app:
        return await app.migrate()
