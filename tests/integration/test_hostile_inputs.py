"""Hostile inputs (issue 11, item 7): one table, one row per input, against the real control plane and
the session's embedded operator (its ServiceAccount's RBAC, its webhook on loopback TLS).

Every row asserts its exact visible outcome (the subject pod's PodScheduled condition and
FailedScheduling event, the pod's binding and claim, the API server's rejection, the webhook's HTTP
answer, or what a lifecycle step leaves behind), then the same invariants: draxr's tasks and its
webhook server still run and it logged no error, a control pod created after the input is bound,
and nothing half-written is left in the row's namespace (a special claim without a bound pod that
uses it, a claim being deleted that still holds delete-protection, a pod status naming a missing
claim).

Placement rows pin the subject pod to the first node of the module's base fleet (nodeSelector on
the hostname): every other node then reports kube-scheduler's "node(s) didn't match Pod's node
affinity/selector", so the summary is exact whatever else the cluster holds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import json
import re
import secrets
import ssl
import string
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
import structlog
import yaml

from draxr.app import Operator
from draxr.core import certs
from draxr.kube import (
    DEVICE_CLASSES,
    EVENTS,
    JSON_PATCH,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiException,
    Kube,
    Resource,
    api_message,
)
from draxr.mapping_status import MAPPINGS
from draxr.webhook_tls import MUTATING_WEBHOOKS, SECRETS
from draxr_dev.devcluster import fakedriver

from . import manifests
from .embedded import OperatorThread
from .helpers import certs_loaded
from .test_platform import DELETE_PROTECTION, EXTENDED_CLAIM_ANNOTATION, eventually, pod

SCHEDULER = "draxr"
OTHERS = "node(s) didn't match Pod's node affinity/selector"
HOSTNAME = "kubernetes.io/hostname"
STEERED = "draxr.io/steered"
JSONDict = dict[str, Any]


# ---- the module's base fleet and the webhook's trust ----------------------------------------------


@dataclass(frozen=True)
class Base:
    """Two DRA nodes with 8 devices each and a DeviceClass mapping ``ext``: control pods use it."""

    driver: str
    cls: str
    ext: str
    nodes: tuple[str, ...]


@pytest.fixture(scope="module")
async def base(kube: Kube, operator_thread: OperatorThread) -> AsyncIterator[Base]:
    operator = operator_thread.operator
    assert operator is not None
    stem = f"hbase-{secrets.token_hex(3)}"
    fleet = fakedriver.Fleet(
        prefix=stem,
        dra_nodes=2,
        devices_per_node=8,
        driver=f"{stem}.example.com",
        classes={f"{stem}-gpu": f"{stem}.example.com/gpu"},
    )
    async with fakedriver.deployed(kube, fleet):
        b = Base(fleet.driver, f"{stem}-gpu", f"{stem}.example.com/gpu", tuple(fleet.node_names()))

        async def known() -> bool:
            return b.ext in operator.state.mapping and all(n in operator.state.nodes for n in b.nodes)

        await eventually(known, timeout=30)
        yield b


@pytest.fixture(scope="module")
async def tls(kube: Kube, operator_thread: OperatorThread) -> ssl.SSLContext:
    """A client context trusting the operator's webhook CA, once the configuration trusts it too."""
    assert operator_thread.operator is not None
    await certs_loaded(operator_thread.operator)

    async def trusted() -> bool:
        config = await kube.get(MUTATING_WEBHOOKS, "draxr")
        return all(h["clientConfig"].get("caBundle") for h in config["webhooks"])

    await eventually(trusted, timeout=30)
    pki = certs.Pki.from_secret_data((await kube.get(SECRETS, "draxr-webhook-tls", "draxr-system"))["data"])
    assert pki is not None
    return ssl.create_default_context(cadata=certs.ca_bundle(pki, datetime.now(UTC)).decode())


# ---- one row's world -------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a row's setup and checks share. Names: ``stem`` is unique per row; the row's own driver,
    DeviceClass and extended resource derive from it. Expected texts use ``$`` placeholders (see fmt)."""

    kube: Kube
    operator: Operator
    thread: OperatorThread
    base: Base
    tls: ssl.SSLContext
    ns: str
    stem: str
    rejection: ApiException | None = None
    answer: tuple[int | str, bytes] | None = None  # the webhook's (HTTP status, body), or ("closed", bytes)
    planted: str | None = None  # the name of a claim the row planted
    cleanups: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)

    @property
    def node(self) -> str:
        return self.base.nodes[0]

    @property
    def drv(self) -> str:
        return f"{self.stem}.example.com"

    @property
    def cls(self) -> str:
        return f"{self.stem}-cls"

    @property
    def ext(self) -> str:
        return f"{self.stem}.example.com/gpu"

    def fmt(self, text: str) -> str:
        return string.Template(text).safe_substitute(
            ns=self.ns,
            node=self.node,
            stem=self.stem,
            drv=self.drv,
            cls=self.cls,
            ext=self.ext,
            bdrv=self.base.driver,
            bcls=self.base.cls,
            bext=self.base.ext,
        )

    def fmt_json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.fmt(value)
        if isinstance(value, list):
            return [self.fmt_json(v) for v in value]
        if isinstance(value, dict):
            return {self.fmt(k): self.fmt_json(v) for k, v in value.items()}
        return value

    async def create(self, res: Resource, body: JSONDict, namespace: str | None = None) -> JSONDict:
        """Create; cluster-scoped objects are deleted when the row ends (claims go with the namespace)."""
        created = await self.kube.create(res, body, namespace)
        if not res.namespaced:
            name = created["metadata"]["name"]
            self.cleanups.append(lambda: self.kube.delete_if_exists(res, name))
        return created

    async def attempt(self, res: Resource, body: JSONDict, namespace: str | None = None) -> None:
        """Create, keeping the API's refusal for the row's check."""
        try:
            await self.create(res, body, namespace)
        except ApiException as e:
            self.rejection = e

    def class_body(
        self, *selectors: str, driver: str = "$bdrv", name: str = "$cls", ext: str | None = "$ext"
    ) -> JSONDict:
        return fakedriver.device_class(
            self.fmt(name),
            driver=self.fmt(driver),
            extended_resource_name=self.fmt(ext) if ext else None,
            extra_selectors=[self.fmt(s) for s in selectors],
        )

    async def device_class(
        self, *selectors: str, driver: str = "$bdrv", name: str = "$cls", ext: str | None = "$ext"
    ) -> None:
        await self.create(DEVICE_CLASSES, self.class_body(*selectors, driver=driver, name=name, ext=ext))

    async def wait_mapped(self, name: str = "$ext", present: bool = True) -> None:
        resource = self.fmt(name)

        async def known() -> bool:
            return (resource in self.operator.state.mapping) is present

        await eventually(known, timeout=10)

    async def subject(
        self,
        limits: dict[str, str],
        *,
        name: str = "subject",
        pinned: str | None = "$node",
        gated: bool = False,
        scheduler: str = SCHEDULER,
        **spec: Any,
    ) -> JSONDict:
        body = pod(name, {self.fmt(k): v for k, v in limits.items()}, scheduler=scheduler)
        if pinned:
            body["spec"]["nodeSelector"] = {HOSTNAME: self.fmt(pinned)}
        if gated:
            body["spec"]["schedulingGates"] = [{"name": "draxr.io/hostile-hold"}]
        body["spec"].update(self.fmt_json(spec))
        return await self.kube.create(PODS, body, self.ns)

    async def ungate(self, name: str = "subject") -> None:
        await self.kube.patch(PODS, name, {"spec": {"schedulingGates": None}}, self.ns)

    async def close(self) -> None:
        for p in await self.kube.list(PODS, self.ns):
            with contextlib.suppress(ApiException):
                await self.kube.delete(PODS, p["metadata"]["name"], self.ns, gracePeriodSeconds=0)
        for undo in reversed(self.cleanups):
            with contextlib.suppress(ApiException):
                await undo()
        await self.kube.delete_if_exists(NAMESPACES, self.ns)


Setup = Callable[[Ctx], Awaitable[Any]]


@dataclass(frozen=True)
class Seen:
    """A poll result for ``eventually``: falsy until ``ok``; its repr shows what was seen last."""

    ok: bool
    detail: Any

    def __bool__(self) -> bool:
        return self.ok


# ---- reading the cluster ------------------------------------------------------------------------------


def summary(total: int, reasons: dict[str, int]) -> str:
    """kube-scheduler's FitError text: '0/N nodes are available: ' + sorted '<count> <reason>' parts."""
    parts = sorted(f"{n} {r}" for r, n in reasons.items() if n)
    return f"0/{total} nodes are available: {', '.join(parts)}."


def preemption_parts(total: int, *, pinned: bool) -> list[str]:
    """PostFilter's part of the message (kube-scheduler's DefaultPreemption, word for word): the
    nodes that did not match are not helped; the pinned node, when its rejection is one that
    evicting may help, has no pod of lower priority (every pod here has priority 0)."""
    none = f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    if not pinned:
        return [none]
    victims = (
        f"preemption: 0/{total} nodes are available: 1 No preemption victims found for incoming pod, "
        f"{total - 1} Preemption is not helpful for scheduling."
    )
    return [none, victims]


async def scheduled_condition(ctx: Ctx, name: str) -> dict[str, Any] | None:
    p = await ctx.kube.get(PODS, name, ctx.ns)
    for c in (p.get("status") or {}).get("conditions") or ():
        if c["type"] == "PodScheduled":
            return {k: c.get(k) for k in ("status", "reason", "message")}
    return None


def owner_uid(claim: JSONDict) -> str | None:
    """The pod uid of a special claim (annotation "true" and a controller Pod ownerReference), else None."""
    meta = claim["metadata"]
    if (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true":
        return None
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "Pod":
            return str(ref.get("uid"))
    return None


async def claims_of(ctx: Ctx, uid: str) -> list[JSONDict]:
    return [c for c in await ctx.kube.list(RESOURCE_CLAIMS, ctx.ns) if owner_uid(c) == uid]


def devices_of(claim: JSONDict) -> list[str]:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ()
    return [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results]


async def pending(ctx: Ctx, name: str, reason: str | None, *, fatal: bool = False) -> None:
    """``name`` stays unscheduled with this PodScheduled=False/Unschedulable message and a Warning
    FailedScheduling event of the same note. ``reason``: the pinned node's reason in the summary
    (None: the pod is pinned to no existing node), or with ``fatal`` the whole message."""
    text = ctx.fmt(reason) if reason is not None else None

    async def condition() -> Seen:
        total = len(await ctx.kube.list(NODES))
        if fatal:  # an error, not a FitError: no preemption part
            assert text is not None
            wants = {text}
        else:
            filters = summary(total, {OTHERS: total - 1, text: 1} if text is not None else {OTHERS: total})
            wants = {f"{filters} {part}" for part in preemption_parts(total, pinned=text is not None)}
        cond = await scheduled_condition(ctx, name)
        seen = (cond or {}).get("message")
        ok = seen in wants and cond == {"status": "False", "reason": "Unschedulable", "message": seen}
        return Seen(ok, (seen, wants, cond))

    want = (await eventually(condition, timeout=20)).detail[0]

    async def event() -> Seen:
        events = [
            e
            for e in await ctx.kube.list(EVENTS, ctx.ns)
            if e["regarding"]["name"] == name and e["reason"] == "FailedScheduling"
        ]
        ok = any(
            e["note"] == want
            and e["type"] == "Warning"
            and e["reportingController"] == SCHEDULER
            and e["action"] == "Scheduling"
            for e in events
        )
        return Seen(ok, [e["note"] for e in events])

    await eventually(event, timeout=10)
    p = await ctx.kube.get(PODS, name, ctx.ns)
    assert not p["spec"].get("nodeName"), p["spec"]
    assert not await claims_of(ctx, p["metadata"]["uid"])


async def bound(ctx: Ctx, name: str, node: str | None = "$node", timeout: float = 20) -> JSONDict:
    async def placed() -> Seen:
        p = await ctx.kube.get(PODS, name, ctx.ns)
        return Seen(bool(p["spec"].get("nodeName")), p)

    got: JSONDict = (await eventually(placed, timeout=timeout)).detail
    if node is not None:
        assert got["spec"]["nodeName"] == ctx.fmt(node), got["spec"]
    return got


async def scheduled_events(ctx: Ctx, p: JSONDict) -> list[JSONDict]:
    return [
        e
        for e in await ctx.kube.list(EVENTS, ctx.ns)
        if e["regarding"].get("uid") == p["metadata"]["uid"] and e["reason"] == "Scheduled"
    ]


async def bound_with_devices(
    ctx: Ctx, name: str, devices: tuple[str, ...] | None, node: str | None = "$node", *, scheduled: bool = True
) -> JSONDict:
    """Bound; with ``devices`` (fnmatch patterns of driver/pool/device) its special claim holds exactly
    such devices, reserved for it, and the pod status names it; with None it has no claim at all.
    ``scheduled``: its scheduler reported the binding in a Scheduled event (else: nobody did)."""
    p = await bound(ctx, name, node)
    uid = p["metadata"]["uid"]
    status = p.get("status") or {}
    note = f"Successfully assigned {ctx.ns}/{name} to {p['spec']['nodeName']}"
    if devices is None:
        assert "extendedResourceClaimStatus" not in status, status
        assert not await claims_of(ctx, uid)
    else:
        claim_name = status["extendedResourceClaimStatus"]["resourceClaimName"]
        claim = await ctx.kube.get(RESOURCE_CLAIMS, claim_name, ctx.ns)
        assert owner_uid(claim) == uid, claim["metadata"]
        got = devices_of(claim)
        want = [ctx.fmt(d) for d in devices]
        assert len(got) == len(want), got
        assert all(fnmatch.fnmatchcase(g, w) for g, w in zip(got, want, strict=True)), got
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": name, "uid": uid}]
        note += f" with ResourceClaim {claim_name} ({', '.join(d.rsplit('/', 1)[1] for d in got)})"
    if not scheduled:
        assert not await scheduled_events(ctx, p)
        return p

    async def reported() -> Seen:
        events = await scheduled_events(ctx, p)
        ok = any(
            e["note"] == note and e["type"] == "Normal" and e["reportingController"] == p["spec"]["schedulerName"]
            for e in events
        )
        return Seen(ok, [(e["reportingController"], e["note"]) for e in events])

    await eventually(reported, timeout=10)
    return p


# ---- expected outcomes ------------------------------------------------------------------------------


class Expect(Protocol):
    async def check(self, ctx: Ctx) -> None: ...


@dataclass(frozen=True)
class Pending:
    """The subject stays Pending: ``reason`` for the pinned node in kube-scheduler's summary, or with
    ``fatal`` the whole message (an error that aborts the pod's attempt, as kube-scheduler's)."""

    reason: str
    fatal: bool = False

    async def check(self, ctx: Ctx) -> None:
        await pending(ctx, "subject", self.reason, fatal=self.fatal)


@dataclass(frozen=True)
class Bound:
    """The subject is bound to the pinned node, with a claim holding ``devices`` (patterns), or
    (None) without any claim."""

    devices: tuple[str, ...] | None
    scheduled: bool = True  # False: bound at creation (spec.nodeName), no scheduler involved

    async def check(self, ctx: Ctx) -> None:
        await bound_with_devices(ctx, "subject", self.devices, scheduled=self.scheduled)


@dataclass(frozen=True)
class Rejected:
    """The API server refused the setup's object with this status and exactly this message."""

    status: int
    message: str

    async def check(self, ctx: Ctx) -> None:
        assert ctx.rejection is not None, "the API server accepted the object"
        assert (ctx.rejection.status, api_message(ctx.rejection)) == (self.status, ctx.fmt(self.message))


MAPPING_CRD = Path(__file__).resolve().parents[2] / "crds" / "extendedresourcemappings.draxr.io.yaml"


def crd_rules() -> list[tuple[str, str]]:
    """The ExtendedResourceMapping CRD's x-kubernetes-validations: (rule, message), as in crds/."""
    out: list[tuple[str, str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for v in node.get("x-kubernetes-validations") or ():
                out.append((" ".join(str(v["rule"]).split()), " ".join(str(v["message"]).split())))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(MAPPING_CRD.read_text()))
    return out


@dataclass(frozen=True)
class RejectedByRule:
    """The API server refused the setup's ExtendedResourceMapping ``$stem-a`` by one of draxr's own
    rules (the CRD's x-kubernetes-validations: the rule that starts with ``rule``, on the field
    ``path`` ends with), at ``path``: its message, word for word as crds/ has it, and nothing else
    (``value``: the string the API server quotes; lists and objects it does not quote)."""

    path: str
    rule: str
    value: str | None = None

    async def check(self, ctx: Ctx) -> None:
        assert ctx.rejection is not None, "the API server accepted the object"
        field = re.sub(r"\[\d+\]", "", self.path).split(".")[-1]
        rules = sorted({(r, m) for r, m in crd_rules() if r.startswith(self.rule)})  # (an anchor's rules once)
        messages = [m for _, m in rules] if len(rules) == 1 else [m for _, m in rules if field in m]
        assert len(messages) == 1, f"crds/ has no one rule {self.rule!r} for {field}: {rules}"
        quoted = "" if self.value is None else f'"{ctx.fmt(self.value)}": '
        name = ctx.fmt("$stem-a")
        want = (
            f'ExtendedResourceMapping.draxr.io "{name}" is invalid: {self.path}: Invalid value: {quoted}{messages[0]}'
        )
        assert (ctx.rejection.status, api_message(ctx.rejection)) == (422, want)


@dataclass(frozen=True)
class Answered:
    """The webhook answered this HTTP status and body: JSON (a steering patch is compared decoded)
    or text."""

    status: int
    body: Any

    async def check(self, ctx: Ctx) -> None:
        assert ctx.answer is not None
        status, raw = ctx.answer
        assert status == self.status, (status, raw[:500])
        if isinstance(self.body, str):
            assert raw.decode() == ctx.fmt(self.body)
            return
        got = json.loads(raw)
        response = got.get("response") or {}
        if "patch" in response:
            response["patch"] = json.loads(base64.b64decode(response["patch"]))
        assert got == ctx.fmt_json(self.body)


@dataclass(frozen=True)
class Then:
    """A lifecycle row: its own steps and checks."""

    steps: Callable[[Ctx], Awaitable[None]]

    async def check(self, ctx: Ctx) -> None:
        await self.steps(ctx)


@dataclass(frozen=True)
class Row:
    id: str
    setup: Setup
    expect: Expect


# ---- the invariants every row ends with -------------------------------------------------------------------


def _task_running(tasks: set[asyncio.Task[Any]], qualname: str, owner: object) -> bool:
    for task in tasks:
        coro = task.get_coro()
        code, frame = getattr(coro, "cr_code", None), getattr(coro, "cr_frame", None)
        if (
            code is not None
            and frame is not None
            and code.co_qualname == qualname
            and frame.f_locals.get("self") is owner
        ):
            return True
    return False


async def still_alive(ctx: Ctx) -> None:
    op, tasks = ctx.operator, ctx.thread.tasks()
    for qualname, owner in (
        ("Operator.run", op),
        ("Scheduler.run", op.scheduler),
        ("Operator.release_loop", op),
        ("MappingStatusWriter.run", op.mapping_status),
    ):
        assert _task_running(tasks, qualname, owner), f"{qualname} is no longer running"
    assert op.health.problems() == []  # every watch making progress, no long-running task ended
    assert all(_task_running(tasks, "Informer.run", inf) for inf in op.informers), "a watch is no longer running"
    assert op.webhook is not None
    assert op.webhook.alive(), "webhook server gone"
    async with (
        aiohttp.ClientSession(trust_env=False) as http,
        http.get(f"https://127.0.0.1:{manifests.WEBHOOK_PORT}/healthz", ssl=ctx.tls) as resp,
    ):
        assert (resp.status, await resp.text()) == (200, "ok")


async def control_pod_bound(ctx: Ctx) -> None:
    """An ordinary pod created after the hostile input is scheduled with a device as usual."""
    await ctx.kube.create(PODS, pod("control", {ctx.base.ext: "1"}, scheduler=SCHEDULER), ctx.ns)
    await bound_with_devices(ctx, "control", ("$bdrv/*",), node=None)


async def half_written(ctx: Ctx) -> list[str]:
    pods = {p["metadata"]["uid"]: p for p in await ctx.kube.list(PODS, ctx.ns)}
    claims = await ctx.kube.list(RESOURCE_CLAIMS, ctx.ns)
    problems = []
    for c in claims:
        meta = c["metadata"]
        uid = owner_uid(c)
        if uid is not None:
            p = pods.get(uid)
            used = (
                p is not None
                and bool(p["spec"].get("nodeName"))
                and (p.get("status") or {}).get("extendedResourceClaimStatus", {}).get("resourceClaimName")
                == meta["name"]
            )
            if not used or (p or {}).get("status", {}).get("phase") in ("Succeeded", "Failed"):
                problems.append(f"special claim {meta['name']} is not used by a bound pod")
        if meta.get("deletionTimestamp") and DELETE_PROTECTION in (meta.get("finalizers") or ()):
            problems.append(f"claim {meta['name']} is being deleted but keeps {DELETE_PROTECTION}")
    names = {c["metadata"]["name"] for c in claims}
    for p in pods.values():
        named = ((p.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        if named and named not in names:
            problems.append(f"pod {p['metadata']['name']} names the missing claim {named}")
    return problems


async def nothing_half_written(ctx: Ctx) -> None:
    async def clean() -> Seen:
        problems = await half_written(ctx)
        return Seen(not problems, problems)

    await eventually(clean, timeout=20)


# ---- setups: pods and classes --------------------------------------------------------------------------


def asks(limits: dict[str, str], **spec: Any) -> Setup:
    async def setup(ctx: Ctx) -> None:
        await ctx.subject(limits, **spec)

    return setup


def cel_class(expr: str) -> Setup:
    """A DeviceClass over the base driver's devices with one more selector; the subject asks for it."""

    async def setup(ctx: Ctx) -> None:
        await ctx.device_class(expr)
        await ctx.wait_mapped()
        await ctx.subject({"$ext": "1"})

    return setup


def cel_class_refused(expr: str) -> Setup:
    async def setup(ctx: Ctx) -> None:
        await ctx.attempt(DEVICE_CLASSES, ctx.class_body(expr))

    return setup


async def backtracking_trap(ctx: Ctx) -> None:
    await ctx.device_class('device.attributes["$drv"].model.find("^(a+)+$") == ""', driver="$drv")
    trap = fakedriver.device("gpu-0", model="a" * 40 + "!", uid="gpu-0-uuid")
    await ctx.create(RESOURCE_SLICES, fakedriver.resource_slice(ctx.node, [trap], driver=ctx.drv, name=f"{ctx.stem}-a"))
    await ctx.wait_mapped()
    await ctx.subject({"$ext": "1"})


def cel_runtime(expr: str, detail: str) -> Pending:
    """A class selector failing on the pinned node's first device: fatal for the attempt, as upstream."""
    return Pending(
        'running "DynamicResources" filter plugin: '  # (the framework's wrapping of a Filter error)
        f"class $cls: selector #1 on device $bdrv/$node/gpu-0: CEL runtime error: CEL selector {expr!r} "
        f"failed on device 'gpu-0' of driver '$bdrv': {detail}",
        fatal=True,
    )


def cel_refusal(expr: str, detail: str) -> Rejected:
    quoted = json.dumps(expr)  # Go's %q for these ASCII expressions
    return Rejected(
        422,
        f'DeviceClass.resource.k8s.io "$cls" is invalid: spec.selectors[1].cel.expression: '
        f"Invalid value: {quoted}: {detail}",
    )


def compile_error(expr: str, column: int, message: str) -> str:
    """cel-go's error text for one issue at ``column`` (1-based) of a one-line expression."""
    return f"compilation failed: ERROR: <input>:1:{column}: {message}\n | {expr}\n | {'.' * (column - 1)}^"


NO_FIT_1 = "cannot allocate all claims: 1 device(s) of class $cls requested, only 0 free and matching on this node"
NO_FIT_INCOMPLETE = NO_FIT_1 + " (incomplete resource pools, not used until all their slices are published: $drv/$node)"
BASE_DEVICE = ("$bdrv/$node/gpu-*",)
ATTRS = 'device.attributes["$bdrv"]'
ATTRS_DESC = "attributes [$bdrv: driverVersion, model, numa, uuid], capacity [$bdrv: memory]"
MISSING_ATTRIBUTE = cel_runtime(
    f"{ATTRS}.missing == 1",
    f"no such key: missing; the device has {ATTRS_DESC}. consider using CEL optional chaining (.? followed by "
    "orValue()) or guarding the check with has() for optional fields",
)

CEL_ROWS = [
    Row("cel-missing-attribute", cel_class(f"{ATTRS}.missing == 1"), MISSING_ATTRIBUTE),
    Row(
        "cel-division-by-zero",
        cel_class(f"{ATTRS}.numa / 0 == 1"),
        cel_runtime(f"{ATTRS}.numa / 0 == 1", "divide by zero"),
    ),
    Row(
        "cel-modulus-by-zero",
        cel_class(f"{ATTRS}.numa % 0 == 1"),
        cel_runtime(f"{ATTRS}.numa % 0 == 1", "modulus by zero"),
    ),
    Row(
        "cel-bind-division-by-zero",
        cel_class("cel.bind(x, 1 / 0, x == 1)"),
        cel_runtime("cel.bind(x, 1 / 0, x == 1)", "divide by zero"),
    ),
    Row(
        "cel-string-greater-than-int",
        cel_class(f"{ATTRS}.model > 1"),
        cel_runtime(f"{ATTRS}.model > 1", "No matching overloads found : _>_(string, int64)"),
    ),
    # Heterogeneous equality is false, not an error (CEL spec): no device matches.
    Row("cel-string-equals-int", cel_class(f"{ATTRS}.model == 1"), Pending(NO_FIT_1)),
    Row(
        "cel-non-bool-result",
        cel_class(f"{ATTRS}.model"),
        cel_runtime(f"{ATTRS}.model", "CEL result of type string could not be converted to bool"),
    ),
    Row(
        "cel-integer-overflow",
        cel_class(f"{ATTRS}.numa + 9223372036854775807 + 1 > 0"),
        cel_runtime(f"{ATTRS}.numa + 9223372036854775807 + 1 > 0", "integer overflow"),
    ),
    Row(
        "cel-invalid-semver-literal",
        cel_class('semver("bad").major() == 1'),
        cel_runtime('semver("bad").major() == 1', "No Major.Minor.Patch elements found"),
    ),
    Row(
        "cel-invalid-quantity-literal",
        cel_class('quantity("bad").isInteger()'),
        cel_runtime(
            'quantity("bad").isInteger()',
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
    ),
    Row(
        "cel-string-to-int-conversion",
        cel_class(f"int({ATTRS}.model) == 1"),
        cel_runtime(f"int({ATTRS}.model) == 1", "cannot convert string to int"),
    ),
    Row(
        "cel-substring-out-of-range",
        cel_class(f"{ATTRS}.model.substring(64) == ''"),
        cel_runtime(
            f"{ATTRS}.model.substring(64) == ''",
            "<string>.substring(<start>, <end>): <start> or <end> is greater than <string>.size()",
        ),
    ),
    # Accepted by the API server and by kube-scheduler (CrossTypeNumericComparisons): must bind.
    Row("cel-int-less-than-double", cel_class("1 < 1.5"), Bound(BASE_DEVICE)),
    Row(
        "cel-quantity-float-greater-than-int",
        cel_class('device.capacity["$bdrv"].memory.asApproximateFloat() > 1'),
        Bound(BASE_DEVICE),
    ),
    # A regular expression with catastrophic backtracking in a backtracking engine (2^40 steps on this
    # device's model); RE2 (Go's, the Kubernetes regex library's) is linear. The API server's cost
    # estimate accepts it.
    Row("cel-regex-catastrophic-backtracking", backtracking_trap, Bound(("$drv/$node/gpu-0",))),
    Row(
        "cel-syntax-error",
        cel_class_refused("device.driver =="),
        cel_refusal(
            "device.driver ==",
            compile_error(
                "device.driver ==",
                17,
                "Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', "
                "'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
            ),
        ),
    ),
    Row(
        "cel-undeclared-variable",
        cel_class_refused("foo == 1"),
        cel_refusal("foo == 1", compile_error("foo == 1", 1, "undeclared reference to 'foo' (in container '')")),
    ),
    Row(
        "cel-unknown-device-field",
        cel_class_refused("device.nope == 1"),
        cel_refusal("device.nope == 1", compile_error("device.nope == 1", 7, "undefined field 'nope'")),
    ),
    Row(
        "cel-static-non-bool",
        cel_class_refused("device.driver"),
        cel_refusal("device.driver", "must evaluate to bool or the unknown type, not string"),
    ),
    Row(
        "cel-invalid-regex-literal",
        cel_class_refused('device.driver.matches("[")'),
        cel_refusal(
            'device.driver.matches("[")', compile_error('device.driver.matches("[")', 23, "invalid matches argument")
        ),
    ),
    Row(
        "cel-int-equals-double",
        cel_class_refused("1 == 1.0"),
        cel_refusal(
            "1 == 1.0", compile_error("1 == 1.0", 3, "found no matching overload for '_==_' applied to '(int, double)'")
        ),
    ),
    Row(
        "cel-mixed-list-literal",
        cel_class_refused('[1, "a"].size() == 2'),
        cel_refusal(
            '[1, "a"].size() == 2', compile_error('[1, "a"].size() == 2', 5, "expected type 'int' but found 'string'")
        ),
    ),
    Row(
        "cel-semver-compared-with-operator",
        cel_class_refused('device.attributes["x.example.com"].driverVersion > semver("1.0.0")'),
        cel_refusal(
            'device.attributes["x.example.com"].driverVersion > semver("1.0.0")',
            compile_error(
                'device.attributes["x.example.com"].driverVersion > semver("1.0.0")',
                50,
                "found no matching overload for '_>_' applied to '(any, kubernetes.Semver)'",
            ),
        ),
    ),
    Row(
        "cel-cost-limit-nested-attributes",
        cel_class_refused(
            "device.attributes.all(d, device.attributes.all(e, device.attributes[d].all(k, "
            "device.attributes[e].all(j, device.attributes[d][k] == device.attributes[e][j]))))"
        ),
        Rejected(
            422,
            'DeviceClass.resource.k8s.io "$cls" is invalid: spec.selectors[1].cel.expression: Forbidden: '
            "too complex, exceeds cost limit",
        ),
    ),
    Row(
        "cel-cost-limit-nested-lists",
        cel_class_refused(
            "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, "
            "[1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, "
            "a+b+c+d+e+f > 0))))))"
        ),
        Rejected(
            422,
            'DeviceClass.resource.k8s.io "$cls" is invalid: spec.selectors[1].cel.expression: Forbidden: '
            "too complex, exceeds cost limit",
        ),
    ),
    Row(
        "cel-longer-than-10KiB",
        cel_class_refused("device.driver == '" + "x" * 10240 + "'"),
        Rejected(
            422,
            'DeviceClass.resource.k8s.io "$cls" is invalid: spec.selectors[1].cel.expression: Too long: may not be '
            "more than 10240 bytes",
        ),
    ),
    Row(
        "cel-invalid-timestamp-literal",
        cel_class_refused('timestamp("bad") > timestamp("2020-01-01T00:00:00Z")'),
        cel_refusal(
            'timestamp("bad") > timestamp("2020-01-01T00:00:00Z")',
            compile_error('timestamp("bad") > timestamp("2020-01-01T00:00:00Z")', 11, "invalid timestamp argument"),
        ),
    ),
]


# ---- ResourceSlices -------------------------------------------------------------------------------------


def device(name: str, **kw: Any) -> JSONDict:
    return fakedriver.device(name, uid=f"{name}-uuid", **kw)


def slice_body(
    ctx: Ctx,
    suffix: str,
    devices: list[JSONDict] | None,
    *,
    generation: int = 1,
    count: int = 1,
    node: str = "$node",
    counters: list[JSONDict] | None = None,
) -> JSONDict:
    """A slice of the row's driver on ``node``, in the pool named after the node (as drivers do)."""
    body = fakedriver.resource_slice(
        ctx.fmt(node),
        devices or [],
        driver=ctx.drv,
        pool=ctx.fmt(node),
        generation=generation,
        slice_count=count,
        name=ctx.fmt(f"$stem-{suffix}"),
    )
    if counters is not None:
        del body["spec"]["devices"]
        body["spec"]["sharedCounters"] = counters
    return body


SliceSpec = Callable[[Ctx], list[JSONDict]]


def pool(slices: SliceSpec, want: str = "1") -> Setup:
    """The row's DeviceClass over the row's driver, these slices, and a subject asking ``want`` devices."""

    async def setup(ctx: Ctx) -> None:
        await ctx.device_class(driver="$drv")
        for body in slices(ctx):
            await ctx.create(RESOURCE_SLICES, body)
        await ctx.wait_mapped()
        await ctx.subject({"$ext": want})

    return setup


def refused_slice(slices: SliceSpec) -> Setup:
    async def setup(ctx: Ctx) -> None:
        for body in slices(ctx):
            await ctx.attempt(RESOURCE_SLICES, body)

    return setup


def consuming(name: str, counter_set: str, counter: str = "mem", value: str = "8Gi") -> JSONDict:
    d = device(name)
    d["consumesCounters"] = [{"counterSet": counter_set, "counters": {counter: {"value": value}}}]
    return d


COUNTERS = [{"name": "set-a", "counters": {"mem": {"value": "8Gi"}}}]
TAINT = {"key": "hostile.example.com/broken", "value": "yes", "effect": "NoSchedule"}


def tainted(name: str) -> JSONDict:
    return device(name, taints=[TAINT])


def invalid_pool(why: str) -> Pending:
    return Pending(f"invalid resource pools were encountered ($drv/$node: {why})")


async def incomplete_then_complete(ctx: Ctx) -> None:
    """The third of three announced slices arrives: the queued pod is placed at once."""
    await pending(ctx, "subject", NO_FIT_INCOMPLETE)
    await ctx.create(RESOURCE_SLICES, slice_body(ctx, "c", [device("gpu-2")], count=3))
    await bound_with_devices(ctx, "subject", ("$drv/$node/gpu-0",))


SLICE_ROWS = [
    Row(
        "slice-duplicate-device-across-slices-of-a-pool",
        pool(
            lambda c: [
                slice_body(c, "a", [device("gpu-0"), device("gpu-1")], count=2),
                slice_body(c, "b", [device("gpu-1"), device("gpu-2")], count=2),
            ]
        ),
        invalid_pool("duplicate device name gpu-1"),
    ),
    Row(
        "slice-generations-disagree-pool-incomplete",
        pool(
            lambda c: [
                slice_body(c, "a", [device("gpu-0")], generation=1, count=2),
                slice_body(c, "b", [device("gpu-1")], generation=2, count=2),
            ]
        ),
        Pending(NO_FIT_INCOMPLETE),
    ),
    Row(
        "slice-newest-generation-wins",
        pool(
            lambda c: [
                slice_body(c, "a", [device("gpu-0")], generation=1),
                slice_body(c, "b", [device("gpu-1")], generation=2),
            ]
        ),
        Bound(("$drv/$node/gpu-1",)),
    ),
    Row(
        "slice-count-larger-than-slices-present",
        pool(
            lambda c: [
                slice_body(c, "a", [device("gpu-0")], count=3),
                slice_body(c, "b", [device("gpu-1")], count=3),
            ]
        ),
        Then(incomplete_then_complete),
    ),
    Row(
        "slice-128-devices-the-api-maximum",
        pool(lambda c: [slice_body(c, "a", [device(f"gpu-{i}") for i in range(128)])], want="32"),
        Bound(tuple(f"$drv/$node/gpu-{i}" for i in range(32))),
    ),
    Row(
        "slice-129-devices",
        refused_slice(lambda c: [slice_body(c, "a", [device(f"gpu-{i}") for i in range(129)])]),
        Rejected(
            422,
            'ResourceSlice.resource.k8s.io "$stem-a" is invalid: spec.devices: '
            "Too many: 129: must have at most 128 items",
        ),
    ),
    Row(
        "slice-65-tainted-devices",
        refused_slice(lambda c: [slice_body(c, "a", [tainted(f"gpu-{i}") for i in range(65)])]),
        Rejected(
            422,
            'ResourceSlice.resource.k8s.io "$stem-a" is invalid: spec.devices: '
            "Too many: 65: must have at most 64 items",
        ),
    ),
    Row(
        "slice-every-device-tainted",
        pool(lambda c: [slice_body(c, "a", [tainted("gpu-0"), tainted("gpu-1")])]),
        Pending(
            "cannot allocate all claims: claim $ns/<extended-resources>, request container-0-request-0: "
            "not enough suitable devices on this node"
        ),
    ),
    Row(
        "slice-counters-name-a-missing-counter-set",
        pool(
            lambda c: [
                slice_body(c, "a", None, counters=COUNTERS, count=2),
                slice_body(c, "b", [consuming("gpu-0", "missing-set")], count=2),
            ]
        ),
        invalid_pool("counter set missing-set not found"),
    ),
    Row(
        "slice-counters-name-a-missing-counter",
        pool(
            lambda c: [
                slice_body(c, "a", None, counters=COUNTERS, count=2),
                slice_body(c, "b", [consuming("gpu-0", "set-a", counter="cores")], count=2),
            ]
        ),
        invalid_pool("counter cores not found in counter set set-a"),
    ),
    Row(
        "slice-duplicate-counter-sets-in-a-pool",
        pool(
            lambda c: [
                slice_body(c, "a", None, counters=COUNTERS, count=3),
                slice_body(c, "b", None, counters=COUNTERS, count=3),
                slice_body(c, "c", [consuming("gpu-0", "set-a")], count=3),
            ]
        ),
        invalid_pool("duplicate counter set name set-a"),
    ),
    Row(
        "slice-partitions-overcommit-their-counters",
        pool(
            lambda c: [
                slice_body(c, "a", None, counters=COUNTERS, count=2),
                slice_body(c, "b", [consuming("gpu-0", "set-a"), consuming("gpu-1", "set-a")], count=2),
            ],
            want="2",
        ),
        Pending(
            "cannot allocate all claims: claim $ns/<extended-resources>, request container-0-request-0: "
            "not enough suitable devices on this node"
        ),
    ),
    Row(
        "slice-for-a-node-that-does-not-exist",
        pool(lambda c: [slice_body(c, "a", [device("gpu-0")], node="$stem-ghost")]),
        Pending(NO_FIT_1),
    ),
]


# ---- pods ----------------------------------------------------------------------------------------------------


def containers(*limits: dict[str, str]) -> list[JSONDict]:
    return [
        {"name": f"c{i}", "image": "registry.invalid/fake:1", "resources": {"limits": lim}}
        for i, lim in enumerate(limits)
    ]


def refused_pod(resources: JSONDict) -> Setup:
    async def setup(ctx: Ctx) -> None:
        body = pod("subject", {}, scheduler=SCHEDULER)
        body["spec"]["containers"][0]["resources"] = ctx.fmt_json(resources)
        await ctx.attempt(PODS, body, ctx.ns)

    return setup


def too_many(devices: int) -> Pending:
    return Pending(f"extended resource claim needs {devices} devices, more than the 32 allowed in one claim")


async def like_kube_scheduler_without_a_claim(ctx: Ctx) -> None:
    """1e30 is not an int64: upstream skips such quantities when building the claim, so kube-scheduler
    binds the pod without any device (checked here on a twin), and draxr does the same."""
    await bound_with_devices(ctx, "subject", None)
    await ctx.subject({"$bext": "1e30"}, name="twin", scheduler="default-scheduler")
    await bound_with_devices(ctx, "twin", None)


async def class_deleted_while_queued(ctx: Ctx) -> None:
    """The pod is created while its name is mapped; the class goes before it is scheduled."""
    await ctx.device_class()
    await ctx.wait_mapped()
    await ctx.subject({"$ext": "1"}, gated=True)
    await ctx.kube.delete(DEVICE_CLASSES, ctx.cls)
    await ctx.wait_mapped(present=False)
    await ctx.ungate()


async def unmapped_until_the_class_is_back(ctx: Ctx) -> None:
    await pending(ctx, "subject", "Insufficient $ext")
    await ctx.device_class()  # back: the parked pod is placed
    await bound_with_devices(ctx, "subject", BASE_DEVICE)


async def pre_bound(ctx: Ctx) -> None:
    await ctx.subject({"$bext": "1"}, pinned=None, nodeName=ctx.node)


POD_ROWS = [
    Row("pod-33-devices", asks({"$bext": "33"}), too_many(33)),
    Row(
        "pod-33-devices-over-two-containers",
        asks({}, containers=containers({"$bext": "17"}, {"$bext": "16"})),
        too_many(33),
    ),
    Row(
        "pod-33-device-requests",
        asks({}, containers=containers(*({"$bext": "1"} for _ in range(33)))),
        Pending("extended resource claim needs 33 device requests, more than the 32 allowed in one claim"),
    ),
    Row(
        "pod-init-container-asks-33",
        asks({"$bext": "1"}, initContainers=[containers({"$bext": "33"})[0] | {"name": "init"}]),
        too_many(33),
    ),
    Row("pod-1e18-devices", asks({"$bext": "1e18"}), too_many(10**18)),
    Row("pod-1e30-devices-not-an-int64", asks({"$bext": "1e30"}), Then(like_kube_scheduler_without_a_claim)),
    Row("pod-zero-devices", asks({"$bext": "0"}), Bound(None)),
    Row(
        "pod-unmapped-extended-resource",
        asks({"unmapped.example.com/gpu": "1"}),
        Pending("Insufficient unmapped.example.com/gpu"),
    ),
    Row(
        "pod-mapped-and-unmapped-resources",
        asks({"$bext": "1", "unmapped.example.com/gpu": "1"}),
        Pending("Insufficient unmapped.example.com/gpu"),
    ),
    Row(
        "pod-implicit-name-of-a-missing-class",
        asks({"deviceclass.resource.kubernetes.io/$stem-nope": "1"}),
        Pending("Insufficient deviceclass.resource.kubernetes.io/$stem-nope"),
    ),
    Row("pod-class-deleted-while-queued", class_deleted_while_queued, Then(unmapped_until_the_class_is_back)),
    Row("pod-created-bound-to-a-node", pre_bound, Bound(None, scheduled=False)),
    Row(
        "pod-fractional-devices",
        refused_pod({"limits": {"$bext": "1.5"}}),
        Rejected(
            422,
            'Pod "subject" is invalid: [spec.containers[0].resources.limits[$bext]: Invalid value: "1500m": must be an '
            'integer, spec.containers[0].resources.requests[$bext]: Invalid value: "1500m": must be an integer]',
        ),
    ),
    Row(
        "pod-requests-differ-from-limits",
        refused_pod({"requests": {"$bext": "1"}, "limits": {"$bext": "2"}}),
        Rejected(
            422,
            'Pod "subject" is invalid: spec.containers[0].resources.requests: Invalid value: "1": '
            "must be equal to $bext limit of 2",
        ),
    ),
]


# ---- ExtendedResourceMapping CRs -----------------------------------------------------------------------------


def erm(name: str, classes: list[str], **spec: Any) -> JSONDict:
    return {
        "apiVersion": "draxr.io/v1alpha1",
        "kind": "ExtendedResourceMapping",
        "metadata": {"name": name},
        "spec": {"extendedResourceName": "$ext", "deviceClassNames": classes, **spec},
    }


def numa_pool(ctx: Ctx) -> list[JSONDict]:
    return [slice_body(ctx, "a", [device("gpu-0", numa=0), device("gpu-1", numa=1)])]


def mapped(*crs: JSONDict, classes: bool = True) -> Setup:
    """Classes numa0 and numa1 over the row's two devices (no extendedResourceName), these mapping CRs
    (created in order: the first is never newer), and a subject asking for ``$ext``."""

    async def setup(ctx: Ctx) -> None:
        if classes:
            for numa in (0, 1):
                await ctx.device_class(
                    f'device.attributes["$drv"].numa == {numa}', driver="$drv", name=f"$stem-numa{numa}", ext=None
                )
        for body in numa_pool(ctx):
            await ctx.create(RESOURCE_SLICES, body)
        for cr in crs:
            await ctx.create(MAPPINGS, ctx.fmt_json(cr))
        await ctx.wait_mapped()
        await ctx.subject({"$ext": "1"})

    return setup


async def older_mapping_wins(ctx: Ctx) -> None:
    await bound_with_devices(ctx, "subject", ("$drv/$node/gpu-0",))

    async def conflict() -> Seen:
        obj = await ctx.kube.get(MAPPINGS, ctx.fmt("$stem-b"))
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}
        got = {k: conds.get("Conflict", {}).get(k) for k in ("status", "reason", "message")}
        return Seen(
            got
            == {
                "status": "True",
                "reason": "OlderMappingWins",
                "message": ctx.fmt(
                    "ExtendedResourceMapping '$stem-a' (older) already maps $ext; this one is ignored until that one "
                    "is deleted or maps another name"
                ),
            },
            got,
        )

    await eventually(conflict, timeout=20)


MAPPING_ROWS = [
    Row(
        "mapping-two-crs-for-one-name",
        mapped(erm("$stem-a", ["$stem-numa0"]), erm("$stem-b", ["$stem-numa1"])),
        Then(older_mapping_wins),
    ),
    Row(
        "mapping-selector-does-not-compile",
        mapped(erm("$stem-a", ["$stem-numa0"], selectors=[{"cel": {"expression": "device.driver =="}}])),
        Pending(
            "ExtendedResourceMapping $stem-a for $ext has an invalid selector: selectors[0]: compilation failed: "
            "ERROR: <input>:1:17: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', "
            "'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n"
            " | device.driver ==\n | ................^",
            fatal=True,
        ),
    ),
    Row(
        "mapping-selector-fails-at-runtime",
        mapped(
            erm("$stem-a", ["$stem-numa0"], selectors=[{"cel": {"expression": 'device.attributes["$drv"].x == 1'}}])
        ),
        Pending(
            'running "DynamicResources" filter plugin: '
            "claim $ns/<extended-resources>: selector #0 on device $drv/$node/gpu-0: CEL runtime error: "
            "CEL selector 'device.attributes[\"$drv\"].x == 1' failed on device 'gpu-0' of driver '$drv': "
            "no such key: x; the device "
            "has attributes [$drv: driverVersion, model, numa, uuid], capacity [$drv: memory]. consider using CEL "
            "optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields",
            fatal=True,
        ),
    ),
    Row(
        "mapping-names-only-a-missing-class",
        mapped(erm("$stem-a", ["$stem-nope"]), classes=False),
        Pending(
            'running "DynamicResources" filter plugin: '
            "claim $ns/<extended-resources>, request container-0-request-0: could not retrieve device class "
            '$stem-nope: deviceclass.resource.k8s.io "$stem-nope" not found',
            fatal=True,
        ),
    ),
    Row(
        "mapping-node-selector-selects-no-node",
        mapped(
            erm(
                "$stem-a",
                ["$stem-numa0"],
                nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "$stem", "operator": "Exists"}]}]},
            )
        ),
        Pending("Insufficient $ext"),
    ),
    Row(
        "mapping-more-than-8-classes",
        lambda ctx: ctx.attempt(MAPPINGS, ctx.fmt_json(erm("$stem-a", [f"c{i}" for i in range(9)]))),
        Rejected(
            422,
            'ExtendedResourceMapping.draxr.io "$stem-a" is invalid: [spec.deviceClassNames: Too many: 9: must have at '
            "most 8 items, <nil>: Invalid value: null: some validation rules were not checked because the object was "
            "invalid; correct the existing errors to complete validation]",
        ),
    ),
]


def refused_mapping(**spec: Any) -> Setup:
    """An ExtendedResourceMapping ``$stem-a`` (``$ext`` -> ``$stem-numa0``, overridden by ``spec``)."""
    body = {"extendedResourceName": "$ext", "deviceClassNames": ["$stem-numa0"], **spec}
    cr = {"apiVersion": "draxr.io/v1alpha1", "kind": "ExtendedResourceMapping", "metadata": {"name": "$stem-a"}}
    return lambda ctx: ctx.attempt(MAPPINGS, ctx.fmt_json({**cr, "spec": body}))


def exists(values: list[str] | None = None, operator: str = "Exists") -> JSONDict:
    req: JSONDict = {"key": "k", "operator": operator}
    if values is not None:
        req["values"] = values
    return {"nodeSelectorTerms": [{"matchExpressions": [req]}]}


# Each of the CRD's own rules (crds/extendedresourcemappings.draxr.io.yaml), one at a time: refused
# with that rule's message (not a schema check of kube-apiserver's, such as maxItems above).
MAPPING_RULE_ROWS = [
    Row(
        "mapping-rule-kubernetes-io-name",
        refused_mapping(extendedResourceName="gpu.kubernetes.io/big"),
        RejectedByRule("spec.extendedResourceName", "!self.contains('kubernetes.io/')", "gpu.kubernetes.io/big"),
    ),
    Row(
        "mapping-rule-quota-prefix",
        refused_mapping(extendedResourceName="requests.example.com/gpu"),
        RejectedByRule("spec.extendedResourceName", "!self.startsWith('requests.')", "requests.example.com/gpu"),
    ),
    Row(
        "mapping-rule-upper-case-domain",
        refused_mapping(extendedResourceName="Example.com/gpu"),
        RejectedByRule("spec.extendedResourceName", "self.matches('^[a-z0-9]", "Example.com/gpu"),
    ),
    Row(
        "mapping-rule-name-of-64-characters",
        refused_mapping(extendedResourceName="example.com/" + "g" * 64),
        RejectedByRule("spec.extendedResourceName", "self.matches('^[a-z0-9]", "example.com/" + "g" * 64),
    ),
    Row(
        "mapping-rule-no-class",
        refused_mapping(deviceClassNames=[]),
        RejectedByRule("spec.deviceClassNames", "self.size() > 0"),
    ),
    Row(
        "mapping-rule-class-not-a-name",
        refused_mapping(deviceClassNames=["$stem-numa0", "GPU_class"]),
        RejectedByRule("spec.deviceClassNames", "self.all(c, c.matches("),
    ),
    Row(
        "mapping-rule-class-twice",
        refused_mapping(deviceClassNames=["$stem-numa0", "$stem-numa1", "$stem-numa0"]),
        RejectedByRule("spec.deviceClassNames", "self.all(c, self.exists_one("),
    ),
    Row(
        "mapping-rule-blank-selector",
        refused_mapping(selectors=[{"cel": {"expression": "device.driver != ''"}}, {"cel": {"expression": " \n\t"}}]),
        RejectedByRule("spec.selectors[1].cel", "self.expression.trim().size() > 0"),
    ),
    Row(
        "mapping-rule-in-without-values",
        refused_mapping(nodeSelector=exists(operator="In")),
        RejectedByRule("spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0]", "self.operator in ['Exists'"),
    ),
    Row(
        "mapping-rule-exists-with-values",
        refused_mapping(nodeSelector=exists(values=["x"])),
        RejectedByRule("spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0]", "self.operator in ['Exists'"),
    ),
    Row(
        "mapping-rule-no-node-selector-term",
        refused_mapping(nodeSelector={"nodeSelectorTerms": []}),
        RejectedByRule("spec.nodeSelector.nodeSelectorTerms", "self.size() > 0"),
    ),
]


# ---- claims, pod status and nodes changed under draxr's feet -------------------------------------------------


async def two_devices(ctx: Ctx, node: str = "$node") -> None:
    """The row's class over the row's pool of two devices on ``node``."""
    await ctx.device_class(driver="$drv")
    await ctx.create(RESOURCE_SLICES, slice_body(ctx, "a", [device("gpu-0"), device("gpu-1")], node=node))
    await ctx.wait_mapped()


def claim_body(ctx: Ctx, *, count: int = 2) -> JSONDict:
    meta: JSONDict = {
        "generateName": "planted-",
        "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
        "finalizers": [DELETE_PROTECTION],
    }
    request = {
        "name": "container-0-request-0",
        "exactly": {"deviceClassName": ctx.cls, "allocationMode": "ExactCount", "count": count},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [request]}},
    }


async def plant_claim(ctx: Ctx, *, owner: JSONDict | None, reserved_for: JSONDict | None = None) -> JSONDict:
    """A claim holding both devices of the row's pool, allocated by hand; the controller ownerReference
    to ``owner`` is added last, so that nothing releases it half-planted. Its finalizer is dropped
    when the row ends, should it still exist."""
    claim = await ctx.kube.create(RESOURCE_CLAIMS, claim_body(ctx), ctx.ns)
    name = claim["metadata"]["name"]
    ctx.planted = name
    results = [
        {"request": "container-0-request-0", "driver": ctx.drv, "pool": ctx.node, "device": d}
        for d in ("gpu-0", "gpu-1")
    ]
    node_selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [ctx.node]}]}]
    }
    status: JSONDict = {"allocation": {"devices": {"results": results}, "nodeSelector": node_selector}}
    if reserved_for is not None:
        status["reservedFor"] = [{"resource": "pods", **reserved_for}]
    written = await ctx.kube.replace(RESOURCE_CLAIMS, {**claim, "status": status}, ctx.ns, subresource="status")

    async def drop() -> None:
        with contextlib.suppress(ApiException):
            await ctx.kube.patch(
                RESOURCE_CLAIMS,
                name,
                [{"op": "remove", "path": "/metadata/finalizers"}],
                ctx.ns,
                content_type=JSON_PATCH,
            )

    ctx.cleanups.append(drop)
    if owner is None:
        return written
    ref = {"apiVersion": "v1", "kind": "Pod", "controller": True, **owner}
    return await ctx.kube.patch(RESOURCE_CLAIMS, name, {"metadata": {"ownerReferences": [ref]}}, ctx.ns)


async def claim_gone(ctx: Ctx, name: str) -> None:
    async def gone() -> Seen:
        try:
            c = await ctx.kube.get(RESOURCE_CLAIMS, name, ctx.ns)
        except ApiException as e:
            return Seen(e.status == 404, e.status)
        return Seen(False, c["metadata"])

    await eventually(gone, timeout=20)


async def node_with_a_bound_pod(ctx: Ctx) -> None:
    node = fakedriver.node(ctx.fmt("$stem-n"))
    await ctx.create(NODES, node)
    await two_devices(ctx, node="$stem-n")
    await fakedriver.wait_nodes_ready(ctx.kube, [ctx.fmt("$stem-n")])
    await ctx.subject({"$ext": "1"}, name="victim", pinned="$stem-n")
    await bound_with_devices(ctx, "victim", ("$drv/$stem-n/gpu-0",), node="$stem-n")
    await ctx.kube.delete(NODES, ctx.fmt("$stem-n"))


async def node_deleted(ctx: Ctx) -> None:
    """The pod on the deleted node keeps its claim while it exists; the node's devices are not offered
    to anyone; deleting the pod releases the claim."""
    await ctx.subject({"$ext": "1"}, name="rival", pinned="$stem-n")
    await pending(ctx, "rival", None)
    victim = await ctx.kube.get(PODS, "victim", ctx.ns)
    claim_name = victim["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    claim = await ctx.kube.get(RESOURCE_CLAIMS, claim_name, ctx.ns)
    assert devices_of(claim) == [ctx.fmt("$drv/$stem-n/gpu-0")]
    assert not claim["metadata"].get("deletionTimestamp")
    await ctx.kube.delete(PODS, "victim", ctx.ns, gracePeriodSeconds=0)
    await claim_gone(ctx, claim_name)


async def bound_on_two_devices(ctx: Ctx) -> None:
    await two_devices(ctx)
    await ctx.subject({"$ext": "1"})


async def claim_deleted_by_hand(ctx: Ctx) -> None:
    """Deleting the special claim of a running pod only marks it: delete-protection keeps it (and its
    device) until the pod ends; then draxr releases it and the device is free again."""
    p = await bound_with_devices(ctx, "subject", ("$drv/$node/gpu-0",))
    name = p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    await ctx.kube.delete(RESOURCE_CLAIMS, name, ctx.ns)
    await ctx.subject({"$ext": "2"}, name="rival")
    await pending(
        ctx,
        "rival",
        "cannot allocate all claims: 2 device(s) of class $cls requested, only 1 free and matching on this node",
    )
    claim = await ctx.kube.get(RESOURCE_CLAIMS, name, ctx.ns)
    assert claim["metadata"].get("deletionTimestamp")
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION]
    assert devices_of(claim) == [ctx.fmt("$drv/$node/gpu-0")]
    await ctx.kube.delete(PODS, "subject", ctx.ns, gracePeriodSeconds=0)
    await claim_gone(ctx, name)
    await bound_with_devices(ctx, "rival", ("$drv/$node/gpu-0", "$drv/$node/gpu-1"))


def status_naming(claim: str | None) -> Setup:
    """A queued pod whose status names a claim it does not own: another bound pod's (None) or a
    missing one. draxr writes the pod a claim of its own and leaves the other pod's alone."""

    async def setup(ctx: Ctx) -> None:
        await two_devices(ctx)
        named = ctx.fmt(claim) if claim else None
        if named is None:
            await ctx.subject({"$ext": "1"}, name="owner")
            owner = await bound_with_devices(ctx, "owner", ("$drv/$node/gpu-0",))
            named = owner["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        await ctx.subject({"$ext": "1"}, gated=True)
        mapping = {"containerName": "main", "resourceName": ctx.ext, "requestName": "container-0-request-0"}
        status = {"extendedResourceClaimStatus": {"resourceClaimName": named, "requestMappings": [mapping]}}
        await ctx.kube.patch(PODS, "subject", {"status": status}, ctx.ns, subresource="status")
        await ctx.ungate()

    return setup


async def foreign_claim_left_alone(ctx: Ctx) -> None:
    p = await bound_with_devices(ctx, "subject", ("$drv/$node/gpu-1",))
    owner = await bound_with_devices(ctx, "owner", ("$drv/$node/gpu-0",))
    assert p["status"]["extendedResourceClaimStatus"] != owner["status"]["extendedResourceClaimStatus"]


async def annotated_claim_without_owner(ctx: Ctx) -> None:
    await two_devices(ctx)
    await plant_claim(ctx, owner=None)
    await ctx.subject({"$ext": "1"})


async def not_ours_to_touch(ctx: Ctx) -> None:
    """Not a special claim (no owner): its devices count as taken and draxr leaves it as it is."""
    await pending(ctx, "subject", NO_FIT_1)
    assert ctx.planted is not None
    claim = await ctx.kube.get(RESOURCE_CLAIMS, ctx.planted, ctx.ns)
    assert devices_of(claim) == [ctx.fmt("$drv/$node/gpu-0"), ctx.fmt("$drv/$node/gpu-1")]
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION]
    assert not claim["metadata"].get("deletionTimestamp")


async def claim_of_a_pod_that_never_existed(ctx: Ctx) -> None:
    await two_devices(ctx)
    ghost = {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}
    await plant_claim(ctx, owner=ghost, reserved_for=ghost)
    await ctx.subject({"$ext": "2"})


async def orphan_released(ctx: Ctx) -> None:
    """Released (by draxr, or kube-controller-manager's resourceclaim controller) and deleted: its
    devices go to the queued pod."""
    await bound_with_devices(ctx, "subject", ("$drv/$node/gpu-0", "$drv/$node/gpu-1"))
    assert ctx.planted is not None
    await claim_gone(ctx, ctx.planted)


async def stale_allocated_claim(ctx: Ctx) -> None:
    """What a crash after writing the allocation leaves: a special claim of the queued pod holding devices."""
    await two_devices(ctx)
    p = await ctx.subject({"$ext": "1"}, gated=True)
    me = {"name": "subject", "uid": p["metadata"]["uid"]}
    await plant_claim(ctx, owner=me, reserved_for=me)
    await ctx.ungate()


async def class_fixed_after_runtime_error(ctx: Ctx) -> None:
    """The admin repairs the class: the parked pod is placed (at the latest after the flush interval)."""
    await MISSING_ATTRIBUTE.check(ctx)
    cls = await ctx.kube.get(DEVICE_CLASSES, ctx.cls)
    cls["spec"]["selectors"][1] = {"cel": {"expression": ctx.fmt(f'"missing" in {ATTRS} || {ATTRS}.numa >= 0')}}
    await ctx.kube.replace(DEVICE_CLASSES, cls)
    await bound(ctx, "subject", timeout=30)
    await bound_with_devices(ctx, "subject", BASE_DEVICE)


LIFECYCLE_ROWS = [
    Row("node-deleted-with-a-bound-pod", node_with_a_bound_pod, Then(node_deleted)),
    Row("claim-deleted-by-hand-while-its-pod-runs", bound_on_two_devices, Then(claim_deleted_by_hand)),
    Row("pod-status-names-another-pods-claim", status_naming(None), Then(foreign_claim_left_alone)),
    Row("pod-status-names-a-missing-claim", status_naming("$stem-missing"), Bound(("$drv/$node/gpu-0",))),
    Row("claim-annotated-special-without-an-owner", annotated_claim_without_owner, Then(not_ours_to_touch)),
    Row(
        "claim-owned-by-a-pod-that-never-existed",
        claim_of_a_pod_that_never_existed,
        Then(orphan_released),
    ),
    Row("claim-of-an-earlier-attempt-holding-devices", stale_allocated_claim, Bound(("$drv/$node/gpu-0",))),
    Row(
        "class-repaired-after-a-runtime-error",
        cel_class(f"{ATTRS}.missing == 1"),
        Then(class_fixed_after_runtime_error),
    ),
]


# ---- the admission webhook, called directly over loopback TLS ----------------------------------------------------

WEBHOOK = f"https://127.0.0.1:{manifests.WEBHOOK_PORT}"
REVIEW_PATH = "/mutate-pods"
UID = "hostile-1"


def review_pod(**meta: Any) -> JSONDict:
    """A pod the webhook steers: no schedulerName, the base fleet's mapped resource."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **meta},
        "spec": {
            "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": {"limits": {"$bext": "1"}}}]
        },
    }


def review(obj: Any = None, *, top: JSONDict | None = None, **request: Any) -> JSONDict:
    req: JSONDict = {
        "uid": UID,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": "$ns",
        "object": review_pod() if obj is None else obj,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req, **(top or {})}


def without(d: JSONDict, *path: str) -> JSONDict:
    """A deep copy of ``d`` lacking the key at ``path``."""
    out: JSONDict = json.loads(json.dumps(d))
    target = out
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return out


Body = bytes | JSONDict | Callable[[Ctx], bytes]


def call(body: Body, *, content_type: str = "application/json", method: str = "POST", path: str = REVIEW_PATH) -> Setup:
    """Send ``body`` (bytes as they are, a JSON template formatted for the row) and keep the answer."""

    async def setup(ctx: Ctx) -> None:
        if isinstance(body, bytes):
            data = body
        elif isinstance(body, dict):
            data = json.dumps(ctx.fmt_json(body)).encode()
        else:
            data = body(ctx)
        async with (
            aiohttp.ClientSession(trust_env=False) as http,
            http.request(
                method, WEBHOOK + path, data=data, headers={"Content-Type": content_type}, ssl=ctx.tls
            ) as resp,
        ):
            ctx.answer = (resp.status, await resp.read())

    return setup


NOTE = "schedulerName set to draxr by the draxr admission webhook: requests $bext -> DeviceClass $bcls (explicit)"
STEER = {"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER}
STEERED_ANSWER = Answered(
    200,
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": UID,
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": [STEER, {"op": "add", "path": "/metadata/annotations", "value": {STEERED: NOTE}}],
        },
    },
)
# A pod that has annotations gets the steering note added to them.
STEERED_ANSWER_ANNOTATED = Answered(
    200,
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": UID,
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": [STEER, {"op": "add", "path": "/metadata/annotations/draxr.io~1steered", "value": NOTE}],
        },
    },
)
UNCHANGED = Answered(
    200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": UID, "allowed": True}}
)


def malformed(why: str) -> Answered:
    return Answered(400, {"error": f"malformed AdmissionReview: {why}"})


BIG = "x" * (5 * 1024 * 1024)
BLOB = "hostile.example.com/blob"
# Annotations may total 256 KiB (262144 bytes, keys included); the steering note must still fit.
ANNOTATION = "x" * (256 * 1024 - 2048)


def huge_review(ctx: Ctx) -> bytes:
    obj = review_pod(annotations={BLOB: BIG})
    obj["spec"]["containers"] += [{"name": f"side-{i}", "image": "registry.invalid/app:1"} for i in range(500)]
    return json.dumps(ctx.fmt_json(review(obj))).encode()


def oversized_review(ctx: Ctx) -> bytes:
    return json.dumps(ctx.fmt_json(review(review_pod(annotations={"blob": "x" * (9 * 1024 * 1024)})))).encode()


async def plain_http(ctx: Ctx) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", manifests.WEBHOOK_PORT)
    writer.write(
        b"POST /mutate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)  # until the server closes the connection
    writer.close()
    ctx.answer = ("closed", data)


async def no_http_answer(ctx: Ctx) -> None:
    """TLS only: a plain HTTP request gets no HTTP response (at most a TLS alert), then the connection closes."""
    assert ctx.answer is not None
    status, data = ctx.answer
    assert status == "closed"
    assert not data.startswith(b"HTTP/"), data[:200]
    assert len(data) <= 7, data  # one TLS alert record at most


async def idle_connections(ctx: Ctx) -> None:
    """Connections that send half a request and then nothing do not hold up admission: a review
    is answered while twenty of them are held open (were the server waiting on them, it would not
    answer before they close)."""
    idle = []
    for _ in range(20):
        _, w = await asyncio.open_connection(
            "127.0.0.1", manifests.WEBHOOK_PORT, ssl=ctx.tls, server_hostname="127.0.0.1"
        )
        w.write(b"POST /mutate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{")
        idle.append(w)
    try:
        await call(review())(ctx)  # (the row checks the answer)
    finally:
        for w in idle:
            w.close()


async def concurrent_reviews(ctx: Ctx) -> None:
    data = json.dumps(ctx.fmt_json(review())).encode()

    async def one(http: aiohttp.ClientSession) -> tuple[int, bytes]:
        async with http.post(
            WEBHOOK + REVIEW_PATH, data=data, headers={"Content-Type": "application/json"}, ssl=ctx.tls
        ) as r:
            return r.status, await r.read()

    async with aiohttp.ClientSession(trust_env=False) as http:
        answers = await asyncio.gather(*(one(http) for _ in range(100)))
    assert {a for a in answers} == {answers[0]}  # one answer for all
    ctx.answer = answers[0]


async def huge_pod_through_the_api_server(ctx: Ctx) -> None:
    """An unmodified pod of about 1 MiB (the largest annotations the API server takes, 200 containers
    with 20 variables of 200 bytes each) in an opted-in namespace, created through the API server."""
    await ctx.kube.patch(NAMESPACES, ctx.ns, {"metadata": {"labels": {"draxr.io/enabled": "true"}}})
    body = pod("subject", {ctx.base.ext: "1"}, scheduler="default-scheduler", annotations={BLOB: ANNOTATION})
    body["spec"]["nodeSelector"] = {HOSTNAME: ctx.node}
    env = [{"name": f"V{i}", "value": "v" * 200} for i in range(20)]
    body["spec"]["containers"] += [
        {"name": f"side-{i}", "image": "registry.invalid/app:1", "env": env} for i in range(200)
    ]

    async def label_seen() -> bool:  # the API server's namespace informer feeds the namespaceSelector
        dry = await ctx.kube.request("POST", PODS.path(ctx.ns), body, query={"dryRun": "All"})
        return bool(dry["spec"]["schedulerName"] == SCHEDULER)

    await eventually(label_seen, timeout=10)
    await ctx.kube.create(PODS, body, ctx.ns)


async def steered_and_bound(ctx: Ctx) -> None:
    p = await bound_with_devices(ctx, "subject", BASE_DEVICE)
    assert p["spec"]["schedulerName"] == SCHEDULER
    assert p["metadata"]["annotations"][STEERED] == ctx.fmt(NOTE)
    assert p["metadata"]["annotations"][BLOB] == ANNOTATION
    assert len(p["spec"]["containers"]) == 201


WEBHOOK_ROWS = [
    Row("webhook-body-not-json", call(b'{"apiVersion": '), malformed("Expecting value: line 1 column 16 (char 15)")),
    Row("webhook-empty-body", call(b""), malformed("Expecting value: line 1 column 1 (char 0)")),
    Row("webhook-json-array", call(b"[]"), malformed("not a JSON object")),
    Row(
        "webhook-invalid-utf8",
        call(b"\xff\xfe{}"),
        malformed("'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    ),
    Row("webhook-deeply-nested-json", call(b"[" * 100_000 + b"]" * 100_000), malformed("nested too deeply")),
    Row(
        "webhook-body-over-8MiB",
        call(oversized_review),
        Answered(413, "Maximum request body size 8388608 exceeded."),
    ),
    Row("webhook-5MiB-pod-with-501-containers", call(huge_review), STEERED_ANSWER_ANNOTATED),
    # The API server always sends application/json; the content type is not what the answer depends on.
    Row("webhook-wrong-content-type", call(review(), content_type="text/plain"), STEERED_ANSWER),
    Row(
        "webhook-review-v1beta1",
        call(review(top={"apiVersion": "admission.k8s.io/v1beta1"})),
        malformed(
            "expected an AdmissionReview of admission.k8s.io/v1, got 'AdmissionReview' of 'admission.k8s.io/v1beta1'"
        ),
    ),
    Row(
        "webhook-a-pod-instead-of-a-review",
        call(review_pod()),
        malformed("expected an AdmissionReview of admission.k8s.io/v1, got 'Pod' of 'v1'"),
    ),
    Row(
        "webhook-review-without-request",
        call(without(review(), "request")),
        malformed("request is missing or not an object"),
    ),
    Row(
        "webhook-request-not-an-object",
        call(review(top={"request": "pod"})),
        malformed("request is missing or not an object"),
    ),
    Row(
        "webhook-request-without-uid",
        call(without(review(), "request", "uid")),
        malformed("request.uid must be a non-empty string"),
    ),
    Row(
        "webhook-uid-nan",
        call(lambda ctx: json.dumps(ctx.fmt_json(review(uid=float("nan")))).encode()),
        malformed("request.uid must be a non-empty string"),
    ),
    Row("webhook-request-without-object", call(without(review(), "request", "object")), UNCHANGED),
    Row("webhook-object-not-an-object", call(review("pod")), malformed("request.object is not an object")),
    Row("webhook-kind-not-an-object", call(review(kind="Pod")), malformed("request.kind is not an object")),
    Row(
        "webhook-review-of-a-deployment",
        call(review(kind={"group": "apps", "version": "v1", "kind": "Deployment"})),
        UNCHANGED,
    ),
    Row("webhook-update-operation", call(review(operation="UPDATE")), UNCHANGED),
    Row(
        "webhook-unreadable-quantity",
        call(
            review(
                review_pod() | {"spec": {"containers": [{"name": "main", "resources": {"limits": {"$bext": "lots"}}}]}}
            )
        ),
        UNCHANGED,
    ),
    Row("webhook-get-instead-of-post", call(b"", method="GET"), Answered(405, "405: Method Not Allowed")),
    Row("webhook-unknown-path", call(review(), path="/mutate-nodes"), Answered(404, "404: Not Found")),
    Row("webhook-plain-http-on-the-tls-port", plain_http, Then(no_http_answer)),
    Row("webhook-idle-half-sent-connections", idle_connections, STEERED_ANSWER),
    Row("webhook-100-concurrent-reviews", concurrent_reviews, STEERED_ANSWER),
    Row("webhook-1MiB-pod-through-the-api-server", huge_pod_through_the_api_server, Then(steered_and_bound)),
]


# ---- the table -------------------------------------------------------------------------------------------------

ROWS = [*CEL_ROWS, *SLICE_ROWS, *POD_ROWS, *MAPPING_ROWS, *MAPPING_RULE_ROWS, *LIFECYCLE_ROWS, *WEBHOOK_ROWS]


def test_the_table_has_at_least_50_rows_with_unique_ids() -> None:
    ids = [r.id for r in ROWS]
    assert len(ids) >= 50
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
async def test_hostile_input(
    row: Row,
    kube: Kube,
    operator: Operator,
    operator_thread: OperatorThread,
    base: Base,
    mapping_crd: None,
    tls: ssl.SSLContext,
) -> None:
    ctx = Ctx(
        kube,
        operator,
        operator_thread,
        base,
        tls,
        ns=f"hostile-{secrets.token_hex(4)}",
        stem=f"h{secrets.token_hex(3)}",
    )
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ctx.ns}})
    try:
        with structlog.testing.capture_logs() as logs:
            await row.setup(ctx)
            await row.expect.check(ctx)
            await control_pod_bound(ctx)
            await still_alive(ctx)
            await nothing_half_written(ctx)
        assert any(e.get("event") == "pod bound" for e in logs), "draxr's log was not captured"
        errors = [e for e in logs if e.get("log_level") in ("error", "critical")]
        assert not errors, errors
    finally:
        await ctx.close()
