"""The checks the FastAPI and Litestar example apps both pass, over any ``httpx.Client`` (their frameworks' test
clients are ones, and so is a client of a uvicorn process): two instances ``a`` and ``b`` of one app on one store."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from sskv_mapping import AsyncStateStoreClient, KeyEvent, KeyOperation

from .uvicorn_server import STOPPED, UvicornServer


def check_the_page_is_shared(a: httpx.Client, b: httpx.Client) -> str:
    """A renders ``/`` and serves its render again; B, which never rendered it, serves it from the store's cache."""
    page = a.get("/")
    assert page.status_code == 200
    assert "<h1>Hello!</h1>" in page.text
    assert a.get("/").text == page.text
    assert b.get("/").text == page.text
    return page.text


def check_the_settings_are_shared(a: httpx.Client, b: httpx.Client) -> str:
    """A setting written through A is read through B; the write emptied the shared page cache: B's page, anew."""
    assert a.put("/settings", json={"greeting": "Hi"}).json() == {"greeting": "Hi"}
    assert b.get("/settings").json() == {"greeting": "Hi"}
    page = b.get("/").text
    assert "<h1>Hi!</h1>" in page
    return page


def check_a_session_is_shared(a: httpx.Client, b: httpx.Client, instances: tuple[str, str]) -> None:
    """A session started through A is valid through B (the same browser, routed to the other instance, named
    ``instances[1]``); logging out through B ends it for A too. (The Litestar example's sessions.)"""
    assert a.get("/me").status_code == 401
    assert a.post("/login", json={"user": "ada"}).json() == {"user": "ada"}
    assert a.get("/me").json() == {"user": "ada", "instance": instances[0]}
    b.cookies = a.cookies
    assert b.get("/me").json() == {"user": "ada", "instance": instances[1]}
    assert b.post("/logout").status_code == 204  # deletes the session in the store
    a.cookies = b.cookies
    assert a.get("/me").status_code == 401


def check_a_change_reaches_the_reader(
    a: httpx.Client, b: httpx.Client, call: Callable[..., Any], client: AsyncStateStoreClient, key: str
) -> None:
    """B reads a setting (its dict keeps it in its local cache), A changes it: B's dict learns of it from the key's
    notifications. ``call`` runs a coroutine function on B's loop (its test client's portal), ``client`` is B's."""
    a.put("/settings", json={"greeting": "Hi"})
    assert b.get("/settings").json() == {"greeting": "Hi"}
    seen = threading.Event()

    def told(event: KeyEvent) -> None:
        if event.op is KeyOperation.SET:
            seen.set()

    sub = call(client.subscribe_key, key, told)  # a watch registered after B's own is told after B's
    try:
        a.put("/settings", json={"greeting": "Hey"})
        assert seen.wait(5)
    finally:
        call(sub.close)
    assert b.get("/settings").json() == {"greeting": "Hey"}


@contextmanager
def two_clients(servers: tuple[UvicornServer, UvicornServer]) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Clients of two uvicorn processes serving on uvloop (its extension is loaded in each: the app runs on it)."""
    for server in servers:
        assert "uvloop/loop." in server.loaded_modules()
    a, b = servers
    with httpx.Client(base_url=a.base_url, timeout=30) as ca, httpx.Client(base_url=b.base_url, timeout=30) as cb:
        yield ca, cb


def check_a_clean_stop(app: str, sskv_url: str) -> None:
    """``app`` served by uvicorn on uvloop answers, then stops on SIGTERM after its lifespan's exit (closing the
    store) ran and succeeded, with no traceback."""
    server = UvicornServer(app, sskv_url=sskv_url, loop="uvloop").start()
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        assert c.get("/settings").status_code == 200
    status = server.stop()
    # uvicorn re-raises the SIGTERM it handled once shut down (0.29+): killed by it, after a clean shutdown
    assert status in (0, -signal.SIGTERM), server.output
    assert STOPPED in server.output
    assert "Traceback" not in server.output
