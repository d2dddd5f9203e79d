"""OpenTelemetry in the emulator: it continues the caller's trace (docs/observability.md, "In the emulator")."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._protocol.notifications import parse_notification_payload
from .._telemetry import DB_SYSTEM
from .._transport.base import InboundMessage
from ..errors import ConfigurationError, ProtocolError

__all__ = ["SPANS_FILE_ENV", "ServerTelemetry", "current", "refresh", "server_telemetry"]

#: a file the emulator writes its finished spans to, one JSON object a line (it configures the SDK itself)
SPANS_FILE_ENV = "SSKV_EMULATOR_OTEL_SPANS"
_NO_PROVIDER = frozenset({"ProxyTracerProvider", "NoOpTracerProvider"})
_SCOPE = "sskv_mapping.emulator"


def _verb(payload: bytes) -> str:
    """The command name of a RESP3 request (``*N\\r\\n$L\\r\\nVERB\\r\\n...``), without parsing the rest."""
    parts = payload.split(b"\r\n", 3)
    return parts[2].decode("ascii", "replace").upper()[:16] if len(parts) > 3 else "?"


def _file_provider(path: str) -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        raise ConfigurationError(f"{SPANS_FILE_ENV} needs opentelemetry-sdk: pip install opentelemetry-sdk") from None

    class _JsonLines(SpanExporter):
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115  # open for the process's life

        def export(self, spans: Sequence[Any]) -> Any:
            with self._lock:
                for span in spans:
                    ctx, parent = span.context, span.parent
                    line = {
                        "name": span.name,
                        "kind": span.kind.name,
                        "trace_id": f"{ctx.trace_id:032x}",
                        "span_id": f"{ctx.span_id:016x}",
                        "parent_span_id": None if parent is None else f"{parent.span_id:016x}",
                        "attributes": dict(span.attributes or {}),
                        "links": [
                            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
                            for link in span.links
                        ],
                    }
                    self._file.write(json.dumps(line) + "\n")
                self._file.flush()
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            with self._lock:
                self._file.close()

    provider = TracerProvider(resource=Resource.create({"service.name": "sskv-emulator"}))
    provider.add_span_processor(SimpleSpanProcessor(_JsonLines()))
    return provider


def server_telemetry(environ: dict[str, str] | os._Environ[str] | None = None) -> ServerTelemetry | None:
    """The emulator's tracing, or ``None``: no API installed, no tracer provider and no spans file."""
    env = os.environ if environ is None else environ
    path = env.get(SPANS_FILE_ENV, "")
    if path:
        return ServerTelemetry(_file_provider(path))
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if type(provider).__name__ in _NO_PROVIDER:
        return None
    return ServerTelemetry(provider)


#: the process's emulator tracing (its providers are the process's): set by :func:`refresh`, read per request
current: ServerTelemetry | None = None


def refresh() -> None:
    """Look at OpenTelemetry again (each emulator server does when it is made): a provider set since counts."""
    global current
    if current is not None and os.environ.get(SPANS_FILE_ENV):
        return  # the process's own provider, writing to that file, is made once
    found = server_telemetry()
    if found is None or current is None or found.provider is not current.provider:
        current = found


class ServerTelemetry:
    """The emulator's server and notification spans on one tracer provider."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self._trace = trace
        self._context = context
        self._tracer = provider.get_tracer(_SCOPE)
        self._propagator = TraceContextTextMapPropagator()

    def serve(self, handle: Callable[[InboundMessage], None], message: InboundMessage) -> None:
        """``handle(message)`` in a server span, the child of the request's trace context if it carries one."""
        carrier = {name: value for name, value in message.user_properties if name in ("traceparent", "tracestate")}
        parent = self._propagator.extract(carrier) if carrier else None
        verb = _verb(message.payload)
        attrs = {"db.system.name": DB_SYSTEM, "db.operation.name": verb}
        with self._tracer.start_as_current_span(
            verb, context=parent, kind=self._trace.SpanKind.SERVER, attributes=attrs
        ):
            handle(message)

    def notified(self, topics_and_payloads: Sequence[tuple[str, bytes]]) -> None:
        """A producer span per notification, linked to the span of the write or expiry that caused it."""
        current = self._trace.get_current_span().get_span_context()
        links = [self._trace.Link(current)] if current.is_valid else []
        for topic, payload in topics_and_payloads:
            try:
                op = parse_notification_payload(payload)[0].value
            except ProtocolError:
                op = "?"
            span = self._tracer.start_span(
                f"NOTIFY {op}",
                kind=self._trace.SpanKind.PRODUCER,
                links=links,
                attributes={"db.system.name": DB_SYSTEM, "messaging.destination.name": topic},
                context=self._context.Context(),  # a trace of its own: it outlives the write's request
            )
            span.end()
