"""What both fixtures hand out: connected clients, a dict, a cache and a lock, all closed at the test's end."""

from __future__ import annotations

from typing import Any

from ..cache._cache import StateStoreCache
from ..client._client import AsyncStateStoreClient, StateStoreClient
from ..lock import LeasedLock
from ..mapping._dict import StateStoreDict

__all__ = ["StoreFaces"]


class StoreFaces:
    """Connected clients and ready faces on one store, in the test's namespace; :meth:`close` closes them all.

    Subclasses say how a client reaches the store (:meth:`_client_kwargs`, :meth:`_async_client_kwargs`) and
    what the faces take besides (:meth:`_face_kwargs`: a fake clock's ``monotonic``; none: the real clock).
    """

    #: the test's own namespace: the faces use it unless told another
    namespace: str

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._client: StateStoreClient | None = None
        self._owned: list[Any] = []  # clients and faces, closed in reverse order

    def _client_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    def _async_client_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    def _face_kwargs(self) -> dict[str, Any]:
        return {}

    @property
    def client(self) -> StateStoreClient:
        """A connected blocking client (made on first use, shared by the faces made here, closed at the end)."""
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def new_client(self, **options: Any) -> StateStoreClient:
        """Another connected blocking client (another "process"); ``options`` as for
        :class:`~sskv_mapping.StateStoreClient` (``client_id``, ``timeout``...). Closed at the end of the test."""
        client = StateStoreClient(**{**self._client_kwargs(), **options})
        self._owned.append(client)
        client.connect()
        return client

    def async_client(self, **options: Any) -> AsyncStateStoreClient:
        """An :class:`~sskv_mapping.AsyncStateStoreClient` for this store, not yet connected: open it with
        ``async with`` on the test's event loop (any loop: the test's, a framework test client's)."""
        return AsyncStateStoreClient(**{**self._async_client_kwargs(), **options})

    def dict(self, namespace: str | None = None, **options: Any) -> StateStoreDict[Any]:
        """A :class:`~sskv_mapping.StateStoreDict` on :attr:`client`, in the test's namespace unless given;
        ``options`` as for the dict (``codec``, ``max_staleness``, ``cache_ttl``...)."""
        options = {**self._face_kwargs(), **options}
        face: StateStoreDict[Any] = StateStoreDict(self.client, namespace=namespace or self.namespace, **options)
        self._owned.append(face)
        return face

    def cache(self, namespace: str | None = None, **options: Any) -> StateStoreCache[Any]:
        """A :class:`~sskv_mapping.StateStoreCache` on :attr:`client`, in the test's namespace unless given;
        ``options`` as for the cache (``default_ttl``, ``local_cache_size``, ``max_staleness``...)."""
        options = {**self._face_kwargs(), **options}
        face: StateStoreCache[Any] = StateStoreCache(self.client, namespace=namespace or self.namespace, **options)
        self._owned.append(face)
        return face

    def lock(self, name: str, *, client: StateStoreClient | None = None, **options: Any) -> LeasedLock:
        """A :class:`~sskv_mapping.LeasedLock` named ``name`` on ``client`` (default :attr:`client`; give
        :meth:`new_client` to play a second process); ``options`` as for the lock (``lease``, ``holder``...)."""
        return LeasedLock(client or self.client, name, **{**self._face_kwargs(), **options})

    def close(self) -> None:
        """Close every face and client made here (the test's teardown calls it; closing earlier is fine)."""
        owned, self._owned = self._owned, []
        self._client = None
        failures: list[Exception] = []
        for thing in reversed(owned):
            try:
                thing.close()
            except Exception as exc:  # one that failed to close must not keep the rest open; reported below
                failures.append(exc)
        if failures:
            raise failures[0]
