"""Connection settings the way Azure IoT Operations apps are configured.

What it does and why: docs/design/transport.md, "The session core and the other transports",
`_transport/iot_operations_config.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError

__all__ = ["ENV_PREFIX", "SETTINGS", "from_connection_string", "from_environment"]

ENV_PREFIX = "AIO_"


@dataclass(frozen=True)
class _Setting:
    key: str  # the connection string key (the SDKs' property name)
    env: str  # the environment variable
    kind: str  # "str", "int", "bool", "file" (a path that must exist), "secret-file" (a path read for its text)


#: The SDKs' table, in its order.
SETTINGS: tuple[_Setting, ...] = (
    _Setting("HostName", "AIO_BROKER_HOSTNAME", "str"),
    _Setting("TcpPort", "AIO_BROKER_TCP_PORT", "int"),
    _Setting("UseTls", "AIO_MQTT_USE_TLS", "bool"),
    _Setting("CaFile", "AIO_TLS_CA_FILE", "file"),
    _Setting("CleanStart", "AIO_MQTT_CLEAN_START", "bool"),
    _Setting("KeepAlive", "AIO_MQTT_KEEP_ALIVE", "int"),
    _Setting("ClientId", "AIO_MQTT_CLIENT_ID", "str"),
    _Setting("SessionExpiry", "AIO_MQTT_SESSION_EXPIRY", "int"),
    _Setting("Username", "AIO_MQTT_USERNAME", "str"),
    _Setting("PasswordFile", "AIO_MQTT_PASSWORD_FILE", "secret-file"),
    _Setting("CertFile", "AIO_TLS_CERT_FILE", "file"),
    _Setting("KeyFile", "AIO_TLS_KEY_FILE", "file"),
    _Setting("KeyPasswordFile", "AIO_TLS_KEY_PASSWORD_FILE", "secret-file"),
    _Setting("SatAuthFile", "AIO_SAT_FILE", "file"),
)
_BY_KEY = {s.key.lower(): s for s in SETTINGS}

#: The SDKs' defaults for what is not given.
DEFAULT_PORT = 8883
DEFAULT_USE_TLS = True
DEFAULT_KEEPALIVE = 60
DEFAULT_CLEAN_START = False
DEFAULT_SESSION_EXPIRY = 3600

_RANGES = {
    "TcpPort": (1, 65535),
    "KeepAlive": (0, 65535),  # MQTT's Keep Alive is two bytes
    "SessionExpiry": (0, 0xFFFFFFFF),  # four bytes
}


def _int(text: str, name: str, key: str) -> int:
    try:
        number = int(text.strip(), 10)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, not {text!r:.40}") from None
    low, high = _RANGES[key]
    if not low <= number <= high:
        raise ConfigurationError(f"{name} must be between {low} and {high}, not {number}")
    return number


def _bool(text: str, name: str) -> bool:
    word = text.strip().lower()
    if word == "true":
        return True
    if word == "false":
        return False
    raise ConfigurationError(f"{name} must be true or false, not {text!r:.40}")


def _file(path: str, name: str) -> str:
    if not path:
        raise ConfigurationError(f"{name} is empty (unset it, or name a file)")
    if not os.path.isfile(path):
        raise ConfigurationError(f"{name} names no readable file: {path!r}")
    return path


def _secret(path: str, name: str) -> str:
    """The text of a password file: a trailing line break (as ``echo`` and most editors leave) is not part of it."""
    _file(path, name)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{name}: cannot read {path!r} ({type(exc).__name__})") from None
    return text.removesuffix("\n").removesuffix("\r")


def _settings_kwargs(values: Mapping[_Setting, str], name_of: Any) -> dict[str, Any]:
    """Keyword arguments for ``ConnectionSettings`` from the given raw values; ``name_of(setting)`` names it
    in errors (the variable or the connection string key)."""
    parsed: dict[str, Any] = {}
    for setting, raw in values.items():
        name = name_of(setting)
        if setting.kind == "int":
            parsed[setting.key] = _int(raw, name, setting.key)
        elif setting.kind == "bool":
            parsed[setting.key] = _bool(raw, name)
        elif setting.kind == "file":
            parsed[setting.key] = _file(raw, name)
        elif setting.kind == "secret-file":
            parsed[setting.key] = _secret(raw, name)
        else:
            parsed[setting.key] = raw

    def named(key: str) -> str:
        return str(name_of(_BY_KEY[key.lower()]))

    host = parsed.get("HostName", "")
    if not host.strip():
        raise ConfigurationError(f"{named('HostName')} is required (the broker's host name)")
    kwargs: dict[str, Any] = {
        "host": host.strip(),
        "port": parsed.get("TcpPort", DEFAULT_PORT),
        "keepalive": parsed.get("KeepAlive", DEFAULT_KEEPALIVE),
        "clean_start": parsed.get("CleanStart", DEFAULT_CLEAN_START),
        "session_expiry": parsed.get("SessionExpiry", DEFAULT_SESSION_EXPIRY),
    }
    if parsed.get("ClientId"):  # empty or unset: a generated id (ours is also the HLC node id, never empty)
        client_id = parsed["ClientId"]
        if ":" in client_id:
            raise ConfigurationError(f"{named('ClientId')} may not contain ':' (it is an HLC node id)")
        kwargs["client_id"] = client_id
    if parsed.get("Username"):
        kwargs["username"] = parsed["Username"]
    if "PasswordFile" in parsed:
        if "username" not in kwargs:
            raise ConfigurationError(f"{named('PasswordFile')} needs {named('Username')}")
        kwargs["password"] = parsed["PasswordFile"]
    if "SatAuthFile" in parsed:
        if "PasswordFile" in parsed:
            raise ConfigurationError(f"give {named('SatAuthFile')} or {named('PasswordFile')}, not both")
        kwargs["sat_token_file"] = parsed["SatAuthFile"]
    cert, key = parsed.get("CertFile"), parsed.get("KeyFile")
    if (cert is None) != (key is None):
        raise ConfigurationError(f"{named('CertFile')} and {named('KeyFile')} go together (a client certificate)")
    if "KeyPasswordFile" in parsed and key is None:
        raise ConfigurationError(f"{named('KeyPasswordFile')} needs {named('KeyFile')}")
    tls_asked = {k for k in ("CaFile", "CertFile", "KeyFile", "KeyPasswordFile") if k in parsed}
    if parsed.get("UseTls", DEFAULT_USE_TLS):
        # TlsSettings' fields (settings.py builds it: this module does not import it, no import cycle)
        kwargs["tls"] = {
            "ca_file": parsed.get("CaFile"),
            "cert_file": cert,
            "key_file": key,
            "key_password": parsed.get("KeyPasswordFile"),
        }
    elif tls_asked:
        raise ConfigurationError(
            f"{', '.join(named(k) for k in sorted(tls_asked))} given with {named('UseTls')}=false (TLS is off)"
        )
    return kwargs


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``ConnectionSettings`` keyword arguments from the ``AIO_*`` variables (``os.environ`` by default).

    A variable set to the empty string counts as unset, as in the SDKs (a deployment template may leave one
    blank)."""
    env = os.environ if environ is None else environ
    values = {s: env[s.env] for s in SETTINGS if env.get(s.env)}
    return _settings_kwargs(values, lambda s: s.env)


def is_connection_string(text: str) -> bool:
    """Whether ``text`` looks like ``Key=value;...`` rather than a URL."""
    return "://" not in text and "=" in text


def from_connection_string(text: str) -> dict[str, Any]:
    """``ConnectionSettings`` keyword arguments from ``HostName=...;TcpPort=...;UseTls=...`` (keys as in the
    SDKs' table, case-insensitive; ``;``-separated; an empty segment, e.g. a trailing ``;``, is ignored)."""
    values: dict[_Setting, str] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        setting = _BY_KEY.get(key.strip().lower())
        if not sep or setting is None:
            known = ", ".join(s.key for s in SETTINGS)
            raise ConfigurationError(f"connection string: unknown setting {key.strip()!r:.40} (known: {known})")
        if setting in values:
            raise ConfigurationError(f"connection string: {setting.key} given twice")
        if value.strip():
            values[setting] = value.strip()
    return _settings_kwargs(values, lambda s: f"{s.key} (connection string)")
