"""End-to-end: the hishel example app in two real ``uvicorn`` processes sharing the state store through mosquitto
and the emulator process: the second serves the response the first rendered, from the store."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("hishel")

import httpx

from sskv_mapping import StateStoreClient
from tests._support.uvicorn_server import UvicornServer, two_servers
from tests._support.waiting import eventually_sync

pytestmark = pytest.mark.broker


@pytest.fixture
def servers(statestore_url: str) -> Iterator[tuple[UvicornServer, UvicornServer]]:
    with two_servers("hishel_app.app:app", sskv_url=statestore_url, loop="asyncio") as pair:
        yield pair


def published(store: StateStoreClient, url: str) -> bool:
    """Whether the store's index names an entry for ``url``: hishel's middleware key, then the storage's index."""
    key = hashlib.sha256(f"RFC {url}".encode()).hexdigest()
    return store.get(f"hishel-example/idx/{hashlib.sha256(key.encode()).hexdigest()}") is not None


def test_a_second_worker_serves_the_first_ones_cached_response(
    servers: tuple[UvicornServer, UvicornServer], statestore_url: str
) -> None:
    a, b = servers
    path = f"/report?run={uuid.uuid4().hex}"  # a URL of this test's own: nothing cached yet
    # hishel's key is the URL with its host: behind a load balancer both workers see the site's one Host
    host = {"host": "reports.example"}
    with (
        httpx.Client(base_url=a.base_url, headers=host, timeout=30) as ca,
        httpx.Client(base_url=b.base_url, headers=host, timeout=30) as cb,
    ):
        first = ca.get(path)
        assert first.status_code == 200
        assert first.json()["rendered_by"] == a.pid
        # the entry is stored as its body is sent, and published just after the last byte: the client can have
        # the whole body (content-length) a moment before that
        store = StateStoreClient.from_url(statestore_url)
        store.connect()
        try:
            eventually_sync(lambda: published(store, f"http://reports.example{path}"), timeout=10)
        finally:
            store.close()
        second = cb.get(path)
        assert second.status_code == 200
        assert second.json() == first.json()  # rendered by A, served by B from the store
        assert "age" in second.headers  # hishel's mark of a stored response
        other = cb.get(f"/report?run={uuid.uuid4().hex}")
        assert other.json()["rendered_by"] == b.pid  # B renders what nobody cached
