"""The client's SCAN pager on the in-process store (the real emulator core and server on the loopback broker):
the pattern checked before any I/O, a failed page asked again with the same token, the listing's time bound,
``supports_scan`` remembered per connection and forgotten on reconnect, closing a listing early.

Conformance over the real broker and emulator process is in ``tests/emulator/test_scan_over_broker.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from sskv_mapping import (
    AsyncStateStoreClient,
    ConfigurationError,
    ConnectionLostError,
    RequestTimeoutError,
    UnsupportedCommandError,
    escape_glob,
)
from sskv_mapping._protocol.commands import Scan, parse_command
from sskv_mapping._transport.base import InboundMessage
from sskv_mapping.testing import InProcessStore


def drop_requests(store: InProcessStore, should_drop: Callable[[Scan], bool]) -> list[Scan]:
    """Make the service ignore (never answer) the SCAN requests ``should_drop`` picks; returns every SCAN seen."""
    seen: list[Scan] = []
    handle = store.server._handle_request

    def filtered(message: InboundMessage) -> None:
        try:
            cmd = parse_command(message.payload)
        except Exception:
            cmd = None
        if isinstance(cmd, Scan):
            seen.append(cmd)
            if should_drop(cmd):
                return
        handle(message)

    store.server._handle_request = filtered  # type: ignore[method-assign]  # a spy in its place
    return seen


async def fill(client: AsyncStateStoreClient, prefix: str, n: int) -> list[bytes]:
    keys = [f"{prefix}{i:03d}".encode() for i in range(n)]
    await asyncio.gather(*(client.set(k, b"v") for k in keys))
    return keys


@pytest.mark.parametrize("bad", ["", b"", None, 3, ["*"], "\udc80"])
async def test_a_bad_pattern_fails_at_the_call_before_any_io(bad: Any) -> None:
    async with InProcessStore() as store, store.async_client() as client:
        sent = client.requests_sent
        with pytest.raises(ConfigurationError):
            client.scan(bad)
        with pytest.raises(ConfigurationError):
            client.scan_pages(bad)
        with pytest.raises(ConfigurationError):
            client.scan(b"*", timeout=-1)
        assert client.requests_sent == sent


async def test_pages_and_keys() -> None:
    async with InProcessStore(scan_page_size=4, scan_empty_pages=1) as store, store.async_client() as client:
        keys = await fill(client, "pk/", 10)
        await fill(client, "other/", 3)
        pages = [p async for p in client.scan_pages("pk/*")]
        assert [len(p) for p in pages] == [0, 4, 0, 4, 0, 2]
        assert sorted(k for p in pages for k in p) == keys
        assert sorted([k async for k in client.scan(b"pk/*")]) == keys
        assert client.supports_scan is True


async def test_a_timed_out_page_is_asked_again_with_the_same_token() -> None:
    async with InProcessStore(scan_page_size=3) as store, store.async_client() as client:
        keys = await fill(client, "rt/", 10)
        dropped: list[bytes] = []

        def once_per_token(cmd: Scan) -> bool:
            if cmd.token is not None and cmd.token not in dropped:
                dropped.append(cmd.token)
                return True
            return False

        seen = drop_requests(store, once_per_token)
        got = [k async for k in client.scan(b"rt/*", page_timeout=0.2, timeout=30)]
        assert sorted(got) == keys and len(got) == len(set(got))
        tokens = [c.token for c in seen]
        assert len(dropped) == 3
        for token in dropped:  # each dropped page was asked again with exactly its token
            assert tokens.count(token) == 2
        assert client._scan.page_retries == 3


async def test_the_listing_has_a_time_bound() -> None:
    async with InProcessStore(scan_page_size=2) as store, store.async_client() as client:
        await fill(client, "tb/", 5)
        drop_requests(store, lambda cmd: cmd.token is not None)  # later pages never answered
        pages = client.scan_pages(b"tb/*", page_timeout=0.1, timeout=0.6)
        assert len(await anext(pages)) == 2
        with pytest.raises(RequestTimeoutError, match=r"did not finish within 0\.6 s"):
            await anext(pages)


async def test_a_slow_consumer_does_not_spend_the_listing_time() -> None:
    # the budget counts the pager's own waiting, not the caller's time between pages
    async with InProcessStore(scan_page_size=1) as store, store.async_client() as client:
        keys = await fill(client, "slow/", 3)
        got = []
        gate = asyncio.Event()
        loop = asyncio.get_running_loop()
        async for key in client.scan(b"slow/*", timeout=0.5):
            got.append(key)
            loop.call_later(0.3, gate.set)  # the caller dawdles 0.3 s per key: 0.9 s in all
            await gate.wait()
            gate.clear()
        assert sorted(got) == keys


async def test_an_older_service_raises_unsupported_once_then_without_asking() -> None:
    async with InProcessStore(scan=False) as store, store.async_client() as client:
        assert client.supports_scan is None
        with pytest.raises(UnsupportedCommandError):
            [k async for k in client.scan(b"*")]
        assert client.supports_scan is False
        sent = client.requests_sent
        with pytest.raises(UnsupportedCommandError):
            await anext(client.scan_pages(b"*"))
        assert client.requests_sent == sent  # remembered: no request


async def test_supports_scan_is_forgotten_on_reconnect() -> None:
    async with InProcessStore() as store, store.async_client(backoff_initial=0.01) as client:
        assert [k async for k in client.scan(b"nothing/*")] == []
        assert client.supports_scan is True
        reconnected = asyncio.Event()
        client.add_state_listener(lambda state: reconnected.set() if state.value == "connected" else None)
        store.broker._sessions[client.client_id].drop()  # this client's connection only; the service stays
        await asyncio.wait_for(reconnected.wait(), 10)
        assert client.supports_scan is None  # the new connection may reach another service
        await client.set("after", b"v")  # the emulator is back too
        assert [k async for k in client.scan(b"after")] == [b"after"]
        assert client.supports_scan is True


async def test_closing_a_listing_early_sends_no_more_pages() -> None:
    async with InProcessStore(scan_page_size=2) as store, store.async_client() as client:
        await fill(client, "early/", 9)
        seen = drop_requests(store, lambda cmd: False)
        async with contextlib.aclosing(client.scan(b"early/*")) as keys:  # type: ignore[type-var]  # typed an iterator
            async for _ in keys:
                break
        assert len(seen) == 1


async def test_escape_glob_lists_a_namespace_with_glob_characters_exactly() -> None:
    async with InProcessStore(scan_page_size=3) as store, store.async_client() as client:
        mine = await fill(client, "n[s]*?/", 7)
        await fill(client, "ns*?/", 3)  # what "n[s]*?/*" unescaped would also match
        await fill(client, "n[s]x?/", 2)
        assert sorted([k async for k in client.scan(escape_glob("n[s]*?/") + b"*")]) == mine
        # unescaped, the same bytes are a glob that matches the other namespace, not this one
        assert sorted([k async for k in client.scan(b"n[s]*?/*")]) == [b"ns*?/000", b"ns*?/001", b"ns*?/002"]


async def test_a_lost_connection_that_cannot_come_back_fails_the_listing_at_once() -> None:
    # reconnect=False (as the CLI): no retry until the listing's deadline, the caller hears at once
    async with InProcessStore(scan_page_size=2) as store, store.async_client(reconnect=False) as client:
        await fill(client, "lost/", 5)
        loop = asyncio.get_running_loop()

        def drop_on_second_page(cmd: Scan) -> bool:
            if cmd.token is None:
                return False
            loop.call_soon(store.broker._sessions[client.client_id].drop)
            return True

        drop_requests(store, drop_on_second_page)
        pages = client.scan_pages(b"lost/*", timeout=300)
        assert len(await anext(pages)) == 2
        with pytest.raises(ConnectionLostError):
            await anext(pages)
        assert client._scan.page_retries == 0  # not asked again until the listing's 300 s ran out
