"""The emulator as a process: its command line, logging, signals and serve loop.

What it does and why: docs/design/architecture.md, "The emulator's parts", `emulator/process.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import socket
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from .._protocol.topics import REQUEST_TOPIC
from ..errors import ConfigurationError, StateStoreError
from .scan import DEFAULT_SCAN_PAGE_SIZE

__all__ = [
    "DEFAULT_BROKER_PORT",
    "add_emulator_arguments",
    "build_parser",
    "main",
    "pick_broker_port",
    "port_is_free",
    "run",
]

#: The port ``--with-broker`` starts its mosquitto on when it is free, and the port connected to without it.
DEFAULT_BROKER_PORT = 1883
EXIT_INTERRUPTED = 130

DESCRIPTION = f"""\
Serve a faithful local emulator of the Azure IoT Operations state store on an MQTT 5 broker.

The emulator connects to the broker as an ordinary client, subscribes to the state store
request topic
  {REQUEST_TOPIC}
and answers like the service: GET, SET (NX, NEX, PX), DEL, VDEL, KEYNOTIFY, SCAN (glob
patterns, service-chosen pages, opaque continuation tokens), hybrid logical clock versions,
fencing tokens, expiry with DELETE notifications.

With --with-broker it first starts a private mosquitto, configured for it, on --host and
--broker-port (default {DEFAULT_BROKER_PORT}, or a free port if {DEFAULT_BROKER_PORT} is taken), prints the broker URL,
and serves on it; Ctrl-C, SIGTERM or SIGHUP stops both. Without it, it connects to the MQTT 5 broker
at --host/--port: a mosquitto started with 'log_dest topic' and 'connection_messages true'
(how the emulator sees clients disconnect and drops their KEYNOTIFY registrations, as the
service does).

'sskv emulator' and 'python -m sskv_mapping.emulator' are the same command.
"""

EPILOG = """\
It prints 'sskv emulator: serving state store on mqtt://HOST:PORT ...' once ready, and stops cleanly on
SIGTERM, SIGHUP or Ctrl-C (exit status 0). Exit status 1: the broker could not be reached or started. Exit status 2:
an option that cannot work (a --persist-file whose directory is missing or not writable...).

examples:
  %(prog)s --with-broker                    # its own mosquitto on 1883 (or a free port)
  %(prog)s --with-broker --broker-port 18830 --inspect 8080  # and open http://127.0.0.1:8080/
  %(prog)s --port 1883                      # on a mosquitto you started (see above)
  %(prog)s --with-broker --max-keys 10000 --persist-file store.json
  %(prog)s --with-broker --scan-page-size 5 --scan-empty-pages 1
  %(prog)s --with-broker --no-scan          # an older service without SCAN
"""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _page_size(text: str) -> int:
    value = _positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("a SCAN page holds at least 1 key")
    return value


def _empty_pages(text: str) -> int:
    value = _positive_int(text)
    if value > 255:
        raise argparse.ArgumentTypeError("at most 255 empty pages")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError("a TCP port is 1-65535")
    return value


def _inspect_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"write an IPv6 address in brackets: [{host}]:{port}")
    if not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {port!r} (0-65535; 0: any free port)")
    return host or "127.0.0.1", int(port)


def add_emulator_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the emulator process: the one parser of ``python -m sskv_mapping.emulator`` and
    ``sskv emulator`` (both run :func:`run` on what it parsed)."""
    parser.add_argument("--host", default="127.0.0.1", help="broker host (default %(default)s)")
    parser.add_argument(
        "--port",
        type=_port,
        help=f"broker port to connect to (default {DEFAULT_BROKER_PORT}); with --with-broker, the same as "
        "--broker-port",
    )
    parser.add_argument(
        "--with-broker",
        action="store_true",
        help="start a private mosquitto first (needs the mosquitto executable) and serve on it",
    )
    parser.add_argument(
        "--broker-port",
        type=_port,
        metavar="P",
        help=f"port of the private mosquitto (default {DEFAULT_BROKER_PORT} if free, else any free port)",
    )
    parser.add_argument(
        "--client-id",
        help="MQTT client id of the emulator (default: sskv-emulator-<random>; must be unique on the broker). "
        "With an id given, the MQTT session outlives the connection: requests sent while the emulator reconnects, "
        "or restarts with the same id, are served",
    )
    parser.add_argument(
        "--max-keys",
        type=_positive_int,
        metavar="N",
        help="key quota: a SET creating key N+1 fails with 'the quota has been exceeded' (default: none)",
    )
    parser.add_argument(
        "--persist-file",
        type=Path,
        metavar="FILE",
        help="keep entries written with 'aio-persistence: true' in FILE (JSON), reloaded at start",
    )
    parser.add_argument(
        "--scan-page-size",
        type=_page_size,
        default=DEFAULT_SCAN_PAGE_SIZE,
        metavar="N",
        help="the most keys in one SCAN page (default %(default)s)",
    )
    parser.add_argument(
        "--scan-empty-pages",
        type=_empty_pages,
        default=0,
        metavar="N",
        help="give N empty SCAN pages (with more to come) before every page of keys, as the real service may "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--no-scan",
        dest="scan",
        action="store_false",
        help="answer SCAN with 'unknown command', like a service older than SCAN",
    )
    parser.add_argument(
        "--no-dedup",
        dest="dedup",
        action="store_false",
        help="apply a request that arrives twice (re-sent after a reconnect) twice, as a service that does not "
        "de-duplicate would; by default a copy within 60 s gets the first answer and changes nothing",
    )
    parser.add_argument(
        "--inspect",
        type=_inspect_address,
        metavar="[HOST:]PORT",
        help="serve the inspector web page (keys, namespaces, locks, watches, a live feed) on HOST:PORT; HOST is "
        "127.0.0.1 unless given (another address is logged as a WARNING: it shows the store to the network); "
        "PORT 0 picks a free one. Needs the 'inspect' extra (pip install 'sskv-mapping[inspect]')",
    )
    parser.add_argument(
        "--inspect-writable",
        action="store_true",
        help="let the inspector page set and delete keys (read-only without it)",
    )
    parser.add_argument(
        "--allow-second-emulator",
        dest="alone",
        action="store_false",
        help="start even if a state store already answers on the broker (by default: refused, one per broker)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log level on stderr (default %(default)s)",
    )


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "python -m sskv_mapping.emulator",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_emulator_arguments(parser)
    return parser


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _announce(line: str) -> None:
    print(line, flush=True)


async def serve(args: argparse.Namespace, host: str, port: int) -> int:
    """Run the emulator until SIGTERM/SIGINT; returns the exit status."""
    # Imported here so that `--help` stays fast and needs no MQTT library.
    from .._transport.settings import ConnectionSettings
    from .core import EmulatorCore
    from .duplicates import DEFAULT_MAX_ENTRIES
    from .server import EmulatorServer, serving_already

    # The MQTT session outlives a dropped connection (requests published while it reconnects are queued by the
    # broker and served after), but only under a stable --client-id: a random id's session would outlive a
    # crashed process and swallow requests nobody serves, where the broker otherwise answers "no subscriber"
    # (PUBACK 0x10) and clients send again once a new emulator is up.
    settings = ConnectionSettings(
        host=host,
        port=port,
        client_id=args.client_id or f"sskv-emulator-{uuid.uuid4().hex[:12]}",
        session_expiry=3600 if args.client_id else 0,
    )
    server = EmulatorServer(
        settings,
        EmulatorCore(
            max_keys=args.max_keys,
            scan=args.scan,
            scan_page_size=args.scan_page_size,
            scan_empty_pages=args.scan_empty_pages,
            duplicate_window=DEFAULT_MAX_ENTRIES if args.dedup else 0,
        ),
        persist_file=args.persist_file,
        on_ready=_announce,
    )
    inspector = None
    if args.inspect is not None:
        from .inspector import Inspector  # aiohttp, only when asked for

        inspector = Inspector(server, writable=args.inspect_writable)
        try:
            url = await inspector.start(*args.inspect)
        except OSError as exc:
            print(
                f"sskv emulator: cannot serve the inspector on {args.inspect[0]}:{args.inspect[1]}: {exc}",
                file=sys.stderr,
                flush=True,
            )
            return 1
        mode = "writable" if args.inspect_writable else "read-only"
        _announce(f"sskv emulator: inspector ({mode}) on {url}")
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a closed terminal too: stop, and the broker with it
    for sig in signals:
        loop.add_signal_handler(sig, server.stop)
    try:
        if args.alone:  # one state store per broker, as the real service: not a second one beside it
            other = await serving_already(settings)
            if other is not None:
                raise ConfigurationError(other)
        await server.run()
    except StateStoreError as exc:
        print(f"sskv emulator: {exc}", file=sys.stderr, flush=True)
        return 1
    except ValueError as exc:  # an unreadable persistence file
        print(f"sskv emulator: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if inspector is not None:
            await inspector.close()
    print("sskv emulator: stopped", flush=True)
    return 0


def _check_inspect_options(args: argparse.Namespace) -> str | None:
    """Why the inspector options cannot be served (``None``: they can)."""
    if args.inspect is None:
        return "--inspect-writable needs --inspect [HOST:]PORT" if args.inspect_writable else None
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return "--inspect needs aiohttp: pip install 'sskv-mapping[inspect]'"
    return None


def _check_persist_file(args: argparse.Namespace) -> str | None:
    """Why ``--persist-file`` cannot be used (``None``: it can): a usage error, before connecting."""
    if args.persist_file is None:
        return None
    from ._persistence import persist_file_problem

    return persist_file_problem(args.persist_file)


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


def _serve(args: argparse.Namespace, host: str, port: int) -> int:
    """Configure logging and serve on ``host:port``."""
    problem = _check_inspect_options(args) or _check_persist_file(args)
    if problem is not None:
        print(f"sskv emulator: {problem}", file=sys.stderr, flush=True)
        return 2
    configure_logging(args.log_level)
    return asyncio.run(serve(args, host, port))


def run(args: argparse.Namespace) -> int:
    """Run the emulator the parsed command line asks for (with its own mosquitto if ``--with-broker``); returns
    the exit status."""
    if not args.with_broker:
        if args.broker_port is not None:
            print("sskv emulator: --broker-port needs --with-broker", file=sys.stderr)
            return 2
        return _serve(args, args.host, args.port or DEFAULT_BROKER_PORT)

    from ..errors import ConfigurationError
    from .broker import EMULATOR_QUEUE_SETTINGS, MosquittoBroker, MosquittoStartError

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
        return _serve(args, broker.host, broker.port)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        broker.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sskv_mapping.emulator``: returns the exit status."""
    return run(build_parser().parse_args(argv))
