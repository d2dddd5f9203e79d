"""Helpers shared by the framework adapters: loud import guards and one connection per process.

Must not import any framework.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType
from typing import Any

from .._transport.settings import ConnectionSettings, TlsSettings
from ..client._client import CONNECTION_OPTIONS, StateStoreClient
from ..errors import ConfigurationError

__all__ = ["CONNECTION_OPTIONS", "import_extra", "request_timeout", "settings_from_options", "shared_client"]


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


def settings_from_options(location: str | None, options: dict[str, Any]) -> ConnectionSettings:
    """Connection settings from a broker URL (``mqtt://host:port``, ``mqtts://``) and framework options.

    The one convention of every adapter for Azure IoT Operations: where a URL goes (Django's ``LOCATION``, the
    others' ``url``), ``"env:"`` reads the ``AIO_*`` environment variables and a connection string
    (``HostName=aio-broker;TcpPort=1883;UseTls=false``) is taken as the SDKs take it
    (:meth:`ConnectionSettings.from_url`); the options given here apply on top.

    Options understood: ``client_id``, ``username``, ``password``, ``sat_token_file``, ``keepalive``,
    ``connect_timeout``, and ``tls`` (a :class:`TlsSettings` or a dict of its fields).
    """
    conn: dict[str, Any] = {}
    for name in ("client_id", "username", "password", "sat_token_file", "keepalive", "connect_timeout"):
        if options.get(name) is not None:
            conn[name] = options[name]
    tls = options.get("tls")
    if isinstance(tls, dict):
        tls = TlsSettings(**tls)
    if tls is not None:
        conn["tls"] = tls
    return ConnectionSettings.from_url(location or "mqtt://127.0.0.1:1883", **conn)


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


def _after_fork() -> None:
    global _lock
    _clients.clear()  # the parent's connections (and loop thread) do not exist in the child
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
