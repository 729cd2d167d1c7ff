"""kube-scheduler's configuration file, `kubescheduler.config.k8s.io/v1` KubeSchedulerConfiguration,
as draxr reads it (`draxr run --config FILE`): parsed (YAML or JSON, strictly: an unknown field is an
error, as upstream's strict decoding), defaulted as v1's SetDefaults_* and the profile's plugin sets
merged with the default plugins (default_plugins.go mergePlugins), validated with upstream's rules and
messages (validation.ValidateKubeSchedulerConfiguration, the plugin args' validators, and what
frameworkruntime.NewFramework refuses: an unknown plugin, a plugin at an extension point it does not
implement, a plugin twice), then turned into the core.profile.SchedulerProfile of the profile whose
schedulerName draxr serves.

What draxr does not run is refused, never ignored: a filter, PreFilter, PostFilter, reserve, bind...
plugin of the default profile disabled, a plugin the default profile does not have, and args draxr
does not honour (DefaultPreemption's, NodeAffinity's addedAffinity, NodeResourcesFit's
ignoredResources, BalancedAllocation's resources, VolumeBinding's shape, DynamicResources' timeouts,
InterPodAffinity's ignorePreferredTermsOfExistingPods) unless they are the defaults. Fields of the
process (leaderElection, clientConnection, parallelism, profiling) are validated and then reported as
not applied: draxr's own flags set those (``LoadedConfig.not_applied``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from draxr.core.profile import (
    DefaultConstraint,
    FitStrategy,
    ResourceSpec,
    SchedulerProfile,
    ScoringType,
)

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME = "default-scheduler"

# The extension points in frameworkImpl.getExtensionPoints' order, with the Go interface names
# upstream's messages use.
EXTENSION_POINTS: tuple[tuple[str, str], ...] = (
    ("preFilter", "PreFilterPlugin"),
    ("filter", "FilterPlugin"),
    ("postFilter", "PostFilterPlugin"),
    ("reserve", "ReservePlugin"),
    ("preScore", "PreScorePlugin"),
    ("score", "ScorePlugin"),
    ("preBind", "PreBindPlugin"),
    ("bind", "BindPlugin"),
    ("postBind", "PostBindPlugin"),
    ("permit", "PermitPlugin"),
    ("preEnqueue", "PreEnqueuePlugin"),
    ("queueSort", "QueueSortPlugin"),
    ("placementGenerate", "PlacementGeneratePlugin"),
    ("placementScore", "PlacementScorePlugin"),
    ("podGroupPostFilter", "PodGroupPostFilterPlugin"),
)
_POINTS = [p for p, _ in EXTENSION_POINTS]

# The in-tree plugins of kube-scheduler 1.37.2's default profile and the extension points each
# implements (the harness's -print-profile, tests/differential/test_config_differential.py).
_FILTERS = ("preFilter", "filter")
IMPLEMENTS: dict[str, frozenset[str]] = {
    "SchedulingGates": frozenset({"preEnqueue"}),
    "PrioritySort": frozenset({"queueSort"}),
    "NodeName": frozenset(_FILTERS),
    "NodeUnschedulable": frozenset(_FILTERS),
    "TaintToleration": frozenset({*_FILTERS, "preScore", "score"}),
    "NodeAffinity": frozenset({*_FILTERS, "preScore", "score"}),
    "NodePorts": frozenset(_FILTERS),
    "NodeResourcesFit": frozenset({*_FILTERS, "preScore", "score"}),
    "VolumeRestrictions": frozenset(_FILTERS),
    "NodeVolumeLimits": frozenset(_FILTERS),
    "VolumeBinding": frozenset({*_FILTERS, "reserve", "preScore", "score", "preBind"}),
    "VolumeZone": frozenset(_FILTERS),
    "PodTopologySpread": frozenset({*_FILTERS, "preScore", "score"}),
    "InterPodAffinity": frozenset({*_FILTERS, "preScore", "score"}),
    "DynamicResources": frozenset({*_FILTERS, "postFilter", "reserve", "score", "preBind", "preEnqueue"}),
    "DefaultPreemption": frozenset({"postFilter", "preEnqueue"}),
    "NodeResourcesBalancedAllocation": frozenset({"preScore", "score"}),
    "ImageLocality": frozenset({"score"}),
    "DefaultBinder": frozenset({"bind"}),
    "NodeDeclaredFeatures": frozenset(_FILTERS),
}
# In-tree plugins outside the default profile: upstream knows them, draxr does not run them.
NOT_RUN = frozenset({"GangScheduling", "DeferredPodScheduling", "TopologyPlacementGenerator", "PodGroupPodsCount"})
_INVALID_IN_V1 = ("AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits")
_INVALID_DETAIL = f'was invalid in version "{API_VERSION}" (KubeSchedulerConfiguration is version "{API_VERSION}")'

DEFAULT_MULTI_POINT: tuple[tuple[str, int | None], ...] = (
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeName", None),
    ("NodeUnschedulable", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
    ("NodeDeclaredFeatures", None),
)

_SCORE_STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")


class ConfigError(ValueError):
    """The file is refused: ``errors`` as upstream words them (or draxr's refusals)."""

    def __init__(self, errors: Sequence[str], source: str = "") -> None:
        self.errors = list(errors)
        self.source = source
        where = f" {source}" if source else ""
        super().__init__(f"invalid KubeSchedulerConfiguration{where}:\n" + "\n".join(f"  {e}" for e in self.errors))


# ---- the v1 types (strict: an unknown field is an error) ---------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Plugin(_Strict):
    name: str
    weight: int | None = None


class PluginSet(_Strict):
    enabled: list[Plugin] = Field(default_factory=list)
    disabled: list[Plugin] = Field(default_factory=list)


class Plugins(_Strict):
    preEnqueue: PluginSet = Field(default_factory=PluginSet)
    queueSort: PluginSet = Field(default_factory=PluginSet)
    preFilter: PluginSet = Field(default_factory=PluginSet)
    filter: PluginSet = Field(default_factory=PluginSet)
    postFilter: PluginSet = Field(default_factory=PluginSet)
    preScore: PluginSet = Field(default_factory=PluginSet)
    score: PluginSet = Field(default_factory=PluginSet)
    reserve: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    preBind: PluginSet = Field(default_factory=PluginSet)
    bind: PluginSet = Field(default_factory=PluginSet)
    postBind: PluginSet = Field(default_factory=PluginSet)
    multiPoint: PluginSet = Field(default_factory=PluginSet)
    placementGenerate: PluginSet = Field(default_factory=PluginSet)
    placementScore: PluginSet = Field(default_factory=PluginSet)
    podGroupPostFilter: PluginSet = Field(default_factory=PluginSet)


class _Args(_Strict):
    apiVersion: str | None = None
    kind: str | None = None


class ResourceSpecV1(_Strict):
    name: str = ""
    weight: int = 0


class ShapePoint(_Strict):
    utilization: int = 0
    score: int = 0


class RequestedToCapacityRatioParam(_Strict):
    shape: list[ShapePoint] = Field(default_factory=list)


class ScoringStrategyV1(_Strict):
    type: str = ""
    resources: list[ResourceSpecV1] = Field(default_factory=list)
    requestedToCapacityRatio: RequestedToCapacityRatioParam | None = None


class NodeResourcesFitArgs(_Args):
    ignoredResources: list[str] = Field(default_factory=list)
    ignoredResourceGroups: list[str] = Field(default_factory=list)
    scoringStrategy: ScoringStrategyV1 | None = None


class NodeResourcesBalancedAllocationArgs(_Args):
    resources: list[ResourceSpecV1] = Field(default_factory=list)


class TopologySpreadConstraintV1(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    maxSkew: int = 0
    topologyKey: str = ""
    whenUnsatisfiable: str = ""
    labelSelector: dict[str, Any] | None = None
    minDomains: int | None = None
    nodeAffinityPolicy: str | None = None
    nodeTaintsPolicy: str | None = None
    matchLabelKeys: list[str] | None = None


class PodTopologySpreadArgs(_Args):
    defaultConstraints: list[TopologySpreadConstraintV1] = Field(default_factory=list)
    defaultingType: str = ""


class InterPodAffinityArgs(_Args):
    hardPodAffinityWeight: int | None = None
    ignorePreferredTermsOfExistingPods: bool = False


class NodeAffinityArgs(_Args):
    addedAffinity: dict[str, Any] | None = None


class DefaultPreemptionArgs(_Args):
    minCandidateNodesPercentage: int | None = None
    minCandidateNodesAbsolute: int | None = None


class VolumeBindingArgs(_Args):
    bindTimeoutSeconds: int | None = None
    shape: list[ShapePoint] = Field(default_factory=list)


class DynamicResourcesArgs(_Args):
    filterTimeout: str | None = None
    bindingTimeout: str | None = None


ARGS: dict[str, type[_Args]] = {
    "NodeResourcesFit": NodeResourcesFitArgs,
    "NodeResourcesBalancedAllocation": NodeResourcesBalancedAllocationArgs,
    "PodTopologySpread": PodTopologySpreadArgs,
    "InterPodAffinity": InterPodAffinityArgs,
    "NodeAffinity": NodeAffinityArgs,
    "DefaultPreemption": DefaultPreemptionArgs,
    "VolumeBinding": VolumeBindingArgs,
    "DynamicResources": DynamicResourcesArgs,
}


class PluginConfig(_Strict):
    name: str
    args: dict[str, Any] | None = None


class Profile(_Strict):
    schedulerName: str | None = None
    percentageOfNodesToScore: int | None = None
    plugins: Plugins | None = None
    pluginConfig: list[PluginConfig] = Field(default_factory=list)


class KubeSchedulerConfiguration(_Strict):
    apiVersion: str = ""
    kind: str = ""
    parallelism: int | None = None
    leaderElection: dict[str, Any] | None = None
    clientConnection: dict[str, Any] | None = None
    enableProfiling: bool | None = None
    enableContentionProfiling: bool | None = None
    percentageOfNodesToScore: int | None = None
    podInitialBackoffSeconds: int | None = None
    podMaxBackoffSeconds: int | None = None
    profiles: list[Profile] = Field(default_factory=list)
    extenders: list[dict[str, Any]] = Field(default_factory=list)
    delayCacheUntilActive: bool = False


# ---- upstream's field errors (k8s.io/apimachinery field.Error) ----------------------------------


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    return json.dumps(v, separators=(",", ":"))


def invalid(path: str, value: object, detail: str) -> str:
    return f"{path}: Invalid value: {_value(value)}: {detail}"


def required(path: str, detail: str = "") -> str:
    return f"{path}: Required value" + (f": {detail}" if detail else "")


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def duplicate(path: str, value: object) -> str:
    return f"{path}: Duplicate value: {_value(value)}"


def not_supported(path: str, value: object, valid: Sequence[str]) -> str:
    return f"{path}: Unsupported value: {_value(value)}: supported values: " + ", ".join(json.dumps(v) for v in valid)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ---- reading ---------------------------------------------------------------------------------


def parse(text: str, source: str = "") -> KubeSchedulerConfiguration:
    """YAML (JSON is YAML) into the v1 types; apiVersion and kind must be kube-scheduler's."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"not YAML or JSON: {e}"], source) from e
    if not isinstance(raw, dict):
        raise ConfigError(["not a KubeSchedulerConfiguration object"], source)
    if raw.get("apiVersion") != API_VERSION or raw.get("kind") != KIND:
        raise ConfigError(
            [
                f"apiVersion {raw.get('apiVersion')!r}, kind {raw.get('kind')!r}: draxr reads "
                f"apiVersion {API_VERSION}, kind {KIND}"
            ],
            source,
        )
    try:
        cfg = KubeSchedulerConfiguration.model_validate(raw)
    except ValidationError as e:
        errors = e.errors()
        if all(err.get("type") == "extra_forbidden" for err in errors):
            ordered = _key_order(text)
            unknown = [f'unknown field "{p}"' for p in _unknown_fields(raw, KubeSchedulerConfiguration, "", ordered)]
            raise ConfigError([_strict_error(unknown, _args_error(raw, ordered))], source) from e
        raise ConfigError([_decoding_error(err) for err in errors], source) from e
    args_error = _args_error(raw, _key_order(text))
    if args_error is not None:
        raise ConfigError([_strict_error([], args_error)], source)
    return cfg


def _path(loc: Sequence[object]) -> str:
    """A pydantic location as upstream's field path: ``profiles[0].plugins``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _strict_error(unknown: Sequence[str], args_error: str | None) -> str:
    """The scheme's strict decoding error: the unknown fields (sorted), then the first plugin args
    that do not decode."""
    return "strict decoding error: " + ", ".join([*unknown, *([args_error] if args_error else [])])


def _key_order(text: str) -> bool:
    """Whether upstream meets the keys sorted: YAML goes through a map to JSON (sorted keys at every
    level); JSON is decoded as written."""
    return not text.lstrip().startswith("{")


def _model_of(annotation: object) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (directly, optionally or as a list's items) and whether in a list."""
    args = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) is not None else []
    if get_origin(annotation) is list and args:
        inner, _ = _model_of(args[0])
        return inner, True
    if args and get_origin(annotation) is not list:  # X | None
        return _model_of(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _unknown_fields(value: object, model: type[BaseModel], path: str, sort_keys: bool) -> list[str]:
    """The unknown fields' paths in the order upstream's strict decoder meets them (depth first)."""
    if not isinstance(value, dict):
        return []
    out: list[str] = []
    fields = model.model_fields
    for key in sorted(value) if sort_keys else list(value):
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            out.append(where)
            continue
        sub, many = _model_of(fields[key].annotation)
        if sub is None:
            continue
        item = value[key]
        if many and isinstance(item, list):
            for i, element in enumerate(item):
                out += _unknown_fields(element, sub, f"{where}[{i}]", sort_keys)
        else:
            out += _unknown_fields(item, sub, where, sort_keys)
    return out


def _args_error(raw: Mapping[str, Any], sort_keys: bool) -> str | None:
    """The first pluginConfig entry whose args have unknown fields, as the v1 conversion words it."""
    profiles = raw.get("profiles")
    for i, prof in enumerate(profiles if isinstance(profiles, list) else ()):
        pcs = prof.get("pluginConfig") if isinstance(prof, dict) else None
        for j, pc in enumerate(pcs if isinstance(pcs, list) else ()):
            if not isinstance(pc, dict) or pc.get("name") not in ARGS or not isinstance(pc.get("args"), dict):
                continue
            try:
                ARGS[pc["name"]].model_validate(pc["args"])
            except ValidationError as e:
                extra = [err for err in e.errors() if err.get("type") == "extra_forbidden"]
                if extra and len(extra) == len(e.errors()):
                    paths = _unknown_fields(pc["args"], ARGS[pc["name"]], "", sort_keys)
                    fields = ", ".join(f'unknown field "{p}"' for p in paths)
                    return (
                        f"decoding .profiles[{i}].pluginConfig[{j}]: strict decoding error: decoding args for "
                        f"plugin {pc['name']}: strict decoding error: {fields}"
                    )
    return None


def _decoding_error(err: Mapping[str, Any]) -> str:
    where = _path(err.get("loc", ()))
    if err.get("type") == "extra_forbidden":
        return f'strict decoding error: unknown field "{where}"'
    return f"decoding error: {where}: {err.get('msg')}"


def _args(name: str, raw: Mapping[str, Any] | None, path: str) -> tuple[_Args | None, list[str]]:
    model = ARGS.get(name)
    if model is None:
        return None, []
    try:
        return model.model_validate(dict(raw or {})), []
    except ValidationError as e:
        return None, [f"{path}: " + _decoding_error(err) for err in e.errors()]


# ---- defaulting (v1 defaults.go, default_plugins.go) -------------------------------------------


@dataclass
class _PluginSet:
    enabled: list[tuple[str, int | None]] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)


def merge_plugin_set(default: _PluginSet, custom: PluginSet | None) -> _PluginSet:
    """default_plugins.go mergePluginSet."""
    if custom is None:
        return default
    disabled = [p.name for p in custom.disabled] + list(default.disabled)
    custom_enabled = {p.name: (i, p) for i, p in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[tuple[str, int | None]] = []
    if "*" not in disabled:
        for name, weight in default.enabled:
            if name in disabled:
                continue
            if name in custom_enabled:
                i, p = custom_enabled[name]
                name, weight = p.name, p.weight
                replaced.add(i)
            enabled.append((name, weight))
    for i, p in enumerate(custom.enabled):
        if i not in replaced:
            enabled.append((p.name, p.weight))
    return _PluginSet(enabled, disabled)


def _plugin_set_json(ps: _PluginSet) -> dict[str, Any]:
    """config.PluginSet as encoding/json writes it (a nil list is null)."""
    return {
        "Enabled": [{"Name": n, "Weight": w or 0} for n, w in ps.enabled] or None,
        "Disabled": [{"Name": n, "Weight": 0} for n in ps.disabled] or None,
    }


def merged_plugins(plugins: Plugins | None) -> dict[str, _PluginSet]:
    """The profile's plugin sets after v1 defaulting: multiPoint merged with the defaults, every
    other point with the (empty) default set."""
    out = {point: _PluginSet() for point in (*_POINTS, "multiPoint")}
    out["multiPoint"] = _PluginSet(list(DEFAULT_MULTI_POINT))
    if plugins is None:
        return out
    for point in out:
        out[point] = merge_plugin_set(out[point], getattr(plugins, point))
    return out


# ---- the framework's view (frameworkruntime.NewFramework) --------------------------------------


@dataclass(frozen=True)
class Effective:
    """Per extension point the plugins the framework runs, in its order, and the score weights."""

    points: dict[str, tuple[str, ...]]
    weights: dict[str, int]


def effective(sets: Mapping[str, _PluginSet]) -> Effective:
    """updatePluginList per point, then expandMultiPointPlugins and getValidScoreWeights. Raises
    ValueError with upstream's message (not yet wrapped in the profile's)."""
    known = set(IMPLEMENTS) | NOT_RUN
    needed = {name for s in sets.values() for name, _ in s.enabled}
    points: dict[str, list[str]] = {}
    for point, kind in EXTENSION_POINTS:
        seen: list[str] = []
        for name, _ in sets[point].enabled:
            if name not in known:
                raise ValueError(f"{kind} {json.dumps(name)} does not exist")
            if name in IMPLEMENTS and point not in IMPLEMENTS[name]:
                raise ValueError(f"plugin {json.dumps(name)} does not extend {kind} plugin")
            if name in seen:
                raise ValueError(f"plugin {json.dumps(name)} already registered as {json.dumps(kind)}")
            seen.append(name)
        points[point] = seen
    multi = sets["multiPoint"].enabled
    if multi:
        for point, kind in EXTENSION_POINTS:
            enabled = list(points[point])
            disabled = set(sets[point].disabled)
            if "*" in disabled:
                continue
            from_multi: list[str] = []
            overrides: list[str] = []
            for name, _ in multi:
                if name not in known:
                    raise ValueError(f"{kind} {json.dumps(name)} does not exist")
                if point not in IMPLEMENTS.get(name, frozenset()):
                    continue
                if name in disabled:
                    continue
                if name in enabled:
                    if name not in overrides:
                        overrides.append(name)
                    continue
                if name in from_multi:
                    raise ValueError(f"plugin {json.dumps(name)} already registered as {json.dumps(kind)}")
                from_multi.append(name)
            first = [n for n in enabled if n in overrides]
            rest = [n for n in enabled if n not in overrides]
            points[point] = [*first, *from_multi, *rest]
    weights: dict[str, int] = {}
    for name, weight in [*sets["score"].enabled, *multi]:
        if "score" not in IMPLEMENTS.get(name, frozenset()) or name in weights:
            continue
        weights[name] = weight or 1
    if len(points["queueSort"]) != 1:
        raise ValueError(
            "only one queue sort plugin required for profile with scheduler name %s, "
            f"but got {len(points['queueSort'])}"
        )
    if not points["bind"]:
        raise ValueError("at least one bind plugin is needed for profile with scheduler name %s")
    del needed
    return Effective({p: tuple(v) for p, v in points.items()}, {n: weights[n] for n in points["score"]})


def _default_effective() -> Effective:
    return effective(merged_plugins(None))


# ---- validation (validation.go, validation_pluginargs.go) --------------------------------------

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_name_errors(path: str, key: str) -> list[str]:
    """metav1validation.ValidateLabelName (IsQualifiedName's messages)."""
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append(invalid(path, key, "prefix part must be non-empty"))
        elif len(prefix) > 253 or not _DNS1123.match(prefix):
            errs.append(
                invalid(
                    path,
                    key,
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
                    "'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                )
            )
    else:
        return [
            invalid(
                path,
                key,
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
                "and '/' (e.g. 'example.com/MyName')",
            )
        ]
    if not name:
        errs.append(invalid(path, key, "name part must be non-empty"))
    elif len(name) > 63:
        errs.append(invalid(path, key, "name part must be no more than 63 bytes"))
    if name and not _LABEL_NAME.match(name):
        errs.append(
            invalid(
                path,
                key,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            )
        )
    return errs


def _shape_errors(shape: Sequence[ShapePoint], path: str) -> list[str]:
    if not shape:
        return [required(path, "at least one point must be specified")]
    errs: list[str] = []
    for i in range(1, len(shape)):
        if shape[i - 1].utilization >= shape[i].utilization:
            errs.append(
                invalid(f"{path}[{i}].utilization", shape[i].utilization, "values must be sorted in increasing order")
            )
            break
    for i, p in enumerate(shape):
        if not 0 <= p.utilization <= 100:
            errs.append(invalid(f"{path}[{i}].utilization", p.utilization, "not in valid range [0, 100]"))
        if not 0 <= p.score <= 10:
            errs.append(invalid(f"{path}[{i}].score", p.score, "not in valid range [0, 10]"))
    return errs


def _aggregate(errs: Sequence[str]) -> str:
    return errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"


def default_fit_args(args: NodeResourcesFitArgs | None) -> NodeResourcesFitArgs:
    """SetDefaults_NodeResourcesFitArgs."""
    args = args or NodeResourcesFitArgs()
    strategy = args.scoringStrategy or ScoringStrategyV1(
        type="LeastAllocated", resources=[ResourceSpecV1(name="cpu", weight=1), ResourceSpecV1(name="memory", weight=1)]
    )
    resources = strategy.resources or [ResourceSpecV1(name="cpu", weight=1), ResourceSpecV1(name="memory", weight=1)]
    resources = [r if r.weight != 0 else r.model_copy(update={"weight": 1}) for r in resources]
    return args.model_copy(update={"scoringStrategy": strategy.model_copy(update={"resources": resources})})


def fit_args_errors(args: NodeResourcesFitArgs, path: str = "") -> list[str]:
    """ValidateNodeResourcesFitArgs (NewFit calls it with a nil path)."""
    errs: list[str] = []
    for i, res in enumerate(args.ignoredResources):
        errs += _label_name_errors(f"{_child(path, 'ignoredResources')}[{i}]", res)
    for i, group in enumerate(args.ignoredResourceGroups):
        p = f"{_child(path, 'ignoredResourceGroups')}[{i}]"
        if "/" in group:
            errs.append(invalid(p, group, "resource group name can't contain '/'"))
        errs += _label_name_errors(p, group)
    sp = _child(path, "scoringStrategy")
    s = args.scoringStrategy
    if s is None:
        return [*errs, required(sp, "ScoringStrategy field is required")]
    if s.type not in _SCORE_STRATEGIES:
        errs.append(not_supported(f"{sp}.type", s.type, _SCORE_STRATEGIES))
    for i, r in enumerate(s.resources):
        if r.weight <= 0 or r.weight > 100:
            errs.append(
                invalid(
                    f"{sp}.resources[{i}].weight", r.weight, f"resource weight of {r.name} not in valid range (0, 100]"
                )
            )
    if s.type == "RequestedToCapacityRatio":
        if s.requestedToCapacityRatio is None:
            errs.append(
                required(f"{sp}.requestedToCapacityRatio", "must be specified when type is RequestedToCapacityRatio")
            )
        else:
            errs += _shape_errors(s.requestedToCapacityRatio.shape, f"{sp}.requestedToCapacityRatio.shape")
    elif s.requestedToCapacityRatio is not None:
        errs.append(
            forbidden(f"{sp}.requestedToCapacityRatio", "must be nil when type is not RequestedToCapacityRatio")
        )
    return errs


def _spread_errors(args: PodTopologySpreadArgs, path: str) -> list[str]:
    errs: list[str] = []
    dt = args.defaultingType
    if dt not in ("System", "List"):
        errs.append(not_supported(f"{path}.defaultingType", dt, ["System", "List"]))
    elif dt == "System" and args.defaultConstraints:
        errs.append(invalid(f"{path}.defaultingType", dt, "when .defaultConstraints are not empty"))
    cp = f"{path}.defaultConstraints"
    for i, c in enumerate(args.defaultConstraints):
        p = f"{cp}[{i}]"
        if c.maxSkew <= 0:
            errs.append(invalid(f"{p}.maxSkew", c.maxSkew, "not in valid range (0, inf)"))
        if not c.topologyKey:
            errs.append(required(f"{p}.topologyKey", "can not be empty"))
        else:
            errs += _label_name_errors(f"{p}.topologyKey", c.topologyKey)
        if not c.whenUnsatisfiable:
            errs.append(required(f"{p}.whenUnsatisfiable", "can not be empty"))
        elif c.whenUnsatisfiable not in ("DoNotSchedule", "ScheduleAnyway"):
            errs.append(
                not_supported(f"{p}.whenUnsatisfiable", c.whenUnsatisfiable, ["DoNotSchedule", "ScheduleAnyway"])
            )
        if c.labelSelector is not None:
            errs.append(
                forbidden(f"{p}.labelSelector", "constraint must not define a selector, as they deduced for each pod")
            )
        for other in args.defaultConstraints[:i]:
            if (other.topologyKey, other.whenUnsatisfiable) == (c.topologyKey, c.whenUnsatisfiable):
                errs.append(duplicate(p, f"{{{c.topologyKey}, {c.whenUnsatisfiable}}}"))
                break
    return errs


def _args_errors(name: str, args: _Args, path: str) -> list[str]:
    """validatePluginConfig's validators (NodeResourcesFit's is keyed "NodeResourcesFitArgs" there,
    so it runs only in NewFit); their aggregates flattened into the configuration's, as upstream."""
    if isinstance(args, DefaultPreemptionArgs):
        pct, absolute = args.minCandidateNodesPercentage or 0, args.minCandidateNodesAbsolute or 0
        errs = []
        if not 0 <= pct <= 100:
            errs.append(invalid(f"{path}.minCandidateNodesPercentage", pct, "not in valid range [0, 100]"))
        if absolute < 0:
            errs.append(invalid(f"{path}.minCandidateNodesAbsolute", absolute, "not in valid range [0, inf)"))
        if pct == 0 and absolute == 0:
            errs.append(
                invalid(
                    f"{path}.minCandidateNodesPercentage",
                    pct,
                    "cannot be zero at the same time as minCandidateNodesAbsolute",
                )
            )
            errs.append(
                invalid(
                    f"{path}.minCandidateNodesAbsolute",
                    absolute,
                    "cannot be zero at the same time as minCandidateNodesPercentage",
                )
            )
        return errs
    if isinstance(args, InterPodAffinityArgs):
        w = args.hardPodAffinityWeight if args.hardPodAffinityWeight is not None else 1
        return [] if 0 <= w <= 100 else [invalid(f"{path}.hardPodAffinityWeight", w, "not in valid range [0, 100]")]
    if isinstance(args, PodTopologySpreadArgs):
        errs = _spread_errors(args, path)
        return errs
    if isinstance(args, NodeResourcesBalancedAllocationArgs):
        errs = []
        seen: set[str] = set()
        for i, r in enumerate(args.resources):
            if r.name in seen:
                errs.append(duplicate(f"{path}.resources[{i}].name", r.name))
            seen.add(r.name)
            if r.weight != 1:
                errs.append(invalid(f"{path}.resources[{i}].weight", r.weight, "must be 1"))
        return errs
    if isinstance(args, VolumeBindingArgs):
        errs = []
        if (args.bindTimeoutSeconds or 0) < 0:
            errs.append(
                invalid(
                    f"{path}.bindTimeoutSeconds",
                    args.bindTimeoutSeconds,
                    "invalid BindTimeoutSeconds, should not be a negative value",
                )
            )
        errs += _shape_errors(args.shape, f"{path}.shape")
        return errs
    return []


def _default_args(name: str, args: _Args | None) -> _Args | None:
    """The args' v1 defaults (the plugins enabled get theirs even without a pluginConfig)."""
    if name == "NodeResourcesFit":
        return default_fit_args(args if isinstance(args, NodeResourcesFitArgs) else None)
    if name == "NodeResourcesBalancedAllocation":
        a = args if isinstance(args, NodeResourcesBalancedAllocationArgs) else NodeResourcesBalancedAllocationArgs()
        res = a.resources or [ResourceSpecV1(name="cpu", weight=1), ResourceSpecV1(name="memory", weight=1)]
        return a.model_copy(update={"resources": [r if r.weight else r.model_copy(update={"weight": 1}) for r in res]})
    if name == "PodTopologySpread":
        ts = args if isinstance(args, PodTopologySpreadArgs) else PodTopologySpreadArgs()
        return ts if ts.defaultingType else ts.model_copy(update={"defaultingType": "System"})
    if name == "InterPodAffinity":
        ip = args if isinstance(args, InterPodAffinityArgs) else InterPodAffinityArgs()
        return ip if ip.hardPodAffinityWeight is not None else ip.model_copy(update={"hardPodAffinityWeight": 1})
    if name == "DefaultPreemption":
        dp = args if isinstance(args, DefaultPreemptionArgs) else DefaultPreemptionArgs()
        return dp.model_copy(
            update={
                "minCandidateNodesPercentage": 10
                if dp.minCandidateNodesPercentage is None
                else dp.minCandidateNodesPercentage,
                "minCandidateNodesAbsolute": 100
                if dp.minCandidateNodesAbsolute is None
                else dp.minCandidateNodesAbsolute,
            }
        )
    if name == "VolumeBinding":
        vb = args if isinstance(args, VolumeBindingArgs) else VolumeBindingArgs()
        shape = vb.shape or [ShapePoint(utilization=0, score=10), ShapePoint(utilization=100, score=0)]
        return vb.model_copy(
            update={
                "bindTimeoutSeconds": 600 if vb.bindTimeoutSeconds is None else vb.bindTimeoutSeconds,
                "shape": shape,
            }
        )
    if name == "DynamicResources":
        dr = args if isinstance(args, DynamicResourcesArgs) else DynamicResourcesArgs()
        return dr.model_copy(
            update={"filterTimeout": dr.filterTimeout or "10s", "bindingTimeout": dr.bindingTimeout or "10m0s"}
        )
    if name == "NodeAffinity":
        return args if isinstance(args, NodeAffinityArgs) else NodeAffinityArgs()
    return args


# ---- the result --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedConfig:
    """What draxr runs from the file: the profile it serves, the queue's backoff and the volume
    binding timeout; ``not_applied``: fields set in the file that draxr's own flags govern."""

    profile: SchedulerProfile
    pod_initial_backoff_seconds: int
    pod_max_backoff_seconds: int
    percentage_of_nodes_to_score: int  # the profile's, else the global one (0: adaptive)
    volume_bind_timeout_seconds: int
    effective: Effective
    not_applied: tuple[str, ...] = ()


def load(text: str, scheduler_name: str, source: str = "") -> LoadedConfig:
    """Parse, default, validate; then draxr's own refusals. Raises ConfigError."""
    cfg = parse(text, source)
    return from_model(cfg, scheduler_name, source)


def from_model(cfg: KubeSchedulerConfiguration, scheduler_name: str, source: str = "") -> LoadedConfig:
    """kube-scheduler's way from a decoded file to a framework (decode the args, then
    ValidateKubeSchedulerConfiguration, then scheduler.New's frameworks), then draxr's own refusals
    and the served profile."""
    profiles = list(cfg.profiles) or [Profile()]
    if len(profiles) == 1 and profiles[0].schedulerName is None:
        profiles[0] = profiles[0].model_copy(update={"schedulerName": DEFAULT_SCHEDULER_NAME})
    decoded = _decoded_args(profiles, source)
    errs = _config_errors(cfg, profiles, decoded)
    if errs:
        raise ConfigError(errs, source)
    frameworks = [_framework(prof, args, source) for prof, args in zip(profiles, decoded, strict=True)]

    # draxr's own refusals.
    served = [i for i, p in enumerate(profiles) if p.schedulerName == scheduler_name]
    if not served:
        listed = ", ".join(p.schedulerName or "" for p in profiles)
        raise ConfigError(
            [
                f"no profile has schedulerName {json.dumps(scheduler_name)} (the name draxr serves, "
                f"--scheduler-name); the profiles are: {listed}"
            ],
            source,
        )
    i = served[0]
    refusals = _draxr_refusals(frameworks[i], decoded[i], f"profiles[{i}]")
    if cfg.extenders:
        refusals.append("extenders: draxr does not call scheduler extenders")
    if refusals:
        raise ConfigError(refusals, source)

    args = {n: _default_args(n, decoded[i].get(n)) for n in IMPLEMENTS}
    profile = _profile(profiles[i], frameworks[i], args, cfg.percentageOfNodesToScore)
    vb = args["VolumeBinding"]
    assert isinstance(vb, VolumeBindingArgs)
    initial, maximum = _backoff(cfg)
    return LoadedConfig(
        profile,
        initial,
        maximum,
        profile.percentage_of_nodes_to_score or 0,
        vb.bindTimeoutSeconds or 0,
        frameworks[i],
        _not_applied(cfg, profiles, i, scheduler_name),
    )


def _backoff(cfg: KubeSchedulerConfiguration) -> tuple[int, int]:
    """podInitialBackoffSeconds and podMaxBackoffSeconds, defaulted (1 and 10)."""
    initial = 1 if cfg.podInitialBackoffSeconds is None else cfg.podInitialBackoffSeconds
    maximum = 10 if cfg.podMaxBackoffSeconds is None else cfg.podMaxBackoffSeconds
    return initial, maximum


def _decoded_args(profiles: list[Profile], source: str) -> list[dict[str, _Args | None]]:
    """Each profile's plugin args by plugin name (the first entry of a name), as the decoder
    refuses them: every decoding error at once."""
    errs: list[str] = []
    decoded: list[dict[str, _Args | None]] = []
    for i, prof in enumerate(profiles):
        args: dict[str, _Args | None] = {}
        for j, pc in enumerate(prof.pluginConfig):
            a, e = _args(pc.name, pc.args, f"profiles[{i}].pluginConfig[{j}].args")
            errs += e
            args.setdefault(pc.name, a)
        decoded.append(args)
    if errs:
        raise ConfigError(errs, source)
    return decoded


def _config_errors(
    cfg: KubeSchedulerConfiguration, profiles: list[Profile], decoded: list[dict[str, _Args | None]]
) -> list[str]:
    """ValidateKubeSchedulerConfiguration's errors, in its order."""
    errs: list[str] = []
    initial, maximum = _backoff(cfg)
    parallelism = 16 if cfg.parallelism is None else cfg.parallelism
    le = cfg.leaderElection or {}
    if le.get("leaderElect", True) and le.get("resourceLock", "leases") != "leases":
        errs.append(
            invalid("leaderElection.resourceLock", le.get("resourceLock"), 'resourceLock value must be "leases"')
        )
    if parallelism <= 0:
        errs.append(invalid("parallelism", parallelism, "should be an integer value greater than zero"))
    names: dict[str, int] = {}
    for i, prof in enumerate(profiles):
        errs += _profile_errors(prof, decoded[i], f"profiles[{i}]")
        name = prof.schedulerName or ""
        if name in names:
            errs.append(duplicate(f"profiles[{i}].schedulerName", {}))
        names[name] = i
    errs += _queue_sort_errors(profiles)
    pct = 0 if cfg.percentageOfNodesToScore is None else cfg.percentageOfNodesToScore
    if cfg.percentageOfNodesToScore is not None and not 0 <= pct <= 100:
        errs.append(invalid("percentageOfNodesToScore", pct, "not in valid range [0-100]"))
    if initial <= 0:
        errs.append(invalid("podInitialBackoffSeconds", initial, "must be greater than 0"))
    if maximum < initial:
        errs.append(
            invalid("podMaxBackoffSeconds", maximum, "must be greater than or equal to PodInitialBackoffSeconds")
        )
    return errs


def _profile_errors(prof: Profile, decoded: Mapping[str, _Args | None], path: str) -> list[str]:
    """validateKubeSchedulerProfile's errors for one profile (its name, percentage, plugins and
    plugin args; not the duplicate name, which needs the others)."""
    errs: list[str] = []
    if not prof.schedulerName:
        errs.append(required(f"{path}.schedulerName"))
    if prof.percentageOfNodesToScore is not None and not 0 <= prof.percentageOfNodesToScore <= 100:
        errs.append(
            invalid(f"{path}.percentageOfNodesToScore", prof.percentageOfNodesToScore, "not in valid range [0-100]")
        )
    if prof.plugins is not None:
        for point in _POINTS:
            for k, p in enumerate(getattr(prof.plugins, point).enabled):
                if p.name in _INVALID_IN_V1:
                    errs.append(invalid(f"{path}.plugins.{point}.enabled[{k}]", p.name, _INVALID_DETAIL))
    seen: set[str] = set()
    for j, pc in enumerate(prof.pluginConfig):
        p = f"{path}.pluginConfig[{j}]"
        if pc.name in seen:
            errs.append(duplicate(p, pc.name))
        seen.add(pc.name)
        if pc.name in _INVALID_IN_V1:
            errs.append(invalid(p, pc.name, _INVALID_DETAIL))
            continue
        a = _default_args(pc.name, decoded.get(pc.name))
        if a is not None and pc.name != "NodeResourcesFit":
            errs += _args_errors(pc.name, a, f"{p}.args")
    return errs


def _queue_sort_errors(profiles: list[Profile]) -> list[str]:
    """One queue sort plugin, the same in every profile."""
    if not profiles:
        return []
    errs: list[str] = []
    qs0 = merged_plugins(profiles[0].plugins)["queueSort"]
    if len(qs0.enabled) > 1:
        errs.append(
            invalid(
                "profiles[0].plugins.queueSort.Enabled", len(qs0.enabled), "only one queue sort plugin can be enabled"
            )
        )
    for k in range(1, len(profiles)):
        qs = merged_plugins(profiles[k].plugins)["queueSort"]
        if (qs.enabled, qs.disabled) != (qs0.enabled, qs0.disabled):
            errs.append(
                invalid(f"profiles[{k}].plugins.queueSort", _plugin_set_json(qs), "must be the same for all profiles")
            )
    return errs


def _framework(prof: Profile, decoded: Mapping[str, _Args | None], source: str) -> Effective:
    """scheduler.New's framework for one profile: its plugins by extension point, and
    NodeResourcesFit's args checked when it is enabled (upstream checks them only there)."""
    name = prof.schedulerName or ""
    try:
        eff = effective(merged_plugins(prof.plugins))
        enabled_names = {n for p in eff.points.values() for n in p}
        fit = decoded.get("NodeResourcesFit")
        if "NodeResourcesFit" in enabled_names:
            fe = fit_args_errors(default_fit_args(fit if isinstance(fit, NodeResourcesFitArgs) else None))
            if fe:
                raise ValueError(f'initializing plugin "NodeResourcesFit": {_aggregate(fe)}')
    except ValueError as e:
        msg = str(e).replace("%s", json.dumps(name))
        raise ConfigError([f"initializing profiles: creating profile for scheduler name {name}: {msg}"], source) from e
    return eff


def _not_applied(
    cfg: KubeSchedulerConfiguration, profiles: list[Profile], served: int, scheduler_name: str
) -> tuple[str, ...]:
    """What the file sets that draxr validates but does not apply, for the start-up log."""
    out = tuple(
        f"{key}: set by draxr's own flags, not applied from the file"
        for key in ("parallelism", "leaderElection", "clientConnection", "enableProfiling", "enableContentionProfiling")
        if getattr(cfg, key) is not None
    )
    if cfg.delayCacheUntilActive:
        out += ("delayCacheUntilActive: not applied (draxr lists and watches from the start)",)
    return out + tuple(
        f"profiles[{j}] (schedulerName {p.schedulerName}): validated, not run (draxr serves {scheduler_name})"
        for j, p in enumerate(profiles)
        if j != served
    )


def _draxr_refusals(eff: Effective, decoded: Mapping[str, _Args | None], path: str) -> list[str]:
    """What draxr does not run: every extension point but score and preScore must be the default
    profile's; score may drop plugins and change weights."""
    default = _default_effective()
    out: list[str] = []
    for point, _ in EXTENSION_POINTS:
        if point in ("score", "preScore"):
            continue
        have, want = eff.points[point], default.points[point]
        if set(have) != set(want):
            extra = sorted(set(have) - set(want))
            missing = sorted(set(want) - set(have))
            what = "; ".join(
                x
                for x in (
                    f"enabled {', '.join(extra)}" if extra else "",
                    f"disabled {', '.join(missing)}" if missing else "",
                )
                if x
            )
            out.append(
                f"{path}.plugins.{point}: {what}: draxr runs kube-scheduler's default plugins at {point} "
                f"({', '.join(want)}) and does not support changing them"
            )
    extra_score = sorted(set(eff.points["score"]) - set(default.points["score"]))
    if extra_score:
        out.append(f"{path}.plugins.score: enabled {', '.join(extra_score)}: draxr does not run these score plugins")
    # A Score whose PreScore is off reads no PreScore state (upstream's plugin fails the cycle):
    # refused. A PreScore without its Score changes nothing and is accepted.
    missing = sorted(
        p for p in default.points["preScore"] if p in eff.points["score"] and p not in eff.points["preScore"]
    )
    if missing:
        out.append(
            f"{path}.plugins.preScore: disabled {', '.join(missing)} while their Score is enabled: "
            "not supported by draxr"
        )
    args = {n: _default_args(n, decoded.get(n)) for n in IMPLEMENTS}
    fit = args["NodeResourcesFit"]
    assert isinstance(fit, NodeResourcesFitArgs)
    if fit.ignoredResources or fit.ignoredResourceGroups:
        out.append(f"{path}: NodeResourcesFit ignoredResources/ignoredResourceGroups: not supported by draxr")
    ba = args["NodeResourcesBalancedAllocation"]
    assert isinstance(ba, NodeResourcesBalancedAllocationArgs)
    if [r.name for r in ba.resources] != ["cpu", "memory"]:
        out.append(
            f"{path}: NodeResourcesBalancedAllocation resources other than cpu and memory: not supported by draxr"
        )
    spread = args["PodTopologySpread"]
    assert isinstance(spread, PodTopologySpreadArgs)
    if any(c.matchLabelKeys for c in spread.defaultConstraints):
        out.append(f"{path}: PodTopologySpread defaultConstraints with matchLabelKeys: not supported by draxr")
    ipa = args["InterPodAffinity"]
    assert isinstance(ipa, InterPodAffinityArgs)
    if ipa.ignorePreferredTermsOfExistingPods:
        out.append(f"{path}: InterPodAffinity ignorePreferredTermsOfExistingPods: not supported by draxr")
    na = args["NodeAffinity"]
    assert isinstance(na, NodeAffinityArgs)
    if na.addedAffinity:
        out.append(f"{path}: NodeAffinity addedAffinity: not supported by draxr")
    dp = args["DefaultPreemption"]
    assert isinstance(dp, DefaultPreemptionArgs)
    if (dp.minCandidateNodesPercentage, dp.minCandidateNodesAbsolute) != (10, 100):
        out.append(
            f"{path}: DefaultPreemption minCandidateNodesPercentage/minCandidateNodesAbsolute other than the "
            "defaults (10, 100): not supported by draxr"
        )
    vb = args["VolumeBinding"]
    assert isinstance(vb, VolumeBindingArgs)
    if [(p.utilization, p.score) for p in vb.shape] != [(0, 10), (100, 0)]:
        out.append(f"{path}: VolumeBinding shape other than the default: not supported by draxr")
    dr = args["DynamicResources"]
    assert isinstance(dr, DynamicResourcesArgs)
    if (dr.filterTimeout, dr.bindingTimeout) != ("10s", "10m0s"):
        out.append(
            f"{path}: DynamicResources filterTimeout/bindingTimeout other than the defaults: not supported by draxr"
        )
    return out


def _profile(
    prof: Profile, eff: Effective, args: Mapping[str, _Args | None], global_percentage: int | None
) -> SchedulerProfile:
    fit = args["NodeResourcesFit"]
    assert isinstance(fit, NodeResourcesFitArgs)
    assert fit.scoringStrategy is not None
    s = fit.scoringStrategy
    shape = (
        tuple((p.utilization, p.score) for p in s.requestedToCapacityRatio.shape) if s.requestedToCapacityRatio else ()
    )
    strategy = FitStrategy(ScoringType(s.type), tuple(ResourceSpec(r.name, r.weight) for r in s.resources), shape)
    spread = args["PodTopologySpread"]
    assert isinstance(spread, PodTopologySpreadArgs)
    defaults: tuple[DefaultConstraint, ...] | None = None
    if spread.defaultingType == "List":
        defaults = tuple(
            DefaultConstraint(
                c.maxSkew,
                c.topologyKey,
                c.whenUnsatisfiable == "DoNotSchedule",
                c.minDomains if c.minDomains is not None else 1,
                (c.nodeAffinityPolicy or "Honor") == "Honor",
                (c.nodeTaintsPolicy or "Ignore") == "Honor",
            )
            for c in spread.defaultConstraints
        )
    ipa = args["InterPodAffinity"]
    assert isinstance(ipa, InterPodAffinityArgs)
    return SchedulerProfile(
        scheduler_name=prof.schedulerName or "",
        weights=tuple((n, eff.weights[n]) for n in eff.points["score"]),
        fit=strategy,
        spread_defaults=defaults,
        hard_pod_affinity_weight=ipa.hardPodAffinityWeight if ipa.hardPodAffinityWeight is not None else 1,
        percentage_of_nodes_to_score=(
            prof.percentageOfNodesToScore if prof.percentageOfNodesToScore is not None else global_percentage
        ),
    )
