"""`Database`: where an app's jobs live (a DSN and a schema), its pool and lane, and migrations.

It owns the environment's part (SWEEPQ_DSN, DATABASE_URL and SWEEPQ_SCHEMA, read through
`core/dsn.py`), opening and closing the pool, the connections sweepq's own statements run on
(released without a session reset, through the lane when there is one), and the migrations of
the core and of the layers plugged into the app.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Concatenate, ParamSpec, TypeVar

import anyio
import asyncpg

from .dsn import redact, resolve_dsn, resolve_schema
from .errors import ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError
from .ident import schema_name
from .lane import Lane
from .layers import Layer
from .migrate import Migration, discover, migrate
from .outage import unavailable_as_error
from .queries import Conn, Queries

P = ParamSpec("P")
T = TypeVar("T")

# What sweepq's own statements raise on a schema that lacks a table, column or function.
UNMIGRATED = (
    asyncpg.UndefinedTableError,
    asyncpg.InvalidSchemaNameError,
    asyncpg.UndefinedColumnError,
    asyncpg.UndefinedFunctionError,
)

# Set while a pool connection serves sweepq's own statements (which leave no session state), so
# that releasing it skips the reset query; any other use of the pool gets the full reset.
_OWN_USE: contextvars.ContextVar[bool] = contextvars.ContextVar("sweepq_own_use", default=False)

# The longest statement asyncpg keeps prepared on a connection (see create_pool); every named
# statement of sweepq is shorter (a test holds them to it).
STATEMENT_CACHE_BYTES = 64 * 1024


async def _reset_unless_internal(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    if not _OWN_USE.get():
        await conn.execute(conn.get_reset_query())


async def _no_reset(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    return None


async def close_quietly(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """Close a connection of our own, or drop it if it is broken or slow to close."""
    try:
        with anyio.fail_after(5):
            await conn.close()
    except Exception:
        conn.terminate()


class Database:
    """An app's database handle: the DSN and schema, the pool and lane, and the migrations.

    `layers` gives the layers plugged into the app, whose migrations follow the core's.

    Attributes:
        given_dsn: the DSN as the app was given it, None to read the environment when it is
            needed (`dsn`); the testing kit's `isolated` saves and restores it.
        schema: the schema holding sweepq's tables.
        queries: the core's statements for that schema.
        lane: the connection kept for sweepq's own short statements while open, if any.
    """

    def __init__(
        self,
        dsn: str | None,
        schema: str | None,
        *,
        pool_min_size: int,
        pool_max_size: int,
        layers: Callable[[], Sequence[Layer]],
    ) -> None:
        self.schema = resolve_schema(schema)
        if not 1 <= pool_min_size <= pool_max_size:
            raise ConfigurationError("need 1 <= pool_min_size <= pool_max_size")
        self.given_dsn = dsn
        self.queries = Queries(self.schema)
        self._layers = layers
        self._pool_sizes = (pool_min_size, pool_max_size)
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self.lane: Lane | None = None
        self._where = ""  # the redacted DSN, named by errors (set when the pool opens)

    @property
    def dsn(self) -> str:
        """The DSN to connect to (resolved from the environment if not given)."""
        return resolve_dsn(self.given_dsn)

    @property
    def where(self) -> str:
        """The redacted DSN that errors name."""
        return self._where or redact(self.dsn)

    def configure(self, *, dsn: str | None, schema: str | None) -> bool:
        """Point a handle that is not open at another DSN or schema; whether the schema changed."""
        if self._pool is not None:
            raise ConfigurationError("configure() an app before opening it")
        if dsn is not None:
            self.given_dsn = dsn
        if schema is None or schema == self.schema:
            return False
        self.schema = schema_name(schema)
        self.queries = Queries(self.schema)
        return True

    async def open(self) -> None:
        if self._pool is None:
            self._where = redact(self.dsn)
            self._pool = await self.create_pool(*self._pool_sizes)
            # A pool of one connection has none to spare for the lane.
            self.lane = Lane(self._pool) if self._pool_sizes[1] >= 2 else None

    async def close(self) -> None:
        lane, self.lane = self.lane, None
        if lane is not None:
            await lane.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def create_pool(
        self,
        min_size: int,
        max_size: int,
        *,
        settings: dict[str, str] | None = None,
        internal: bool = False,
    ) -> asyncpg.Pool[asyncpg.Record]:
        """A new pool on this database; `internal`: released connections are not reset."""
        async with unavailable_as_error(redact(self.dsn)):
            return await asyncpg.create_pool(
                self.dsn,
                min_size=min_size,
                max_size=max_size,
                # JIT compiles plans for the claim's small index scans at a large, pointless cost.
                server_settings={"application_name": "sweepq", "jit": "off", **(settings or {})},
                reset=_no_reset if internal else _reset_unless_internal,
                # asyncpg prepares and keeps only statements up to 15 KiB by default: a longer
                # one (the full claim is about 17 KiB) is parsed and planned again on every
                # call, which took a keyed claim from 1 ms to 4.
                max_cacheable_statement_size=STATEMENT_CACHE_BYTES,
            )

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
        if self._pool is None:
            raise ConfigurationError(
                "the app is not open: use `async with app:` (or `await app.open()`) first"
            )
        return self._pool

    @contextlib.asynccontextmanager
    async def connection(self, conn: Conn | None = None) -> AsyncIterator[Conn]:
        """`conn` if given, else a connection from the pool for the duration of the block."""
        if conn is not None:
            yield conn
            return
        async with self.pool.acquire() as acquired:
            yield acquired

    @contextlib.asynccontextmanager
    async def own_connection(self, conn: Conn | None = None) -> AsyncIterator[Conn]:
        """Like `connection`, for sweepq's own statements: released without a session reset.

        Connection failures of a connection acquired here raise `DatabaseUnavailableError`;
        a statement that meets a schema lacking migrations raises `SchemaNotMigratedError`.
        """
        if conn is not None:
            try:
                yield conn
            except UNMIGRATED:
                await self.raise_if_unmigrated()
                raise
            return
        token = _OWN_USE.set(True)
        try:
            lane = self.lane
            acquire = self.pool.acquire() if lane is None else lane.connection()
            async with unavailable_as_error(self._where), acquire as acquired:
                yield acquired
        except UNMIGRATED as exc:
            # Released by now: the check below takes a connection of its own.
            await self.raise_if_unmigrated()
            raise exc from None
        finally:
            _OWN_USE.reset(token)

    async def query(
        self,
        conn: Conn | None,
        statement: Callable[Concatenate[Conn, P], Awaitable[T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run one statement wrapper on `conn`, or on a connection of our own."""
        async with self.own_connection(conn) as c:
            return await statement(c, *args, **kwargs)

    # migrations ---------------------------------------------------------------------------

    def migrations(self) -> list[Migration]:
        """Every migration known: the core's, then each layer's, in order."""
        found = discover("core", "sweepq.core.migrations", self.schema)
        for layer in self._layers():
            found.extend(discover(layer.component, layer.migrations, self.schema))
        return found

    async def migrate(self, *, dry_run: bool = False) -> list[str]:
        """Apply the pending migrations (or, dry, list them); their labels."""
        async with self.connection() as conn:
            done = await migrate(conn, self.schema, self.migrations(), dry_run=dry_run)
        return [m.label for m in done]

    async def check_migrated(self) -> None:
        """Raise `SchemaNotMigratedError` unless every known migration is applied."""
        pending = await self.migrate(dry_run=True)
        if pending:
            raise SchemaNotMigratedError(self.schema, self.where, pending)

    async def raise_if_unmigrated(self) -> None:
        """After a statement met a missing table, column or function: say so clearly if the
        schema lacks migrations (else the caller re-raises what the statement raised)."""
        with contextlib.suppress(asyncpg.PostgresError, OSError, DatabaseUnavailableError):
            await self.check_migrated()

    async def raise_if_unmigrated_on(self, conn: Conn, where: str) -> None:
        """As `raise_if_unmigrated`, on a connection of the caller's (not the pool's)."""
        pending = await migrate(conn, self.schema, self.migrations(), dry_run=True)
        if pending:
            raise SchemaNotMigratedError(self.schema, where, [m.label for m in pending]) from None
