"""The house plan as a test: the folders are the layers, and each module imports only from its own layer or below.

A module's layer is its package (docs/design/architecture.md); bottom to top, the tree is the drawing. Within a layer
any import is allowed, but the import graph as a whole (function-level imports included) has no cycle. A module
whose package is missing from the table fails the test, so a new package has to be given its place. Also: only
the paho transport imports aiomqtt or paho; the protocol core and the emulator core do no I/O (no asyncio, sockets,
subprocesses or TLS; a lock for thread safety is fine).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sskv_mapping"

#: bottom to top: each layer is a list of package (or top-level module) names; a module belongs to the layer of
#: its longest listed prefix
LAYERS: list[tuple[str, list[str]]] = [
    ("leaves", ["errors", "_unset", "_keys", "_ttl", "_fork"]),
    ("protocol", ["_protocol"]),
    ("transport", ["_transport", "_blocking", "_telemetry"]),
    ("client", ["client"]),
    ("primitives", ["codecs", "local_cache", "lock"]),
    ("namespace", ["_namespace"]),
    ("election", ["election"]),
    ("faces", ["mapping", "cache"]),
    ("emulator", ["emulator"]),
    ("entry points", ["cli", "demo", "__init__"]),
    ("integrations", ["integrations"]),
    ("testing", ["testing"]),
]
_PREFIX_RANK = {prefix: rank for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _sibling(module: str, of: str) -> bool:
    """``module`` is ``of`` or lives in the same package (a face's rule is about other faces, not its own parts)."""
    return module == of or ("." in of and _under(module, of.split(".")[0]))


def rank_of(module: str) -> int | None:
    """The layer of ``module`` (a dotted name inside the package), ``None`` if no listed package holds it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = _PREFIX_RANK.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


def _module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1] or ["__init__"]
        names.append(".".join(parts))
    return names


MODULE_NAMES = _module_names()

#: modules that must do no I/O at all (sans-IO), beyond the layer rule
PURE = {name for name in MODULE_NAMES if _under(name, "_protocol")} | {
    "errors",
    "_unset",
    "_keys",
    "_ttl",
    "_transport.backoff",
    "_namespace.key_index",
    "mapping._index_format",
    "emulator.core",
    "emulator.inspection",
    "emulator.scan",
    "local_cache",
}
IO_MODULES = {"asyncio", "socket", "selectors", "subprocess", "ssl", "aiomqtt", "paho"}  # a threading.Lock is fine


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1] or ["__init__"]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path) -> tuple[set[str], set[str]]:
    """(package modules imported, top-level foreign modules imported) by the module ``name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    ours: set[str] = set()
    foreign: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sskv_mapping."):
                    ours.add(alias.name.removeprefix("sskv_mapping."))
                else:
                    foreign.add(alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module and node.module.startswith("sskv_mapping"):
                    ours.add(node.module.removeprefix("sskv_mapping").lstrip(".") or "__init__")
                elif node.module:
                    foreign.add(node.module.split(".")[0])
                continue
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            if not node.module:  # ``from . import x``: x may be a module
                for alias in node.names:
                    candidate = ".".join([*base, alias.name])
                    ours.add(candidate if candidate in _modules() else (target or "__init__"))
            else:
                ours.add(target or "__init__")
    return ours, foreign


MODULES = _modules()


def test_every_module_has_a_layer() -> None:
    assert sorted(name for name in MODULES if rank_of(name) is None) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers(name: str) -> None:
    ours, _ = _imports(name, MODULES[name])
    unknown = sorted(t for t in ours if t not in MODULES)
    assert unknown == []
    own = rank_of(name)
    assert own is not None
    upward = sorted(f"{t} ({LAYERS[r][0]})" for t in ours if (r := rank_of(t)) is not None and r > own)
    assert upward == [], f"{name} ({LAYERS[own][0]}) imports from above its layer"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself): Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    # a package's own __init__ re-exporting its modules is not an edge back into the package
    edges = {name: {t for t in _imports(name, MODULES[name])[0] if t != name} for name in MODULES}
    assert _cycles(edges) == []


def test_the_cycle_check_can_fail() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


#: the one module allowed to import aiomqtt/paho
PAHO_MODULE = "_transport.paho"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_mqtt_transport_imports_aiomqtt_or_paho(name: str) -> None:
    _, foreign = _imports(name, MODULES[name])
    if name != PAHO_MODULE:
        assert not foreign & {"aiomqtt", "paho"}


def test_the_paho_module_is_what_imports_aiomqtt_and_paho() -> None:
    # the exemption above covers that module and nothing else
    importers = sorted(name for name in MODULES if _imports(name, MODULES[name])[1] & {"aiomqtt", "paho"})
    assert importers == [PAHO_MODULE]


@pytest.mark.parametrize("name", sorted(PURE))
def test_the_pure_cores_do_no_io(name: str) -> None:
    _, foreign = _imports(name, MODULES[name])
    assert sorted(foreign & IO_MODULES) == []


def test_the_layer_rule_can_fail() -> None:
    # the checker itself: a module of the protocol layer importing the client would be caught
    assert (rank_of("client._client") or 0) > (rank_of("_protocol.hlc") or 0)
    assert rank_of("not_a_package.x") is None
    assert _imports("cache._cache", MODULES["cache._cache"])[0] >= {"client._client", "_namespace.store"}


# -- the "Must not import" line of every module docstring, checked ----------------------------------------

FRAMEWORKS = {"django", "flask", "flask_caching", "cachelib", "litestar", "aiocache", "fastapi", "starlette"}
EXTRAS = FRAMEWORKS | {"msgpack"}

#: phrase of a "Must not import ..." sentence -> what it forbids: ("package", predicate on a module name) or
#: ("foreign", set of top-level names). Every phrase a docstring uses must be known here, or the test fails.
PHRASES: list[tuple[str, str, Any]] = [
    ("aiomqtt/paho", "foreign", {"aiomqtt", "paho"}),
    ("aiomqtt", "foreign", {"aiomqtt", "paho"}),
    ("asyncio", "foreign", {"asyncio"}),
    ("sockets", "foreign", {"socket", "ssl"}),
    ("any optional extra", "foreign", EXTRAS),
    ("any other framework", "foreign", None),  # every framework but the module's own
    ("any framework", "foreign", FRAMEWORKS),
    ("the emulator", "package", lambda m: _under(m, "emulator")),
    ("the mapping/cache", "package", lambda m: _under(m, "mapping") or _under(m, "cache")),
    ("the mapping or cache", "package", lambda m: _under(m, "mapping") or _under(m, "cache")),
    ("the mapping module", "package", lambda m: _under(m, "mapping")),
    ("the mapping layers", "package", lambda m: _under(m, "mapping")),
    ("the client", "package", lambda m: _under(m, "client")),
    ("the transport", "package", lambda m: _under(m, "_transport")),
    ("the layers above the client", "package", lambda m: (rank_of(m) or 0) > (rank_of("client") or 0)),
    ("the layers above", "package", lambda m: (rank_of(m) or 0) > (rank_of("client") or 0)),
]


def _must_not(name: str) -> str:
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))) or ""
    found = re.search(r"must not import:? (.*?)(?:\.\s|\.$|;|$)", doc, re.S | re.I)
    return " ".join(found.group(1).split()) if found else ""


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_says_what_it_must_not_import_and_keeps_to_it(name: str) -> None:
    sentence = _must_not(name)
    assert sentence, f"{name}'s docstring has no 'Must not import ...' line"
    ours, foreign = _imports(name, MODULES[name])
    own_framework = name.removeprefix("integrations.") if name.startswith("integrations.") else ""
    checked = False
    for phrase, kind, rule in PHRASES:
        if phrase not in sentence:
            continue
        checked = True
        if kind == "foreign":
            banned = (
                (
                    FRAMEWORKS - {own_framework, "flask", "cachelib"}
                    if own_framework == "flask_caching"
                    else FRAMEWORKS - {own_framework}
                )
                if rule is None
                else rule
            )
            if own_framework == "fastapi" and rule is None:
                banned = banned - {"starlette"}
            assert not foreign & banned, f"{name} imports {sorted(foreign & banned)} ({phrase!r})"
        else:
            hits = sorted(m for m in ours if m in MODULES and not _sibling(m, name) and rule(m))
            assert hits == [], f"{name} imports {hits} ({phrase!r})"
    named = re.findall(r"(?<![`.\w])sskv_mapping\.([\w.]+\w)", sentence)
    if named and not re.search(r"anything (but|outside)", sentence):
        checked = True
        hits = sorted(m for m in ours if not _sibling(m, name) and any(_under(m, package) for package in named))
        assert hits == [], f"{name} imports {hits} ({sentence!r})"
    above = re.search(r"anything above ``(\w+)``", sentence)
    if above:
        checked = True
        floor = rank_of(above.group(1))
        assert floor is not None
        assert sorted(m for m in ours if (rank_of(m) or 0) > floor) == []
    if re.search(r"anything (but|outside) the standard library", sentence):
        checked = True
        allowed = set(re.findall(r":mod:`sskv_mapping\.([\w.]+)`", sentence))
        assert sorted(m for m in ours if m not in allowed) == []
        assert sorted(foreign - set(sys.stdlib_module_names) - {"__future__"}) == []
    assert checked, f"{name}: no phrase of {sentence!r} is known to this test; add it to PHRASES"


#: A class is as big as its concepts: count what it holds (instance attributes and annotated fields), not its
#: lines, which a docstring or a comment moves. Past this many, split it along its concepts (see _watches,
#: _keeper, the emulator's outbox).
ATTRIBUTE_BUDGET = 15
#: The classes over the budget today, each with its count: it may shrink, never grow. Splitting them is the
#: house step's work (StreamConnection's output batching and flow control as one private object, first).
OVER_BUDGET = {
    "AsyncStateStoreCache": 16,
    "AsyncStateStoreClient": 18,
    # its fields are connection options, each one a switch (trace_context: docs/observability.md)
    "ConnectionSettings": 16,
    "EmulatorServer": 18,
    "ConnectionKeeper": 19,
    "MqttSession": 19,
    "StoredKeyIndex": 21,
    "NamespaceStore": 21,
    "StreamConnection": 20,
}


def _attributes(cls: ast.ClassDef) -> set[str]:
    names = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for method in methods:
        for node in ast.walk(method):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign | ast.AugAssign)
                else []
            )
            for target in targets:
                names.update(
                    e.attr
                    for e in ast.walk(target)
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"
                )
    return names


def test_the_attribute_count_sees_self_assignments_and_fields() -> None:
    cls = ast.parse(
        "class C:\n    f: int\n    def m(self):\n        self.a = 1\n        self.b, x = 2, 3\n        y = 4"
    )
    assert _attributes(cls.body[0]) == {"f", "a", "b"}  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_class_holds_more_than_its_budget(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    counts = {n.name: len(_attributes(n)) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    over = {cls: n for cls, n in counts.items() if n > OVER_BUDGET.get(cls, ATTRIBUTE_BUDGET)}
    assert over == {}, f"split these along their concepts (budget {ATTRIBUTE_BUDGET} attributes): {over}"


def test_the_over_budget_list_is_current() -> None:
    # a class that shrank (or went) leaves the list, so the ratchet holds it where it now is
    counts: dict[str, int] = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name in OVER_BUDGET:
                counts[node.name] = len(_attributes(node))
    assert counts == OVER_BUDGET


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_docstring_numbers_its_layer(name: str) -> None:
    # the tree is the one numbering: a "Layer N" in prose drifts from it (three numberings disagreed once)
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))) or ""
    assert re.search(r"\bLayer \d", doc) is None


def test_the_architecture_page_draws_every_package() -> None:
    # the docs' drawing is the tree: a package added to sskv_mapping/ must be placed on the page too
    page = (PACKAGE.parent / "docs" / "design" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(
        p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE
    )
    assert [p for p in packages if f"{p}/" not in page] == []
    assert [name for name in _PREFIX_RANK if "." not in name and name != "__init__" and name not in page] == []
