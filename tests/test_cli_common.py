"""What the commands share: a failure the user can fix ends the command with one line."""

from __future__ import annotations

import anyio
import pytest
import typer

from sweepq.cli.common import CommandError, run


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
