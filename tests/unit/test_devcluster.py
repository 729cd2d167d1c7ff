"""Pure parts of the dev cluster: certificates and the fake driver's manifests."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import CLIENTS
from draxr_dev.devcluster.pki import make_pki


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_pki_serving_cert_is_for_loopback_and_signed_by_the_ca(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", CLIENTS)
    ca, server = _load(pki.ca_crt), _load(pki.apiserver_crt)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    pub = ca.public_key()
    assert isinstance(pub, ec.EllipticCurvePublicKey)
    server.verify_directly_issued_by(ca)
    assert (pki.dir / "apiserver.key").stat().st_mode & 0o077 == 0


def test_pki_client_identities(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", CLIENTS)
    admin = _load(pki.client_crt("admin"))
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    kcm = _load(pki.client_crt("kube-controller-manager"))
    assert kcm.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-controller-manager"
    eku = kcm.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
    kcm.verify_directly_issued_by(_load(pki.ca_crt))


def test_fleet_splits_dra_and_device_plugin_nodes() -> None:
    fleet = fakedriver.Fleet(prefix="n", dra_nodes=3, device_plugin_nodes=2, devices_per_node=4)
    objs = fleet.manifests()
    nodes = [o for o in objs if o["kind"] == "Node"]
    slices = [o for o in objs if o["kind"] == "ResourceSlice"]
    classes = [o for o in objs if o["kind"] == "DeviceClass"]
    assert [n["metadata"]["name"] for n in nodes] == ["n-0", "n-1", "n-2", "n-3", "n-4"]
    assert [s["spec"]["nodeName"] for s in slices] == ["n-0", "n-1", "n-2"]
    # A DRA node must not advertise the name in allocatable, or it counts as device-plugin backed.
    for n in nodes[:3]:
        assert "example.com/gpu" not in n["status"]["allocatable"]
    for n in nodes[3:]:
        assert n["status"]["allocatable"]["example.com/gpu"] == "4"
    assert classes[0]["spec"]["extendedResourceName"] == "example.com/gpu"
    assert all(n["metadata"]["annotations"][fakedriver.KWOK_ANNOTATION] == "fake" for n in nodes)


def test_fleet_devices_are_well_formed_and_unique() -> None:
    fleet = fakedriver.Fleet(prefix="n", dra_nodes=2, devices_per_node=8, numa_nodes=2)
    slices = [o for o in fleet.manifests() if o["kind"] == "ResourceSlice"]
    uuids = [d["attributes"]["uuid"]["string"] for s in slices for d in s["spec"]["devices"]]
    assert len(set(uuids)) == 16
    devs = slices[0]["spec"]["devices"]
    assert [d["name"] for d in devs] == [f"gpu-{i}" for i in range(8)]
    assert [d["attributes"]["numa"]["int"] for d in devs] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert slices[0]["spec"]["pool"] == {"name": "n-0", "generation": 1, "resourceSliceCount": 1}
    # Stable across calls, so re-applying the demo does not churn device identities.
    again = [o for o in fleet.manifests() if o["kind"] == "ResourceSlice"]
    assert again[0]["spec"]["devices"] == devs


def test_device_class_without_extended_name_has_only_the_driver_selector() -> None:
    cls = fakedriver.device_class("plain", driver="d.example.com")
    assert "extendedResourceName" not in cls["spec"]
    assert cls["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "d.example.com"'}}]
