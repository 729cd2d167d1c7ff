"""Semantic versions exactly as github.com/blang/semver/v4 parses and orders them.

Kubernetes uses blang/semver for DRA `version` attributes (`semver.Parse` in
k8s.io/dynamic-resource-allocation cel/compile.go) and for the CEL `semver()` library
(k8s.io/apiserver pkg/cel/library/semverlib.go), so both the accepted syntax and the
ordering here follow that library, quirks included:

- numeric identifiers are uint64; leading zeros are rejected in major/minor/patch and in
  numeric pre-release identifiers;
- `-` counts as an alphanumeric character (also in build metadata);
- pre-release identifiers compare numeric < alphanumeric, alphanumerics byte-wise;
- build metadata is parsed and validated but ignored by `compare`.
"""

from __future__ import annotations

from dataclasses import dataclass

from draxr.core.limits import UINT64_MAX

__all__ = ["Semver", "parse_semver", "parse_semver_normalized"]

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")


@dataclass(frozen=True, slots=True)
class Semver:
    """A parsed version. `==` is structural (like comparing the version strings); use `compare` for precedence."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()  # int: numeric identifier, str: alphanumeric identifier
    build: tuple[str, ...] = ()

    def __str__(self) -> str:
        out = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            out += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            out += "+" + ".".join(self.build)
        return out

    def without_build(self) -> str:
        """The string of the version's precedence: equal strings <=> `compare(...) == 0`."""
        out = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            out += "-" + ".".join(str(p) for p in self.pre)
        return out

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 (blang's `Version.Compare`)."""
        a = (self.major, self.minor, self.patch)
        b = (other.major, other.minor, other.patch)
        if a != b:
            return 1 if a > b else -1
        if not self.pre or not other.pre:
            # A version without pre-release ranks above one with it.
            return (not self.pre) - (not other.pre)
        for x, y in zip(self.pre, other.pre, strict=False):
            c = _compare_pre(x, y)
            if c:
                return c
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))


def _compare_pre(x: int | str, y: int | str) -> int:
    if isinstance(x, int) != isinstance(y, int):
        return -1 if isinstance(x, int) else 1  # numeric identifiers rank lower
    if isinstance(x, int) and isinstance(y, int):
        return (x > y) - (x < y)
    sx, sy = str(x), str(y)
    return (sx > sy) - (sx < sy)  # ASCII only, so str order == Go's byte order


def _quote(s: str) -> str:
    # Go's %q, close enough for error messages.
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _contains_only(s: str, allowed: frozenset[str]) -> bool:
    return all(c in allowed for c in s)


def _has_leading_zeroes(s: str) -> bool:
    return len(s) > 1 and s[0] == "0"


def _parse_uint(s: str) -> int:
    # Mirrors strconv.ParseUint(s, 10, 64); callers have already checked the characters.
    if not s:
        raise ValueError('strconv.ParseUint: parsing "": invalid syntax')
    v = int(s)
    if v > UINT64_MAX:
        raise ValueError(f'strconv.ParseUint: parsing "{s}": value out of range')
    return v


def _parse_number(s: str, what: str) -> int:
    if not _contains_only(s, _NUMBERS):
        raise ValueError(f"Invalid character(s) found in {what} number {_quote(s)}")
    if _has_leading_zeroes(s):
        raise ValueError(f"{what.capitalize()} number must not contain leading zeroes {_quote(s)}")
    return _parse_uint(s)


def _parse_pre(s: str) -> int | str:
    if not s:
        raise ValueError("Prerelease is empty")
    if _contains_only(s, _NUMBERS):
        if _has_leading_zeroes(s):
            raise ValueError(f"Numeric PreRelease version must not contain leading zeroes {_quote(s)}")
        return _parse_uint(s)
    if _contains_only(s, _ALPHANUM):
        return s
    raise ValueError(f"Invalid character(s) found in prerelease {_quote(s)}")


def parse_semver(s: str) -> Semver:
    """blang/semver `Parse`: strict SemVer 2.0.0; ValueError with blang's message otherwise."""
    if not s:
        raise ValueError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major = _parse_number(parts[0], "major")
    minor = _parse_number(parts[1], "minor")
    patch_str = parts[2]
    build: list[str] = []
    pre: list[str] = []
    # Build metadata is split off first, so a '-' after '+' belongs to the build.
    if (i := patch_str.find("+")) != -1:
        build = patch_str[i + 1 :].split(".")
        patch_str = patch_str[:i]
    if (i := patch_str.find("-")) != -1:
        pre = patch_str[i + 1 :].split(".")
        patch_str = patch_str[:i]
    patch = _parse_number(patch_str, "patch")
    parsed_pre = tuple(_parse_pre(p) for p in pre)
    for b in build:
        if not b:
            raise ValueError("Build meta data is empty")
        if not _contains_only(b, _ALPHANUM):
            raise ValueError(f"Invalid character(s) found in build meta data {_quote(b)}")
    return Semver(major, minor, patch, parsed_pre, tuple(build))


def parse_semver_normalized(s: str) -> Semver:
    """`semver(s, true)` in Kubernetes CEL (semverlib.go `normalizeAndParse`).

    Drops one leading "v", strips leading zeros of the first three dot-separated parts and
    pads "1" / "1.2" to three components. Unlike blang's ParseTolerant it does not trim spaces.
    """
    if s.startswith("v"):
        s = s[1:]
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _NUMBERS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))
