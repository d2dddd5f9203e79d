"""Every async class of the public API has a blocking twin with the same methods, taking the same parameters.

The pairs are found, not listed: each ``AsyncX`` in ``sskv_mapping.__all__`` is paired with ``X`` (the way httpx's
``test_exported_members.py`` walks ``__all__``), so a new async class cannot go without a twin, or unchecked.

Compared: the public methods (coroutine functions, async generators, plain, class- and static methods, and the
dunders the library defines itself) by name, and their parameters by name, kind and default. The async protocol
methods are spelled the blocking way on the twin (``__aenter__`` -> ``__enter__``...) and need only exist there.
Properties and attributes are not compared. What differs on purpose is listed below, each with its reason; a
listed difference that no longer exists fails too, so the list cannot outlive its reasons.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import sskv_mapping

ASYNC_NAMES = sorted(name for name in sskv_mapping.__all__ if name.startswith("Async"))

#: The async protocol method -> the blocking one: same role, its own signature (only existence is compared).
PROTOCOL = {"__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__", "aclose": "close"}

#: The async method -> its blocking twin's name, where the names differ. Python has no awaitable operators, so the
#: async dict spells ``d[k]``, ``k in d``, ``len(d)``, ``del d[k]`` and ``d == other`` as coroutine methods.
RENAMED: dict[str, dict[str, str]] = {
    "AsyncStateStoreDict": {
        "getitem": "__getitem__",
        "contains": "__contains__",
        "len": "__len__",
        "delitem": "__delitem__",
        "equals": "__eq__",
    },
}

#: (async class, method) -> why the blocking twin has no such method.
ONLY_ASYNC: dict[tuple[str, str], str] = {
    ("AsyncKeyWatch", "__anext__"): "the blocking watch's __iter__ is a generator, which is its __next__",
    ("AsyncChangeStream", "__anext__"): "the blocking stream's __iter__ is a generator, which is its __next__",
    ("AsyncLeaderElection", "add_lost_listener"): (
        "a listener runs on the client's loop; the blocking election takes on_lost= (as both constructors do) "
        "and offers wait_lost() for a thread to block on"
    ),
    ("AsyncStateStoreClient", "check_set"): (
        "not async (it sends nothing): the namespace layer checks a value's size before it writes the value's "
        "index entry; blocking code reaches it as client.async_client.check_set"
    ),
}

#: (blocking class, method) -> why the async class has no such method.
ONLY_BLOCKING: dict[tuple[str, str], str] = {
    ("LeaderElection", "wait_lost"): "async code awaits the election's lost event (an attribute, not a method)",
    ("StateStoreDict", "__setitem__"): "no awaitable d[k] = v: the async dict writes with set(), as the twin can",
}

#: (async class, method) -> why the twins' parameters differ.
OTHER_PARAMETERS: dict[tuple[str, str], str] = {
    ("AsyncChangeStream", "__init__"): (
        "made by d.changes() / d.on_change(), not by users: the async stream takes the namespace's feed, the "
        "blocking one the async stream it drives"
    ),
    ("AsyncKeyWatch", "__init__"): (
        "made by client.watch(key), not by users: the async watch takes the client's subscribe function, "
        "the blocking one the blocking client"
    ),
}


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The class's public methods by name: not properties or attributes; dunders only where the library wrote them
    (not ``object``'s or ``Generic``'s)."""
    out: dict[str, Callable[..., Any]] = {}
    for name in dir(cls):
        dunder = name.startswith("__") and name.endswith("__")
        if name.startswith("_") and not dunder:
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, staticmethod | classmethod):
            member = member.__func__
        if not inspect.isfunction(member):
            continue
        if dunder and not member.__module__.startswith("sskv_mapping."):
            continue
        out[name] = getattr(cls, name)
    return out


def _is_async(method: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)


def _parameters(method: Callable[..., Any]) -> list[tuple[str, str, object]]:
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(method).parameters.values()]


def _twin_names(async_name: str) -> dict[str, str]:
    """Each async method's name on the blocking twin."""
    renames = {**PROTOCOL, **RENAMED.get(async_name, {})}
    return {name: renames.get(name, name) for name in public_methods(getattr(sskv_mapping, async_name))}


def _differences(async_name: str) -> tuple[set[str], set[str]]:
    """(async methods with no blocking twin, blocking methods with no async twin)."""
    twin = getattr(sskv_mapping, async_name.removeprefix("Async"))
    names = _twin_names(async_name)
    blocking = set(public_methods(twin))
    return {a for a, b in names.items() if b not in blocking}, blocking - set(names.values())


def test_the_walk_finds_every_pair_and_their_async_methods() -> None:
    expected = {
        "AsyncKeyWatch",
        "AsyncLeaderElection",
        "AsyncLeasedLock",
        "AsyncStateStoreCache",
        "AsyncStateStoreClient",
        "AsyncStateStoreDict",
    }
    assert expected <= set(ASYNC_NAMES)
    # coroutine methods, an async generator method and a plain method handing back an async iterator
    client = public_methods(sskv_mapping.AsyncStateStoreClient)
    assert {"get", "set", "delete", "scan", "scan_pages", "subscribe_key", "__aenter__", "__init__"} <= set(client)
    assert "items" in public_methods(sskv_mapping.AsyncStateStoreDict)


@pytest.mark.parametrize("async_name", ASYNC_NAMES)
def test_every_async_class_has_a_blocking_twin(async_name: str) -> None:
    twin_name = async_name.removeprefix("Async")
    assert twin_name in sskv_mapping.__all__, f"{async_name} is exported without its blocking twin {twin_name}"
    assert inspect.isclass(getattr(sskv_mapping, twin_name))


@pytest.mark.parametrize("async_name", ASYNC_NAMES)
def test_the_twins_have_the_same_methods(async_name: str) -> None:
    twin_name = async_name.removeprefix("Async")
    only_async, only_blocking = _differences(async_name)
    problems = [
        f"{twin_name} has no twin of {async_name}.{name}"
        for name in sorted(only_async)
        if (async_name, name) not in ONLY_ASYNC
    ]
    problems += [
        f"{async_name} has no twin of {twin_name}.{name}"
        for name in sorted(only_blocking)
        if (twin_name, name) not in ONLY_BLOCKING
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("async_name", ASYNC_NAMES)
def test_the_twins_take_the_same_parameters_and_the_blocking_one_blocks(async_name: str) -> None:
    twin = getattr(sskv_mapping, async_name.removeprefix("Async"))
    problems = []
    for name, twin_name in _twin_names(async_name).items():
        method = getattr(twin, twin_name, None)
        if method is None:
            continue  # test_the_twins_have_the_same_methods
        if _is_async(method):
            problems.append(f"{twin.__name__}.{twin_name} is async; the blocking twin must block")
        if name in PROTOCOL or (async_name, name) in OTHER_PARAMETERS:
            continue
        original = getattr(getattr(sskv_mapping, async_name), name)
        if _parameters(original) != _parameters(method):
            problems.append(
                f"{twin.__name__}.{twin_name}{inspect.signature(method)} != {async_name}.{name}"
                f"{inspect.signature(original)}"
            )
    assert not problems, "\n".join(problems)


def test_every_listed_difference_still_exists() -> None:
    stale = []
    found_async: set[tuple[str, str]] = set()
    found_blocking: set[tuple[str, str]] = set()
    for async_name in ASYNC_NAMES:
        only_async, only_blocking = _differences(async_name)
        found_async |= {(async_name, name) for name in only_async}
        found_blocking |= {(async_name.removeprefix("Async"), name) for name in only_blocking}
    stale += [f"ONLY_ASYNC {entry}" for entry in sorted(set(ONLY_ASYNC) - found_async)]
    stale += [f"ONLY_BLOCKING {entry}" for entry in sorted(set(ONLY_BLOCKING) - found_blocking)]
    for async_name, name in OTHER_PARAMETERS:
        async_cls = getattr(sskv_mapping, async_name)
        twin = getattr(sskv_mapping, async_name.removeprefix("Async"))
        if _parameters(getattr(async_cls, name)) == _parameters(getattr(twin, _twin_names(async_name)[name])):
            stale.append(f"OTHER_PARAMETERS {(async_name, name)}")
    for async_name, renames in RENAMED.items():
        methods = public_methods(getattr(sskv_mapping, async_name))
        stale += [f"RENAMED {async_name}.{name}" for name in renames if name not in methods]
    assert not stale, "listed as a deliberate difference, but the twins no longer differ there: " + ", ".join(stale)
