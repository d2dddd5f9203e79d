"""After ``os.fork()``: the one hook by which the child forgets what belongs to the parent.

Connections, the loop thread, local caches and the adapters' shared clients register here what they do in a child
(docs/design/architecture.md, "Below the faces").
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["generation", "in_child_after_fork", "registered"]

log = logging.getLogger("sskv_mapping")

_lock = threading.Lock()
#: registration number -> a callable, or a weak reference to a bound method (its object may go)
_hooks: dict[int, Callable[[], Any] | weakref.WeakMethod[Callable[[], Any]]] = {}
_next = 0
#: How many forks separate this process from the one that imported the package (0 there, 1 in its children...)
_generation = 0


def generation() -> int:
    """How many ``os.fork()`` calls this process is away from the one that imported the package: an object
    that notes it when made knows, later, whether it was made in this process or inherited from a parent."""
    return _generation


def in_child_after_fork(hook: Callable[[], object]) -> None:
    """Run ``hook()`` in a child process right after ``os.fork()``, before anything else happens there.

    A bound method is held weakly (registering an object's method does not keep the object alive; its entry goes
    with it); a plain function is held for good (module-level hooks). Hooks run in the order registered; one that
    raises is logged and the others still run. ``hook`` must not block nor touch another thread's objects'
    locks but its own (in the child no other thread exists: a lock held at the fork stays held).
    """
    global _next
    with _lock:
        number = _next
        _next += 1
        if inspect.ismethod(hook):
            _hooks[number] = weakref.WeakMethod(hook, lambda _ref: _hooks.pop(number, None))
        else:
            _hooks[number] = hook


def registered() -> int:
    """How many hooks are registered now (objects gone take theirs with them)."""
    return len(_hooks)


def _run_in_child() -> None:
    global _lock, _generation
    _generation += 1
    _lock = threading.Lock()  # the parent may have held it at the fork, in a thread the child does not have
    for entry in list(_hooks.values()):
        hook = entry() if isinstance(entry, weakref.WeakMethod) else entry
        if hook is None:
            continue
        try:
            hook()
        except Exception:
            log.exception("an after-fork hook failed in the child process")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_in_child)
