"""Throwaway X.509 material for the security tests, generated with ``cryptography``.

Two unrelated CAs; the first signs a server certificate for ``127.0.0.1``/``localhost`` (SAN IP and DNS),
a client certificate (CN = the username the X.509 listener takes from it), and a server certificate for a
name the tests never dial (hostname-mismatch test). EC P-256 keys: fast to generate.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertFiles", "Pki", "make_pki"]


@dataclass(frozen=True)
class CertFiles:
    cert: str
    key: str


@dataclass(frozen=True)
class Pki:
    ca: str  #: CA certificate (PEM) that signed ``server``, ``client`` and ``wrong_name``
    server: CertFiles  #: for 127.0.0.1 and localhost
    client: CertFiles  #: CN = ``client_cn``
    client_cn: str
    wrong_name: CertFiles  #: signed by ``ca``, but only for ``not-this-host.invalid``
    other_ca: str  #: an unrelated CA
    other_server: CertFiles  #: for 127.0.0.1/localhost, signed by ``other_ca``


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sskv tests"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None) -> CertFiles:
    cert_path = directory / f"{stem}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = directory / f"{stem}.key"
    if key is not None:
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        key_path.chmod(0o600)
    return CertFiles(str(cert_path), str(key_path))


def _issue(
    subject: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    issuer_name = _name(subject) if issuer is None else issuer[0].subject
    signing_key = key if issuer is None else issuer[1]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        assert issuer is not None
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), critical=False
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signing_key, hashes.SHA256()), key


def make_pki(directory: Path, client_cn: str = "x509-test-user") -> Pki:
    """Write every certificate and key of :class:`Pki` into ``directory``."""
    loopback: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    ca = _issue("sskv test CA", None, ca=True)
    other_ca = _issue("sskv unrelated CA", None, ca=True)
    server = _issue("127.0.0.1", ca, sans=loopback, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    client = _issue(client_cn, ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    wrong = _issue(
        "not-this-host.invalid",
        ca,
        sans=[x509.DNSName("not-this-host.invalid")],
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    other_server = _issue("127.0.0.1", other_ca, sans=loopback, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    return Pki(
        ca=_write(directory, "ca", ca[0], None).cert,
        server=_write(directory, "server", *server),
        client=_write(directory, "client", *client),
        client_cn=client_cn,
        wrong_name=_write(directory, "wrong-name", *wrong),
        other_ca=_write(directory, "other-ca", other_ca[0], None).cert,
        other_server=_write(directory, "other-server", *other_server),
    )
