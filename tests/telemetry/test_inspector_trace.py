"""The inspector's feed shows each request's trace id (the traceparent user property the emulator read)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from sskv_mapping import ConnectionSettings
from sskv_mapping._telemetry import PROPAGATION_ENV
from sskv_mapping.emulator.core import CoreResult
from sskv_mapping.emulator.store_view import describe_request, trace_id_of
from sskv_mapping.testing import InProcessStore
from tests._support.otel import Otel


def test_trace_id_of_reads_a_traceparent_and_refuses_what_is_not_one() -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    assert trace_id_of(f"00-{tid}-b7ad6b7169203331-01") == tid
    assert trace_id_of(f"00-{tid.upper()}-b7ad6b7169203331-01") == tid
    for bad in (None, "", "00-xyz-b7ad6b7169203331-01", f"00-{'0' * 32}-b7ad6b7169203331-01", f"00-{tid}", "junk"):
        assert trace_id_of(bad) is None, bad


async def test_the_feed_carries_the_trace_id_of_a_traced_request(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, ...]] = []

    def tap(client_id: str | None, request: bytes | None, result: CoreResult, traceparent: str | None) -> None:
        seen.append((0, client_id, request, result, traceparent))

    async with InProcessStore() as store:
        store.server.tap = tap
        monkeypatch.setenv(PROPAGATION_ENV, "off")  # read when a client connects
        async with store.async_client() as client:
            await client.set("untraced", b"v")
        monkeypatch.delenv(PROPAGATION_ENV)
        # the connection option, as every URL constructor and framework adapter takes it
        quiet_settings = ConnectionSettings.from_url("mqtt://127.0.0.1:1883", trace_context=False)
        async with store.async_client(settings=quiet_settings) as client:
            with otel.tracer.start_as_current_span("quiet request"):
                await client.set("quiet", b"v")
        async with store.async_client() as client:
            with otel.tracer.start_as_current_span("request") as span:
                await client.set("traced", b"v")
    untraced, quiet, traced = (describe_request(*item) for item in seen)
    assert "trace_id" not in untraced
    assert quiet["key"] == "quiet" and "trace_id" not in quiet
    assert traced["key"] == "traced"
    assert traced["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    # the emulator in this process has the same provider: its server span continues the client's trace
    server = [s for s in otel.finished() if s.kind is SpanKind.SERVER]
    assert [s.context.trace_id for s in server][-1] == span.get_span_context().trace_id
