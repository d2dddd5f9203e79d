"""The house plan as a test: the folders are the layers, and each module imports only from its own layer or below.

A module's layer is its package (docs/design/architecture.md); bottom to top, the tree is the drawing. Within a layer
any import is allowed, but the import graph as a whole (function-level imports included) has no cycle. A module
whose package is missing from the table fails the test, so a new package has to be given its place. Also: only
the paho transport imports aiomqtt or paho; the protocol core and the emulator core do no I/O (no asyncio, sockets,
subprocesses or TLS; a lock for thread safety is fine). The few modules held to more than their layer are in
MUST_NOT_IMPORT and STDLIB_ONLY: the one place the import rules are written (not the module docstrings).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

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
    "_namespace.key_layout",
    "mapping._index_format",
    "emulator.core",
    "emulator.store_view",
    "emulator.scan",
    "local_cache",
    "local_cache._entries",
    "local_cache._reads",
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


# -- what a module must not import, beyond its layer -------------------------------------------------------

FRAMEWORKS = {
    "django",
    "flask",
    "flask_caching",
    "cachelib",
    "litestar",
    "aiocache",
    "fastapi",
    "starlette",
    "dogpile",
    "hishel",
}
EXTRAS = FRAMEWORKS | {"msgpack"}
NO_IO = {"asyncio", "socket", "ssl"}


def _above(layer: str) -> set[str]:
    """Every package (or top-level module) of a layer above ``layer``."""
    floor = [name for name, _ in LAYERS].index(layer)
    return {prefix for _, prefixes in LAYERS[floor + 1 :] for prefix in prefixes}


def _frameworks_but(*own: str) -> set[str]:
    return FRAMEWORKS - set(own)


#: module or package -> what it must not import, on top of the layer rule, the aiomqtt/paho rule and PURE above.
#: A module follows its longest listed prefix (as in LAYERS). A name of ours bans that package (or module) and all
#: under it, the module's own package included; any other name bans that top-level module (``codecs`` is ours).
MUST_NOT_IMPORT: dict[str, set[str]] = {
    "__init__": EXTRAS,  # an extra is imported when the feature needing it is used
    "_namespace.key_index": {"client"},
    "_transport.backoff": _above("leaves"),  # a leaf kept beside its one user
    "cache": {"mapping"},  # a sibling face: the cache shares _namespace with the dict, not the dict itself
    "cache._stats": set(),
    "client._in_flight": {"_transport"},
    "codecs": {"_transport", "client"} | EXTRAS,  # msgpack is imported when a MsgpackCodec is built
    "emulator": {"client"},  # the emulator is the server side: it talks MQTT through _transport only
    "emulator._telemetry": set(),
    "emulator.broker": _above("protocol"),
    "emulator.core": {"_transport", "client"},  # sans-IO: bytes in, bytes out
    "emulator.duplicates": {"_transport"} | NO_IO,  # its clock is a number handed in
    "emulator.store_view": {"_transport", "client", "mapping", "cache"},
    "emulator.inspector": {"client", "mapping", "cache"},
    "emulator.scan": {"_transport", "client"},
    "integrations": FRAMEWORKS,
    "integrations.aiocache": _frameworks_but("aiocache"),
    "integrations.django": _frameworks_but("django"),
    "integrations.dogpile": _frameworks_but("dogpile"),
    "integrations.hishel": _frameworks_but("hishel"),
    "integrations.fastapi": _frameworks_but("fastapi", "starlette"),
    "integrations.flask_caching": _frameworks_but("flask_caching", "flask", "cachelib"),
    "integrations.litestar": _frameworks_but("litestar"),
    "local_cache": {"_transport", "client"},  # only _protocol, cachetools and the standard library
    "mapping": {"cache"},
    "mapping._dict": set(),
    "testing": FRAMEWORKS,  # the Litestar and FastAPI helpers import our adapters when called
    "testing._bridge": {"mapping", "cache"},
    "testing._clock": _above("transport") - {"testing"} | {"asyncio"},
}
#: the leaves: module -> the modules of ours it may import; nothing else but the standard library
STDLIB_ONLY: dict[str, set[str]] = {
    "errors": set(),
    "_unset": set(),
    "_fork": set(),
    "_keys": {"errors"},
    "_ttl": {"errors", "_unset"},
    "_protocol.error_texts": {"errors"},
    "mapping._index_format": {"errors", "_namespace.key_index"},
    # the table of key layouts: the faces build their keys with it and the emulator's inspector reads them with it
    "_namespace.key_layout": {"errors", "_keys"},
}


def rule_of(module: str) -> set[str]:
    """What ``module`` must not import beyond its layer: its longest prefix in MUST_NOT_IMPORT (empty if none)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = MUST_NOT_IMPORT.get(".".join(parts[:n]))
        if found is not None:
            return found
    return set()


def _breaks(ours: set[str], foreign: set[str], banned: set[str]) -> list[str]:
    """The imports (ours dotted, foreign top-level) that ``banned`` forbids."""
    packages = {name for name in banned if rank_of(name) is not None}
    return sorted({m for m in ours if any(_under(m, p) for p in packages)} | (foreign & (banned - packages)))


def test_the_import_rules_name_what_exists() -> None:
    # a renamed module must take its rule along: a stale key would leave the new name unchecked
    names = [*MUST_NOT_IMPORT, *STDLIB_ONLY, *(n for allowed in STDLIB_ONLY.values() for n in allowed)]
    assert sorted(n for n in names if n not in MODULES and not any(_under(m, n) for m in MODULES)) == []
    ours = {n for banned in MUST_NOT_IMPORT.values() for n in banned if rank_of(n) is not None}
    assert sorted(n for n in ours if n not in MODULES and not any(_under(m, n) for m in MODULES)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_keeps_to_its_import_rule(name: str) -> None:
    ours, foreign = _imports(name, MODULES[name])
    assert _breaks(ours, foreign, rule_of(name)) == [], f"{name} imports what MUST_NOT_IMPORT bans"
    if name in STDLIB_ONLY:
        assert sorted(ours - STDLIB_ONLY[name]) == []
        assert sorted(foreign - set(sys.stdlib_module_names) - {"__future__"}) == []


def test_the_import_rule_can_fail() -> None:
    assert rule_of("emulator.server") == {"client"}
    assert rule_of("emulator._telemetry") == set()
    assert rule_of("_protocol.hlc") == set()
    assert _breaks({"client._client", "_protocol.hlc"}, {"asyncio"}, rule_of("emulator.core")) == ["client._client"]
    assert _breaks(set(), {"asyncio", "json"}, rule_of("emulator.duplicates")) == ["asyncio"]
    assert _breaks({"_transport"}, set(), rule_of("_transport.backoff")) == ["_transport"]
    assert "flask" not in rule_of("integrations.flask_caching")
    assert "django" in rule_of("integrations.flask_caching")


#: A class is as big as its concepts: count what it holds (instance attributes and annotated fields), not its
#: lines, which a docstring or a comment moves. Past this many, split it along its concepts (see _watches,
#: _keeper, the emulator's outbox).
ATTRIBUTE_BUDGET = 15
#: The classes over the budget today, each with its count: it may shrink, never grow. Splitting them is the
#: house step's work.
OVER_BUDGET = {
    # its fields are connection options, each one a switch (trace_context: docs/observability.md)
    "ConnectionSettings": 16,
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
    assert isinstance(cls.body[0], ast.ClassDef)
    assert _attributes(cls.body[0]) == {"f", "a", "b"}


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


#: a module docstring is a summary, a sentence or two and a link to its design page (docs/contributing.md)
MODULE_DOCSTRING_LINES = 5


def _docstring_lines(source: str) -> int:
    doc = ast.get_docstring(ast.parse(source), clean=False) or ""
    return len(doc.strip("\n").splitlines())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_docstrings_are_a_few_lines(name: str) -> None:
    # longer text belongs on a design page, where it is read once, not in a docstring copied beside it
    assert _docstring_lines(MODULES[name].read_text(encoding="utf-8")) <= MODULE_DOCSTRING_LINES


def test_the_docstring_length_check_can_fail() -> None:
    assert _docstring_lines('"""One.\n\nTwo.\nThree.\nFour.\nFive.\n"""') == 6


def test_the_architecture_page_draws_every_package() -> None:
    # the docs' drawing is the tree: a package added to sskv_mapping/ must be placed on the page too
    page = (PACKAGE.parent / "docs" / "design" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(
        p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE
    )
    assert [p for p in packages if f"{p}/" not in page] == []
    assert [name for name in _PREFIX_RANK if "." not in name and name != "__init__" and name not in page] == []
