"""Every store key the library writes, in one table: each layout builds its keys, parses them back and names them.

The faces build their keys here and the emulator's inspector reads them here. The layouts: docs/design/namespaces.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, NoReturn

from .._keys import check_namespace, utf8
from ..errors import ConfigurationError

__all__ = ["LAYOUTS", "KeyLayout", "Layout", "LockKind", "StoreKey", "parse_key"]

Part = str | int
Face = Literal["dict", "cache", "prefix"]
#: the per-key locks of a cache: ``lock`` (incr, fenced writes) and ``gos-lock`` (get_or_set's single flight)
LockKind = Literal["lock", "gos-lock"]

#: what each text field of a template may hold (``key`` comes last in a template: it may hold anything)
_TEXT_FIELDS: Final = {"gen": "[^/]+", "key": ".*", "digest": "[0-9a-f]+", "entry": "[0-9a-f]+"}
#: the number fields: how a template spells them (format spec -> pattern of that spelling)
_NUMBER_SPECS: Final = {"02x": "[0-9a-f]{2}", "04x": "[0-9a-f]{4}", "d": "0|[1-9][0-9]*"}
_TEXT_PATTERNS: Final = {field: re.compile(pattern, re.DOTALL) for field, pattern in _TEXT_FIELDS.items()}
#: the largest number + 1 each spelling holds (a wider number would not parse back)
_NUMBER_LIMITS: Final = {"02x": 0x100, "04x": 0x10000, "d": 1 << 63}
_FIELD = re.compile(r"\{(\w+)(?::(\w+))?\}")
_NAMESPACE = "[^/#]+"  # what _keys.check_namespace lets through, as far as the separators go


class Layout:
    """One shape of store key: ``template`` spells it (``{ns}``, its separator, then fixed text and fields).

    ``name`` is what the inspector calls such a key; ``face`` is what writes it (``prefix``: a key under ``ns/``, a
    dict's data or an adapter's own key); ``lock``: the key is a leased lock."""

    __slots__ = ("_fields", "_has_key", "_literals", "_pattern", "face", "lock", "name", "separator", "template")

    def __init__(self, name: str, face: Face, template: str, *, lock: bool = False) -> None:
        self.name = name
        self.face = face
        self.template = template
        self.lock = lock
        self.separator = template[len("{ns}")]
        fields: list[tuple[str, str | None]] = []
        literals = []  # the fixed text before each field, and after the last
        pattern = []
        at = len("{ns}")
        for match in _FIELD.finditer(template, at):
            literals.append(template[at : match.start()])
            field, spec = match.group(1), match.group(2)
            pattern.append(f"(?P<{field}>{_TEXT_FIELDS[field] if spec is None else _NUMBER_SPECS[spec]})")
            fields.append((field, spec))
            at = match.end()
        literals.append(template[at:])
        if not template.startswith("{ns}") or self.separator not in "/#" or "key" in dict(fields[:-1]):
            raise AssertionError(f"not a key template: {template!r}")  # pragma: no cover - the table is fixed
        self._fields = tuple(fields)
        self._literals = tuple(literals)
        self._has_key = bool(fields) and fields[-1][0] == "key"
        spelled = "".join(re.escape(lit) + group for lit, group in zip(literals, [*pattern, ""], strict=True))
        self._pattern = re.compile(f"(?P<ns>{_NAMESPACE}){spelled}", re.DOTALL)

    def __repr__(self) -> str:
        return f"<Layout {self.name!r} {self.template!r}>"

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of its parts after the namespace, in order."""
        return tuple(field for field, _ in self._fields)

    def build(self, namespace: str, **parts: Part) -> bytes:
        """The key of ``namespace`` with these ``parts``; a part it could not parse back is a ConfigurationError."""
        check_namespace(namespace)
        return self.build_checked(namespace, parts)

    def build_checked(self, namespace: str, parts: Mapping[str, Part]) -> bytes:
        """:meth:`build` for a namespace checked already (a :class:`KeyLayout`'s): the parts are still checked."""
        return self._spell(namespace, parts, len(self._fields))

    def prefix(self, namespace: str, **parts: Part) -> bytes:
        """What every key of this layout with these ``parts`` (all but ``key``) starts with."""
        if not self._has_key:
            raise AssertionError(f"{self.name} keys have no key part")
        check_namespace(namespace)
        return self._spell(namespace, parts, len(self._fields) - 1)

    def _spell(self, namespace: str, parts: Mapping[str, Part], count: int) -> bytes:
        """The key's first ``count`` fields from ``parts``, each checked (a ConfigurationError if it would not parse
        back), and the fixed text after them."""
        if len(parts) != count:
            self._wrong_parts(count)
        literals = self._literals
        out = [namespace, literals[0]]
        for i in range(count):
            field, spec = self._fields[i]
            value = parts.get(field)
            if spec is None:
                if not isinstance(value, str) or not (field == "key" or _TEXT_PATTERNS[field].fullmatch(value)):
                    self._wrong_part(field, value)
                out.append(value)
            elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _NUMBER_LIMITS[spec]:
                self._wrong_part(field, value)
            else:
                out.append(format(value, spec))
            out.append(literals[i + 1])
        text = "".join(out)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return utf8(text, f"{self.name} key")  # raises, saying why

    def parse(self, key: bytes) -> StoreKey | None:
        """``key`` as namespace and parts if it has this layout, else ``None``."""
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return self.parse_text(text)

    def parse_text(self, text: str) -> StoreKey | None:
        """:meth:`parse` of a key already decoded from UTF-8."""
        match = self._pattern.fullmatch(text)
        if match is None:
            return None
        parts: dict[str, Part] = {}
        for field, spec in self._fields:
            value = match.group(field)
            parts[field] = value if spec is None else int(value, 16 if spec.endswith("x") else 10)
        return StoreKey(self, match.group("ns"), parts)

    def spell(self, parts: Mapping[str, Part]) -> str:
        """``parts`` as the key spells them, joined by ``/`` (the inspector's detail)."""
        return "/".join(str(parts[f]) if spec is None else format(parts[f], spec) for f, spec in self._fields)

    def _wrong_parts(self, count: int) -> NoReturn:
        names = [field for field, _ in self._fields[:count]]
        raise ConfigurationError(f"a {self.name} key has the parts {', '.join(names) or 'none'}")

    def _wrong_part(self, field: str, value: object) -> NoReturn:
        raise ConfigurationError(f"{value!r} is not a {field} of a {self.name} key")


@dataclass(frozen=True, slots=True)
class StoreKey:
    """A key parsed by its layout: the namespace and the parts the layout built it from."""

    layout: Layout
    namespace: str
    parts: dict[str, Part]

    @property
    def detail(self) -> str:
        """The parts as the inspector shows them: the user key if there is one, else the parts as spelled."""
        key = self.parts.get("key")
        if isinstance(key, str):
            return key
        return self.layout.spell(self.parts)


# -- the table: the order is the parse order, and a key under ``ns/`` that no adapter layout takes is data ---------

DATA: Final = Layout("data", "prefix", "{ns}/{key}")
DJANGO_LOCK: Final = Layout("django-lock", "prefix", "{ns}/django-lock/{key}", lock=True)
DOGPILE_LOCK: Final = Layout("dogpile-lock", "prefix", "{ns}/dogpile-lock/{key}", lock=True)
HISHEL_INDEX: Final = Layout("hishel index", "prefix", "{ns}/idx/{digest}")
HISHEL_META: Final = Layout("hishel meta", "prefix", "{ns}/meta/{entry}")
HISHEL_CHUNK: Final = Layout("hishel body chunk", "prefix", "{ns}/body/{entry}/{chunk:d}")
INDEX_META: Final = Layout("index meta", "dict", "{ns}#index-meta")
INDEX_USED: Final = Layout("index shards used", "dict", "{ns}#index-used")
INDEX_USED_LOCK: Final = Layout("index-used-lock", "dict", "{ns}#index-used-lock", lock=True)
INDEX_SHARD: Final = Layout("index shard", "dict", "{ns}#index/{shard:04x}")
INDEX_SHARD_LOCK: Final = Layout("index-lock", "dict", "{ns}#index-lock/{shard:04x}", lock=True)
GENERATION: Final = Layout("generation", "cache", "{ns}#gen")
GENERATION_LOCK: Final = Layout("gen-lock", "cache", "{ns}#gen-lock", lock=True)
ENTRY: Final = Layout("entry", "cache", "{ns}#g.{gen}/{key}")
LEDGER_SHARD: Final = Layout("ledger shard", "cache", "{ns}#persist/{gen}/{shard:02x}")
LEDGER_LOCK: Final = Layout("persist-lock", "cache", "{ns}#persist-lock/{gen}/{shard:02x}", lock=True)
KEY_LOCK: Final = Layout("lock", "cache", "{ns}#lock/{key}", lock=True)
GET_OR_SET_LOCK: Final = Layout("gos-lock", "cache", "{ns}#gos-lock/{key}", lock=True)

LAYOUTS: Final[tuple[Layout, ...]] = (
    DJANGO_LOCK,
    DOGPILE_LOCK,
    HISHEL_INDEX,
    HISHEL_META,
    HISHEL_CHUNK,
    DATA,
    INDEX_META,
    INDEX_USED,
    INDEX_USED_LOCK,
    INDEX_SHARD,
    INDEX_SHARD_LOCK,
    GENERATION,
    GENERATION_LOCK,
    ENTRY,
    LEDGER_SHARD,
    LEDGER_LOCK,
    KEY_LOCK,
    GET_OR_SET_LOCK,
)
_BY_SEPARATOR: Final = {sep: tuple(lay for lay in LAYOUTS if lay.separator == sep) for sep in "/#"}
#: how many keys a KeyLayout keeps built (a dict's index has at most 65535 shards; most use a few)
_KEPT: Final = 4096
_KEY_LOCKS: Final = {"lock": KEY_LOCK, "gos-lock": GET_OR_SET_LOCK}
_ADAPTER_LOCKS: Final = {"django": DJANGO_LOCK, "dogpile": DOGPILE_LOCK}


def parse_key(key: bytes) -> StoreKey | None:
    """The layout, namespace and parts of ``key``, or ``None`` if no layout of the table has it.

    A namespace holds neither ``/`` nor ``#``, so the first of them ends it and picks the layouts to try."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    ends = [at for at in (text.find("/"), text.find("#")) if at > 0]
    if not ends:
        return None
    for layout in _BY_SEPARATOR[text[min(ends)]]:
        found = layout.parse_text(text)
        if found is not None:
            return found
    return None


class KeyLayout:
    """The keys of one namespace, each built by its layout in the table above.

    The keys without a user key in them (shards, locks of shards, a generation's entry prefix) are built once and
    kept (at most :data:`_KEPT` of them): a write builds them again and again."""

    __slots__ = ("_kept", "namespace")

    def __init__(self, namespace: str) -> None:
        check_namespace(namespace)
        self.namespace = namespace
        self._kept: dict[tuple[Layout, Part], bytes] = {}

    def _fixed(self, layout: Layout, parts: dict[str, Part], memo: Part) -> bytes:
        """``layout``'s key (its prefix, if it has a user key) with ``parts``, built once per ``memo``."""
        key = self._kept.get((layout, memo)) if type(memo) is not bool else None  # True == 1: refused, not kept
        if key is None:
            if layout is ENTRY:
                key = layout.prefix(self.namespace, **parts)
            else:
                key = layout.build_checked(self.namespace, parts)
            if len(self._kept) >= _KEPT:
                self._kept.clear()
            self._kept[layout, memo] = key
        return key

    def __repr__(self) -> str:
        return f"KeyLayout({self.namespace!r})"

    # a dict's data, and a cache's entries: the hot paths add the key's UTF-8 to the prefix themselves
    def data_prefix(self) -> bytes:
        return DATA.prefix(self.namespace)

    def data(self, key: str) -> bytes:
        return DATA.build_checked(self.namespace, {"key": key})

    def entry_prefix(self, gen: str) -> bytes:
        return self._fixed(ENTRY, {"gen": gen}, gen)

    # a cache's generation, its ledger of entries without a TTL, and its per-key locks
    def generation(self) -> bytes:
        return GENERATION.build_checked(self.namespace, {})

    def generation_lock(self) -> bytes:
        return GENERATION_LOCK.build_checked(self.namespace, {})

    def ledger_shard(self, gen: str, shard: int) -> bytes:
        return self._fixed(LEDGER_SHARD, {"gen": gen, "shard": shard}, f"{gen}/{shard}")

    def ledger_lock(self, gen: str, shard: int) -> bytes:
        return self._fixed(LEDGER_LOCK, {"gen": gen, "shard": shard}, f"{gen}/{shard}")

    def key_lock(self, kind: LockKind, key: str) -> bytes:
        return _KEY_LOCKS[kind].build_checked(self.namespace, {"key": key})

    # a dict's stored index
    def index_meta(self) -> bytes:
        return INDEX_META.build_checked(self.namespace, {})

    def index_used(self) -> bytes:
        return INDEX_USED.build_checked(self.namespace, {})

    def index_used_lock(self) -> bytes:
        return INDEX_USED_LOCK.build_checked(self.namespace, {})

    def index_shard(self, shard: int) -> bytes:
        return self._fixed(INDEX_SHARD, {"shard": shard}, shard)

    def index_shard_lock(self, shard: int) -> bytes:
        return self._fixed(INDEX_SHARD_LOCK, {"shard": shard}, shard)

    # the framework adapters' own keys (under ``ns/``, beside no data: their namespaces are caches')
    def adapter_lock(self, adapter: Literal["django", "dogpile"], key: str) -> bytes:
        return _ADAPTER_LOCKS[adapter].build_checked(self.namespace, {"key": key})

    def hishel_index(self, digest: str) -> bytes:
        return HISHEL_INDEX.build_checked(self.namespace, {"digest": digest})

    def hishel_meta(self, entry: str) -> bytes:
        return HISHEL_META.build_checked(self.namespace, {"entry": entry})

    def hishel_chunk(self, entry: str, chunk: int) -> bytes:
        return HISHEL_CHUNK.build_checked(self.namespace, {"entry": entry, "chunk": chunk})
