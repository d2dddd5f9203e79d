"""No storm of requests from the library itself: a source scan for the shapes that made one.

A task per item created at once (``create_task`` in a loop or a comprehension) or an ``asyncio.gather(*...)`` over
an iterable of any size sends as many requests as there are items, all at once; a mosquitto on its default
settings queues 1,000 per session and drops the rest without a word. Such work goes through
``fanout.gather_bounded`` (a bounded number in flight) or ``fanout.BoundedWork`` (one background task). The scan
reads every module of the package (AST) and fails on any such shape not listed below with the reason it is bounded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sskv_mapping

PACKAGE = Path(sskv_mapping.__file__).parent

# (module path relative to the package, the call as ast.unparse writes it) -> why it is bounded
ALLOWED: dict[tuple[str, str], str] = {
    (
        "_namespace/fanout.py",
        "group.create_task(worker(i, coro))",
    ): "one worker per item of a list cut to `limit` items",
    ("_namespace/key_locks.py", "asyncio.gather(*self._releasing, return_exceptions=True)"): (
        "waits for the releases of one lock that are already under way (one per hold at most); it creates none"
    ),
    ("testing/_faults.py", "loop.create_task(coro)"): "five tasks per relayed connection, over a tuple of five",
    ("testing/_faults.py", "asyncio.gather(*tasks, return_exceptions=True)"): (
        "the fault proxy's shutdown waits for the tasks it cancelled (five per open connection); it creates none"
    ),
}

_TASK_MAKERS = {"create_task", "ensure_future"}


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


class _Scan(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module
        self.loop_depth = 0
        self.found: list[str] = []

    def _loop(self, node: ast.AST) -> None:
        self.loop_depth += 1
        self.generic_visit(node)
        self.loop_depth -= 1

    # loops over an iterable (a `while` loop that awaits what it starts each round makes no burst)
    visit_For = visit_AsyncFor = _loop
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _loop

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # a function defined in a loop runs when called, not per iteration
        depth, self.loop_depth = self.loop_depth, 0
        self.generic_visit(node)
        self.loop_depth = depth

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node)
        text = ast.unparse(node)
        if name in _TASK_MAKERS and self.loop_depth and (self.module, text) not in ALLOWED:
            self.found.append(f"{self.module}:{node.lineno}: a task per item in a loop: {text}")
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        if name == "gather" and starred and (self.module, text) not in ALLOWED:
            self.found.append(f"{self.module}:{node.lineno}: gather over an iterable of any size: {text}")
        self.generic_visit(node)


def _scan(source: str, module: str = "m.py") -> list[str]:
    scan = _Scan(module)
    scan.visit(ast.parse(source))
    return scan.found


def test_the_package_creates_no_unbounded_burst_of_tasks() -> None:
    found: list[str] = []
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 30  # the scan sees the package
    for path in modules:
        found += _scan(path.read_text("utf-8"), path.relative_to(PACKAGE).as_posix())
    assert found == []


def test_every_allowed_shape_still_exists() -> None:
    """An allowance whose code is gone is removed, so the list never shelters a new burst by accident."""
    seen: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call):
                seen.add((module, ast.unparse(node)))
    assert set(ALLOWED) <= seen


def test_the_scan_finds_the_shapes_that_made_storms() -> None:
    """The shapes of the old ``_release_idle_watches`` and of a gather over keys are caught; bounded ones pass."""
    storm = """
def release(loop, idle, watches):
    for k in idle:
        task = loop.create_task(close(watches.pop(k)))
"""
    gather_all = "async def f(keys):\n    await asyncio.gather(*(get(k) for k in keys))\n"
    tasks_in_comprehension = "def f(loop, keys):\n    return [loop.create_task(get(k)) for k in keys]\n"
    bounded = """
async def f(keys, loop):
    await gather_bounded((get(k) for k in keys), 64)
    await asyncio.gather(one(), two())
    for k in keys:
        async def later():
            loop.create_task(x())
"""
    assert len(_scan(storm)) == 1
    assert len(_scan(gather_all)) == 1
    assert len(_scan(tasks_in_comprehension)) == 1
    assert _scan(bounded) == []
