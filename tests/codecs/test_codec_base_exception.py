"""A codec that raises a ``BaseException`` on the loop thread (issue 27, point 2): the caller gets it, and the
process-wide loop thread survives it -- the next call on it works, and so does every other face on it.

``KeyboardInterrupt`` and ``SystemExit`` are the ones asyncio lets out of its loop (a task records them and
re-raises, which used to end the loop thread and leave the caller waiting forever); a plain ``BaseException``
subclass is recorded by the task only. Over a real mosquitto and the emulator process: the value is decoded on
the loop thread when a read misses the local cache.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from sskv_mapping import StateStoreClient, StateStoreDict
from sskv_mapping._blocking import get_loop_thread


class Interrupted(BaseException):
    """A BaseException of the application's own (as some frameworks use to abort work)."""


class TrapCodec:
    """Text values; ``loads`` raises ``self.raising`` (once armed) -- on whichever thread decodes."""

    name = "trap"

    def __init__(self) -> None:
        self.raising: BaseException | None = None
        self.decoded_in: list[str] = []

    def dumps(self, value: str) -> bytes:
        return value.encode()

    def loads(self, data: bytes) -> str:
        self.decoded_in.append(threading.current_thread().name)
        if self.raising is not None:
            raising, self.raising = self.raising, None
            raise raising
        return data.decode()


@pytest.mark.parametrize(
    "raised", [KeyboardInterrupt(), SystemExit(3), Interrupted("abort")], ids=["KeyboardInterrupt", "SystemExit", "own"]
)
def test_the_caller_gets_the_codecs_base_exception_and_the_loop_thread_goes_on(
    broker_address: tuple[str, int], raised: BaseException
) -> None:
    codec = TrapCodec()
    namespace = f"t{uuid.uuid4().hex[:10]}"
    with StateStoreClient(*broker_address) as client:
        writer = StateStoreDict(client, namespace=namespace, codec=TrapCodec(), local_cache_size=0)
        writer["a"] = "first"
        writer["b"] = "second"
        reader = StateStoreDict(client, namespace=namespace, codec=codec, local_cache_size=0)
        loop_thread = get_loop_thread().thread
        codec.raising = raised
        with pytest.raises(type(raised)) as caught:
            reader["a"]
        assert caught.value is raised
        assert codec.decoded_in[-1] == loop_thread.name  # it was raised on the loop thread
        # the same loop thread serves the next calls, on this face and the others
        assert get_loop_thread().thread is loop_thread and loop_thread.is_alive()
        assert reader["a"] == "first" and reader["b"] == "second"
        assert writer["a"] == "first"
        assert sorted(reader) == ["a", "b"]
