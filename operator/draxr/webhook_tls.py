"""The webhook's serving certificate: the leader creates and rotates it in a Secret and keeps the
MutatingWebhookConfiguration's caBundle current; every replica loads it from the Secret."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from draxr import logs, metrics
from draxr.core import certs
from draxr.kube import JSON_PATCH, ApiException, Kube, Resource
from draxr.loops import GuardedLoop, sleeper
from draxr.settings import Settings
from draxr.tls_context import load_chain, server_context

log = logs.get("draxr.webhook")

SECRETS = Resource("", "v1", "secrets", True)
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False)


def _now() -> datetime:
    return datetime.now(UTC)


class CertKeeper:
    def __init__(self, kube: Kube, settings: Settings, clock: Callable[[], datetime] = _now) -> None:
        self.kube = kube
        self.settings = settings
        self.clock = clock
        self.ssl = server_context()
        self.loaded = asyncio.Event()  # a certificate is in self.ssl: the server may start
        self._serving: bytes = b""
        self.current: tuple[bytes, bytes] | None = None  # (tls.crt, tls.key) being served
        self._expiry = 0.0  # notAfter of the served certificate, unix seconds
        # Where a new certificate goes: into ``self.ssl`` here; a server that runs set it (its thread
        # loads into the context itself, so that no handshake runs concurrently with a change; its
        # process gets the PEMs sent).
        self.deliver: Callable[[bytes, bytes], None] = self.load_here
        self._missing_config_logged = False

    # ---- every replica ------------------------------------------------------------------------------
    async def _secret(self) -> dict[str, Any] | None:
        s = self.settings
        try:
            return await self.kube.get(SECRETS, s.webhook_secret_name, s.webhook_namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def _read(self) -> tuple[certs.Pki | None, dict[str, Any] | None]:
        secret = await self._secret()
        return (certs.Pki.from_secret_data(secret.get("data")) if secret else None), secret

    def _load(self, tls_crt: bytes, tls_key: bytes) -> None:
        if tls_crt == self._serving:
            self._publish_expiry()  # (again at every check: cheap, and current whoever set it last)
            return
        self.deliver(tls_crt, tls_key)
        first = not self._serving
        self._serving = tls_crt
        self.current = (tls_crt, tls_key)
        self._expiry = certs.not_after(tls_crt).timestamp()
        self._publish_expiry()
        self.loaded.set()
        log.info(
            "webhook serving certificate loaded" if first else "webhook serving certificate reloaded",
            not_after=certs.not_after(tls_crt).isoformat(),
        )

    def load_here(self, tls_crt: bytes, tls_key: bytes) -> None:
        load_chain(self.ssl, tls_crt, tls_key)

    def _publish_expiry(self) -> None:
        metrics.WEBHOOK_CERT_EXPIRY.labels(secret=self.settings.webhook_secret_name).set(self._expiry)

    async def reload_once(self) -> None:
        """Only tls.crt and tls.key are needed here, so a Secret written by cert-manager works too."""
        data = ((await self._secret()) or {}).get("data") or {}
        if certs.TLS_CRT in data and certs.TLS_KEY in data:
            self._load(base64.b64decode(data[certs.TLS_CRT]), base64.b64decode(data[certs.TLS_KEY]))

    async def reload_loop(self) -> None:
        """Every check interval; until a first certificate is loaded, every second (doubling up to the
        interval): a replica that started before the leader wrote the Secret serves soon after it."""
        waiting = 1.0

        def interval() -> float:
            nonlocal waiting
            every = self.settings.webhook_cert_check_seconds
            if self.loaded.is_set():
                return every
            wait, waiting = min(every, waiting), waiting * 2
            return wait

        await GuardedLoop("webhook-cert-reload").run(self.reload_once, sleeper(interval))

    # ---- the leader ------------------------------------------------------------------------------------
    async def ensure_once(self) -> None:
        """Create or rotate the PKI if due; keep the caBundle current. The bundle is patched before
        the Secret is written, so no replica ever serves a certificate the API server distrusts."""
        s = self.settings
        pki, secret = await self._read()
        now = self.clock()
        planned = certs.plan(
            pki,
            s.webhook_hosts,
            now,
            timedelta(seconds=s.webhook_ca_validity_seconds),
            timedelta(seconds=s.webhook_cert_validity_seconds),
        )
        if planned is not None:
            # A new CA: trust it alongside the old one, and let API servers see that, before anyone serves it.
            rotating = pki is not None and planned.pki.ca_crt != pki.ca_crt
            overlap = certs.ca_bundle(planned.pki, now) + (_unless_in(pki.ca_crt, planned.pki) if pki else b"")
            if rotating and await self._patch_bundle(overlap):
                await asyncio.sleep(s.webhook_rotation_grace_seconds)
            await self._write(planned.pki, secret)
            log.info(
                "webhook certificate written",
                why=planned.why,
                secret=f"{s.webhook_namespace}/{s.webhook_secret_name}",
                not_after=certs.not_after(planned.pki.tls_crt).isoformat(),
            )
            pki = planned.pki
        assert pki is not None
        await self._patch_bundle(certs.ca_bundle(pki, now))
        self._load(pki.tls_crt, pki.tls_key)

    async def ensure_loop(self) -> None:
        pause = sleeper(lambda: self.settings.webhook_cert_check_seconds)
        await GuardedLoop("webhook-cert-upkeep").run(self.ensure_once, pause)

    async def _write(self, pki: certs.Pki, secret: dict[str, Any] | None) -> None:
        s = self.settings
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": s.webhook_secret_name,
                "namespace": s.webhook_namespace,
                "labels": {"app.kubernetes.io/name": "draxr", "app.kubernetes.io/component": "webhook"},
            },
            "data": pki.to_secret_data(),
        }
        if secret is None:
            await self.kube.create(SECRETS, body, s.webhook_namespace)
        else:  # resourceVersion: a concurrent writer makes this fail (409) and the next pass re-reads
            body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
            await self.kube.replace(SECRETS, body, s.webhook_namespace)

    async def _patch_bundle(self, bundle: bytes) -> bool:
        """True if the bundle changed."""
        name = self.settings.webhook_configuration_name
        try:
            config = await self.kube.get(MUTATING_WEBHOOKS, name)
        except ApiException as e:
            if e.status != 404:
                raise
            if not self._missing_config_logged:
                log.info("no MutatingWebhookConfiguration to keep the caBundle of", name=name)
                self._missing_config_logged = True
            return False
        self._missing_config_logged = False
        encoded = base64.b64encode(bundle).decode()
        ops: list[dict[str, Any]] = []
        for i, hook in enumerate(config.get("webhooks") or ()):
            if (hook.get("clientConfig") or {}).get("caBundle") != encoded:
                ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": encoded})
        if not ops:
            return False
        rv = config["metadata"]["resourceVersion"]
        await self.kube.patch(
            MUTATING_WEBHOOKS,
            name,
            [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, *ops],
            content_type=JSON_PATCH,
        )
        log.info("webhook caBundle updated", configuration=name, webhooks=len(ops))
        return True


def _unless_in(ca_crt: bytes, pki: certs.Pki) -> bytes:
    """The CA in use now, if the planned PKI does not already trust it."""
    return b"" if ca_crt in (pki.ca_crt, pki.previous_ca_crt) else ca_crt
