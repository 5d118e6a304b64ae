"""Where Django's own task backends (`ImmediateBackend`, `DummyBackend`) set the behaviour, the
sweepq backend behaves as they do: the result `enqueue` returns is the stored one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.tasks import default_task_backend
from django.utils import timezone
from orders.tasks import charge, send_receipt

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueued_at_of_the_returned_result_is_the_stored_one() -> None:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")  # the transaction's time: when its jobs are created
            (began,) = cursor.fetchone()
        result = send_receipt.enqueue(1)
    assert result.enqueued_at == began
    assert default_task_backend.get_result(result.id).enqueued_at == began


def test_a_result_read_back_equals_the_returned_one_run_after_included() -> None:
    later = timezone.now() + timedelta(hours=1)
    returned = charge.using(run_after=later).enqueue(7, 300)
    read_back = default_task_backend.get_result(returned.id)
    assert read_back.task.run_after == later
    assert read_back == returned
    undeferred = send_receipt.enqueue(2)
    assert default_task_backend.get_result(undeferred.id) == undeferred
    assert undeferred.task.run_after is None
