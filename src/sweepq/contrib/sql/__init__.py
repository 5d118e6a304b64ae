"""The statements of `sweepq.contrib` (loaded by `sweepq.core.sqlfiles.load_statements`)."""
