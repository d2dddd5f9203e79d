"""A face's ``connect()`` takes every option of the face's constructor (``cache_ttl``, ``monotonic``, ``lock_lease``...)
beside the client's; an option neither takes is a ``TypeError`` naming the face, not ``StateStoreClient``."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreCache, AsyncStateStoreDict, StateStoreCache, StateStoreDict
from sskv_mapping.errors import ConfigurationError

DICT_OPTIONS: dict[str, Any] = {"cache_ttl": 30.0, "monotonic": time.monotonic, "timeout": 5}
CACHE_OPTIONS: dict[str, Any] = {"lock_lease": 5.0, "lock_timeout": 5.0, "max_fanout": 8, "monotonic": time.monotonic}


@pytest.fixture
def url(broker_address: tuple[str, int]) -> str:
    return f"mqtt://{broker_address[0]}:{broker_address[1]}"


async def test_the_async_faces_take_their_own_options(url: str) -> None:
    async with await AsyncStateStoreDict.connect(url, namespace="opts", **DICT_OPTIONS) as d:
        await d.set("k", 1)
        assert await d.get("k") == 1 and d.client.timeout == 5
        assert d.local_cache is not None and d.local_cache._ttl == 30.0
    async with await AsyncStateStoreCache.connect(url, namespace="opts", **CACHE_OPTIONS) as c:
        await c.set("k", 1)
        assert await c.get("k") == 1


def test_the_blocking_faces_take_their_own_options(url: str) -> None:
    with StateStoreDict.connect(url, namespace="opts", **DICT_OPTIONS) as d:
        d["k"] = 2
        assert d["k"] == 2
    with StateStoreCache.connect(url, namespace="opts", **CACHE_OPTIONS) as c:
        c.set("k", 2)
        assert c.get("k") == 2


@pytest.mark.parametrize(
    ("face", "option", "says"),
    [
        (StateStoreDict, {"cache_ttl": -1}, "ttl"),
        (StateStoreCache, {"max_fanout": 0}, "max_fanout"),
        (StateStoreCache, {"lock_lease": -1}, "lock_lease"),
    ],
)
def test_a_bad_value_of_a_face_option_is_the_face_s_error(
    url: str, face: Any, option: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        face.connect(url, namespace="opts", **option)


@pytest.mark.parametrize("face", [StateStoreDict, StateStoreCache])
def test_an_option_nobody_takes_is_a_type_error_naming_the_face(url: str, face: Any) -> None:
    with pytest.raises(TypeError, match=rf"{face.__name__}\.connect\(\) got an unexpected keyword argument 'bogus'"):
        face.connect(url, namespace="opts", bogus=1)


@pytest.mark.parametrize("face", [AsyncStateStoreDict, AsyncStateStoreCache])
async def test_the_async_faces_name_themselves_too(url: str, face: Any) -> None:
    with pytest.raises(TypeError, match=rf"{face.__name__}\.connect\(\)"):
        await face.connect(url, namespace="opts", bogus=1)
