"""Every connection option an adapter accepts reaches the settings: none is accepted and then dropped."""

from __future__ import annotations

from typing import Any

import pytest

from sskv_mapping import ConfigurationError
from sskv_mapping._transport.settings import CONNECTION_OPTIONS, ConnectionSettings, settings_from_options

#: a value for each option that differs from its default, and what the settings then hold
EXAMPLES: dict[str, tuple[Any, Any]] = {
    "client_id": ("adapter-1", "adapter-1"),
    "username": ("alice", "alice"),
    "password": ("s3cret", "s3cret"),
    "sat_token_file": ("/var/run/token", "/var/run/token"),
    "keepalive": (25, 25),
    "connect_timeout": (2.5, 2.5),
    "trace_context": (False, False),
    "clean_start": (True, True),
    "session_expiry": (0, 0),
    "sat_poll_interval": (1.5, 1.5),
}


def test_every_option_but_tls_and_the_token_provider_has_an_example() -> None:
    assert set(EXAMPLES) == set(CONNECTION_OPTIONS) - {"tls", "sat_token_provider"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_an_adapter_option_reaches_the_settings(name: str) -> None:
    value, expected = EXAMPLES[name]
    base = {"username": "bob"} if name == "password" else {}  # a password needs a user name
    default = settings_from_options("mqtt://127.0.0.1:1883", base)
    settings = settings_from_options("mqtt://127.0.0.1:1883", {**base, name: value})
    assert isinstance(settings, ConnectionSettings)
    assert getattr(settings, name) == expected
    assert getattr(default, name) != expected  # the option did it, not the default


def test_tls_as_a_dict_of_its_fields() -> None:
    settings = settings_from_options("mqtt://127.0.0.1:8883", {"tls": {"verify": False}})
    assert settings.tls is not None and settings.tls.verify is False


def test_a_tls_dict_with_an_unknown_field_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="insecure"):
        settings_from_options("mqtt://127.0.0.1:8883", {"tls": {"insecure": True}})
