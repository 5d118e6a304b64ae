"""Declaring sweeps: TableSweep's catalog checks and generated keyset pages, registration checks,
start-time refusals, and cursor values that round-trip through JSON."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any, ClassVar

import pytest

import sweepq
from sweep_worker_proc import ItemsSweep, create_items, sweeps_app
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.sweeps.app import App
from sweepq.sweeps.table import jsonable


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[App]:
    async with sweeps_app(dsn) as fresh:
        yield fresh


def offline_app() -> App:
    """An app that is never opened: registration needs no database."""
    return App("postgresql://unused.invalid/none", schema="unused")


class Users(sweepq.TableSweep):
    name = "users"
    key: ClassVar[tuple[str, ...]] = ("created_at", "id")

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


def users_sweep(table: str, /, **settings: Any) -> type[Users]:
    class Declared(Users):
        pass

    Declared.table = table
    for attribute, value in settings.items():
        setattr(Declared, attribute, value)
    return Declared


async def create_users(app: App) -> str:
    table = f"{app.schema}.users"
    await app.pool.execute(
        f"""CREATE TABLE {ident(app.schema)}.users (
                id bigint PRIMARY KEY, email text NOT NULL, created_at timestamptz NOT NULL,
                deleted_at timestamptz, team text)"""
    )
    return table


async def refusal(app: App, cls: type[sweepq.Sweep]) -> str:
    app.register_sweep(cls)
    with pytest.raises(sweepq.InvalidSweepError) as raised:
        await app.start_sweep(cls.name)
    # Nothing was written for the refused start.
    assert await app.pool.fetchval(f"SELECT count(*) FROM {ident(app.schema)}.sweep_runs") == 0
    assert await app.pool.fetchval(f"SELECT count(*) FROM {ident(app.schema)}.jobs") == 0
    return str(raised.value)


@pytest.mark.committed
async def test_a_missing_key_column_is_refused_naming_the_columns(app: App) -> None:
    table = await create_users(app)
    message = await refusal(app, users_sweep(table, key=("updated_at", "id")))
    assert message == (
        f"sweep 'users' has no key column 'updated_at' in table '{table}' "
        "(columns: id, email, created_at, deleted_at, team)"
    )


@pytest.mark.committed
async def test_a_missing_item_column_is_refused(app: App) -> None:
    table = await create_users(app)
    message = await refusal(app, users_sweep(table, columns=("email", "avatar")))
    assert "has no column 'avatar'" in message


@pytest.mark.committed
async def test_a_where_that_does_not_fit_the_table_is_refused(app: App) -> None:
    table = await create_users(app)
    message = await refusal(app, users_sweep(table, where="removed_at IS NULL"))
    assert 'column "removed_at" does not exist' in message
    assert "where = 'removed_at IS NULL'" in message


@pytest.mark.committed
async def test_a_missing_table_is_refused_with_a_hint_about_the_search_path(app: App) -> None:
    message = await refusal(app, users_sweep("no_such_table"))
    assert "table 'no_such_table' does not exist" in message
    assert "search_path" in message


@pytest.mark.committed
async def test_a_key_that_is_not_unique_is_refused_and_the_primary_key_is_suggested(
    app: App,
) -> None:
    table = await create_users(app)
    message = await refusal(app, users_sweep(table, key=("created_at",)))
    assert "key ('created_at',)" in message
    assert "is not unique" in message
    assert "key = ('created_at', 'id')" in message


@pytest.mark.committed
async def test_a_key_column_that_may_be_null_is_refused(app: App) -> None:
    table = await create_users(app)
    message = await refusal(app, users_sweep(table, key=("deleted_at", "id")))
    assert "key column 'deleted_at'" in message
    assert "may be NULL" in message
    assert "SET NOT NULL" in message


@pytest.mark.committed
async def test_a_view_is_refused(app: App) -> None:
    table = await create_users(app)
    await app.pool.execute(f"CREATE VIEW {ident(app.schema)}.people AS SELECT * FROM {table}")
    message = await refusal(app, users_sweep(f"{app.schema}.people", key=("id",)))
    assert "is not a table" in message


@pytest.mark.committed
async def test_a_key_covered_by_a_composite_unique_index_is_accepted(app: App) -> None:
    await app.pool.execute(
        f"""CREATE TABLE {ident(app.schema)}.memberships (
                team text NOT NULL, member bigint NOT NULL, UNIQUE (team, member))"""
    )
    app.register_sweep(users_sweep(f"{app.schema}.memberships", key=("team", "member")))
    started = await app.start_sweep("users")
    assert started.outcome == "started"


@pytest.mark.committed
async def test_where_and_columns_shape_the_items(app: App) -> None:
    table = await create_users(app)
    await app.pool.execute(
        f"""INSERT INTO {table} (id, email, created_at, deleted_at, team)
            SELECT i, 'u' || i || '@example.com', timestamptz '2024-01-01' + i * interval '1 day',
                   CASE WHEN i % 3 = 0 THEN now() END, 'blue'
            FROM generate_series(1, 12) AS i"""
    )
    cls = users_sweep(table, columns=("email",), where="deleted_at IS NULL", page_size=3)
    app.register_sweep(cls)
    sweep = cls(app=app)

    items = await walk(app, sweep)

    assert [item["id"] for item in items] == [i for i in range(1, 13) if i % 3]
    assert items[0] == {
        "email": "u1@example.com",
        "created_at": "2024-01-02T00:00:00+00:00",
        "id": 1,
    }


async def walk(app: App, sweep: sweepq.Sweep) -> list[Any]:
    """Page through a sweep as its links do: after = the JSON round trip of the last key."""
    import msgspec

    items: list[Any] = []
    after: tuple[Any, ...] | None = None
    async with app.pool.acquire() as conn:
        await sweep.prepare(conn)
        while True:
            page = list(await sweep.page(conn, after, sweep.page_size))
            items.extend(page)
            if len(page) < sweep.page_size:
                return items
            after = tuple(msgspec.json.decode(msgspec.json.encode(sweep.cursor_of(page[-1]))))


@pytest.mark.committed
@pytest.mark.parametrize(
    "key",
    [
        ("at", "id"),  # timestamptz with microsecond steps and ties, then the tiebreaker
        ("token",),  # uuid, unique by itself
        ("amount", "id"),  # numeric with more digits than a float holds
        ("label", "id"),  # text, in the column's collation
        ("day", "id"),  # date
        ("flag", "id"),  # boolean
        ("ratio", "id"),  # double precision
    ],
)
async def test_cursor_values_of_common_key_types_walk_every_row_once_in_key_order(
    app: App, key: tuple[str, ...]
) -> None:
    schema = ident(app.schema)
    await app.pool.execute(
        f"""CREATE TABLE {schema}.things (
                id bigint PRIMARY KEY, at timestamptz NOT NULL, token uuid NOT NULL UNIQUE,
                amount numeric NOT NULL, label text NOT NULL, day date NOT NULL,
                flag boolean NOT NULL, ratio double precision NOT NULL)"""
    )
    base = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    rows = [
        (
            i,
            base + dt.timedelta(microseconds=(i // 3) * 7),
            uuid.uuid4(),
            Decimal("12345678901234567890.000000001") + i % 5,
            ["b", "A", "a", "B", "ä", "z"][i % 6] * (1 + i % 2),
            dt.date(2024, 1, 1) + dt.timedelta(days=i % 4),
            i % 2 == 0,
            1 / (1 + i % 7),
        )
        for i in range(1, 61)
    ]
    await app.pool.executemany(
        f"INSERT INTO {schema}.things VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", rows
    )
    cls = users_sweep(f"{app.schema}.things", key=key, page_size=7)
    app.register_sweep(cls)

    items = await walk(app, cls(app=app))

    order = ", ".join(ident(c) for c in key)
    expected = await app.pool.fetch(f"SELECT id FROM {schema}.things ORDER BY {order}")
    assert [item["id"] for item in items] == [r[0] for r in expected]


@pytest.mark.committed
async def test_an_unqualified_table_is_found_through_the_search_path(dsn: str) -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in dsn else "?"
    async with sweeps_app(f"{dsn}{separator}search_path={schema}", schema) as app:
        await create_items(app, 5)

        class Unqualified(ItemsSweep):
            table = "items"

        app.register_sweep(Unqualified)
        started = await app.start_sweep("items")
        run = await app.sweep_status(started.run_id)
        assert run is not None
        assert run.estimated_total is not None


@pytest.mark.committed
async def test_starting_an_unknown_sweep_names_the_known_ones(app: App) -> None:
    app.register_sweep(users_sweep("users"))
    with pytest.raises(sweepq.UnknownSweepError) as raised:
        await app.start_sweep("user")
    assert str(raised.value) == (
        "no sweep named 'user' is registered (known: users); "
        "register it with app.register_sweep before starting it"
    )


@pytest.mark.committed
@pytest.mark.parametrize(
    "params",
    [
        {"since": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)},
        {"ids": (1, 2)},
        {"ratio": float("nan")},
        {1: "not a str key"},
        ["not", "a", "dict"],
    ],
)
async def test_params_that_are_not_json_are_refused_and_nothing_is_written(
    app: App, params: Any
) -> None:
    await create_users(app)
    app.register_sweep(users_sweep(f"{app.schema}.users"))
    with pytest.raises(sweepq.InvalidSweepError, match="params must be a dict of JSON values"):
        await app.start_sweep("users", params)
    assert await app.pool.fetchval(f"SELECT count(*) FROM {ident(app.schema)}.sweep_runs") == 0


class Hand(sweepq.Sweep):
    name = "hand"

    async def page(self, conn: Conn, after: tuple[Any, ...] | None, limit: int) -> list[Any]:
        return []

    def key(self, item: Any) -> tuple[Any, ...]:
        return (item,)

    async def handle(self, ctx: sweepq.Context, item: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"name": ""}, "name must be 1-100 letters"),
        ({"name": "has space"}, "name must be 1-100 letters"),
        ({"page_size": 0}, "page_size must be an int >= 1"),
        ({"window": 499}, "window must be an int >= 500"),
        ({"max_failures": -1}, "max_failures must be an int >= 0"),
        ({"max_attempts": 0}, "max_attempts must be an int >= 1"),
        ({"max_links": 0}, "max_links must be an int >= 1"),
        ({"priority": 40_000}, "priority must be an int in -32768..32767"),
        ({"queue": "no spaces"}, "queue name 'no spaces' is not valid"),
        ({"key": lambda self, item: item, "page": lambda self, c, a, n: []}, "page() must be"),
    ],
)
def test_sweep_settings_that_cannot_work_are_refused_at_registration(
    settings: dict[str, Any], message: str
) -> None:
    cls = type("Bad", (Hand,), settings)
    with pytest.raises(sweepq.InvalidSweepError, match=re.escape(message)):
        offline_app().register_sweep(cls)


def test_a_sweep_without_its_methods_is_refused_naming_the_missing_one() -> None:
    class NoHandle(sweepq.Sweep):
        name = "no-handle"

        async def page(self, conn: Conn, after: tuple[Any, ...] | None, limit: int) -> list[Any]:
            return []

        def key(self, item: Any) -> tuple[Any, ...]:
            return (item,)

    with pytest.raises(sweepq.InvalidSweepError, match=r"define the handle\(\) method"):
        offline_app().register_sweep(NoHandle)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"key": "id"}, "key must be a tuple of column names"),
        ({"key": ()}, "key must be a tuple of column names"),
        ({"key": ("id", "id")}, "names a column twice"),
        ({"key": ("id; drop",)}, "column name 'id; drop' is not valid"),
        ({"table": "a.b.c"}, "table 'a.b.c' is not valid"),
        ({"table": 'users"'}, "is not valid"),
        ({"columns": "email"}, "columns must be a tuple"),
        ({"where": "  "}, "where must be a non-empty SQL condition"),
    ],
)
def test_table_declarations_that_cannot_work_are_refused_at_registration(
    settings: dict[str, Any], message: str
) -> None:
    cls = users_sweep("users", **settings)
    with pytest.raises(sweepq.InvalidSweepError, match=message):
        offline_app().register_sweep(cls)


def test_registering_a_class_twice_is_harmless_but_another_class_under_its_name_is_refused() -> (
    None
):
    app = offline_app()
    assert app.register_sweep(Hand) is Hand
    assert app.register_sweep(Hand) is Hand
    assert {"sweepq.sweep.hand.link", "sweepq.sweep.hand.leaf"} <= set(app.tasks)

    class Other(Hand):
        pass

    with pytest.raises(sweepq.InvalidSweepError, match="already registered"):
        app.register_sweep(Other)
    with pytest.raises(sweepq.InvalidSweepError, match="takes a Sweep subclass"):
        app.register_sweep(int)  # type: ignore[type-var]  # the point: not a Sweep


def test_column_values_become_json_values_their_column_parses_back() -> None:
    moment = dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=dt.UTC)
    token = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert jsonable(moment) == "2024-02-29T23:59:59.123456+00:00"
    assert jsonable(dt.date(2024, 2, 29)) == "2024-02-29"
    assert jsonable(token) == "12345678-1234-5678-1234-567812345678"
    assert jsonable(Decimal("1.50")) == "1.50"
    assert jsonable(b"\x00\xff") == "\\x00ff"
    assert jsonable(dt.timedelta(days=1, seconds=5)) == "1 days 5 seconds 0 microseconds"
    assert jsonable(float("inf")) == "inf"
    assert jsonable([moment, {"k": token}]) == [
        "2024-02-29T23:59:59.123456+00:00",
        {"k": "12345678-1234-5678-1234-567812345678"},
    ]
    assert jsonable(None) is None
