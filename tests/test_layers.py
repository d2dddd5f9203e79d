"""The house plan as a test: each module imports only from its own layer or the layers below it.

Layers, bottom to top (design.md, README "Design"); a module missing from the table fails the test, so a new
module has to be given its place. Also: only the ``_transport/mqtt/`` package imports aiomqtt or paho; the
protocol core and the emulator core do no I/O (no asyncio, sockets, subprocesses or TLS; a lock for thread safety
is fine).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sskv_mapping"

LAYERS: list[tuple[str, set[str]]] = [
    ("errors", {"errors", "_unset"}),
    ("arguments", {"_keys", "_ttl"}),
    (
        "protocol",
        {
            "_protocol",
            "_protocol.commands",
            "_protocol.errors",
            "_protocol.headers",
            "_protocol.hlc",
            "_protocol.notifications",
        }
        | {
            "_protocol.resp3",
            "_protocol.topics",
            "_protocol.mqtt_publish",
            "_protocol.mqtt_packets",
            "_protocol.mqtt_session",
        },
    ),
    (
        "transport",
        {"_transport", "_transport.base", "_transport.settings", "_transport.rpc", "_transport.loopback", "_backoff"}
        | {"_transport.tls", "_transport.stream", "_transport.sat", "_transport.aio_settings"},
    ),
    ("transport-io", {"_transport.mqtt", "_transport.mqtt._hooks", "_transport.choice", "_sync"}),
    ("client parts", {"_watches", "_keeper", "_in_flight", "_scan", "_requests"}),
    ("client", {"client"}),
    ("primitives", {"codecs", "local_cache", "_fanout", "_cache_stats", "lock"}),
    ("namespace parts", {"_key_locks", "_index", "_listing", "_generation", "election"}),
    ("namespace", {"_store"}),
    ("cache algorithms", {"_renewal", "_counter", "_single_flight", "_cache_writes"}),
    ("mapping and cache", {"mapping", "cache"}),
    (
        "emulator",
        {"emulator", "emulator.core", "emulator.scan", "emulator.broker", "emulator.server", "emulator.inprocess"}
        | {"emulator.inspection", "emulator.inspector"},
    ),
    ("entry points", {"emulator.__main__", "_cli_client", "cli", "demo", "__init__"}),
    (
        "integrations",
        {"integrations", "integrations._common"}
        | {f"integrations.{n}" for n in ("aiocache", "django", "fastapi", "flask_caching", "litestar")},
    ),
]
RANK = {module: rank for rank, (_, modules) in enumerate(LAYERS) for module in modules}

#: modules that must do no I/O at all (sans-IO), beyond the layer rule
PURE = {name for name in RANK if name.startswith("_protocol")} | {
    "errors",
    "_unset",
    "_keys",
    "_ttl",
    "_backoff",
    "emulator.core",
    "emulator.scan",
    "emulator.inspection",
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
    assert sorted(set(MODULES) - set(RANK)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers(name: str) -> None:
    ours, _ = _imports(name, MODULES[name])
    upward = sorted(
        f"{target} ({LAYERS[RANK[target]][0]})"
        for target in ours
        if target in RANK and target != name and RANK[target] > RANK[name]
    )
    assert upward == [], f"{name} ({LAYERS[RANK[name]][0]}) imports from above its layer"
    unknown = sorted(t for t in ours if t not in RANK)
    assert unknown == []


#: the one package allowed to import aiomqtt/paho: ``_transport.mqtt`` and its submodules
MQTT_PACKAGE = "_transport.mqtt"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_mqtt_transport_imports_aiomqtt_or_paho(name: str) -> None:
    _, foreign = _imports(name, MODULES[name])
    if name != MQTT_PACKAGE and not name.startswith(MQTT_PACKAGE + "."):
        assert not foreign & {"aiomqtt", "paho"}


def test_the_mqtt_package_is_what_imports_aiomqtt_and_paho() -> None:
    # the exemption above covers the package and nothing else (not a sibling such as ``_transport.mqtt_x``)
    importers = sorted(name for name in MODULES if _imports(name, MODULES[name])[1] & {"aiomqtt", "paho"})
    assert importers == ["_transport.mqtt", "_transport.mqtt._hooks"]


@pytest.mark.parametrize("name", sorted(PURE))
def test_the_pure_cores_do_no_io(name: str) -> None:
    _, foreign = _imports(name, MODULES[name])
    assert sorted(foreign & IO_MODULES) == []


def test_the_layer_rule_can_fail() -> None:
    # the checker itself: a module of the protocol layer importing the client is caught
    assert RANK["client"] > RANK["_protocol.hlc"]
    assert _imports("cache", MODULES["cache"])[0] >= {"client", "_store"}


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
    ("the emulator", "package", lambda m: m.startswith("emulator")),
    ("the mapping/cache", "package", lambda m: m in {"mapping", "cache"}),
    ("the mapping or cache", "package", lambda m: m in {"mapping", "cache"}),
    ("the mapping module", "package", lambda m: m == "mapping"),
    ("the mapping layers", "package", lambda m: m == "mapping"),
    ("the client", "package", lambda m: m == "client"),
    ("the transport", "package", lambda m: m.startswith("_transport")),
    ("the layers above the client", "package", lambda m: RANK[m] > RANK["client"]),
    ("the layers above", "package", lambda m: RANK[m] > RANK["client"]),
]


def _must_not(name: str) -> str:
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))) or ""
    found = re.search(r"must not import (.*?)(?:\.\s|\.$|;|$)", doc, re.S | re.I)
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
            hits = sorted(m for m in ours if m in RANK and m != name and rule(m))
            assert hits == [], f"{name} imports {hits} ({phrase!r})"
    above = re.search(r"anything above ``(\w+)``", sentence)
    if above:
        checked = True
        floor = max(RANK[m] for m in RANK if m == above.group(1) or m.startswith(above.group(1) + "."))
        assert sorted(m for m in ours if m in RANK and RANK[m] > floor) == []
    if re.search(r"anything (but|outside) the standard library", sentence):
        checked = True
        allowed = set(re.findall(r":mod:`sskv_mapping\.([\w.]+)`", sentence))
        assert sorted(m for m in ours if m not in allowed) == []
        assert sorted(foreign - set(sys.stdlib_module_names) - {"__future__"}) == []
    assert checked, f"{name}: no phrase of {sentence!r} is known to this test; add it to PHRASES"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_class_is_over_450_lines(name: str) -> None:
    # a newcomer owns a class in a day: past this size, split it along its concepts (see _watches, _keeper)
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    sizes = {
        n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.end_lineno
    }
    assert {cls: size for cls, size in sizes.items() if size > 450} == {}
