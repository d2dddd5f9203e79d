"""A Flask-Caching backend over the state store, named by dotted path in the app's config.

Config keys and the signed-pickle default: docs/integrations/flask.md.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import math
import threading
from collections.abc import Iterable
from typing import Any, cast

from .._fork import generation
from .._transport.settings import CONNECTION_OPTIONS, DEFAULT_URL, settings_from_options
from ._common import import_extra, shared_client
from ._common import request_timeout as _request_timeout

import_extra("flask_caching", "flask", "flask_caching")

from flask import Flask  # noqa: E402
from flask_caching.backends.base import BaseCache  # noqa: E402

from .. import cache as core  # noqa: E402
from ..cache import translate_ttl  # noqa: E402
from ..client import UNSET, StateStoreClient  # noqa: E402
from ..codecs import Codec, MsgpackCodec, PickleCodec  # noqa: E402
from ..errors import StateStoreError  # noqa: E402
from ..local_cache import DEFAULT_MAX_STALENESS  # noqa: E402
from ..mapping import StateStoreDict  # noqa: E402

__all__ = ["DEFAULT_URL", "StateStoreCache"]


def _whole_seconds(timeout: int | float | dt.timedelta | None) -> int:
    if timeout is None:
        return 0
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
    return math.ceil(seconds) if isinstance(seconds, float) and math.isfinite(seconds) else int(seconds)


def _derived_key(secret: str | bytes) -> bytes:
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    return hmac.new(raw, b"sskv_mapping.integrations.flask_caching signed cache values", hashlib.sha256).digest()


def default_codec(secret_key: str | bytes | None) -> Codec[Any]:
    """The codec an app gets by default: key-bound signed pickle from its ``SECRET_KEY``, else msgpack."""
    if secret_key:
        return PickleCodec(key=_derived_key(secret_key), bind_key=True)
    return MsgpackCodec()


class StateStoreCache(BaseCache):
    """Flask-Caching backend: ``CACHE_TYPE = "sskv_mapping.integrations.flask_caching.StateStoreCache"``.

    Implements Flask-Caching's (cachelib's) cache API: ``get``, ``set``, ``add``, ``delete``, ``has``,
    ``clear``, ``get_many``, ``get_dict``, ``set_many``, ``delete_many``, ``inc``, ``dec``, plus ``touch``.
    Timeouts follow Flask-Caching: ``None`` is the default timeout, ``0`` never expires, a negative one
    expires at once.

    Args:
        url: the broker URL (ignored when ``client`` is given).
        namespace: the state store namespace holding the entries.
        default_timeout: seconds (or a timedelta) used when a call passes no timeout; ``0``/``None``: never.
        ignore_delete_many_errors: report keys that could not be deleted instead of raising (cachelib).
        codec: a codec or its name; by default msgpack (built by Flask-Caching from an app with a
            ``SECRET_KEY``: signed pickle, see docs/integrations/flask.md).
        local_cache_size: keep up to this many hot entries in process, kept current by notifications.
        max_staleness: serve a local entry only within this many seconds of its last confirmation (a lost
            notification leaves a value stale at most that long); ``None``: trust notifications forever.
        client: a connected :class:`StateStoreClient` to use instead of the process-wide shared one (then a
            forked worker cannot use this backend: the client is the parent's).
        request_timeout: seconds to wait for each request to the store (``None``: forever).
        **connection: connection options for :func:`settings_from_options` (``username``, ``tls``...).

    Example:
        >>> cache = StateStoreCache(url="mqtt://127.0.0.1:1883", namespace="web")  # doctest: +SKIP
        >>> cache.set("greeting", "hello", timeout=0)  # never expires  # doctest: +SKIP
        True
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str = "flask_cache_",
        default_timeout: int | float | dt.timedelta | None = 300,
        ignore_delete_many_errors: bool = False,
        codec: Codec[Any] | str | None = None,
        local_cache_size: int = 0,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        client: StateStoreClient | None = None,
        request_timeout: float | None = 10.0,
        **connection: Any,
    ) -> None:
        unknown = set(connection) - set(CONNECTION_OPTIONS)
        if unknown:
            raise TypeError(f"unexpected StateStoreCache option(s): {', '.join(sorted(unknown))}")
        default_ttl = translate_ttl(UNSET, "flask", default_timeout)  # validates before connecting
        # cachelib keeps whole seconds in ``default_timeout``; the exact configured value is kept for the TTLs
        super().__init__(default_timeout=_whole_seconds(default_timeout))
        # set here: Flask-Caching 2.0 takes no such argument (it calls the flag ``ignore_errors``)
        self.ignore_delete_many_errors = self.ignore_errors = ignore_delete_many_errors
        self._default_timeout = default_timeout
        self._options: dict[str, Any] = {
            "namespace": namespace,
            "codec": default_codec(None) if codec is None else codec,
            "default_ttl": default_ttl,
            "local_cache_size": local_cache_size,
            "max_staleness": max_staleness,
        }
        #: how to reach the process-wide shared connection (``None``: the caller's ``client``, never replaced)
        self._shared: tuple[Any, float | None] | None = None
        if client is None:
            self._shared = (settings_from_options(url or DEFAULT_URL, connection), _request_timeout(request_timeout))
            client = shared_client(self._shared[0], timeout=self._shared[1])
        self._lock = threading.Lock()
        self._made_in = generation()
        self._dicts: dict[tuple[Any, ...], StateStoreDict[Any]] = {}
        self._built: core.StateStoreCache[Any] = core.StateStoreCache(client, **self._options)

    @classmethod
    def factory(cls, app: Flask, config: dict[str, Any], args: list[Any], kwargs: dict[str, Any]) -> StateStoreCache:
        """Flask-Caching's backend factory: ``kwargs`` holds ``default_timeout``, ``ignore_delete_many_errors``
        and ``CACHE_OPTIONS``; the URL and the namespace come from ``config``."""
        options = dict(kwargs)
        if "codec" not in options:
            options["codec"] = default_codec(app.config.get("SECRET_KEY"))
        options.setdefault("namespace", config.get("CACHE_KEY_PREFIX") or "flask_cache_")
        options.setdefault("ignore_delete_many_errors", bool(config.get("CACHE_IGNORE_ERRORS", False)))
        if not args:  # CACHE_ARGS, if any, start with the URL
            options.setdefault("url", config.get("CACHE_SSKV_URL") or DEFAULT_URL)
        return cls(*args, **options)

    # -- plumbing ---------------------------------------------------------------------------------------

    @property
    def _cache(self) -> core.StateStoreCache[Any]:
        """The cache of this process: in a worker forked after the app was made (gunicorn ``--preload``,
        uWSGI), one made anew on the worker's own connection (its own client id) at its first use."""
        if self._made_in != generation() and self._shared is not None:
            with self._lock:
                if self._made_in != generation():
                    client = shared_client(self._shared[0], timeout=self._shared[1])
                    self._built = core.StateStoreCache(client, **self._options)
                    self._dicts = {}
                    self._made_in = generation()
        return self._built

    def shared_dict(
        self, namespace: str, *, codec: Codec[Any] | str | None = None, local_cache_size: int = 10_000
    ) -> StateStoreDict[Any]:
        """This backend's :class:`~sskv_mapping.StateStoreDict` of ``namespace`` on its connection, made on first
        use (and again in a forked worker: keep the backend, not the dict, across a fork). ``codec`` and
        ``local_cache_size`` as the dict takes them; the same arguments give the same dict."""
        cache = self._cache
        key = (namespace, codec if codec is None or isinstance(codec, str) else id(codec), local_cache_size)
        with self._lock:
            found = self._dicts.get(key)
            if found is None:
                found = self._dicts[key] = StateStoreDict(
                    cache.client, namespace=namespace, codec=codec, local_cache_size=local_cache_size
                )
            return found

    @property
    def sskv_cache(self) -> core.StateStoreCache[Any]:
        """The :class:`~sskv_mapping.cache.StateStoreCache` behind this backend (stats, ``get_or_set``)."""
        return self._cache

    @property
    def client(self) -> StateStoreClient:
        """The connection this backend uses (shared by the process): open a ``StateStoreDict`` on it too."""
        return self._cache.client

    @property
    def namespace(self) -> str:
        """The state store namespace of this backend; ``clear()`` empties only it."""
        return self._cache.namespace

    def _ttl(self, timeout: int | float | dt.timedelta | None) -> float | None:
        return translate_ttl(timeout, "flask", self._default_timeout)

    def close(self) -> None:
        """Stop this backend's watches and close its dicts (the shared connection stays open for the process's
        other users)."""
        with self._lock:
            dicts, self._dicts = list(self._dicts.values()), {}
        for d in dicts:
            d.close()
        self._cache.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} namespace={self.namespace!r}>"

    # -- cachelib's API ------------------------------------------------------------------------------------

    def get(self, key: str) -> Any:
        """The value, or ``None`` if absent (cachelib's API)."""
        return self._cache.get(key)

    def has(self, key: str) -> bool:
        """Whether the key is present."""
        return self._cache.exists(key)

    def get_many(self, *keys: str) -> list[Any]:
        """The values of ``keys``, ``None`` for each absent one, in order."""
        found = self._cache.get_many(keys)
        return [found.get(k) for k in keys]

    def set(self, key: str, value: Any, timeout: int | float | dt.timedelta | None = None) -> bool:
        """Store ``value`` for ``timeout`` seconds (``None``: the default timeout; ``0``: never expires)."""
        self._cache.set(key, value, self._ttl(timeout))
        return True

    def add(self, key: str, value: Any, timeout: int | float | dt.timedelta | None = None) -> bool:
        """Store ``value`` only if the key is absent (``SET NX``); whether it was stored."""
        return self._cache.add(key, value, self._ttl(timeout))

    def set_many(self, mapping: dict[str, Any], timeout: int | float | dt.timedelta | None = None) -> list[Any]:
        """Store every pair; returns the keys that were stored."""
        failed = set(self._cache.set_many(mapping, self._ttl(timeout)))
        return [k for k in mapping if k not in failed]

    def delete(self, key: str) -> bool:
        """Delete the key; whether it existed."""
        return self._cache.delete(key)

    def delete_many(self, *keys: str) -> list[Any]:
        """Delete the keys; returns those gone afterwards (an absent key counts as deleted, as in cachelib)."""
        wanted = list(dict.fromkeys(keys))
        try:
            self._cache.delete_many(wanted)
        except StateStoreError:
            return self._delete_one_by_one(wanted)
        return wanted

    def _delete_one_by_one(self, keys: Iterable[str]) -> list[Any]:
        deleted: list[Any] = []
        failed: list[str] = []
        for key in keys:
            try:
                self._cache.delete(key)
            except StateStoreError:
                failed.append(key)
            else:
                deleted.append(key)
        if failed and not self.ignore_delete_many_errors:
            raise RuntimeError(f"Failed to delete keys: {failed}")
        return deleted

    def clear(self) -> bool:
        """Delete every entry of this backend's namespace (and nothing else)."""
        self._cache.clear()
        return True

    def inc(self, key: str, delta: int = 1) -> int | None:
        """Add ``delta`` and return the new value, exact across processes; an absent key starts at ``delta``
        (stored with the default timeout). The counter's expiry restarts at the default timeout on every
        increment: the state store cannot report a key's remaining TTL."""
        while True:
            try:
                return cast(int, self._cache.incr(key, delta))
            except ValueError as exc:
                if isinstance(exc, StateStoreError):  # a bad key or an undecodable value, not "absent"
                    raise
            if self._cache.add(key, delta):  # absent: create it, unless another writer just did
                return delta

    def dec(self, key: str, delta: int = 1) -> int | None:
        """Subtract ``delta`` and return the new value, exact across processes (see ``inc``)."""
        return self.inc(key, -delta)

    def touch(self, key: str, timeout: int | float | dt.timedelta | None = None) -> bool:
        """Restart the key's expiry at ``timeout`` without changing its value (not part of cachelib's API)."""
        return self._cache.touch(key, self._ttl(timeout))
