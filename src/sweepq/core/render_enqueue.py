"""The SQL function `{schema}.enqueue`, rendered from the job options' declaration.

    python -m sweepq.core.render_enqueue          # if it changed: into the newest migration
    python -m sweepq.core.render_enqueue --check  # exit 1 if the newest render differs

The function's frame (the task and args checks, dedup, the insert's wake-up and notification)
is `_FRAME` below; what depends on the options (their names, variables, defaults, checks, the
rules between them, the columns inserted) comes from `core/options`, and the bounds from
`core/checks.py` and `core/tasks.py`: the function checks what `App.enqueue` checks, in the
same words. The render is a region between `BEGIN` and `END` below, in a core migration: the
newest region (in the highest-numbered migration holding one) is the function a migrated schema
has. When a fresh render differs from it, the render goes into the newest core migration (the
highest number), replacing its region or appended to it; a migration that changes nothing the
function reads holds no copy. A migration that adds an option's column is therefore written
first, then rendered into. `tests/test_sql_enqueue.py` fails when the newest region and a fresh
render differ.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from . import checks, options
from .options.kinds import Moment, literal
from .tasks import MAX_ARGS_BYTES, MAX_TASK_NAME_LENGTH

MIGRATIONS = Path(__file__).parent / "migrations"
COMMAND = "python -m sweepq.core.render_enqueue"
BEGIN = f"-- enqueue function, rendered by `{COMMAND}` (do not edit):\n"
END = "-- enqueue function: end.\n"

_FRAME = """\
CREATE OR REPLACE FUNCTION {schema}.enqueue(
    task text, args jsonb DEFAULT '{}', options jsonb DEFAULT '{}')
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql
-- It runs as the schema's owner, so that a role allowed only to EXECUTE it (see the ops guide,
-- "Roles") enqueues through its checks alone, with no access to the tables; the search_path is
-- pinned, as for every SECURITY DEFINER function, so that no caller's schema can stand in for
-- pg_catalog's functions and operators.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- JobOptions, in declaration order (the message for an unknown option lists them).
    known CONSTANT text[] := ARRAY[
@known@];
    -- checks.MAX_SPAN, in seconds.
    max_span CONSTANT numeric := @max_span@;
    -- notify_channel() of core/queries.py: the schema's name, hashed when it would be too long.
    schema_name CONSTANT text := btrim('{schema}', '"');
    channel CONSTANT text := CASE
        WHEN octet_length('sweepq_' || schema_name) <= 63 THEN 'sweepq_' || schema_name
        ELSE 'sweepq_' || left(encode(sha256(convert_to(schema_name, 'UTF8')), 'hex'), 32) END;
    -- NULL or JSON null means the default, as None does in Python.
    new_args jsonb := CASE WHEN enqueue.args IS NULL OR enqueue.args = 'null' THEN '{}'
                           ELSE enqueue.args END;
    opts jsonb := CASE WHEN enqueue.options IS NULL OR enqueue.options = 'null' THEN '{}'
                       ELSE enqueue.options END;
    given jsonb;        -- the options given, those set to null left out
    unknown text;
    val jsonb;
    bad text;           -- the option refused ...
    must text;          -- ... and what it must be
    -- The new job's values: @app.task's defaults unless given.
@variables@
    created bigint;
    holder bigint;
    holder_state text;
    found_by text;
    args_bytes integer;
    reserved_kind text;
    reserved_prefix text;
BEGIN
    -- Checks ---------------------------------------------------------------------------------
    IF enqueue.task IS NULL OR enqueue.task = '' OR length(enqueue.task) > @max_task@ THEN
        RAISE EXCEPTION 'sweepq: task must be the name of a registered task, 1 to @max_task@ '
            'characters, got %', CASE
                WHEN enqueue.task IS NULL THEN 'NULL'
                WHEN length(enqueue.task) <= 80 THEN quote_literal(enqueue.task)
                ELSE quote_literal(left(enqueue.task, 60)) || '...('
                     || length(enqueue.task) || ' characters)' END
            USING ERRCODE = '22SQ1';
    END IF;
    IF starts_with(enqueue.task, 'sweepq.') THEN
        -- sweepq's own tasks (a sweep's links, leaves and starts) are enqueued by sweepq alone.
        RAISE EXCEPTION 'sweepq: task %: names beginning with ''sweepq.'' are sweepq''s own '
            'tasks, which only sweepq enqueues (start a sweep with app.start_sweep or '
            '`sweepq sweep start`)', quote_literal(left(enqueue.task, 80))
            USING ERRCODE = '22SQ1';
    END IF;
    IF jsonb_typeof(new_args) <> 'object' THEN
        RAISE EXCEPTION 'sweepq: args must be a JSON object of the handler''s arguments '
            '(e.g. {"to": "a@example.com"}), got a JSON %', jsonb_typeof(new_args)
            USING ERRCODE = '22SQ1';
    END IF;
    -- The limits of App.enqueue, on the same measure: JSON nested at most @max_depth@ deep (the
    -- args object is the first level), and at most @max_args@ bytes of compact JSON
    -- (tasks.MAX_ARGS_BYTES). jsonb's text has a space after each ':' and ','; only args that
    -- long with them are measured without them.
    IF jsonb_path_exists(new_args, 'strict $.**{@max_depth@} '
                                   '? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION @too_deep@
            USING ERRCODE = '22SQ1';
    END IF;
    args_bytes := octet_length(new_args::text);
    IF args_bytes > @max_args@ THEN
        args_bytes := octet_length(regexp_replace(
            new_args::text, '("(?:[^"\\\\]|\\\\.)*")| ', '\\1', 'g'));
    END IF;
    IF args_bytes > @max_args@ THEN
        RAISE EXCEPTION 'sweepq: args are % bytes of JSON, over the @max_args_text@-byte limit; '
            'store large payloads elsewhere and pass a reference', args_bytes
            USING ERRCODE = '22SQ1';
    END IF;
    IF jsonb_typeof(opts) <> 'object' THEN
        RAISE EXCEPTION 'sweepq: options must be a JSON object of job options, got a JSON %',
            jsonb_typeof(opts)
            USING ERRCODE = '22SQ1', HINT = 'the options are: ' || array_to_string(known, ', ');
    END IF;
    SELECT coalesce(jsonb_object_agg(o.key, o.value) FILTER (WHERE o.value <> 'null'), '{}'),
           string_agg(quote_literal(o.key), ', ' ORDER BY o.key)
               FILTER (WHERE o.key <> ALL (known))
    INTO given, unknown
    FROM jsonb_each(opts) AS o;
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'sweepq: unknown job option(s) %; the options are: %',
            unknown, array_to_string(known, ', ')
            USING ERRCODE = '22SQ1';
    END IF;

    <<checks>>
    BEGIN
        -- Each option alone (its Kind, core/options/kinds.py); the first bad one is reported.
@checks@
    END checks;
    IF bad IS NOT NULL THEN
        val := coalesce(given -> bad, 'null');
        RAISE EXCEPTION 'sweepq: % must be %, got %', bad, must,
            CASE WHEN length(val::text) <= 80 THEN val::text
                 ELSE left(val::text, 60) || '...(' || length(val::text) || ' characters)' END
            USING ERRCODE = '22SQ1';
    END IF;

@values@

    -- Rules between options (core/options/rules.py).
@rules@

    -- Names a layer keeps for its own jobs (a sweep's leaf groups and idempotency scopes): a
    -- job from outside cannot join them (options.check_reserved refuses them in Python too).
    SELECT r.kind, r.prefix INTO reserved_kind, reserved_prefix FROM {schema}.reserved_names AS r
    WHERE (r.kind = 'group' AND starts_with(new_group, r.prefix))
       OR (r.kind = 'idempotency_scope' AND starts_with(new_idempotency_scope, r.prefix))
    ORDER BY r.kind, r.prefix
    LIMIT 1;
    IF reserved_prefix IS NOT NULL THEN
        RAISE EXCEPTION @reserved@, reserved_kind,
            quote_literal(CASE reserved_kind WHEN 'group' THEN new_group
                          ELSE new_idempotency_scope END),
            quote_literal(reserved_prefix)
            USING ERRCODE = '22SQ1';
    END IF;

    -- Dedup and insert (enqueue.insert) ----------------------------------------------------
    IF new_unique_for IS NOT NULL THEN
        -- job_identity_lock: the same row lock as Python enqueuers of this identity take.
        INSERT INTO {schema}.identity_locks AS l (identity_key) VALUES (new_identity_key)
        ON CONFLICT (identity_key) DO UPDATE SET identity_key = EXCLUDED.identity_key
        WHERE false;
        -- job_identity_recent, in a new statement: its snapshot sees every job committed
        -- before we held the lock.
        SELECT j.id, j.state::text INTO holder, holder_state
        FROM {schema}.jobs AS j
        WHERE j.identity_key = new_identity_key
          AND j.created_at >= now() - make_interval(secs => new_unique_for)
        ORDER BY j.created_at DESC, j.id DESC
        LIMIT 1;
        found_by := 'identity';
    END IF;
    FOR round IN 1..5 LOOP  -- enqueue._DEDUP_ROUNDS
        EXIT WHEN holder IS NOT NULL;
        -- job_insert for one row: a wake-up for its concurrency key, and a notification of its
        -- queue if it is due (both delivered at commit).
        WITH inserted AS (
            INSERT INTO {schema}.jobs AS j (
                task, args,
@columns@)
            VALUES (
                enqueue.task, new_args::json,
@inserted@)
            -- No conflict target: the idempotency index and the active-identity index both dedup.
            ON CONFLICT DO NOTHING
            RETURNING j.id, j.queue, j.run_at, j.concurrency_key
        ),
        woken AS (
            INSERT INTO {schema}.concurrency_wakeups (key, run_at)
            SELECT i.concurrency_key, i.run_at FROM inserted AS i
            WHERE i.concurrency_key IS NOT NULL
        ),
        notified AS (
            SELECT pg_notify(channel, i.queue) FROM inserted AS i WHERE i.run_at <= now()
        )
        SELECT i.id INTO created
        FROM inserted AS i CROSS JOIN (SELECT count(*) FROM notified) AS wake;
        IF created IS NOT NULL THEN
            job_id := created;
            outcome := 'created';
            RETURN NEXT;
            RETURN;
        END IF;
        -- job_find_duplicates, in a new statement: it sees the committed job we collided with.
        -- None found means the active job it collided with has finished: try again.
        SELECT coalesce(by_key.id, by_identity.id), coalesce(by_key.state, by_identity.state)::text
        INTO holder, holder_state
        FROM (VALUES (1)) AS one(n)
        LEFT JOIN {schema}.jobs AS by_key
               ON by_key.idempotency_key = new_idempotency_key
              AND by_key.idempotency_scope = new_idempotency_scope
        LEFT JOIN {schema}.jobs AS by_identity
               ON by_identity.identity_key = new_identity_key
              AND by_identity.state IN ('available', 'running');
        found_by := 'key';
    END LOOP;
    IF holder IS NULL THEN
        RAISE EXCEPTION 'sweepq: could not settle dedup for 1 job(s) after 5 rounds of racing '
            'enqueuers (each round found the job it collided with already gone); retry the '
            'enqueue' USING ERRCODE = 'serialization_failure';
    END IF;
    job_id := holder;
    outcome := CASE WHEN holder_state IN ('available', 'running') THEN 'existing_active'
                    ELSE 'existing_terminal' END;
    IF outcome = 'existing_terminal' THEN
        -- As enqueue._existing logs it: nothing will run for this call.
        RAISE WARNING 'enqueue deduplicated against terminal job % (state %, task %, %); no new '
            'job was created', holder, holder_state, enqueue.task,
            CASE WHEN found_by = 'key' AND new_idempotency_key IS NOT NULL
                 THEN 'idempotency_key=' || quote_literal(new_idempotency_key)
                 ELSE 'identity_key=' || quote_literal(new_identity_key) END;
    END IF;
    RETURN NEXT;
END
$$;
"""


def _indent(text: str, spaces: int) -> str:
    return textwrap.indent(text, " " * spaces)


def _known() -> str:
    names = ", ".join(literal(o.name) for o in options.OPTIONS)
    return _indent(textwrap.fill(names, 90), 8)


def _variables() -> str:
    lines = []
    for o in options.OPTIONS:
        default = "" if o.default is None else f" := {literal(o.default)}"
        lines.append(f"new_{o.name} {o.kind.sql_type}{default};")
    return _indent("\n".join(lines), 4)


def _values() -> str:
    lines = []
    for o in options.OPTIONS:
        if isinstance(o.kind, Moment):
            continue  # set by its check
        value = o.kind.sql_value(o.name)
        if o.default is not None:
            value = f"coalesce({value}, new_{o.name})"
        lines.append(f"new_{o.name} := {value};")
    return _indent("\n".join(lines), 4)


def render() -> str:
    """The region: the function, as the declaration makes it today."""
    columns = options.columns_of(options.SENT)
    parts = {
        "known": _known(),
        "max_span": str(int(checks.MAX_SPAN.total_seconds())),
        "variables": _variables(),
        "max_task": str(MAX_TASK_NAME_LENGTH),
        "max_depth": str(checks.MAX_JSON_DEPTH),
        "too_deep": literal("sweepq: " + checks.too_deep_message("the args"), 12),
        "max_args": str(MAX_ARGS_BYTES),
        "max_args_text": f"{MAX_ARGS_BYTES:,}",
        "checks": _indent("\n".join(o.kind.sql_check(o.name) for o in options.OPTIONS), 8),
        "values": _values(),
        "rules": _indent("\n".join(rule.sql() for rule in options.RULES), 4),
        "reserved": literal("sweepq: " + options.reserved_message("%", "%", "%"), 12),
        "columns": _indent(",\n".join(c.name for c in columns), 16),
        "inserted": _indent(options.column_values(columns, lambda o: f"new_{o.name}", ",\n"), 16),
    }
    text = _FRAME
    for name, part in parts.items():
        text = text.replace(f"@{name}@", part)
    return BEGIN + text + END


def newest_migration() -> Path:
    """The highest-numbered core migration (the one a changed render goes into)."""
    return max(MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql"))


def newest_rendered() -> Path | None:
    """The highest-numbered core migration holding a render: the function a schema has."""
    held = [m for m in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql")
            if region(m.read_text(encoding="utf-8")) is not None]  # fmt: skip
    return max(held, default=None)


def region(text: str) -> str | None:
    """The rendered region of a migration's text, or None if it holds none."""
    start = text.find(BEGIN)
    if start < 0:
        return None
    end = text.index(END, start) + len(END)
    return text[start:end]


def rendered_into(text: str) -> str:
    """A migration's text with the region replaced by a fresh render (or appended)."""
    found = region(text)
    if found is None:
        return text.rstrip("\n") + "\n\n" + render()
    return text.replace(found, render())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the render differs")
    args = parser.parse_args(argv)
    held = newest_rendered()
    if held is not None and region(held.read_text(encoding="utf-8")) == render():
        print(f"{held.name} holds the render of core/options")
        return 0
    if args.check:
        print(f"no migration holds the render of core/options as it is now; run: {COMMAND}")
        return 1
    target = newest_migration()
    target.write_text(rendered_into(target.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"rendered the enqueue function into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
