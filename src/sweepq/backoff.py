"""Ready-made backoffs for `sweepq.RetryPolicy(backoff=...)`: see `sweepq.core.retry`."""

from .core.retry import Backoff, constant, exponential, linear

__all__ = ["Backoff", "constant", "exponential", "linear"]
