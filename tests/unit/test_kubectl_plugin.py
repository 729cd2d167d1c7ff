"""`kubectl draxr`'s flag handling: kubectl's flags before or after the subcommand, its outputs,
and which kubeconfig it reads (the plugin run by kubectl: tests/integration/test_kubectl_plugin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from draxr.kubectl_plugin import _kubeconfig_path, parser


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "team", "explain", "p"],
        ["explain", "p", "-n", "team"],
        ["explain", "--namespace=team", "p"],
        ["--namespace", "team", "explain", "p"],
    ],
)
def test_namespace_before_or_after_the_subcommand(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    assert (args.cmd, args.pod, args.namespace, args.all_namespaces) == ("explain", "p", "team", False)


def test_defaults_and_all_namespaces() -> None:
    args = parser().parse_args(["explain", "-A", "-o", "yaml", "--context", "c", "--kubeconfig", "/k"])
    assert (args.pod, args.all_namespaces, args.output, args.context, args.kubeconfig) == (
        None,
        True,
        "yaml",
        "c",
        "/k",
    )
    plain = parser().parse_args(["capacity"])
    assert (plain.namespace, plain.output, plain.kubeconfig, plain.resource) == (None, None, None, None)


def test_unknown_output_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["capacity", "-o", "table"])
    assert "invalid choice" in capsys.readouterr().err


def test_kubeconfig_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert _kubeconfig_path(None) is None  # nothing at all: in-cluster
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert _kubeconfig_path(None) == str(tmp_path / ".kube" / "config")
    monkeypatch.setenv("KUBECONFIG", "/first:/second")
    assert _kubeconfig_path(None) == "/first"
    assert _kubeconfig_path("/flag") == "/flag"


def test_a_pod_that_cannot_be_explained_is_listed_with_why() -> None:
    from draxr.explain import render

    report = {"pod": "ns/odd", "bound": False, "scheduler": "draxr", "error": "boom"}
    assert render(report) == ["pod ns/odd is not bound (scheduler draxr)", "  cannot explain it: boom"]
