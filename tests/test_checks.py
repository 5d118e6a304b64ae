"""Bad input gets a clear error that says what to do, and writes nothing."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import sweepq
from factories import count_rows
from sweepq.core.queries import Conn


def register(app: sweepq.App) -> None:
    @app.task(name="typed")
    async def typed(ctx: sweepq.Context, n: int, tags: list[str] | None = None) -> None:
        return None

    @app.task(name="untyped")
    async def untyped(ctx: sweepq.Context, payload: Any) -> None:
        return None

    @app.task(name="floats")
    async def floats(ctx: sweepq.Context, x: float) -> None:
        return None

    @app.task(name="loose")
    async def loose(ctx: sweepq.Context, o: object, d: dict[str, Any]) -> None:
        return None


async def jobs_and_keys(app: sweepq.App, conn: Conn) -> tuple[int, int]:
    jobs = await count_rows(app, "jobs", on=conn)
    return jobs, await count_rows(app, "concurrency_keys", on=conn)


Call = Callable[[sweepq.App, Conn], Awaitable[object]]


def enqueue(task: str, args: Any = None, **options: Any) -> Call:
    async def call(app: sweepq.App, conn: Conn) -> object:
        return await app.enqueue(task, args, conn=conn, **options)

    return call


def enqueue_many(*specs: tuple[str, Any, dict[str, Any]]) -> Call:
    async def call(app: sweepq.App, conn: Conn) -> object:
        return await app.enqueue_many([sweepq.JobSpec(t, a, **o) for t, a, o in specs], conn=conn)

    return call


GOOD: dict[str, Any] = {"n": 1}


def nested(depth: int) -> Any:
    """A list nested `depth` deep: [[...]]."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


TOO_DEEP = "the args: JSON nested more than 64 levels deep (the most sweepq stores)"
BAD_CASES: list[Any] = [
    pytest.param(
        enqueue("untyped", {"payload": nested(64)}),  # 65 with the args object around it
        sweepq.InvalidArgumentsError,
        TOO_DEEP,
        id="args nested 65 deep",
    ),
    pytest.param(
        enqueue("untyped", {"payload": nested(2_000)}),
        sweepq.InvalidArgumentsError,
        TOO_DEEP,
        id="args nested far deeper than recursion reaches",
    ),
    pytest.param(
        enqueue_many(*[("untyped", {"payload": nested(2_000)}, {})] * 20),
        sweepq.InvalidArgumentsError,
        TOO_DEEP,
        id="args nested too deep, by COPY",
    ),
    pytest.param(
        enqueue("loose", {"o": 1, "d": {"a": nested(100)}}),
        sweepq.InvalidArgumentsError,
        TOO_DEEP,
        id="args nested too deep inside a typed container",
    ),
    pytest.param(
        enqueue("loose", {"o": {1, 2}, "d": {}}),
        sweepq.InvalidArgumentsError,
        "`o` is a set, which is not a JSON value",
        id="set_in_object_annotated_parameter",
    ),
    pytest.param(
        enqueue("loose", {"o": 1, "d": {"when": datetime(2026, 1, 1, tzinfo=UTC)}}),
        sweepq.InvalidArgumentsError,
        "`d` would not come back unchanged from JSON",
        id="datetime_inside_an_untyped_container",
    ),
    pytest.param(
        enqueue("send_email", {}),
        sweepq.UnknownTaskError,
        "no task named 'send_email' is registered (known: floats, loose, typed, untyped); "
        "register it with @app.task",
        id="unknown task",
    ),
    pytest.param(
        enqueue("typed", {}),
        sweepq.InvalidArgumentsError,
        "missing required field `n` (the handler accepts: n, tags)",
        id="missing argument",
    ),
    pytest.param(
        enqueue("typed", {"n": 1, "cc": "x"}),
        sweepq.InvalidArgumentsError,
        "unknown field `cc` (the handler accepts: n, tags)",
        id="unknown argument",
    ),
    pytest.param(
        enqueue("typed", {"n": "one"}),
        sweepq.InvalidArgumentsError,
        "Expected `int`, got `str` - at `$.n`",
        id="mistyped argument",
    ),
    pytest.param(
        enqueue("typed", {"n": 1, "tags": ["a", 2]}),
        sweepq.InvalidArgumentsError,
        "Expected `str`, got `int` - at `$.tags[1]`",
        id="mistyped nested argument",
    ),
    pytest.param(
        enqueue("typed", ["n", 1]),
        sweepq.InvalidArgumentsError,
        "args must be a dict or a msgspec.Struct, not list",
        id="args not a mapping",
    ),
    pytest.param(
        enqueue("untyped", {"payload": {1, 2}}),
        sweepq.InvalidArgumentsError,
        "`payload` is a set, which is not a JSON value; annotate the handler's parameter",
        id="set in an untyped argument",
    ),
    pytest.param(
        enqueue("untyped", {"payload": {"at": datetime(2030, 1, 1, tzinfo=UTC)}}),
        sweepq.InvalidArgumentsError,
        "`payload.at` is a datetime, which is not a JSON value; annotate",
        id="datetime in an untyped argument",
    ),
    pytest.param(
        enqueue("untyped", {"payload": [1.0, float("nan")]}),
        sweepq.InvalidArgumentsError,
        "`payload[1]` is nan, which JSON cannot hold",
        id="nan in an untyped argument",
    ),
    pytest.param(
        enqueue("untyped", {"payload": {"x": float("inf")}}),
        sweepq.InvalidArgumentsError,
        "`payload.x` is inf, which JSON cannot hold",
        id="infinity in an untyped argument",
    ),
    pytest.param(
        enqueue("untyped", {"payload": {3: "x"}}),
        sweepq.InvalidArgumentsError,
        "`payload` has a non-string key 3",
        id="non-string key in an untyped argument",
    ),
    pytest.param(
        enqueue("floats", {"x": float("nan")}),
        sweepq.InvalidArgumentsError,
        "not representable as JSON",
        id="nan in a float argument",
    ),
    pytest.param(
        enqueue("untyped", {"payload": "\ud800"}),
        sweepq.InvalidArgumentsError,
        "not representable as JSON",
        id="lone surrogate in a string",
    ),
    pytest.param(
        enqueue("untyped", {"payload": "x" * (1024 * 1024)}),
        sweepq.InvalidArgumentsError,
        "over the 1,048,576-byte limit; store large payloads elsewhere and pass a reference",
        id="oversize args",
    ),
    pytest.param(
        enqueue("typed", GOOD, queue="no spaces allowed"),
        sweepq.InvalidIdentifierError,
        "queue name 'no spaces allowed' is not valid: use 1-128 letters, digits",
        id="invalid queue name",
    ),
    pytest.param(
        enqueue("typed", GOOD, queue=""),
        sweepq.InvalidIdentifierError,
        "queue name '' is not valid",
        id="empty queue name",
    ),
    pytest.param(
        enqueue("typed", GOOD, delay=-1),
        sweepq.InvalidJobOptionError,
        "delay must be a timedelta or a finite number of seconds between 0 and 100 years, got -1",
        id="negative delay in seconds",
    ),
    pytest.param(
        enqueue("typed", GOOD, delay=timedelta(seconds=-5)),
        sweepq.InvalidJobOptionError,
        "delay must be a timedelta or a finite number of seconds between 0 and 100 years",
        id="negative delay as timedelta",
    ),
    pytest.param(
        enqueue("typed", GOOD, delay=float("nan")),
        sweepq.InvalidJobOptionError,
        "delay must be a timedelta or a finite number of seconds between 0 and 100 years, got nan",
        id="nan delay",
    ),
    pytest.param(
        enqueue("typed", GOOD, unique_for=timedelta(minutes=5)),
        sweepq.InvalidJobOptionError,
        "unique_for needs identity_key",
        id="unique_for without identity_key",
    ),
    pytest.param(
        enqueue("typed", GOOD, identity_key="i", unique_for=0),
        sweepq.InvalidJobOptionError,
        "unique_for must be a timedelta or a finite number of seconds above 0 and at most 100",
        id="empty unique_for window",
    ),
    pytest.param(
        enqueue("typed", GOOD, run_at=datetime(2030, 1, 1)),
        sweepq.InvalidJobOptionError,
        "run_at must be a timezone-aware datetime",
        id="naive run_at",
    ),
    pytest.param(
        enqueue("typed", GOOD, delay=5, run_at=datetime(2030, 1, 1, tzinfo=UTC)),
        sweepq.InvalidJobOptionError,
        "pass delay or run_at, not both",
        id="delay and run_at together",
    ),
    pytest.param(
        enqueue("typed", GOOD, max_attempts=0),
        sweepq.InvalidJobOptionError,
        "max_attempts must be an int in 1..1000000, got 0",
        id="max_attempts zero",
    ),
    pytest.param(
        enqueue("typed", GOOD, max_attempts=True),
        sweepq.InvalidJobOptionError,
        "max_attempts must be an int in 1..1000000, got True",
        id="max_attempts bool",
    ),
    pytest.param(
        enqueue("typed", GOOD, priority=40_000),
        sweepq.InvalidJobOptionError,
        "priority must be an int in -32768..32767, got 40000",
        id="priority too high",
    ),
    pytest.param(
        enqueue("typed", GOOD, priority=-32769),
        sweepq.InvalidJobOptionError,
        "priority must be an int in -32768..32767",
        id="priority too low",
    ),
    pytest.param(
        enqueue("typed", GOOD, deadline=0),
        sweepq.InvalidJobOptionError,
        "deadline must be a timedelta or a finite number of seconds above 0 and at most 100 years",
        id="zero deadline",
    ),
    pytest.param(
        enqueue("typed", GOOD, idempotency_key=""),
        sweepq.InvalidJobOptionError,
        "idempotency_key must be a non-empty string of at most 512 characters",
        id="empty idempotency key",
    ),
    pytest.param(
        enqueue("typed", GOOD, identity_key="x" * 513),
        sweepq.InvalidJobOptionError,
        "identity_key must be a non-empty string of at most 512 characters",
        id="overlong identity key",
    ),
    pytest.param(
        enqueue("typed", GOOD, concurrency_key=7),
        sweepq.InvalidJobOptionError,
        "concurrency_key must be a non-empty string",
        id="concurrency key not a string",
    ),
    pytest.param(
        enqueue_many(
            ("typed", {"n": 1}, {"concurrency_key": "new-key"}),
            ("typed", {"n": 2}, {"idempotency_key": "k"}),
            ("typed", {"n": "three"}, {}),
            ("typed", {"n": 4}, {}),
        ),
        sweepq.InvalidArgumentsError,
        "Expected `int`, got `str`",
        id="one bad spec among good ones",
    ),
    pytest.param(
        enqueue_many(
            ("typed", {"n": 1}, {}),
            ("typed", {"n": 2}, {"priority": 1 << 20}),
        ),
        sweepq.InvalidJobOptionError,
        "priority must be an int",
        id="one bad option among good specs",
    ),
    pytest.param(
        enqueue_many(("typed", {"n": 1}, {}), ("nope", {}, {})),
        sweepq.UnknownTaskError,
        "no task named 'nope'",
        id="one unknown task among good specs",
    ),
]


@pytest.mark.parametrize(("call", "error", "says"), BAD_CASES)
async def test_bad_input_raises_a_clear_error_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn, call: Call, error: type[Exception], says: str
) -> None:
    register(tx_app)
    before = await jobs_and_keys(tx_app, conn)
    with pytest.raises(error, match=re.escape(says)) as raised:
        await call(tx_app, conn)
    assert isinstance(raised.value, sweepq.SweepqError)
    assert await jobs_and_keys(tx_app, conn) == before


async def test_enqueue_many_refuses_something_other_than_a_list_of_specs(
    tx_app: sweepq.App, conn: Conn
) -> None:
    register(tx_app)
    before = await jobs_and_keys(tx_app, conn)
    spec = sweepq.JobSpec("typed", GOOD)
    with pytest.raises(sweepq.InvalidJobOptionError, match=re.escape("a list of sweepq.JobSpec")):
        await tx_app.enqueue_many(spec, conn=conn)  # type: ignore[arg-type]  # the mistake
    with pytest.raises(sweepq.InvalidJobOptionError, match=re.escape("a list of sweepq.JobSpec")):
        await tx_app.enqueue_many([spec, {"task": "typed"}], conn=conn)  # type: ignore[list-item]
    assert await jobs_and_keys(tx_app, conn) == before


@pytest.mark.parametrize(
    "schema", ["bad-name", "1starts_with_digit", "x; DROP TABLE jobs", "", "a" * 64, 'q"uote']
)
def test_an_invalid_schema_name_is_refused_before_anything_connects(schema: str) -> None:
    with pytest.raises(sweepq.InvalidIdentifierError, match="use 1-63 letters, digits"):
        sweepq.App("postgresql://nowhere.invalid/db", schema=schema)


def test_an_invalid_queue_name_is_refused_at_registration_and_by_the_worker(dsn: str) -> None:
    app = sweepq.App(dsn, schema="sweepq_unused")
    with pytest.raises(sweepq.InvalidIdentifierError, match="queue name 'a b' is not valid"):

        @app.task(queue="a b")
        async def t(ctx: sweepq.Context) -> None:
            return None

    assert app.tasks == {}
    with pytest.raises(sweepq.InvalidIdentifierError, match="queue name"):
        sweepq.Worker(app, queues=["ok", "-bad"])


def test_registration_refuses_handlers_whose_arguments_cannot_be_checked(dsn: str) -> None:
    app = sweepq.App(dsn, schema="sweepq_unused")

    async def agen(ctx: sweepq.Context):  # type: ignore[no-untyped-def]  # the mistake
        yield 1

    async def star(ctx: sweepq.Context, *args: int) -> None:
        return None

    async def kwargs(ctx: sweepq.Context, **options: int) -> None:
        return None

    async def no_ctx() -> None:
        return None

    cases: list[tuple[Any, str]] = [
        (agen, "must be an `async def` or a plain `def` function (not a generator)"),
        (star, "*args/**kwargs cannot be checked; name each argument"),
        (kwargs, "*args/**kwargs cannot be checked"),
        (no_ctx, "first parameter must take the job context"),
    ]
    for handler, says in cases:
        with pytest.raises(sweepq.ConfigurationError, match=re.escape(says)):
            app.task(handler)
    assert app.tasks == {}


def test_two_handlers_under_one_task_name_are_refused(dsn: str) -> None:
    app = sweepq.App(dsn, schema="sweepq_unused")

    @app.task(name="same")
    async def one(ctx: sweepq.Context) -> None:
        return None

    with pytest.raises(
        sweepq.DuplicateTaskError, match=re.escape("pass a distinct name= to @app.task")
    ):

        @app.task(name="same")
        async def two(ctx: sweepq.Context) -> None:
            return None

    assert app.tasks["same"].fn is one.fn


@pytest.mark.parametrize(
    ("key", "limit", "says"),
    [
        ("", 1, "concurrency key must be a non-empty string"),
        ("k", -1, "limit must be an int >= 0 or None"),
        ("k", 1.5, "limit must be an int >= 0 or None"),
        ("k", True, "limit must be an int >= 0 or None"),
    ],
)
async def test_a_bad_concurrency_limit_is_refused_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn, key: str, limit: Any, says: str
) -> None:
    before = await jobs_and_keys(tx_app, conn)
    with pytest.raises(sweepq.InvalidJobOptionError, match=re.escape(says)):
        await tx_app.set_concurrency_limit(key, limit, conn=conn)
    assert await jobs_and_keys(tx_app, conn) == before


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            {"older_than": timedelta(seconds=-1)},
            "older_than must be a timedelta or a finite number of seconds between 0 and 100 years",
        ),
        ({"older_than": timedelta.max}, "between 0 and 100 years, got datetime.timedelta"),
        ({"older_than": 3600}, "older_than must be a timedelta, got 3600"),
        ({"batch_size": 0}, "batch_size must be an int in 1..1000000, got 0"),
    ],
)
async def test_bad_prune_options_are_refused(
    tx_app: sweepq.App, conn: Conn, options: dict[str, Any], says: str
) -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match=re.escape(says)):
        await tx_app.prune(conn=conn, **options)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda app, c: app.get_job("1", conn=c), "a job id is an int, got '1'"),
        (lambda app, c: app.get_job(2**63, conn=c), "a job id is an int, got 9223372036854775808"),
        (lambda app, c: app.retry(True, conn=c), "a job id is an int, got True"),
        (lambda app, c: app.cancel(1, reason="a\x00b", conn=c), "reason cannot hold NUL"),
        (lambda app, c: app.rate_limit("k", per_second=1e-320), "per_second must be a number"),
    ],
    ids=["id-text", "id-too-large", "id-bool", "reason-nul", "rate-too-slow"],
)
async def test_bad_job_ids_reasons_and_rates_are_refused(
    tx_app: sweepq.App, conn: Conn, call: Callable[[sweepq.App, Conn], Awaitable[object]], says: str
) -> None:
    before = await jobs_and_keys(tx_app, conn)
    with pytest.raises(sweepq.InvalidJobOptionError, match=re.escape(says)):
        await call(tx_app, conn)
    assert await jobs_and_keys(tx_app, conn) == before


@pytest.mark.parametrize(
    "make",
    [
        lambda: sweepq.Snooze(-1),
        lambda: sweepq.RetryAfter(timedelta(seconds=-1)),
        lambda: sweepq.Snooze(float("nan")),
        lambda: sweepq.Snooze(float("inf")),
        lambda: sweepq.RetryAfter(1e300),
        lambda: sweepq.RetryAfter(timedelta.max),
    ],
)
def test_a_negative_or_endless_deferral_is_refused_where_it_is_raised(
    make: Callable[[], object],
) -> None:
    with pytest.raises(ValueError, match="delay must be >= 0 seconds"):
        make()
