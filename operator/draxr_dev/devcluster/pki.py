"""Certificates for a loopback control plane: one CA, the apiserver serving cert, client certs, SA keys."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from draxr.core.certs import subject_alt_names

_VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def client_crt(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


_SERVING_HOSTS = ("localhost", "127.0.0.1")


def _leaf(
    directory: Path,
    stem: str,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    san: list[x509.GeneralName],
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
) -> tuple[Path, Path]:
    """Write ``<stem>.crt`` and ``<stem>.key`` into ``directory``, signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(subject, ca_name, key.public_key()).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    crt, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    _write_key(key_path, key)
    _write_cert(crt, builder.sign(ca_key, hashes.SHA256()))
    return crt, key_path


def issue_serving_cert(
    pki: Pki, into: Path, stem: str, cn: str, hosts: tuple[str, ...] = _SERVING_HOSTS
) -> tuple[Path, Path]:
    """Another serving certificate from the control plane's CA (a test proxy in front of the API
    server), so that clients trusting ``ca.crt`` accept it. Returns (cert, key) paths in ``into``."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"unexpected CA key type {type(ca_key).__name__}")
    ca_name = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes()).subject
    return _leaf(into, stem, _name(cn), ExtendedKeyUsageOID.SERVER_AUTH, subject_alt_names(hosts), ca_key, ca_name)


def make_pki(directory: Path, clients: dict[str, tuple[str, str | None]]) -> Pki:
    """Write a CA, an apiserver serving cert for 127.0.0.1/localhost, the SA key pair and one client
    cert per entry of ``clients`` (file stem -> (common name, organization))."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki = Pki(directory)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("draxr-dev-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_crt, ca_cert)

    hosts = ("localhost", "kubernetes", "kubernetes.default.svc", "127.0.0.1")
    _leaf(
        directory,
        "apiserver",
        _name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        subject_alt_names(hosts),
        ca_key,
        ca_name,
    )
    for stem, (cn, org) in clients.items():
        _leaf(directory, stem, _name(cn, org), ExtendedKeyUsageOID.CLIENT_AUTH, [], ca_key, ca_name)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki
