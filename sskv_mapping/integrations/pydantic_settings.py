"""pydantic-settings on a dict namespace: a settings source, and settings kept current from ``changes()``.

``pip install 'sskv-mapping[pydantic-settings]'``; guide: docs/guide/live-config.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import ClientStateError, ConfigurationError
from ..mapping._changes import AsyncChangeStream, Change, ChangeStream
from ..mapping._dict import AsyncStateStoreDict, StateStoreDict
from ._common import import_extra

import_extra("pydantic_settings", "pydantic-settings", "pydantic_settings")

from pydantic import AliasChoices, AliasPath, ValidationError  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource  # noqa: E402

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

__all__ = ["AsyncLiveSettings", "LiveSettings", "StateStoreSettingsSource"]

log = logging.getLogger("sskv_mapping.settings")

S = TypeVar("S", bound=BaseSettings)

Store = StateStoreDict[Any] | AsyncStateStoreDict[Any] | Mapping[str, Any]

# (the dict, the snapshot to read instead of it): how the live helpers validate a state they hold, and how an async
# dict (which cannot be read synchronously) reaches a source pydantic-settings calls synchronously
_SNAPSHOT: contextvars.ContextVar[tuple[object, Mapping[str, Any]] | None] = contextvars.ContextVar(
    "sskv_settings_snapshot", default=None
)

_MISSING = object()


def _same_store(a: object, b: object) -> bool:
    return a is b or getattr(a, "async_dict", None) is b or getattr(b, "async_dict", None) is a


@contextlib.contextmanager
def _reading(store: object, snapshot: Mapping[str, Any]) -> Iterator[None]:
    token = _SNAPSHOT.set((store, snapshot))
    try:
        yield
    finally:
        _SNAPSHOT.reset(token)


class StateStoreSettingsSource(PydanticBaseSettingsSource):
    """Fields read from one dict namespace: field ``name`` -> key ``key_prefix + name`` (an alias is the key as is,
    as pydantic-settings' env source does); nested models and lists are stored as one value (the codec's JSON).

    Place it in ``settings_customise_sources`` beside the others, in the precedence wanted::

        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, secrets):
            return init_settings, env_settings, StateStoreSettingsSource(settings_cls, config, key_prefix="app.")

    ``store``: a :class:`~sskv_mapping.StateStoreDict` (read through its local cache), any mapping, or an
    :class:`~sskv_mapping.AsyncStateStoreDict` (which is read synchronously only from a snapshot:
    :func:`AsyncLiveSettings.start` takes one; elsewhere it raises :class:`~sskv_mapping.errors.ClientStateError`).
    """

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        store: Store,
        *,
        key_prefix: str = "",
        case_sensitive: bool | None = None,
    ) -> None:
        super().__init__(settings_cls)
        if not isinstance(key_prefix, str):
            raise ConfigurationError(f"key_prefix must be a str, not {key_prefix!r}")
        self.store = store
        self.key_prefix = key_prefix
        # keys are exact by default: a store key is not an environment variable
        self.case_sensitive = True if case_sensitive is None else case_sensitive

    # -- which keys ---------------------------------------------------------------------------------------

    def field_keys(self, field_name: str, field: FieldInfo) -> list[tuple[str, str]]:
        """``(store key, name pydantic validates it under)`` for each key the field may come from, first wins."""
        alias = field.validation_alias if field.validation_alias is not None else field.alias
        if alias is None or self.config.get("validate_by_alias") is False:
            return [(self.key_prefix + field_name, field_name)]
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
        names = [c if isinstance(c, str) else str(c.path[0]) for c in choices if isinstance(c, str | AliasPath)]
        keys = [(n, n) for n in names]
        if self.config.get("populate_by_name") or self.config.get("validate_by_name"):
            keys.append((self.key_prefix + field_name, field_name))
        return keys

    def keys(self) -> set[str]:
        """Every store key some field of the model may come from."""
        return {k for name, f in self.settings_cls.model_fields.items() for k, _ in self.field_keys(name, f)}

    def key_of(self, loc: tuple[int | str, ...]) -> str | None:
        """The store key behind a validation error's location (``None``: not one of ours)."""
        if not loc:
            return None
        for name, field in self.settings_cls.model_fields.items():
            for key, validated_as in self.field_keys(name, field):
                if loc[0] in (validated_as, name):
                    return key
        return None

    # -- reading ------------------------------------------------------------------------------------------

    def _lookup(self, key: str) -> Any:
        pinned = _SNAPSHOT.get()
        source: object = self.store
        if pinned is not None and _same_store(pinned[0], self.store):
            source = pinned[1]
        elif isinstance(self.store, AsyncStateStoreDict):
            raise ClientStateError(
                "an AsyncStateStoreDict cannot be read synchronously: build the settings with "
                "`await AsyncLiveSettings.start(Settings, d)` (or pass a StateStoreDict)"
            )
        assert isinstance(source, Mapping)
        if self.case_sensitive:
            return source.get(key, _MISSING)
        folded = key.lower()
        for k in source:
            if k.lower() == folded:
                return source[k]
        return _MISSING

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        for key, validated_as in self.field_keys(field_name, field):
            value = self._lookup(key)
            if value is not _MISSING:
                return value, validated_as, False
        return None, field_name, False

    def prepare_field_value(self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool) -> Any:
        # the codec decoded the value already; a complex field stored as JSON text (StrCodec) is parsed, as env
        if isinstance(value, str | bytes) and self.field_is_complex(field):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f'error parsing value for field "{field_name}" from the state store') from exc
        return value

    def __call__(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for field_name, field in self.settings_cls.model_fields.items():
            value, validated_as, complex_ = self.get_field_value(field, field_name)
            value = self.prepare_field_value(field_name, field, value, complex_)
            if value is not None:
                data[validated_as] = value
        return data

    def __repr__(self) -> str:
        return f"StateStoreSettingsSource(store={self.store!r:.60}, key_prefix={self.key_prefix!r})"


class _Placeholder(PydanticBaseSettingsSource):
    """Stands for the built-in sources when the model's source list is asked for only to find ours."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return {}


def _source_of(settings_cls: type[BaseSettings], store: object) -> StateStoreSettingsSource:
    """The model's source reading ``store``, as its ``settings_customise_sources`` builds it."""
    sources = settings_cls.settings_customise_sources(
        settings_cls,
        init_settings=_Placeholder(settings_cls),
        env_settings=_Placeholder(settings_cls),
        dotenv_settings=_Placeholder(settings_cls),
        file_secret_settings=_Placeholder(settings_cls),
    )
    for source in sources:
        if isinstance(source, StateStoreSettingsSource) and _same_store(source.store, store):
            return source
    raise ConfigurationError(
        f"{settings_cls.__name__}.settings_customise_sources() returns no StateStoreSettingsSource on this dict"
    )


class _LiveCore(Generic[S]):
    """What both live helpers share: the namespace's state as this process last heard it, and the last valid
    settings built from it. Only a whole model that validates replaces them."""

    def __init__(self, settings_cls: type[S], store: object, snapshot: dict[str, Any], kwargs: dict[str, Any]) -> None:
        self.settings_cls = settings_cls
        self.store = store
        self.source = _source_of(settings_cls, store)
        self.watched = self.source.keys()
        self.state = {k: v for k, v in snapshot.items() if k in self.watched}
        self.kwargs = kwargs
        self.lock = threading.Lock()
        self.listeners: list[Callable[[S], Any]] = []
        #: changes whose model did not validate (the previous settings stayed)
        self.rejected = 0
        self.current: S = self.build()  # the first one must validate: its error is the caller's

    def build(self) -> S:
        with _reading(self.store, self.state):
            return self.settings_cls(**self.kwargs)

    def apply(self, change: Change[Any]) -> S | None:
        """The new settings if ``change`` concerns the model and the model validates with it; else ``None``."""
        if change.key not in self.watched:
            return None
        with self.lock:
            if change.deleted:
                self.state.pop(change.key, None)
            else:
                self.state[change.key] = change.value
            try:
                settings = self.build()
            except ValidationError as exc:
                self.rejected += 1
                for error in exc.errors():
                    self._log(change.key, error)
                return None
            except ValueError as exc:  # a complex value that is not JSON
                self.rejected += 1
                log.error("settings not updated: key %r: %s; the previous settings stay", change.key, exc)
                return None
            if settings == self.current:
                return None
            self.current = settings
            return settings

    def _log(self, changed: str, error: ErrorDetails) -> None:
        key = self.source.key_of(tuple(error["loc"])) or changed
        log.error(
            "settings not updated: key %r (%s): %s; the previous settings stay",
            key,
            ".".join(str(p) for p in error["loc"]),
            error["msg"],
        )


class LiveSettings(Generic[S]):
    """A settings object kept current from a :class:`~sskv_mapping.StateStoreDict`'s changes.

    ``LiveSettings(Settings, d)`` builds ``Settings(**settings_kwargs)`` (its ``settings_customise_sources`` must
    include a :class:`StateStoreSettingsSource` on ``d``), then re-validates the whole model on each change of one
    of its keys. A value that fails validation is logged with its key and pydantic's message, and :attr:`current`
    stays the last valid settings; each new valid one goes to the listeners (on the dict's callback thread).
    """

    def __init__(self, settings_cls: type[S], store: StateStoreDict[Any], **settings_kwargs: Any) -> None:
        # watching before the snapshot: a change in between is heard, and applied once the snapshot is in
        self._ready = threading.Event()
        self._listener: ChangeStream[Any] = store.on_change(self._changed)
        try:
            self._core = _LiveCore(settings_cls, store, store.copy(), settings_kwargs)
        except BaseException:
            self._ready.set()
            self._listener.close()
            raise
        self._ready.set()

    @property
    def current(self) -> S:
        """The last valid settings."""
        return self._core.current

    @property
    def rejected(self) -> int:
        """Changes that made the model invalid (logged; the previous settings stayed)."""
        return self._core.rejected

    def add_listener(self, fn: Callable[[S], Any]) -> None:
        """Call ``fn(settings)`` with each new valid settings object."""
        self._core.listeners.append(fn)

    def _changed(self, change: Change[Any]) -> None:
        self._ready.wait()  # on the listener's own thread: the constructor is taking the snapshot
        if not hasattr(self, "_core"):
            return  # the constructor failed
        settings = self._core.apply(change)
        if settings is not None:
            for fn in list(self._core.listeners):
                try:
                    fn(settings)
                except Exception:
                    log.exception("a settings listener failed")

    def close(self) -> None:
        """Stop following the dict's changes (:attr:`current` keeps its last value)."""
        self._listener.close()

    def __enter__(self) -> LiveSettings[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncLiveSettings(Generic[S]):
    """:class:`LiveSettings` for an :class:`~sskv_mapping.AsyncStateStoreDict`: ``await AsyncLiveSettings.start(
    Settings, d)``; listeners (functions or coroutine functions) run on the dict's loop."""

    def __init__(self, core: _LiveCore[S], stream: AsyncChangeStream[Any]) -> None:
        self._core = core
        self._stream = stream
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls, settings_cls: type[S], store: AsyncStateStoreDict[Any], **settings_kwargs: Any
    ) -> AsyncLiveSettings[S]:
        stream = await store.changes().start()  # watching before the snapshot: a change in between comes after
        try:
            core = _LiveCore(settings_cls, store, await store.copy(), settings_kwargs)
        except BaseException:
            await stream.aclose()
            raise
        live = cls(core, stream)
        live._task = asyncio.get_running_loop().create_task(live._follow(), name="sskv-live-settings")
        return live

    @property
    def current(self) -> S:
        """The last valid settings."""
        return self._core.current

    @property
    def rejected(self) -> int:
        """Changes that made the model invalid (logged; the previous settings stayed)."""
        return self._core.rejected

    def add_listener(self, fn: Callable[[S], Any]) -> None:
        """Call ``fn(settings)`` (awaited if it returns an awaitable) with each new valid settings object."""
        self._core.listeners.append(fn)

    async def _follow(self) -> None:
        async for change in self._stream:
            settings = self._core.apply(change)
            if settings is None:
                continue
            for fn in list(self._core.listeners):
                try:
                    result = fn(settings)
                    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                        await result
                except Exception:
                    log.exception("a settings listener failed")

    async def aclose(self) -> None:
        """Stop following the dict's changes (:attr:`current` keeps its last value)."""
        await self._stream.aclose()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> AsyncLiveSettings[S]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
