"""What the commands share: a failure the user can fix ends the command with one line."""

from __future__ import annotations

import anyio
import pytest
import typer

from sweepq.cli.common import CommandError, run, stdout
from sweepq.cli.render import listing


def test_an_error_inside_a_task_group_ends_the_command_with_one_red_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def fails() -> None:
        raise CommandError("the thing is missing")

    async def command() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(fails)
            await anyio.sleep(5)

    with pytest.raises(typer.Exit) as ended:
        run(command)
    assert ended.value.exit_code == 2
    assert capsys.readouterr().err.strip() == "error: the thing is missing"


def test_output_that_is_not_on_a_terminal_is_not_wrapped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    message = (
        "SIGINT: stopping; running jobs have 30s to finish (send it again to stop at once) "
        + "and more words " * 20
    ).strip()
    row = listing()
    for column in ("run", "sweep", "started"):
        row.add_column(column)
    row.add_row("7", "a-sweep-" + "x" * 150, "18:08:49")
    console = stdout()
    console.print(message)
    console.print(row)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == message
    assert out.splitlines()[3].split() == ["7", "a-sweep-" + "x" * 150, "18:08:49"]
