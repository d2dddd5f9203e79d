"""The otel extra over a real broker: a client span per request, the duration histogram, the clients' and caches'
counters as metrics, and what goes on the wire (docs/observability.md)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import pytest
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags, TraceState, use_span

from sskv_mapping import FencingTokenRequiredError
from sskv_mapping._telemetry import DB_SYSTEM, PROPAGATION_ENV, ClientTelemetry
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient
from tests._support.otel import Otel
from tests._support.procs import start_emulator
from tests._support.waiting import eventually

pytestmark = pytest.mark.broker


def _key() -> str:
    return f"otel-{uuid.uuid4().hex[:10]}"


async def test_without_a_provider_a_client_has_no_instrumentation(broker_address: tuple[str, int]) -> None:
    async with AsyncStateStoreClient(*broker_address) as client:
        assert client._sender.telemetry is None
        await client.set(_key(), b"v")  # and its requests work as ever


async def test_each_command_has_a_client_span_with_the_conventions_attributes(
    otel: Otel, broker_address: tuple[str, int]
) -> None:
    host, port = broker_address
    key = _key()
    async with AsyncStateStoreClient(host, port) as client:
        assert isinstance(client._sender.telemetry, ClientTelemetry)
        await client.set(key, b"v1")
        assert (await client.get(key)) is not None
        assert (await client.vdelete(key, b"other")) is not None
        async with client.watch(key):
            pass
        assert await client.delete(key)
    spans = otel.finished()
    ops = [s.attributes["db.operation.name"] for s in spans if s.attributes]
    # the watch registered and then stopped its KEYNOTIFY: both are requests
    assert ops == ["SET", "GET", "VDEL", "KEYNOTIFY", "KEYNOTIFY", "DEL"]
    for span in spans:
        assert span.kind is SpanKind.CLIENT
        assert span.attributes is not None
        assert span.name == f"{span.attributes['db.operation.name']!s} {host}:{port}"
        assert span.attributes["db.system.name"] == DB_SYSTEM
        assert span.attributes["server.address"] == host
        assert span.attributes["server.port"] == port
        assert "error.type" not in span.attributes
        assert span.status.status_code is StatusCode.UNSET
    # the duration histogram: one data point per operation, counting its calls
    for op, calls in (("SET", 1), ("GET", 1), ("KEYNOTIFY", 2), ("DEL", 1)):
        (point,) = otel.points("db.client.operation.duration", **{"db.operation.name": op, "server.port": port})
        assert point.count == calls
        assert point.sum > 0


async def test_a_service_error_is_an_error_span_and_an_error_duration(
    otel: Otel, broker_address: tuple[str, int]
) -> None:
    key = _key()
    async with AsyncStateStoreClient(*broker_address) as client:
        await client.set(key, b"fenced", fencing_token=client.hlc.tick())
        with pytest.raises(FencingTokenRequiredError):
            await client.set(key, b"unfenced")  # the key is fenced now: the service answers -ERR
    failed = otel.finished()[-1]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == FencingTokenRequiredError.TEXT
    assert failed.attributes is not None
    assert failed.attributes["error.type"] == "FencingTokenRequiredError"
    assert failed.attributes["db.response.status_code"] == "ERR"
    (point,) = otel.points("db.client.operation.duration", **{"error.type": "FencingTokenRequiredError"})
    assert point.count == 1
    assert otel.finished()[0].status.status_code is StatusCode.UNSET


async def test_a_framework_span_is_the_parent_and_its_context_reaches_the_emulator(
    otel: Otel, fresh_mosquitto, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emulator process, with OpenTelemetry on (spans to a file), continues the client's trace."""
    spans_file = tmp_path / "emulator-spans.jsonl"
    env = {**os.environ, "SSKV_EMULATOR_OTEL_SPANS": str(spans_file)}
    with start_emulator(fresh_mosquitto.host, fresh_mosquitto.port, env=env):
        key = _key()
        async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client:
            with otel.tracer.start_as_current_span("GET /page") as outer:
                await client.set(key, b"v")
            async with client.watch(key) as changes:
                await client.set(key, b"w")  # notifies this client: a producer span linked to this SET
                await asyncio.wait_for(changes.__anext__(), 10)
            # propagation off (the settings): the request goes out without trace context
            quiet = ConnectionSettings(fresh_mosquitto.host, fresh_mosquitto.port, trace_context=False)
            async with AsyncStateStoreClient(settings=quiet) as silent:
                await silent.get(key)
            # propagation off (the environment)
            monkeypatch.setenv(PROPAGATION_ENV, "0")
            async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as silent:
                await silent.get(key)

        def lines() -> list[dict[str, Any]]:
            if not spans_file.exists():
                return []
            return [json.loads(line) for line in spans_file.read_text().splitlines() if line.strip()]

        # the first SET, two KEYNOTIFY, the second SET, the two GETs, and one notification
        await eventually(lambda: len(lines()) >= 7, timeout=10)

    client_spans = [s for s in otel.finished() if s.kind is SpanKind.CLIENT]
    first_set = client_spans[0]
    # the framework's span is the parent of the client span
    assert first_set.parent is not None and first_set.parent.span_id == outer.get_span_context().span_id
    server = lines()
    served = [s for s in server if s["kind"] == "SERVER"]
    assert [s["name"] for s in served] == ["SET", "KEYNOTIFY", "SET", "KEYNOTIFY", "GET", "GET"]
    by_parent = {s["parent_span_id"]: s for s in served}
    assert len(client_spans) == 6
    for span in client_spans[:4]:  # the requests sent with trace context
        ctx = span.context
        assert span.attributes is not None
        child = by_parent[f"{ctx.span_id:016x}"]  # the emulator's server span is the client span's child
        assert child["trace_id"] == f"{ctx.trace_id:032x}"
        assert child["attributes"]["db.operation.name"] == span.attributes["db.operation.name"]
    # the two GETs with propagation off started traces of their own
    gets = [s for s in served if s["name"] == "GET"]
    assert [s["parent_span_id"] for s in gets] == [None, None]
    # the notification: a producer span linked to the server span of the SET that caused it
    (note,) = [s for s in server if s["kind"] == "PRODUCER"]
    assert note["name"] == "NOTIFY SET"
    second_set = served[2]
    assert note["links"] == [{"trace_id": second_set["trace_id"], "span_id": second_set["span_id"]}]


async def test_no_span_no_trace_context(otel: Otel, broker_address: tuple[str, int]) -> None:
    """The hook adds trace context only while a span is active; it counts the publishes of the request either way."""
    async with AsyncStateStoreClient(*broker_address) as client:
        telemetry = client._sender.telemetry
        assert telemetry is not None
        props: list[tuple[str, str]] = []
        telemetry.published(props)  # no span is current here
        assert props == []
        with otel.tracer.start_as_current_span("outer") as span:
            telemetry.published(props)
        ctx = span.get_span_context()
        assert props == [("traceparent", f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}")]
        # a span context with vendor state: tracestate goes along, as the W3C header
        remote = SpanContext(
            0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("v", "1")])
        )
        props = []
        with use_span(NonRecordingSpan(remote)):
            telemetry.published(props)
        assert props == [("traceparent", f"00-{0xABC:032x}-{0xDEF:016x}-01"), ("tracestate", "v=1")]


async def test_resends_and_reconnects_are_counted(otel: Otel, fresh_mosquitto) -> None:
    host, port = fresh_mosquitto.host, fresh_mosquitto.port
    key = _key()
    with start_emulator(host, port) as first:
        client = AsyncStateStoreClient(host, port, timeout=20, backoff_max=0.2)
        await client.connect()
        try:
            await client.set(key, b"v")  # the service answered this client once
            first.stop()
            # the service is away: the GET is delivered to nobody and sent again until a new emulator serves
            pending = asyncio.create_task(client.get(key))
            await eventually(lambda: client.undelivered_resends > 0, timeout=10)
            with start_emulator(host, port):
                await pending
                resends = client.undelivered_resends
                span = otel.finished()[-1]
                assert span.attributes is not None
                assert span.attributes["db.operation.name"] == "GET"
                assert span.attributes["sskv.request.resends"] == resends
                assert otel.value("sskv.client.resends", **{"sskv.client.id": client.client_id}) == resends
                assert otel.value("sskv.client.reconnects", **{"sskv.client.id": client.client_id}) == 0
                fresh_mosquitto.restart()
                await eventually(lambda: client.reconnects >= 1, timeout=15)
                await client.wait_connected(15)
                assert otel.value("sskv.client.reconnects", **{"sskv.client.id": client.client_id}) == (
                    client.reconnects
                )
                # a clean session each time (the default): the broker kept nothing, as the client counted
                assert otel.value("sskv.client.sessions_lost", **{"sskv.client.id": client.client_id}) == (
                    client.sessions_lost
                )
        finally:
            await client.close()


async def test_cache_counters_match_the_caches_own_stats(otel: Otel, broker_address: tuple[str, int]) -> None:
    namespace = f"o{uuid.uuid4().hex[:10]}"
    async with AsyncStateStoreClient(*broker_address) as client:
        cache: AsyncStateStoreCache[int] = AsyncStateStoreCache(client, namespace=namespace, local_cache_size=2)
        async with cache:
            await cache.set("a", 1)
            for key in ("a", "a", "a", "nope", "b"):
                await cache.get(key)
            for key in ("c", "d", "e"):  # a local cache of 2: the older entries make room
                await cache.set(key, 0)
                await cache.get(key)
            stats = cache.stats()
            local = stats.local
            assert local is not None
            assert stats.hits > 0 and stats.misses > 0 and local.hits > 0
            ns = {"sskv.namespace": namespace}
            assert otel.value("sskv.cache.hits", **ns) == stats.hits
            assert otel.value("sskv.cache.misses", **ns) == stats.misses
            assert otel.value("sskv.local_cache.hits", **ns) == local.hits
            assert otel.value("sskv.local_cache.misses", **ns) == local.misses
            assert otel.value("sskv.local_cache.evictions", **ns) == local.evictions > 0
            assert otel.value("sskv.local_cache.revalidations", **ns) == 0
            in_flight = otel.value("sskv.client.requests.in_flight", **{"sskv.client.id": client.client_id})
            assert in_flight == client.in_flight.in_flight == 0


def test_a_blocking_clients_spans_are_children_of_the_callers_span(otel: Otel, broker_address: tuple[str, int]) -> None:
    """A Flask or Django view calls the blocking twin: its request runs on the library's loop thread, in the
    caller's context (the span of the framework's request is the parent)."""
    with StateStoreClient(*broker_address) as client, otel.tracer.start_as_current_span("GET /view") as view:
        client.set(_key(), b"v")
    (ours,) = [s for s in otel.finished() if s.kind is SpanKind.CLIENT]
    assert ours.attributes is not None
    assert ours.attributes["db.operation.name"] == "SET"
    assert ours.parent is not None and ours.parent.span_id == view.get_span_context().span_id
