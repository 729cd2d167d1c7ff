"""The webhook PKI: creation, rotation plan, bundle overlap, Secret round trip, and a real TLS handshake."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from prometheus_client import REGISTRY

from draxr import metrics
from draxr.core import certs
from draxr.settings import Settings
from draxr.webhook_tls import CertKeeper

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOSTS = ["draxr-webhook.draxr-system.svc", "127.0.0.1"]
CA_LIFE, CERT_LIFE = timedelta(days=300), timedelta(days=30)


def fresh() -> certs.Pki:
    planned = certs.plan(None, HOSTS, NOW, CA_LIFE, CERT_LIFE)
    assert planned is not None
    return planned.pki


def test_new_pki_is_a_ca_signing_a_serving_cert_for_the_hosts() -> None:
    pki = fresh()
    ca = x509.load_pem_x509_certificate(pki.ca_crt)
    tls = x509.load_pem_x509_certificate(pki.tls_crt)
    tls.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = tls.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["draxr-webhook.draxr-system.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert tls.not_valid_after_utc == NOW + CERT_LIFE


def test_nothing_to_do_while_fresh() -> None:
    pki = fresh()
    assert certs.plan(pki, HOSTS, NOW + CERT_LIFE / 2, CA_LIFE, CERT_LIFE) is None


def test_serving_cert_renewed_under_the_same_ca_when_two_thirds_used() -> None:
    pki = fresh()
    planned = certs.plan(pki, HOSTS, NOW + CERT_LIFE * 0.7, CA_LIFE, CERT_LIFE)
    assert planned is not None
    assert "serving" in planned.why
    assert planned.pki.ca_crt == pki.ca_crt
    assert planned.pki.tls_crt != pki.tls_crt
    assert certs.ca_bundle(planned.pki, NOW) == certs.ca_bundle(pki, NOW)  # no caBundle change needed


def test_ca_rotation_keeps_the_old_ca_in_the_bundle_until_it_expires() -> None:
    pki = fresh()
    later = NOW + CA_LIFE * 0.7
    planned = certs.plan(pki, HOSTS, later, CA_LIFE, CERT_LIFE)
    assert planned is not None
    assert "CA" in planned.why
    assert planned.pki.ca_crt != pki.ca_crt
    assert planned.pki.previous_ca_crt == pki.ca_crt
    x509.load_pem_x509_certificate(planned.pki.tls_crt).verify_directly_issued_by(
        x509.load_pem_x509_certificate(planned.pki.ca_crt)
    )
    assert certs.ca_bundle(planned.pki, later) == planned.pki.ca_crt + pki.ca_crt
    assert certs.ca_bundle(planned.pki, NOW + CA_LIFE + timedelta(seconds=1)) == planned.pki.ca_crt


def test_new_hosts_or_a_foreign_serving_cert_get_a_new_serving_cert() -> None:
    pki = fresh()
    planned = certs.plan(pki, [*HOSTS, "draxr.example"], NOW, CA_LIFE, CERT_LIFE)
    assert planned is not None
    assert "host names" in planned.why
    other = fresh()
    mixed = certs.Pki(pki.ca_crt, pki.ca_key, other.tls_crt, other.tls_key)
    planned = certs.plan(mixed, HOSTS, NOW, CA_LIFE, CERT_LIFE)
    assert planned is not None
    assert "not signed" in planned.why


def test_serving_cert_never_outlives_its_ca() -> None:
    pki = fresh()
    crt, _ = certs.new_serving(pki.ca_crt, pki.ca_key, HOSTS, NOW, CA_LIFE * 2)
    assert x509.load_pem_x509_certificate(crt).not_valid_after_utc == NOW + CA_LIFE


def test_secret_round_trip_and_corrupt_data() -> None:
    pki = fresh()
    data = pki.to_secret_data()
    assert certs.Pki.from_secret_data(data) == pki
    assert certs.Pki.from_secret_data(None) is None
    assert certs.Pki.from_secret_data({k: v for k, v in data.items() if k != certs.TLS_KEY}) is None
    assert certs.Pki.from_secret_data({**data, certs.TLS_CRT: "bm90IGEgY2VydA=="}) is None  # "not a cert"
    assert certs.Pki.from_secret_data({**data, certs.CA_KEY: "!!"}) is None


def _write(tmp: Path, pkis: dict[str, certs.Pki]) -> None:
    for name, pki in pkis.items():
        (tmp / f"{name}.crt").write_bytes(pki.tls_crt)
        (tmp / f"{name}.key").write_bytes(pki.tls_key)


async def test_a_client_trusting_the_bundle_completes_a_handshake() -> None:
    """What the API server does: verify the serving certificate against caBundle, for 127.0.0.1."""
    now = datetime.now(UTC)
    first = certs.plan(None, HOSTS, now - CA_LIFE * 0.7, CA_LIFE, CA_LIFE)
    assert first is not None
    old = first.pki
    rotated = certs.plan(old, HOSTS, now, CA_LIFE, CERT_LIFE)
    assert rotated is not None
    with tempfile.TemporaryDirectory() as tmp:
        await asyncio.to_thread(_write, Path(tmp), {"old": old, "new": rotated.pki})
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(Path(tmp, "old.crt"), Path(tmp, "old.key"))
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        bundle = certs.ca_bundle(rotated.pki, now).decode()

        async def handshake(cadata: str) -> bool:
            client = ssl.create_default_context(cadata=cadata)
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
            except ssl.SSLCertVerificationError:
                return False
            w.close()
            return True

        async with server:
            assert await handshake(bundle)  # old serving cert, trusted through the previous CA
            server_ctx.load_cert_chain(Path(tmp, "new.crt"), Path(tmp, "new.key"))  # reload in place
            assert await handshake(bundle)
            assert not await handshake(old.ca_crt.decode())  # the new cert is not trusted by the old CA


def test_short_lifetimes_rotate_at_two_thirds_not_at_once() -> None:
    """The 5-minute backdating must not count as lifetime used (a 15 s CA was renewed every pass)."""
    life = timedelta(seconds=15)
    planned = certs.plan(None, HOSTS, NOW, life, life)
    assert planned is not None
    assert certs.plan(planned.pki, HOSTS, NOW + timedelta(seconds=9), life, life) is None
    assert certs.plan(planned.pki, HOSTS, NOW + timedelta(seconds=11), life, life) is not None


def test_cas_made_in_the_same_second_have_distinct_subjects() -> None:
    a, _ = certs.new_ca("x", NOW, CA_LIFE)
    b, _ = certs.new_ca("x", NOW, CA_LIFE)
    assert x509.load_pem_x509_certificate(a).subject != x509.load_pem_x509_certificate(b).subject


async def test_served_certificate_expiry_is_exported() -> None:
    """draxr_webhook_certificate_expiration_timestamp_seconds{secret}: the notAfter of the certificate
    the replica loaded from the Secret; a renewed one replaces it; set again at every check."""

    class _Secrets:
        def __init__(self) -> None:
            self.data: dict[str, str] = {}

        async def get(self, *_: object) -> dict[str, object]:
            return {"data": self.data}

        def holds(self, pki: certs.Pki) -> None:
            self.data = {certs.TLS_CRT: _b64(pki.tls_crt), certs.TLS_KEY: _b64(pki.tls_key)}

    def value() -> float | None:
        return REGISTRY.get_sample_value(
            "draxr_webhook_certificate_expiration_timestamp_seconds", {"secret": "unit-webhook-tls"}
        )

    kube = _Secrets()
    keeper = CertKeeper(kube, Settings(webhook_secret_name="unit-webhook-tls"))  # type: ignore[arg-type]
    first = fresh()
    kube.holds(first)
    await keeper.reload_once()
    assert value() == (NOW + CERT_LIFE).timestamp()
    renewed = certs.plan(first, HOSTS, NOW + CERT_LIFE * 0.7, CA_LIFE, CERT_LIFE)
    assert renewed is not None
    kube.holds(renewed.pki)
    await keeper.reload_once()
    later = certs.not_after(renewed.pki.tls_crt).timestamp()
    assert later > (NOW + CERT_LIFE).timestamp()
    assert value() == later
    metrics.WEBHOOK_CERT_EXPIRY.labels(secret="unit-webhook-tls").set(0)  # another keeper, say
    await keeper.reload_once()
    assert value() == later


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_replica_started_before_the_secret_loads_the_first_certificate_soon(monkeypatch: Any) -> None:
    """Until a first certificate is loaded the Secret is read again after 1, 2, 4 ... seconds (not the
    60 s check interval): a standby that started before the leader wrote the Secret serves soon after
    it. Once loaded, the check interval applies."""
    pki = fresh()
    reads = 0

    class _LateSecret:
        async def get(self, *_: object) -> dict[str, object]:
            nonlocal reads
            reads += 1
            if reads <= 4:  # the leader has not written it yet
                return {"data": {}}
            return {"data": {certs.TLS_CRT: _b64(pki.tls_crt), certs.TLS_KEY: _b64(pki.tls_key)}}

    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 7:
            raise asyncio.CancelledError
        await real_sleep(0)

    keeper = CertKeeper(_LateSecret(), Settings(webhook_cert_check_seconds=10))  # type: ignore[arg-type]
    monkeypatch.setattr(asyncio, "sleep", recording_sleep)
    with contextlib.suppress(asyncio.CancelledError):
        await keeper.reload_loop()
    assert keeper.loaded.is_set()
    assert keeper.current == (pki.tls_crt, pki.tls_key)
    assert slept == [1, 2, 4, 8, 10, 10, 10]  # four reads without it, then the check interval
