"""No models: sweepq's tables live in its own schema, created and upgraded by its own migrations.

This module exists because Django sends `post_migrate`, which runs those migrations
(`apps.py`), only to apps that have a models module.
"""
