"""The FastAPI example app (``fastapi_app``) with OpenTelemetry: each HTTP request is a span from
opentelemetry-instrumentation-fastapi, and the state store calls it makes are its children -- the cache's GET, the
SET of a render, the dict's reads -- each with the store's server span under it when the emulator has OpenTelemetry
too (docs/observability.md).

Run it with the console exporter (spans and, every 10 s, metrics printed on stdout)::

    pip install 'sskv-mapping[otel,fastapi]' opentelemetry-sdk opentelemetry-instrumentation-fastapi uvicorn
    SSKV_URL=mqtt://127.0.0.1:1883 uvicorn --factory otel_app.app:console_app   # from the integrations folder

Nothing here is specific to the console: configure the providers with any exporter (OTLP to a collector, a
Prometheus reader) before the app starts, and the library reports to them.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi_app.app import create_app as create_plain_app
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter


def create_app(url: str | None = None, *, name: str = "otel-example") -> FastAPI:
    """The FastAPI example app, its requests traced (on the process's tracer provider, configured or not)."""
    app = create_plain_app(url, name=name)
    FastAPIInstrumentor.instrument_app(app)
    return app


# --8<-- [start:console]
def console_telemetry(service: str = "otel-example") -> None:
    """Spans and metrics printed on stdout: the process's providers, set once, before any client connects."""
    resource = Resource.create({"service.name": service})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=10_000)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    # --8<-- [end:console]


def console_app() -> FastAPI:
    """``uvicorn --factory otel_app.app:console_app``: the console exporters, then the app."""
    console_telemetry()
    return create_app()
