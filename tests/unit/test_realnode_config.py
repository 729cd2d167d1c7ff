"""The pure parts of the real node: the control plane's room for it (identities, kube-apiserver's
kubelet flags), containerd's and kubelet's configuration, and the host-path bookkeeping of its
teardown. The node itself runs in tests/realnode."""

from __future__ import annotations

import tomllib
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.controlplane import CLIENTS, REAL_NODE_CLIENTS, ControlPlane, Options
from draxr_dev.devcluster.pki import make_pki


def _cp(tmp_path: Path, real_node: bool) -> ControlPlane:
    cp = ControlPlane(binaries=tmp_path / "bin", run_dir=tmp_path / "cp", options=Options(real_node=real_node))
    cp.ports = {"api": 6443, "etcd": 2379}
    return cp


def test_control_plane_room_for_a_real_node(tmp_path: Path) -> None:
    plain, real = _cp(tmp_path, False), _cp(tmp_path, True)
    assert plain.clients == CLIENTS
    assert not [a for a in plain._apiserver_argv() if a.startswith("--kubelet-")]
    assert set(real.clients) == set(CLIENTS) | set(REAL_NODE_CLIENTS)
    args = real._apiserver_argv()
    assert "--kubelet-preferred-address-types=Hostname" in args
    assert f"--kubelet-certificate-authority={real.pki.ca_crt}" in args
    assert f"--kubelet-client-certificate={real.pki.client_crt('apiserver-kubelet-client')}" in args


def test_node_identity_is_system_node_localhost(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", {**CLIENTS, **REAL_NODE_CLIENTS})
    cert = x509.load_pem_x509_certificate(pki.client_crt("node-localhost").read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:localhost"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert ExtendedKeyUsageOID.CLIENT_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(pki.ca_crt.read_bytes()))


def _node(tmp_path: Path) -> realnode.RealNode:
    node = realnode.RealNode(control_plane=_cp(tmp_path, True), binaries=tmp_path / "nodebin", run_dir=tmp_path / "n")
    node.ports = {"kubelet": 10250, "kubelet_healthz": 10248}
    return node


def test_containerd_config_is_private_and_as_the_recipe_says(tmp_path: Path) -> None:
    node = _node(tmp_path)
    (node.containerd_dir).mkdir(parents=True)
    (node.run_dir / "cni").mkdir()
    node._write_containerd_config()
    cfg = tomllib.loads((node.containerd_dir / "config.toml").read_text())
    assert cfg["version"] == 3
    for key in ("root", "state"):
        assert cfg[key].startswith(str(node.run_dir))
    assert cfg["grpc"]["address"] == str(node.containerd_socket)
    assert cfg["ttrpc"]["address"].startswith(str(node.run_dir))
    assert "io.containerd.nri.v1.nri" in cfg["disabled_plugins"]
    plugins = cfg["plugins"]
    assert plugins["io.containerd.internal.v1.opt"]["path"].startswith(str(node.run_dir))
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["cdi_spec_dirs"] == [str(node.cdi_dir)]
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False
    assert runc["Root"].startswith(str(node.run_dir))
    assert runtime["cni"]["conf_dir"] == str(node.run_dir / "cni")
    assert plugins["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == realnode.PAUSE_IMAGE
    conflist = (node.run_dir / "cni" / "10-loopback.conflist").read_text()
    assert '"type": "loopback"' in conflist


def test_kubelet_config_binds_loopback_and_tolerates_this_vm(tmp_path: Path) -> None:
    cfg = _node(tmp_path)._kubelet_config()
    assert cfg["address"] == cfg["healthzBindAddress"] == "127.0.0.1"
    assert cfg["readOnlyPort"] == 0
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["failCgroupV1"] is False
    assert cfg["authorization"] == {"mode": "AlwaysAllow"}
    assert (cfg["imageGCHighThresholdPercent"], cfg["imageGCLowThresholdPercent"]) == (100, 99)
    assert cfg["registerWithTaints"] == [{"key": realnode.TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    for key in ("podLogsDir", "volumePluginDir", "tlsCertFile"):
        assert cfg[key].startswith(str(tmp_path / "n"))
    argv = _node(tmp_path)._kubelet_argv()
    assert "--hostname-override=localhost" in argv
    assert any(a.startswith("--cert-dir=") and str(tmp_path / "n") in a for a in argv)


def test_host_paths_snapshot_and_restore_remove_only_what_appeared(tmp_path: Path) -> None:
    existing, fresh = tmp_path / "existing", tmp_path / "fresh"
    existing.mkdir()
    (existing / "old").write_text("keep")
    paths = (str(fresh / "deep"), str(fresh), str(existing))
    before = realnode._snapshot(paths)
    assert before == {str(fresh / "deep"): None, str(fresh): None, str(existing): ["old"]}
    (fresh / "deep").mkdir(parents=True)
    (fresh / "deep" / "f").write_text("x")
    (existing / "new").mkdir()
    (existing / "new" / "f").write_text("x")
    realnode._restore(before)
    assert not fresh.exists()
    assert sorted(p.name for p in existing.iterdir()) == ["old"]


def test_mountinfo_escapes() -> None:
    assert realnode._unescape_mountinfo(r"/tmp/a\040b\011c\134d") == "/tmp/a b\tc\\d"
    assert realnode._unescape_mountinfo("/plain/path") == "/plain/path"
