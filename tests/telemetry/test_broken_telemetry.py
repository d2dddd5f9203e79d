"""A broken tracing or metrics setup never breaks a call (issue 37, probe finding 2): a span processor that raises,
a provider whose ``get_tracer``/``get_meter`` raises; each failing step is logged once. Over a real broker."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from sskv_mapping import FencingTokenRequiredError, StateStoreDict, _telemetry
from sskv_mapping.client import StateStoreClient
from tests._support.otel import Otel, _install

pytestmark = pytest.mark.broker


class Boom(RuntimeError):
    pass


class RaisingProcessor(SpanProcessor):
    def __init__(self) -> None:
        self.starts = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.starts += 1
        raise Boom("on_start")

    def on_end(self, span: Any) -> None:
        raise Boom("on_end")


class NoTracer(TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        raise Boom("get_tracer")


class NoMeter(MeterProvider):
    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        raise Boom("get_meter")


@pytest.fixture(autouse=True)
def _logged_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_telemetry, "_failed", set())  # "logged once" per test


@pytest.fixture
def raising(otel: Otel) -> Iterator[RaisingProcessor]:
    processor = RaisingProcessor()
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(processor)
    yield processor


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sskv_mapping.telemetry"]


def test_a_span_processor_that_raises_changes_no_result(
    raising: RaisingProcessor, broker_address: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    key = f"otel-{uuid.uuid4().hex[:10]}"
    caplog.set_level(logging.WARNING, "sskv_mapping.telemetry")
    with StateStoreClient(*broker_address) as client:
        assert client.async_client._sender.telemetry is not None  # traced: the processor is asked
        assert client.get(key) is None
        client.set(key, b"v1")
        entry = client.get(key)
        assert entry is not None and entry.value == b"v1"
        assert client.delete(key)
        namespace = f"t{uuid.uuid4().hex[:10]}"
        with StateStoreDict[int](client, namespace=namespace) as d:  # opening a dict sends requests too
            d["a"] = 1
            assert d["a"] == 1 and len(d) == 1 and dict(d) == {"a": 1}
    assert raising.starts >= 4
    logged = _warnings(caplog)
    assert logged.count(logged[0]) == 1 and len(logged) == len(set(logged)), logged  # each step once
    assert any("starting a request's span" in m for m in logged), logged


def test_a_processor_that_raises_does_not_hide_the_calls_own_error(
    raising: RaisingProcessor, broker_address: tuple[str, int]
) -> None:
    key = f"otel-{uuid.uuid4().hex[:10]}"
    with StateStoreClient(*broker_address) as client:
        client.set(key, b"fenced", fencing_token=client.async_client.hlc.tick())
        with pytest.raises(FencingTokenRequiredError):  # the service's -ERR, not the processor's Boom
            client.set(key, b"unfenced")
        entry = client.get(key)
        assert entry is not None and entry.value == b"fenced"


@pytest.mark.parametrize("providers", ["get_tracer", "get_meter"])
def test_a_provider_that_raises_lets_connect_and_calls_work(
    providers: str, broker_address: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "sskv_mapping.telemetry")
    tracer_provider, meter_provider = (NoTracer(), None) if providers == "get_tracer" else (None, NoMeter())
    _install(tracer_provider, meter_provider)
    try:
        key = f"otel-{uuid.uuid4().hex[:10]}"
        for _ in range(2):
            with StateStoreClient(*broker_address) as client:
                assert client.async_client._sender.telemetry is None  # connected, untraced
                client.set(key, b"v")
                entry = client.get(key)
                assert entry is not None and entry.value == b"v"
    finally:
        _install(None, None)
    logged = _warnings(caplog)
    assert len(logged) == 1 and "setting up a client's tracer and meter" in logged[0], logged  # once for two clients
    assert any(isinstance(r.exc_info[1], Boom) for r in caplog.records if r.exc_info), "the traceback is logged"
