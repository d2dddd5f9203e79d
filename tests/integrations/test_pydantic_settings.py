"""The pydantic-settings source and the live settings, on mosquitto + the emulator process.

Modelled on pydantic-settings' own tests of custom sources (tests/test_settings.py: a source placed in
``settings_customise_sources``, its precedence against env, aliases, nested models and lists as JSON).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_settings")

from pydantic import AliasChoices, BaseModel, Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sskv_mapping import AsyncStateStoreDict, StateStoreDict
from sskv_mapping.errors import ClientStateError
from sskv_mapping.integrations.pydantic_settings import (
    AsyncLiveSettings,
    LiveSettings,
    StateStoreSettingsSource,
)

pytestmark = pytest.mark.broker


class Limits(BaseModel):
    rps: int
    burst: int = 10


class AppSettings(BaseSettings):
    """The fields; :func:`settings_on` gives them their sources."""

    model_config = SettingsConfigDict(env_prefix="SSKVTEST_")

    greeting: str = "hello"
    retries: int = 3
    limits: Limits = Limits(rps=1)
    hosts: list[str] = []
    colour: str = Field(default="blue", validation_alias=AliasChoices("ui-colour", "color"))


def settings_on(store: Any, *, prefix: str = "", store_first: bool = True) -> type[AppSettings]:
    """A model whose sources are init, then the store and env in the order asked for (as a user writes it)."""

    class Settings(AppSettings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            ours = StateStoreSettingsSource(settings_cls, store, key_prefix=prefix)
            return (init_settings, ours, env_settings) if store_first else (init_settings, env_settings, ours)

    return Settings


@pytest.fixture
def config(broker_url: str) -> Iterator[StateStoreDict[Any]]:
    with StateStoreDict.connect(broker_url, namespace=f"settings-{uuid.uuid4().hex[:8]}") as d:
        yield d


@pytest.fixture
def other(broker_url: str, config: StateStoreDict[Any]) -> Iterator[StateStoreDict[Any]]:
    """The same namespace on a client of its own: another process's writes."""
    with StateStoreDict.connect(broker_url, namespace=config.namespace) as d:
        yield d


def test_fields_come_from_their_keys_nested_models_and_lists_as_json(config: StateStoreDict[Any]) -> None:
    config.update(greeting="hi", retries=5, limits={"rps": 7}, hosts=["a", "b"])
    s: Any = settings_on(config)()
    assert (s.greeting, s.retries, s.limits, s.hosts, s.colour) == ("hi", 5, Limits(rps=7), ["a", "b"], "blue")


def test_a_complex_value_stored_as_json_text_is_parsed(config: StateStoreDict[Any]) -> None:
    config["limits"] = '{"rps": 9, "burst": 1}'  # as a StrCodec writer (or `sskv set`) would leave it
    s: Any = settings_on(config)()
    assert s.limits == Limits(rps=9, burst=1)


def test_missing_keys_leave_defaults_and_init_wins(config: StateStoreDict[Any]) -> None:
    config["retries"] = 5
    settings_cls = settings_on(config)
    s: Any = settings_cls()
    assert (s.greeting, s.retries) == ("hello", 5)
    s = settings_cls(retries=8)  # init_settings comes first
    assert s.retries == 8


@pytest.mark.parametrize(("store_first", "expected"), [(True, "from-store"), (False, "from-env")])
def test_precedence_against_env_is_the_users(
    config: StateStoreDict[Any], monkeypatch: pytest.MonkeyPatch, store_first: bool, expected: str
) -> None:
    config["greeting"] = "from-store"
    monkeypatch.setenv("SSKVTEST_GREETING", "from-env")
    s: Any = settings_on(config, store_first=store_first)()
    assert s.greeting == expected


def test_aliases_are_keys_as_they_are_and_the_prefix_applies_to_names(config: StateStoreDict[Any]) -> None:
    config.update({"app.greeting": "prefixed", "greeting": "bare", "color": "red"})
    s: Any = settings_on(config, prefix="app.")()
    assert (s.greeting, s.colour) == ("prefixed", "red")
    config["ui-colour"] = "green"  # the first alias choice wins
    assert settings_on(config, prefix="app.")().colour == "green"


def test_an_invalid_value_is_pydantics_error_naming_the_field(config: StateStoreDict[Any]) -> None:
    config["retries"] = "many"
    with pytest.raises(ValidationError, match="retries"):
        settings_on(config)()


async def test_an_async_dict_is_read_from_a_snapshot_only(broker_url: str) -> None:
    async with await AsyncStateStoreDict.connect(broker_url, namespace=f"settings-{uuid.uuid4().hex[:8]}") as d:
        with pytest.raises(ClientStateError, match="AsyncLiveSettings"):
            settings_on(d)()


def test_live_settings_follow_changes_and_keep_the_last_valid(
    config: StateStoreDict[Any], other: StateStoreDict[Any], caplog: pytest.LogCaptureFixture
) -> None:
    config.update(retries=1, greeting="hello")  # listed when the live settings start: watched from then on
    heard: queue.Queue[Any] = queue.Queue()
    with LiveSettings(settings_on(config), config) as live:
        live.add_listener(heard.put)
        assert live.current.retries == 1

        other["retries"] = 2  # another process
        assert heard.get(timeout=10).retries == 2
        assert live.current.retries == 2

        with caplog.at_level(logging.ERROR, logger="sskv_mapping.settings"):
            other["retries"] = "lots"  # fails validation: logged with its key, the last valid settings stay
            other["greeting"] = "still-invalid-model"  # the model stays invalid while retries is
            other["retries"] = 4
            fixed = heard.get(timeout=10)
        assert (fixed.retries, fixed.greeting) == (4, "still-invalid-model")
        assert heard.empty()  # nothing was heard of the invalid states
        assert live.rejected == 2
        messages = [r.getMessage() for r in caplog.records]
        assert any("'retries'" in m and "valid integer" in m for m in messages), messages

        other["unrelated"] = 1  # not a key of the model: no new settings
        other["hosts"] = ["h1"]  # a key added since the start: found (by SCAN or the index), then followed
        assert heard.get(timeout=10).hosts == ["h1"]


async def test_async_live_settings(broker_url: str) -> None:
    ns = f"settings-{uuid.uuid4().hex[:8]}"
    async with (
        await AsyncStateStoreDict.connect(broker_url, namespace=ns) as d,
        await AsyncStateStoreDict.connect(broker_url, namespace=ns) as writer,
    ):
        await d.set("limits", {"rps": 1})
        heard: asyncio.Queue[Any] = asyncio.Queue()

        async def hear(settings: Any) -> None:
            await heard.put(settings)

        async with await AsyncLiveSettings.start(settings_on(d), d) as live:
            live.add_listener(hear)
            assert live.current.limits == Limits(rps=1)
            await writer.set("limits", {"rps": "fast"})
            await writer.set("limits", {"rps": 3, "burst": 4})
            got = await asyncio.wait_for(heard.get(), 10)
            assert got.limits == Limits(rps=3, burst=4) and live.rejected == 1
            assert heard.empty()
