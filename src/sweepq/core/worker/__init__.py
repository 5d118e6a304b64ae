"""The worker, by loop: `Worker` (worker.py) composes the dispatcher (dispatch.py), the runners
(execution.py), the recorder (recorder.py) and the heartbeat (leases.py) over the state they
share (state.py), with the settings of one `WorkerConfig` (config.py)."""

from .config import WorkerConfig
from .worker import Worker

__all__ = ["Worker", "WorkerConfig"]
