"""Keys and X.509 certificates, one small builder over `cryptography` for every place that needs them.

Three do: the daemon's visibility API serves HTTPS with a self-signed certificate when none is given
(visibility/server.py); the test control plane makes its CA, the API server's serving
certificate and the aggregation layer's front proxy (sim/controlplane.py); the simulated API server's
aggregation layer makes a front proxy of its own (sim/aggregation.py). Certificates are valid from an
hour ago (clock skew) for `days`; a CA is marked as one; a client certificate carries the client-auth
usage; `names` become subject alternative names (IP addresses where they parse as one). `cryptography` is
imported on first use, so that a daemon without the visibility API never loads it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

    PrivateKey = EllipticCurvePrivateKey | RSAPrivateKey


def new_key(kind: Literal["ec", "rsa"] = "ec") -> PrivateKey:
    """A P-256 key, or RSA 2048 where a consumer wants RSA (a service-account signing key)."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def certificate(
    subject: str,
    key: PrivateKey,
    *,
    issuer: x509.Certificate | None = None,
    issuer_key: PrivateKey | None = None,
    ca: bool = False,
    client: bool = False,
    names: Iterable[str] = (),
    days: int = 30,
) -> x509.Certificate:
    """A certificate for `key` named `subject`, signed by `issuer_key` (self-signed without an issuer)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=days))
    )
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    if client:
        usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
        builder = builder.add_extension(usage, critical=False)
    alternative: list[x509.GeneralName] = []
    for entry in names:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            alternative.append(x509.DNSName(entry))
    if alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    return builder.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())


def pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def pem_key(key: PrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write(
    folder: Path, stem: str, cert: x509.Certificate, key: PrivateKey | None = None
) -> tuple[Path, Path]:
    """`stem.crt` (and `stem.key` when a key is given) in `folder`; both paths."""
    cert_file, key_file = folder / f"{stem}.crt", folder / f"{stem}.key"
    cert_file.write_bytes(pem(cert))
    if key is not None:
        key_file.write_bytes(pem_key(key))
    return cert_file, key_file
