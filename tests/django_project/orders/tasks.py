"""The shop's tasks: plain Django tasks (`django.tasks.task`), run by sweepq's workers."""

from __future__ import annotations

from django.tasks import TaskContext, task
from django.utils import timezone

from sweepq.contrib.django import job_defaults

from .models import Order


@task(queue_name="emails")
def send_receipt(order_id: int) -> dict[str, str]:
    """A sync task: the worker runs it in a thread, with Django's connections handled."""
    order = Order.objects.get(pk=order_id)
    order.receipt_sent_at = timezone.now()
    order.save(update_fields=["receipt_sent_at"])
    return {"sent_to": order.email}  # the job's result: get_result(...).return_value


@task(priority=10)
@job_defaults(max_attempts=1, concurrency_key="payments")  # sweepq's options for every charge
def charge(order_id: int, amount_cents: int) -> dict[str, int]:
    if amount_cents <= 0:
        raise ValueError(f"cannot charge {amount_cents} cents for order {order_id}")
    return {"order_id": order_id, "charged_cents": amount_cents}


@task(takes_context=True)
def nightly_report(context: TaskContext, day: str) -> dict[str, object]:
    return {"day": day, "attempt": context.attempt, "result_id": context.task_result.id}


@task
async def ping(message: str) -> str:
    """An async task function runs too (on an event loop of its own, in the worker's thread)."""
    return f"pong: {message}"
