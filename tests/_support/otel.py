"""OpenTelemetry's SDK with in-memory exporters, installed as the process's providers for one test and removed after
(the ``otel`` fixture of tests/telemetry and of the example app integrations/otel_app).

The API lets a process set its providers once; the fixture puts the API's globals back as they were, so the
tests that follow run without OpenTelemetry, as a process that never configured it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer: trace.Tracer

    def finished(self, name_prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith(name_prefix)]

    def points(self, metric: str, **attrs: Any) -> list[Any]:
        """The data points of ``metric`` whose attributes include ``attrs`` (collected now)."""
        data = self.reader.get_metrics_data()
        found = []
        for rm in data.resource_metrics if data is not None else []:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name != metric:
                        continue
                    for p in m.data.data_points:
                        point_attrs = p.attributes or {}
                        if all(point_attrs.get(k) == v for k, v in attrs.items()):
                            found.append(p)
        return found

    def value(self, metric: str, **attrs: Any) -> int | float | None:
        """The one data point's value (a counter) of ``metric`` with ``attrs``; ``None`` if none was reported."""
        points = self.points(metric, **attrs)
        assert len(points) <= 1, points
        return points[0].value if points else None


def _install(tracer_provider: Any, meter_provider: Any) -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    if tracer_provider is not None:
        trace.set_tracer_provider(tracer_provider)
    if meter_provider is not None:
        metrics.set_meter_provider(meter_provider)


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    _install(tracer_provider, meter_provider)
    try:
        yield Otel(spans, reader, tracer_provider.get_tracer("tests"))
    finally:
        _install(None, None)
        tracer_provider.shutdown()
        meter_provider.shutdown()
