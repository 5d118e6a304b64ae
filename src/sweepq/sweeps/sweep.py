"""`Sweep`: what a user writes to walk a population: keyset pages, a cursor key, a handler."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.context import Context
from ..core.errors import InvalidIdentifierError
from ..core.ident import queue_name
from ..core.queries import Conn
from .errors import InvalidSweepError

if TYPE_CHECKING:
    from ..core.app import App
    from .queries import SweepQueries
    from .runs import SweepRun

ThrottleCheck = Callable[[Any], Awaitable[timedelta | None]]
"""A throttle check: `async def check(conn) -> timedelta | None` (see `Sweep.throttle`)."""

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,99}")
_PRIORITY_RANGE = range(-32768, 32768)
_JSON_SCALARS = (str, int, float, bool)


class Sweep:
    """A walk over a whole population, one leaf job per item, resumable after any crash.

    Subclass it, set `name`, and write three methods: `page` reads the items after a cursor in
    key order (a keyset query, never OFFSET), `key` gives an item's cursor value, `handle` does
    the work for one item. Register the class with `app.register_sweep` and start runs with
    `app.start_sweep(name, params)`; workers of the sweep's `queue` do the rest.

    Items travel as job arguments, so they must be JSON values (dicts, lists, str, int,
    float, bool, None); `key(item)` must return a tuple of str/int/float/bool that is strictly
    greater, in Python's ordering, for every item after the cursor, the way `page` orders them.

    Attributes:
        name: the sweep's name (letters, digits, `_ . : -`).
        page_size: items read per link.
        window: most leaf jobs of one run outstanding at once (a link fans out only when its
            page fits under it, so it must be >= page_size).
        max_failure_rate: the walk stops (the run fails, its outstanding items cancelled)
            once more than this fraction of the recent items failed: of the last
            `failure_sample` items or more (None: no limit by rate).
        failure_sample: how many items finished at least before the rate counts, and over
            how many recent items it is measured.
        max_failures: the walk also stops once more than this many items failed since the run
            started or last resumed (None, the default: no absolute limit).
        max_links: the link ceiling (None: ten times the estimated pages, at least 1,000, or
            1,000,000 when the sweep gives no estimate).
        throttle: checks of the database's health (`sweepq.throttle`, or any
            `async def check(conn) -> timedelta | None`), run in order before each link reads
            and fans out its page; the first that returns a wait makes the link wait that
            long, without a worker slot, and look again.
        queue: the queue of the sweep's links and leaves.
        priority: the leaves' priority (links run one above it, so a walk is not starved by
            its own leaves).
        max_attempts: attempts of each leaf before it counts as failed.
        params: the params the run was started with (a dict of JSON values).
        run_id: the run this instance works for (None outside a run).
        app: the app that built this instance (None outside a run).

    Example:
        >>> @app.register_sweep
        ... class BackfillAvatars(sweepq.Sweep):
        ...     name = "backfill-avatars"
        ...
        ...     async def page(self, conn, after, limit):
        ...         rows = await conn.fetch(
        ...             "SELECT id, email FROM users WHERE id > $1 ORDER BY id LIMIT $2",
        ...             after[0] if after else 0, limit)
        ...         return [dict(r) for r in rows]
        ...
        ...     def key(self, item):
        ...         return (item["id"],)
        ...
        ...     async def handle(self, ctx, item):
        ...         ...
    """

    name: ClassVar[str] = ""
    page_size: ClassVar[int] = 500
    window: ClassVar[int] = 5_000
    max_failure_rate: ClassVar[float | None] = 0.2
    failure_sample: ClassVar[int] = 200
    max_failures: ClassVar[int | None] = None
    max_links: ClassVar[int | None] = None
    throttle: ClassVar[Sequence[ThrottleCheck]] = ()
    queue: ClassVar[str] = "default"
    priority: ClassVar[int] = 0
    max_attempts: ClassVar[int] = 5

    def __init__(
        self,
        params: Mapping[str, Any] | None = None,
        *,
        run_id: int | None = None,
        app: App | None = None,
        queries: SweepQueries | None = None,
    ) -> None:
        self.params: dict[str, Any] = dict(params or {})
        self.run_id = run_id
        self.app = app
        self._queries = queries  # the sweeps' statements (a TableSweep reads the catalog)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} run={self.run_id}>"

    # what users write -------------------------------------------------------------------------

    async def page(self, conn: Any, after: tuple[Any, ...] | None, limit: int) -> Sequence[Any]:
        """The first `limit` items whose key is greater than `after`, in key order.

        Args:
            conn: an asyncpg connection of the app's pool (not in a transaction); annotate
                it as you like (`asyncpg.Connection`, say).
            after: None for the first page, else `key(item)` of the previous page's last item
                (as stored in JSON: a tuple of str/int/float/bool).
            limit: the page size; return fewer only when the population is exhausted.
        """
        raise NotImplementedError(f"sweep {self.name!r} must define `async def page(...)`")

    def key(self, item: Any) -> tuple[Any, ...]:
        """The cursor value of `item`: a tuple of JSON scalars, strictly increasing per page."""
        raise NotImplementedError(f"sweep {self.name!r} must define `def key(self, item)`")

    async def handle(self, ctx: Context, item: Any) -> None:
        """Do the work for one item (one leaf job; retried up to `max_attempts`)."""
        raise NotImplementedError(f"sweep {self.name!r} must define `async def handle(...)`")

    # optional hooks -----------------------------------------------------------------------------

    async def count(self, conn: Any) -> int | None:
        """Exactly how many items the walk will cover, when that is cheap to know (at the start,
        for the progress total); None (the default) leaves the total to `estimate`."""
        return None

    async def estimate(self, conn: Any) -> int | None:
        """Roughly how many items the walk will cover (for ETA and the link ceiling); None."""
        return None

    async def on_complete(self, ctx: Context, run: SweepRun) -> None:
        """Called as a job of its own each time a run ends, in any state (`run.state`, the
        counters and `run.failure` say how; `run.ends` numbers the ends of a run that ran
        again). Define it as `async def` or plain `def` (run in a thread).

        The job is enqueued exactly once per end, in the transaction that ends the run, on the
        sweep's queue, with `max_attempts` attempts of its own. Its handler runs at least once,
        like any job's: make it idempotent (`run.id` and `run.ends` make a key).
        """

    def identity(self, item: Any) -> tuple[Any, ...]:
        """What makes two items the same item; the leaf's dedup key. Default: `key(item)`.

        A run that meets an identity twice fails: the walk is re-serving its own work.
        """
        return self.cursor_of(item)

    def advances(self, cursor: tuple[Any, ...], key: tuple[Any, ...]) -> bool:
        """Whether `key` lies strictly after `cursor` in the walk's order (Python's, here)."""
        try:
            return bool(key > cursor)
        except TypeError:
            return False

    # used by the layer ------------------------------------------------------------------------

    def cursor_of(self, item: Any) -> tuple[Any, ...]:
        """`key(item)`, checked: a tuple of JSON scalars that survives being stored as JSON."""
        value = self.key(item)
        if not isinstance(value, tuple) or not value:
            raise InvalidSweepError(
                f"sweep {self.name!r}: key(item) must return a non-empty tuple, got {value!r}"
            )
        for part in value:
            if not isinstance(part, _JSON_SCALARS):
                raise InvalidSweepError(
                    f"sweep {self.name!r}: key(item) returned {value!r}; its values must be "
                    f"str, int, float or bool (not {type(part).__name__}) so that the cursor "
                    "round-trips through JSON; convert it (e.g. .isoformat()) or use a TableSweep"
                )
        return value

    async def prepare(self, conn: Conn) -> None:
        """Check what can only be checked against the database (a TableSweep's table)."""

    @classmethod
    def check_class(cls) -> None:
        """Refuse settings that cannot work, with a message naming the fix."""
        name = cls.name
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidSweepError(
                f"{cls.__name__}: name must be 1-100 letters, digits and '_ . : -' "
                f"(not starting with a sign), got {name!r}"
            )
        where = f"sweep {name!r}"
        cls._check_int("page_size", 1)
        cls._check_int("window", cls.page_size)
        cls._check_int("failure_sample", 1)
        if cls.max_failures is not None:
            cls._check_int("max_failures", 0)
        rate = cls.max_failure_rate
        if rate is not None and (
            not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 < rate <= 1
        ):
            raise InvalidSweepError(
                f"{where}: max_failure_rate must be a fraction in (0, 1] (0.2: more than 20 % of "
                f"the recent items failed) or None, got {rate!r}"
            )
        cls._check_int("max_attempts", 1)
        if cls.max_links is not None:
            cls._check_int("max_links", 1)
        if not isinstance(cls.priority, int) or cls.priority not in _PRIORITY_RANGE:
            raise InvalidSweepError(f"{where}: priority must be an int in -32768..32767")
        try:
            queue_name(cls.queue)
        except InvalidIdentifierError as exc:
            raise InvalidSweepError(f"{where}: {exc}") from None
        checks = cls.throttle
        if isinstance(checks, str | bytes) or not isinstance(checks, Sequence):
            raise InvalidSweepError(
                f"{where}: throttle must be a tuple of checks (e.g. "
                f"(sweepq.throttle.replica_lag(5),)), got {checks!r}"
            )
        for check in checks:
            if not callable(check):
                raise InvalidSweepError(
                    f"{where}: each throttle check must be an `async def check(conn)` returning "
                    f"a timedelta or None, got {check!r}"
                )
        for method in cls._required_methods():
            if getattr(cls, method) is getattr(Sweep, method):
                raise InvalidSweepError(f"{where}: define the {method}() method")
        for method in ("page", "handle", "count", "estimate"):
            if not inspect.iscoroutinefunction(getattr(cls, method)):
                raise InvalidSweepError(f"{where}: {method}() must be an `async def` method")
        if not callable(cls.on_complete):
            raise InvalidSweepError(f"{where}: on_complete must be a method (async def or def)")

    @classmethod
    def _required_methods(cls) -> tuple[str, ...]:
        return ("page", "key", "handle")

    @classmethod
    def _check_int(cls, attribute: str, minimum: int) -> None:
        value = getattr(cls, attribute)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            hint = (
                f" (a link fans out only when a full page fits under the window; "
                f"page_size is {cls.page_size})"
                if attribute == "window"
                else ""
            )
            raise InvalidSweepError(
                f"sweep {cls.name!r}: {attribute} must be an int >= {minimum}, got {value!r}{hint}"
            )
