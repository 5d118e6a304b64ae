"""APP: every command takes the App as APP, `--app` or SWEEPQ_APP, and says so when it is missing
or given twice.
"""

from __future__ import annotations

from pathlib import Path

from cli_runner import (
    BANNER_LINE,
    NO_DATABASE,
    PLAIN_APP,
    app_module,
    banner,
    invoke_here,
    one_line_error,
)


def test_every_command_takes_the_app_as_app_or_from_sweepq_app(app_dir: Path) -> None:
    spec = app_module(app_dir, PLAIN_APP) + ":app"
    by_position = banner(spec, "--dsn", NO_DATABASE)
    assert by_position["app"] == (spec, "APP")
    by_option = invoke_here(["worker", "--app", spec, "--dsn", NO_DATABASE])
    by_variable = invoke_here(["worker", "--dsn", NO_DATABASE], env={"SWEEPQ_APP": spec})
    for result, source in ((by_option, "--app"), (by_variable, "SWEEPQ_APP")):
        assert "cannot reach PostgreSQL" in one_line_error(result)
        shown = {m[1]: (m[2], m[3]) for m in BANNER_LINE.finditer(result.stdout)}
        assert shown["app"] == (spec, source)
    # sweep start reads the same option and variable.
    started = invoke_here(["sweep", "start", "x", "--dsn", NO_DATABASE], env={"SWEEPQ_APP": spec})
    assert "cannot reach PostgreSQL" in one_line_error(started)  # the App was found

    neither = invoke_here(["worker", "--dsn", NO_DATABASE])
    assert "name the App: --app module:attribute" in one_line_error(neither)
    assert "name the App: --app module:attribute" in one_line_error(
        invoke_here(["sweep", "start", "x", "--dsn", NO_DATABASE])
    )
    both = invoke_here(["worker", spec, "--app", "other:app", "--dsn", NO_DATABASE])
    assert f"APP {spec!r} and --app/SWEEPQ_APP 'other:app' differ" in one_line_error(both)
