"""Loading the user's App from `module:attribute`: each way it can be wrong gets an error naming
what was not found.
"""

from __future__ import annotations

from pathlib import Path

from cli_runner import app_module, invoke, one_line_error


async def test_a_wrong_app_gets_an_error_naming_what_was_not_found(app_dir: Path) -> None:
    db = ["--dsn", "postgresql://x@127.0.0.1:1/x"]
    cases = {
        "no_such_module_here:app": "cannot import module 'no_such_module_here'",
        "justamodule": "APP must be module:attribute",
    }
    fine = app_module(app_dir, "import sweepq\nmain_app = sweepq.App()\nnot_app = 3\n")
    cases[f"{fine}:app"] = f"module '{fine}' has no attribute 'app' (Apps it defines: main_app)"
    cases[f"{fine}:not_app"] = f"APP '{fine}:not_app' is a int, not a sweepq.App"
    broken = app_module(app_dir, "import no_such_dependency_xyz\n")
    cases[f"{broken}:app"] = "failed: No module named 'no_such_dependency_xyz'"
    raising = app_module(app_dir, "raise ValueError('bad config')\n")
    cases[f"{raising}:app"] = "raised ValueError: bad config"
    for spec, needle in cases.items():
        result = await invoke(["worker", spec, *db])
        assert needle in one_line_error(result), spec
