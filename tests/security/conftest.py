"""A private mosquitto with TLS listeners, a password file and ACLs, plus the emulator, for the security tests.

Listeners (all on 127.0.0.1):

* ``plain``: the broker's default listener, anonymous, no ACL: the emulator process connects here.
* ``password``: TLS (server certificate for 127.0.0.1/localhost), no client certificate required,
  ``allow_anonymous false``, a password file and an ACL that gives the test user the state store topics.
* ``x509``: TLS with ``require_certificate true`` + ``use_identity_as_username true``: the client
  certificate's CN is the user name, which its own ACL grants the same topics.
* ``wrong_name``: TLS whose certificate (signed by the same CA) names another host.

mosquitto 2.0: with ``per_listener_settings true`` (which must come before any security option; the
``MosquittoBroker`` config hoists it), ``allow_anonymous``, ``password_file`` and ``acl_file`` apply to the
listener they follow, so the plain listener keeps its ``allow_anonymous true``. Without it they would be
global, and an ACL would bind the emulator too.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sskv_mapping.client import TlsSettings
from sskv_mapping.emulator.broker import MosquittoBroker, MosquittoStartError, free_port
from tests._support.procs import EmulatorProcess, start_emulator

from ._certs import Pki, make_pki

USERNAME = "sskv-test-user"
#: Distinctive, so a leak into a log line or a message is found by a plain substring search.
PASSWORD = "pw-Zq8-" + secrets.token_hex(8)
#: Authenticates, but the ACL grants it nothing.
DENIED_USERNAME = "sskv-denied-user"
DENIED_PASSWORD = "pw-denied-" + secrets.token_hex(8)

# What a state store client needs (docs/design/protocol.md §1, §4): publish requests; receive its responses (under
# clients/<its id>/..., the pattern) and its notifications (clients/statestore/v1/.../<HEX(id)>/..., which an
# ACL pattern cannot express: %c is not hex-encoded, so the whole notification tree is readable). A
# ``pattern`` line applies to every user of its ACL file, wherever it stands.
STATE_STORE_ACL = [
    "topic write statestore/v1/#",
    "topic read clients/statestore/v1/#",
    "pattern read clients/%c/#",
]


def password_line(username: str, password: str) -> str:
    """One line of a mosquitto 2.0 password file: ``$7$`` = PBKDF2-SHA512, 101 rounds, 12-byte salt."""
    salt = os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 101, 64)
    return f"{username}:$7$101${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


@dataclass(frozen=True)
class SecureBroker:
    broker: MosquittoBroker
    pki: Pki
    password_port: int
    x509_port: int
    wrong_name_port: int

    @property
    def host(self) -> str:
        return self.broker.host

    @property
    def plain_port(self) -> int:
        return self.broker.port

    def tls(self, **changes: Any) -> TlsSettings:
        """TLS settings that trust our CA (override any field)."""
        fields: dict[str, Any] = {"ca_file": self.pki.ca, **changes}
        return TlsSettings(**fields)

    def client_cert_tls(self) -> TlsSettings:
        return self.tls(cert_file=self.pki.client.cert, key_file=self.pki.client.key)


@pytest.fixture(scope="session")
def pki() -> Iterator[Pki]:
    with tempfile.TemporaryDirectory(prefix="sskv-pki-") as directory:
        yield make_pki(Path(directory))


def _tls_listener(port: int, pki: Pki, cert: str, key: str) -> list[str]:
    return [f"listener {port} 127.0.0.1", f"cafile {pki.ca}", f"certfile {cert}", f"keyfile {key}"]


def _config(pki: Pki, directory: Path, ports: tuple[int, int, int]) -> list[str]:
    password_port, x509_port, wrong_name_port = ports
    (directory / "passwd").write_text(
        password_line(USERNAME, PASSWORD) + "\n" + password_line(DENIED_USERNAME, DENIED_PASSWORD) + "\n"
    )
    (directory / "acl-password").write_text("\n".join([f"user {USERNAME}", *STATE_STORE_ACL]) + "\n")
    (directory / "acl-x509").write_text("\n".join([f"user {pki.client_cn}", *STATE_STORE_ACL]) + "\n")
    return [
        "per_listener_settings true",
        *_tls_listener(password_port, pki, pki.server.cert, pki.server.key),
        "require_certificate false",
        "allow_anonymous false",
        f"password_file {directory / 'passwd'}",
        f"acl_file {directory / 'acl-password'}",
        *_tls_listener(x509_port, pki, pki.server.cert, pki.server.key),
        "require_certificate true",
        "use_identity_as_username true",
        "allow_anonymous false",
        f"acl_file {directory / 'acl-x509'}",
        *_tls_listener(wrong_name_port, pki, pki.wrong_name.cert, pki.wrong_name.key),
        "require_certificate false",
        "allow_anonymous true",
    ]


@pytest.fixture(scope="session")
def secure_broker(pki: Pki) -> Iterator[SecureBroker]:
    with tempfile.TemporaryDirectory(prefix="sskv-auth-") as directory:
        broker: MosquittoBroker | None = None
        for attempt in range(3):  # an extra listener's free port may be taken before mosquitto binds it
            ports = (free_port(), free_port(), free_port())
            broker = MosquittoBroker(extra_config=_config(pki, Path(directory), ports))
            try:
                broker.start()
                break
            except MosquittoStartError as exc:
                if attempt == 2 or "Address already in use" not in str(exc):
                    raise
        assert broker is not None
        try:
            yield SecureBroker(broker, pki, *ports)
        finally:
            broker.stop()


@pytest.fixture(scope="session")
def secure_emulator(secure_broker: SecureBroker) -> Iterator[EmulatorProcess]:
    """The emulator process, on the plain anonymous listener of the secure broker."""
    with start_emulator(secure_broker.host, secure_broker.plain_port) as proc:
        yield proc


@pytest.fixture
def secured(secure_broker: SecureBroker, secure_emulator: EmulatorProcess) -> SecureBroker:
    """The secure broker with the emulator serving on it."""
    return secure_broker
