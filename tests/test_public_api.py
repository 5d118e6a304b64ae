"""The public names are the contract: `sweepq.__all__` is sorted and every name in it exists."""

from __future__ import annotations

import sweepq

# Names the design promises; more may be added, none of these may go.
PROMISED = {
    "App",
    "Cancel",
    "Context",
    "Enqueued",
    "Job",
    "JobId",
    "JobSpec",
    "JobState",
    "RetryAfter",
    "Snooze",
    "SweepqError",
    "Worker",
}


def test_all_is_sorted_and_has_no_duplicates() -> None:
    assert list(sweepq.__all__) == sorted(sweepq.__all__)
    assert len(set(sweepq.__all__)) == len(sweepq.__all__)


def test_every_name_in_all_resolves() -> None:
    missing = [name for name in sweepq.__all__ if not hasattr(sweepq, name)]
    assert missing == []


def test_the_promised_names_are_public() -> None:
    assert set(sweepq.__all__) >= PROMISED


def test_every_public_error_derives_from_the_root_error() -> None:
    errors = [
        value
        for value in (getattr(sweepq, name) for name in sweepq.__all__)
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value not in (sweepq.Snooze, sweepq.RetryAfter, sweepq.Cancel)
    ]
    assert errors
    for error in errors:
        assert issubclass(error, sweepq.SweepqError), error


def test_handler_outcomes_are_not_errors_of_sweepq() -> None:
    for outcome in (sweepq.Snooze, sweepq.RetryAfter, sweepq.Cancel):
        assert issubclass(outcome, Exception)
        assert not issubclass(outcome, sweepq.SweepqError)
