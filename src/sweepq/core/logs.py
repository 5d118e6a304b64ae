"""What the worker logs about executions, and a JSON formatter for log collectors.

Every record of sweepq's loggers (`sweepq.*`) carries its facts as fields passed through
`extra=` (job_id, task, attempt, outcome, ...): `JsonFormatter` writes them out, one JSON object
per line, and a text format shows the message alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from .decision import Decision, ExecutionOutcome, error_line
from .rows import Rescued

logger = logging.getLogger("sweepq.worker")

# The attributes every LogRecord has: anything else on a record came through `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the record's
    `extra=` fields, and the traceback of `exc_info` if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry, enc_hook=str).decode()


def log_execution(
    *,
    job_id: int,
    task: str,
    queue: str,
    attempt: int,
    max_attempts: int,
    decision: Decision,
    outcome: ExecutionOutcome,
    duration: float,
    raised: BaseException | None = None,
) -> None:
    """Log how one execution ended: a WARNING for a failure that will be retried, an ERROR for
    one that fails the job for good (with `raised` as its `exc_info`, so that handlers which
    report exceptions, Sentry's among them, get the exception and its traceback), INFO when a
    handler cancels its job or the worker hands it back, DEBUG for the rest."""
    level = {
        "retry": logging.WARNING,
        "failed": logging.ERROR,
        "cancel": logging.INFO,
        "handed_back": logging.INFO,
    }.get(outcome, logging.DEBUG)
    if not logger.isEnabledFor(level):
        return
    line = error_line(decision.error)
    fields: dict[str, Any] = {
        "job_id": job_id,
        "task": task,
        "queue": queue,
        "attempt": attempt,
        "max_attempts": max_attempts,
        "outcome": outcome,
        "duration": round(duration, 6),
    }
    tried = f"attempt {attempt}/{max_attempts}"
    if outcome == "retry":
        next_run = datetime.now(UTC) + timedelta(seconds=decision.delay)
        fields |= {"next_run_at": next_run.isoformat(), "error": line}
        message = (
            f"job {job_id} ({task}) failed, {tried}; retrying in {decision.delay:.1f}s "
            f"(at {next_run:%H:%M:%S} UTC): {line}"
        )
    elif outcome == "failed":
        fields |= {"failure_reason": decision.failure_reason, "error": line}
        message = f"job {job_id} ({task}) failed for good ({decision.failure_reason}, {tried}): "
        message += line
        if decision.error_kind == "exception" and raised is not None and raised.__traceback__:
            # What the handler raised (not a Snooze or RetryAfter past the deadline).
            logger.log(level, message, extra=fields, exc_info=raised)
            return
    elif outcome == "snooze":
        fields["next_run_at"] = (datetime.now(UTC) + timedelta(seconds=decision.delay)).isoformat()
        message = f"job {job_id} ({task}) snoozed for {decision.delay:.1f}s" + (
            f": {decision.error}" if decision.error else ""
        )
    elif outcome in ("cancel", "handed_back"):
        fields["error"] = line
        verb = "cancelled" if outcome == "cancel" else "handed back"
        message = f"job {job_id} ({task}) {verb}: {line}"
    else:
        message = f"job {job_id} ({task}) {outcome} in {duration:.3f}s, {tried}"
    logger.log(level, message, extra=fields)


def log_rescued(rescued: Sequence[Rescued]) -> None:
    """Log the jobs a rescue took back, per worker: a WARNING naming the worker, whether it
    died, and the jobs made available again or failed."""
    by_worker: dict[str, list[Rescued]] = {}
    for job in rescued:
        by_worker.setdefault(job.worker_id, []).append(job)
    for worker_id, jobs in by_worker.items():
        died = jobs[0].died
        back = [j.id for j in jobs if j.state == "available"]
        failed = [f"{j.id} ({j.failure_reason})" for j in jobs if j.state != "available"]
        why = (
            "it died (its lease lapsed and none of its connections is open)"
            if died
            else "its lease lapsed (the worker is still connected: blocked, or cut off for "
            "longer than its lease)"
        )
        parts = []
        if back:
            parts.append(f"job(s) {', '.join(map(str, back))} are available again")
        if failed:
            parts.append(f"job(s) {', '.join(failed)} failed for good")
        logger.warning(
            "rescued %d job(s) from worker %s: %s; %s",
            len(jobs), worker_id, why, "; ".join(parts),
            extra={"worker_id": worker_id, "died": died, "rescued": [j.id for j in jobs],
                   "failed": [j.id for j in jobs if j.state != "available"]},
        )  # fmt: skip
