"""Tasks: a handler, its name and defaults, and the checked shape of its arguments.

The arguments a handler accepts are read from its signature once, at registration, into a
msgspec Struct type. Enqueue converts args to it (so missing, unknown and mistyped arguments are
refused before anything is written) and the worker decodes stored JSON straight into it.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from .checks import json_text_too_deep, optional_seconds, show, storable_text, too_deep_message
from .errors import ConfigurationError, InvalidArgumentsError, InvalidJobOptionError
from .ident import queue_name
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .decision import Decision

# A handler is `async def handler(ctx: sweepq.Context, **args)`, or a plain `def` the worker runs
# in a thread; an outcome hook is `async def hook(ctx: sweepq.Context, decision: Decision)`.
# (The Context is not named in these types: it holds the App, which holds the tasks.)
Handler = Callable[..., Any]
OutcomeHook = Callable[[Any, "Decision"], Awaitable[None]]

DEFAULT_MAX_ATTEMPTS = 5
MAX_ARGS_BYTES = 1_048_576
# Every job row carries its task's name; the SQL enqueue function refuses longer ones too.
MAX_TASK_NAME_LENGTH = 512
PRIORITY_RANGE = range(-32768, 32768)  # a smallint column
# A million executions is past any real retry policy (with backoff capped at an hour, over a
# century); a job that should keep trying for a time needs a deadline, not more attempts.
MAX_ATTEMPTS_RANGE = range(1, 1_000_001)


class Task:
    """A registered handler. Created by `App.task`; pass it (or its name) to `enqueue`."""

    __slots__ = (
        "_any_fields",
        "_floats",
        "args_type",
        "fn",
        "is_async",
        "max_attempts",
        "name",
        "on_outcome",
        "outcome_states",
        "priority",
        "queue",
        "retry",
        "timeout",
    )

    def __init__(
        self,
        fn: Handler,
        *,
        name: str,
        queue: str,
        max_attempts: int,
        priority: int = 0,
        on_outcome: OutcomeHook | None = None,
        outcome_states: Collection[str] | None = None,
        timeout: float | timedelta | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not callable(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise ConfigurationError(
                f"task {name!r}: the handler must be an `async def` or a plain `def` function "
                f"(not a generator), got {fn!r}"
            )
        _check_registration(name, max_attempts, priority)
        self.fn = fn
        # A plain `def` runs in one of the worker's threads (`Worker(threads=...)`).
        self.is_async = inspect.iscoroutinefunction(fn)
        self.name = name
        self.queue = queue_name(queue)
        self.max_attempts = max_attempts
        self.priority = priority
        # The most seconds one execution may run (a job's `timeout` option overrides it).
        self.timeout = _timeout(name, timeout)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError(
                f"task {name!r}: retry must be a sweepq.RetryPolicy, got {retry!r}"
            )
        self.retry = retry
        # Told how each execution ended, as decided (a layer that counts outcomes uses it).
        self.on_outcome = on_outcome
        # The decided states the hook is told of (None: all); a hook that acts on failures only
        # then costs nothing per successful job.
        self.outcome_states = None if outcome_states is None else frozenset(outcome_states)
        self.args_type, self._any_fields = _args_type(fn, name)
        self._floats = _exact_but_floats(self.args_type)

    async def __call__(self, ctx: Any, **kwargs: Any) -> Any:
        """Call the handler directly, in this thread (e.g. in a unit test; `sweepq.testing.
        perform` runs it as the worker would, and says what the queue would decide)."""
        if self.is_async:
            return await self.fn(ctx, **kwargs)
        return self.fn(ctx, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue!r}>"

    def encode_args(self, args: Mapping[str, Any] | msgspec.Struct | None) -> str:
        """Check `args` against the handler's signature and return them as JSON text."""
        if args is None:
            args = {}
        elif type(args) is dict:
            pass
        elif isinstance(args, msgspec.Struct):
            args = msgspec.structs.asdict(args)
        elif not isinstance(args, Mapping):
            raise InvalidArgumentsError(
                self.name, f"args must be a dict or a msgspec.Struct, not {type(args).__name__}"
            )
        try:
            checked = msgspec.convert(args, self.args_type, str_keys=True)
            for field in self._any_fields:
                _require_json(self.name, field, getattr(checked, field))
            data = msgspec.json.encode(checked)
        except msgspec.ValidationError as exc:
            raise InvalidArgumentsError(self.name, _explain(exc, self.args_type)) from None
        except RecursionError:
            raise InvalidArgumentsError(self.name, too_deep_message("the args")) from None
        except (UnicodeEncodeError, OverflowError, TypeError) as exc:
            raise InvalidArgumentsError(self.name, f"not representable as JSON ({exc})") from None
        if json_text_too_deep(data):
            # What a worker must decode back, and the SQL function refuses too.
            raise InvalidArgumentsError(self.name, too_deep_message("the args"))
        if len(data) > MAX_ARGS_BYTES:
            raise InvalidArgumentsError(
                self.name,
                f"{len(data):,} bytes of JSON is over the {MAX_ARGS_BYTES:,}-byte limit; "
                "store large payloads elsewhere and pass a reference",
            )
        if self._floats is not None:
            # Every field comes back from JSON as it went in, but a float that is not finite.
            for field in self._floats:
                value = getattr(checked, field)
                if isinstance(value, float) and not math.isfinite(value):
                    raise InvalidArgumentsError(
                        self.name, f"not representable as JSON (`{field}` is {value})"
                    )
            return data.decode()
        try:
            # The worker will decode exactly this; refuse here what it could not (NaN -> null).
            decoded = msgspec.json.decode(data, type=self.args_type)
        except msgspec.ValidationError as exc:
            raise InvalidArgumentsError(self.name, f"not representable as JSON ({exc})") from None
        if decoded != checked:
            # A value inside an untyped container (dict[str, Any], list[object], ...) that JSON
            # turns into something else: a set into a list, a datetime into a string.
            changed = [
                f for f in checked.__struct_fields__ if getattr(decoded, f) != getattr(checked, f)
            ]
            raise InvalidArgumentsError(
                self.name,
                f"{', '.join(f'`{f}`' for f in changed)} would not come back unchanged from JSON "
                "(a set, tuple, datetime or other non-JSON value inside an untyped field); "
                "annotate the parameter with the exact type or pass plain JSON values",
            )
        return data.decode()

    def decode_args(self, raw: str | bytes) -> dict[str, Any]:
        """Decode stored JSON into the handler's keyword arguments."""
        return msgspec.structs.asdict(msgspec.json.decode(raw, type=self.args_type))


def _timeout(name: str, value: float | timedelta | None) -> float | None:
    try:
        return optional_seconds(value, "timeout")
    except InvalidJobOptionError as exc:
        raise ConfigurationError(f"task {name!r}: {exc}") from None


def _check_registration(name: object, max_attempts: object, priority: object) -> None:
    if (
        not isinstance(name, str)
        or not name
        or len(name) > MAX_TASK_NAME_LENGTH
        or not storable_text(name)
    ):
        raise ConfigurationError(
            f"task name {show(name)} must be a non-empty string of at most "
            f"{MAX_TASK_NAME_LENGTH} characters, without NUL ('\\x00') or lone surrogate "
            "characters"
        )
    for what, value, allowed in (
        ("max_attempts", max_attempts, MAX_ATTEMPTS_RANGE),
        ("priority", priority, PRIORITY_RANGE),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
            raise ConfigurationError(
                f"task {name!r}: {what} must be an int in {allowed.start}..{allowed.stop - 1}, "
                f"got {value!r}"
            )


def _args_type(fn: Handler, name: str) -> tuple[type[msgspec.Struct], tuple[str, ...]]:
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigurationError(
            f"task {name!r}: the handler's first parameter must take the job context "
            "(async def handler(ctx, ...))"
        )
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ConfigurationError(
            f"task {name!r}: cannot resolve the handler's annotations ({exc})"
        ) from exc
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    any_fields: list[str] = []
    for param in params[1:]:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigurationError(
                f"task {name!r}: *args/**kwargs cannot be checked; name each argument"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ConfigurationError(
                f"task {name!r}: argument {param.name!r} is positional-only; "
                "arguments are passed by name"
            )
        annotation = hints.get(param.name, Any)
        if annotation is object:
            annotation = Any  # msgspec treats both as "anything"; checked as JSON below
        if annotation is Any or annotation is object:
            any_fields.append(param.name)
        if param.default is inspect.Parameter.empty:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, param.default))
    struct = msgspec.defstruct(f"{name}.args", fields, forbid_unknown_fields=True, kw_only=True)
    return struct, tuple(any_fields)


_EXACT = frozenset({str, int, bool, float, type(None)})


def _exact_but_floats(args_type: type[msgspec.Struct]) -> tuple[str, ...] | None:
    """The float fields of `args_type`, if every field holds only str, int, bool, float or None
    (JSON gives each back unchanged, but a float that is not finite); else None."""
    floats: list[str] = []
    for field in msgspec.structs.fields(args_type):
        hint = field.type
        members = typing.get_args(hint) if typing.get_origin(hint) in _UNIONS else (hint,)
        if not all(m in _EXACT for m in members):
            return None
        if float in members:
            floats.append(field.name)
    return tuple(floats)


_UNIONS = (typing.Union, types.UnionType)


def _explain(exc: msgspec.ValidationError, args_type: type[msgspec.Struct]) -> str:
    accepted = ", ".join(args_type.__struct_fields__) or "none"
    return f"{exc} (the handler accepts: {accepted})"


_JSON_SCALARS = (str, int, bool, type(None))


def _require_json(task: str, field: str, value: Any) -> None:
    """Refuse values that JSON would silently change (sets, datetimes, NaN) in untyped fields."""
    stack: list[tuple[str, Any]] = [(field, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _JSON_SCALARS):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidArgumentsError(task, f"`{path}` is {item}, which JSON cannot hold")
            continue
        if isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidArgumentsError(task, f"`{path}` has a non-string key {k!r}")
                stack.append((f"{path}.{k}", v))
            continue
        raise InvalidArgumentsError(
            task,
            f"`{path}` is a {type(item).__name__}, which is not a JSON value; annotate the "
            "handler's parameter with its type, or pass str/int/float/bool/None/list/dict",
        )
