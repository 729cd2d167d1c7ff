"""The admission webhook on a real control plane: kube-apiserver calls draxr over loopback TLS.

The session operator (conftest) serves the webhook on 127.0.0.1 with the manifests'
MutatingWebhookConfiguration pointed at it by url, its certificate made and kept by the operator
itself under the ServiceAccount's least-privilege RBAC.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509
from prometheus_client import REGISTRY

from draxr.app import Operator, webhook_server
from draxr.core import certs
from draxr.core.steering import STEERED_ANNOTATION
from draxr.kube import JSON_PATCH, NAMESPACES, PODS, RESOURCE_CLAIMS, Kube, Resource
from draxr.settings import Settings
from draxr.webhook import WebhookServer
from draxr.webhook_proc import WebhookProcess
from draxr.webhook_tls import MUTATING_WEBHOOKS, SECRETS, CertKeeper
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane, free_port

from . import manifests
from .clusters import service_account_dir
from .helpers import Draxr, eventually

DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
JOBS = Resource("batch", "v1", "jobs", True)
CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", True)
ENABLED = {"draxr.io/enabled": "true"}


async def mapped(op: Operator, fleet: fakedriver.Fleet) -> str:
    """The fleet's extended resource name, once the operator's warm view maps it."""
    [resource] = [r for r in fleet.classes.values() if r]

    async def known() -> bool:
        return resource in op.state.mapping

    await eventually(known, timeout=30)
    return resource


@contextlib.asynccontextmanager
async def labelled_namespace(kube: Kube, name: str, labels: dict[str, str]) -> AsyncIterator[str]:
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    try:
        yield name
    finally:
        await kube.delete_if_exists(NAMESPACES, name)


def workload_pod_spec(resource: str, **spec: Any) -> dict[str, Any]:
    return {
        "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": {"limits": {resource: "1"}}}],
        **spec,
    }


def deployment(name: str, resource: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": workload_pod_spec(resource)},
        },
    }


def job(name: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {RUN_FOR_ANNOTATION: "2s"}},
                "spec": workload_pod_spec(resource, restartPolicy="Never"),
            },
        },
    }


def bare_pod(name: str, resources: dict[str, str], **extra: Any) -> dict[str, Any]:
    labels = extra.pop("labels", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": {"limits": resources}}],
            **extra,
        },
    }


async def pods_of(kube: Kube, namespace: str, app: str, count: int) -> list[dict[str, Any]]:
    async def listed() -> list[dict[str, Any]] | None:
        items = await kube.list(PODS, namespace, labelSelector=f"app={app}")
        return items if len(items) >= count else None

    result: list[dict[str, Any]] = await eventually(listed, timeout=60)
    return result


def steered(p: dict[str, Any]) -> bool:
    return p["spec"].get("schedulerName") == "draxr" and STEERED_ANNOTATION in (p["metadata"].get("annotations") or {})


@dataclass
class OwnWebhook:
    namespace: str
    keeper: CertKeeper
    server: WebhookServer | WebhookProcess


def own_webhook_config(control_plane: ControlPlane, name: str, port: int, label: str) -> dict[str, Any]:
    """The manifests' MutatingWebhookConfiguration as ``name``, calling 127.0.0.1:``port`` by url,
    for the namespaces labelled ``label``=true only."""
    config = copy.deepcopy(
        next(
            d
            for d in yaml.safe_load_all(manifests.rendered(control_plane, ""))
            if d and d["kind"] == "MutatingWebhookConfiguration"
        )
    )
    config["metadata"] = {"name": name}
    config["webhooks"][0]["clientConfig"] = {"url": manifests.webhook_url(port)}
    config["webhooks"][0]["namespaceSelector"] = {"matchLabels": {label: "true"}}
    return config  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def own_webhook(
    kube: Kube, control_plane: ControlPlane, op: Operator, names: str, resource: str, **settings: Any
) -> AsyncIterator[OwnWebhook]:
    """A second webhook beside the session's: its own MutatingWebhookConfiguration (the manifests'
    one, pointed at a free port by url), namespace label, namespace, Secret and certificate (kept by
    its own CertKeeper), answering from ``op``'s mapping; yielded once the API server calls it and
    trusts its CA (a dry-run pod in its namespace comes out with its scheduler name)."""
    label = f"own.draxr.io/{names}"
    port = free_port()
    config = own_webhook_config(control_plane, names, port, label)
    await kube.create(MUTATING_WEBHOOKS, config)
    try:
        async with labelled_namespace(kube, f"{names}-own", {label: "true"}) as ns:
            s = Settings(
                **{
                    "bind_address": "127.0.0.1",
                    "webhook_port": port,
                    "webhook_namespace": ns,
                    "webhook_secret_name": names,
                    "webhook_configuration_name": names,
                    "webhook_extra_hosts": "127.0.0.1",
                    "log_format": "console",
                    **settings,
                }
            )
            keeper = CertKeeper(kube, s)
            server = webhook_server(keeper, s, lambda: op.state.mapping)
            tasks = [asyncio.create_task(keeper.ensure_loop()), asyncio.create_task(server.serve())]
            try:
                await asyncio.wait_for(keeper.loaded.wait(), 30)

                async def called_and_trusted() -> bool:
                    probe = await dry_run(kube, ns, bare_pod("probe", {resource: "1"}))
                    return probe["spec"].get("schedulerName") == s.scheduler_name

                await eventually(called_and_trusted, timeout=30)
                yield OwnWebhook(ns, keeper, server)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await kube.delete_if_exists(MUTATING_WEBHOOKS, names)


async def test_unmodified_deployment_and_job_run_on_dra_in_an_opted_in_namespace(
    kube: Kube, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    resource = await mapped(webhook_ready, fleet)
    [cls] = fleet.classes
    async with labelled_namespace(kube, f"{names}-on", ENABLED) as ns:
        await kube.create(DEPLOYMENTS, deployment("web", resource), ns)
        await kube.create(JOBS, job("train", resource), ns)

        async def bound(app: str, count: int) -> list[dict[str, Any]] | None:
            items = await kube.list(PODS, ns, labelSelector=f"app={app}")
            done = [
                p
                for p in items
                if p["spec"].get("nodeName")
                and (p.get("status") or {}).get("extendedResourceClaimStatus", {}).get("resourceClaimName")
            ]
            return done if len(done) >= count else None

        web = await eventually(lambda: bound("web", 2), timeout=90)
        for p in web:
            assert steered(p), p["metadata"]
            note = p["metadata"]["annotations"][STEERED_ANNOTATION]
            assert f"{resource} -> DeviceClass {cls} (explicit)" in note
            assert p["spec"]["nodeName"] in fleet.node_names()
            claim_name = p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            claim = await kube.get(RESOURCE_CLAIMS, claim_name, ns)
            assert claim["status"]["allocation"]["devices"]["results"][0]["driver"] == fleet.driver
            assert claim["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]
        # The manifests themselves are untouched: only the pods were steered.
        dep = await kube.get(DEPLOYMENTS, "web", ns)
        assert dep["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"

        # The Job's pod ran on a device and completed; its claim is released.
        [train] = await pods_of(kube, ns, "train", 1)
        assert steered(train)

        async def job_done() -> bool:
            return bool(((await kube.get(JOBS, "train", ns)).get("status") or {}).get("succeeded"))

        await eventually(job_done, timeout=90)
        [train] = await pods_of(kube, ns, "train", 1)
        claim_name = train["status"]["extendedResourceClaimStatus"]["resourceClaimName"]

        async def released() -> bool:
            return claim_name not in {c["metadata"]["name"] for c in await kube.list(RESOURCE_CLAIMS, ns)}

        await eventually(released, timeout=60)


async def test_namespaces_without_the_label_are_left_to_the_default_scheduler(
    kube: Kube, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    resource = await mapped(webhook_ready, fleet)
    async with labelled_namespace(kube, f"{names}-off", {"draxr.io/enabled": "false"}) as ns:
        await kube.create(DEPLOYMENTS, deployment("web", resource, replicas=1), ns)
        [p] = await pods_of(kube, ns, "web", 1)
        assert p["spec"]["schedulerName"] == "default-scheduler"
        assert STEERED_ANNOTATION not in (p["metadata"].get("annotations") or {})


async def test_pods_naming_a_scheduler_or_asking_for_device_plugin_resources_are_left_alone(
    kube: Kube, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    resource = await mapped(webhook_ready, fleet)
    async with labelled_namespace(kube, f"{names}-on", ENABLED) as ns:
        cases = {
            "named": bare_pod("named", {resource: "1"}, schedulerName="volcano"),
            "plugin": bare_pod("plugin", {"nvidia.com/gpu": "1"}),
            "skip": bare_pod("skip", {resource: "1"}, labels={"draxr.io/skip": "true"}),
            "cpu": bare_pod("cpu", {"cpu": "100m"}),
            "mapped": bare_pod("mapped", {resource: "1"}),  # the control: this one is steered
        }
        created = {name: await kube.create(PODS, body, ns) for name, body in cases.items()}
        assert created["named"]["spec"]["schedulerName"] == "volcano"
        for name in ("plugin", "skip", "cpu"):
            assert created[name]["spec"]["schedulerName"] == "default-scheduler", name
            assert STEERED_ANNOTATION not in (created[name]["metadata"].get("annotations") or {}), name
        assert steered(created["mapped"])


def _admissions(result: str) -> float:
    return REGISTRY.get_sample_value("draxr_webhook_admissions_total", {"result": result}) or 0.0


def _claimed_deployment(resource: str, cls: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Deployment whose pod has its own ResourceClaim (from a template) next to a mapped extended
    resource, and the template."""
    with_claim = deployment("claimed", resource, replicas=1)
    pod_spec = with_claim["spec"]["template"]["spec"]
    pod_spec["resourceClaims"] = [{"name": "extra", "resourceClaimTemplateName": "one-gpu"}]
    pod_spec["containers"][0]["resources"]["claims"] = [{"name": "extra"}]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}}},
    }
    return with_claim, template


async def test_a_pod_with_claims_of_its_own_is_steered_and_bound_by_draxr(
    kube: Kube, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    """An unmodified Deployment whose pod has its own ResourceClaim next to a mapped extended
    resource: steered, and draxr allocates both claims in one go and binds the pod."""
    resource = await mapped(webhook_ready, fleet)
    [cls] = fleet.classes
    with_claim, template = _claimed_deployment(resource, cls)
    async with labelled_namespace(kube, f"{names}-claims", ENABLED) as ns:
        await kube.create(CLAIM_TEMPLATES, template, ns)
        await kube.create(DEPLOYMENTS, with_claim, ns)

        async def bound() -> dict[str, Any] | None:
            items = await kube.list(PODS, ns, labelSelector="app=claimed")
            ok = items and items[0]["spec"].get("nodeName") and items[0]["status"].get("extendedResourceClaimStatus")
            return items[0] if ok else None

        p = await eventually(bound, timeout=90)
        assert steered(p)
        uid = p["metadata"]["uid"]
        claims = [
            c
            for c in await kube.list(RESOURCE_CLAIMS, ns)
            if [r.get("uid") for r in (c.get("status") or {}).get("reservedFor") or ()] == [uid]
        ]
        assert len(claims) == 2, claims  # the template's claim and the special claim
        pools = {r["pool"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]}
        assert pools == {p["spec"]["nodeName"]}


async def test_a_pod_draxr_cannot_schedule_yet_is_left_to_kube_scheduler_and_runs(
    kube: Kube,
    control_plane: ControlPlane,
    fleet: fakedriver.Fleet,
    webhook_ready: Operator,
    names: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Never strand a pod: with a field draxr could not schedule (none is left today, so pods with
    claims of their own stand in for one here), the webhook admits the pod unchanged (counted and
    logged as "unsupported") and kube-scheduler binds it onto a DRA node with both claims. (A
    webhook of its own, in this process's thread, sees the stand-in; the session's runs in its
    own process.)"""
    from draxr.core import steering

    def unsupported(pod: Any) -> list[str]:
        return ["spec.resourceClaims (as if unsupported)"] if (pod.get("spec") or {}).get("resourceClaims") else []

    monkeypatch.setattr(steering, "unsupported_fields", unsupported)
    resource = await mapped(webhook_ready, fleet)
    [cls] = fleet.classes
    with_claim, template = _claimed_deployment(resource, cls)
    async with own_webhook(kube, control_plane, webhook_ready, names, resource, webhook_process=False) as own:
        ns = own.namespace
        before = _admissions("unsupported")
        await kube.create(CLAIM_TEMPLATES, template, ns)
        await kube.create(DEPLOYMENTS, with_claim, ns)

        async def bound() -> dict[str, Any] | None:
            items = await kube.list(PODS, ns, labelSelector="app=claimed")
            return items[0] if items and items[0]["spec"].get("nodeName") else None

        p = await eventually(bound, timeout=90)
        assert p["spec"]["schedulerName"] == "default-scheduler"
        assert STEERED_ANNOTATION not in (p["metadata"].get("annotations") or {})
        assert p["spec"]["nodeName"] in fleet.node_names()  # kube-scheduler gave it its devices
        assert _admissions("unsupported") == before + 1
        # The control, in the same namespace: the same pod without its own claim is steered.
        plain = await kube.create(PODS, bare_pod("plain", {resource: "1"}), ns)
        assert steered(plain)


async def dry_run(kube: Kube, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """The pod as admission leaves it (mutated or not), created with dryRun=All: nothing is stored."""
    return await kube.request("POST", PODS.path(namespace), body, query={"dryRun": "All"})


async def fail_opens(kube: Kube, webhook: str) -> float:
    """kube-apiserver's count of calls to ``webhook`` that failed and were let through (failurePolicy
    Ignore): apiserver_admission_webhook_fail_open_count, from its /metrics."""
    async with await kube.stream("/metrics") as resp:
        text = await resp.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_admission_webhook_fail_open_count{") and f'name="{webhook}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@contextlib.asynccontextmanager
async def webhook_pointed_at(
    kube: Kube, url: str, in_use: Callable[[], Awaitable[bool]], back: Callable[[], Awaitable[bool]]
) -> AsyncIterator[None]:
    """Point the installed configuration somewhere else for a while (draxr "down"): entered once
    ``in_use`` says the API server calls the new url, left once ``back`` says it calls draxr again."""
    config = await kube.get(MUTATING_WEBHOOKS, "draxr")
    original = config["webhooks"][0]["clientConfig"]["url"]

    async def set_url(value: str) -> None:
        await kube.patch(
            MUTATING_WEBHOOKS,
            "draxr",
            [{"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": value}],
            content_type=JSON_PATCH,
        )

    await set_url(url)
    await eventually(in_use, timeout=60)  # the API server's webhook informer has the new url
    try:
        yield
    finally:
        await set_url(original)
        await eventually(back, timeout=60)


async def test_pod_creation_succeeds_unmutated_while_draxr_is_down(
    kube: Kube, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    resource = await mapped(webhook_ready, fleet)
    [hook] = (await kube.get(MUTATING_WEBHOOKS, "draxr"))["webhooks"]
    webhook = hook["name"]
    called: list[bytes] = []  # the first byte of each call the hung webhook got (a TLS ClientHello)
    release = asyncio.Event()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(1)
        if first:
            called.append(first)
        await release.wait()  # never answers: the API server gives up after timeoutSeconds
        writer.close()

    hung = await asyncio.start_server(hang, "127.0.0.1", 0)
    hung_port = hung.sockets[0].getsockname()[1]
    async with hung, labelled_namespace(kube, f"{names}-on", ENABLED) as ns:
        probe = bare_pod("probe", {resource: "1"})

        async def steered_again() -> bool:
            return steered(await dry_run(kube, ns, probe))

        async def failing_open() -> bool:
            before = await fail_opens(kube, webhook)
            admitted = await dry_run(kube, ns, probe)
            return not steered(admitted) and await fail_opens(kube, webhook) > before

        async def calling_the_hung_one() -> bool:
            before = len(called)
            return not steered(await dry_run(kube, ns, probe)) and len(called) > before

        try:
            # Nothing listening (the process is gone): connection refused, the call fails open.
            url = manifests.webhook_url(free_port())
            async with webhook_pointed_at(kube, url, failing_open, steered_again):
                before = await fail_opens(kube, webhook)
                p = await kube.create(PODS, bare_pod("refused", {resource: "1"}), ns)
                assert p["spec"]["schedulerName"] == "default-scheduler"
                assert STEERED_ANNOTATION not in (p["metadata"].get("annotations") or {})
                assert await fail_opens(kube, webhook) > before  # the API server called, failed, let it in
            # Hanging (the process is stuck): the API server calls it, gives up after timeoutSeconds,
            # and admits the pod unchanged.
            url = f"https://127.0.0.1:{hung_port}/mutate-pods"
            async with webhook_pointed_at(kube, url, calling_the_hung_one, steered_again):
                before, calls = await fail_opens(kube, webhook), len(called)
                p = await kube.create(PODS, bare_pod("hung", {resource: "1"}), ns)
                assert p["spec"]["schedulerName"] == "default-scheduler"
                assert len(called) > calls, "the API server did not call the hung webhook"
                assert await fail_opens(kube, webhook) > before
        finally:
            release.set()
        # Back up: steered again.
        back = await kube.create(PODS, bare_pod("back", {resource: "1"}), ns)
        assert steered(back)


async def test_installed_configuration_fails_open_with_a_short_timeout(kube: Kube, webhook_ready: Operator) -> None:
    [hook] = (await kube.get(MUTATING_WEBHOOKS, "draxr"))["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] <= 5
    assert hook["sideEffects"] == "None"
    assert hook["namespaceSelector"] == {"matchLabels": ENABLED}
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "draxr.io/skip", "operator": "NotIn", "values": ["true"]}
    ]
    assert hook["rules"][0]["operations"] == ["CREATE"]
    assert hook["rules"][0]["resources"] == ["pods"]
    # The bundle is the operator's own CA, from its Secret (made with the ServiceAccount's token).
    secret = await kube.get(SECRETS, "draxr-webhook-tls", "draxr-system")
    pki = certs.Pki.from_secret_data(secret["data"])
    assert pki is not None
    assert base64.b64decode(hook["clientConfig"]["caBundle"]).startswith(pki.ca_crt)


async def test_certificate_rotation_updates_the_bundle_and_admission_keeps_working(
    kube: Kube, control_plane: ControlPlane, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    """A second webhook (own configuration, Secret, port and namespace label) whose CA and
    certificate live 15 s, so that it rotates twice while pods are created every 0.5 s: every
    pod must come out steered, so no admission call failed on a certificate the API server did
    not trust at that moment."""
    resource = await mapped(webhook_ready, fleet)
    label = f"rotation.draxr.io/{names}"
    port = free_port()
    config = own_webhook_config(control_plane, names, port, label)
    await kube.create(MUTATING_WEBHOOKS, config)
    async with labelled_namespace(kube, f"{names}-rot", {label: "true"}) as ns:
        settings = Settings(
            scheduler_name="draxr-rotation",  # nobody schedules these pods: only admission is under test
            bind_address="127.0.0.1",
            webhook_port=port,
            webhook_namespace=ns,
            webhook_secret_name=names,
            webhook_configuration_name=names,
            webhook_extra_hosts="127.0.0.1",
            webhook_ca_validity_seconds=15,
            webhook_cert_validity_seconds=15,
            webhook_cert_check_seconds=0.5,
            webhook_rotation_grace_seconds=2,
            webhook_process=True,  # (each rotation is sent to the server process)
        )
        keeper = CertKeeper(kube, settings)
        server = webhook_server(keeper, settings, lambda: webhook_ready.state.mapping)
        assert isinstance(server, WebhookProcess)
        tasks = [asyncio.create_task(keeper.ensure_loop()), asyncio.create_task(server.serve())]
        try:
            await asyncio.wait_for(keeper.loaded.wait(), 30)

            async def called_and_trusted() -> bool:  # the API server has the configuration and its caBundle
                probe = await dry_run(kube, ns, bare_pod("probe", {resource: "1"}))
                return probe["spec"].get("schedulerName") == "draxr-rotation"

            await eventually(called_and_trusted, timeout=30)
            cas: list[bytes] = []
            bundles: set[str] = set()
            results: list[tuple[str, bool]] = []
            deadline = time.monotonic() + 26
            i = 0
            while time.monotonic() < deadline and i < 60:
                p = await kube.create(PODS, bare_pod(f"p{i}", {resource: "1"}), ns)
                results.append((p["metadata"]["name"], p["spec"].get("schedulerName") == "draxr-rotation"))
                pki = certs.Pki.from_secret_data((await kube.get(SECRETS, names, ns))["data"])
                assert pki is not None
                if pki.ca_crt not in cas:
                    cas.append(pki.ca_crt)
                bundles.add((await kube.get(MUTATING_WEBHOOKS, names))["webhooks"][0]["clientConfig"]["caBundle"])
                i += 1
                await asyncio.sleep(0.5)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await kube.delete_if_exists(MUTATING_WEBHOOKS, names)
        assert len(cas) >= 2, "the CA never rotated"
        assert len(bundles) >= 2, "the caBundle never changed"
        final = certs.Pki.from_secret_data((await kube.get(SECRETS, names, ns))["data"])
        assert final is not None
        assert final.previous_ca_crt in cas  # the previous CA is kept for the overlap
        subjects = {x509.load_pem_x509_certificate(c).subject.rfc4514_string() for c in cas}
        assert len(subjects) == len(cas)  # distinct subjects: verifiers look issuers up by name
        unsteered = [name for name, ok in results if not ok]
        assert not unsteered, f"{len(unsteered)}/{len(results)} pods admitted unchanged during rotation: {unsteered}"


async def peer_certificate(port: int, ca_pem: bytes, host: str) -> x509.Certificate | None:
    """The certificate served on 127.0.0.1:``port`` to a client that trusts ``ca_pem`` and asks for
    ``host``; None while nothing serves there or the handshake fails (e.g. not signed by that CA)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=host)
    except OSError:  # refused, or the TLS handshake failed (ssl.SSLError is an OSError)
        return None
    try:
        return x509.load_der_x509_certificate(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
    finally:
        writer.close()


async def test_a_certificate_from_elsewhere_is_loaded_as_is(kube: Kube, namespace: str, names: str) -> None:
    """cert-manager's Secret layout (ca.crt, tls.crt, tls.key; no CA key): with --webhook-self-signed
    false draxr only loads it, serves it, and serves the new one when it changes."""
    port, host = free_port(), "draxr-webhook.x.svc"
    settings = Settings(
        bind_address="127.0.0.1",
        webhook_port=port,
        webhook_namespace=namespace,
        webhook_secret_name=names,
        webhook_self_signed=False,
        webhook_process=True,  # (the new certificate is sent to the server process)
    )
    keeper = CertKeeper(kube, settings)
    await keeper.reload_once()
    assert not keeper.loaded.is_set()  # no Secret yet: nothing to serve with

    def issued() -> dict[str, str]:
        planned = certs.plan(None, [host], datetime.now(UTC), timedelta(days=1), timedelta(days=1))
        assert planned is not None
        data = planned.pki.to_secret_data()
        return {k: data[k] for k in (certs.CA_CRT, certs.TLS_CRT, certs.TLS_KEY)}

    async def serves(data: dict[str, str]) -> bool:
        """The server presents ``data``'s certificate, which verifies against ``data``'s CA."""
        peer = await peer_certificate(port, base64.b64decode(data[certs.CA_CRT]), host)
        return peer == x509.load_pem_x509_certificate(base64.b64decode(data[certs.TLS_CRT]))

    first = issued()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": names},
        "type": "kubernetes.io/tls",
        "data": first,
    }
    created = await kube.create(SECRETS, secret, namespace)
    await keeper.reload_once()
    assert keeper.loaded.is_set()
    server = asyncio.create_task(webhook_server(keeper, settings, lambda: None).serve())
    try:
        await eventually(lambda: serves(first), timeout=30)
        second = issued()
        await kube.replace(SECRETS, {**created, "data": second}, namespace)
        await keeper.reload_once()
        await eventually(lambda: serves(second), timeout=30)
        assert not await serves(first)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)


async def test_a_standby_replica_serves_the_leaders_certificate_and_steers(
    kube: Kube, control_plane: ControlPlane, fleet: fakedriver.Fleet, webhook_ready: Operator, tmp_path: Path
) -> None:
    """A second replica, started as the Deployment's pod would be (ServiceAccount token, same Lease):
    the session operator leads, so this one stands by, yet it loads the certificate from the Secret
    and answers admission reviews from its own warm view."""
    resource = await mapped(webhook_ready, fleet)
    sa_dir = await service_account_dir(kube, control_plane, "draxr-system", "draxr", tmp_path / "sa")
    port = free_port()
    standby = Draxr(
        control_plane,
        sa_dir,
        "draxr",  # the session operator's Lease: it keeps leading
        tmp_path / "standby.log",
        pod_name="draxr-standby",
        extra=[
            "--webhook-port",
            str(port),
            "--webhook-namespace",
            "draxr-system",
            "--webhook-extra-hosts",
            "127.0.0.1",
        ],
    )
    try:

        async def serving() -> bool:
            return any(line.get("event") == "admission webhook serving" for line in standby.lines())

        await standby.until(serving, timeout=60)
        assert not any(line.get("event") == "became leader" for line in standby.lines())
        secret = await kube.get(SECRETS, "draxr-webhook-tls", "draxr-system")
        pki = certs.Pki.from_secret_data(secret["data"])
        assert pki is not None
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "r-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "x",
                "object": bare_pod("p", {resource: "1"}),
            },
        }
        context = ssl.create_default_context(cadata=certs.ca_bundle(pki, datetime.now(UTC)).decode())
        async with (
            aiohttp.ClientSession(trust_env=False) as http,
            http.post(manifests.webhook_url(port), json=review, ssl=context) as resp,
        ):
            assert resp.status == 200
            answer = await resp.json()
        assert answer["response"]["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(answer["response"]["patch"]))
        assert patch[0] == {"op": "add", "path": "/spec/schedulerName", "value": "draxr"}
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
        peer = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        assert x509.load_der_x509_certificate(peer) == x509.load_pem_x509_certificate(pki.tls_crt)
    finally:
        await asyncio.to_thread(standby.stop)
