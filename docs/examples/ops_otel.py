"""OpenTelemetry (`pip install 'sweepq[otel]'`): a span per execution and metrics from the
events, and the queues' depth read from the database beside the worker."""

from __future__ import annotations

import asyncio
import os
import sys

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sweepq
from sweepq.contrib.otel import QueueSampler, instrument


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="make_thumbnail", queue="thumbnails", max_attempts=1)
    async def make_thumbnail(ctx: sweepq.Context, image_id: int) -> None:
        if image_id == 3:
            raise ValueError(f"image {image_id} is not a JPEG")

    # In production: a BatchSpanProcessor with an OTLP exporter, a PeriodicExportingMetricReader
    # (or the Prometheus reader). In-memory ones here, to look at what was reported.
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])

    instrument(app, tracer_provider=tracer_provider, meter_provider=meter_provider)
    sampler = QueueSampler(app, interval=15.0, meter_provider=meter_provider)

    async with app:
        await app.migrate()
        await app.enqueue_many(
            [sweepq.JobSpec(make_thumbnail, {"image_id": n}) for n in range(1, 6)]
        )
        (queue,) = [s for s in await sampler.sample() if s.queue == "thumbnails"]
        assert (queue.due, queue.running) == (5, 0)  # what the gauges report until the next read

        async with (
            sweepq.Worker(app, queues=["thumbnails"]) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(sampler.run)  # a read now and every 15 s, beside the worker
            await worker.run_until_idle()
            sampler.stop()

    names = sorted({span.name for span in spans.get_finished_spans()})
    assert names == ["sweepq.job make_thumbnail"]
    (failed,) = [s for s in spans.get_finished_spans() if s.status.description]
    assert failed.status.description == "ValueError: image 3 is not a JPEG"

    executions: dict[str, float] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for metric in data.resource_metrics[0].scope_metrics[0].metrics:
        if metric.name == "sweepq.job.executions":
            for point in metric.data.data_points:
                assert isinstance(point, NumberDataPoint)
                outcome = str((point.attributes or {})["sweepq.outcome"])
                executions[outcome] = point.value
    assert executions == {"completed": 4, "failed": 1}
    tracer_provider.shutdown()
    meter_provider.shutdown()


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
