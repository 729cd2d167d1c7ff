"""CEL for DRA device selectors, with the semantics of the Kubernetes scheduler.

A port of k8s.io/dynamic-resource-allocation v0.37.2 `cel/compile.go` (StoredExpressions
environment, which is what kube-scheduler compiles selectors with) on top of cel-expr-python
(cel-cpp), in rooms by concern:

    selector  the environment, compiling (with a cache) and evaluating selectors
    library   the Kubernetes CEL library functions and their declarations
    device    DeviceView: what a selector sees of a device
    values    Quantity and Semver as cel-cpp values
    check     upstream's type checks that cel-cpp does not make
    errors    CelCompileError, CelRuntimeError

The `device` variable
    `device.driver` (string), `device.allowMultipleAllocations` (bool),
    `device.attributes[domain][id]` (int, bool, string, semver, or lists of those) and
    `device.capacity[domain][id]` (quantity). Names without a domain belong to the driver's
    domain. An unknown domain is an empty map; a missing id inside a domain is a runtime error
    ("no such key"), which the allocator treats as fatal for the pod's scheduling attempt.

Enabled, mirroring the Kubernetes base environment (apiserver `environment/base.go`) plus DRA:
    - standard CEL (macros, `matches`, string/list/map functions, timestamps/durations)
    - `cel.bind` (ext.Bindings v0), optional types (`.?x`, `[?k]`, `orValue`, ...)
    - ext.Strings v2, ext.Sets, ext.Lists (cel-cpp v2 == cel-go v3 functions), two-variable
      comprehensions (`all(k, v, ...)`, `exists(k, v, ...)`, `transformList`)
    - Kubernetes quantity library: `quantity`, `isQuantity`, `sign` (global only: upstream
      declares no member overload, so `q.sign()` is a compile error), `isGreaterThan`,
      `isLessThan`, `compareTo`, `add`, `sub`, `isInteger`, `asInteger`, `asApproximateFloat`
    - Kubernetes semver library v1: `semver(s[, normalize])`, `isSemver(s[, normalize])`,
      `major`, `minor`, `patch`, `isGreaterThan`, `isLessThan`, `compareTo`
    - DRA `includes` (scalar equality or membership in the first 48 list elements; in the
      StoredExpressions environment since 1.36 regardless of the DRAListTypeAttributes gate)
    - Kubernetes lists library: `isSorted`, `sum`, `min`, `max`
    - Kubernetes regex library: `find`, `findAll` (RE2, as Go's regexp: linear time)

Not available (cel-expr-python 0.1.3 cannot provide them, or they make no sense here):
    - list `indexOf` / `lastIndexOf` (cel-cpp's strings extension owns those names and an
      extension's function cannot be extended from Python); URL, IP, CIDR, format, image and
      authz libraries; quantity `mul`/`div`/`divInt` (only in newer apiserver versions)
    - `transformMap`/`transformMapEntry` compile but fail at runtime in cel-cpp
    - the runtime cost limit (1e6): cel-expr-python exposes no cost tracking, iteration limit or
      interrupt. Expressions longer than 10 KiB (the API validation limit) are rejected.

Cross-type numeric ordering: upstream's environment has CrossTypeNumericComparisons (`1 < 1.5`,
`q.asApproximateFloat() > 1`); cel-cpp's checker has no overloads for them (and takes none from
Python). When they are its only complaint, the expression is compiled without the checker (the
runtime compares int, uint and double as upstream does), so draxr's extra checks (cel.check) do
not run on it.

Unknown domains: cel-cpp maps cannot default a missing key, so when an evaluation fails with a
missing string key that is not a domain of both maps, that key is added as an empty domain and
the selector is evaluated again (up to 8 times, activations cached per device); the error is
reported only if it persists. Results differ from upstream only where an expression indexes a
missing domain *and* its outcome depends on that domain's membership (`in`, `size()`, iteration
of `device.attributes`), and for `has(device.attributes.dom)` / `device.attributes[?"dom"]`,
which upstream reports as present for every domain and cel-cpp as absent.

Cost: without a runtime limit, protection against runaway selectors comes from the API server,
which rejects selectors whose estimated worst-case cost exceeds the same 1e6 limit.

Representation: cel-expr-python cannot pass opaque Python objects, so Quantity and Semver
values are one-entry maps `{"kubernetes.Quantity": <canonical decimal>}` and
`{"kubernetes.Semver": <version without build metadata>}`, and `device` is a
`map(string, dyn)` rather than upstream's `kubernetes.DRADevice` object. The canonical forms
make CEL's structural `==` agree with upstream (numeric equality for quantities, precedence
equality for versions).

Static checks: after cel-cpp has compiled an expression, draxr.core.cel.check re-derives
upstream's types on the checked AST and reports what cel-go would: mixed-type list and map
literals (the Kubernetes environment enables HomogeneousAggregateLiterals), unknown fields and
map operations on `device`, comparisons and Kubernetes library calls whose argument types
upstream has no overload for (`device.driver == 1`, `quantity("1").compareTo(semver("1.0.0"))`,
`["a"].sum()`), and a non-bool result type (`device.driver`). Through `dyn(...)` these remain
runtime errors, as upstream. Visible differences: `type(quantity("1"))` is `map`, and
`isInteger` / `asInteger` judge the value ("1000m" is an integer) where upstream also depends on
the internal representation (it rejects "1000m", and large binary-suffixed values like "128Ti").
"""

from draxr.core.cel.device import DeviceView, converts_surely, device_view
from draxr.core.cel.errors import CelCompileError, CelRuntimeError
from draxr.core.cel.selector import MAX_EXPRESSION_LENGTH, CompiledSelector, compile_selector
from draxr.core.cel.values import QUANTITY_TAG, SEMVER_TAG, InvalidValue

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "QUANTITY_TAG",
    "SEMVER_TAG",
    "CelCompileError",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceView",
    "InvalidValue",
    "compile_selector",
    "converts_surely",
    "device_view",
]
