"""The ``otel`` fixture: the OpenTelemetry SDK's in-memory span exporter and metric reader for one test."""

from __future__ import annotations

from tests._support.otel import otel

__all__ = ["otel"]
