"""sweepq's job options for Django tasks: checked where they are given, nested, merged by level."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import sweepq
import sweepq.contrib.django
from sweepq.contrib.django.options import (
    ALLOWED,
    check_job_options,
    current_job_options,
    job_defaults,
    job_options,
    merged,
    task_job_options,
)


def test_job_options_are_checked_and_converted_for_the_sql_function() -> None:
    checked = check_job_options(
        {"deadline": timedelta(minutes=2), "timeout": 30, "concurrency_key": "smtp", "group": None},
        "here",
    )
    assert checked == {"deadline": 120.0, "timeout": 30.0, "concurrency_key": "smtp", "group": None}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 5}, r"^here: priority is the Django task's to set, with @task\(priority"),
        ({"run_at": datetime.now(UTC)}, r"run_at is the Django task's to set, with task.using\("),
        ({"delay": 5}, r"delay is the Django task's to set, with task.using\(run_after"),
        ({"max_attempts": 0}, r"^here: max_attempts must be an int in 1\.\.1000000"),
        ({"deadline": -1}, "^here: deadline must be a timedelta or a finite number of seconds"),
        ({"idempotency_key": ""}, "^here: idempotency_key must be a non-empty string"),
        ({"concurrency_key": "a\x00b"}, "cannot hold NUL"),
    ],
)
def test_a_job_option_that_cannot_be_honoured_is_refused_where_it_is_given(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match=message):
        check_job_options(options, "here")


def test_job_options_blocks_nest_and_end_with_their_block() -> None:
    assert current_job_options() == {}
    with job_options(max_attempts=2, group="outer"):
        with job_options(group="inner", idempotency_key="k"):
            assert current_job_options() == {
                "max_attempts": 2,
                "group": "inner",
                "idempotency_key": "k",
            }
        assert current_job_options() == {"max_attempts": 2, "group": "outer"}
    assert current_job_options() == {}


def test_a_bad_option_fails_at_the_job_options_call_before_its_block() -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match=r"^job_options\(\): unknown job option"):
        job_options(retries=3)


def test_job_defaults_mark_the_function_and_merge_by_level() -> None:
    @job_defaults(max_attempts=10, concurrency_key="stripe")
    def charge(order_id: int) -> None: ...

    assert task_job_options(charge) == {"max_attempts": 10, "concurrency_key": "stripe"}
    backend = {"max_attempts": 3, "deadline": 60.0}
    with job_options(concurrency_key="stripe:eu", identity_key="order:1", unique_for=600):
        options = merged(backend, task_job_options(charge), current_job_options())
    assert options == {
        "max_attempts": 10, "deadline": 60.0, "concurrency_key": "stripe:eu",
        "identity_key": "order:1", "unique_for": 600.0,
    }  # fmt: skip
    with pytest.raises(sweepq.InvalidJobOptionError, match="2,048 bytes"):
        merged({"idempotency_scope": "\N{GRINNING FACE}" * 512, "idempotency_key": "k"})


def test_job_defaults_above_the_task_decorator_is_refused() -> None:
    class FrozenTask:  # like django.tasks.Task: a frozen dataclass with slots
        __slots__ = ()

        def __call__(self) -> None: ...

    with pytest.raises(TypeError, match="goes under @task, on the function itself"):
        job_defaults(max_attempts=2)(FrozenTask())


def test_the_guide_and_the_docstring_name_every_option_a_django_task_takes() -> None:
    """The lists written by hand stay whole when an option is added to the declaration."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "django.md").read_text()
    prose = " ".join((job_options.__doc__ or "").split())
    for name in ALLOWED:
        assert f"`{name}`" in guide, f"docs/guides/django.md does not list `{name}`"
        assert f"`{name}`" in prose, f"job_options' docstring does not list `{name}`"
