"""sweepq.contrib.otel: a span per execution and metrics from the events, and queue gauges read
from the database."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import sweepq
import sweepq.throttle
from factories import create_items
from sweep_worker_proc import items_sweep
from sweepq.contrib import otel
from sweepq.contrib.otel import OtelObserver, QueueSample, QueueSampler
from sweepq.contrib.otel.observer import SECONDS_BUCKETS
from sweepq.core.ident import ident
from sweepq.testing import drain
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Telemetry:
    observer: OtelObserver
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    meters: MeterProvider

    def finished_spans(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        found: dict[str, Metric] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                found.update((m.name, m) for m in scope.metrics)
        return found


def numbers(metric: Metric) -> dict[frozenset[tuple[str, Any]], float]:
    """A counter's or gauge's value per attribute set."""
    points = [p for p in metric.data.data_points if isinstance(p, NumberDataPoint)]
    return {frozenset((p.attributes or {}).items()): p.value for p in points}


def histograms(metric: Metric) -> dict[frozenset[tuple[str, Any]], HistogramDataPoint]:
    points = [p for p in metric.data.data_points if isinstance(p, HistogramDataPoint)]
    return {frozenset((p.attributes or {}).items()): p for p in points}


def attrs(**values: str) -> frozenset[tuple[str, Any]]:
    """An attribute set, from keyword names: `queue` is messaging.destination.name, and the
    others are sweepq's (`task` -> sweepq.task, `sweep_name` -> sweepq.sweep.name)."""
    names = {
        "queue": "messaging.destination.name",
        "task": "sweepq.task",
        "outcome": "sweepq.outcome",
        "sweep_name": "sweepq.sweep.name",
        "sweep_state": "sweepq.sweep.state",
        "item_state": "sweepq.item.state",
    }
    return frozenset((names[k], v) for k, v in values.items())


@pytest.fixture
def telemetry(app: sweepq.App) -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    observer = OtelObserver(tracer_provider=tracers, meter_provider=meters)
    app.observe(observer)
    yield Telemetry(observer, spans, reader, meters)
    app.unobserve(observer)
    tracers.shutdown()
    meters.shutdown()


# spans ------------------------------------------------------------------------------------------


async def test_a_completed_execution_is_a_consumer_span_with_the_messaging_attributes(
    app: sweepq.App, telemetry: Telemetry
) -> None:
    @app.task(name="send_receipt", queue="mail")
    async def send_receipt(ctx: sweepq.Context) -> None:
        return None

    job = await app.enqueue(send_receipt)
    assert await drain(app, queues=["mail"]) == {"completed": 1}

    (span,) = telemetry.finished_spans()
    assert span.name == "sweepq.job send_receipt"
    assert span.kind is SpanKind.CONSUMER
    assert dict(span.attributes or {}) == {
        "messaging.system": "sweepq",
        "messaging.operation.type": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(job.job_id),
        "sweepq.task": "send_receipt",
        "sweepq.attempt": 1,
        "sweepq.outcome": "completed",
    }
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is None  # a trace of its own, not a child of whatever was current
    assert span.start_time is not None
    assert span.end_time is not None
    assert span.end_time >= span.start_time


async def test_a_retried_then_failed_job_has_an_error_span_per_attempt_with_the_error_line(
    app: sweepq.App, telemetry: Telemetry
) -> None:
    @app.task(name="charge", max_attempts=2)
    async def charge(ctx: sweepq.Context, order: int) -> None:
        raise ConnectionError(f"card processor refused order {order}")

    job = await app.enqueue(charge, {"order": 7})
    assert await drain(app) == {"retry": 1, "failed": 1}

    first, second = sorted(telemetry.finished_spans(), key=lambda s: s.start_time or 0)
    for span, attempt in ((first, 1), (second, 2)):
        assert span.name == "sweepq.job charge"
        assert span.attributes is not None
        assert span.attributes["sweepq.attempt"] == attempt
        assert span.attributes["messaging.message.id"] == str(job.job_id)
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "ConnectionError: card processor refused order 7"
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["sweepq.outcome"] == "retry"
    assert "sweepq.failure_reason" not in first.attributes
    assert second.attributes["sweepq.outcome"] == "failed"
    assert second.attributes["sweepq.failure_reason"] == "max_attempts_exceeded"
    assert first.context is not None
    assert second.context is not None
    assert first.context.trace_id != second.context.trace_id  # each execution its own trace


async def test_an_instrumented_app_carries_the_enqueuers_trace_into_the_jobs_span(
    app: sweepq.App,
) -> None:
    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    observer = otel.instrument(app, tracer_provider=tracers, meter_provider=MeterProvider())

    @app.task(name="ship")
    async def ship(ctx: sweepq.Context) -> None:
        return None

    try:
        with tracers.get_tracer("shop").start_as_current_span("POST /orders") as request:
            traced = await app.enqueue(ship)
        untraced = await app.enqueue(ship)  # outside any span: the job starts its own trace
        assert await drain(app) == {"completed": 2}
    finally:
        app.unobserve(observer)
        app.trace_context_source = None
    by_job = {
        s.attributes["messaging.message.id"]: s  # type: ignore[index]
        for s in spans.get_finished_spans()
        if s.name == "sweepq.job ship"
    }
    job_span = by_job[str(traced.job_id)]
    assert job_span.context is not None
    assert job_span.parent is not None
    assert job_span.context.trace_id == request.get_span_context().trace_id
    assert job_span.parent.span_id == request.get_span_context().span_id
    assert by_job[str(untraced.job_id)].parent is None


async def test_an_execution_whose_handler_never_started_still_gets_its_span(
    app: sweepq.App, telemetry: Telemetry
) -> None:
    # A job of a task this worker has no handler for, as another service's enqueue would leave.
    await app.pool.execute(
        f"INSERT INTO {ident(app.schema)}.jobs (task, queue, max_attempts) "
        "VALUES ('unknown_task', 'default', 1)"
    )
    outcomes = await drain(app, include_scheduled=False)
    assert outcomes == {"handed_back": 1}  # for a worker that has the task
    (span,) = telemetry.finished_spans()
    assert span.name == "sweepq.job unknown_task"
    assert span.attributes is not None
    assert span.attributes["sweepq.outcome"] == "handed_back"
    assert span.status.status_code is StatusCode.UNSET


# metrics ----------------------------------------------------------------------------------------


async def test_executions_are_counted_per_task_queue_and_outcome_and_timed(
    app: sweepq.App, telemetry: Telemetry
) -> None:
    @app.task(name="resize", max_attempts=2)
    async def resize(ctx: sweepq.Context, fail: bool) -> None:
        if fail:
            raise ValueError("not an image")

    await app.enqueue_many([sweepq.JobSpec(resize, {"fail": False}) for _ in range(3)])
    await app.enqueue(resize, {"fail": True})
    assert await drain(app) == {"completed": 3, "retry": 1, "failed": 1}

    found = telemetry.metrics()
    executions = found["sweepq.job.executions"]
    assert executions.unit == "{execution}"
    assert numbers(executions) == {
        attrs(task="resize", queue="default", outcome="completed"): 3,
        attrs(task="resize", queue="default", outcome="retry"): 1,
        attrs(task="resize", queue="default", outcome="failed"): 1,
    }
    duration = found["sweepq.job.duration"]
    assert duration.unit == "s"
    (timed,) = histograms(duration).values()
    assert (dict(timed.attributes or {}), timed.count) == ({"sweepq.task": "resize"}, 5)
    assert 0 < timed.sum < 30
    assert list(timed.explicit_bounds) == list(SECONDS_BUCKETS)
    wait = found["sweepq.job.wait_time"]
    assert wait.unit == "s"
    (waited,) = histograms(wait).values()
    assert dict(waited.attributes or {}) == {"messaging.destination.name": "default"}
    assert waited.count == 5  # every claim, the retry's included
    assert waited.sum >= 0


async def test_a_throttled_sweep_counts_its_waits_and_their_seconds(
    app: sweepq.App, telemetry: Telemetry
) -> None:
    await create_items(app, 10)
    asked: list[int] = []

    async def unwell_once(conn: Any) -> timedelta | None:
        asked.append(1)
        return sweepq.throttle.Wait(0.2, "replica lag 7.2 s > 5 s") if len(asked) == 1 else None

    app.register_sweep(items_sweep(app.schema, page_size=10, throttle=(unwell_once,)))
    started = await app.start_sweep("items")

    async def ended() -> bool:
        await drain(app)  # the throttled link waits 0.2 s: drain again once it is due
        run = await app.sweep_status(started.run_id)
        return run is None or run.ended

    await wait_until(ended, timeout=30, what="the run ends", every=0.05)

    found = telemetry.metrics()
    assert numbers(found["sweepq.sweep.throttle.waits"]) == {attrs(sweep_name="items"): 1}
    assert numbers(found["sweepq.sweep.throttle.duration"]) == {attrs(sweep_name="items"): 0.2}
    assert found["sweepq.sweep.throttle.duration"].unit == "s"


async def test_a_sweep_counts_its_items_enqueued_its_run_and_its_items_by_state(
    app: sweepq.App, telemetry: Telemetry
) -> None:
    await create_items(app, 25, failing=range(7, 9))
    app.register_sweep(items_sweep(app.schema, page_size=10, window=30, max_attempts=1))
    await app.start_sweep("items")
    await drain(app)

    found = telemetry.metrics()
    assert numbers(found["sweepq.sweep.items.enqueued"]) == {attrs(sweep_name="items"): 25}
    assert numbers(found["sweepq.sweep.runs"]) == {
        attrs(sweep_name="items", sweep_state="failed"): 1  # two items are undone
    }
    assert numbers(found["sweepq.sweep.items.ended"]) == {
        attrs(sweep_name="items", item_state="completed"): 23,
        attrs(sweep_name="items", item_state="failed"): 2,
        attrs(sweep_name="items", item_state="cancelled"): 0,
    }
    assert {m.unit for n, m in found.items() if n.startswith("sweepq.sweep.items")} == {"{item}"}


async def test_the_observer_ignores_unknown_events_and_never_raises_into_the_worker(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    class BrokenTracer(trace.NoOpTracer):
        def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
            raise RuntimeError("exporter bug")

    class BrokenTracers(trace.NoOpTracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
            return BrokenTracer()

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    observer = OtelObserver(tracer_provider=BrokenTracers(), meter_provider=meters)
    telemetry = Telemetry(observer, InMemorySpanExporter(), reader, meters)
    observer("a later kind of event")  # type: ignore[arg-type]  # what a newer sweepq may send
    app.observe(observer)

    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue_many([sweepq.JobSpec(noop) for _ in range(3)])
    with caplog.at_level(logging.DEBUG, logger="sweepq"):
        assert await drain(app) == {"completed": 3}
    app.unobserve(observer)
    failures = [r for r in caplog.records if r.name == "sweepq.contrib.otel"]
    errors = [r.getMessage() for r in failures if r.levelno == logging.ERROR]
    assert len(errors) == 2  # the first failure per kind of event; later ones at DEBUG
    assert "failed on JobStarted" in errors[0]
    assert "failed on JobFinished" in errors[1]
    assert len(failures) == 6
    # The metrics do not depend on the spans.
    assert numbers(telemetry.metrics()["sweepq.job.executions"]) == {
        attrs(task="noop", queue="default", outcome="completed"): 3
    }
    assert not [r for r in caplog.records if r.name == "sweepq.events"]  # nothing reached emit


# the queue sampler ------------------------------------------------------------------------------


async def seed_queues(app: sweepq.App) -> None:
    """mail: 2 due (one keyed), 1 scheduled, 1 completed; reports: 1 running, 1 due 90 s ago."""

    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    jobs = f"{ident(app.schema)}.jobs"
    await app.enqueue(noop, queue="mail")
    await app.enqueue(noop, queue="mail", concurrency_key="smtp")
    await app.enqueue(noop, queue="mail", delay=timedelta(hours=1))
    done = await app.enqueue(noop, queue="mail")
    running = await app.enqueue(noop, queue="reports")
    late = await app.enqueue(noop, queue="reports")
    await app.pool.execute(
        f"UPDATE {jobs} SET state = 'completed', finished_at = now() WHERE id = $1", done.job_id
    )
    await app.pool.execute(
        f"UPDATE {jobs} SET state = 'running', worker_id = 'w', attempt = 1, "
        "lease_expires_at = now() + interval '1 minute' WHERE id = $1",
        running.job_id,
    )
    await app.pool.execute(
        f"UPDATE {jobs} SET run_at = now() - interval '90 seconds' WHERE id = $1", late.job_id
    )


async def test_the_queue_sampler_reports_due_scheduled_running_and_the_oldest_age_per_queue(
    app: sweepq.App,
) -> None:
    await seed_queues(app)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    sampler = QueueSampler(app, meter_provider=meters)

    mail, reports = await sampler.sample()
    assert (mail.queue, mail.due, mail.scheduled, mail.running) == ("mail", 2, 1, 0)
    assert (reports.queue, reports.due, reports.scheduled, reports.running) == (
        "reports",
        1,
        0,
        1,
    )
    assert 90 <= reports.oldest_due_age < 120
    assert 0 <= mail.oldest_due_age < 30

    telemetry = Telemetry(
        OtelObserver(meter_provider=meters), InMemorySpanExporter(), reader, meters
    )
    found = telemetry.metrics()
    assert numbers(found["sweepq.queue.depth"]) == {
        attrs(queue="mail"): 2,
        attrs(queue="reports"): 1,
    }
    assert numbers(found["sweepq.queue.scheduled"]) == {
        attrs(queue="mail"): 1,
        attrs(queue="reports"): 0,
    }
    assert numbers(found["sweepq.queue.running"]) == {
        attrs(queue="mail"): 0,
        attrs(queue="reports"): 1,
    }
    oldest = numbers(found["sweepq.queue.oldest_age"])
    assert 90 <= oldest[attrs(queue="reports")] < 120
    assert {found[n].unit for n in ("sweepq.queue.depth", "sweepq.queue.running")} == {"{job}"}
    assert found["sweepq.queue.oldest_age"].unit == "s"

    # A queue that empties is reported as zeros, not dropped.
    await app.pool.execute(f"DELETE FROM {ident(app.schema)}.jobs WHERE queue = 'mail'")
    mail, _ = await sampler.sample()
    assert mail == QueueSample("mail", 0, 0, 0, 0.0)
    assert numbers(telemetry.metrics()["sweepq.queue.depth"])[attrs(queue="mail")] == 0
    meters.shutdown()


async def test_the_queue_sampler_reports_the_busiest_keys_with_their_rate_and_oldest_wait(
    app: sweepq.App,
) -> None:
    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    await app.set_rate_limit("partner", 1, per=timedelta(hours=1))
    for _ in range(3):
        await app.enqueue(noop, concurrency_key="partner")
    await app.enqueue(noop, concurrency_key="plain")
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET run_at = now() - interval '90 seconds'"
    )
    await app.queries.concurrency_wakeup_apply(app.pool, 100)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    sampler = QueueSampler(app, meter_provider=meters)
    await sampler.sample()
    found = Telemetry(
        OtelObserver(meter_provider=meters), InMemorySpanExporter(), reader, meters
    ).metrics()
    key = "sweepq.concurrency_key"
    assert numbers(found["sweepq.key.depth"]) == {
        frozenset({(key, "partner")}): 3,
        frozenset({(key, "plain")}): 1,
    }
    assert numbers(found["sweepq.key.running"]) == {
        frozenset({(key, "partner")}): 0,
        frozenset({(key, "plain")}): 0,
    }
    assert 90 <= numbers(found["sweepq.key.oldest_age"])[frozenset({(key, "partner")})] < 120
    # Only a key with a rate reports its use.
    assert numbers(found["sweepq.key.rate_used"]) == {frozenset({(key, "partner")}): 0}
    meters.shutdown()


async def test_the_queue_sample_reads_the_indexes_of_live_jobs_never_the_finished_ones(
    app: sweepq.App,
) -> None:
    jobs = f"{ident(app.schema)}.jobs"
    await app.pool.execute(
        f"INSERT INTO {jobs} (task, queue, state, max_attempts, finished_at) "
        "SELECT 't', 'q' || (g % 3), 'completed', 1, now() FROM generate_series(1, 20000) g"
    )
    await seed_queues(app)
    await app.pool.execute(f"VACUUM ANALYZE {jobs}")
    sampler = QueueSampler(app, meter_provider=MeterProvider())
    (plan,) = msgspec.json.decode(
        await app.pool.fetchval("EXPLAIN (FORMAT JSON) " + app.queries.sql["top_job_live"])
    )

    def nodes(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    scans = [n for n in nodes(plan["Plan"]) if n["Node Type"].endswith("Scan")]
    # Bitmap scans are index scans too: the planner picks them when VACUUM could not mark the
    # pages all-visible (another session's open snapshot holds the horizon back).
    assert {n["Node Type"] for n in scans} <= {
        "Subquery Scan",
        "Index Scan",
        "Index Only Scan",
        "Bitmap Index Scan",
        "Bitmap Heap Scan",
    }
    # Keyed available jobs are in two partial indexes that hold their queue and run_at (the
    # claim's, and the ordered keys' by id): the planner may read either.
    read = {n["Index Name"] for n in scans if "Index Name" in n}
    assert read - {"jobs_claim_keyed", "jobs_key_order"} == {
        "jobs_claim_unkeyed",
        "jobs_running_lease",
    }
    assert read & {"jobs_claim_keyed", "jobs_key_order"}
    samples = await sampler.sample()
    assert [(s.queue, s.due, s.running) for s in samples] == [("mail", 2, 0), ("reports", 1, 1)]


async def _at_least(count: int, wanted: int) -> bool:
    return count >= wanted


async def test_the_queue_sampler_runs_until_stopped_and_survives_a_failed_read(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(sweepq.ConfigurationError, match="interval must be > 0"):
        QueueSampler(app, interval=0)
    broken = sweepq.App(app.dsn, schema=f"missing_{uuid.uuid4().hex[:8]}")
    sampler = QueueSampler(broken, interval=0.01, meter_provider=MeterProvider())
    rounds = 0
    read = sampler.sample

    async def counted() -> list[QueueSample]:
        nonlocal rounds
        rounds += 1
        return await read()

    sampler.sample = counted  # type: ignore[method-assign]  # counts the rounds run() makes
    with caplog.at_level(logging.INFO, logger="sweepq.contrib.otel"):
        async with broken, anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            await wait_until(lambda: _at_least(rounds, 5), what="five failed rounds")
            sampler.stop()
    warnings = [r for r in caplog.records if r.name == "sweepq.contrib.otel"]
    assert len(warnings) == 1, warnings  # said once, not once a round
    assert "cannot read the queues" in warnings[0].getMessage()


# docs -------------------------------------------------------------------------------------------


def test_every_public_name_of_the_otel_module_is_on_the_api_page() -> None:
    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"^:::\s*([\w.]+)\s*$", page, re.MULTILINE))
    assert {f"sweepq.contrib.otel.{name}" for name in otel.__all__} <= shown


def test_the_parent_context_is_a_new_trace_or_the_enqueuers() -> None:
    observer = OtelObserver(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    assert trace.get_current_span(observer._parent_context(None)) is trace.INVALID_SPAN
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    parent = trace.get_current_span(observer._parent_context(traceparent)).get_span_context()
    assert (parent.trace_id, parent.span_id) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
    )
