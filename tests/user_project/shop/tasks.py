"""The shop's tasks: receipts through a flaky mail API, thumbnails (blocking), and a sweep that
re-sends the newsletter preference of every customer."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import sweepq

app = sweepq.App(schema="shop")  # SWEEPQ_DSN in production; the tests point it elsewhere

MAIL_OUTAGES: dict[str, int] = {}  # address -> failures left (the tests' flaky mail API)
SENT: list[str] = []


@app.task(name="send_receipt", max_attempts=5)
async def send_receipt(ctx: sweepq.Context, order_id: int, to: str) -> str:
    if MAIL_OUTAGES.get(to, 0) > 0:
        MAIL_OUTAGES[to] -= 1
        raise ConnectionError(f"mail API unavailable (attempt {ctx.attempt})")
    SENT.append(to)
    return f"receipt {order_id} sent to {to}"


@app.task(name="make_thumbnail")
def make_thumbnail(ctx: sweepq.Context, image_id: int) -> None:
    time.sleep(0.01)  # a blocking image library
    ctx.run_async(ctx.app.enqueue, "publish_image", {"image_id": image_id})


@app.task(name="publish_image")
async def publish_image(ctx: sweepq.Context, image_id: int) -> None:
    return None


@app.task(name="place_order")
async def place_order(ctx: sweepq.Context, order_id: int, email: str) -> None:
    await ctx.app.enqueue(send_receipt, {"order_id": order_id, "to": email})


@app.register_sweep
class ResendPreferences(sweepq.TableSweep):
    name = "resend-preferences"
    table = "shop_customers"
    key: ClassVar[tuple[str, ...]] = ("id",)
    page_size = 2
    window = 4

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        await ctx.app.enqueue(send_receipt, {"order_id": 0, "to": item["email"]})
