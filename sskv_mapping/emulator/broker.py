"""A private mosquitto broker for tests, demos and the emulator, which never outlives the Python process.

It also parses mosquitto's connection log lines, how the emulator learns that a client went away.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final, Literal, Self

from ..errors import ConfigurationError

__all__ = [
    "CONNECTION_LOG_FORMATS",
    "CONNECTION_LOG_TOPICS",
    "EMULATOR_QUEUE_SETTINGS",
    "FALLBACK_LOCATIONS",
    "LOG_TOPIC_FILTER",
    "MOSQUITTO_NOT_FOUND",
    "MosquittoBroker",
    "MosquittoStartError",
    "find_mosquitto",
    "free_port",
    "live_brokers",
    "parse_connection_log",
]

#: The one-line message of the ``ConfigurationError`` raised when there is no mosquitto binary.
MOSQUITTO_NOT_FOUND: Final = "mosquitto not found: install it with 'apt-get install mosquitto' (Debian/Ubuntu)"

#: Where to look when ``mosquitto`` is not on ``PATH`` (Debian puts it in /usr/sbin, which a non-root
#: user's PATH usually lacks).
FALLBACK_LOCATIONS: tuple[str, ...] = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")

#: The mosquitto queue settings a broker serving the emulator needs (``sskv emulator --with-broker`` starts its
#: mosquitto with them; put them in your own broker's mosquitto.conf). mosquitto's defaults -- 20 messages in
#: flight and 1,000 queued per session -- are sized for devices, and beyond them it drops messages without telling
#: either end. The emulator is one session that every client's requests queue towards: each client keeps up to
#: ``max_in_flight`` (256) requests outstanding, so five busy clients already overflow 1,000. A watcher's session
#: gets every notification of every writer besides its replies. So: 100,000 queued per session (bounded memory,
#: well above what the clients' own bound lets build up), and 1,000 in flight from the emulator (its replies are
#: not held back waiting for acknowledgements 20 at a time).
EMULATOR_QUEUE_SETTINGS: tuple[str, ...] = ("max_inflight_messages 1000", "max_queued_messages 100000")

#: Subscribe to this (explicitly: ``#`` never matches ``$SYS`` topics) to receive mosquitto's log lines.
LOG_TOPIC_FILTER: Final = "$SYS/broker/log/#"

#: The topics that carry connection messages: connects and disconnects are logged at *notice* level
#: (``N``), but a session take-over ("already connected, closing old connection") at *error* level (``E``).
CONNECTION_LOG_TOPICS: Final = ("$SYS/broker/log/N", "$SYS/broker/log/E")

CONNECTION_LOG_FORMATS: Final = """\
What mosquitto 2.0.11 (Debian bookworm) publishes about connections, with ``log_dest topic`` and
``connection_messages true``. Verified empirically against /usr/sbin/mosquitto 2.0.11 and read from
its source (src/loop.c ``do_disconnect``, src/handle_connect.c, src/logging.c).

Payload: ``<timestamp>: <message>``, UTF-8, no trailing newline. ``<timestamp>`` is Unix seconds
(``1700000000``) unless ``log_timestamp_format`` is set; ``log_timestamp false`` removes it together
with the ``": "``. The whole line is cut at 999 bytes (a fixed buffer in logging.c), so a client id
longer than about 900 bytes makes the line unparseable. Topic: ``$SYS/broker/log/<level>``; D (debug)
is never published to a topic.

Connected (topic N)::

    New client connected from 127.0.0.1:52727 as CLIENTID (p5, c1, k60).
    New client connected from 127.0.0.1:34347 as CLIENTID (p5, c1, k60, u'USERNAME').
    New bridge connected from ADDR:PORT as CLIENTID (p2, c1, k60).

    pN = protocol (5 = MQTT 5, 2 = 3.1.1, 1 = 3.1), cN = clean start, kN = keepalive seconds. The
    client id is printed raw: it may contain spaces, parentheses, colons, even " as ".

Disconnected (topic N unless noted); one line per connection, never more:

    Client CLIENTID disconnected.                       DISCONNECT packet (any reason code)
    Client CLIENTID closed its connection.              socket closed, FIN or RST, no DISCONNECT
    Client CLIENTID has exceeded timeout, disconnecting.    keepalive * 1.5 expired (checked every ~5 s)
    Client CLIENTID disconnected due to protocol error.     also after "Bad client X sending multiple
                                                            CONNECT messages." (logged just before)
    Client CLIENTID disconnected due to malformed packet.
    Client CLIENTID disconnected due to oversize packet.    packet > max_packet_size
    Client CLIENTID disconnected due to oversize payload.
    Client CLIENTID disconnected due to out of memory.
    Client CLIENTID disconnected due to QoS too high or retain not supported.
    Client CLIENTID disconnected, not authorised.
    Client CLIENTID been disconnected by administrative action.   (sic; dynamic-security kick)
    Client CLIENTID disconnected: STRERROR.             errno-level socket failure
    Bad socket read/write on client CLIENTID: MESSAGE   any other error; no final period of its own
                                                        (observed: "...: Unknown error." when a client
                                                        published retained with retain_available false)
    Client CLIENTID already connected, closing old connection.   topic E: session take-over. The OLD
                                                        connection gets no other line; the new one's
                                                        "New client connected ... as CLIENTID" follows.

Caveats: a connection that never completed CONNECT is named ``<unknown>`` ("Client <unknown> closed its
connection.", "Client <unknown> disconnected, not authorised." for a bad password). Some rejected
CONNECTs (TLS identity checks, plugin auth) are logged with the id they *tried* to use, while a
legitimate client with that id may still be connected. Websocket listeners log no disconnect line at
all. Also logged, but not connection events: "New connection from 127.0.0.1:PORT on port N." (TCP
accept, before CONNECT), "Expiring client X due to timeout." (a persistent session expired, long after
its disconnect), "Outgoing messages are being dropped for client X."
"""

_ConnectionEvent = tuple[Literal["connected", "disconnected"], str]

# A message starts with one of these; anything else in front of it is the timestamp prefix.
_MESSAGE_STARTS: Final = (
    "New client connected from ",
    "New bridge connected from ",
    "Client ",
    "Bad socket ",
)

# Greedy ``id`` with an anchored suffix: the client id is printed raw, so only the fixed tail of the
# line tells where it ends. ``addr`` is lazy so "as" inside the id cannot move the split.
_CONNECTED_RE: Final = re.compile(
    r"New (?:client|bridge) connected from (?P<addr>.*?):(?P<port>\d+) as (?P<id>.*)"
    r" \(p\d+, c\d+, k\d+(?:, u'.*')?\)\.",
    re.DOTALL,
)
_DISCONNECTED_RES: Final = tuple(
    re.compile(pattern, re.DOTALL)
    for pattern in (
        r"Client (?P<id>.*) disconnected\.",
        r"Client (?P<id>.*) closed its connection\.",
        r"Client (?P<id>.*) has exceeded timeout, disconnecting\.",
        r"Client (?P<id>.*) disconnected due to (?:malformed packet|protocol error|oversize packet"
        r"|oversize payload|out of memory|QoS too high or retain not supported)\.",
        r"Client (?P<id>.*) disconnected, not authorised\.",
        r"Client (?P<id>.*) been disconnected by administrative action\.",
        r"Client (?P<id>.*) already connected, closing old connection\.",
        # strerror() and mosquitto_strerror() texts contain no colon: the last ": " ends the id.
        r"Client (?P<id>.*) disconnected: [^:]*\.",
        r"Bad socket read/write on client (?P<id>.*): [^:]*",
    )
)


def parse_connection_log(line: str) -> _ConnectionEvent | None:
    """Extract a connect or disconnect event from one mosquitto log line (see ``CONNECTION_LOG_FORMATS``).

    Accepts the ``$SYS/broker/log/...`` payload decoded as UTF-8, with or without the timestamp prefix
    (a line of the log file may keep its newline). Returns ``("connected", client_id)``,
    ``("disconnected", client_id)`` or ``None`` for any other line. A session take-over gives
    ``("disconnected", id)`` for the old connection; the new connection's line follows.

    >>> parse_connection_log("1700000000: New client connected from 127.0.0.1:5 as a b (p5, c1, k60).")
    ('connected', 'a b')
    >>> parse_connection_log("Client a b closed its connection.")
    ('disconnected', 'a b')
    >>> parse_connection_log("1700000000: mosquitto version 2.0.11 running") is None
    True
    """
    body = line.removesuffix("\n").removesuffix("\r")
    if not body.startswith(_MESSAGE_STARTS):
        # Shortest "...: " prefix; a timestamp format containing ": " itself is not supported.
        _, sep, body = body.partition(": ")
        if not sep or not body.startswith(_MESSAGE_STARTS):
            return None
    match = _CONNECTED_RE.fullmatch(body)
    if match:
        return ("connected", match["id"])
    for pattern in _DISCONNECTED_RES:
        match = pattern.fullmatch(body)
        if match:
            return ("disconnected", match["id"])
    return None


def find_mosquitto() -> str:
    """Return the path of the mosquitto executable: ``PATH`` first, then ``FALLBACK_LOCATIONS``.

    Raises:
        ConfigurationError: no executable mosquitto (message: ``MOSQUITTO_NOT_FOUND``).
    """
    found = shutil.which("mosquitto")
    if found:
        return found
    for candidate in FALLBACK_LOCATIONS:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise ConfigurationError(MOSQUITTO_NOT_FOUND)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago (the OS picks it; racy by nature)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class MosquittoStartError(RuntimeError):
    """mosquitto exited or did not start serving in time; the message ends with the tail of its log."""


# Brokers from start() until stop(): strong references, so an abandoned broker's process and private
# directory are still swept at exit.
_LIVE: set[MosquittoBroker] = set()


def live_brokers() -> list[MosquittoBroker]:
    """Brokers of this process whose mosquitto is running now."""
    return [broker for broker in _LIVE if broker.running]


@atexit.register
def _stop_all_brokers() -> None:
    for broker in list(_LIVE):
        with contextlib.suppress(Exception):
            broker.stop()


class MosquittoBroker:
    """A private mosquitto on a loopback port, configured for the state store emulator.

    The generated config (``config_text``) turns on ``set_tcp_nodelay`` (else every round trip pays
    40-90 ms of Nagle delay) and ``log_dest topic`` with ``connection_messages`` (the emulator watches
    ``$SYS/broker/log/#`` to learn about disconnects). ``extra_config`` lines are appended verbatim:
    more listeners (TLS), ``password_file``, ``acl_file``, ``max_packet_size``...

    ``default_settings=True`` runs mosquitto on its default settings, as its Debian service and official container
    image do -- no socket options, no tuning: only ``listener`` and ``allow_anonymous``, plus what the emulator
    cannot do without (``log_dest topic``: the connection log on ``$SYS/broker/log/#``, off by default) and where
    the log goes (a file in the private directory, how ``start()`` knows it serves). The test suite runs the
    request path on it too:
    without ``set_tcp_nodelay`` the broker's Nagle meets our delayed ACKs unless the client answers every read
    with an immediate ACK (``StreamConnection`` does, with ``TCP_QUICKACK``).

    The port is chosen once (``free_port``) unless given, and kept across ``restart()``, ``kill()`` and
    ``start()`` again, so clients can reconnect to the same address. ``stop()`` removes the private
    directory (config and log); ``kill()`` keeps it.

    Example::

        broker = MosquittoBroker(extra_config=["max_packet_size 1000000"]).start()
        try:
            ...  # connect to broker.host, broker.port
            broker.kill()      # simulate a crash
            broker.start()     # back on the same port
        finally:
            broker.stop()
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        extra_config: Sequence[str] = (),
        executable: str | None = None,
        startup_timeout: float = 10.0,
        default_settings: bool = False,
    ) -> None:
        if isinstance(extra_config, str):
            raise ConfigurationError("extra_config is a sequence of config lines, not one string")
        for config_line in extra_config:
            if "\n" in config_line or "\r" in config_line:
                raise ConfigurationError(f"extra_config lines must not contain newlines: {config_line!r}")
        self.executable: str = executable if executable is not None else find_mosquitto()
        self.host: str = host
        self._fixed_port = port is not None
        self.port: int = port if port is not None else free_port(host)
        self.extra_config: tuple[str, ...] = tuple(extra_config)
        self.default_settings = default_settings
        self.startup_timeout = startup_timeout
        self._workdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._output: IO[bytes] | None = None

    # -- attributes -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``mqtt://host:port`` (the form ``ConnectionSettings.from_url`` accepts)."""
        return f"mqtt://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The process id while the process exists, else ``None``."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the mosquitto process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def workdir(self) -> Path | None:
        """The private directory (config, log), or ``None`` before ``start()`` and after ``stop()``."""
        return self._workdir

    @property
    def config_path(self) -> Path | None:
        return self._workdir / "mosquitto.conf" if self._workdir else None

    @property
    def log_path(self) -> Path | None:
        return self._workdir / "mosquitto.log" if self._workdir else None

    def config_text(self) -> str:
        """The config file this broker runs with (also before it is written)."""
        workdir = self._workdir if self._workdir is not None else Path("<workdir>")
        # mosquitto refuses per_listener_settings after any security setting (our allow_anonymous below),
        # so an extra_config line setting it is hoisted to the top: then the allow_anonymous below applies
        # to the default listener only, and each extra listener carries its own auth settings.
        hoisted = [line for line in self.extra_config if line.split(maxsplit=1)[:1] == ["per_listener_settings"]]
        if self.default_settings:
            lines = [
                "# Generated by sskv_mapping.emulator.broker: a mosquitto on its default settings, loopback only.",
                *hoisted,
                f"listener {self.port} {self.host}",
                "allow_anonymous true",
                # the emulator's only need (off by default): the connection log on $SYS/broker/log/#
                "log_dest topic",
                f"log_dest file {workdir / 'mosquitto.log'}",
            ]
        else:
            lines = [
                "# Generated by sskv_mapping.emulator.broker: a private test broker, loopback only.",
                *hoisted,
                f"listener {self.port} {self.host}",
                "allow_anonymous true",
                # Without it every request/response round trip pays Nagle's delay (~40-90 ms) unless the client
                # acknowledges at once (StreamConnection does; other clients may not).
                "set_tcp_nodelay true",
                "persistence false",
                # $SYS/broker/log/N carries "New client connected ... as X" / "Client X disconnected.":
                # how the emulator learns that a client went away.
                "log_dest topic",
                f"log_dest file {workdir / 'mosquitto.log'}",
                "log_type error",
                "log_type warning",
                "log_type notice",
                "log_type information",
                "connection_messages true",
            ]
        if os.geteuid() == 0:
            # As root mosquitto drops privileges to user "mosquitto" *before* opening its log file, which
            # then cannot be written in our 0700 directory (nor could TLS keys there be read).
            lines.append("user root")
        lines.extend(line for line in self.extra_config if line not in hoisted)
        return "\n".join(lines) + "\n"

    def read_log(self) -> str:
        """mosquitto's log file plus anything it printed (config errors come before logging starts)."""
        if self._workdir is None:
            return ""
        parts = []
        for name in ("output.txt", "mosquitto.log"):
            with contextlib.suppress(OSError):
                parts.append((self._workdir / name).read_text("utf-8", errors="replace"))
        return "".join(parts)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.read_log().splitlines()[-lines:])

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.running else "stopped"
        defaults = " default-settings" if self.default_settings else ""
        return f"<MosquittoBroker{defaults} {self.host}:{self.port} {state}>"

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start mosquitto (no-op when running) and wait until it serves on ``port``.

        Raises:
            MosquittoStartError: it exited or did not serve within ``startup_timeout`` seconds; the
                process is gone and the private directory removed by then.
        """
        if self.running:
            return self
        self._reap()
        _LIVE.add(self)
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="sskv-mosquitto-"))
        try:
            # Our free port may have been taken meanwhile by someone else: pick another, unless the
            # caller fixed the port or it already served on it (restart() relies on keeping it).
            for attempt in range(3):
                try:
                    self._launch()
                except MosquittoStartError as exc:
                    if self._fixed_port or attempt == 2 or "Address already in use" not in str(exc):
                        raise
                    self.port = free_port(self.host)
                else:
                    self._fixed_port = True
                    return self
        except BaseException:
            # A failed start leaves nothing behind (the error message carries the log tail), so a
            # `with MosquittoBroker()` whose __enter__ raised needs no cleanup.
            self.stop()
            raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Terminate (SIGTERM, then SIGKILL after 5 s) and remove the private directory. Idempotent."""
        self._terminate()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        if self._process is None:
            _LIVE.discard(self)

    def restart(self) -> Self:
        """Stop and start again on the same port (the log file is kept and appended to)."""
        self._terminate()
        return self.start()

    def kill(self) -> None:
        """SIGKILL the process (a crash: no clean socket shutdown). ``start()`` brings it back."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
        self._reap()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals ---------------------------------------------------------------------------------

    def _launch(self) -> None:
        assert self._workdir is not None
        config_path = self._workdir / "mosquitto.conf"
        config_path.write_text(self.config_text(), "utf-8")
        log_path = self._workdir / "mosquitto.log"
        log_offset = log_path.stat().st_size if log_path.exists() else 0
        # A file, not a pipe: nobody has to drain it, and it survives for the error message.
        self._output = open(self._workdir / "output.txt", "ab")  # noqa: SIM115 - closed in _reap()
        try:
            self._process = subprocess.Popen(
                [self.executable, "-c", str(config_path)],
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                close_fds=True,
            )
        except OSError as exc:
            self._reap()
            raise MosquittoStartError(f"cannot run {self.executable}: {exc}") from exc
        try:
            self._wait_until_serving(log_path, log_offset)
        except BaseException:
            self.kill()
            raise

    def _wait_until_serving(self, log_path: Path, log_offset: int) -> None:
        # "running" is logged after the listeners are bound; waiting for it (not only for the port to
        # accept) means we never mistake someone else's listener on our port for our broker.
        process = self._process
        assert process is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if process.poll() is not None:
                raise MosquittoStartError(
                    f"mosquitto exited with status {process.returncode} while starting on "
                    f"{self.host}:{self.port}; its log:\n{self.log_tail()}"
                )
            if self._log_says_running(log_path, log_offset) and self._accepts_tcp():
                return
            if time.monotonic() > deadline:
                raise MosquittoStartError(
                    f"mosquitto did not serve on {self.host}:{self.port} within {self.startup_timeout} s;"
                    f" its log:\n{self.log_tail()}"
                )
            time.sleep(0.01)

    @staticmethod
    def _log_says_running(log_path: Path, offset: int) -> bool:
        try:
            with log_path.open("rb") as log:
                log.seek(offset)
                return re.search(rb"mosquitto version \S+ running", log.read()) is not None
        except OSError:
            return False

    def _accepts_tcp(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _terminate(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            # A test may have paused it (SIGSTOP) to simulate a hung broker; SIGTERM waits for SIGCONT.
            process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        self._reap()

    def _reap(self) -> None:
        process = self._process
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
            if process.poll() is not None:
                self._process = None
        if self._output is not None and self._process is None:
            self._output.close()
            self._output = None
