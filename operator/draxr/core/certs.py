"""The webhook's own PKI, without cert-manager: a self-signed CA and a serving certificate it signs,
kept together in one Secret. Pure: the clock is passed in, the caller does the I/O.

Rotation keeps admission working throughout: a new CA enters the webhook's caBundle *before* any
replica serves a certificate it signed (the caller patches the bundle first, then writes the
Secret), and the previous CA stays in the bundle until it expires.
"""

from __future__ import annotations

import base64
import ipaddress
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CRT, CA_KEY, TLS_CRT, TLS_KEY, PREVIOUS_CA_CRT = "ca.crt", "ca.key", "tls.crt", "tls.key", "ca-previous.crt"
ROTATE_AT_REMAINING = 1 / 3  # renew when less than a third of the lifetime is left
_BACKDATE = timedelta(minutes=5)  # tolerate clock skew between the operator and the API server


@dataclass(frozen=True)
class Pki:
    """PEM bytes, as stored in the Secret (``data`` keys above)."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes
    previous_ca_crt: bytes = b""

    def to_secret_data(self) -> dict[str, str]:
        data = {CA_CRT: self.ca_crt, CA_KEY: self.ca_key, TLS_CRT: self.tls_crt, TLS_KEY: self.tls_key}
        if self.previous_ca_crt:
            data[PREVIOUS_CA_CRT] = self.previous_ca_crt
        return {k: base64.b64encode(v).decode() for k, v in data.items()}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> Pki | None:
        """None if the Secret lacks a key or holds something that does not parse as PEM."""
        if not data:
            return None
        try:
            raw = {k: base64.b64decode(v, validate=True) for k, v in data.items()}
            pki = cls(raw[CA_CRT], raw[CA_KEY], raw[TLS_CRT], raw[TLS_KEY], raw.get(PREVIOUS_CA_CRT, b""))
            x509.load_pem_x509_certificate(pki.ca_crt)
            x509.load_pem_x509_certificate(pki.tls_crt)
            serialization.load_pem_private_key(pki.ca_key, None)
            serialization.load_pem_private_key(pki.tls_key, None)
        except (KeyError, ValueError, TypeError):
            return None
        return pki


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(common_name: str, now: datetime, validity: timedelta) -> tuple[bytes, bytes]:
    """A distinct subject per CA (``name@unix-time.random``, as kube's self-signed CAs): during rotation
    two CAs sit in one bundle and verifiers look issuers up by subject."""
    key = _key()
    subject = f"{common_name}@{int(now.timestamp())}.{secrets.token_hex(3)}"
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def subject_alt_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    """IP addresses as IP SANs, everything else as DNS names."""
    out: list[x509.GeneralName] = []
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def new_serving(
    ca_crt: bytes, ca_key: bytes, hosts: list[str], now: datetime, validity: timedelta
) -> tuple[bytes, bytes]:
    ca = x509.load_pem_x509_certificate(ca_crt)
    signer = serialization.load_pem_private_key(ca_key, None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = _key()
    not_after = min(now + validity, ca.not_valid_after_utc)  # never outlive the issuer
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(subject_alt_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _renew_due(cert: x509.Certificate, now: datetime) -> bool:
    """Less than a third of the lifetime left (the lifetime asked for: not counting the backdating)."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    lifetime = max(end - start - _BACKDATE, timedelta(0))
    return now >= end - lifetime * ROTATE_AT_REMAINING


def _hosts_of(cert: x509.Certificate) -> set[str]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in sans.get_values_for_type(x509.IPAddress)} | set(sans.get_values_for_type(x509.DNSName))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True)
class Plan:
    pki: Pki
    why: str


def plan(
    current: Pki | None,
    hosts: list[str],
    now: datetime,
    ca_validity: timedelta,
    cert_validity: timedelta,
    common_name: str = "draxr-webhook-ca",
) -> Plan | None:
    """What to store next, or None if the current PKI is good: a new CA when there is none or it
    is due (the old one kept as previous), a new serving certificate when it is due, does not
    cover ``hosts`` or was not signed by the CA."""
    if current is None:
        ca_crt, ca_key = new_ca(common_name, now, ca_validity)
        return Plan(Pki(ca_crt, ca_key, *new_serving(ca_crt, ca_key, hosts, now, cert_validity)), "no certificate yet")
    ca = x509.load_pem_x509_certificate(current.ca_crt)
    if _renew_due(ca, now):
        ca_crt, ca_key = new_ca(common_name, now, ca_validity)
        tls = new_serving(ca_crt, ca_key, hosts, now, cert_validity)
        return Plan(Pki(ca_crt, ca_key, *tls, previous_ca_crt=current.ca_crt), "CA rotation due")
    tls_cert = x509.load_pem_x509_certificate(current.tls_crt)
    why = None
    if _renew_due(tls_cert, now):
        why = "serving certificate rotation due"
    elif not set(hosts) <= _hosts_of(tls_cert):
        why = "serving certificate does not cover the webhook's host names"
    elif not _signed_by(tls_cert, ca):
        why = "serving certificate not signed by the CA"
    if why is None:
        return None
    tls = new_serving(current.ca_crt, current.ca_key, hosts, now, cert_validity)
    return Plan(Pki(current.ca_crt, current.ca_key, *tls, previous_ca_crt=current.previous_ca_crt), why)


def ca_bundle(pki: Pki, now: datetime) -> bytes:
    """What the webhook configuration trusts: the CA, plus the previous one while it is valid (a
    replica may still serve a certificate it signed)."""
    bundle = pki.ca_crt
    if pki.previous_ca_crt:
        try:
            previous = x509.load_pem_x509_certificate(pki.previous_ca_crt)
        except ValueError:
            return bundle
        if previous.not_valid_after_utc > now:
            bundle += pki.previous_ca_crt
    return bundle


def not_after(pem: bytes) -> datetime:
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc
