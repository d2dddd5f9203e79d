"""An inspector page without a browser, for bench_rpc.py --inspector: ``python _inspector_page.py URL``.

Does what the page does to the emulator: holds the live feed (``/api/events``, server-sent events, read as they come)
and fetches ``/api/state`` after changes, at most every 250 ms (here: every 250 ms, the page's ceiling). Prints
``ready`` once the feed is connected, and runs until killed.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp


async def main(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(url + "api/events") as feed:
        first = await feed.content.readline()
        assert first.startswith(b"retry:"), first
        print("ready", flush=True)

        async def refresh() -> None:
            while True:
                async with session.get(url + "api/state") as r:
                    await r.read()
                await asyncio.sleep(0.25)

        task = asyncio.create_task(refresh())
        try:
            async for _ in feed.content:
                pass
        finally:
            task.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
