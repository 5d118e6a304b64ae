"""Placing an order: the order and its receipt's task commit together, or neither does."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .models import Order
from .tasks import send_receipt


class InvalidOrder(Exception):
    pass


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    try:
        with transaction.atomic():
            order = Order.objects.create(
                email=request.POST["email"], total_cents=int(request.POST["total_cents"])
            )
            # A row of this transaction: no transaction.on_commit() needed.
            result = send_receipt.enqueue(order.pk)
            if order.total_cents <= 0:
                raise InvalidOrder("an order must cost something")  # rolls both back
    except InvalidOrder as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"order": order.pk, "receipt": result.id}, status=201)
