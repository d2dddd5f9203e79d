"""End-to-end: the traced example app over HTTP (FastAPI's TestClient) against mosquitto and the emulator process;
the state store's spans are children of the request's span."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.instrumentation.fastapi")

from fastapi.testclient import TestClient
from opentelemetry.trace import SpanKind

from otel_app.app import create_app
from sskv_mapping._telemetry import DB_SYSTEM
from tests._support.otel import Otel


def test_the_cache_calls_are_children_of_the_request_span(
    otel: Otel, statestore_url: str, statestore_namespace: str
) -> None:
    with TestClient(create_app(statestore_url, name=statestore_namespace)) as http:
        otel.spans.clear()  # what opening the app's cache and dict sent is not a request's
        assert "<h1>Hello!</h1>" in http.get("/").text
        spans = otel.finished()  # before the app stops (its watches' STOPs are not the request's)
    (request,) = [s for s in spans if s.kind is SpanKind.SERVER]
    assert request.name == "GET /"
    ours = [s for s in spans if s.attributes and s.attributes.get("db.system.name") == DB_SYSTEM]
    # the page cache missed (GET), rendered with a settings read, and stored the page: at least three requests
    assert len(ours) >= 3, [s.name for s in spans]
    assert {s.attributes["db.operation.name"] for s in ours} >= {"GET", "SET"}
    for span in ours:
        assert span.kind is SpanKind.CLIENT
        assert span.context.trace_id == request.context.trace_id
        assert span.parent is not None and span.parent.span_id == request.context.span_id
