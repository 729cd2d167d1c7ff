"""A pod's scheduling inputs, read from the pod object once — when the pod is upserted — into one
typed, immutable view. Placement and the request building read only this view, never the dict.

Also the pod request maths of component-helpers `resource.PodRequests`, which the view and the
state's per-pod summary share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from draxr.core.interpod import PodTerms, pod_terms
from draxr.core.mapping import is_dra_extended_resource_name
from draxr.core.quantity import QuantityLike, as_int64, milli_value, parse_quantity, value
from draxr.core.spread import SpreadSpec, parse_constraints

_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})  # plus hugepages-*, see _is_pod_level_resource


# --------------------------------------------------------------------------- pod request maths


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """A restartable init container (runs for the pod's whole life, like a regular container)."""
    return container.get("restartPolicy") == "Always"


def container_requests(container: Mapping[str, Any]) -> dict[str, QuantityLike]:
    """`resources.requests`, with missing keys taken from `resources.limits`.

    This is the API server's pod defaulting (SetDefaults_Pod, all resource names); objects read
    from the API already have it, hand-written ones may not.
    """
    resources = container.get("resources") or {}
    merged: dict[str, QuantityLike] = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return merged


def _is_pod_level_resource(name: str) -> bool:
    return name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-")


def _add(into: dict[str, Decimal], items: Mapping[str, QuantityLike]) -> None:
    for name, q in items.items():
        into[name] = into.get(name, Decimal(0)) + parse_quantity(q)


def _max_into(into: dict[str, Decimal], items: Mapping[str, Decimal]) -> None:
    for name, q in items.items():
        if name not in into or q > into[name]:
            into[name] = q


def pod_requests(
    pod: Mapping[str, Any],
    *,
    include_overhead: bool = True,
    use_pod_level: bool = True,
    non_missing: Mapping[str, QuantityLike] | None = None,
) -> dict[str, Decimal]:
    """Effective pod requests (`resource.PodRequests` with default options).

    Sum of regular containers and sidecars, raised to the peak of any non-sidecar init container
    (which runs next to the sidecars declared before it); then pod-level `spec.resources.requests`
    replace cpu/memory/hugepages; then `spec.overhead` is added. Ephemeral containers never count.
    ``non_missing``: `NonMissingContainerRequests`, a value for each container that lacks one.
    """
    spec = pod.get("spec") or {}

    def requests_of(c: Mapping[str, Any]) -> dict[str, QuantityLike]:
        reqs = container_requests(c)
        for name, q in (non_missing or {}).items():
            reqs.setdefault(name, q)
        return reqs

    result: dict[str, Decimal] = {}
    for c in spec.get("containers") or ():
        _add(result, requests_of(c))

    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or ():
        reqs = requests_of(c)
        if is_sidecar(c):
            _add(result, reqs)
            _add(sidecars, reqs)
            running = dict(sidecars)
        else:
            running = dict(sidecars)
            _add(running, reqs)
        _max_into(init_peak, running)
    _max_into(result, init_peak)

    if use_pod_level:
        pod_level = (spec.get("resources") or {}).get("requests") or {}
        for name, q in pod_level.items():
            if _is_pod_level_resource(name):
                result[name] = parse_quantity(q)

    if include_overhead:
        _add(result, spec.get("overhead") or {})
    return result


DEFAULT_MILLI_CPU = 100  # schedutil.DefaultMilliCPURequest
DEFAULT_MEMORY = 200 * 1024 * 1024  # schedutil.DefaultMemoryRequest
_NON_MISSING = {"cpu": Decimal("0.1"), "memory": Decimal(DEFAULT_MEMORY)}


def _pod_level_requests_set(spec: Mapping[str, Any]) -> bool:
    """`resourcehelper.IsPodLevelRequestsSet`."""
    return any(_is_pod_level_resource(n) for n in ((spec.get("resources") or {}).get("requests") or {}))


def nonzero_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(milli-cpu, memory bytes) of a pod as a node's NonZeroRequested counts it (upstream
    `PodInfo.CalculateResource`): a container without a cpu or memory request counts upstream's
    default for it (`NonMissingContainerRequests`); with pod-level requests
    (`getNonMissingContainerRequests`), only for a resource that neither the pod level nor any
    container requests."""
    spec = pod.get("spec") or {}
    non_missing: Mapping[str, Decimal] = _NON_MISSING
    if _pod_level_requests_set(spec):
        plain = pod_requests(pod)
        non_missing = {k: v for k, v in _NON_MISSING.items() if k not in plain}
    reqs = pod_requests(pod, non_missing=non_missing)
    return milli_value(reqs.get("cpu", Decimal(0))), value(reqs.get("memory", Decimal(0)))


def fit_score_requests(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """(milli-cpu, memory bytes) of the pod to place as NodeResourcesFit's Score counts them, when
    that differs from nonzero_requests (None otherwise): upstream's Fit builds its
    resourceAllocationScorer without enablePodLevelResources (only BalancedAllocation's sets it),
    so `calculatePodResourceRequest` skips pod-level requests: the containers' (each missing cpu
    or memory at its default) plus the overhead."""
    spec = pod.get("spec") or {}
    if not _pod_level_requests_set(spec):
        return None
    reqs = pod_requests(pod, use_pod_level=False, non_missing=_NON_MISSING)
    return milli_value(reqs.get("cpu", Decimal(0))), value(reqs.get("memory", Decimal(0)))


def fit_score_hugepages(pod: Mapping[str, Any]) -> Mapping[str, int] | None:
    """The hugepages-* requests of the pod to place as NodeResourcesFit's Score counts them when
    pod-level requests are set (None otherwise): the containers' and the overhead's, for the same
    reason as fit_score_requests (a pod-level hugepages request scores as 0, i.e. not at all)."""
    spec = pod.get("spec") or {}
    if not _pod_level_requests_set(spec):
        return None
    reqs = pod_requests(pod, use_pod_level=False)
    return MappingProxyType({n: value(q) for n, q in reqs.items() if n.startswith("hugepages-")})


# --------------------------------------------------------------------------- the view


# What placement.schedule answers for a pod with persistent or generic ephemeral volumes when its
# caller does not bind them (binds_volumes=False). The operator binds them (VolumeBinding's PreBind,
# binder.py), so they are no unsupported field any more.
VOLUMES_UNSUPPORTED = "spec.volumes (persistent volume claims may be bound to zones)"
# Likewise for the pod's own ResourceClaims (core.pod_claims) when the caller does not write them
# (placement.schedule binds_claims=False). The operator does (binder.py, DynamicResources' PreBind).
CLAIMS_UNSUPPORTED = "spec.resourceClaims (ResourceClaims next to extended resources)"


# A pod of a PodGroup (GenericWorkload, 1.36+): kube-scheduler places the group all or nothing
# (GangScheduling); placed alone, its pods would hold devices while their peers wait.
SCHEDULING_GROUP = "spec.schedulingGroup (gang scheduling)"


def unsupported_fields(pod: Mapping[str, Any]) -> list[str]:
    """Scheduling features draxr does not implement: such pods stay Pending rather than be
    misplaced (and the webhook and adoption leave them to kube-scheduler). Persistent volumes and
    the pod's own ResourceClaims are bound by the operator's binder; a PodGroup's pods are not
    placed yet."""
    return [SCHEDULING_GROUP] if (pod.get("spec") or {}).get("schedulingGroup") else []


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect

    @classmethod
    def from_api(cls, t: Mapping[str, Any]) -> Toleration:
        return cls(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        """v1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != taint.get("effect"):
            return False
        if self.key and self.key != taint.get("key"):
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == (taint.get("value") or "")


_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@dataclass(frozen=True, slots=True)
class ContainerView:
    """One init or regular container, as the special claim's request building reads it."""

    index: int  # position in initContainers + containers: the i in container-<i>-request-<j>
    name: str
    long_lived: bool  # regular container or sidecar
    request_names: tuple[str, ...]  # every request name, sorted: the j in container-<i>-request-<j>
    # Requests of DRA-capable extended resource names that are positive int64s (upstream skips
    # the others: zero, fractional or too large quantities).
    device_counts: Mapping[str, int]


_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodView:
    containers: tuple[ContainerView, ...]
    extended: Mapping[str, int]  # pod-level count of each DRA-capable name with a non-zero request
    tolerations: tuple[Toleration, ...]
    node_name: str  # spec.nodeName: the NodeName filter
    node_selector: Mapping[str, str]
    required_node_affinity: Mapping[str, Any] | None  # nodeAffinity's required NodeSelector
    unsupported: tuple[str, ...]  # see unsupported_fields
    tolerates_unschedulable: bool  # tolerates node.kubernetes.io/unschedulable:NoSchedule
    labels: Mapping[str, str]
    terms: PodTerms | None  # inter-pod (anti-)affinity
    spread: SpreadSpec  # topologySpreadConstraints as written (system defaults are the cycle's)
    invalid: str  # why upstream could not parse the pod's affinity or spread selectors, "" if it can
    preferred_node_affinity: tuple[Mapping[str, Any], ...] | None  # the field as written, None if unset
    images: tuple[str, ...]  # init then regular containers' images, then image volumes' references
    controller: tuple[str, str, str] | None  # (apiVersion, kind, name) of its controller owner
    # What DynamicResources reads of a pod with spec.resourceClaims (core.pod_claims.prefilter):
    # its identity, the entries and status.resourceClaimStatuses. None without claims.
    claims_input: Mapping[str, Any] | None = None
    # NodeResourcesFit's Score's (milli-cpu, memory) of the pod when not PodInfo.nonzero (pod-level
    # requests, see fit_score_requests); None: PodInfo.nonzero.
    fit_nonzero: tuple[int, int] | None = None
    # ... and its hugepages-* (fit_score_hugepages); None: PodInfo.units.
    fit_hugepages: Mapping[str, int] | None = None

    @property
    def depends_on_pods(self) -> bool:
        """Whether pods placed elsewhere can make it fit: required pod affinity, hard spreading."""
        return bool((self.terms and self.terms.required_affinity) or self.spread.hard)

    def untolerated(self, taints: tuple[Mapping[str, Any], ...]) -> Mapping[str, Any] | None:
        """The first NoSchedule/NoExecute taint no toleration tolerates (TaintToleration filter)."""
        for taint in taints:
            if taint.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(t.tolerates(taint) for t in self.tolerations):
                return taint
        return None


def container_views(spec: Mapping[str, Any]) -> tuple[ContainerView, ...]:
    inits = list(spec.get("initContainers") or ())
    out: list[ContainerView] = []
    for i, c in enumerate(inits + list(spec.get("containers") or ())):
        reqs = container_requests(c)
        counts = {}
        for name, q in reqs.items():
            if is_dra_extended_resource_name(name) and (n := as_int64(q)) is not None and n > 0:
                counts[name] = n
        long_lived = i >= len(inits) or is_sidecar(c)
        view = ContainerView(i, str(c.get("name", "")), long_lived, tuple(sorted(reqs)), MappingProxyType(counts))
        out.append(view)
    return tuple(out)


def pod_view(pod: Mapping[str, Any], requests: Mapping[str, Decimal] | None = None) -> PodView:
    """Read the pod's scheduling inputs. ``requests`` may pass an already computed `pod_requests`."""
    spec = pod.get("spec") or {}
    reqs = pod_requests(pod) if requests is None else requests
    extended = {}
    for name, q in reqs.items():
        if is_dra_extended_resource_name(name) and (count := value(q)) != 0:  # scalar resources round up
            extended[name] = count
    tolerations = tuple(Toleration.from_api(t) for t in spec.get("tolerations") or ())
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    selector = spec.get("nodeSelector")
    meta = pod.get("metadata") or {}
    invalid = ""
    try:
        terms = pod_terms(pod)
    except ValueError as e:
        terms, invalid = None, f"parsing pod: {e}"
    try:
        spread = parse_constraints(pod)
    except ValueError as e:
        spread, invalid = SpreadSpec((), (), False), invalid or f"obtaining pod's topology spread constraints: {e}"
    owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    images = [str(c.get("image") or "") for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]]
    images += [str((v.get("image") or {}).get("reference") or "") for v in spec.get("volumes") or () if "image" in v]
    return PodView(
        containers=container_views(spec),
        extended=MappingProxyType(extended) if extended else _EMPTY,
        tolerations=tolerations,
        node_name=str(spec.get("nodeName") or ""),
        node_selector=MappingProxyType({str(k): str(v) for k, v in selector.items()}) if selector else _EMPTY,
        required_node_affinity=required or None,
        unsupported=tuple(unsupported_fields(pod)),
        tolerates_unschedulable=any(t.tolerates(_UNSCHEDULABLE_TAINT) for t in tolerations),
        labels=MappingProxyType({str(k): str(v) for k, v in (meta.get("labels") or {}).items()}),
        terms=terms,
        spread=spread,
        invalid=invalid,
        preferred_node_affinity=tuple(preferred) if preferred is not None else None,
        images=tuple(images),
        controller=(str(owner.get("apiVersion")), str(owner.get("kind")), str(owner.get("name"))) if owner else None,
        claims_input=_claims_input(pod) if spec.get("resourceClaims") else None,
        fit_nonzero=fit_score_requests(pod),
        fit_hugepages=fit_score_hugepages(pod),
    )


def _claims_input(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta},
        "spec": {"resourceClaims": list((pod.get("spec") or {}).get("resourceClaims") or ())},
        "status": {"resourceClaimStatuses": list(status.get("resourceClaimStatuses") or ())},
    }
