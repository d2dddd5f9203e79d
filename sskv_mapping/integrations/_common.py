"""Helpers shared by the framework adapters: loud import guards and one shared client per process and broker."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar, cast

from .._fork import in_child_after_fork
from .._transport.settings import ConnectionSettings
from ..client._client import ConnectionState, StateStoreClient
from ..errors import ConfigurationError

__all__ = [
    "close_shared_clients",
    "close_shared_objects",
    "import_extra",
    "request_timeout",
    "shared_client",
    "shared_object",
]

T = TypeVar("T", bound="_Closeable")


def import_extra(module: str, extra: str, integration: str) -> ModuleType:
    """Import a framework module or raise an ImportError naming the ``pip install`` line."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"sskv_mapping.integrations.{integration} needs {module.split('.')[0]}: pip install 'sskv-mapping[{extra}]'"
        ) from exc


def request_timeout(value: object, what: str = "request_timeout") -> float | None:
    """A per-request timeout option: positive seconds, or ``None`` (wait forever)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{what} must be positive seconds or None, not {value!r}")
    return float(value)


_lock = threading.Lock()
_clients: dict[tuple[Any, ...], StateStoreClient] = {}


def _identity(settings: ConnectionSettings) -> tuple[Any, ...]:
    # one connection per broker and identity; the generated client id does not make two settings different
    return (settings.host, settings.port, settings.username, settings.password, settings.tls, settings.sat_token_file)


def shared_client(settings: ConnectionSettings, *, timeout: float | None = 10.0) -> StateStoreClient:
    """The process-wide connected client for these settings (frameworks build many backends, one per thread
    or per request; they all share one MQTT connection). Replaced in a forked child."""
    key = (*_identity(settings), timeout)
    with _lock:
        client = _clients.get(key)
        if client is None or client.state.value == "closed":
            client = StateStoreClient(settings=settings, timeout=timeout)
            client.connect()
            _clients[key] = client
        return client


def close_shared_clients() -> None:
    """Close every shared client (tests and app shutdown)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


class _Closeable(Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True)
class _Shared:
    client: StateStoreClient  # kept referenced: its id is part of the registry key
    value: _Closeable
    keep_alive: object = None  # an object whose id is part of the key (e.g. a codec instance) stays alive


_objects_lock = threading.Lock()
_objects: dict[tuple[Any, ...], _Shared] = {}


def _closed(client: StateStoreClient) -> bool:
    return client.state is ConnectionState.CLOSED


def shared_object(
    client: StateStoreClient, key: tuple[Any, ...], build: Callable[[], T], keep_alive: object = None
) -> T:
    """The process-wide object ``build()`` made for ``key`` on ``client`` (a cache or dict every backend object
    of a framework shares); made again once its connection has closed. ``keep_alive``: whatever ``key`` holds
    the ``id`` of. Replaced in a forked child."""
    full = (id(client), *key)
    with _objects_lock:
        for stale in [k for k, s in _objects.items() if _closed(s.client)]:
            del _objects[stale]
        shared = _objects.get(full)
        if shared is None:
            shared = _objects[full] = _Shared(client, build(), keep_alive)
        return cast(T, shared.value)


def close_shared_objects() -> None:
    """Close every object :func:`shared_object` made, then their connections (process shutdown, tests)."""
    with _objects_lock:
        shared = list(_objects.values())
        _objects.clear()
    clients: dict[int, StateStoreClient] = {}
    for s in shared:
        if not _closed(s.client):
            s.value.close()
        clients[id(s.client)] = s.client
    for client in clients.values():
        client.close()


def _after_fork() -> None:
    global _lock, _objects_lock
    # the parent's connections (and loop thread), and what was built on them, do not exist in the child
    _clients.clear()
    _objects.clear()
    _lock = threading.Lock()
    _objects_lock = threading.Lock()


in_child_after_fork(_after_fork)  # the package's one fork hook (sskv_mapping._fork), as every face's
