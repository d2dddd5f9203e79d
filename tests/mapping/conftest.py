"""One contract, two implementations: every dict test takes ``store_backend`` (tests/conftest.py), so it runs on
the in-process loopback store (fast) and on a real mosquitto + the emulator process (real).

``namespace`` and ``store_backend`` are suite-wide (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sskv_mapping.mapping import StateStoreDict
from tests._support.store_backend import StoreBackend

DictFactory = Callable[..., StateStoreDict[Any]]


@pytest.fixture
def make_dict(store_backend: StoreBackend, namespace: str) -> Iterator[DictFactory]:
    """``make_dict(**kw)``: a new StateStoreDict on a new client, same namespace unless given."""
    made: list[StateStoreDict[Any]] = []

    def make(**kwargs: Any) -> StateStoreDict[Any]:
        kwargs.setdefault("namespace", namespace)
        d: StateStoreDict[Any] = StateStoreDict(store_backend.client(), **kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


@pytest.fixture
def d(make_dict: DictFactory) -> StateStoreDict[Any]:
    return make_dict()
