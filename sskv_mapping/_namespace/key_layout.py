"""Every store key the library writes, in one table: each layout builds its keys, parses them back and names them.

The faces build their keys here and the emulator's inspector reads them here. The layouts: docs/design/namespaces.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

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
_FIELD = re.compile(r"\{(\w+)(?::(\w+))?\}")
_NAMESPACE = "[^/#]+"  # what _keys.check_namespace lets through, as far as the separators go


class Layout:
    """One shape of store key: ``template`` spells it (``{ns}``, its separator, then fixed text and fields).

    ``name`` is what the inspector calls such a key; ``face`` is what writes it (``prefix``: a key under ``ns/``, a
    dict's data or an adapter's own key); ``lock``: the key is a leased lock."""

    __slots__ = ("_before_key", "_fields", "_pattern", "face", "lock", "name", "separator", "template")

    def __init__(self, name: str, face: Face, template: str, *, lock: bool = False) -> None:
        self.name = name
        self.face = face
        self.template = template
        self.lock = lock
        self.separator = template[len("{ns}")]
        fields: list[tuple[str, str | None]] = []
        pattern = []
        at = len("{ns}")
        for match in _FIELD.finditer(template, at):
            pattern.append(re.escape(template[at : match.start()]))
            field, spec = match.group(1), match.group(2)
            pattern.append(f"(?P<{field}>{_TEXT_FIELDS[field] if spec is None else _NUMBER_SPECS[spec]})")
            fields.append((field, spec))
            at = match.end()
        pattern.append(re.escape(template[at:]))
        if not template.startswith("{ns}") or self.separator not in "/#" or "key" in dict(fields[:-1]):
            raise AssertionError(f"not a key template: {template!r}")  # pragma: no cover - the table is fixed
        self._fields = tuple(fields)
        self._pattern = re.compile(f"(?P<ns>{_NAMESPACE}){''.join(pattern)}", re.DOTALL)
        self._before_key = template[: template.index("{key}")] if "{key}" in template else None

    def __repr__(self) -> str:
        return f"<Layout {self.name!r} {self.template!r}>"

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of its parts after the namespace, in order."""
        return tuple(field for field, _ in self._fields)

    def build(self, namespace: str, **parts: Part) -> bytes:
        """The key of ``namespace`` with these ``parts``; a part it could not parse back is a ConfigurationError."""
        self._check(namespace, parts, self.fields)
        return utf8(self.template.format(ns=namespace, **parts), f"{self.name} key")

    def prefix(self, namespace: str, **parts: Part) -> bytes:
        """What every key of this layout with these ``parts`` (all but ``key``) starts with."""
        if self._before_key is None:
            raise AssertionError(f"{self.name} keys have no key part")
        self._check(namespace, parts, self.fields[:-1])
        return utf8(self._before_key.format(ns=namespace, **parts), f"{self.name} key")

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

    def _check(self, namespace: str, parts: Mapping[str, Part], fields: tuple[str, ...]) -> None:
        check_namespace(namespace)
        if sorted(parts) != sorted(fields):
            raise ConfigurationError(f"a {self.name} key has the parts {', '.join(fields) or 'none'}")
        for field, spec in self._fields:
            if field not in parts:
                continue
            value = parts[field]
            if spec is None:
                if not isinstance(value, str) or not re.fullmatch(_TEXT_FIELDS[field], value, re.DOTALL):
                    raise ConfigurationError(f"{value!r} is not a {field} of a {self.name} key")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{value!r} is not a {field} number of a {self.name} key")
            elif spec.endswith("x") and value >= 16 ** int(spec[:-1]):
                raise ConfigurationError(f"{value!r} does not fit the {field} of a {self.name} key")


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
INDEX_FORMAT1: Final = Layout("index (format 1)", "dict", "{ns}#index")
INDEX_FORMAT1_LOCK: Final = Layout("index-lock (format 1)", "dict", "{ns}#index-lock", lock=True)
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
    INDEX_FORMAT1,
    INDEX_FORMAT1_LOCK,
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
    """The keys of one namespace, each built by its layout in the table above."""

    __slots__ = ("namespace",)

    def __init__(self, namespace: str) -> None:
        check_namespace(namespace)
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"KeyLayout({self.namespace!r})"

    # a dict's data, and a cache's entries: the hot paths add the key's UTF-8 to the prefix themselves
    def data_prefix(self) -> bytes:
        return DATA.prefix(self.namespace)

    def data(self, key: str) -> bytes:
        return DATA.build(self.namespace, key=key)

    def entry_prefix(self, gen: str) -> bytes:
        return ENTRY.prefix(self.namespace, gen=gen)

    # a cache's generation, its ledger of entries without a TTL, and its per-key locks
    def generation(self) -> bytes:
        return GENERATION.build(self.namespace)

    def generation_lock(self) -> bytes:
        return GENERATION_LOCK.build(self.namespace)

    def ledger_shard(self, gen: str, shard: int) -> bytes:
        return LEDGER_SHARD.build(self.namespace, gen=gen, shard=shard)

    def ledger_lock(self, gen: str, shard: int) -> bytes:
        return LEDGER_LOCK.build(self.namespace, gen=gen, shard=shard)

    def key_lock(self, kind: LockKind, key: str) -> bytes:
        return _KEY_LOCKS[kind].build(self.namespace, key=key)

    # a dict's stored index
    def index_meta(self) -> bytes:
        return INDEX_META.build(self.namespace)

    def index_format1(self) -> bytes:
        return INDEX_FORMAT1.build(self.namespace)

    def index_format1_lock(self) -> bytes:
        return INDEX_FORMAT1_LOCK.build(self.namespace)

    def index_used(self) -> bytes:
        return INDEX_USED.build(self.namespace)

    def index_used_lock(self) -> bytes:
        return INDEX_USED_LOCK.build(self.namespace)

    def index_shard(self, shard: int) -> bytes:
        return INDEX_SHARD.build(self.namespace, shard=shard)

    def index_shard_lock(self, shard: int) -> bytes:
        return INDEX_SHARD_LOCK.build(self.namespace, shard=shard)

    # the framework adapters' own keys (under ``ns/``, beside no data: their namespaces are caches')
    def adapter_lock(self, adapter: Literal["django", "dogpile"], key: str) -> bytes:
        return _ADAPTER_LOCKS[adapter].build(self.namespace, key=key)

    def hishel_index(self, digest: str) -> bytes:
        return HISHEL_INDEX.build(self.namespace, digest=digest)

    def hishel_meta(self, entry: str) -> bytes:
        return HISHEL_META.build(self.namespace, entry=entry)

    def hishel_chunk(self, entry: str, chunk: int) -> bytes:
        return HISHEL_CHUNK.build(self.namespace, entry=entry, chunk=chunk)
