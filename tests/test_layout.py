"""Every module has tests a contributor can find by name.

The tests of `src/sweepq/<package>/<module>.py` are in `tests/test_<package>_<module>.py`, with
the core's modules named without `core` (`core/lane.py` -> `test_lane.py`, `core/worker/leases.py`
-> `test_worker_leases.py`), a package's `__init__.py` named for the package
(`contrib/django/__init__.py` -> `test_contrib_django.py`) and a module named like its package
named once (`core/worker/worker.py` -> `test_worker.py`). A module with nothing of its own to test
(a docstring, imports and `__all__`) needs no file. A module tested only through others names
them in COVERED_ELSEWHERE, with the reason.

The other test files are about behaviour across modules: the fault suite (`test_fault_*`),
upgrades (`test_upgrade_*`), the docs (`test_docs_examples.py`, `test_reference_docs.py`), the
layers, roles, dedup and concurrency limits.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "sweepq"
TESTS = Path(__file__).resolve().parent

# module (relative to src/sweepq) -> the test files that cover it, and why it has none of its own
COVERED_ELSEWHERE: dict[str, str] = {
    # the package and its entry points
    "__init__.py": "the public names: test_public_api.py; each concept in its own file",
    "__main__.py": "`python -m sweepq` is run by test_package.py",
    "cli/__main__.py": "`python -m sweepq.cli` runs workers in test_cli_worker.py",
    "cli/main.py": "the command tree, walked by test_reference_docs.py; each command has a file",
    "cli/plugins.py": "its entry points run `--django` (test_cli_django_worker.py) and "
    "`--metrics-port` (test_cli_metrics.py)",
    "cli/render.py": "the views of each command, checked by that command's tests "
    "(test_cli_jobs.py, test_cli_sweep.py, test_cli_doctor.py)",
    "cli/sweep_render.py": "the views of `sweepq sweep`, in test_cli_sweep.py, and of runs in "
    "`sweepq top` (test_cli_top.py)",
    "cli/streams.py": "a worker whose output has nowhere to go: test_cli_worker.py",
    "cli/demo_app.py": "the demo's own app, run by test_cli_demo.py",
    "cli/top_frame.py": "the figures of `sweepq top`, with the command, in test_cli_top.py",
    "cli/top_render.py": "the screen of `sweepq top`, with the command, in test_cli_top.py",
    # the core's pieces, composed by the App that the tests drive
    "core/app.py": "the names the layers import for the core's app: test_public_api.py",
    "core/queue.py": "the core's app, driven by every test (test_enqueue.py, test_worker.py)",
    "core/database.py": "the pool and the lane (test_lane.py) and migrations (test_migrate.py)",
    "core/registry.py": "tasks, cron and observers registered: test_checks.py, test_cron.py, "
    "test_events.py",
    "core/operations.py": "each operation in the file of its concept: test_enqueue.py, "
    "test_waiters.py, test_outcomes.py, test_retention.py",
    "core/jobs.py": "the job as users read it: test_enqueue.py, test_outcomes.py",
    "core/tasks.py": "registration and argument checks: test_checks.py, test_bad_input_props.py",
    "core/context.py": "what a handler gets, async and in a thread: test_outcomes.py, "
    "test_worker_execution.py",
    "core/errors.py": "every error is raised by the test of what raises it: test_checks.py, "
    "test_bad_input_props.py; the tree is checked by test_public_api.py",
    "core/execution.py": "one execution, run by the worker and by `perform`: test_retry.py, "
    "test_outcomes.py, test_testing.py",
    "core/endings.py": "the decision table, held to decide() and SQL by test_decision.py",
    "core/queries.py": "one wrapper per statement, each run by the test of its concept; plan "
    "shapes in test_concurrency_limits.py",
    "core/rows.py": "the rows the statements return, read by the test of each concept: "
    "test_worker.py, test_outcomes.py, test_groups.py",
    "core/admin.py": "operators' reads: test_cli_top.py, test_cli_jobs.py, test_web.py",
    "core/doctor.py": "the doctor's figures and findings, with the command, in test_cli_doctor.py",
    "core/units.py": "sizes and durations as the views show them: test_cli_top.py (its cells), "
    "test_cli_doctor.py, test_web.py",
    "core/dsn.py": "the DSN and schema found and shown: test_cli_database.py, "
    "test_contrib_django_settings.py, test_package.py",
    "core/ident.py": "names that reach SQL: test_bad_input_props.py, test_sweeps_table.py",
    "core/maintenance.py": "the leader's loop: test_worker.py (election, cron), test_cron.py, "
    "test_groups.py",
    "core/notify.py": "wake-ups: test_worker.py, test_waiters.py",
    "core/outage.py": "PostgreSQL going away mid-run: test_fault_restart.py, test_worker.py",
    "core/ratelimit.py": "rate limits shared through PostgreSQL: test_worker.py, "
    "test_fault_admission.py",
    "core/render_enqueue.py": "the SQL function, rendered and held to App.enqueue: "
    "test_sql_enqueue.py",
    "core/options/kinds.py": "each option's values, in Python and SQL: test_bad_input_props.py, "
    "test_sql_enqueue.py",
    "core/options/rules.py": "the rules between options, in Python and SQL: "
    "test_bad_input_props.py, test_sql_enqueue.py",
    "core/worker/dispatch.py": "claims and wake-ups: test_worker.py, test_concurrency_limits.py",
    "core/worker/recorder.py": "outcomes recorded in batches: test_outcomes.py, "
    "test_fault_races.py, test_groups.py",
    "core/worker/state.py": "what the loops share, through the worker: test_worker.py, "
    "test_worker_leases.py",
    # sweeps
    "sweeps/app.py": "the public App with sweeps, driven by every test of sweeps (test_sweeps.py)",
    "sweeps/control.py": "start, pause, resume, retry: test_sweeps.py, test_sweeps_runs.py, "
    "test_sweeps_honest.py",
    "sweeps/ending.py": "how runs end: test_sweeps.py, test_sweeps_runs.py, "
    "test_sweeps_honest.py, test_sweeps_crash.py",
    "sweeps/errors.py": "raised by the refusals in test_sweeps_table.py and test_sweeps_honest.py",
    "sweeps/events.py": "the events of runs, heard in test_events.py and test_contrib_otel.py",
    "sweeps/layer.py": "how the layer plugs into the app: test_sweeps.py, test_roles.py",
    "sweeps/leaf.py": "one job per item: test_sweeps.py, test_sweeps_crash.py",
    "sweeps/link.py": "a page of the walk per job: test_sweeps.py, test_sweeps_honest.py, "
    "test_fault_kill.py",
    "sweeps/naming.py": "the names and keys of a sweep's jobs: test_sweeps.py, "
    "test_upgrade_data.py",
    "sweeps/queries.py": "one wrapper per statement, each run by the sweeps' tests "
    "(test_sweeps.py, test_sweeps_runs.py)",
    "sweeps/sweep.py": "what a user writes: test_sweeps.py, test_sweeps_table.py",
    # integrations and the testing kit
    "contrib/otel/observer.py": "spans and metrics from the events: test_contrib_otel.py",
    "contrib/otel/sampler.py": "the queues' gauges: test_contrib_otel.py, test_cli_metrics.py",
    "throttle/health.py": "the ready-made checks against real PostgreSQL: test_throttle.py",
    "throttle/stats.py": "the statistics views the checks read: test_throttle.py",
    "throttle/wait.py": "what a check returns, and its arguments' checks: test_throttle.py",
    "contrib/prometheus.py": "the endpoint of `--metrics-port`: test_cli_metrics.py",
    "contrib/django/_tasks.py": "the parts of django.tasks used, needing Django 6: "
    "test_contrib_django.py and tests/django_project",
    "contrib/django/apps.py": "needs Django 6: tests/django_project (`manage.py migrate`), "
    "with test_contrib_django.py",
    "contrib/django/backend.py": "needs Django 6: tests/django_project, with "
    "test_contrib_django.py here",
    "contrib/django/bootstrap.py": "`sweepq worker --django`: test_cli_django_worker.py",
    "contrib/django/management/commands/sweepq_worker.py": "`manage.py sweepq_worker`: "
    "test_contrib_django.py and tests/django_project",
    "contrib/django/results.py": "needs Django 6: tests/django_project, with "
    "test_contrib_django_mapping.py here",
    "contrib/django/worker.py": "needs Django 6: tests/django_project, with "
    "test_cli_django_worker.py here",
    "embedded.py": "the embedded PostgreSQL of the demo and of the testing kit: "
    "test_cli_demo.py, test_testing.py",
    "testing/database.py": "finding a database, as conftest.py does for this suite: "
    "test_testing.py",
    "testing/plugin.py": "the pytest plugin, used by tests/user_project; what it loads in "
    "test_layers.py",
    # the web dashboard, tested over HTTP as a whole
    "cli/web.py": "`sweepq web`, with the dashboard it serves: test_web.py",
    "core/browse.py": "jobs read by any filter, through the dashboard's pages: test_web.py",
    "web/actions.py": "the dashboard over HTTP: test_web.py",
    "web/app.py": "the dashboard over HTTP: test_web.py",
    "web/charts.py": "the dashboard over HTTP: test_web.py",
    "web/forms.py": "the dashboard over HTTP: test_web.py",
    "web/pages.py": "the dashboard over HTTP: test_web.py",
    "web/reads.py": "the dashboard over HTTP: test_web.py",
    "web/render.py": "the dashboard over HTTP: test_web.py",
    "web/security.py": "the dashboard over HTTP: test_web.py",
    "web/server.py": "the dashboard over HTTP: test_web.py",
    "web/site.py": "the dashboard over HTTP: test_web.py",
}


def modules() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def expected_file(module: str) -> str:
    """The name of the test file of `module` (a path relative to src/sweepq)."""
    parts = list(Path(module).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[:1] == ["core"]:
        parts.pop(0)
    if len(parts) >= 2 and parts[-1] == parts[-2]:
        parts.pop()
    return "test_" + "_".join(parts or ["sweepq"]) + ".py"


def has_code(module: str) -> bool:
    """Whether `module` holds more than a docstring, imports and `__all__`."""
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if [ast.unparse(target) for target in targets] == ["__all__"]:
                continue
        return True
    return False


def test_the_expected_file_names_the_core_without_core_and_a_package_by_its_name() -> None:
    assert expected_file("core/lane.py") == "test_lane.py"
    assert expected_file("core/worker/leases.py") == "test_worker_leases.py"
    assert expected_file("core/worker/worker.py") == "test_worker.py"
    assert expected_file("sweeps/table.py") == "test_sweeps_table.py"
    assert expected_file("contrib/django/__init__.py") == "test_contrib_django.py"
    assert expected_file("throttle.py") == "test_throttle.py"
    assert expected_file("__init__.py") == "test_sweepq.py"


def test_every_module_has_a_test_file_named_after_it_or_says_where_it_is_tested() -> None:
    missing = [
        f"src/sweepq/{m}: no tests/{expected_file(m)}"
        for m in modules()
        if has_code(m) and m not in COVERED_ELSEWHERE and not (TESTS / expected_file(m)).exists()
    ]
    assert not missing, (
        "name the test file after the module, or say in COVERED_ELSEWHERE (tests/test_layout.py)"
        " which tests cover it and why it has none of its own:\n" + "\n".join(missing)
    )


def test_each_entry_of_the_map_is_a_module_without_a_file_and_names_real_tests() -> None:
    known = set(modules())
    for module, reason in COVERED_ELSEWHERE.items():
        assert module in known, f"{module} is in COVERED_ELSEWHERE but not in src/sweepq"
        own = expected_file(module)
        assert not (TESTS / own).exists(), f"{module} has {own}: remove it from COVERED_ELSEWHERE"
        named = re.findall(r"test_\w+\.py", reason)
        assert named, f"{module}: the reason names no test file"
        for name in named:
            assert (TESTS / name).exists(), f"{module}: {name} does not exist"
