"""One contract, two implementations: every dict test runs on the in-process loopback store (fast) and on
a real mosquitto + the emulator process (real).

``namespace`` and ``loopback_store`` are suite-wide (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.inprocess import InProcessStateStore
from sskv_mapping.mapping import StateStoreDict

DictFactory = Callable[..., StateStoreDict[Any]]


@pytest.fixture(params=["loopback", "broker"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Client arguments for one implementation of the store."""
    if request.param == "loopback":
        store: InProcessStateStore = request.getfixturevalue("loopback_store")
        return {"connection_factory": store.broker.connection}
    broker = request.getfixturevalue("mosquitto")
    request.getfixturevalue("emulator")
    request.applymarker(pytest.mark.broker)
    return {"host": broker.host, "port": broker.port}


@pytest.fixture
def make_client(backend: dict[str, Any]) -> Iterator[Callable[..., StateStoreClient]]:
    made: list[StateStoreClient] = []

    def make(**kwargs: Any) -> StateStoreClient:
        client = StateStoreClient(**{**backend, **kwargs})
        client.connect()
        made.append(client)
        return client

    yield make
    for c in made:
        c.close()


@pytest.fixture
def make_dict(make_client: Callable[..., StateStoreClient], namespace: str) -> Iterator[DictFactory]:
    """``make_dict(**kw)``: a new StateStoreDict on a new client, same namespace unless given."""
    made: list[StateStoreDict[Any]] = []

    def make(**kwargs: Any) -> StateStoreDict[Any]:
        kwargs.setdefault("namespace", namespace)
        d: StateStoreDict[Any] = StateStoreDict(make_client(), **kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


@pytest.fixture
def d(make_dict: DictFactory) -> StateStoreDict[Any]:
    return make_dict()
