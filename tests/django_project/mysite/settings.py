"""Settings of a small shop that sends its receipts and charges its orders with sweepq."""

import os

SECRET_KEY = "a test project's key, not a secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost"]
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --8<-- [start:apps]
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "sweepq.contrib.django",  # `manage.py migrate` migrates sweepq's schema too
    "orders",
]
# --8<-- [end:apps]

# The tests run against the PostgreSQL on 127.0.0.1:5432 (user postgres, no password); the
# worker started by a test gets the test database's name through DJANGO_DB_NAME.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("DJANGO_DB_NAME", "sweepq_django"),
        "USER": os.environ.get("DJANGO_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("DJANGO_DB_PASSWORD", ""),
        "HOST": os.environ.get("DJANGO_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("DJANGO_DB_PORT", "5432"),
    }
}

# --8<-- [start:tasks]
TASKS = {
    "default": {
        "BACKEND": "sweepq.contrib.django.SweepqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            # sweepq's tables, in the database of DATABASES["default"]:
            "SCHEMA": os.environ.get("SWEEPQ_SCHEMA", "sweepq"),
            # sweepq job options every task gets (here: three attempts instead of five):
            "JOB_OPTIONS": {"max_attempts": 3},
        },
    }
}
# --8<-- [end:tasks]
