"""The queue: schema and migrations, enqueue, claim with a lease, outcomes, limits, retention.

Internal: the stable names are re-exported from `sweepq`.
"""
