"""SCAN conformance over the real broker and the emulator process (docs/design/protocol.md §8), through the real client:
every glob form, a namespace with glob characters listed exactly with ``escape_glob``, empty pages, keys added
and removed mid-listing, an expired key, ``--no-scan`` (an older service), and the blocking twin.

The default-option tests share the session emulator and use a unique prefix each; tests that need other
emulator options run their own broker and emulator. Nothing sleeps: every wait is for a message or an event.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sskv_mapping import (
    AsyncStateStoreClient,
    KeyOperation,
    ServiceError,
    StateStoreClient,
    UnsupportedCommandError,
    escape_glob,
)
from sskv_mapping._protocol.commands import Scan
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.emulator.scan import INVALID_TOKEN_TEXT
from tests._support.procs import start_emulator

pytestmark = pytest.mark.broker


def unique(prefix: str = "scan") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}/"


async def put(client: AsyncStateStoreClient, *keys: bytes | str) -> None:
    await asyncio.gather(*(client.set(k, b"v") for k in keys))


async def listed(client: AsyncStateStoreClient, pattern: bytes) -> list[bytes]:
    keys = [k async for k in client.scan(pattern)]
    assert len(keys) == len(set(keys)), "a key listed twice"
    return sorted(keys)


async def test_every_glob_form(client: AsyncStateStoreClient) -> None:
    ns = unique()
    names = ["key1", "key2", "key10", "Key1", "kay1", "k-y", "a*b", "a?b", "a[b", "axb", "x/y/z", "clé"]
    await put(client, *(ns + n for n in names))
    p = escape_glob(ns)

    async def names_of(glob: str) -> list[str]:
        return sorted(k.decode()[len(ns) :] for k in await listed(client, p + glob.encode()))

    assert await names_of("*") == sorted(names)
    assert await names_of("key*") == ["key1", "key10", "key2"]
    assert await names_of("k?y1") == ["kay1", "key1"]
    assert await names_of("k?y") == ["k-y"]
    assert await names_of("[Kk]ey1") == ["Key1", "key1"]
    assert await names_of("key[0-9]") == ["key1", "key2"]
    assert await names_of("[!k]*") == sorted(["Key1", "a*b", "a?b", "a[b", "axb", "x/y/z", "clé"])
    assert await names_of("a[*]b") == ["a*b"]
    assert await names_of("a[?]b") == ["a?b"]
    assert await names_of("a[[]b") == ["a[b"]
    assert await names_of("a?b") == ["a*b", "a?b", "a[b", "axb"]
    assert await names_of("*/z") == ["x/y/z"]
    assert await names_of("cl?") == ["clé"]  # one character, two bytes
    assert await names_of("KEY*") == []  # case-sensitive
    assert await names_of("key") == []  # the whole key must match
    assert client.supports_scan is True


async def test_a_namespace_with_glob_characters_lists_exactly_itself(client: AsyncStateStoreClient) -> None:
    tag = uuid.uuid4().hex[:8]
    mine = [f"ns[{tag}]*?/{i}" for i in range(5)]
    lookalikes = [f"ns{tag[0]}{tag[1:]}x/{i}" for i in range(2)] + [f"ns[{tag}]xx/1", f"ns[{tag}]*x/1"]
    await put(client, *mine, *lookalikes)
    assert await listed(client, escape_glob(f"ns[{tag}]*?/") + b"*") == sorted(k.encode() for k in mine)


async def test_an_expired_key_is_never_listed(client: AsyncStateStoreClient) -> None:
    ns = unique("exp")
    await put(client, ns + "stays")
    async with client.watch(ns + "short") as changes:  # registered first: its DELETE cannot be missed
        await client.set(ns + "short", b"v", ttl=1.5)
        assert (await asyncio.wait_for(changes.__anext__(), 10)).op is KeyOperation.SET
        before = await listed(client, escape_glob(ns) + b"*")
        event = await asyncio.wait_for(changes.__anext__(), 10)  # the emulator's expiry timer deletes it
        assert event.op is KeyOperation.DELETE
    # listed while it lived (unless this box was slower than its 1.5 s), never after
    assert before in ([(ns + "short").encode(), (ns + "stays").encode()], [(ns + "stays").encode()])
    assert await listed(client, escape_glob(ns) + b"*") == [(ns + "stays").encode()]


async def test_a_stale_token_gets_an_error(client: AsyncStateStoreClient) -> None:
    ns = unique("tok")
    await put(client, ns + "a")
    cmd = Scan(escape_glob(ns) + b"*", b"\x01" + b"\x00" * 12)
    payload, _ = await client._request(cmd, timeout=10)
    with pytest.raises(ServiceError) as info:
        cmd.decode(payload)
    assert info.value.text == INVALID_TOKEN_TEXT


def test_blocking_twin(broker_address: tuple[str, int]) -> None:
    ns = unique("sync")
    with StateStoreClient(*broker_address) as c:
        for i in range(3):
            c.set(f"{ns}{i}", b"v")
        assert sorted(c.scan(escape_glob(ns) + b"*")) == [f"{ns}{i}".encode() for i in range(3)]
        pages = list(c.scan_pages(escape_glob(ns) + b"*"))
        assert sum(len(p) for p in pages) == 3
        assert c.supports_scan is True


async def test_small_and_empty_pages_and_keys_changing_mid_listing(fresh_mosquitto: MosquittoBroker) -> None:
    with start_emulator(fresh_mosquitto.host, fresh_mosquitto.port, "--scan-page-size", "3", "--scan-empty-pages", "1"):
        async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client:
            stay = [f"m/{i:02d}".encode() for i in range(0, 30, 2)]
            removable = [f"m/{i:02d}".encode() for i in range(1, 30, 2)]
            await put(client, *stay, *removable)
            sizes: list[int] = []
            seen: list[bytes] = []
            added = 0
            async for page in client.scan_pages(b"m/*"):
                sizes.append(len(page))
                seen += page
                if removable:  # between pages: one key goes, one key comes
                    await client.delete(removable.pop(len(removable) // 2))
                await client.set(f"m/{added * 7 % 30:02d}-new", b"v")
                added += 1
            assert 0 in sizes[:-1] and max(sizes) == 3  # empty pages with more to come, and small pages
            assert sizes[0] == 0
            for k in stay:
                assert seen.count(k) == 1, k
            assert len(seen) == len(set(seen))


async def test_no_scan_is_an_older_service(fresh_mosquitto: MosquittoBroker) -> None:
    with start_emulator(fresh_mosquitto.host, fresh_mosquitto.port, "--no-scan"):
        async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client:
            await client.set("k", b"v")  # everything else works
            assert client.supports_scan is None
            with pytest.raises(UnsupportedCommandError) as info:
                [k async for k in client.scan(b"*")]
            assert info.value.text == "unknown command"
            assert client.supports_scan is False
            sent = client.requests_sent
            with pytest.raises(UnsupportedCommandError):
                await anext(client.scan_pages(b"*"))
            assert client.requests_sent == sent
