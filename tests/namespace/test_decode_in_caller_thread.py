"""A blocking face decodes what it reads in its caller's thread, not on the process-wide loop thread (issue 37): a
codec whose ``loads`` is stuck holds up its own caller only, while another face of the process reads on."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from sskv_mapping._blocking import get_loop_thread
from tests.cache.conftest import SyncCacheFactory
from tests.mapping.conftest import DictFactory

#: how long any wait of these tests may take before it counts as stuck (never reached when all is well)
DEADLINE = 20.0


class GatedCodec:
    """JSON whose ``loads`` waits for ``release`` once ``armed``, recording the thread it ran in."""

    name = "gated-json"

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.loads_threads: list[threading.Thread] = []

    def dumps(self, value: Any, /) -> bytes:
        return json.dumps(value).encode()

    def loads(self, data: bytes, /) -> Any:
        self.loads_threads.append(threading.current_thread())
        if self.armed:
            self.entered.set()
            if not self.release.wait(DEADLINE):
                raise RuntimeError("the test never released the codec")
        return json.loads(data)


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any], threading.Event]:
    out: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc
        finally:
            done.set()

    t = threading.Thread(target=run, name="sskv-test-reader")
    t.start()
    return t, out, done


@pytest.mark.parametrize("face", ["dict", "cache"])
def test_a_stuck_decode_holds_up_its_caller_only(
    face: str, make_dict: DictFactory, make_sync_cache: SyncCacheFactory, namespace: str
) -> None:
    codec = GatedCodec()
    value = {"items": [1, 2], "name": "a"}
    slow: Any
    other: Any
    if face == "dict":
        slow = make_dict(codec=codec, local_cache_size=100)
        other = make_dict(namespace=namespace + "-other")
        slow["k"] = value  # not read yet, so not watched: the write keeps (and decodes) nothing
        other["x"] = 1
    else:
        slow = make_sync_cache(codec=codec, local_cache_size=100)
        other = make_sync_cache(namespace=namespace + "-other")
        slow.set("k", value)
        other.set("x", 1)

    codec.armed = True
    reader, got, read_done = _in_thread(lambda: slow.get("k"))
    try:
        assert codec.entered.wait(DEADLINE), "the slow read never reached its codec"
        # a miss of the other face (its key was written, never read): a round trip through the loop thread
        _, other_got, other_done = _in_thread(lambda: other.get("x"))
        assert other_done.wait(DEADLINE), "the other face's get waited for the stuck codec"
        assert other_got == {"value": 1}
        assert not read_done.is_set()  # the slow read is still stuck in its codec meanwhile
    finally:
        codec.release.set()
        assert read_done.wait(DEADLINE)
        reader.join(DEADLINE)
    assert got == {"value": value}
    assert codec.loads_threads == [reader]  # decoded in the caller's thread, once
    assert get_loop_thread().thread not in codec.loads_threads

    # what was read is kept, decoded: the next read is a hit, with no request and no decode
    codec.armed = False
    client = slow.client.async_client
    before = client.requests_sent
    assert slow.get("k") == value
    assert client.requests_sent == before
    assert codec.loads_threads == [reader]


def test_a_call_from_another_event_loop_decodes_on_that_loop(make_dict: DictFactory, namespace: str) -> None:
    """``run_async`` (how the async methods of the framework adapters reach the loop thread): the decode runs on the
    awaiting loop, as an async face's does on its own, and the loop thread stays free for the other faces."""
    codec = GatedCodec()
    slow = make_dict(codec=codec, local_cache_size=100)
    other = make_dict(namespace=namespace + "-other")
    slow["k"] = [1, 2]
    other["x"] = 1
    codec.armed = True

    async def read() -> Any:
        return await slow.portal.run_async(slow.async_dict.get("k"))

    reader, got, read_done = _in_thread(lambda: asyncio.run(read()))
    try:
        assert codec.entered.wait(DEADLINE), "the slow read never reached its codec"
        _, other_got, other_done = _in_thread(lambda: other.get("x"))
        assert other_done.wait(DEADLINE), "the other face's get waited for the stuck codec"
        assert other_got == {"value": 1}
        assert not read_done.is_set()
    finally:
        codec.release.set()
        assert read_done.wait(DEADLINE)
        reader.join(DEADLINE)
    assert got == {"value": [1, 2]}
    assert codec.loads_threads == [reader]


def test_only_the_librarys_own_small_decodes_stay_on_the_loop() -> None:
    """Handing a decode to the caller's thread costs two thread switches; the raw, str and hook-free JSON codecs
    decode a small value for less, calling no user code, so theirs stay on the loop. Any other codec does not."""
    from sskv_mapping._namespace.store import _runs_no_user_code
    from sskv_mapping.codecs import JsonCodec, PickleCodec, RawCodec, StrCodec

    class MyJson(JsonCodec):
        pass

    assert _runs_no_user_code(JsonCodec())
    assert _runs_no_user_code(RawCodec())
    assert _runs_no_user_code(StrCodec())
    assert not _runs_no_user_code(JsonCodec(object_hook=dict))
    assert not _runs_no_user_code(MyJson())
    assert not _runs_no_user_code(PickleCodec(allow_unsafe=True))
    assert not _runs_no_user_code(GatedCodec())
