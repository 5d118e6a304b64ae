"""`sweepq queues list|pause|resume` against a migrated schema."""

from __future__ import annotations

import json

import sweepq
from cli_runner import db_args, invoke


async def test_pause_list_and_resume_a_queue_from_the_command_line(app: sweepq.App) -> None:
    @app.task(name="mail", queue="mail")
    async def mail(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue(mail)
    given = db_args(app)
    paused = await invoke(["queues", "pause", "mail", "--reason", "provider down", *given])
    assert paused.exit_code == 0, paused.output
    assert "queue 'mail' paused" in paused.output
    again = await invoke(["queues", "pause", "mail", *given])
    assert "paused already" in again.output

    listed = await invoke(["queues", "list", *given])
    assert listed.exit_code == 0, listed.output
    [row] = [line for line in listed.output.splitlines() if line.lstrip("│ ").startswith("mail")]
    assert "paused" in row
    assert "provider down" in listed.output
    [state] = json.loads((await invoke(["queues", "list", "--json", *given])).output)
    assert (state["queue"], state["due"], state["pause"]["reason"]) == ("mail", 1, "provider down")

    resumed = await invoke(["queues", "resume", "mail", *given])
    assert resumed.exit_code == 0, resumed.output
    assert "queue 'mail' resumed" in resumed.output
    assert (await app.queues())[0].pause is None


async def test_a_bad_queue_name_fails_with_what_to_do_and_pauses_nothing(app: sweepq.App) -> None:
    given = db_args(app)
    result = await invoke(["queues", "pause", ".mail", *given])
    assert result.exit_code == 2
    assert "use 1-128 letters, digits" in result.output
    assert await app.queues() == []
