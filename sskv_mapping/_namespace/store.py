"""One namespace of the state store, with a codec, a notification-kept local cache and a key index.

Shared by the dict and the cache; key layout and the watch-before-read rule: docs/design/namespaces.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from .._blocking import in_caller_thread
from .._keys import check_namespace, text_key, utf8
from .._protocol.commands import SetCondition, VDeleteResult
from .._protocol.hlc import HybridLogicalClock, system_clock_ms
from .._protocol.notifications import KeyEvent
from .._telemetry import watch_store
from .._ttl import ttl_to_ms
from ..client._client import AsyncStateStoreClient, ConnectionState, SetResult
from ..client._requests import on_publish
from ..codecs import Codec, JsonCodec, RawCodec, StrCodec, decode_value, encode_value
from ..errors import ConfigurationError, DecodeError, StateStoreError
from ..local_cache import ABSENT, Absent, CachedEntry, LocalCache
from .fanout import SharedLoads, gather_bounded
from .key_index import KeyIndex
from .key_layout import KeyLayout
from .watches import KeyWatches

log = logging.getLogger(__name__)

__all__ = ["Encoded", "NamespaceStore", "StoreEntry"]

V = TypeVar("V")

#: values up to this size, of a codec whose decoding runs no user code (_runs_no_user_code), are decoded on the
#: loop: handing them to the caller's thread costs more than decoding them (two thread switches per read)
_QUICK_DECODE_MAX = 4096


def _runs_no_user_code(codec: object) -> bool:
    """Whether ``codec``'s decoding is the library's own, linear in the value's size, calling no user code: the
    raw and str codecs, and JSON without an ``object_hook`` (exact classes: a subclass may decode as it likes)."""
    kind = type(codec)
    if kind is RawCodec or kind is StrCodec:
        return True
    return kind is JsonCodec and getattr(codec, "object_hook", None) is None


def _resolve(fut: asyncio.Future[None], _: object) -> None:
    if not fut.done():
        fut.set_result(None)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: its reader deals with it (or nobody, if the reader failed first)


@dataclass(frozen=True, slots=True)
class StoreEntry(Generic[V]):
    """A value as the namespace knows it: decoded value, version, and our fencing token if we wrote it."""

    key: str
    value: V
    version: HybridLogicalClock | None
    fencing_token: HybridLogicalClock | None = None


@dataclass(frozen=True, slots=True)
class Encoded(Generic[V]):
    """A value already encoded (by a blocking facade, in its caller's thread): only ``raw`` goes to the loop's
    encoder-free path. :meth:`NamespaceStore.encode` and ``write`` take it beside a value, and unwrap it."""

    value: V
    raw: bytes
    #: the codec's decoding of ``raw``, made in the caller's thread too when the key was watched then (what the
    #: local cache keeps if the write is kept); ``ABSENT``: decoded on the loop if the write is kept
    kept: V | Absent = ABSENT


class NamespaceStore(Generic[V]):
    """Keys ``namespace/<key>`` of one client, their codec, local cache, watches and index."""

    def __init__(
        self,
        client: AsyncStateStoreClient,
        namespace: str,
        codec: Codec[V],
        *,
        cache: LocalCache[V] | None,
        index: Callable[[NamespaceStore[V]], KeyIndex] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_namespace(namespace)
        self._binding = KeyLayout(namespace).data_prefix()  # ``ns/``: what a key-bound codec signs before the key
        self.client = client
        self.namespace = namespace
        self.codec = codec
        self.cache = cache
        self._prefix = self._binding
        self._clock = clock
        self._reading: SharedLoads[bytes] = SharedLoads()  # cached reads in flight, which others wait for
        #: what keeps the local cache current (the keys' KEYNOTIFYs and the revalidator); None without a cache
        self.watches: KeyWatches | None = (
            None
            if cache is None
            else KeyWatches(client, cache, self._on_event, self._reread, prefix=self._prefix, name=namespace)
        )
        # the key listing the owner injects (the dict's: SCAN or a stored index, see _listing); None: the cache's
        self.index: KeyIndex | None = None if index is None else index(self)
        self._was_down = False
        self._started = False
        watch_store(self)  # OpenTelemetry reads the local cache's counters while this store lives
        self._closed = False
        # Listened to from the start, not from start(): a dict used without ``async with``/open() must still
        # stop serving its cache when the connection drops and clear it on reconnect.
        self._unlisten: Callable[[], None] | None = client.add_state_listener(self._on_state)

    # -- keys ---------------------------------------------------------------------------------------------

    def data_key(self, key: str, prefix: bytes | None = None) -> bytes:
        """The store key of ``key`` (under ``prefix`` if given, else the namespace's current prefix)."""
        return (self._prefix if prefix is None else prefix) + utf8(text_key(key))

    @property
    def prefix(self) -> bytes:
        """What every data key of the namespace starts with now (``namespace/``; a cache's: its generation's)."""
        return self._prefix

    def switch_prefix(self, prefix: bytes) -> None:
        """Put the data keys under ``prefix`` from now on (a cache's new generation): what the local cache
        holds and the watches of the old keys are dropped. Runs on the loop."""
        if prefix == self._prefix:
            return
        self._prefix = prefix
        if self.cache is not None:
            self.cache.clear()
        if self.watches is not None:
            self.watches.switch_prefix(prefix)

    def user_key(self, data_key: bytes) -> str:
        return data_key[len(self._prefix) :].decode("utf-8")

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        if self.index is not None:
            await self.index.start()
        self._started = True

    def _on_state(self, state: ConnectionState) -> None:
        if self.cache is None:
            return
        if state is ConnectionState.RECONNECTING:
            self._was_down = True
            self.cache.disconnected()
        elif state is ConnectionState.CONNECTED and self._was_down:
            self._was_down = False
            # notifications were lost while away: nothing cached can be trusted; the client re-registers
            # the watches and its re-read events refill what changed
            self.cache.reconnected()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._unlisten is not None:
            self._unlisten()
        if self.watches is not None:
            await self.watches.close()
        if self.index is not None:
            await self.index.close()
        if self.cache is not None:
            self.cache.clear()

    # -- watches ------------------------------------------------------------------------------------------

    def _on_event(self, event: KeyEvent) -> None:
        if self.cache is not None:
            # the key as the signature of a key-bound codec covers it: the namespace and what follows the '/'
            binding = self._binding + event.key.partition(b"/")[2]
            self.cache.apply_event(event, functools.partial(self._loads, binding))

    # -- reads --------------------------------------------------------------------------------------------

    def peek(self, key: str) -> CachedEntry[V] | None:
        """The local cache's entry for ``key`` if it may be served now (``value`` is ``ABSENT`` for a key known
        absent), else ``None``: no cache, not cached, or not a valid key (the caller's slow path raises the typed
        error). Thread-safe and not async (a blocking facade's hit path runs it in the calling thread); never
        touches the network or the loop."""
        cache = self.cache
        if cache is None or not isinstance(key, str) or not key:
            return None
        try:
            data_key = self._prefix + key.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return None
        return cache.get(data_key)

    async def read(self, key: str, *, fresh: bool = False) -> CachedEntry[V]:
        """The entry for ``key`` (``value`` is ``ABSENT`` when absent), from the cache or the store.

        ``fresh=True`` skips the cache: read-modify-write operations (``pop``, ``setdefault``...) decide on
        the store's current value, not on a cached one that a notification may be about to replace.
        """
        data_key = self.data_key(key)
        return await self.read_data_key(data_key, fresh=fresh)

    async def read_data_key(self, data_key: bytes, *, fresh: bool = False) -> CachedEntry[V]:
        cache = self.cache
        hit = None if fresh or cache is None else cache.get(data_key)
        if hit is not None:
            return hit
        if cache is None:
            return await self._fetch(data_key)
        if fresh:
            return await self._read_through(data_key)
        # One re-read per key: a miss (a key not cached yet, or an entry past max_staleness) that many callers hit
        # at once is one GET. The others wait for it and look in the cache again: what it stored or confirmed is a
        # hit then, and anything that changed the key meanwhile (a write, an event, an invalidation) shows there
        # too; only if the cache still cannot answer do they read for themselves. Its failure is theirs.
        entry = await self._reading.run(data_key, self._read_through)
        if entry is not None:
            return entry
        hit = cache.get(data_key)
        return hit if hit is not None else await self._read_through(data_key)

    async def _read_through(self, data_key: bytes) -> CachedEntry[V]:
        """GET the key through the local cache (stored there unless something newer is known)."""
        watches = self.watches
        assert watches is not None  # there is a cache
        if data_key not in watches:
            return await self._watch_and_read(data_key, watches)
        await watches.ensure(data_key)
        if not watches.active(data_key):
            # No notifications flow for the key now (a reconnect has not restored its KEYNOTIFY yet): a
            # value cached now could change unnoticed and be served stale, so it is served but not kept.
            return await self._fetch(data_key)
        return await self._reread(data_key)

    async def _reread(self, data_key: bytes, watching: asyncio.Task[None] | None = None) -> CachedEntry[V]:
        """GET a watched key into the local cache (stored there unless something newer is known); ``watching``:
        the task of its KEYNOTIFY, sent right before the GET (_watch_and_read), which must be confirmed first."""
        cache = self.cache
        assert cache is not None
        # The ticket is abandoned on the way out unless finished: a failed GET (a KEYNOTIFY goes on in its task: the
        # key is being read, and a retry finds it watched), a failed KEYNOTIFY, or a value not kept.
        with cache.begin_read(data_key) as ticket:
            entry = await self._fetch(data_key)
            if watching is not None:
                # A service that handles the two in order answers the KEYNOTIFY first, and its task finishes before
                # this one resumes (both wake-ups are queued in the order the replies came). The GET answered first
                # means it was probably read before the key was registered (reordered by the service, or the
                # KEYNOTIFY sent again after the broker delivered it to nobody): a change in between would go
                # unnoticed, so the value is not kept.
                answered_first = not watching.done()
                try:
                    await asyncio.shield(watching)  # its answer (here already when the service kept the order)
                except StateStoreError as exc:
                    log.debug("watching %r failed; its value is returned, not kept: %s", data_key, exc)
                    return entry
                watches = self.watches
                if answered_first or watches is None or not watches.active(data_key):  # or a reconnect since
                    return entry  # served, not kept
            cache.finish_read(ticket, entry)
        return entry

    async def _watch_and_read(self, data_key: bytes, watches: KeyWatches) -> CachedEntry[V]:
        """A miss on a key not watched yet, in one round trip: its KEYNOTIFY, then its GET right behind it on the
        same connection, then both answers awaited. The entry is kept only once the KEYNOTIFY is confirmed.

        Why no change is missed (docs/design/namespaces.md, "What the local cache keeps on a write"): the GET is
        published only after the KEYNOTIFY was, on the one connection, so it reaches the service after it (MQTT
        keeps the order of one session's QoS 1 messages on a topic) and a service that handles one client's requests
        in order -- the emulator serves each as it arrives -- registers the key before it reads it: a change after
        the read is notified, one before it is in the answer, as when the GET waited for the KEYNOTIFY's answer. The
        read's ticket is taken before the GET is sent, so a notification that arrives first (even before the
        KEYNOTIFY's answer: the watcher is listening from the moment the KEYNOTIFY is sent) wins over the GET's
        answer. The protocol does not promise in-order handling: a GET answered before its KEYNOTIFY is not kept
        (below); a service that read first but answered in order could miss a change made in between, until the
        key's next change (notified, newer) or the entry's revalidation (``max_staleness``, 30 s by default)
        replaces it. A KEYNOTIFY that fails leaves the key unwatched: the GET's value is returned, and not kept.
        """
        loop = asyncio.get_running_loop()
        published: asyncio.Future[None] = loop.create_future()
        with on_publish(published):  # the KEYNOTIFY's task resolves it once its request is handed to the connection
            watching = loop.create_task(watches.ensure(data_key), name="sskv-watch-on-read")
        # ... or once it ended without publishing (refused before sending, no slot in time, watched meanwhile)
        watching.add_done_callback(functools.partial(_resolve, published))
        # No set holds the task: it is reachable from the loop until it first runs, then from the KEYNOTIFY's reply
        # future, which the client's pending calls hold until it is answered or fails.
        watching.add_done_callback(_retrieve)
        await published
        return await self._reread(data_key, watching)

    def _loads(self, binding: bytes, data: bytes) -> V:
        return decode_value(self.codec, binding, data, binding=binding)

    async def value_of(self, data_key: bytes) -> V | Absent:
        """The value of ``data_key`` (a checked key's), ``ABSENT`` when absent: a face's ``get``. Without a local
        cache, the GET and the decode with no entry built and no frame between."""
        if self.cache is not None:
            return (await self.read_data_key(data_key)).value
        got = await self.client.get(data_key)
        if got is None:
            return ABSENT
        raw = got.value
        if len(raw) <= _QUICK_DECODE_MAX and _runs_no_user_code(self.codec):
            try:
                value: V = self.codec.loads(raw)
            except Exception:  # decoded again by _decoded, which raises it as a DecodeError naming the key
                pass
            else:
                return value
        return await self._decoded(data_key, raw)

    async def _fetch(self, data_key: bytes) -> CachedEntry[V]:
        got = await self.client.get(data_key)
        if got is None:
            return CachedEntry(ABSENT, None, None, None, None)
        raw = got.value
        if len(raw) <= _QUICK_DECODE_MAX and _runs_no_user_code(self.codec):
            try:
                value: V = self.codec.loads(raw)
            except Exception:  # decoded again by _decoded, which raises it as a DecodeError naming the key
                value = await self._decoded(data_key, raw)
        else:
            value = await self._decoded(data_key, raw)
        return CachedEntry(value, raw, got.version, None, None)

    async def _decoded(self, data_key: bytes, raw: bytes) -> V:
        """``raw`` decoded, a failure raised as :class:`DecodeError`. Small values of a codec that runs no user code
        (_runs_no_user_code) are decoded on the loop, bounded and cheaper than handing them over; anything else in
        the thread of a blocking facade's caller, which waits for this read anyway: a slow codec stalls that caller
        only, not every other user of the process-wide loop thread (_blocking.py)."""
        key = self.user_key(data_key)
        if len(raw) <= _QUICK_DECODE_MAX and _runs_no_user_code(self.codec):
            return decode_value(self.codec, key, raw)
        return await in_caller_thread(lambda: decode_value(self.codec, key, raw, binding=self.binding(key)))

    async def read_many(self, keys: Iterable[str]) -> list[CachedEntry[V]]:
        # At most 64 reads in flight (see _fanout): gathering a few thousand reads at once (len() of a fresh
        # dict over a big namespace) lost replies and timed out.
        return await gather_bounded((self.read(k) for k in keys), 64)

    # -- writes -------------------------------------------------------------------------------------------

    def binding(self, key: str) -> bytes:
        """What a key-bound codec's signature covers: the namespace and the key (not the generation)."""
        return self._binding + key.encode("utf-8", "surrogatepass")

    def encoded(self, key: str, value: V) -> Encoded[V]:
        """``value`` encoded now, in the calling thread (a blocking facade's), and decoded there too if a write
        of the key would be kept in the local cache (it is watched): no codec work for the loop's thread."""
        raw = self.encode(key, value)
        data_key = self._prefix + key.encode("utf-8", "surrogatepass")
        watches = self.watches
        watched = watches is not None and watches.active(data_key)
        return Encoded(value, raw, self._kept(key, raw) if watched else ABSENT)

    def encode(self, key: str, value: V | Encoded[V]) -> bytes:
        """The bytes stored for ``value`` (an :class:`Encoded` value was encoded already, in its caller's thread)."""
        if isinstance(value, Encoded):
            return value.raw
        return encode_value(self.codec, key, value, binding=self.binding(key))

    def check_size(self, key: str, raw: bytes, ttl: float | None = None) -> None:
        """Raise :class:`~sskv_mapping.errors.ValueTooLargeError` if ``raw`` stored under ``key`` would be refused
        for its size (the key or value limit, the broker's packet size, ``max_payload``), sending nothing: how a
        batch (``update``, ``set_many``) checks every item before it writes any."""
        ttl_ms = ttl_to_ms(ttl)
        exact_ttl = None if ttl_ms is None else timedelta(milliseconds=ttl_ms)
        self.client.check_set(self.data_key(key), raw, ttl=exact_ttl)

    async def write(
        self,
        key: str,
        value: V | Encoded[V],
        *,
        ttl: float | None = None,
        condition: SetCondition | None = None,
        fencing_token: HybridLogicalClock | None = None,
        listed: bool = True,
        prefix: bytes | None = None,
    ) -> SetResult:
        """Encode and SET (everything is checked before anything is sent); list the key in the index first.

        ``prefix``: write under that key prefix rather than the current one (a cache's generation)."""
        data_key = self.data_key(key, prefix)
        raw = self.encode(key, value)
        ttl_ms = ttl_to_ms(ttl)
        # What the local cache keeps on a write: the written value only if the key is watched already (it was
        # read before, or written fenced), since only a key watched before the SET was sent is surely notified of a
        # later change. A write never starts a watch: a key is watched once it is read. A write-only burst is then
        # one SET per key (in SCAN mode) -- no KEYNOTIFY per key, and none to STOP again when the watches pass
        # their limit (a 100k-key fill sent 2 requests per key plus ~80k STOPs) -- and a new key is one round trip.
        # The price: the first read of a key written but never read is a miss (KEYNOTIFY and GET), as for any
        # key this process has not read yet. A fenced write watches first, as before: its entry keeps the token it
        # was written with (``entry()``).
        watches = self.watches
        if fencing_token is not None and watches is not None:
            await watches.ensure(data_key)
        watched = watches is not None and watches.active(data_key)
        if listed and self.index is not None:  # listed before the data exists: see _index's invariants
            # a value too large to store must not leave its key listed: refused before the index entry is written
            exact_ttl = None if ttl_ms is None else timedelta(milliseconds=ttl_ms)
            self.client.check_set(data_key, raw, condition=condition, ttl=exact_ttl, fencing_token=fencing_token)
            await self.index.add([(key, None if ttl_ms is None else system_clock_ms() + ttl_ms)])
        started = self._clock()
        result = await self.client.set(
            data_key,
            raw,
            condition=condition,
            ttl=None if ttl_ms is None else timedelta(milliseconds=ttl_ms),  # exact: no ms -> s -> ms
            fencing_token=fencing_token,
        )
        if result.applied and self.cache is not None:
            kept: V | Absent = ABSENT
            if watched and watches is not None and watches.active(data_key):
                # this write's own notification, when it came before the acknowledgement, was decoded already
                held = self.cache.peek(data_key)
                if held is not None and held.version == result.version:
                    kept = held.value
                elif isinstance(value, Encoded) and value.kept is not ABSENT:
                    kept = value.kept
                else:
                    kept = self._kept(key, raw)
            if kept is not ABSENT:
                expires = None if ttl_ms is None else started + ttl_ms / 1000
                self.cache.store_write(data_key, CachedEntry(kept, raw, result.version, fencing_token, expires))
            else:  # not (surely) notified of later changes (see read_data_key), or not decodable: keep nothing
                self.cache.invalidate(data_key)
        return result

    def _kept(self, key: str, raw: bytes) -> V | Absent:
        """What the local cache keeps for a write of ``raw``: the codec's own decoding of the stored bytes, never
        the caller's object (which the caller may change after ``set``, and which may not be what the codec gives
        back: aiocache's serializers). Decoded once here, on a write that is kept, so a hit costs nothing more.
        A codec that cannot decode what it encoded keeps nothing (the next read fetches and says why)."""
        try:
            return decode_value(self.codec, key, raw, binding=self.binding(key))
        except DecodeError as exc:
            log.debug("the value written to %r does not decode; not kept: %s", key, exc)
            return ABSENT

    async def delete(self, key: str, *, fencing_token: HybridLogicalClock | None = None) -> bool:
        data_key = self.data_key(key)
        deleted = await self.client.delete(data_key, fencing_token=fencing_token)
        if self.cache is not None:
            self.cache.invalidate(data_key)
        if self.index is not None:
            await self.index.remove([key])
        return deleted

    async def delete_if(
        self, key: str, raw: bytes, *, fencing_token: HybridLogicalClock | None = None
    ) -> VDeleteResult:
        """VDEL: delete only if the stored bytes are still ``raw``."""
        data_key = self.data_key(key)
        result = await self.client.vdelete(data_key, raw, fencing_token=fencing_token)
        if self.cache is not None:
            self.cache.invalidate(data_key)
        if result is VDeleteResult.DELETED and self.index is not None:
            await self.index.remove([key])
        return result

    # -- listing ------------------------------------------------------------------------------------------

    async def listed_keys(self, *, refresh: bool = False) -> list[str]:
        """Every key in the index, oldest first (may include keys whose data expired: see :meth:`live_keys`)."""
        if self.index is None:
            raise ConfigurationError("this namespace keeps no index")
        listing = await self.index.listing(refresh=refresh)
        return [k for k, _ in sorted(listing.items(), key=lambda kv: (kv[1].added_ms, kv[0]))]

    async def live_keys(self) -> list[str]:
        """The listed keys that exist now, oldest first, without reading their data -- except the few whose
        recorded expiry has passed, which are checked (a later write may have renewed them) and pruned if gone."""
        if self.index is None:
            raise ConfigurationError("this namespace keeps no index")
        listing = await self.index.listing()
        now = system_clock_ms()
        ordered = sorted(listing.items(), key=lambda kv: (kv[1].added_ms, kv[0]))
        doubtful = [k for k, e in ordered if e.expires_ms is not None and e.expires_ms <= now]
        gone: set[str] = set()
        if doubtful:
            entries = await self.read_many(doubtful)
            gone = {k for k, e in zip(doubtful, entries, strict=True) if e.value is ABSENT}
            await self.index.prune(gone)
        return [k for k, _ in ordered if k not in gone]

    async def live_items(self) -> list[tuple[str, CachedEntry[V]]]:
        """``(key, entry)`` for every listed key that exists now; dangling index entries are pruned."""
        keys = await self.live_keys()
        entries = await self.read_many(keys)
        live = [(k, e) for k, e in zip(keys, entries, strict=True) if e.value is not ABSENT]
        missing = [k for k, e in zip(keys, entries, strict=True) if e.value is ABSENT]
        if missing and self.index is not None:
            await self.index.prune(missing)
        return live
