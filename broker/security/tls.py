"""TLS contexts for the broker's listeners and its inter-broker sessions, and a throwaway CA for local clusters.

Why one client context per broker: every aiohttp session a broker opens (replica fetchers, forwarded produces and
reads, group and consumer-instance calls, controlled shutdown) must trust the same CA and present the same
certificate, so the broker's principal is the same whichever path a request took. ``client_context`` is built
once in server.py and handed to every ``TCPConnector``.

``make_local_pki`` exists for ``odradek cluster up --tls`` and the tests: a CA and certificates valid for
127.0.0.1/localhost, written to a directory the caller owns (never into the repository).
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import Any

from broker.security.settings import SecuritySettings

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(settings: SecuritySettings) -> ssl.SSLContext:
    """The listeners' context: our certificate, and client certificates checked per ``ssl_client_auth``."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert settings.ssl_certfile and settings.ssl_keyfile
    ctx.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
    ctx.verify_mode = _CLIENT_AUTH[settings.ssl_client_auth]
    if settings.ssl_cafile:
        ctx.load_verify_locations(settings.ssl_cafile)
    return ctx


def client_context(cafile: str | None, certfile: str | None = None, keyfile: str | None = None) -> ssl.SSLContext:
    """A context that verifies brokers against ``cafile`` (hostname too) and presents our certificate if any."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile:
        ctx.load_cert_chain(certfile, keyfile)
    return ctx


def broker_client_context(settings: SecuritySettings) -> ssl.SSLContext | None:
    """What the broker's sessions use to reach other brokers: None on a plaintext cluster."""
    if not settings.secured:
        return None
    return client_context(settings.ssl_cafile, settings.ssl_certfile, settings.ssl_keyfile)


def peer_principal(peercert: dict[str, Any] | None) -> str | None:
    """Kafka's default SSL principal: ``User:`` and the certificate's subject (``CN=alice`` for ours).

    RDNs are written most specific first, as Java's ``X500Principal.getName()`` does (``CN=a,OU=b,O=c``).
    """
    if not peercert or not peercert.get("subject"):
        return None
    parts = [f"{k_v[0]}={k_v[1]}" for rdn in reversed(peercert["subject"]) for k_v in rdn]
    short = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST"}
    names = []
    for part in parts:
        key, _, value = part.partition("=")
        names.append(f"{short.get(key, key)}={value}")
    return "User:" + ",".join(names)


# ----------------------------------------------------------------------------------------- throwaway PKI


def make_local_pki(directory: Path, names: list[str], *, days: int = 30) -> dict[str, tuple[Path, Path]]:
    """A CA (``ca.pem``, ``ca.key``) and one certificate per name (``<name>.pem``, ``<name>.key``), subject
    ``CN=<name>``, valid for 127.0.0.1 and localhost; returns ``{name: (cert, key)}``. Keys are written 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "odradek-local-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    _write(directory / "ca.pem", directory / "ca.key", ca, ca_key)
    return {name: issue_certificate(directory, name, days=days) for name in names}


def issue_certificate(directory: Path, name: str, *, days: int = 30) -> tuple[Path, Path]:
    """``<name>.pem``/``<name>.key`` signed by the CA in ``directory`` (a broker's, or a user's for mutual TLS)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    _write(cert_path, key_path, cert, key)
    return cert_path, key_path


def _write(cert_path: Path, key_path: Path, cert: Any, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.unlink(missing_ok=True)
    key_path.touch(mode=0o600)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
