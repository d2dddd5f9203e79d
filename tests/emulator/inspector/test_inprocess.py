"""The inspector on an in-process emulator: it costs a request nothing while no page listens, its options parse,
and the recognisers read the library's key layouts."""

from __future__ import annotations

import argparse

import httpx
import pytest

pytest.importorskip("aiohttp", reason="the inspector needs the 'inspect' extra (aiohttp)")
from sskv_mapping.emulator.inspector import Inspector, exposure_warning, is_loopback
from sskv_mapping.emulator.process import build_parser
from sskv_mapping.emulator.store_view import role_of, show_bytes
from sskv_mapping.testing import InProcessStore
from tests._support.waiting import eventually


async def test_the_tap_is_set_only_while_a_page_listens() -> None:
    async with InProcessStore() as store:
        inspector = Inspector(store.server)
        url = await inspector.start("127.0.0.1", 0)
        try:
            async with store.async_client() as c, httpx.AsyncClient(base_url=url, timeout=10) as http:
                await c.set("k", b"v")
                assert store.server.tap is None  # no page: serving a request built nothing for the inspector
                async with http.stream("GET", "/api/events") as stream:
                    lines = stream.aiter_lines()
                    assert await anext(lines) == "retry: 1000"
                    assert store.server.tap is not None
                    await c.set("k", b"w")
                await eventually(lambda: store.server.tap is None)
        finally:
            await inspector.close()
        assert store.server.tap is None


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def test_the_inspect_address_defaults_to_loopback() -> None:
    assert _args("--inspect", "8080").inspect == ("127.0.0.1", 8080)
    assert _args("--inspect", "localhost:0").inspect == ("localhost", 0)
    assert _args("--inspect", "[::1]:9000").inspect == ("::1", 9000)
    assert _args().inspect is None and _args().inspect_writable is False


@pytest.mark.parametrize("bad", ["http", "1:2:3", "70000", "host:", ":-1"])
def test_a_bad_inspect_address_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _args("--inspect", bad)
    assert exit_info.value.code == 2
    assert "--inspect" in capsys.readouterr().err


def test_loopback_is_told_apart() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("example.org")


def test_listening_beyond_loopback_is_said_loudly() -> None:
    assert exposure_warning("127.0.0.1", "http://127.0.0.1:8080/", writable=True) is None
    assert exposure_warning("::1", "http://[::1]:8080/", writable=False) is None
    read_only = exposure_warning("0.0.0.0", "http://0.0.0.0:8080/", writable=False)
    assert read_only is not None and "BEYOND LOOPBACK" in read_only and "http://0.0.0.0:8080/" in read_only
    assert "CHANGE" not in read_only
    writable = exposure_warning("192.168.1.10", "http://192.168.1.10:8080/", writable=True)
    assert writable is not None and "CAN CHANGE OR DELETE" in writable


def test_the_layouts_of_the_faces_are_recognised() -> None:
    assert role_of(b"orders/a/b") is not None and role_of(b"orders/a/b").detail == "a/b"  # type: ignore[union-attr]
    shard = role_of(b"orders#index/002a")
    assert shard is not None and (shard.face, shard.part, shard.detail) == ("dict", "index shard", "002a")
    assert role_of(b"orders#index-lock/002a").lock  # type: ignore[union-attr]
    entry = role_of(b"web#g.0123456789ab/session:1")
    assert entry is not None and (entry.face, entry.part, entry.detail) == ("cache", "entry", "session:1")
    assert role_of(b"web#gen").part == "generation"  # type: ignore[union-attr]
    assert role_of(b"web#gos-lock/page").lock  # type: ignore[union-attr]
    assert role_of(b"web#persist/0123456789ab/0f").part == "ledger shard"  # type: ignore[union-attr]
    assert role_of(b"plain") is None and role_of(b"#x") is None and role_of(b"web#unknown") is None


def test_values_are_shown_as_json_text_or_hex() -> None:
    assert show_bytes(b'{"a": 1}')["as"] == "json"
    assert show_bytes(b"12")["as"] == "json"
    assert show_bytes(b"hello")["as"] == "text"
    assert show_bytes(b"{not json")["as"] == "text"
    assert show_bytes(b"a\x00b") == {"as": "hex", "text": "61 00 62", "size": 3, "cut": False}
    long = show_bytes(b"x" * 500)
    assert long["cut"] and len(long["text"]) == 200 and long["size"] == 500
