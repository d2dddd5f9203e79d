"""OpenTelemetry for the client and the faces: a span per request, metrics, and W3C trace context on the wire.

Nothing is imported from OpenTelemetry until a client connects with a provider configured (docs/observability.md).
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from ._protocol.error_texts import service_error

if TYPE_CHECKING:
    from ._protocol.commands import _Base
    from ._protocol.hlc import HybridLogicalClock

# What is watched is typed ``Any`` here: the client, the namespace store and the cache face live in layers above
# this module, which reads only their public counters (``in_flight``, ``reconnects``, ``cache.stats()``...).
Client = Any
Store = Any
Face = Any
_C = TypeVar("_C")

__all__ = [
    "DB_SYSTEM",
    "PROPAGATION_ENV",
    "ClientTelemetry",
    "attach",
    "propagation_enabled",
    "watch_cache",
    "watch_client",
    "watch_store",
]

#: the ``db.system.name`` of every span and metric (see the module's docstring for why this value)
DB_SYSTEM = "azure.iot_operations.state_store"
#: ``0``, ``false``, ``no`` or ``off``: put no trace context on requests, whatever the settings say
PROPAGATION_ENV = "SSKV_OTEL_PROPAGATION"
_SCOPE = "sskv_mapping"
_OFF = frozenset({"0", "false", "no", "off"})
#: the histogram buckets the database-client conventions advise for ``db.client.operation.duration`` (seconds)
_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
_NO_PROVIDER = frozenset({"ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider", "NoOpMeterProvider"})

# what is watched, weakly: the observable instruments read their counters at collection time
_clients: weakref.WeakSet[Client] = weakref.WeakSet()
_stores: weakref.WeakSet[Store] = weakref.WeakSet()
_caches: weakref.WeakSet[Face] = weakref.WeakSet()

log = logging.getLogger("sskv_mapping.telemetry")
#: the steps of OpenTelemetry that raised once already (each is logged once, with its traceback)
_failed: set[str] = set()


def _broken(step: str) -> None:
    """Observability never takes the data path down: what raised in ``step`` is logged once, the call goes on."""
    if step not in _failed:
        _failed.add(step)
        log.warning(
            "OpenTelemetry raised while %s; sskv_mapping goes on without it there (logged once)", step, exc_info=True
        )


#: the publishes of the request running in this task (its first send and every resend), while it is traced
_ATTEMPTS: contextvars.ContextVar[list[int]] = contextvars.ContextVar("sskv_otel_attempts")


def watch_client(client: Client) -> None:
    """Report this client's counters (in flight, reconnects, resends, sessions lost) while it lives."""
    _clients.add(client)


def watch_store(store: Store) -> None:
    """Report this namespace store's local cache (hits, misses, evictions, revalidations) while it lives."""
    if store.cache is not None:
        _stores.add(store)


def watch_cache(cache: Face, counters: _C) -> _C:
    """Report this cache face's hits and misses while it lives; returns ``counters`` (its own, unchanged)."""
    _caches.add(cache)
    return counters


def propagation_enabled(setting: bool, environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether requests carry trace context: the setting, unless ``SSKV_OTEL_PROPAGATION`` turns it off."""
    env = os.environ if environ is None else environ
    return setting and env.get(PROPAGATION_ENV, "").strip().lower() not in _OFF


class _Instruments:
    """The tracer and instruments made on the providers configured now (one set per pair of providers)."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, tracing: bool, metering: bool) -> None:
        from opentelemetry import trace
        from opentelemetry.metrics import CallbackOptions, Observation

        self.providers = (tracer_provider, meter_provider)
        self.trace = trace
        self.tracer = tracer_provider.get_tracer(_SCOPE) if tracing else None
        self.duration: Any = None
        if not metering:
            return
        meter = meter_provider.get_meter(_SCOPE)
        self.duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of state store requests, from the call to its answer (in-flight wait included)",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )

        def observe(read: Callable[[Any], Iterable[tuple[int, dict[str, Any]]]], watched: Any) -> Any:
            def callback(_options: CallbackOptions) -> Iterable[Observation]:
                return [Observation(value, attrs) for obj in list(watched) for value, attrs in read(obj)]

            return [callback]

        def client_attrs(client: Client) -> dict[str, Any]:
            return {
                "db.system.name": DB_SYSTEM,
                "server.address": client.settings.host,
                "server.port": client.settings.port,
                "sskv.client.id": client.client_id,
            }

        meter.create_observable_up_down_counter(
            "sskv.client.requests.in_flight",
            observe(lambda c: [(c.in_flight.in_flight, client_attrs(c))], _clients),
            unit="{request}",
            description="Requests sent and awaiting their answer",
        )
        meter.create_observable_up_down_counter(
            "sskv.client.requests.waiting",
            observe(lambda c: [(c.in_flight.waiting, client_attrs(c))], _clients),
            unit="{request}",
            description="Requests waiting for a slot under max_in_flight",
        )
        meter.create_observable_counter(
            "sskv.client.reconnects",
            observe(lambda c: [(c.reconnects, client_attrs(c))], _clients),
            unit="{reconnect}",
            description="Reconnects after a lost connection",
        )
        meter.create_observable_counter(
            "sskv.client.resends",
            observe(lambda c: [(c.undelivered_resends, client_attrs(c))], _clients),
            unit="{request}",
            description="Requests the broker delivered to nobody (the service away) and that were sent again",
        )
        meter.create_observable_counter(
            "sskv.client.sessions_lost",
            observe(lambda c: [(c.sessions_lost, client_attrs(c))], _clients),
            unit="{session}",
            description="Reconnects where the broker no longer had this client's session",
        )

        def store_attrs(store: Store) -> dict[str, Any]:
            return {"db.system.name": DB_SYSTEM, "sskv.namespace": store.namespace}

        def local(counter: str) -> Callable[[Store], list[tuple[int, dict[str, Any]]]]:
            def read(store: Store) -> list[tuple[int, dict[str, Any]]]:
                cache, watches = store.cache, store.watches
                if cache is None or watches is None:
                    return []
                value = watches.revalidations if counter == "revalidations" else getattr(cache.stats(), counter)
                return [(value, store_attrs(store))]

            return read

        for counter, what in (
            ("hits", "Reads the local cache answered"),
            ("misses", "Reads the local cache sent to the store"),
            ("evictions", "Entries the local cache dropped to make room (a full cache: raise its size)"),
            ("revalidations", "Entries re-read because no notification confirmed them in max_staleness"),
        ):
            meter.create_observable_counter(
                f"sskv.local_cache.{counter}", observe(local(counter), _stores), unit="{read}", description=what
            )

        def face(counter: str) -> Callable[[Face], list[tuple[int, dict[str, Any]]]]:
            def read(cache: Face) -> list[tuple[int, dict[str, Any]]]:
                attrs = {"db.system.name": DB_SYSTEM, "sskv.namespace": cache.namespace}
                return [(getattr(cache.stats(), counter), attrs)]

            return read

        for counter, what in (("hits", "Keys the cache found"), ("misses", "Keys the cache did not find")):
            meter.create_observable_counter(
                f"sskv.cache.{counter}", observe(face(counter), _caches), unit="{key}", description=what
            )


_absent = False  # opentelemetry-api is not installed (asked once)
_current: _Instruments | None = None


def _instruments() -> _Instruments | None:
    """The instruments on the providers configured now, or ``None`` (no API, or only its proxy/no-op ones)."""
    global _absent, _current
    if _absent:
        return None
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        _absent = True
        return None
    tracer_provider = trace.get_tracer_provider()
    meter_provider = metrics.get_meter_provider()
    tracing = type(tracer_provider).__name__ not in _NO_PROVIDER
    metering = type(meter_provider).__name__ not in _NO_PROVIDER
    if not (tracing or metering):
        return None
    cur = _current
    if cur is None or cur.providers[0] is not tracer_provider or cur.providers[1] is not meter_provider:
        cur = _current = _Instruments(tracer_provider, meter_provider, tracing, metering)
    return cur


def attach(client: Client) -> ClientTelemetry | None:
    """What a client uses when it connects: its instrumentation, or ``None`` (then its requests cost one test).
    Trace context goes on the wire unless ``client.settings.trace_context`` or ``SSKV_OTEL_PROPAGATION`` say no."""
    watch_client(client)
    try:
        inst = _instruments()
        if inst is None:
            return None
        settings = client.settings
        return ClientTelemetry(inst, settings.host, settings.port, propagation_enabled(settings.trace_context))
    except Exception:  # a provider whose get_tracer/get_meter raises: the client connects untraced
        _broken("setting up a client's tracer and meter")
        return None


_VERBS: dict[bytes, str] = {}


class ClientTelemetry:
    """One client's spans and duration histogram; made by :func:`attach` only when a provider is configured."""

    __slots__ = ("_base", "_duration", "_propagate", "_target", "_trace", "_tracer")

    def __init__(self, inst: _Instruments, host: str, port: int, propagate: bool) -> None:
        self._trace = inst.trace
        self._tracer = inst.tracer
        self._duration = inst.duration
        self._propagate = propagate
        self._target = f"{host}:{port}"
        self._base: dict[str, Any] = {"db.system.name": DB_SYSTEM, "server.address": host, "server.port": port}

    async def request(
        self,
        call: Callable[..., Awaitable[tuple[bytes, HybridLogicalClock | None]]],
        cmd: _Base[Any],
        timeout: float | None,
        fencing_token: HybridLogicalClock | None,
        persist: bool,
    ) -> tuple[bytes, HybridLogicalClock | None]:
        """``call(cmd, ...)`` (the client's untraced request) in a client span, its duration recorded."""
        verb = _VERBS.get(cmd.VERB)
        if verb is None:
            verb = _VERBS[cmd.VERB] = cmd.VERB.decode("ascii", "replace")
        attrs = dict(self._base)
        attrs["db.operation.name"] = verb
        trace = self._trace
        span = None
        if self._tracer is not None:
            try:
                span = self._tracer.start_span(f"{verb} {self._target}", kind=trace.SpanKind.CLIENT, attributes=attrs)
            except Exception:  # e.g. a span processor whose on_start raises: this request goes untraced
                _broken("starting a request's span")
        attempts = [0]
        token = _ATTEMPTS.set(attempts)
        start = time.perf_counter()
        error: str | None = None
        status: str | None = None
        message: str | None = None
        try:
            if span is None:
                result = await call(cmd, timeout=timeout, fencing_token=fencing_token, persist=persist)
            else:
                with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                    result = await call(cmd, timeout=timeout, fencing_token=fencing_token, persist=persist)
            payload = result[0]
            if payload[:1] == b"-":  # a RESP error reply: -ERR <text> (docs/design/protocol.md §3)
                message = payload[5:].rstrip(b"\r\n").decode("utf-8", "replace")
                error = type(service_error(message)).__name__
                status = "ERR"
            return result
        except Exception as exc:
            error = type(exc).__name__
            code = getattr(exc, "status", None)
            status = str(code) if isinstance(code, int) else None
            message = str(exc)
            raise
        finally:
            _ATTEMPTS.reset(token)
            elapsed = time.perf_counter() - start
            if error is not None:
                attrs["error.type"] = error
                if status is not None:
                    attrs["db.response.status_code"] = status
            if self._duration is not None:
                try:
                    self._duration.record(elapsed, attrs)
                except Exception:
                    _broken("recording a request's duration")
            if span is not None:
                try:
                    self._end(span, attrs, error, message, attempts[0] - 1)
                except Exception:  # e.g. a span processor whose on_end raises: the call's outcome stands
                    _broken("ending a request's span")

    def _end(self, span: Any, attrs: dict[str, Any], error: str | None, message: str | None, resends: int) -> None:
        if error is not None:
            span.set_attributes(attrs)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))
        if resends > 0:
            span.set_attribute("sskv.request.resends", resends)
        span.end()

    def published(self, props: list[tuple[str, str]]) -> None:
        """A publish of the current request (first or resend): counts it, adds the W3C trace context."""
        attempts = _ATTEMPTS.get(None)
        if attempts is not None:
            attempts[0] += 1
        if not self._propagate:
            return
        try:
            ctx = self._trace.get_current_span().get_span_context()
            if not ctx.is_valid:  # no span active: nothing on the wire
                return
            context = [("traceparent", f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}")]
            if ctx.trace_state:
                context.append(("tracestate", ctx.trace_state.to_header()))
        except Exception:  # a span of a broken provider: the request goes without trace context
            _broken("reading the current span's trace context")
            return
        props.extend(context)
