"""Bad arguments at the client's public surface: each gives a typed error BEFORE anything is sent.

Every refused call is followed by a :class:`~conftest.Guard` check: the client's ``requests_sent`` counter
did not move, and a second client watching the key sees the stored value and version unchanged and no
change at all before a marker write of its own (nothing was half-written).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from sskv_mapping import ClientStateError, ConfigurationError, HybridLogicalClock, SetCondition
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient

from .conftest import Guard

pytestmark = pytest.mark.broker

Call = Callable[[], Awaitable[Any]]


def calls_on_key(client: AsyncStateStoreClient, key: Any) -> dict[str, Call]:
    """Every public call that takes a key, with otherwise valid arguments."""

    async def watch() -> None:
        async with client.watch(key):
            pass

    return {
        "get": lambda: client.get(key),
        "set": lambda: client.set(key, b"v"),
        "set NX": lambda: client.set(key, b"v", condition=SetCondition.NX, ttl=10),
        "delete": lambda: client.delete(key),
        "vdelete": lambda: client.vdelete(key, b"v"),
        "subscribe_key": lambda: client.subscribe_key(key, lambda event: None),
        "watch": watch,
    }


async def refused(guard: Guard, calls: dict[str, Call], error: type[Exception]) -> None:
    """Each call raises ``error`` and leaves no trace (checked after every call)."""
    for name, call in calls.items():
        try:
            await call()
        except error as exc:
            assert str(exc), f"{name}: the error has no message"
        except BaseException as exc:
            pytest.fail(f"{name}: raised {exc!r}, not {error.__name__}")
        else:
            pytest.fail(f"{name}: did not raise {error.__name__}")
        await guard.check()


# -- keys ---------------------------------------------------------------------------------------------------

EMPTY_KEYS = ["", b"", bytearray(), memoryview(b"")]


@pytest.mark.parametrize("key", EMPTY_KEYS, ids=lambda k: f"{type(k).__name__}-empty")
async def test_empty_keys_are_refused(client: AsyncStateStoreClient, guard: Guard, key: object) -> None:
    await refused(guard, calls_on_key(client, key), ConfigurationError)
    with pytest.raises(ConfigurationError):
        client.watch(key)  # type: ignore[arg-type]


# A key of the wrong type must not be coerced (str(7) == "7" would silently address another key): the guard
# watches the key that a coercion would have produced.
WRONG_TYPE_KEYS = [
    pytest.param(7, b"7", id="int"),
    pytest.param(0, b"0", id="int-zero"),
    pytest.param(None, b"None", id="None"),
    pytest.param(1.5, b"1.5", id="float"),
    pytest.param(math.nan, b"nan", id="float-nan"),
    pytest.param(True, b"True", id="bool"),
    pytest.param(["a"], b"['a']", id="list"),
    pytest.param(("a",), b"('a',)", id="tuple"),
    pytest.param({"a": 1}, b"{'a': 1}", id="dict"),
    pytest.param(Decimal("1"), b"1", id="decimal"),
]


@pytest.mark.parametrize(("key", "coerced"), WRONG_TYPE_KEYS)
async def test_keys_of_other_types_are_refused_not_coerced(
    client: AsyncStateStoreClient,
    guard_on: Callable[[bytes], Awaitable[Guard]],
    key: object,
    coerced: bytes,
) -> None:
    guard = await guard_on(coerced)
    await refused(guard, calls_on_key(client, key), ConfigurationError)
    with pytest.raises(ConfigurationError):
        client.watch(key)  # type: ignore[arg-type]


async def test_str_key_that_is_not_utf8_encodable_is_a_configuration_error(
    client: AsyncStateStoreClient, guard: Guard
) -> None:
    # A lone surrogate cannot be encoded as UTF-8: a UnicodeEncodeError escaping would not be typed.
    await refused(guard, calls_on_key(client, "bad-\ud800-key"), ConfigurationError)


# -- values -------------------------------------------------------------------------------------------------

BAD_VALUES = [
    pytest.param("text", id="str"),
    pytest.param("", id="str-empty"),
    pytest.param(5, id="int"),
    pytest.param(0, id="int-zero"),
    pytest.param(None, id="None"),
    pytest.param(1.5, id="float"),
    pytest.param(True, id="bool"),
    pytest.param([1, 2], id="list"),
    pytest.param({"a": 1}, id="dict"),
    pytest.param(object(), id="object"),
]


@pytest.mark.parametrize("value", BAD_VALUES)
async def test_values_that_are_not_bytes_are_refused(
    client: AsyncStateStoreClient, guard: Guard, value: object
) -> None:
    k = guard.key
    await refused(
        guard,
        {
            "set": lambda: client.set(k, value),  # type: ignore[arg-type]
            "set NEX": lambda: client.set(k, value, condition=SetCondition.NEX),  # type: ignore[arg-type]
            "vdelete": lambda: client.vdelete(k, value),  # type: ignore[arg-type]
        },
        ConfigurationError,
    )


async def test_bytes_like_values_are_accepted(client: AsyncStateStoreClient, observer: AsyncStateStoreClient) -> None:
    """The positive control of the value checks: bytearray and memoryview are bytes for the client (at run
    time; the annotation says ``bytes``, which mypy's strict bytes rules keep apart from them)."""
    key = b"boundary-bytes-like"
    assert (await client.set(key, bytearray(b"ba"))).applied  # type: ignore[arg-type]
    assert (entry := await observer.get(key)) is not None and entry.value == b"ba"
    assert (await client.set(key, memoryview(b"xmvx")[1:3])).applied  # type: ignore[arg-type]
    assert (entry := await observer.get(key)) is not None and entry.value == b"mv"
    assert (await client.set(key, b"")).applied  # empty values are legal (docs/design/protocol.md §1)
    assert (entry := await observer.get(key)) is not None and entry.value == b""
    await client.delete(key)


# -- TTLs ---------------------------------------------------------------------------------------------------

BAD_TTLS = [
    pytest.param(0, id="zero"),
    pytest.param(0.0, id="zero-float"),
    pytest.param(-0.0, id="negative-zero"),
    pytest.param(-1, id="negative"),
    pytest.param(-1e-9, id="tiny-negative"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param(10**12, id="31700-years"),
    pytest.param(1e300, id="1e300"),
    pytest.param(10**400, id="int-too-large-for-float"),
    pytest.param(timedelta(0), id="timedelta-zero"),
    pytest.param(timedelta(seconds=-1), id="timedelta-negative"),
    pytest.param(timedelta.max, id="timedelta-max"),
    pytest.param(True, id="bool"),
    pytest.param("10", id="str"),
    pytest.param(b"10", id="bytes"),
    pytest.param(Decimal("10"), id="decimal"),
    pytest.param([10], id="list"),
]


@pytest.mark.parametrize("ttl", BAD_TTLS)
async def test_bad_ttls_are_refused(client: AsyncStateStoreClient, guard: Guard, ttl: object) -> None:
    k = guard.key
    await refused(
        guard,
        {
            "set": lambda: client.set(k, b"new", ttl=ttl),  # type: ignore[arg-type]
            "set NX": lambda: client.set(k, b"new", ttl=ttl, condition=SetCondition.NX),  # type: ignore[arg-type]
        },
        ConfigurationError,
    )


# -- conditions and fencing tokens -----------------------------------------------------------------------------

BAD_CONDITIONS = ["NX", "nx", "NEX", b"NX", 1, 0, True, False, object()]


@pytest.mark.parametrize("condition", BAD_CONDITIONS, ids=repr)
async def test_bad_conditions_are_refused(client: AsyncStateStoreClient, guard: Guard, condition: object) -> None:
    k = guard.key
    await refused(
        guard,
        {"set": lambda: client.set(k, b"new", condition=condition)},  # type: ignore[arg-type]
        ConfigurationError,
    )


BAD_FENCING_TOKENS = [
    pytest.param("001696374425000:00001:holder", id="hlc-as-str"),
    pytest.param(b"001696374425000:00001:holder", id="hlc-as-bytes"),
    pytest.param("", id="str-empty"),
    pytest.param(123, id="int"),
    pytest.param(1.5, id="float"),
    pytest.param(True, id="bool"),
    pytest.param(object(), id="object"),
]


@pytest.mark.parametrize("token", BAD_FENCING_TOKENS)
async def test_bad_fencing_tokens_are_refused(client: AsyncStateStoreClient, guard: Guard, token: object) -> None:
    k = guard.key
    await refused(
        guard,
        {
            "set": lambda: client.set(k, b"new", fencing_token=token),  # type: ignore[arg-type]
            "delete": lambda: client.delete(k, fencing_token=token),  # type: ignore[arg-type]
            "vdelete": lambda: client.vdelete(k, guard.value, fencing_token=token),  # type: ignore[arg-type]
        },
        ConfigurationError,
    )


async def test_a_real_fencing_token_is_accepted(client: AsyncStateStoreClient, observer: AsyncStateStoreClient) -> None:
    """The positive control: a HybridLogicalClock passes the check and reaches the service."""
    key = b"boundary-fenced"
    token = HybridLogicalClock.parse("1:0:boundary-test")
    assert (await client.set(key, b"fenced", fencing_token=token)).applied
    assert (entry := await observer.get(key)) is not None and entry.value == b"fenced"
    assert await client.delete(key, fencing_token=token) is True


# -- timeouts -----------------------------------------------------------------------------------------------

BAD_TIMEOUTS = [
    pytest.param(0, id="zero"),
    pytest.param(0.0, id="zero-float"),
    pytest.param(-1, id="negative"),
    pytest.param(-0.001, id="tiny-negative"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param(True, id="bool"),
    pytest.param("5", id="str"),
    pytest.param(b"5", id="bytes"),
    pytest.param([5], id="list"),
]


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS)
async def test_bad_timeouts_are_refused(client: AsyncStateStoreClient, guard: Guard, timeout: object) -> None:
    k = guard.key
    await refused(
        guard,
        {
            "get": lambda: client.get(k, timeout=timeout),  # type: ignore[arg-type]
            "set": lambda: client.set(k, b"new", timeout=timeout),  # type: ignore[arg-type]
            "delete": lambda: client.delete(k, timeout=timeout),  # type: ignore[arg-type]
            "vdelete": lambda: client.vdelete(k, guard.value, timeout=timeout),  # type: ignore[arg-type]
            "subscribe_key": lambda: client.subscribe_key(k, lambda e: None, timeout=timeout),  # type: ignore[arg-type]
            "wait_connected": lambda: client.wait_connected(timeout),  # type: ignore[arg-type]
        },
        ConfigurationError,
    )
    with pytest.raises(ConfigurationError):
        AsyncStateStoreClient("127.0.0.1", 1, timeout=timeout)  # type: ignore[arg-type]


async def test_huge_but_finite_timeouts_work(client: AsyncStateStoreClient, observer: AsyncStateStoreClient) -> None:
    """A timeout beyond the MQTT Message Expiry range (2**32 - 1 s) is still a valid 'wait very long'."""
    key = b"boundary-huge-timeout"
    assert (await client.set(key, b"v", timeout=1e12)).applied
    assert (entry := await client.get(key, timeout=10**10)) is not None and entry.value == b"v"
    assert await client.delete(key, timeout=1e12) is True
    assert await observer.get(key) is None


# -- lifecycle ----------------------------------------------------------------------------------------------


async def test_calls_after_close_raise_client_state_error(
    mosquitto: Any, observer: AsyncStateStoreClient, guard_on: Callable[[bytes], Awaitable[Guard]]
) -> None:
    closed = AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5)
    await closed.connect()
    guard = Guard(closed, observer)
    await guard.arm()
    try:
        await closed.close()
        assert guard.client.requests_sent == guard.sent
        calls = calls_on_key(closed, guard.key)
        calls["connect"] = closed.connect
        calls["wait_connected"] = lambda: closed.wait_connected(1)
        await refused(guard, calls, ClientStateError)
        await closed.close()  # still idempotent
    finally:
        await guard.close()


async def test_calls_before_connect_raise_client_state_error(observer: AsyncStateStoreClient, guard: Guard) -> None:
    never = AsyncStateStoreClient("127.0.0.1", 1, timeout=1)  # nothing listens there: it must not even try
    calls = calls_on_key(never, guard.key)
    for name, call in calls.items():
        with pytest.raises(ClientStateError):
            await call()
        assert never.requests_sent == 0, name
    await guard.check()


def test_blocking_twin_raises_the_same_typed_errors(mosquitto: Any, emulator: Any) -> None:
    """The sync facade runs the async client on another thread: the errors must cross it unchanged."""
    with StateStoreClient(mosquitto.host, mosquitto.port, timeout=5) as c:
        sent = c.async_client.requests_sent
        with pytest.raises(ConfigurationError):
            c.set("", b"v")
        with pytest.raises(ConfigurationError):
            c.get(7)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            c.set("k", "text")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            c.set("k", b"v", ttl=math.inf)
        with pytest.raises(ConfigurationError):
            c.delete("k", fencing_token="1:0:x")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            c.get("k", timeout=-1)
        assert c.async_client.requests_sent == sent
    with pytest.raises(ClientStateError):
        c.get("k")
