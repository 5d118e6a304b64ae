"""Bad input, generated: every enqueue option and identifier is refused clearly and writes nothing.

Each example mixes one bad value (a wrong type, NUL, a lone surrogate, out of range, not finite,
empty, too long, an unknown task, args that do not fit the handler or are not JSON) into
otherwise good options, for `enqueue` and for `enqueue_many`, and asserts that the call raises
a `sweepq.SweepqError` whose message names what was wrong, and that nothing was written to any
table of the schema: the same row counts, no row inserted, updated or deleted even if rolled back
(pg_stat_xact_user_tables), and no sequence value drawn.

Examples run in a savepoint of the test's transaction (the fast tier); a raw driver error would
fail the example (it is not a SweepqError), and reading the counts afterwards would fail too if
it left the transaction aborted. `TRIED` counts the bad inputs tried, by kind.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sweepq
from sweepq.cli import cli
from sweepq.core.ident import ident
from sweepq.core.options import OPTIONS
from sweepq.core.queries import Conn

# Bad input starts no workers: these run beside the other fault tests (tests/conftest.py).
pytestmark = [pytest.mark.fault, pytest.mark.xdist_group("bad_input")]

TRIED: Counter[str] = Counter()

PER_KIND = 12  # examples per kind of bad input: about 700 bad inputs over the module, ~7 s
PROPERTY = settings(
    max_examples=PER_KIND,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# the database: what "nothing written" means --------------------------------------------------

_TABLES_SQL = """
SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname
"""
_WRITES_SQL = """
SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint AS writes,
       (SELECT coalesce(array_agg(last_value ORDER BY sequencename), '{}')
        FROM pg_sequences WHERE schemaname = $1) AS sequences
FROM pg_stat_xact_user_tables WHERE schemaname = $1
"""


async def footprint(conn: Conn, schema: str) -> tuple[object, ...]:
    """Row counts of every table of `schema`, tuples written in this transaction, sequences."""
    tables = [r["relname"] for r in await conn.fetch(_TABLES_SQL, schema)]
    assert "jobs" in tables
    counts = ", ".join(f"(SELECT count(*) FROM {ident(schema)}.{ident(t)})" for t in tables)
    rows = await conn.fetchval(f"SELECT ARRAY[{counts}]")
    written = await conn.fetchrow(_WRITES_SQL, schema)
    assert written is not None
    return tuple(rows), written["writes"], tuple(written["sequences"])


@asynccontextmanager
async def nothing_written(conn: Conn, schema: str) -> AsyncIterator[None]:
    """Run the block in a savepoint and check that it wrote nothing to `schema`."""
    savepoint = conn.transaction()
    await savepoint.start()
    try:
        before = await footprint(conn, schema)
        yield
        assert await footprint(conn, schema) == before
    finally:
        await savepoint.rollback()


async def refused(conn: Conn, app: sweepq.App, says: str, call: Callable[[], Any]) -> None:
    """`call()` raises a SweepqError naming `says`, and writes nothing."""
    async with nothing_written(conn, app.schema):
        with pytest.raises(sweepq.SweepqError) as raised:
            await call()
        message = str(raised.value)
        assert message.strip(), f"{type(raised.value).__name__} without a message"
        assert says in message, message


def register(app: sweepq.App) -> None:
    if "typed" in app.tasks:
        return

    @app.task(name="typed")
    async def typed(ctx: sweepq.Context, n: int, tags: list[str] | None = None) -> None:
        return None

    @app.task(name="untyped", queue="other")
    async def untyped(ctx: sweepq.Context, payload: Any) -> None:
        return None


# good values ------------------------------------------------------------------------------------

UNICODE = st.characters(exclude_categories=["Cs"])  # no lone surrogates: not UTF-8
TEXT = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
KEY = st.text(TEXT, min_size=1, max_size=40)
OFFSETS = st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)).map(timezone)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    # NUL is fine inside JSON args: it is stored as \u0000
    | st.text(UNICODE, max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(UNICODE, max_size=5), inner)
    ),
    max_leaves=8,
)
GOOD_CALL = st.one_of(
    st.fixed_dictionaries(
        {"task": st.just("typed"), "args": st.fixed_dictionaries({"n": st.integers()})}
    ),
    st.fixed_dictionaries(
        {
            "task": st.just("typed"),
            "args": st.fixed_dictionaries(
                {"n": st.integers()}, optional={"tags": st.none() | st.lists(KEY, max_size=3)}
            ),
        }
    ),
    st.fixed_dictionaries(
        {"task": st.just("untyped"), "args": st.fixed_dictionaries({"payload": JSON})}
    ),
)
SECONDS = st.floats(min_value=0.001, max_value=1e8) | st.integers(1, 10**8)
GOOD_OPTIONS: dict[str, st.SearchStrategy[Any]] = {
    "queue": st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,30}", fullmatch=True),
    "priority": st.integers(-32768, 32767),
    "delay": st.just(0) | SECONDS | st.timedeltas(timedelta(0), timedelta(days=3650)),
    "run_at": st.datetimes(datetime(1990, 1, 1), datetime(2060, 1, 1), timezones=OFFSETS),
    "max_attempts": st.integers(1, 1_000),
    "idempotency_key": KEY,
    "idempotency_scope": st.text(TEXT, max_size=40),
    "identity_key": KEY,
    "unique_for": SECONDS | st.timedeltas(timedelta(seconds=1), timedelta(days=3650)),
    "deadline": SECONDS | st.timedeltas(timedelta(seconds=1), timedelta(days=3650)),
    "concurrency_key": KEY,
    "group": KEY,
    "trace_context": KEY,
    "timeout": SECONDS | st.timedeltas(timedelta(seconds=1), timedelta(days=3650)),
}


def _coherent(options: dict[str, Any]) -> dict[str, Any]:
    """Good options that are good together: not delay with run_at, no unique_for alone."""
    if "delay" in options:
        options.pop("run_at", None)
    if "unique_for" in options:
        options.setdefault("identity_key", "ident")
    return options


GOOD_SPEC = st.tuples(
    GOOD_CALL, st.fixed_dictionaries({}, optional=GOOD_OPTIONS).map(_coherent)
).map(lambda both: {**both[0], **both[1]})


# bad values -------------------------------------------------------------------------------------


class _NoOffset(tzinfo):
    """A tzinfo that is set but does not say its offset: the datetime is not aware."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None

    def __repr__(self) -> str:
        return "_NoOffset()"


def _around(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(st.text(TEXT, max_size=4), inner, st.text(TEXT, max_size=4)).map("".join)


NUL = _around(st.just("\x00"))
SURROGATE = _around(st.characters(categories=["Cs"]))
NOT_TEXT = st.one_of(
    st.integers(),
    st.floats(),
    st.booleans(),
    st.binary(max_size=4),
    st.lists(st.text(max_size=2), max_size=2),
    st.dates(),
)
TOO_LONG = st.integers(513, 4_000).map(lambda n: "k" * n)


def bad_text(*, empty_ok: bool = False) -> st.SearchStrategy[Any]:
    bad = NUL | SURROGATE | NOT_TEXT | TOO_LONG
    return bad if empty_ok else bad | st.just("")


def bad_int(low: int, high: int) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(max_value=low - 1),
        st.integers(min_value=high + 1),
        st.sampled_from([2**31, 2**40, 2**63, 10**30, -(2**40)]),
        st.booleans(),
        st.floats(),
        st.text(max_size=3),
        st.just([1]),
    )


def bad_duration(*, allow_zero: bool) -> st.SearchStrategy[Any]:
    century = timedelta(days=36_525)
    bad = st.one_of(
        st.floats(max_value=-1e-9) | st.integers(max_value=-1),
        st.sampled_from([math.inf, -math.inf, math.nan, 1e12, 1e300, 10**400, 2**63]),
        st.floats(min_value=century.total_seconds() + 1, allow_infinity=False),
        st.integers(min_value=int(century.total_seconds()) + 1),
        st.timedeltas(max_value=-timedelta(microseconds=1)),
        st.timedeltas(min_value=century + timedelta(seconds=1)),
        st.booleans(),
        st.text(max_size=3),
        st.dates(),
    )
    return bad if allow_zero else bad | st.sampled_from([0, 0.0, -0.0, timedelta(0)])


BAD_RUN_AT = st.one_of(
    st.datetimes(),  # naive
    st.datetimes(timezones=st.just(_NoOffset())),
    st.datetimes(max_value=datetime(1920, 1, 1), timezones=OFFSETS | st.just(UTC)),
    st.datetimes(min_value=datetime(2130, 1, 1), timezones=OFFSETS | st.just(UTC)),
    st.sampled_from([datetime.max.replace(tzinfo=UTC), datetime.min.replace(tzinfo=UTC)]),
    st.floats(),
    st.integers(),
    st.text(max_size=20),
    st.just(date(2030, 1, 1)),
)
BAD_QUEUE = st.one_of(
    bad_text(),
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{128,140}", fullmatch=True),
    st.from_regex(r"[-.:][a-z]{0,5}", fullmatch=True),  # starts with a sign
    _around(st.sampled_from([" ", "/", '"', "'", ";", "é", "\n"])),
)
NOT_JSON = st.one_of(
    st.sets(st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.datetimes(),
    st.dates(),
    st.binary(max_size=3),
    st.complex_numbers(),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    SURROGATE,
    st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2),
    st.tuples(st.integers()),
    st.just("x" * (1024 * 1024)),  # over the 1 MiB limit
)


def _nested(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return value | st.lists(value, min_size=1, max_size=2) | st.dictionaries(KEY, value, min_size=1)


UNKNOWN_TASK = st.one_of(
    st.text(max_size=10).filter(lambda t: t not in ("typed", "untyped")),
    NUL,
    st.integers(),
    st.none(),
    st.binary(max_size=3),
)
BAD_ARGS_SHAPE = st.one_of(
    st.lists(st.integers(), max_size=2) | st.integers() | KEY,  # not a mapping
    st.just({}),  # missing n
    st.dictionaries(KEY.filter(lambda k: k not in ("n", "tags")), st.integers(), min_size=1).map(
        lambda extra: {"n": 1, **extra}
    ),  # an argument the handler does not take
    (st.text(max_size=3) | st.floats() | st.booleans() | st.lists(st.integers(), max_size=1)).map(
        lambda n: {"n": n}
    ),  # mistyped
    st.just({"n": 1, "tags": [1]}),
    st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2),  # non-string names
)


@dataclass(frozen=True)
class Bad:
    """One bad input: the fields it sets (and drops) in a good spec, and what the error names."""

    says: str
    sets: dict[str, Any]
    drops: tuple[str, ...] = ()

    def apply(self, good: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in good.items() if k not in self.drops} | self.sets


def bad(
    option: str,
    values: st.SearchStrategy[Any],
    *,
    says: str | None = None,
    drops: tuple[str, ...] = (),
) -> st.SearchStrategy[Bad]:
    """`option` set to each of `values`; the error names `says` (default: the option)."""
    return values.map(lambda v: Bad(says or option, {option: v}, drops))


def _idempotency_over_bytes() -> st.SearchStrategy[Bad]:
    wide = st.characters(min_codepoint=0x10000, exclude_categories=["Cs"])  # 4 bytes of UTF-8
    text = st.text(wide, min_size=257, max_size=512)
    return st.tuples(text, text).map(
        lambda sk: Bad(
            "together must be at most 2,048 bytes",
            {"idempotency_scope": sk[0], "idempotency_key": sk[1]},
        )
    )


BAD: dict[str, st.SearchStrategy[Bad]] = {
    "task": UNKNOWN_TASK.map(lambda t: Bad("is registered", {"task": t})),
    "args shape": BAD_ARGS_SHAPE.map(
        lambda a: Bad("invalid arguments for task 'typed'", {"task": "typed", "args": a})
    ),
    "args not JSON": _nested(NOT_JSON).map(
        lambda p: Bad(
            "invalid arguments for task 'untyped'", {"task": "untyped", "args": {"payload": p}}
        )
    ),
    "queue": bad("queue", BAD_QUEUE, says="queue name"),
    "priority": bad("priority", bad_int(-32768, 32767)),
    "max_attempts": bad("max_attempts", bad_int(1, 1_000_000)),
    "delay": bad("delay", bad_duration(allow_zero=True), drops=("run_at",)),
    "run_at": bad("run_at", BAD_RUN_AT, drops=("delay",)),
    "delay and run_at": st.tuples(GOOD_OPTIONS["delay"], GOOD_OPTIONS["run_at"]).map(
        lambda dr: Bad("pass delay or run_at", {"delay": dr[0], "run_at": dr[1]})
    ),
    "deadline": bad("deadline", bad_duration(allow_zero=False)),
    "unique_for": bad_duration(allow_zero=False).map(
        lambda v: Bad("unique_for", {"unique_for": v, "identity_key": "ident"})
    ),
    "unique_for alone": GOOD_OPTIONS["unique_for"].map(
        lambda v: Bad("unique_for needs identity_key", {"unique_for": v}, ("identity_key",))
    ),
    "idempotency_key": bad("idempotency_key", bad_text()),
    "idempotency_scope": bad("idempotency_scope", bad_text(empty_ok=True)),
    "idempotency bytes": _idempotency_over_bytes(),
    "identity_key": bad("identity_key", bad_text()),
    "concurrency_key": bad("concurrency_key", bad_text()),
    "group": bad("group", bad_text()),
    "trace_context": bad("trace_context", bad_text()),
    "timeout": bad("timeout", bad_duration(allow_zero=False)),
    "unknown option": st.sampled_from(["grup", "time_out", "conn_", "idempotencykey"]).map(
        lambda name: Bad("unknown job option", {name: 1})
    ),
}


def _call(spec: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    options = dict(spec)
    return options.pop("task"), options.pop("args", None), options


# enqueue and enqueue_many -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(BAD))
@PROPERTY
@given(data=st.data())
async def test_enqueue_refuses_a_bad_option_among_good_ones_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn, kind: str, data: st.DataObject
) -> None:
    register(tx_app)
    bad_input = data.draw(BAD[kind], label="bad")
    task, args, options = _call(bad_input.apply(data.draw(GOOD_SPEC, label="good")))
    TRIED[f"enqueue: {kind}"] += 1
    await refused(
        conn, tx_app, bad_input.says, lambda: tx_app.enqueue(task, args, conn=conn, **options)
    )


@pytest.mark.parametrize("kind", list(BAD))
@PROPERTY
@given(data=st.data())
async def test_enqueue_many_refuses_a_batch_with_one_bad_spec_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn, kind: str, data: st.DataObject
) -> None:
    register(tx_app)
    bad_input = data.draw(BAD[kind], label="bad")
    goods = data.draw(st.lists(GOOD_SPEC, min_size=1, max_size=3), label="goods")
    position = data.draw(st.integers(0, len(goods)), label="position")
    TRIED[f"enqueue_many: {kind}"] += 1

    def call() -> Awaitable[object]:
        # A JobSpec refuses an unknown option as it is made: that counts as the batch's refusal.
        specs = [sweepq.JobSpec(**spec) for spec in goods]
        specs.insert(position, sweepq.JobSpec(**bad_input.apply(goods[0])))
        return tx_app.enqueue_many(specs, conn=conn)

    await refused(conn, tx_app, bad_input.says, call)


_FAR = (math.inf, -math.inf, math.nan, 1e300, 1e12, 10**400, timedelta.max, timedelta(days=36_526))
FOUND_BEFORE: list[tuple[str, dict[str, Any]]] = [
    *(
        (option, {option: value})
        for option in ("idempotency_key", "identity_key", "concurrency_key", "idempotency_scope")
        for value in ("a\x00b", "\x00", "\ud800")
    ),
    ("queue name", {"queue": "q\x00"}),
    *(
        (option, {option: value, "identity_key": "i"})
        for option in ("delay", "deadline", "unique_for")
        for value in (*_FAR, True, False)
    ),
    *(
        ("run_at", {"run_at": value})
        for value in (
            datetime.max.replace(tzinfo=UTC),
            datetime.min.replace(tzinfo=UTC),
            datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),
            datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
            datetime(2030, 1, 1),
        )
    ),
    *(
        (option, {option: value})
        for option, values in (("max_attempts", (2**40, 2**31, True)), ("priority", (True, 2**15)))
        for value in values
    ),
]


@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
async def test_the_bad_inputs_found_before_are_refused_and_write_nothing(
    tx_app: sweepq.App, conn: Conn, many: bool
) -> None:
    """Once raw driver errors (NUL, overflowing durations and ints), or accepted and broken."""
    register(tx_app)
    failures: list[str] = []
    for says, options in FOUND_BEFORE:
        TRIED[f"{'enqueue_many' if many else 'enqueue'}: found before"] += 1
        spec = sweepq.JobSpec("typed", {"n": 1}, **options)
        call: Callable[[], Any] = (
            partial(tx_app.enqueue_many, [spec], conn=conn)
            if many
            else partial(tx_app.enqueue, "typed", {"n": 1}, conn=conn, **options)
        )
        try:
            await refused(conn, tx_app, says, call)
        except Exception as exc:  # every case is reported, not only the first
            failures.append(f"{options!r}: {type(exc).__name__}: {exc}")
    assert failures == []


NOT_A_BATCH = st.one_of(
    st.none(),
    st.integers(),
    st.text(min_size=1, max_size=3),
    st.just(sweepq.JobSpec("typed", {"n": 1})),
    st.builds(lambda: iter([sweepq.JobSpec("typed", {"n": 1})])),  # not a list
    st.lists(st.just(sweepq.JobSpec("typed", {"n": 1})), max_size=2).flatmap(
        lambda specs: st.sampled_from([{"task": "typed"}, None, "typed", 1]).map(
            lambda stray: [*specs, stray]
        )
    ),
)


@settings(PROPERTY, max_examples=3 * PER_KIND)
@given(batch=NOT_A_BATCH)
async def test_enqueue_many_refuses_something_other_than_a_list_of_specs(
    tx_app: sweepq.App, conn: Conn, batch: Any
) -> None:
    register(tx_app)
    TRIED["enqueue_many: not a list of specs"] += 1
    await refused(
        conn, tx_app, "a list of sweepq.JobSpec", lambda: tx_app.enqueue_many(batch, conn=conn)
    )


@settings(PROPERTY, max_examples=3 * PER_KIND)
@given(specs=st.lists(GOOD_SPEC, min_size=1, max_size=3))
async def test_the_good_specs_the_bad_ones_start_from_are_accepted(
    tx_app: sweepq.App, conn: Conn, specs: list[dict[str, Any]]
) -> None:
    """The control: without the bad value, the same calls are accepted."""
    register(tx_app)
    savepoint = conn.transaction()
    await savepoint.start()
    try:
        task, args, options = _call(specs[0])
        await tx_app.enqueue(task, args, conn=conn, **options)
        await tx_app.enqueue_many([sweepq.JobSpec(**s) for s in specs], conn=conn)
    finally:
        await savepoint.rollback()


# identifiers ------------------------------------------------------------------------------------

BAD_SCHEMA = st.one_of(
    bad_text(),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{63,70}", fullmatch=True),
    st.from_regex(r"[0-9][A-Za-z0-9_]{0,5}", fullmatch=True),
    _around(st.sampled_from(["-", " ", ".", '"', ";", "é"])),
    # PostgreSQL's own schemas.
    st.sampled_from(["information_schema", "pg_catalog", "pg_toast"]),
    st.from_regex(r"pg_[a-z0-9_]{0,20}", fullmatch=True),
)


@settings(PROPERTY, max_examples=3 * PER_KIND)
@given(schema=BAD_SCHEMA)
def test_an_app_refuses_a_bad_schema_name(dsn: str, schema: Any) -> None:
    TRIED["App: schema"] += 1
    with pytest.raises(sweepq.InvalidIdentifierError, match="schema name") as raised:
        sweepq.App(dsn, schema=schema)
    assert str(raised.value).strip()


BAD_REGISTRATION: dict[str, st.SearchStrategy[Bad]] = {
    "queue": bad("queue", BAD_QUEUE, says="queue name"),
    "name": bad(
        "name",
        NUL | SURROGATE | st.integers(min_value=1) | st.text(min_size=513, max_size=600),
        says="task name",
    ),
    "max_attempts": bad("max_attempts", bad_int(1, 1_000_000)),
    "priority": bad("priority", bad_int(-32768, 32767)),
}


@pytest.mark.parametrize("kind", list(BAD_REGISTRATION))
@PROPERTY
@given(data=st.data())
def test_registration_refuses_a_bad_queue_name_task_name_or_default(
    dsn: str, kind: str, data: st.DataObject
) -> None:
    bad_input = data.draw(BAD_REGISTRATION[kind], label="bad")
    app = sweepq.App(dsn, schema="sweepq_unused")
    TRIED[f"app.task: {kind}"] += 1

    async def handler(ctx: sweepq.Context) -> None:
        return None

    with pytest.raises(sweepq.SweepqError, match=bad_input.says):
        app.task(**bad_input.sets)(handler)
    assert app.tasks == {}


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@settings(PROPERTY, max_examples=2 * PER_KIND)
@given(queue=BAD_QUEUE.filter(_hashable))  # a list among the queues: a TypeError (worker.py)
def test_a_worker_refuses_a_bad_queue_name(dsn: str, queue: Any) -> None:
    TRIED["Worker: queues"] += 1
    with pytest.raises(sweepq.SweepqError, match="queue name"):
        sweepq.Worker(sweepq.App(dsn, schema="sweepq_unused"), queues=["default", queue])


BAD_LIMIT: dict[str, st.SearchStrategy[Bad]] = {
    "key": st.tuples(bad_text(), st.none() | st.integers(0, 100)).map(
        lambda kl: Bad("concurrency key", {"key": kl[0], "limit": kl[1]})
    ),
    "limit": st.tuples(KEY, bad_int(0, 2**31 - 1)).map(
        lambda kl: Bad("limit must be", {"key": kl[0], "limit": kl[1]})
    ),
}


@pytest.mark.parametrize("kind", list(BAD_LIMIT))
@settings(PROPERTY, max_examples=2 * PER_KIND)
@given(data=st.data())
async def test_set_concurrency_limit_refuses_a_bad_key_or_limit_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn, kind: str, data: st.DataObject
) -> None:
    bad_input = data.draw(BAD_LIMIT[kind], label="bad")
    TRIED[f"set_concurrency_limit: {kind}"] += 1
    await refused(
        conn,
        tx_app,
        bad_input.says,
        lambda: tx_app.set_concurrency_limit(**bad_input.sets, conn=conn),
    )


# the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "dsn", "says"),
    [
        (["doctor"], "postgresql://u:hunter2secret@localhost:abc/db", "has a port that is not"),
        (["jobs", "list"], "postgresql://u:hunter2secret@localhost:99999/db", "port"),
        (["migrate"], "mysql://u:hunter2secret@localhost/db", "scheme must be postgresql"),
        (["prune"], "postgresql://u:hunter2secret@h1:5432,,h2/db", "an empty host"),
        (["doctor"], "postgresql://u:hunter2secret/db", "port"),  # no host: the password
        (["jobs", "list"], "postgresql://u:hunter2secret@[::1/db", "not a well-formed URL"),
    ],
)
def test_a_malformed_dsn_gets_one_line_without_the_password(
    command: list[str], dsn: str, says: str
) -> None:
    env = {"SWEEPQ_DSN": None, "DATABASE_URL": None, "SWEEPQ_SCHEMA": None, "COLUMNS": "200"}
    result = CliRunner(env=env).invoke(cli, [*command, "--dsn", dsn])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "hunter2secret" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: --dsn ")
    assert says in lines[0]
    assert "postgresql://user@host:5432/dbname" in lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["prune", "--older-than", "99999999999d"],
        ["prune", "--older-than", "36526d"],
        ["doctor", "--retention", "9" * 400 + "w"],
    ],
)
def test_a_duration_past_100_years_gets_one_line(command: list[str]) -> None:
    env = {"SWEEPQ_DSN": None, "DATABASE_URL": None, "SWEEPQ_SCHEMA": None, "COLUMNS": "200"}
    result = CliRunner(env=env).invoke(cli, [*command, "--dsn", "postgresql://x@127.0.0.1:1/x"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "is too long: use at most 100 years (36525d)" in lines[0]


def test_an_app_refuses_a_malformed_dsn_when_it_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPQ_DSN", "postgresql://u:hunter2secret@localhost:abc/db")
    app = sweepq.App()
    with pytest.raises(sweepq.ConfigurationError, match="SWEEPQ_DSN has a port") as raised:
        app.dsn  # noqa: B018  # what open() connects to
    assert "hunter2secret" not in str(raised.value)


def test_every_declared_option_has_good_and_bad_values_here() -> None:
    declared = {o.name for o in OPTIONS}
    assert set(GOOD_OPTIONS) == declared
    assert declared <= set(BAD)
