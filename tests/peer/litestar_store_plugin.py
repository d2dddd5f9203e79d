"""A pytest plugin for Litestar's own tests (``run_litestar_suite.py``): every ``MemoryStore()`` they make, and
every store an app's ``StoreRegistry`` makes by default, is a ``StateStoreStore`` (a namespace of its own) on the
broker ``SSKV_PEER_URL`` names, opened on an event loop of its own thread: the tests' loop and the app's
(a ``TestClient`` runs the app on another thread's loop) both use it from another loop. ``SSKV_PEER_LOCAL_CACHE``
set to a size gives every store a local cache of that many entries."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import uuid
from typing import Any

import litestar.stores.memory
import litestar.stores.registry

from sskv_mapping.integrations.litestar import StateStoreStore

_loop = asyncio.new_event_loop()
_thread = threading.Thread(target=_loop.run_forever, name="sskv-litestar-peer", daemon=True)
_thread.start()
_root = StateStoreStore(
    os.environ["SSKV_PEER_URL"],
    namespace=f"ltpeer-{uuid.uuid4().hex[:8]}",
    local_cache_size=int(os.environ.get("SSKV_PEER_LOCAL_CACHE") or 0),
)
asyncio.run_coroutine_threadsafe(_root.__aenter__(), _loop).result(30)
_names = itertools.count()


class StateStoreAsMemoryStore:
    """What ``MemoryStore()`` makes here: a fresh namespace of the state store."""

    def __new__(cls, *args: Any, **kwargs: Any) -> StateStoreStore:  # type: ignore[misc]  # not an instance of cls
        return _root.with_namespace(f"s{next(_names)}")


litestar.stores.memory.MemoryStore = StateStoreAsMemoryStore  # type: ignore[misc, assignment]  # our store in its place
litestar.stores.registry.MemoryStore = StateStoreAsMemoryStore  # type: ignore[attr-defined, assignment]  # not re-exported there


def pytest_unconfigure() -> None:
    asyncio.run_coroutine_threadsafe(_root.__aexit__(None, None, None), _loop).result(30)
    _loop.call_soon_threadsafe(_loop.stop)
    _thread.join(10)
