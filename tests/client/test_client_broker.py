"""AsyncStateStoreClient against a real mosquitto + the emulator process: the tuned session broker, and a broker
on its default settings (no ``set_tcp_nodelay``), each with its emulator."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sskv_mapping import (
    ClientStateError,
    ConfigurationError,
    FencingTokenRequiredError,
    HybridLogicalClock,
    KeyOperation,
    SetCondition,
    VDeleteResult,
)
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState

pytestmark = pytest.mark.broker


@pytest.fixture(params=["tuned", "untuned"])
def broker_address(request: pytest.FixtureRequest) -> tuple[str, int]:
    """Every test here runs on both brokers (the suite-wide ``client`` and ``other`` fixtures use this)."""
    if request.param == "untuned":
        address: tuple[str, int] = request.getfixturevalue("untuned_broker_address")
        return address
    broker = request.getfixturevalue("mosquitto")
    request.getfixturevalue("emulator")
    return broker.host, broker.port


def unique(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_set_get_delete_roundtrip(client: AsyncStateStoreClient) -> None:
    key = unique()
    assert await client.get(key) is None
    first = await client.set(key, b"v1")
    assert first.applied and first.version is not None
    entry = await client.get(key)
    assert entry is not None and entry.value == b"v1" and entry.version == first.version
    second = await client.set(key, b"v2")
    assert second.version is not None and second.version > first.version
    assert await client.delete(key) is True
    assert await client.delete(key) is False
    assert await client.get(key) is None


async def test_str_and_bytes_keys_are_the_same_key(client: AsyncStateStoreClient) -> None:
    key = unique("ключ")
    await client.set(key, b"x")
    entry = await client.get(key.encode("utf-8"))
    assert entry is not None and entry.value == b"x"


async def test_binary_keys_and_values_and_large_sizes(client: AsyncStateStoreClient) -> None:
    key = b"\x00\r\n*$-ERR" + uuid.uuid4().bytes
    value = bytes(range(256)) * 4
    await client.set(key, value)
    got = await client.get(key)
    assert got is not None and got.value == value
    big_key = (unique() + "x" * 6500).encode()
    big_value = b"\r\n" * 32500
    await client.set(big_key, big_value)
    got = await client.get(big_key)
    assert got is not None and got.value == big_value
    await client.set(key, b"")
    got = await client.get(key)
    assert got is not None and got.value == b""


async def test_nx_and_nex_conditions_are_values_not_errors(client: AsyncStateStoreClient) -> None:
    key = unique()
    assert (await client.set(key, b"a", condition=SetCondition.NX)).applied
    skipped = await client.set(key, b"b", condition=SetCondition.NX)
    assert not skipped.applied and not skipped
    assert (await client.set(key, b"a", condition=SetCondition.NEX)).applied  # equal value: renew
    assert not (await client.set(key, b"c", condition=SetCondition.NEX)).applied
    entry = await client.get(key)
    assert entry is not None and entry.value == b"a"


async def test_vdelete_three_outcomes(client: AsyncStateStoreClient) -> None:
    key = unique()
    assert await client.vdelete(key, b"x") is VDeleteResult.NOT_FOUND
    await client.set(key, b"x")
    assert await client.vdelete(key, b"y") is VDeleteResult.VALUE_MISMATCH
    assert await client.vdelete(key, b"x") is VDeleteResult.DELETED
    assert await client.get(key) is None


async def test_ttl_expiry_deletes_and_notifies(client: AsyncStateStoreClient) -> None:
    key = unique()
    async with client.watch(key) as changes:
        await client.set(key, b"short", ttl=0.2)
        created = await changes.next(timeout=5)
        assert created.op is KeyOperation.SET and created.value == b"short"
        expired = await changes.next(timeout=5)
        assert expired.op is KeyOperation.DELETE
    assert await client.get(key) is None


async def test_many_requests_in_flight(client: AsyncStateStoreClient) -> None:
    keys = [unique() for _ in range(200)]
    await asyncio.gather(*(client.set(k, k.encode()) for k in keys))
    entries = await asyncio.gather(*(client.get(k) for k in keys))
    assert [e.value if e else None for e in entries] == [k.encode() for k in keys]
    assert len(client._sender.pending) == 0


async def test_fencing_token_on_writes(client: AsyncStateStoreClient) -> None:
    key = unique()
    token = HybridLogicalClock(client.hlc.now_ms(), 0, "lock")
    await client.set(key, b"v", fencing_token=token)
    with pytest.raises(FencingTokenRequiredError) as info:
        await client.set(key, b"w")
    assert info.value.text == FencingTokenRequiredError.TEXT
    assert await client.delete(key, fencing_token=token)


async def test_watch_sees_own_and_other_writes_and_shares_registration(
    client: AsyncStateStoreClient, other: AsyncStateStoreClient
) -> None:
    key = unique()
    async with client.watch(key) as w1, client.watch(key) as w2:
        assert client.watched_keys.count(key.encode()) == 1
        await client.set(key, b"mine")
        await other.set(key, b"theirs")
        await other.delete(key)
        for w in (w1, w2):
            events = [await w.next(timeout=5) for _ in range(3)]
            assert [(e.op, e.value) for e in events] == [
                (KeyOperation.SET, b"mine"),
                (KeyOperation.SET, b"theirs"),
                (KeyOperation.DELETE, None),
            ]
            assert events[0].version is not None and events[1].version is not None
            assert events[0].version < events[1].version
    assert key.encode() not in client.watched_keys


async def test_bad_arguments_raise_before_sending(client: AsyncStateStoreClient) -> None:
    sent_before = client.hlc.current
    with pytest.raises(ConfigurationError):
        await client.set("", b"x")
    with pytest.raises(ConfigurationError):
        await client.get(123)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        await client.set("k", "not bytes")  # type: ignore[arg-type]
    for bad_ttl in (0, -1, float("nan"), 10**12):
        with pytest.raises(ConfigurationError):
            await client.set("k", b"x", ttl=bad_ttl)
    assert client.hlc.current == sent_before  # nothing was sent: the clock did not tick


async def test_calls_after_close_raise_client_state_error(broker_address: tuple[str, int]) -> None:
    host, port = broker_address
    c = AsyncStateStoreClient(host, port)
    async with c:
        state = c.state  # a local: mypy would keep c.state narrowed past the block's end
        assert state is ConnectionState.CONNECTED
    assert c.state is ConnectionState.CLOSED
    with pytest.raises(ClientStateError):
        await c.get("k")
    with pytest.raises(ClientStateError):
        await c.connect()
