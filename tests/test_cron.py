"""Cron in a time zone: ticks across both DST changes of Europe/Paris in 2027 (clocks go from
02:00 CET to 03:00 CEST on 2027-03-28, and from 03:00 CEST back to 02:00 CET on 2027-10-31),
computed by the function the leader uses, then enqueued by the leader's own step with the clock
driven through each night: one job per tick, keyed by its UTC instant."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

import sweepq
from statements import claim, finish
from sweepq.core import cron
from sweepq.core.ident import ident
from sweepq.core.maintenance import Maintenance
from sweepq.core.queries import Conn

PARIS = ZoneInfo("Europe/Paris")
SPRING = datetime(2027, 3, 28, tzinfo=PARIS)  # a local day of 23 hours
AUTUMN = datetime(2027, 10, 31, tzinfo=PARIS)  # a local day of 25 hours
HOUR = timedelta(hours=1)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local_day(day: datetime) -> tuple[datetime, datetime]:
    """The UTC instants where the local day `day` starts and the next one starts."""
    after = (day + timedelta(days=1)).replace(hour=0)
    return day.astimezone(UTC), after.astimezone(UTC)


def ticks(expression: str, start: datetime, end: datetime, tz: str = "Europe/Paris") -> list[str]:
    """Every tick in [start, end), as the leader computes them: each from the one before."""
    found: list[str] = []
    tick = cron.next_tick(expression, start - timedelta(seconds=1), tz)
    while tick < end:
        found.append(tick.isoformat())
        tick = cron.next_tick(expression, tick, tz)
    return found


def every(step: timedelta, start: datetime, end: datetime) -> list[str]:
    return [(start + i * step).isoformat() for i in range((end - start) // step)]


# The ticks, computed ------------------------------------------------------------------------


def test_a_daily_time_the_spring_change_skips_runs_once_at_the_first_minute_after_it() -> None:
    found = ticks("30 2 * * *", *local_day(datetime(2027, 3, 27, tzinfo=PARIS)))
    found += ticks("30 2 * * *", *local_day(SPRING))
    found += ticks("30 2 * * *", *local_day(datetime(2027, 3, 29, tzinfo=PARIS)))
    assert found == [
        "2027-03-27T01:30:00+00:00",  # 02:30 CET
        "2027-03-28T01:00:00+00:00",  # 02:30 does not exist: 03:00 CEST
        "2027-03-29T00:30:00+00:00",  # 02:30 CEST
    ]


def test_a_daily_time_the_autumn_change_repeats_runs_once_at_its_first_instant() -> None:
    found = ticks("30 2 * * *", *local_day(datetime(2027, 10, 30, tzinfo=PARIS)))
    found += ticks("30 2 * * *", *local_day(AUTUMN))
    found += ticks("30 2 * * *", *local_day(datetime(2027, 11, 1, tzinfo=PARIS)))
    assert found == [
        "2027-10-30T00:30:00+00:00",  # 02:30 CEST
        "2027-10-31T00:30:00+00:00",  # 02:30 CEST, the first of the two; not 01:30 UTC
        "2027-11-01T01:30:00+00:00",  # 02:30 CET
    ]


@pytest.mark.parametrize(
    ("day", "expression", "step", "count"),
    [
        (SPRING, "0 * * * *", HOUR, 23),
        (AUTUMN, "0 * * * *", HOUR, 25),
        (SPRING, "*/30 * * * *", HOUR / 2, 46),
        (AUTUMN, "*/30 * * * *", HOUR / 2, 50),
    ],
    ids=["hourly-spring", "hourly-autumn", "half-hourly-spring", "half-hourly-autumn"],
)
def test_an_interval_ticks_in_real_time_across_a_dst_change(
    day: datetime, expression: str, step: timedelta, count: int
) -> None:
    start, end = local_day(day)
    found = ticks(expression, start, end)
    assert len(found) == count
    assert found == every(step, start, end)


def test_the_hourly_ticks_of_the_autumn_night_are_both_two_oclocks() -> None:
    start, end = local_day(AUTUMN)
    local = [datetime.fromisoformat(t).astimezone(PARIS) for t in ticks("0 * * * *", start, end)]
    assert [(t.hour, t.utcoffset()) for t in local[1:5]] == [
        (1, 2 * HOUR),
        (2, 2 * HOUR),  # 02:00 CEST
        (2, HOUR),  # 02:00 CET, an hour later
        (3, HOUR),
    ]


def test_the_other_cases_the_cron_guide_states_hold() -> None:
    assert ticks("0,30 2,3 * * *", *local_day(SPRING)) == [
        "2027-03-28T01:00:00+00:00",  # 02:00 and 02:30 make one run at 03:00 CEST
        "2027-03-28T01:30:00+00:00",  # 03:30 CEST
    ]
    assert ticks("*/10 2 * * *", *local_day(SPRING)) == []
    assert ticks("*/10 2 * * *", *local_day(AUTUMN)) == every(
        timedelta(minutes=10), utc("2027-10-31T00:00"), utc("2027-10-31T02:00")
    )


@pytest.mark.parametrize(
    "expression", ["30 2 * * *", "0 2 * * *", "0,30 2,3 * * *", "30 1-3 * * *", "15 2 * * 0"]
)
@pytest.mark.parametrize("day", [SPRING, AUTUMN], ids=["spring", "autumn"])
def test_fixed_times_are_placed_where_cronsim_places_them(expression: str, day: datetime) -> None:
    start, end = local_day(day - timedelta(days=1))[0], local_day(day + timedelta(days=1))[1]
    theirs = []
    for tick in CronSim(expression, (start - timedelta(seconds=1)).astimezone(PARIS)):
        if tick.astimezone(UTC) >= end:
            break
        theirs.append(tick.astimezone(UTC).isoformat())
    assert ticks(expression, start, end) == theirs


@pytest.mark.parametrize("day", [SPRING, AUTUMN], ids=["spring", "autumn"])
def test_a_six_field_fixed_time_follows_the_same_rules_as_five(day: datetime) -> None:
    start, end = local_day(day)
    assert ticks("0 30 2 * * *", start, end) == ticks("30 2 * * *", start, end)


def test_the_next_tick_after_an_instant_of_the_repeated_hour_is_after_it() -> None:
    second_pass = utc("2027-10-31T01:10:00")  # 02:10 CET, after the 02:30 CEST tick
    # cronsim alone answers with a tick before the instant it was asked after (02:30 CEST)...
    assert next(CronSim("30 2 * * *", second_pass.astimezone(PARIS))) < second_pass
    # ...which would put the schedule's next tick in the past: the leader's is the next day.
    assert cron.next_tick("30 2 * * *", second_pass, "Europe/Paris") == utc("2027-11-01T01:30")


def test_without_a_zone_ticks_are_utc_as_before() -> None:
    assert cron.next_tick("30 2 * * *", utc("2027-03-28T00:00")) == utc("2027-03-28T02:30")
    start, end = local_day(AUTUMN)
    assert len(ticks("0 * * * *", start, end, tz="UTC")) == 25  # 25 hours, none special
    assert cron.next_tick("30 2 * * *", utc("2027-10-31T01:10"), "UTC") == utc("2027-10-31T02:30")


# Registration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tz", ["Europe/Pariss", "europe/paris", "Paris", "", "Europe", "../etc/passwd", "Mars/Olympus"]
)
def test_an_unknown_time_zone_is_refused_at_registration_naming_it(tz: str) -> None:
    app = sweepq.App("postgresql://unused", schema="unused")

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    with pytest.raises(sweepq.InvalidJobOptionError) as refused:
        app.cron("nightly", "30 2 * * *", t, tz=tz)
    message = str(refused.value)
    assert f"cron 'nightly': {tz!r} is not a time zone" in message
    assert "zoneinfo.available_timezones()" in message  # how to list the valid names
    if tz in ("Europe/Pariss", "europe/paris", "Paris"):
        assert "(did you mean 'Europe/Paris'?)" in message
    assert app.crons == {}


def test_a_time_zone_that_is_not_a_string_is_refused() -> None:
    app = sweepq.App("postgresql://unused", schema="unused")

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    with pytest.raises(sweepq.InvalidJobOptionError, match="tz must be a time zone name"):
        app.cron("nightly", "30 2 * * *", t, tz=PARIS)  # type: ignore[arg-type]  # the point
    assert app.crons == {}


def test_the_same_schedule_in_another_zone_is_another_schedule() -> None:
    app = sweepq.App("postgresql://unused", schema="unused")

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    schedule = app.cron("nightly", "30 2 * * *", t, tz="Europe/Paris")
    assert schedule.tz == "Europe/Paris"
    assert app.cron("nightly", "30 2 * * *", t, tz="Europe/Paris") == schedule
    with pytest.raises(sweepq.InvalidJobOptionError, match="already registered"):
        app.cron("nightly", "30 2 * * *", t, tz="America/New_York")
    assert app.cron("utc", "30 2 * * *", t).tz == "UTC"


# The leader's step, with the clock driven through each night --------------------------------


async def tick_keys(app: sweepq.App, conn: Conn, name: str) -> list[str]:
    rows = await conn.fetch(
        f"SELECT idempotency_key FROM {ident(app.schema)}.jobs"
        " WHERE idempotency_scope = 'cron' AND idempotency_key LIKE $1 || '@%' ORDER BY id",
        name,
    )
    return [r[0] for r in rows]


def clock(start: datetime, end: datetime, step: timedelta) -> Iterator[datetime]:
    now = start
    while now < end:
        yield now
        now += step


@pytest.mark.parametrize(
    ("expression", "day", "count"),
    [
        ("30 2 * * *", SPRING, 1),
        ("30 2 * * *", AUTUMN, 1),
        ("0 * * * *", SPRING, 23),
        ("0 * * * *", AUTUMN, 25),
        ("*/30 * * * *", SPRING, 46),
        ("*/30 * * * *", AUTUMN, 50),
    ],
    ids=["1d-spring", "1d-autumn", "1h-spring", "1h-autumn", "30m-spring", "30m-autumn"],
)
async def test_the_leader_enqueues_one_job_per_tick_keyed_by_its_utc_instant(
    tx_app: sweepq.App, conn: Conn, expression: str, day: datetime, count: int
) -> None:
    @tx_app.task(name="paris_tick")
    async def paris_tick(ctx: sweepq.Context) -> None:
        return None

    schedule = tx_app.cron("paris", expression, paris_tick, tz="Europe/Paris")
    start, end = local_day(day)
    await cron.register(conn, tx_app.queries, [schedule], now=start - timedelta(seconds=1))
    # A leader looking every 7 minutes (ticks are found late, never early) through the night;
    # each tick's job runs before the next tick, so no tick is skipped as an overlap.
    for now in clock(start, end, timedelta(minutes=7)):
        if await cron.enqueue_due(conn, tx_app.queries.runtime, schedule, tx_app.enqueue, now=now):
            [job] = await claim(tx_app, on=conn)
            assert await finish(tx_app, job, on=conn)
    keys = await tick_keys(tx_app, conn, "paris")
    assert len(keys) == len(set(keys)) == count
    assert keys == [f"paris@{tick}" for tick in ticks(expression, start, end)]


async def test_a_leader_down_through_the_night_enqueues_one_job_not_a_storm(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="paris_tick")
    async def paris_tick(ctx: sweepq.Context) -> None:
        return None

    schedule = tx_app.cron("paris", "*/30 * * * *", paris_tick, tz="Europe/Paris")
    start, end = local_day(AUTUMN)
    await cron.register(conn, tx_app.queries, [schedule], now=start - timedelta(seconds=1))
    back = end + timedelta(minutes=10)  # 00:10 CET the next day: 50 ticks were missed
    runtime = tx_app.queries.runtime
    assert await cron.enqueue_due(conn, runtime, schedule, tx_app.enqueue, now=back)
    assert not await cron.enqueue_due(conn, runtime, schedule, tx_app.enqueue, now=back)
    assert await tick_keys(tx_app, conn, "paris") == [f"paris@{start.isoformat()}"]
    [row] = await tx_app.cron_schedules(conn=conn)
    assert row.last_run_at == start  # the oldest missed tick
    assert row.next_run_at == end + timedelta(minutes=30)  # the first after the leader's now


async def test_a_schedule_shows_its_zone_and_a_changed_zone_restarts_its_ticks(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="paris_tick")
    async def paris_tick(ctx: sweepq.Context) -> None:
        return None

    task = tx_app.get_task("paris_tick")
    now = utc("2027-10-30T12:00")

    def nightly(tz: str) -> cron.CronSchedule:
        return cron.make_schedule(
            "nightly", "30 2 * * *", task, None, overlap="skip", queue=None, tz=tz
        )

    await cron.register(conn, tx_app.queries, [nightly("UTC")], now=now)
    [row] = await tx_app.cron_schedules(conn=conn)
    assert (row.tz, row.next_run_at) == ("UTC", utc("2027-10-31T02:30"))

    # The next registration in another zone (a deploy that changed it) starts over in that zone.
    await cron.register(conn, tx_app.queries, [nightly("Europe/Paris")], now=now)
    [row] = await tx_app.cron_schedules(conn=conn)
    assert (row.tz, row.next_run_at) == ("Europe/Paris", utc("2027-10-31T00:30"))
    assert row.next_run_at.astimezone(PARIS).time() == time(2, 30)

    # Registering it unchanged keeps its next tick, whatever the time of the registration.
    await cron.register(conn, tx_app.queries, [nightly("Europe/Paris")], now=now + 3 * HOUR)
    [row] = await tx_app.cron_schedules(conn=conn)
    assert row.next_run_at == utc("2027-10-31T00:30")


async def test_the_maintenance_leader_ticks_a_zoned_schedule_in_its_zone(
    app: sweepq.App,
) -> None:
    @app.task(name="paris_report")
    async def paris_report(ctx: sweepq.Context) -> None:
        return None

    app.cron("paris-nightly", "30 2 * * *", paris_report, tz="Europe/Paris")
    leader = Maintenance(app, "w", prune_every=None)
    assert await leader.step()  # elected: registers the schedule from the database's clock
    [row] = await app.cron_schedules()
    clock_now = await app.queries.runtime.clock_now(app.pool)
    assert row.tz == "Europe/Paris"
    assert row.next_run_at == cron.next_tick("30 2 * * *", clock_now, "Europe/Paris")
    assert row.next_run_at.astimezone(PARIS).time() in (time(2, 30), time(3))  # 03:00: spring

    # Move the tick back to the first 02:30 of the last autumn night in Paris, 2026-10-25.
    missed = utc("2026-10-25T00:30")
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.cron_schedules SET next_run_at = $1", missed
    )
    await leader.step()
    await leader.step()  # nothing more is due
    jobs = await app.pool.fetch(
        f"SELECT idempotency_key FROM {ident(app.schema)}.jobs WHERE task = 'paris_report'"
    )
    assert [r[0] for r in jobs] == ["paris-nightly@2026-10-25T00:30:00+00:00"]
    [row] = await app.cron_schedules()
    assert (row.last_run_at, row.last_outcome) == (missed, "enqueued")
    clock_now = await app.queries.runtime.clock_now(app.pool)
    assert clock_now < row.next_run_at <= clock_now + timedelta(days=1)
    assert row.next_run_at == cron.next_tick("30 2 * * *", row.next_run_at - HOUR, "Europe/Paris")
