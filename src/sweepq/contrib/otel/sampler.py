"""The queue sampler: each queue's live jobs, and the busiest concurrency keys, read from the
database and reported as gauges."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import anyio
import msgspec
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from sweepq import __version__
from sweepq.core.admin import KeyLoad, QueueLive, top_concurrency_key_busiest, top_job_live
from sweepq.core.app import App
from sweepq.core.errors import ConfigurationError

from .observer import QUEUE, SCOPE, Attributes

logger = logging.getLogger("sweepq.contrib.otel")

QUEUE_DEPTH = "sweepq.queue.depth"
QUEUE_SCHEDULED = "sweepq.queue.scheduled"
QUEUE_RUNNING = "sweepq.queue.running"
QUEUE_OLDEST_AGE = "sweepq.queue.oldest_age"
KEY_DUE = "sweepq.key.depth"
KEY_RUNNING = "sweepq.key.running"
KEY_OLDEST_AGE = "sweepq.key.oldest_age"
KEY_RATE_USED = "sweepq.key.rate_used"
KEY = "sweepq.concurrency_key"
KEYS = 20  # the busiest keys reported each round: a bounded number of series


class QueueSample(msgspec.Struct, frozen=True):
    """One queue's live jobs at one instant of database time.

    Attributes:
        queue: the queue.
        due: jobs available and due (its depth).
        scheduled: jobs available and due later (a delay, a backoff, a snooze).
        running: jobs running.
        oldest_due_age: seconds since the oldest due job became due, 0 with none due.
    """

    queue: str
    due: int
    scheduled: int
    running: int
    oldest_due_age: float


def _sample(live: QueueLive) -> QueueSample:
    due_for = live.oldest_due_seconds
    return QueueSample(live.queue, live.due, live.scheduled, live.running, due_for or 0.0)


class QueueSampler:
    """Reads every queue's live jobs from the database every `interval` seconds, and reports
    them through observable gauges: `sweepq.queue.depth` (due), `sweepq.queue.scheduled`,
    `sweepq.queue.running` and `sweepq.queue.oldest_age`, per queue; and for the 20 concurrency
    keys with the most due jobs, `sweepq.key.depth`, `sweepq.key.running`,
    `sweepq.key.oldest_age` and, for a key with a rate, `sweepq.key.rate_used` (starts in the
    current window), with the attribute `sweepq.concurrency_key`.

    Two statements a round, the core's `top_job_live` and `top_concurrency_key_busiest` (what
    `sweepq top` reads too), over the indexes of available and running jobs only (their cost
    follows the backlog, never the history). A queue seen once is reported (as zeros) after it
    empties; a key is reported while it is among the busiest (a bounded number of series). A
    failed read is logged once until a read succeeds, and leaves the gauges empty meanwhile
    rather than showing stale values. The figures are the schema's, not a worker's:
    with several processes sampling, aggregate them with `max`, not `sum`.

    Args:
        app: the app whose schema to read; it must be open while `run()` runs.
        interval: seconds between reads.
        meter_provider: where the gauges go; the global one (`opentelemetry.metrics`) by
            default.

    Raises:
        ConfigurationError: `interval` is not a positive number of seconds.

    Example:
        >>> sampler = QueueSampler(app, interval=15.0)
        >>> async with anyio.create_task_group() as tg:
        ...     tg.start_soon(sampler.run)
        ...     await worker.run()
        ...     sampler.stop()
    """

    def __init__(
        self,
        app: App,
        interval: float = 15.0,
        *,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        if not interval > 0:
            raise ConfigurationError(f"interval must be > 0 seconds, got {interval!r}")
        self.app = app
        self.interval = interval
        self._latest: tuple[QueueSample, ...] = ()
        self._queues: set[str] = set()
        self._by_queue: dict[str, Attributes] = {}
        self._failing = False
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE, __version__)
        for name, unit, description, read in (
            (QUEUE_DEPTH, "{job}", "Jobs available and due.", _due),
            (QUEUE_SCHEDULED, "{job}", "Jobs available and due later.", _scheduled),
            (QUEUE_RUNNING, "{job}", "Jobs running.", _running),
            (QUEUE_OLDEST_AGE, "s", "Time since the oldest due job became due.", _oldest),
        ):
            meter.create_observable_gauge(
                name, [self._gauge(read)], unit=unit, description=description
            )
        self._keys: tuple[KeyLoad, ...] = ()
        for name, unit, description, key_read in (
            (KEY_DUE, "{job}", "Jobs of the key available and due.", _key_due),
            (KEY_RUNNING, "{job}", "Jobs of the key running.", _key_running),
            (KEY_OLDEST_AGE, "s", "Time since the key's oldest due job became due.", _key_age),
            (KEY_RATE_USED, "{job}", "Starts of the key in its rate's window.", _key_rate),
        ):
            meter.create_observable_gauge(
                name, [self._key_gauge(key_read)], unit=unit, description=description
            )

    async def sample(self) -> list[QueueSample]:
        """Read the queues now, and report what was read until the next read.

        Returns:
            A sample per queue, by name: those with live jobs, and those seen before (zeros).
        """
        found = [_sample(q) for q in await top_job_live(self.app.queries, self.app.pool)]
        self._keys = tuple(
            await top_concurrency_key_busiest(self.app.queries, self.app.pool, limit=KEYS)
        )
        seen = {s.queue for s in found}
        found += [QueueSample(q, 0, 0, 0, 0.0) for q in self._queues - seen]
        found.sort(key=_queue_of)
        self._queues |= seen
        self._latest = tuple(found)
        return found

    async def run(self) -> None:
        """Read now and every `interval` seconds, until `stop()` is called or the task running
        it is cancelled. A failure to read is logged, never raised."""
        with anyio.CancelScope() as self._scope:
            while not self._stopped:
                await self._sample_logged()
                await anyio.sleep(self.interval)

    def stop(self) -> None:
        """End `run()` (before it begins, if it has not yet)."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def _sample_logged(self) -> None:
        try:
            await self.sample()
        except Exception as exc:
            self._latest = self._keys = ()
            if not self._failing:
                logger.warning(
                    "the queue sampler cannot read the queues (%s: %s); their gauges are empty "
                    "until it can",
                    type(exc).__name__,
                    exc,
                )
            self._failing = True
        else:
            if self._failing:
                logger.info("the queue sampler reads the queues again")
            self._failing = False

    def _gauge(
        self, read: Callable[[QueueSample], float]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        # Called by the metric reader (a Prometheus scrape runs it in the server's thread): it
        # only reads `_latest`, which a read replaces whole.
        def observe(options: CallbackOptions) -> Sequence[Observation]:
            return [Observation(read(s), self._attributes(s.queue)) for s in self._latest]

        return observe

    def _key_gauge(
        self, read: Callable[[KeyLoad], float | None]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Sequence[Observation]:
            return [
                Observation(value, {KEY: k.key})
                for k in self._keys
                if (value := read(k)) is not None
            ]

        return observe

    def _attributes(self, queue: str) -> Attributes:
        attributes = self._by_queue.get(queue)
        if attributes is None:
            attributes = self._by_queue[queue] = {QUEUE: queue}
        return attributes


def _queue_of(sample: QueueSample) -> str:
    return sample.queue


def _due(sample: QueueSample) -> float:
    return sample.due


def _scheduled(sample: QueueSample) -> float:
    return sample.scheduled


def _running(sample: QueueSample) -> float:
    return sample.running


def _oldest(sample: QueueSample) -> float:
    return sample.oldest_due_age


def _key_due(k: KeyLoad) -> float:
    return k.due


def _key_running(k: KeyLoad) -> float:
    return k.running_jobs


def _key_age(k: KeyLoad) -> float:
    return k.oldest_due_seconds or 0.0


def _key_rate(k: KeyLoad) -> float | None:
    return None if k.rate_count is None else k.rate_used
