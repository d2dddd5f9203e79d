"""The example's tests: the state store from sskv-mapping's pytest plugin (docs/testing.md), OpenTelemetry's SDK
with in-memory exporters as the process's providers for each test (``otel``)."""

from __future__ import annotations

from tests._support.otel import otel

__all__ = ["otel"]
