"""Where the command line's settings come from: the command line, else their `SWEEPQ_*` variable,
else a default; a bad value is refused naming where it was given.
"""

from __future__ import annotations

import pytest

import sweepq
from cli_runner import NO_DATABASE, banner, invoke_here, one_line_error


def test_the_command_line_beats_the_environment_which_beats_the_default(worker_app: str) -> None:
    env = {"SWEEPQ_MAX_CONCURRENCY": "7", "SWEEPQ_QUEUES": "a, b", "SWEEPQ_LEASE_SECONDS": "12"}
    given = banner(worker_app, "-q", "c", "--max-concurrency", "3", "--dsn", NO_DATABASE, env=env)
    assert given["concurrency"] == ("3", "--max-concurrency")
    assert given["queues"] == ("c", "--queue")
    assert given["lease_seconds"] == ("12", "SWEEPQ_LEASE_SECONDS")
    assert given["poll_seconds"][1] == "default"

    from_env = banner(worker_app, "--dsn", NO_DATABASE, env=env)
    assert from_env["concurrency"] == ("7", "SWEEPQ_MAX_CONCURRENCY")
    assert from_env["queues"] == ("a, b", "SWEEPQ_QUEUES")

    defaults = banner(worker_app, "--dsn", NO_DATABASE)
    concurrency = sweepq.Worker(sweepq.App("postgresql://x/y")).concurrency
    assert defaults["concurrency"] == (str(concurrency), "default")
    assert defaults["queues"] == ("default", "default")


def test_prune_settings_resolve_from_the_command_line_the_environment_or_the_default(
    worker_app: str,
) -> None:
    env = {"SWEEPQ_PRUNE_EVERY": "never", "SWEEPQ_PRUNE_OLDER_THAN": "2w"}
    db = ["--dsn", NO_DATABASE]
    from_env = banner(worker_app, *db, env=env)
    assert from_env["prune_every"] == ("never", "SWEEPQ_PRUNE_EVERY")
    assert from_env["prune_older_than"] == ("14d", "SWEEPQ_PRUNE_OLDER_THAN")
    given = banner(worker_app, *db, "--prune-every", "30m", "--prune-older-than", "1d", env=env)
    assert given["prune_every"] == ("30m", "--prune-every")
    assert given["prune_older_than"] == ("1d", "--prune-older-than")
    defaults = banner(worker_app, *db)
    assert defaults["prune_every"] == ("1h", "default")
    assert defaults["prune_older_than"] == ("7d", "default")  # as the docs and --help say
    sometimes = invoke_here(["worker", worker_app, *db, "--prune-every", "sometimes"])
    assert "--prune-every 'sometimes' is not valid" in one_line_error(sometimes)
    x = invoke_here(["worker", worker_app, *db], {"SWEEPQ_PRUNE_OLDER_THAN": "x"})
    assert "SWEEPQ_PRUNE_OLDER_THAN='x' is not" in one_line_error(x)


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SWEEPQ_MAX_CONCURRENCY": "lots"}, "SWEEPQ_MAX_CONCURRENCY='lots' is not valid"),
        ({"SWEEPQ_MAX_CONCURRENCY": "0"}, "concurrency must be >= 1, got 0 (from SWEEPQ_MAX"),
        ({"SWEEPQ_POLL_SECONDS": "-1"}, "SWEEPQ_POLL_SECONDS='-1' is not valid: expected a fin"),
        ({"SWEEPQ_QUEUES": "ok, bad queue"}, "(from SWEEPQ_QUEUES)"),
        ({"SWEEPQ_QUEUES": " , "}, "SWEEPQ_QUEUES=',' is not valid: expected comma-separated"),
        ({"SWEEPQ_GRACE_SECONDS": "-1"}, "SWEEPQ_GRACE_SECONDS='-1' is not valid: expected a"),
        ({"SWEEPQ_GRACE_SECONDS": "nan"}, "SWEEPQ_GRACE_SECONDS='nan' is not valid: expected"),
    ],
)
def test_a_bad_setting_in_the_environment_is_refused_naming_its_variable(
    worker_app: str, env: dict[str, str], needle: str
) -> None:
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE], env)
    assert needle in one_line_error(result)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-concurrency", "lots"], "--max-concurrency 'lots' is not valid: expected a whole"),
        (["-c", "0"], "concurrency must be >= 1, got 0 (from --max-concurrency)"),
        (["--lease-seconds", "0"], "--lease-seconds '0' is not valid: expected a finite number"),
        (["-q", "ok", "-q", "bad queue"], "queue name 'bad queue' is not valid"),
    ],
)
def test_a_bad_setting_on_the_command_line_is_refused_naming_its_option(
    worker_app: str, args: list[str], needle: str
) -> None:
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE, *args])
    assert needle in one_line_error(result)


def test_a_variable_set_to_blanks_counts_as_unset(worker_app: str) -> None:
    blank = {"SWEEPQ_MAX_CONCURRENCY": "  ", "SWEEPQ_QUEUES": " ", "SWEEPQ_SCHEMA": "  "}
    shown = banner(worker_app, "--dsn", NO_DATABASE, env=blank)
    assert shown["concurrency"][1] == "default"
    assert shown["queues"] == ("default", "default")
    assert shown["schema"] == ("sweepq", "APP")


def test_an_app_built_without_a_schema_follows_sweepq_schema(worker_app: str) -> None:
    shown = banner(worker_app, "--dsn", NO_DATABASE, env={"SWEEPQ_SCHEMA": "shop"})
    assert shown["schema"] == ("shop", "SWEEPQ_SCHEMA")
