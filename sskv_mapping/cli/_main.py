"""The ``sskv`` command's parser and ``sskv emulator``.

To add a command, write an ``_add_*_parser(subparsers)`` function and list it in ``_REGISTRARS``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__

__all__ = ["build_parser", "main"]

DEFAULT_BROKER_PORT = 1883
EXIT_INTERRUPTED = 130

_EMULATOR_DESCRIPTION = """\
Run the local state store emulator.

Without --with-broker it connects to the MQTT 5 broker at --host/--port (mosquitto configured with
'log_dest topic' and 'connection_messages true', so that it sees clients disconnect).

With --with-broker it first starts a private mosquitto, configured for it, on --host and --broker-port
(default 1883, or a free port if 1883 is taken), prints the broker URL, and serves on it. Ctrl-C or
SIGTERM (or SIGHUP) stops both.
"""


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError("a TCP port is 1-65535")
    return value


def _add_emulator_parser(subparsers: Any) -> None:
    from ..emulator.process import add_emulator_arguments

    p = subparsers.add_parser(
        "emulator",
        help="run the local state store emulator (optionally with its own mosquitto)",
        description=_EMULATOR_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="broker host (default %(default)s)")
    p.add_argument(
        "--port",
        type=_port,
        help=f"broker port to connect to (default {DEFAULT_BROKER_PORT}); with --with-broker, the same as "
        "--broker-port",
    )
    p.add_argument(
        "--with-broker",
        action="store_true",
        help="start a private mosquitto first (needs the mosquitto executable) and serve on it",
    )
    p.add_argument(
        "--broker-port",
        type=_port,
        metavar="P",
        help=f"port of the private mosquitto (default {DEFAULT_BROKER_PORT} if free, else any free port)",
    )
    add_emulator_arguments(p, broker_address=False)
    p.set_defaults(func=_run_emulator)


def _add_client_parsers(subparsers: Any) -> None:
    from ._client_commands import add_client_parsers

    add_client_parsers(subparsers)


_REGISTRARS: list[Callable[[Any], None]] = [_add_emulator_parser, _add_client_parsers]


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now (with SO_REUSEADDR, as mosquitto binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
        return True


def pick_broker_port(host: str, requested: int | None) -> tuple[int | None, str | None]:
    """The port for ``--with-broker`` and a note to print: an explicit port is used as is (``None`` → let
    the broker pick); the default 1883 only if it is free."""
    if requested is not None:
        return requested, None
    if port_is_free(host, DEFAULT_BROKER_PORT):
        return DEFAULT_BROKER_PORT, None
    return None, f"port {DEFAULT_BROKER_PORT} on {host} is in use; starting mosquitto on a free port instead"


def _run_emulator(args: argparse.Namespace) -> int:
    from ..emulator.process import run

    if not args.with_broker:
        if args.broker_port is not None:
            print("sskv emulator: --broker-port needs --with-broker", file=sys.stderr)
            return 2
        return run(args, args.host, args.port or DEFAULT_BROKER_PORT)

    from ..emulator.broker import EMULATOR_QUEUE_SETTINGS, MosquittoBroker, MosquittoStartError
    from ..errors import ConfigurationError

    if args.port is not None and args.broker_port is not None and args.port != args.broker_port:
        print("sskv emulator: give --port or --broker-port, not two different ports", file=sys.stderr)
        return 2
    port, note = pick_broker_port(args.host, args.broker_port or args.port)
    if note:
        print(f"sskv emulator: {note}", flush=True)
    try:
        # queue limits that fit the emulator's load (mosquitto's defaults drop messages past 1,000 per session)
        broker = MosquittoBroker(host=args.host, port=port, extra_config=EMULATOR_QUEUE_SETTINGS)
        broker.start()
    except (ConfigurationError, MosquittoStartError) as exc:
        print(f"sskv emulator: cannot start mosquitto: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    try:
        print(f"sskv emulator: mosquitto broker listening on {broker.url} (pid {broker.pid})", flush=True)
        return run(args, broker.host, broker.port)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        broker.stop()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sskv",
        description="The Azure IoT Operations state store from the command line, and its local emulator.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _REGISTRARS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sskv``; returns the exit status (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    # Keys and values from argv that are not UTF-8 are echoed back as the bytes they were, not a traceback.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")
    func: Callable[[argparse.Namespace], int] = args.func
    with contextlib.suppress(BrokenPipeError):  # `sskv watch k | head` must not end in a traceback
        return int(func(args))
    return 1
