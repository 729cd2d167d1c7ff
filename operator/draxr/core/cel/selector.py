"""Compiling and evaluating DRA CEL selectors, as kube-scheduler does.

A port of k8s.io/dynamic-resource-allocation v0.37.2 `cel/compile.go` (the StoredExpressions
environment, which kube-scheduler compiles selectors with) on top of cel-expr-python (cel-cpp):
the environment, the cache of compiled programs, type checks (draxr.core.cel.check) and
evaluation with DRA's rule that an unknown domain is an empty map.
"""

from __future__ import annotations

import ast
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from cel_expr_python import cel

from draxr.core.cel.check import DYN as _UNCHECKED_OUTPUT
from draxr.core.cel.check import CheckResult, check_checked_expr, format_issues
from draxr.core.cel.device import DeviceView
from draxr.core.cel.errors import CelCompileError, CelRuntimeError
from draxr.core.cel.library import functions
from draxr.core.limits import CEL_SELECTOR_EXPRESSION_MAX_LENGTH

__all__ = ["MAX_EXPRESSION_LENGTH", "CompiledSelector", "compile_selector"]

# The API server rejects longer selectors.
MAX_EXPRESSION_LENGTH: Final = CEL_SELECTOR_EXPRESSION_MAX_LENGTH
# Compiled programs kept; upstream keeps 10, but compiling costs us more than it costs Go.
_CACHE_SIZE: Final = 256
# Each retry defaults one more unknown domain to an empty map (see CompiledSelector.matches).
_MAX_DOMAIN_RETRIES: Final = 8
# Extra-domain activations kept per device, beyond the plain one.
_MAX_CACHED_ACTIVATIONS: Final = 16
# Devices whose activations are kept, per thread (the oldest's are dropped). An activation holds
# the device converted into CEL values (~5 KiB each: 200 MiB at 5,000 nodes x 8 devices once the
# packing has reached them all); remaking one costs ~7 us on top of its evaluation (~4 us), and
# the allocator caches selector results per (expression, device), so few evaluations remake one.
_MAX_DEVICES_WITH_ACTIVATIONS = 4096
_HELD = threading.local()  # .devices: OrderedDict[int, DeviceView], oldest first

_T = cel.Type

_ENV_CONFIG: Final = """
name: draxr-dra-device-selectors
extensions:
  - name: bindings
    version: 0
  - name: optional
  - name: strings
    version: 2
  - name: sets
  - name: lists
    version: 2
  - name: two-var-comprehensions
"""

_ENV: Final = cel.NewEnv(
    config=cel.NewEnvConfigFromYaml(_ENV_CONFIG),
    variables={"device": _T.Map(_T.STRING, _T.DYN)},
    functions=functions(),
)


def _activations(dev: DeviceView) -> dict[tuple[str, ...], Any]:
    """The view's activations made on this thread. cel-expr-python ties an activation to the thread
    that made it: on another thread, a library function that returns an error (``semver("bad")``)
    fails with INTERNAL "No PyCelArena found" instead of the error value."""
    thread = threading.get_ident()
    acts = dev._activations.get(thread)
    if acts is None:
        acts = dev._activations[thread] = {}
        held: OrderedDict[int, DeviceView] | None = getattr(_HELD, "devices", None)
        if held is None:
            held = _HELD.devices = OrderedDict()
        held[id(dev)] = dev  # (held: its id stays unique while it is listed)
        while len(held) > _MAX_DEVICES_WITH_ACTIVATIONS:
            _, oldest = held.popitem(last=False)
            oldest._activations.pop(thread, None)
    return acts


def _activation(dev: DeviceView, extra_domains: tuple[str, ...]) -> Any:
    """The CEL activation of `dev`, with these unknown domains added as empty maps (cached on the view)."""
    acts = _activations(dev)
    act = acts.get(extra_domains)
    if act is not None:
        return act
    device = dev.cel_value()
    if extra_domains:
        attributes, capacity = dict(device["attributes"]), dict(device["capacity"])
        for domain in extra_domains:
            attributes.setdefault(domain, {})
            capacity.setdefault(domain, {})
        device = {**device, "attributes": attributes, "capacity": capacity}
    act = _ENV.Activation({"device": device})
    if not extra_domains or len(acts) < _MAX_CACHED_ACTIVATIONS:
        acts[extra_domains] = act
    return act


_STATUS_PREFIX: Final = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX: Final = re.compile(r"\s*\[[A-Z_]+\]$")
_MISSING_KEY: Final = re.compile(r"Key not found in map : (.*)$", re.DOTALL)


def _strip_status(message: str) -> str:
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", message.strip()))


def _missing_key(message: str) -> str | None:
    """The string key of a cel-cpp "Key not found in map" error, else None."""
    m = _MISSING_KEY.search(message)
    if m is None:
        return None
    quoted = m.group(1).strip()
    if len(quoted) < 2 or quoted[0] not in "\"'" or quoted[-1] != quoted[0]:
        return None  # a non-string key: never a domain
    try:
        key = ast.literal_eval(quoted)
    except (ValueError, SyntaxError):
        return quoted[1:-1]
    return key if isinstance(key, str) else None


def _describe_device(dev: DeviceView, limit: int = 400) -> str:
    def names(groups: Mapping[str, Any]) -> str:
        return "; ".join(f"{d}: {', '.join(sorted(ids))}" for d, ids in sorted(groups.items())) or "none"

    text = f"attributes [{names(dev.attributes)}], capacity [{names(dev.capacity)}]"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# `device.driver == "<literal without escapes>"`, the commonest class selector (CEL whitespace only).
_DRIVER_EQUALS: Final = re.compile(r'[ \t\n\r\f]*device\.driver[ \t\n\r\f]*==[ \t\n\r\f]*"([^"\\\n\r]*)"[ \t\n\r\f]*')


class CompiledSelector:
    """A compiled, type-checked selector; `matches` evaluates it against one device."""

    __slots__ = ("_driver", "_program", "expression")

    def __init__(self, expression: str, program: cel.Expression) -> None:
        self.expression = expression
        self._program = program
        # `device.driver == "x"` is answered without an activation: the device is still converted
        # first, so a device that fails conversion fails this selector too, with the same error.
        m = _DRIVER_EQUALS.fullmatch(expression)
        self._driver: str | None = m.group(1) if m is not None else None

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    @property
    def driver_equals(self) -> str | None:
        """The literal of a `device.driver == "<literal>"` selector, else None. Such a selector
        is answered by `device.driver == literal` on any device that converts (see matches)."""
        return self._driver

    def matches(self, dev: DeviceView) -> bool:
        """True/False; CelRuntimeError for evaluation errors and non-bool results."""
        if self._driver is not None:
            dev.check_conversion()
            return dev.driver == self._driver
        extras: tuple[str, ...] = ()
        while True:
            act = _activation(dev, extras)
            try:
                result = self._program.eval(act)
            except RuntimeError as exc:  # planning failures surface as exceptions, not error values
                raise CelRuntimeError(self._failure(dev, _strip_status(str(exc)))) from None
            value = result.value()
            if value.__class__ is bool:
                return bool(value)
            if result.type() != _T.ERROR:
                raise CelRuntimeError(
                    self._failure(dev, f"CEL result of type {_result_type(result)} could not be converted to bool")
                )
            message = str(value)
            key = _missing_key(message)
            if key is None:
                raise CelRuntimeError(self._failure(dev, _strip_status(message)))
            # Upstream returns an empty map for an unknown domain; cel-cpp errors instead. Add the
            # key as an empty domain and retry: if it was a domain the error goes away, if it was
            # a missing attribute the same error comes back and is reported.
            unknown = key not in dev.attributes or key not in dev.capacity
            if unknown and key not in extras and len(extras) < _MAX_DOMAIN_RETRIES:
                extras = (*extras, key)
                continue
            # The allocator appends upstream's hint (has(), optional chaining); say what is there.
            detail = f"no such key: {key}; the device has {_describe_device(dev)}"
            raise CelRuntimeError(self._failure(dev, detail))

    def _failure(self, dev: DeviceView, detail: str) -> str:
        who = f"device {dev.name!r} of driver {dev.driver!r}" if dev.name else f"a device of driver {dev.driver!r}"
        return f"CEL selector {self.expression!r} failed on {who}: {detail}"


def _result_type(result: cel.Value) -> str:
    return str(result.type().name()).lower()


_PROBES = threading.local()  # one probe activation per thread (see _activations)


def _probe() -> Any:
    probe = getattr(_PROBES, "activation", None)
    if probe is None:
        probe = _PROBES.activation = _ENV.Activation(
            {"device": {"driver": "", "allowMultipleAllocations": False, "attributes": {}, "capacity": {}}}
        )
    return probe


_CACHE: OrderedDict[str, CompiledSelector] = OrderedDict()


_CACHE_LOCK = threading.Lock()


def compile_selector(expression: str) -> CompiledSelector:
    """Compile (or fetch from the cache) a selector; CelCompileError if it is invalid.

    Like upstream, only successful compilations are cached.
    """
    with _CACHE_LOCK:
        hit = _CACHE.get(expression)
        if hit is not None:
            _CACHE.move_to_end(expression)
            return hit
    selector = _compile(expression)
    with _CACHE_LOCK:
        _CACHE[expression] = selector
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return selector


_CHECKER_ISSUE: Final = re.compile(r"^ERROR: <input>:\d+:\d+: (.*)$", re.MULTILINE)
_CROSS_NUMERIC: Final = re.compile(
    r"found no matching overload for '_(?:<|<=|>|>=)_' applied to '\((?:int|uint|double), (?:int|uint|double)\)'"
)


def _only_cross_numeric_comparisons(message: str) -> bool:
    """Every issue of a cel-cpp check failure is an ordering of two different numeric types."""
    issues = _CHECKER_ISSUE.findall(message)
    return bool(issues) and all(_CROSS_NUMERIC.fullmatch(i) for i in issues)


def _compile(expression: str) -> CompiledSelector:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            f"compilation failed: expression is {len(expression)} characters long, the limit is {MAX_EXPRESSION_LENGTH}"
        )
    try:
        program = _ENV.compile(expression)
    except RuntimeError as exc:
        message = _strip_status(str(exc))
        if not _only_cross_numeric_comparisons(message):
            raise CelCompileError(f"compilation failed: {message}") from None
        # Upstream's environment has CrossTypeNumericComparisons (`q.asApproximateFloat() > 1`,
        # `1 < 1.5`); cel-cpp's checker has no such overloads and cannot be given them, but its
        # runtime compares int, uint and double. The checker found nothing else: run unchecked.
        program = _ENV.compile(expression, disable_check=True)
        checked = CheckResult([], _UNCHECKED_OUTPUT)
    else:
        # What cel-go checks and cel-cpp does not (see cel.check): homogeneous list and map
        # literals, device fields, the argument types of the Kubernetes library functions.
        try:
            checked = check_checked_expr(program.serialize())
        except (ValueError, IndexError, RecursionError):  # an AST cel.check cannot read: skip its checks
            checked = CheckResult([], _UNCHECKED_OUTPUT)
    if checked.issues:
        raise CelCompileError(f"compilation failed: {format_issues(expression, checked.issues)}")
    try:
        # cel-cpp plans a program on first evaluation and raises (instead of returning an error
        # value) for functions it declares but cannot run, e.g. transformMap. Surface that now.
        program.eval(_probe())
    except RuntimeError as exc:
        detail = _strip_status(str(exc))
        raise CelCompileError(f"compilation failed: not supported by this CEL runtime: {detail}") from None
    # A bare attribute (`device.attributes["d"].flag`) is dyn, and may be a bool at runtime.
    # Upstream's type decides (`device.driver` is a string there, dyn here).
    output_error = checked.output_type_error()
    if output_error is not None:
        raise CelCompileError(output_error)
    output = program.return_type()
    if output != _T.BOOL and output != _T.DYN:
        raise CelCompileError(f"must evaluate to bool or the unknown type, not {output.name().lower()}")
    return CompiledSelector(expression, program)
