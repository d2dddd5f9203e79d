"""What both transports need to open a connection: the TLS context, the server name, the K8S-SAT token."""

from __future__ import annotations

import ssl
from typing import Any

from ..errors import ConfigurationError
from .settings import ConnectionSettings

__all__ = ["server_name", "ssl_context"]


class _NamedServerContext(ssl.SSLContext):
    """A client context that checks (and sends as SNI) ``expected_hostname`` instead of the host dialled.

    paho passes the host it connects to as ``server_hostname``; behind a port-forward or a load balancer the
    broker's certificate names another host (e.g. ``aio-broker`` while dialling ``127.0.0.1``). asyncio's
    transport is given :func:`server_name` directly.
    """

    expected_hostname: str = ""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        kwargs["server_hostname"] = self.expected_hostname
        return super().wrap_socket(sock, *args, **kwargs)


def ssl_context(settings: ConnectionSettings) -> ssl.SSLContext | None:
    """The client TLS context (``None`` without TLS); unreadable files are a :class:`ConfigurationError`."""
    tls = settings.tls
    if tls is None:
        return None
    try:
        ctx: ssl.SSLContext
        if tls.server_hostname:
            named = _NamedServerContext(ssl.PROTOCOL_TLS_CLIENT)  # what create_default_context() sets up, plus:
            named.expected_hostname = tls.server_hostname
            if tls.ca_file:
                named.load_verify_locations(cafile=tls.ca_file)
            else:
                named.load_default_certs(ssl.Purpose.SERVER_AUTH)
            ctx = named
        else:
            ctx = ssl.create_default_context(cafile=tls.ca_file)
        if tls.cert_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"TLS settings could not be loaded: {exc}") from None
    if not tls.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def server_name(settings: ConnectionSettings) -> str | None:
    """The name the broker's certificate must carry (and the SNI): ``tls.server_hostname`` or the host."""
    if settings.tls is None:
        return None
    return settings.tls.server_hostname or settings.host
