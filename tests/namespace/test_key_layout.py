"""The table of store key layouts: every layout builds, parses back and is classified as itself, and the emulator's
inspector reads keys with the same table (its role of a key is the table's layout)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping._namespace import key_layout
from sskv_mapping._namespace.key_layout import LAYOUTS, KeyLayout, Layout, Part, StoreKey, parse_key
from sskv_mapping.emulator.store_view import KeyRole, role_of
from sskv_mapping.errors import ConfigurationError

PACKAGE = Path(key_layout.__file__).resolve().parents[1]

# text as the faces accept it: any character but a lone surrogate (not UTF-8)
_TEXT = st.characters(exclude_categories=["Cs"])
NAMESPACES = st.text(_TEXT, min_size=1).filter(lambda ns: "/" not in ns and "#" not in ns)
HOSTILE_KEYS = ["", "/", "#", "a/b#c", "ü", "日本/語#", "\x00\n\t", "g.x/y", "index-lock/0001", "django-lock/x"]
FIELDS: dict[str, st.SearchStrategy[Part]] = {
    "key": st.one_of(st.sampled_from(HOSTILE_KEYS), st.text(_TEXT)),
    "gen": st.one_of(st.just("0123456789ab"), st.text(_TEXT, min_size=1).filter(lambda g: "/" not in g)),
    "digest": st.text("0123456789abcdef", min_size=1, max_size=64),
    "entry": st.text("0123456789abcdef", min_size=1, max_size=32),
    "chunk": st.integers(0, 10**9),
}
SHARDS = {"index shard": 0xFFFF, "index-lock": 0xFFFF, "ledger shard": 0xFF, "persist-lock": 0xFF}


def _parts(layout: Layout) -> st.SearchStrategy[dict[str, Part]]:
    return st.fixed_dictionaries(
        {f: st.integers(0, SHARDS[layout.name]) if f == "shard" else FIELDS[f] for f in layout.fields}
    )


def test_every_layout_has_a_name_of_its_own_and_a_separator() -> None:
    assert len({layout.name for layout in LAYOUTS}) == len(LAYOUTS)
    assert len({layout.template for layout in LAYOUTS}) == len(LAYOUTS)
    assert {layout.separator for layout in LAYOUTS} == {"/", "#"}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.name)
@given(data=st.data(), ns=st.one_of(st.sampled_from(["ns", "ü", "日本", "*?[", " ", "a.b!c~d"]), NAMESPACES))
def test_a_key_parses_back_to_its_layout_and_parts(layout: Layout, data: st.DataObject, ns: str) -> None:
    parts = data.draw(_parts(layout))
    key = layout.build(ns, **parts)
    assert layout.parse(key) == StoreKey(layout, ns, parts)
    found = parse_key(key)
    assert found is not None and found.namespace == ns
    if found.layout is layout:
        assert found.parts == parts
    else:
        # the one ambiguity of the table: a dict key spelled as an adapter's key under the same ``ns/``
        assert layout is key_layout.DATA and found.layout.separator == "/", found
        assert key_layout.DATA.parse(key) == StoreKey(layout, ns, parts)
    # the library's own keys (``ns#...``) are told apart by their spelling alone, whatever the order of the table
    if layout.separator == "#":
        assert [other for other in LAYOUTS if other.parse(key) is not None] == [layout]
    # and the inspector says what the table says
    assert role_of(key) == KeyRole(ns, found.layout.face, found.layout.name, found.detail, lock=found.layout.lock)


def test_the_inspector_names_a_key_by_its_layout() -> None:
    role = role_of("web#g.0123456789ab/a/b#ü".encode())
    assert role == KeyRole("web", "cache", "entry", "a/b#ü")
    assert role_of(b"orders#index-lock/002a") == KeyRole("orders", "dict", "index-lock", "002a", lock=True)
    assert role_of(b"web#persist/0123456789ab/0f") == KeyRole("web", "cache", "ledger shard", "0123456789ab/0f")
    assert role_of(b"web/django-lock/:1:k") == KeyRole("web", "prefix", "django-lock", ":1:k", lock=True)


# each layout as today's faces spell it: the bytes stored data already has (an added layout must be added here)
PINNED: list[tuple[str, bytes]] = [
    ("data", KeyLayout("orders").data("a/b#c")),
    ("data", KeyLayout("orders").data_prefix() + b"k"),
    ("entry", KeyLayout("web").entry_prefix("0123456789ab") + "ü".encode()),
    ("generation", KeyLayout("web").generation()),
    ("gen-lock", KeyLayout("web").generation_lock()),
    ("ledger shard", KeyLayout("web").ledger_shard("0123456789ab", 11)),
    ("persist-lock", KeyLayout("web").ledger_lock("0123456789ab", 11)),
    ("lock", KeyLayout("web").key_lock("lock", "n")),
    ("gos-lock", KeyLayout("web").key_lock("gos-lock", "page/1")),
    ("index meta", KeyLayout("orders").index_meta()),
    ("index shards used", KeyLayout("orders").index_used()),
    ("index-used-lock", KeyLayout("orders").index_used_lock()),
    ("index shard", KeyLayout("orders").index_shard(0x29C)),
    ("index-lock", KeyLayout("orders").index_shard_lock(0x29C)),
    ("django-lock", KeyLayout("default").adapter_lock("django", ":1:report")),
    ("dogpile-lock", KeyLayout("dp").adapter_lock("dogpile", "user:1")),
    ("hishel index", KeyLayout("hishel").hishel_index("ab" * 32)),
    ("hishel meta", KeyLayout("hishel").hishel_meta("cd" * 16)),
    ("hishel body chunk", KeyLayout("hishel").hishel_chunk("cd" * 16, 12)),
]
EXPECTED = [
    b"orders/a/b#c",
    b"orders/k",
    "web#g.0123456789ab/ü".encode(),
    b"web#gen",
    b"web#gen-lock",
    b"web#persist/0123456789ab/0b",
    b"web#persist-lock/0123456789ab/0b",
    b"web#lock/n",
    b"web#gos-lock/page/1",
    b"orders#index-meta",
    b"orders#index-used",
    b"orders#index-used-lock",
    b"orders#index/029c",
    b"orders#index-lock/029c",
    b"default/django-lock/:1:report",
    b"dp/dogpile-lock/user:1",
    b"hishel/idx/" + b"ab" * 32,
    b"hishel/meta/" + b"cd" * 16,
    b"hishel/body/" + b"cd" * 16 + b"/12",
]


def test_the_layouts_spell_the_keys_stored_data_already_has() -> None:
    assert [key for _, key in PINNED] == EXPECTED
    assert [found.layout.name if (found := parse_key(key)) else None for key in EXPECTED] == [n for n, _ in PINNED]
    assert {name for name, _ in PINNED} == {layout.name for layout in LAYOUTS}


@pytest.mark.parametrize(
    ("layout", "namespace", "parts"),
    [
        (key_layout.DATA, "a/b", {"key": "k"}),
        (key_layout.DATA, "a#b", {"key": "k"}),
        (key_layout.DATA, "", {"key": "k"}),
        (key_layout.DATA, "ns", {"key": "\ud800"}),  # a lone surrogate is no UTF-8
        (key_layout.DATA, "ns", {}),
        (key_layout.DATA, "ns", {"key": "k", "gen": "g"}),
        (key_layout.ENTRY, "ns", {"gen": "", "key": "k"}),
        (key_layout.ENTRY, "ns", {"gen": "a/b", "key": "k"}),
        (key_layout.INDEX_SHARD, "ns", {"shard": 0x10000}),
        (key_layout.INDEX_SHARD, "ns", {"shard": -1}),
        (key_layout.INDEX_SHARD, "ns", {"shard": True}),
        (key_layout.INDEX_SHARD, "ns", {"shard": "0001"}),
        (key_layout.LEDGER_SHARD, "ns", {"gen": "g", "shard": 0x100}),
        (key_layout.HISHEL_META, "ns", {"entry": "ABCD"}),
        (key_layout.HISHEL_CHUNK, "ns", {"entry": "ab", "chunk": -1}),
    ],
)
def test_a_key_that_would_not_parse_back_is_refused(layout: Layout, namespace: str, parts: dict[str, Part]) -> None:
    with pytest.raises(ConfigurationError):
        layout.build(namespace, **parts)


def test_a_namespace_layout_keeps_what_it_built_and_still_checks() -> None:
    keys = KeyLayout("orders")
    for i in [*range(5000), 0, 1]:  # more than it keeps: it starts over, still right
        assert keys.index_shard(i) == key_layout.INDEX_SHARD.build("orders", shard=i)
        assert keys.index_shard_lock(i) == key_layout.INDEX_SHARD_LOCK.build("orders", shard=i)
    for gen in ["0123456789ab", "ü"]:
        assert keys.entry_prefix(gen) + b"k" == key_layout.ENTRY.build("orders", gen=gen, key="k")
        assert keys.ledger_shard(gen, 3) == key_layout.LEDGER_SHARD.build("orders", gen=gen, shard=3)
        assert keys.ledger_lock(gen, 3) == key_layout.LEDGER_LOCK.build("orders", gen=gen, shard=3)
    with pytest.raises(ConfigurationError):
        keys.index_shard(True)  # True == 1, which it keeps: still refused
    with pytest.raises(ConfigurationError):
        keys.entry_prefix("a/b")
    with pytest.raises(ConfigurationError):
        keys.ledger_shard("a", 0x100)


def test_a_namespace_with_a_separator_is_refused_by_the_layout_of_a_namespace() -> None:
    with pytest.raises(ConfigurationError, match="may not contain"):
        KeyLayout("a/b")


@pytest.mark.parametrize(
    "key",
    [
        b"plain",
        b"#x",
        b"/x",
        b"\xff/x",  # not UTF-8
        b"web#unknown",
        b"web#gen/x",
        b"web#g./k",  # a generation is never empty
        b"web#index/02a",  # shard numbers have 4 hex digits, lower case
        b"web#index/002A",
        b"web#index-lock/00002",
        b"web#persist/g/0f0",
        b"web#persist/0f",
        b"web#index-meta/x",
    ],
)
def test_what_no_layout_spells_is_not_classified(key: bytes) -> None:
    assert parse_key(key) is None
    assert role_of(key) is None


#: the fixed text of the layouts, as a module would spell it if it built a key itself
_SPELLED = re.compile(
    r"#(index|gen|g\.|persist|lock/|gos-lock)|/(django-lock|dogpile-lock|idx|meta|body)/"
    r"|index-(meta|used|lock)|(gen|persist|gos|django|dogpile)-lock"
)


#: a layout's name selects it (``locks.lock("gos-lock", key)``): the table still spells the key
_NAMES = {layout.name for layout in LAYOUTS}


def _spelled_layouts(path: Path, root: Path = PACKAGE) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and id(node) not in docstrings:
            text = node.value if isinstance(node.value, str) else node.value.decode("utf-8", "replace")
            if _SPELLED.search(text) and text not in _NAMES:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {text!r}")
    return found


def test_no_module_but_the_table_spells_a_layout() -> None:
    # the faces, the adapters and the inspector build and read keys through the table: a layout is one edit
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "key_layout.py"]
    assert [line for path in modules for line in _spelled_layouts(path)] == []


def test_the_spelling_check_can_fail(tmp_path: Path) -> None:
    # how the faces and the inspector spelled keys before the table (docstrings may name layouts: not code)
    module = tmp_path / "face"
    module.write_text(
        '"""Keys ``ns#index/<i>``."""\n'
        'def shard_key(ns, i):\n    return ns + f"#index/{i:04x}".encode()\n'
        'KINDS = ("gos-lock", "index-meta")\n'
        'def name(ns, key):\n    return f"{ns}/django-lock/{key}"\n'
    )
    assert sorted(_spelled_layouts(module, tmp_path)) == [
        "face:3: '#index/'",
        "face:4: 'index-meta'",
        "face:6: '/django-lock/'",
    ]
