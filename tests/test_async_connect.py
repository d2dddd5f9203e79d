"""The async faces' ``connect()``: awaited (``d = await AsyncStateStoreDict.connect(...)``) or entered (``async with
AsyncStateStoreDict.connect(...) as d``), as websockets' and aiosqlite's ``connect``; the blocking twins are
unchanged (issue 37). Against the session's mosquitto and emulator process."""

from __future__ import annotations

from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreCache, AsyncStateStoreDict, StateStoreCache, StateStoreDict
from sskv_mapping.emulator.broker import free_port
from sskv_mapping.errors import BrokerConnectError, ClientStateError

FACES: dict[str, type[AsyncStateStoreDict[Any]] | type[AsyncStateStoreCache[Any]]] = {
    "dict": AsyncStateStoreDict,
    "cache": AsyncStateStoreCache,
}
BLOCKING: dict[str, type[StateStoreDict[Any]] | type[StateStoreCache[Any]]] = {
    "dict": StateStoreDict,
    "cache": StateStoreCache,
}


@pytest.fixture
def url(broker_address: tuple[str, int]) -> str:
    host, port = broker_address
    return f"mqtt://{host}:{port}"


@pytest.mark.parametrize("face", FACES)
async def test_async_with_connect_opens_and_closes_the_face_and_its_client(url: str, namespace: str, face: str) -> None:
    async with FACES[face].connect(url, namespace=namespace) as opened:
        assert isinstance(opened, FACES[face])
        await opened.set("k", {"v": 1})
        assert await opened.get("k") == {"v": 1}
        client = opened.client
    with pytest.raises(ClientStateError):  # the block's end closed the face's own client
        await client.get("k")


@pytest.mark.parametrize("face", FACES)
async def test_awaited_connect_gives_an_open_face_closed_by_the_caller(url: str, namespace: str, face: str) -> None:
    opened: Any = await FACES[face].connect(url, namespace=namespace, timeout=5)
    try:
        assert isinstance(opened, FACES[face])
        await opened.set("k", "v")
        assert await opened.get("k") == "v"
        assert opened.client.timeout == 5  # the client's options reach its client
    finally:
        await opened.close()
    with pytest.raises(ClientStateError):
        await opened.client.get("k")


@pytest.mark.parametrize("face", FACES)
async def test_a_connect_that_fails_raises_from_await_and_from_async_with(namespace: str, face: str) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(BrokerConnectError):
        await FACES[face].connect(url, namespace=namespace)
    with pytest.raises(BrokerConnectError):
        async with FACES[face].connect(url, namespace=namespace):
            pytest.fail("entered a face that never connected")


@pytest.mark.parametrize("face", FACES)
async def test_an_error_in_the_block_closes_the_face_and_propagates(url: str, namespace: str, face: str) -> None:
    with pytest.raises(LookupError, match="from the block"):
        async with FACES[face].connect(url, namespace=namespace) as opened:
            client = opened.client
            raise LookupError("from the block")
    with pytest.raises(ClientStateError):
        await client.get("k")


@pytest.mark.parametrize("face", BLOCKING)
def test_the_blocking_connect_is_unchanged(url: str, namespace: str, face: str) -> None:
    with BLOCKING[face].connect(url, namespace=namespace) as opened:
        assert isinstance(opened, BLOCKING[face])
        opened.set("k", 1)
        assert opened.get("k") == 1
