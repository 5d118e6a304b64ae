"""The worker's settings on the command line: each one's checks and bounds, and the banner that
says where each came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runner import NO_DATABASE, PLAIN_APP, app_module, banner, invoke_here, one_line_error


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--grace-seconds", "nan"], "--grace-seconds 'nan' is not valid: expected a finite number "
         "of seconds, 0 or more, such as 30"),
        (["--grace-seconds", "inf"], "--grace-seconds 'inf' is not valid: expected a finite"),
        (["--lease-seconds", "inf"], "--lease-seconds 'inf' is not valid: expected a finite number "
         "of seconds above 0, such as 30"),
        (["--lease-seconds", "-inf"], "--lease-seconds '-inf' is not valid: expected a finite"),
        (["--lease-seconds", "nan"], "--lease-seconds 'nan' is not valid: expected a finite"),
        (["--poll-seconds", "nan"], "--poll-seconds 'nan' is not valid: expected a finite number "
         "of seconds above 0"),
        (["--poll-seconds", "0"], "--poll-seconds '0' is not valid: expected a finite number"),
        (["--prune-every", "0s"], "--prune-every '0s' is not valid: expected a duration above 0 "
         "such as 30m, 1h or 1d, or 'never' to not prune"),
        (["--prune-every", "0.0m"], "--prune-every '0.0m' is not valid: expected a duration abov"),
    ],
)  # fmt: skip
def test_a_worker_setting_that_is_not_a_finite_positive_number_is_refused_before_it_starts(
    worker_app: str, args: list[str], needle: str
) -> None:
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE, *args])
    assert needle in one_line_error(result)
    assert result.stdout == ""  # no banner: refused before the worker was built


@pytest.mark.parametrize(
    ("args", "env", "named", "value"),
    [
        (["--lease-seconds", "1e-9"], {}, "--lease-seconds", "1e-09"),
        (["--lease-seconds", "86401"], {}, "--lease-seconds", "86401"),
        ([], {"SWEEPQ_LEASE_SECONDS": "0.1"}, "SWEEPQ_LEASE_SECONDS", "0.1"),
        (["--poll-seconds", "1e-9"], {}, "--poll-seconds", "1e-09"),
        (["--grace-seconds", "90000"], {}, "--grace-seconds", "90000"),
        (["--prune-every", "0.5s"], {}, "--prune-every", ""),
    ],
)
def test_a_worker_setting_beyond_the_workers_bounds_is_refused_naming_its_option(
    worker_app: str, args: list[str], env: dict[str, str], named: str, value: str
) -> None:
    # The bounds are the Worker's own; the command line names where the value was given.
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE, *args], env)
    line = one_line_error(result)
    assert line.startswith(f"error: {named} must be "), line
    assert value in line
    assert result.stdout == ""  # refused before the banner, so before anything connects


def test_the_banner_says_whether_the_database_came_from_dsn_the_app_or_the_environment(
    app_dir: Path,
) -> None:
    own = "postgresql://own@127.0.0.1:1/own"
    spec = app_module(app_dir, f"import sweepq\napp = sweepq.App({own!r})\n") + ":app"
    env = {"SWEEPQ_DSN": NO_DATABASE, "SWEEPQ_SCHEMA": "sweepq"}
    assert banner(spec, env=env)["database"] == (own, "APP")
    assert banner(spec, "--dsn", NO_DATABASE, env=env)["database"] == (NO_DATABASE, "--dsn")
    assert banner(spec, env=env)["schema"] == ("sweepq", "SWEEPQ_SCHEMA")
    plain = app_module(app_dir, PLAIN_APP) + ":app"
    assert banner(plain, env={"DATABASE_URL": NO_DATABASE})["database"][1] == "DATABASE_URL"
