"""The observer: a span per execution and metrics from the events (`OtelObserver`,
`instrument`)."""

from __future__ import annotations

import logging
import time

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sweepq import __version__
from sweepq.core.app import App
from sweepq.events import (
    Event,
    JobClaimed,
    JobFinished,
    JobStarted,
    SweepLinkCommitted,
    SweepRunEnded,
    SweepThrottled,
)

logger = logging.getLogger("sweepq.contrib.otel")

SCOPE = "sweepq"
"""The instrumentation scope of every span and instrument."""

# Instruments (OpenTelemetry names; Prometheus writes `sweepq_job_executions_total`, ...).
JOB_EXECUTIONS = "sweepq.job.executions"
JOB_DURATION = "sweepq.job.duration"
JOB_WAIT_TIME = "sweepq.job.wait_time"
SWEEP_ITEMS_ENQUEUED = "sweepq.sweep.items.enqueued"
SWEEP_ITEMS_ENDED = "sweepq.sweep.items.ended"
SWEEP_RUNS = "sweepq.sweep.runs"
SWEEP_THROTTLE_WAITS = "sweepq.sweep.throttle.waits"
SWEEP_THROTTLE_SECONDS = "sweepq.sweep.throttle.duration"

# Attributes. The queue is the messaging destination, on spans and metrics alike.
QUEUE = "messaging.destination.name"
TASK = "sweepq.task"
OUTCOME = "sweepq.outcome"
SWEEP = "sweepq.sweep.name"
SWEEP_STATE = "sweepq.sweep.state"
ITEM_STATE = "sweepq.item.state"

# Seconds, from a fast handler's few milliseconds to an hour-long export (OpenTelemetry's
# default buckets are for milliseconds, and would put every job in the first few).
SECONDS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0,
)  # fmt: skip

# Spans whose end was never heard (an execution that lost its lease ends without an outcome)
# are ended, oldest first, beyond this many open ones: the map cannot grow without bound.
_OPEN_SPANS_LIMIT = 10_000
_ERROR_OUTCOMES = frozenset({"failed", "retry"})
_ROOT = Context()  # a job's span never adopts whatever span happens to be current in the worker
_PROPAGATOR = TraceContextTextMapPropagator()

SpanKey = tuple[int, int, str]  # job id, attempt, worker id: one execution
Attributes = dict[str, str]


class OtelObserver:
    """An observer (`app.observe(...)`) that reports every execution as a span and as metrics.

    A span per execution, from `JobStarted` to `JobFinished`, named `sweepq.job <task>`, of kind
    CONSUMER, with the attributes `messaging.system` (`sweepq`), `messaging.operation.type`
    (`process`), `messaging.destination.name` (the queue), `messaging.message.id` (the job id),
    `sweepq.task`, `sweepq.attempt`, and at its end `sweepq.outcome` and, for a failed job,
    `sweepq.failure_reason`. Its status is ERROR, with the error line, for `failed` and `retry`.

    Metrics: executions per task, queue and outcome; execution duration per task; the wait from
    due to claim per queue; sweep items enqueued, sweep runs ended and their items by state.

    It does per event only the span's and the instruments' own work (attribute sets are built
    once per task, queue and outcome), ignores events it does not know, and never raises into
    the worker: a failure is logged (the first per kind of event as an ERROR, later ones at
    DEBUG).

    Args:
        tracer_provider: where spans go; the global one (`opentelemetry.trace`) by default.
        meter_provider: where metrics go; the global one (`opentelemetry.metrics`) by default.

    Example:
        >>> app.observe(OtelObserver())  # the providers your program set globally
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        tracers = tracer_provider or trace.get_tracer_provider()
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE, __version__)
        self._tracer = tracers.get_tracer(SCOPE, __version__)
        self._executions = meter.create_counter(
            JOB_EXECUTIONS, unit="{execution}", description="Executions finished."
        )
        self._duration = meter.create_histogram(
            JOB_DURATION,
            unit="s",
            description="Executions' time from claim to end.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._wait_time = meter.create_histogram(
            JOB_WAIT_TIME,
            unit="s",
            description="Jobs' time from due to claim.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._items_enqueued = meter.create_counter(
            SWEEP_ITEMS_ENQUEUED, unit="{item}", description="Sweep items (leaves) enqueued."
        )
        self._items_ended = meter.create_counter(
            SWEEP_ITEMS_ENDED, unit="{item}", description="Items of ended sweep runs."
        )
        self._runs = meter.create_counter(SWEEP_RUNS, unit="{run}", description="Sweep runs ended.")
        self._throttle_waits = meter.create_counter(
            SWEEP_THROTTLE_WAITS, unit="{wait}",
            description="Links of sweep runs that waited on a throttle check.",
        )  # fmt: skip
        self._throttle_seconds = meter.create_counter(
            SWEEP_THROTTLE_SECONDS, unit="s",
            description="Seconds links of sweep runs waited on throttle checks.",
        )  # fmt: skip
        self._spans: dict[SpanKey, Span] = {}
        self._names: dict[str, str] = {}
        self._by_task: dict[str, Attributes] = {}
        self._by_queue: dict[str, Attributes] = {}
        self._by_execution: dict[tuple[str, str, str], Attributes] = {}
        self._failed_on: set[str] = set()

    def __call__(self, event: Event) -> None:
        try:
            match event:
                case JobClaimed():
                    self._claimed(event)
                case JobStarted():
                    self._started(event)
                case JobFinished():
                    self._finished(event)
                case SweepLinkCommitted():
                    self._link_committed(event)
                case SweepRunEnded():
                    self._run_ended(event)
                case SweepThrottled():
                    self._throttled(event)
                case _:
                    return  # an event of a later sweepq: not ours to report
        except Exception:
            self._report_failure(event)

    # jobs -------------------------------------------------------------------------------------

    def _claimed(self, event: JobClaimed) -> None:
        attributes = self._by_queue.get(event.queue)
        if attributes is None:
            attributes = self._by_queue[event.queue] = {QUEUE: event.queue}
        self._wait_time.record(event.waited, attributes)

    def _started(self, event: JobStarted) -> None:
        spans = self._spans
        if len(spans) >= _OPEN_SPANS_LIMIT:
            self._abandon(next(iter(spans)))
        key = (event.job_id, event.attempt, event.worker_id)
        if key in spans:
            self._abandon(key)
        spans[key] = self._start_span(event, None)

    def _start_span(self, event: JobStarted | JobFinished, start_time: int | None) -> Span:
        name = self._names.get(event.task)
        if name is None:
            name = self._names[event.task] = f"sweepq.job {event.task}"
        parent = event.trace_context if isinstance(event, JobStarted) else None
        return self._tracer.start_span(
            name,
            self._parent_context(parent),
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "sweepq",
                "messaging.operation.type": "process",
                QUEUE: event.queue,
                "messaging.message.id": str(event.job_id),
                TASK: event.task,
                "sweepq.attempt": event.attempt,
            },
            start_time=start_time,
        )

    def _parent_context(self, traceparent: str | None) -> Context:
        """The context a job's span starts in: the trace of a W3C `traceparent` (the
        enqueuer's), else none, so that the span begins a trace of its own."""
        if traceparent is None:
            return _ROOT
        return _PROPAGATOR.extract({"traceparent": traceparent}, context=_ROOT)

    def _finished(self, event: JobFinished) -> None:
        # The metrics first: a tracer that fails does not cost them.
        key = (event.task, event.queue, event.outcome)
        attributes = self._by_execution.get(key)
        if attributes is None:
            attributes = self._by_execution[key] = {
                TASK: event.task,
                QUEUE: event.queue,
                OUTCOME: event.outcome,
            }
        self._executions.add(1, attributes)
        by_task = self._by_task.get(event.task)
        if by_task is None:
            by_task = self._by_task[event.task] = {TASK: event.task}
        self._duration.record(event.duration, by_task)
        span = self._spans.pop((event.job_id, event.attempt, event.worker_id), None)
        if span is None:
            # No JobStarted: its handler never ran (none is registered for its task), or this
            # observer was added while it ran. The span still says how it ended.
            span = self._start_span(event, time.time_ns() - int(event.duration * 1e9))
        span.set_attribute(OUTCOME, event.outcome)
        if event.failure_reason is not None:
            span.set_attribute("sweepq.failure_reason", event.failure_reason)
        if event.outcome in _ERROR_OUTCOMES:
            span.set_status(StatusCode.ERROR, event.error)
        span.end()

    def _abandon(self, key: SpanKey) -> None:
        span = self._spans.pop(key)
        span.set_status(StatusCode.ERROR, "the end of this execution was not heard")
        span.end()

    # sweeps -----------------------------------------------------------------------------------

    def _link_committed(self, event: SweepLinkCommitted) -> None:
        self._items_enqueued.add(event.items, {SWEEP: event.sweep})

    def _run_ended(self, event: SweepRunEnded) -> None:
        self._runs.add(1, {SWEEP: event.sweep, SWEEP_STATE: event.state})
        for state, items in (
            ("completed", event.completed),
            ("failed", event.failed),
            ("cancelled", event.cancelled),
        ):
            self._items_ended.add(items, {SWEEP: event.sweep, ITEM_STATE: state})

    def _throttled(self, event: SweepThrottled) -> None:
        self._throttle_waits.add(1, {SWEEP: event.sweep})
        self._throttle_seconds.add(event.seconds, {SWEEP: event.sweep})

    def _report_failure(self, event: Event) -> None:
        kind = type(event).__name__
        if kind in self._failed_on:
            logger.debug("the OpenTelemetry observer failed on %s", kind, exc_info=True)
            return
        self._failed_on.add(kind)
        logger.exception(
            "the OpenTelemetry observer failed on %s (later failures on it are logged at "
            "DEBUG); the job is not affected",
            kind,
        )


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the span current here, or None outside any recorded span."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def instrument(
    app: App,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> OtelObserver:
    """Trace and measure `app`: observe it with an `OtelObserver`, and carry the trace of every
    enqueue into its job (`app.trace_context_source`), so that the job's span continues the
    trace of the request or job that enqueued it. Returns the observer.

    Example:
        >>> instrument(app)  # the providers your program set globally
    """
    observer = OtelObserver(tracer_provider=tracer_provider, meter_provider=meter_provider)
    app.observe(observer)
    app.trace_context_source = current_traceparent
    return observer
