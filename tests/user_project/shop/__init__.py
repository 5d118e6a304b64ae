"""A shop's background work."""
