"""A django-constance backend on a dict namespace (``pip install 'sskv-mapping[constance]'``).

``CONSTANCE_BACKEND = "sskv_mapping.integrations.constance.StateStoreBackend"``; settings: docs/guide/live-config.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._blocking import get_loop_thread
from .._keys import check_namespace
from .._transport.settings import CONNECTION_OPTIONS, DEFAULT_URL, settings_from_options
from ..errors import ConfigurationError
from ..mapping import StateStoreDict
from ._common import import_extra, request_timeout, shared_client, shared_object

_constance = import_extra("constance", "constance", "constance")
_conf = import_extra("django.conf", "constance", "constance")
_backends = import_extra("constance.backends", "constance", "constance")
_codecs = import_extra("constance.codecs", "constance", "constance")
_signals = import_extra("constance.signals", "constance", "constance")

if TYPE_CHECKING:

    class _Backend:
        """``constance.backends.Backend`` (constance ships no types): get/aget, mget/amget, set/aset."""

else:
    _Backend = _backends.Backend

__all__ = ["DEFAULT_NAMESPACE", "StateStoreBackend"]

#: The dict namespace constance's keys live in unless ``CONSTANCE_SSKV_NAMESPACE`` says another.
DEFAULT_NAMESPACE = "constance"


def _setting(name: str, default: Any) -> Any:
    return getattr(_conf.settings, f"CONSTANCE_SSKV_{name}", default)


def _dict() -> StateStoreDict[str]:
    """The process's dict on the configured namespace (one per broker and namespace, shared by every backend)."""
    location = _setting("LOCATION", DEFAULT_URL)
    options = _setting("OPTIONS", {})
    if not isinstance(options, dict):
        raise ConfigurationError(f"CONSTANCE_SSKV_OPTIONS must be a dict of {', '.join(CONNECTION_OPTIONS)}")
    namespace = _setting("NAMESPACE", DEFAULT_NAMESPACE)
    check_namespace(namespace)
    timeout = request_timeout(_setting("REQUEST_TIMEOUT", 10.0), "CONSTANCE_SSKV_REQUEST_TIMEOUT")
    client = shared_client(settings_from_options(location, options), timeout=timeout)
    built: StateStoreDict[str] = shared_object(
        client, ("constance", namespace), lambda: StateStoreDict(client, namespace=namespace, codec="str")
    )
    return built


class StateStoreBackend(_Backend):
    """django-constance's values in a dict namespace, each stored as constance's own JSON text.

    A read is a local-cache hit once the key was read (about a microsecond, plus constance's decoding); a change made
    by any process (the admin of another one, ``sskv set``) reaches every process's cache within milliseconds, by the
    store's notifications. Settings: ``CONSTANCE_SSKV_LOCATION`` (a broker URL, a connection string or ``"env:"``),
    ``CONSTANCE_SSKV_OPTIONS`` (connection options), ``CONSTANCE_SSKV_NAMESPACE``, ``CONSTANCE_SSKV_REQUEST_TIMEOUT``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._dict = _dict()
        self._async = self._dict.async_dict
        self._portal = get_loop_thread()

    @property
    def state_store_dict(self) -> StateStoreDict[str]:
        """The dict the values live in."""
        return self._dict

    @staticmethod
    def _loads(raw: str | None) -> Any:
        return None if raw is None else _codecs.loads(raw)

    def get(self, key: str) -> Any:
        return self._loads(self._dict.get(key))

    async def aget(self, key: str) -> Any:
        return self._loads(await self._portal.run_async(self._async.get(key)))

    def mget(self, keys: Iterable[str]) -> dict[str, Any]:
        found = {}
        for key in keys or ():
            value = self.get(key)
            if value is not None:
                found[key] = value
        return found

    async def amget(self, keys: Iterable[str]) -> dict[str, Any]:
        found = {}
        for key in keys or ():
            value = await self.aget(key)
            if value is not None:
                found[key] = value
        return found

    def set(self, key: str, value: Any) -> None:
        old = self.get(key)
        self._dict[key] = _codecs.dumps(value)
        self._updated(key, old, value)

    async def aset(self, key: str, value: Any) -> None:
        old = await self.aget(key)
        raw = _codecs.dumps(value)
        await self._portal.run_async(self._async.set(key, raw))
        self._updated(key, old, value)

    @staticmethod
    def _updated(key: str, old: Any, new: Any) -> None:
        # what constance's own backends send (its config object is lazy: made on first use, after Django's setup)
        _signals.config_updated.send(sender=_constance.config, key=key, old_value=old, new_value=new)
