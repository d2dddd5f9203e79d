"""The sync/async parity check: every public async method has a blocking twin with the same parameters.

"Async method" means a coroutine function, and also a method that hands back an async iterator (an async
generator function, or a plain method annotated ``-> AsyncIterator[...]`` such as ``client.scan``): its twin
returns a blocking iterator and takes the same parameters."""

from __future__ import annotations

import inspect
from collections.abc import Mapping


def public_coroutines(cls: type) -> dict[str, inspect.Signature]:
    out = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") and name not in ("__aenter__", "__aexit__"):
            continue
        if inspect.iscoroutinefunction(member) or _returns_async_iterator(member):
            out[name] = inspect.signature(member)
    return out


def _returns_async_iterator(member: object) -> bool:
    if inspect.isasyncgenfunction(member):
        return True
    if not inspect.isfunction(member) or hasattr(member, "__wrapped__"):  # e.g. an @asynccontextmanager
        return False
    returns = inspect.signature(member).return_annotation
    return isinstance(returns, str) and returns.startswith(("AsyncIterator[", "AsyncGenerator["))


_DUNDER_TWINS = {"__aenter__": "__enter__", "__aexit__": "__exit__", "aclose": "close"}


def assert_twins(async_cls: type, sync_cls: type, renames: Mapping[str, str] | None = None) -> list[str]:
    """Assert the twin exists for each public coroutine of ``async_cls``; returns the names checked.

    Parameters must match by name, kind and default (context-manager dunders only need to exist).
    """
    names = {**_DUNDER_TWINS, **(renames or {})}
    checked = []
    problems = []
    for name, sig in public_coroutines(async_cls).items():
        twin_name = names.get(name, name)
        twin = getattr(sync_cls, twin_name, None)
        if twin is None or not callable(twin):
            problems.append(f"{sync_cls.__name__}.{twin_name} is missing (twin of {async_cls.__name__}.{name})")
            continue
        if inspect.iscoroutinefunction(twin):
            problems.append(f"{sync_cls.__name__}.{twin_name} is a coroutine function; it must block")
            continue
        checked.append(name)
        if name.startswith("__"):
            continue
        a = [(p.name, p.kind, p.default) for p in sig.parameters.values()]
        s = [(p.name, p.kind, p.default) for p in inspect.signature(twin).parameters.values()]
        if a != s:
            problems.append(f"{sync_cls.__name__}.{twin_name}{inspect.signature(twin)} != {name}{sig}")
    assert not problems, "\n".join(problems)
    return checked
