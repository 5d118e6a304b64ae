"""Declaring sweeps: TableSweep's catalog checks and generated keyset pages, registration checks,
start-time refusals, and cursor values that round-trip through JSON."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from decimal import Decimal
from typing import Any, ClassVar

import msgspec
import pytest

import sweepq
from factories import count_rows, create_items, create_table, insert_rows
from sweep_worker_proc import ItemsSweep, sweeps_app
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.sweeps.app import App
from sweepq.sweeps.table import jsonable


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


async def create_users(app: App, conn: Conn) -> str:
    return await create_table(
        app,
        "users",
        """id bigint PRIMARY KEY, email text NOT NULL, created_at timestamptz NOT NULL,
           deleted_at timestamptz, team text""",
        on=conn,
    )


async def refusal(app: App, conn: Conn, cls: type[sweepq.Sweep]) -> str:
    app.register_sweep(cls)
    with pytest.raises(sweepq.InvalidSweepError) as raised:
        await app.start_sweep(cls.name, conn=conn)
    # Nothing was written for the refused start.
    assert await count_rows(app, "sweep_runs", on=conn) == 0
    assert await count_rows(app, "jobs", on=conn) == 0
    return str(raised.value)


async def test_a_missing_key_column_is_refused_naming_the_columns(tx_app: App, conn: Conn) -> None:
    table = await create_users(tx_app, conn)
    message = await refusal(tx_app, conn, users_sweep(table, key=("updated_at", "id")))
    assert message == (
        f"sweep 'users' has no key column 'updated_at' in table '{table}' "
        "(columns: id, email, created_at, deleted_at, team)"
    )


async def test_a_missing_item_column_is_refused(tx_app: App, conn: Conn) -> None:
    table = await create_users(tx_app, conn)
    message = await refusal(tx_app, conn, users_sweep(table, columns=("email", "avatar")))
    assert "has no column 'avatar'" in message


async def test_a_where_that_does_not_fit_the_table_is_refused(tx_app: App, conn: Conn) -> None:
    table = await create_users(tx_app, conn)
    message = await refusal(tx_app, conn, users_sweep(table, where="removed_at IS NULL"))
    assert 'column "removed_at" does not exist' in message
    assert "where = 'removed_at IS NULL'" in message


async def test_a_missing_table_is_refused_with_a_hint_about_the_search_path(
    tx_app: App, conn: Conn
) -> None:
    message = await refusal(tx_app, conn, users_sweep("no_such_table"))
    assert "table 'no_such_table' does not exist" in message
    assert "search_path" in message


async def test_a_key_that_is_not_unique_is_refused_and_the_primary_key_is_suggested(
    tx_app: App, conn: Conn
) -> None:
    table = await create_users(tx_app, conn)
    message = await refusal(tx_app, conn, users_sweep(table, key=("created_at",)))
    assert "key ('created_at',)" in message
    assert "is not unique" in message
    assert "key = ('created_at', 'id')" in message


async def test_a_key_column_that_may_be_null_is_refused(tx_app: App, conn: Conn) -> None:
    table = await create_users(tx_app, conn)
    message = await refusal(tx_app, conn, users_sweep(table, key=("deleted_at", "id")))
    assert "key column 'deleted_at'" in message
    assert "may be NULL" in message
    assert "SET NOT NULL" in message


async def test_a_view_is_refused(tx_app: App, conn: Conn) -> None:
    table = await create_users(tx_app, conn)
    await conn.execute(f"CREATE VIEW {ident(tx_app.schema)}.people AS SELECT * FROM {table}")
    message = await refusal(tx_app, conn, users_sweep(f"{tx_app.schema}.people", key=("id",)))
    assert "is not a table" in message


async def test_a_key_covered_by_a_composite_unique_index_is_accepted(
    tx_app: App, conn: Conn
) -> None:
    table = await create_table(
        tx_app,
        "memberships",
        "team text NOT NULL, member bigint NOT NULL, UNIQUE (team, member)",
        on=conn,
    )
    tx_app.register_sweep(users_sweep(table, key=("team", "member")))
    started = await tx_app.start_sweep("users", conn=conn)
    assert started.outcome == "started"


async def test_where_and_columns_shape_the_items(tx_app: App, conn: Conn) -> None:
    table = await create_users(tx_app, conn)
    await conn.execute(
        f"""INSERT INTO {table} (id, email, created_at, deleted_at, team)
            SELECT i, 'u' || i || '@example.com', timestamptz '2024-01-01' + i * interval '1 day',
                   CASE WHEN i % 3 = 0 THEN now() END, 'blue'
            FROM generate_series(1, 12) AS i"""
    )
    cls = users_sweep(table, columns=("email",), where="deleted_at IS NULL", page_size=3)
    tx_app.register_sweep(cls)
    sweep = cls(app=tx_app)

    items = await walk(sweep, conn)

    assert [item["id"] for item in items] == [i for i in range(1, 13) if i % 3]
    assert items[0] == {
        "email": "u1@example.com",
        "created_at": "2024-01-02T00:00:00+00:00",
        "id": 1,
    }


async def walk(sweep: sweepq.Sweep, conn: Conn) -> list[Any]:
    """Page through a sweep as its links do: after = the JSON round trip of the last key."""
    items: list[Any] = []
    after: tuple[Any, ...] | None = None
    await sweep.prepare(conn)
    while True:
        page = list(await sweep.page(conn, after, sweep.page_size))
        items.extend(page)
        if len(page) < sweep.page_size:
            return items
        after = tuple(msgspec.json.decode(msgspec.json.encode(sweep.cursor_of(page[-1]))))


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
    tx_app: App, conn: Conn, key: tuple[str, ...]
) -> None:
    table = await create_table(
        tx_app,
        "things",
        """id bigint PRIMARY KEY, at timestamptz NOT NULL, token uuid NOT NULL UNIQUE,
           amount numeric NOT NULL, label text NOT NULL, day date NOT NULL,
           flag boolean NOT NULL, ratio double precision NOT NULL""",
        on=conn,
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
    await insert_rows(tx_app, "things", rows, on=conn)
    cls = users_sweep(table, key=key, page_size=7)
    tx_app.register_sweep(cls)

    items = await walk(cls(app=tx_app), conn)

    order = ", ".join(ident(c) for c in key)
    expected = await conn.fetch(f"SELECT id FROM {ident(tx_app.schema)}.things ORDER BY {order}")
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


async def test_starting_an_unknown_sweep_names_the_known_ones(tx_app: App, conn: Conn) -> None:
    tx_app.register_sweep(users_sweep("users"))
    with pytest.raises(sweepq.UnknownSweepError) as raised:
        await tx_app.start_sweep("user", conn=conn)
    assert str(raised.value) == (
        "no sweep named 'user' is registered (known: users); "
        "register it with app.register_sweep before starting it"
    )


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
    tx_app: App, conn: Conn, params: Any
) -> None:
    tx_app.register_sweep(users_sweep(await create_users(tx_app, conn)))
    with pytest.raises(sweepq.InvalidSweepError, match="params must be a dict of JSON values"):
        await tx_app.start_sweep("users", params, conn=conn)
    assert await count_rows(tx_app, "sweep_runs", on=conn) == 0


def nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"note": "a\x00b"}, "PostgreSQL cannot store the NUL character"),
        ({"blob": "x" * 3_000_000}, "params are 3,000,011 bytes of JSON, over the 65,536-byte"),
        ({"ids": nested_list(64)}, "params: JSON nested more than 64 levels deep"),
        ({"ids": nested_list(3_000)}, "params: JSON nested more than 64 levels deep"),
        ({"name": "\ud800"}, "params must be a dict of JSON values"),
    ],
)
async def test_params_that_cannot_be_stored_are_refused_and_nothing_is_written(
    tx_app: App, conn: Conn, params: Any, says: str
) -> None:
    tx_app.register_sweep(users_sweep(await create_users(tx_app, conn)))
    with pytest.raises(sweepq.InvalidSweepError, match=re.escape(says)):
        await tx_app.start_sweep("users", params, conn=conn)
    assert await count_rows(tx_app, "sweep_runs", on=conn) == 0
    assert await count_rows(tx_app, "jobs", on=conn) == 0


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
