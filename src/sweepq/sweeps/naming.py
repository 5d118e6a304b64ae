"""The names and keys a sweep's jobs carry: task names (and the sweep's own tasks that bear
them), groups, idempotency scopes and keys, and the canonical JSON of cursors and params."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ..core.checks import json_text_too_deep, show, too_deep_message
from ..core.tasks import Handler, OutcomeHook, Task
from .errors import InvalidSweepError

if TYPE_CHECKING:
    from .sweep import Sweep

_MAX_KEY_LENGTH = 512
# A run's params go into every link job's args and into the run's row: small by design.
MAX_PARAMS_BYTES = 65_536
# A NUL as msgspec writes it: \u0000 after an even number of backslashes (an odd one is a
# backslash of the text followed by "u0000").
_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def leaf_group(run_id: int) -> str:
    """The job group of a run's leaves, also their idempotency scope (a key per item)."""
    return f"sweep:{run_id}"


def run_of_group(group: str | None) -> int | None:
    """The run whose leaves are `group`, or None for another group."""
    prefix, _, run = (group or "").partition(":")
    return int(run) if prefix == "sweep" and run.isdigit() else None


def link_scope(run_id: int) -> str:
    """The idempotency scope of a run's links (a key per cursor; links are in no group)."""
    return f"sweep-link:{run_id}"


def link_task_name(sweep: str) -> str:
    return f"sweepq.sweep.{sweep}.link"


def leaf_task_name(sweep: str) -> str:
    return f"sweepq.sweep.{sweep}.leaf"


def start_task_name(sweep: str) -> str:
    return f"sweepq.sweep.{sweep}.start"


def done_task_name(sweep: str) -> str:
    return f"sweepq.sweep.{sweep}.done"


def link_priority(cls: type[Sweep]) -> int:
    """The priority of a sweep's links, starts and ends: one above its leaves', so that a walk
    is not starved by its own leaves."""
    return min(cls.priority + 1, 32767)


def own_task(
    cls: type[Sweep],
    fn: Handler,
    name: str,
    *,
    max_attempts: int,
    priority: int,
    on_outcome: OutcomeHook | None = None,
    outcome_states: Collection[str] | None = None,
) -> Task:
    """A task of the sweep `cls`'s own, on its queue; its handler (`link`, `leaf`, `start`,
    `done`) is renamed `sweep_link_<Class>` and so on, as logs and tracebacks show it."""
    fn.__qualname__ = fn.__name__ = f"sweep_{fn.__name__}_{cls.__name__}"
    return Task(
        fn,
        name=name,
        queue=cls.queue,
        max_attempts=max_attempts,
        priority=priority,
        on_outcome=on_outcome,
        outcome_states=outcome_states,
    )


def end_key(end: int) -> str:
    """The idempotency key, in the run's scope (`leaf_group`), of the job that tells of the
    run's end number `end`: no item's key looks like it (those are JSON arrays or digests)."""
    return f"end:{end}"


def dedup_key(values: tuple[Any, ...] | list[Any]) -> str:
    """An idempotency key for a key tuple: its JSON text, or a digest of it when too long."""
    text = msgspec.json.encode(list(values)).decode()
    if len(text) <= _MAX_KEY_LENGTH:
        return text
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def encode_cursor(cursor: tuple[Any, ...] | None) -> str | None:
    return None if cursor is None else msgspec.json.encode(list(cursor)).decode()


def encode_params(sweep: str, params: Mapping[str, Any] | None) -> tuple[str, str]:
    """The params as canonical JSON text and its hash (the run guard's key); refuse non-JSON,
    what PostgreSQL's jsonb cannot hold (NUL), and params too deep or too large to ride along
    with every link of the run."""
    params = {} if params is None else params
    problem = f"sweep {sweep!r}: params must be a dict of JSON values (str keys)"
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise InvalidSweepError(f"{problem}, got {show(params)}")
    try:
        data = msgspec.json.encode(dict(params), order="sorted")
    except RecursionError:
        raise InvalidSweepError(f"sweep {sweep!r}: {too_deep_message('params')}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidSweepError(f"{problem} ({exc})") from None
    if json_text_too_deep(data):
        raise InvalidSweepError(f"sweep {sweep!r}: {too_deep_message('params')}")
    if len(data) > MAX_PARAMS_BYTES:
        raise InvalidSweepError(
            f"sweep {sweep!r}: params are {len(data):,} bytes of JSON, over the "
            f"{MAX_PARAMS_BYTES:,}-byte limit (every link of the run carries them); pass a "
            "reference to where the data lives instead"
        )
    if _NUL.search(data):
        raise InvalidSweepError(
            f"{problem}: PostgreSQL cannot store the NUL character ('\\x00') in JSON; "
            "remove or encode it"
        )
    if msgspec.json.decode(data) != dict(params):
        raise InvalidSweepError(
            f"{problem}; some value would change when stored as JSON (a tuple, a datetime, "
            "NaN, ...): pass lists, str, int, float, bool or None"
        )
    return data.decode(), hashlib.sha256(data).hexdigest()
