"""A codec that raises a ``BaseException`` (issue 27, point 2): the caller gets it, and the process-wide loop
thread survives it -- the next call on it works, and so does every other face on it. A blocking face's read is
decoded in its caller's thread (issue 37, finding 5), so it is raised there; a read with no waiting caller is
decoded on the loop thread, where asyncio lets KeyboardInterrupt and SystemExit out of its loop.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from sskv_mapping import AsyncStateStoreDict, StateStoreClient, StateStoreDict
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
        # decoded, and raised, in the thread that asked: the loop thread ran none of the codec's code
        assert codec.decoded_in[-1] == threading.current_thread().name != loop_thread.name
        # the same loop thread serves the next calls, on this face and the others
        assert get_loop_thread().thread is loop_thread and loop_thread.is_alive()
        assert reader["a"] == "first" and reader["b"] == "second"
        assert writer["a"] == "first"
        assert sorted(reader) == ["a", "b"]


@pytest.mark.parametrize(
    "raised", [KeyboardInterrupt(), SystemExit(3), Interrupted("abort")], ids=["KeyboardInterrupt", "SystemExit", "own"]
)
def test_a_base_exception_raised_on_the_loop_thread_reaches_the_call_and_the_loop_goes_on(
    broker_address: tuple[str, int], raised: BaseException
) -> None:
    """A read started on the loop thread by no blocking caller (as a background task's is) decodes there."""
    codec = TrapCodec()
    namespace = f"t{uuid.uuid4().hex[:10]}"
    with StateStoreClient(*broker_address) as client:
        writer = StateStoreDict(client, namespace=namespace, codec=TrapCodec(), local_cache_size=0)
        writer["a"] = "first"
        loop = get_loop_thread()
        reader = loop.run(_async_dict(client, namespace, codec))
        codec.raising = raised
        fut = asyncio.run_coroutine_threadsafe(reader.get("a"), loop.loop)
        with pytest.raises(type(raised)) as caught:
            fut.result(timeout=30)
        assert caught.value is raised
        assert codec.decoded_in[-1] == loop.thread.name  # raised on the loop thread this time
        assert loop.thread.is_alive() and get_loop_thread() is loop
        assert asyncio.run_coroutine_threadsafe(reader.get("a"), loop.loop).result(timeout=30) == "first"
        assert writer["a"] == "first"


async def _async_dict(client: StateStoreClient, namespace: str, codec: TrapCodec) -> AsyncStateStoreDict[str]:
    return AsyncStateStoreDict(client.async_client, namespace=namespace, codec=codec, local_cache_size=0)
