"""atheris (libFuzzer, coverage-guided) targets for the five parsers of hostile input.

Targets (each feeds one input to the oracles of ``tests/fuzz/_corpus.py``: only ``ProtocolError`` may escape
a parser, ``ServiceError`` the service-side command parser, and the library must agree with the reference
parsers and round-trip what it accepts):

* ``resp3``: the bytes as a reply (``parse_reply`` + every command's ``decode``) and as a request
  (``parse_request`` + ``parse_command``);
* ``hlc``: ``HybridLogicalClock.parse`` of the bytes, and of the same bytes as ``str`` with surrogate escapes;
* ``notification``: ``parse_notification`` of ``topic SEP payload [SEP ts]`` (``SEP`` = ``b"\\n~~\\n"``);
* ``publish``: ``decode_publish`` (the MQTT PUBLISH decoder) of the bytes as a packet's first byte and the rest
  (only ``MalformedPacketError`` may escape; what it accepts re-encodes and decodes to the same message);
* ``packets``: the bytes as a broker's stream (``PacketSplitter``: the same packets however the stream is cut;
  each packet decoded by its type; only ``MalformedPacketError`` may escape);
* ``session``: the same stream fed to the sans-IO MQTT session with publishes in flight and queued (the Receive
  Maximum holds, every waiter comes back exactly once, only ``MalformedPacketError`` escapes).

Run a longer session from the repository root (any libFuzzer flag may follow the target name)::

    python -m tests.fuzz.atheris_targets resp3 -max_total_time=600
    python -m tests.fuzz.atheris_targets hlc -runs=2000000 -print_final_stats=1
    python -m tests.fuzz.atheris_targets notification -max_total_time=600 my_corpus_dir/
    python -m tests.fuzz.atheris_targets publish -max_total_time=600

Without a corpus directory, the built-in seeds (valid encodings) are written to a temporary directory and
used; with one, seeds are added to it and libFuzzer keeps the new inputs it finds there. A crash (any other
exception, or an ``AssertionError`` from an oracle) prints the traceback, writes ``crash-<sha1>`` (see
``-artifact_prefix``) and exits non-zero. ``tests/fuzz/test_atheris.py`` runs each target briefly.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

try:
    import atheris
except ImportError:  # pragma: no cover - the test skips, the script says so
    atheris = None

# Under atheris, instrument the library for coverage feedback: it must be imported inside this block.
_instrument = (
    atheris.instrument_imports(include=["sskv_mapping"])
    if atheris is not None and __name__ == "__main__"
    else contextlib.nullcontext()
)
with _instrument:
    from sskv_mapping._protocol import resp3

    from ._corpus import (
        HLC_SEEDS,
        NOTIFICATION_SEEDS,
        PACKET_STREAM_SEEDS,
        PUBLISH_SEEDS,
        REPLY_SEEDS,
        REQUEST_SEEDS,
        check_hlc,
        check_notification,
        check_packet_stream,
        check_publish,
        check_reply,
        check_request,
        check_session_stream,
        join_notification,
        split_notification,
    )

__all__ = ["TARGETS", "main", "seeds"]


def fuzz_resp3(data: bytes) -> None:
    check_reply(data)
    check_request(data)


def fuzz_hlc(data: bytes) -> None:
    check_hlc(data)
    check_hlc(data.decode("utf-8", "surrogateescape"))


def fuzz_notification(data: bytes) -> None:
    check_notification(*split_notification(data))


def fuzz_publish(data: bytes) -> None:
    check_publish(data)


def fuzz_packets(data: bytes) -> None:
    check_packet_stream(data)


def fuzz_session(data: bytes) -> None:
    check_session_stream(data)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "resp3": fuzz_resp3,
    "hlc": fuzz_hlc,
    "notification": fuzz_notification,
    "publish": fuzz_publish,
    "packets": fuzz_packets,
    "session": fuzz_session,
}


def seeds(target: str) -> list[bytes]:
    """The seed corpus of ``target``: valid encodings and a few near misses."""
    if target == "resp3":
        return [*REQUEST_SEEDS, *REPLY_SEEDS, resp3.encode_request(b"SET", b"k", b"v", b"NX", b"PX", b"100")]
    if target == "hlc":
        return [s.encode("utf-8") for s in HLC_SEEDS]
    if target == "notification":
        return [join_notification(*note) for note in NOTIFICATION_SEEDS]
    if target == "publish":
        return list(PUBLISH_SEEDS)
    if target in ("packets", "session"):
        return list(PACKET_STREAM_SEEDS)
    raise KeyError(target)


def write_seeds(target: str, directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    items = seeds(target)
    for item in items:
        (directory / f"seed-{hashlib.sha1(item).hexdigest()}").write_bytes(item)
    return len(items)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv if argv is None else argv)
    if len(args) < 2 or args[1] not in TARGETS:
        print(f"usage: python -m tests.fuzz.atheris_targets {{{','.join(TARGETS)}}} [libFuzzer flags] [corpus dir]")
        return 2
    if atheris is None:
        print("atheris is not installed: pip install atheris (Linux, CPython < 3.13)", file=sys.stderr)
        return 2
    target = args.pop(1)
    dirs = [a for a in args[1:] if not a.startswith("-")]
    with contextlib.ExitStack() as stack:
        if not dirs:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"sskv-fuzz-{target}-")))
            dirs = [str(tmp)]
            args.append(str(tmp))
        for d in dirs[:1]:
            write_seeds(target, Path(d))
        atheris.Setup(args, TARGETS[target])
        atheris.Fuzz()  # exits the process when done
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
