"""The ``statestore_server`` fixture's store (mosquitto and the emulator process) and ``statestore_live``."""

from __future__ import annotations

import atexit
import contextlib
from typing import Any, Self

from ..emulator.broker import EMULATOR_QUEUE_SETTINGS, MosquittoBroker, MosquittoStartError
from ..emulator.launcher import EmulatorProcess, start_emulator
from ..errors import ConfigurationError, StateStoreStartError
from ._faces import StoreFaces

__all__ = ["LiveStore", "StateStoreServer", "live_servers"]

_LIVE: set[StateStoreServer] = set()


@atexit.register
def _stop_all() -> None:  # a crashed test run must not leave a broker or an emulator behind
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop()


def live_servers() -> list[StateStoreServer]:
    """The :class:`StateStoreServer` objects started in this process and not stopped yet."""
    return list(_LIVE)


class StateStoreServer:
    """A private mosquitto on a free loopback port with the emulator process serving on it.

    What the ``statestore_server`` fixture starts once per test session (once per pytest-xdist worker). The
    emulator is ``python -m sskv_mapping.emulator``: the same program as ``sskv emulator``.

    Args:
        host: the loopback address to serve on.
        emulator_args: more arguments of the emulator (``"--max-keys", "100"``...).
        timeout: seconds to wait for each to be ready.

    Example:
        >>> with StateStoreServer() as server:  # doctest: +SKIP
        ...     print(server.url)  # mqtt://127.0.0.1:40123
    """

    def __init__(self, *, host: str = "127.0.0.1", emulator_args: tuple[str, ...] = (), timeout: float = 30.0) -> None:
        self.host = host
        self.emulator_args = tuple(emulator_args)
        self.timeout = timeout
        self.broker: MosquittoBroker | None = None
        #: the emulator process, once started
        self.emulator: EmulatorProcess | None = None
        self._output = ""

    @property
    def port(self) -> int:
        """The broker's port."""
        if self.broker is None:
            raise RuntimeError("the state store server is not started")
        return self.broker.port

    @property
    def url(self) -> str:
        """``mqtt://HOST:PORT``: where every client, face and framework adapter connects."""
        return f"mqtt://{self.host}:{self.port}"

    @property
    def output(self) -> str:
        """What the emulator process printed so far."""
        return self.emulator.output if self.emulator is not None else self._output

    def __repr__(self) -> str:
        where = self.url if self.broker is not None else "not started"
        return f"<StateStoreServer {where}>"

    def start(self) -> Self:
        """Start mosquitto, then the emulator, and return once the emulator serves.

        Raises:
            StateStoreStartError: mosquitto is not installed (the message has the command that installs it), or
                either process failed to start (with its output).
        """
        try:
            self.broker = MosquittoBroker(host=self.host, extra_config=EMULATOR_QUEUE_SETTINGS).start()
        except ConfigurationError as exc:  # no mosquitto executable: MOSQUITTO_NOT_FOUND, with the install line
            raise StateStoreStartError(f"the statestore_server fixture needs mosquitto: {exc}") from None
        except MosquittoStartError as exc:
            raise StateStoreStartError(f"could not start a private mosquitto: {exc}") from None
        _LIVE.add(self)
        try:
            self.emulator = start_emulator(self.host, self.port, *self.emulator_args, timeout=self.timeout)
        except StateStoreStartError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the emulator (SIGTERM, then SIGKILL after 5 s) and the broker. Idempotent."""
        emulator, self.emulator = self.emulator, None
        if emulator is not None:
            emulator.stop()
            self._output = emulator.output
        if self.broker is not None:
            self.broker.stop()
        _LIVE.discard(self)

    def __enter__(self) -> Self:
        return self.start() if self.broker is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LiveStore(StoreFaces):
    """One test's namespace on a :class:`StateStoreServer`: what the ``statestore_live`` fixture gives.

    Clients and faces made here connect over the network to the real broker, on real time (no fake clock).
    The ``*_config`` / ``*_caches`` / ``*_store`` / ``*_lifespan`` helpers give each framework adapter its
    settings for this store and namespace.
    """

    #: no fake clock: a live store runs on real time
    clock: None = None

    def __init__(self, server: StateStoreServer, namespace: str) -> None:
        super().__init__(namespace)
        self.server = server

    def __repr__(self) -> str:
        return f"<LiveStore {self.url} namespace={self.namespace!r}>"

    @property
    def url(self) -> str:
        """The server's ``mqtt://HOST:PORT``."""
        return self.server.url

    def _client_kwargs(self) -> dict[str, Any]:
        return {"host": self.server.host, "port": self.server.port}

    def _async_client_kwargs(self) -> dict[str, Any]:
        return self._client_kwargs()

    def django_caches(self, alias: str = "default", **options: Any) -> dict[str, Any]:
        """Django's ``CACHES`` for the state store backend here, in the test's namespace; ``options`` go to
        ``OPTIONS`` (``max_staleness``, ``local_cache_size``...). Use it with ``override_settings(CACHES=...)``
        or the pytest-django ``settings`` fixture."""
        return {
            alias: {
                "BACKEND": "sskv_mapping.integrations.django.StateStoreCache",
                "LOCATION": self.url,
                "OPTIONS": {"namespace": self.namespace, **options},
            }
        }

    def flask_config(self, **options: Any) -> dict[str, Any]:
        """Flask-Caching's config keys for the state store backend here (``app.config.update(...)``), the test's
        namespace as ``CACHE_KEY_PREFIX``; ``options`` go to ``CACHE_OPTIONS``."""
        config: dict[str, Any] = {
            "CACHE_TYPE": "sskv_mapping.integrations.flask_caching.StateStoreCache",
            "CACHE_SSKV_URL": self.url,
            "CACHE_KEY_PREFIX": self.namespace,
        }
        if options:
            config["CACHE_OPTIONS"] = options
        return config

    def aiocache_config(self, alias: str = "default", **options: Any) -> dict[str, Any]:
        """``aiocache.caches.set_config(...)``'s argument for the state store backend here, in the test's
        namespace (``sskv_namespace``); ``options`` are the backend's (``ttl``, ``serializer``...)."""
        return {
            alias: {
                "cache": "sskv_mapping.integrations.aiocache.StateStoreCache",
                "url": self.url,
                "sskv_namespace": self.namespace,
                **options,
            }
        }

    def litestar_store(self, **options: Any) -> Any:
        """A Litestar ``StateStoreStore`` on this store, in the test's namespace (needs the ``litestar`` extra);
        give the app its ``lifespan`` as the docs say."""
        from ..integrations.litestar import StateStoreStore

        return StateStoreStore(self.url, namespace=self.namespace, **options)

    def fastapi_lifespan(self, **options: Any) -> Any:
        """``statestore_lifespan(...)`` for ``FastAPI(lifespan=...)`` on this store, in the test's namespace
        (needs the ``fastapi`` extra); ``options`` as for it (``dict_options``, ``timeout``...)."""
        from ..integrations.fastapi import statestore_lifespan

        return statestore_lifespan(self.url, namespace=self.namespace, **options)
