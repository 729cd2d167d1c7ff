"""Memory of draxr's in-memory cluster view per bound pod, without a cluster.

    .venv/bin/python bench/state_memory.py --nodes 5000 --devices 8 --pods 40000

Feeds ``ClusterState`` what the operator sees in the e2e scale benchmark (bench/e2e.py), shaped like
the objects a real 1.37 API server returned there (managedFields included): kwok nodes with one
ResourceSlice of M devices each, then per pod the watch events of one binding by draxr (pod created,
special claim created, claim allocated, pod bound with its extendedResourceClaimStatus, pod Running).
Every object is decoded from JSON separately, as the watch delivers it. Prints the RSS and the
memory traced by tracemalloc (``--tracemalloc``, slower) after the fleet and after the pods.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES, Allocator
from draxr.core.state import ClusterState
from draxr_dev.devcluster import fakedriver

TS = "2026-11-30T10:09:42Z"


def _mf(manager: str, fields: dict[str, Any], subresource: str | None = None, api: str = "v1") -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": api,
        "time": TS,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _cond(t: str, status: str = "True", **more: Any) -> dict[str, Any]:
    return {"type": t, "status": status, "lastProbeTime": None, "lastTransitionTime": TS, **more}


def node(name: str) -> dict[str, Any]:
    obj = fakedriver.node(name, labels={fakedriver.FLEET_LABEL: "bench", "draxr.io/gpu-model": "fake-a100"})
    obj["metadata"] |= {"uid": str(uuid.uuid4()), "resourceVersion": "279", "creationTimestamp": TS}
    obj["metadata"]["labels"] |= {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux"}
    kinds = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    field = {".": {}, **{f"f:{k}": {} for k in ("lastHeartbeatTime", "lastTransitionTime", "message", "reason")}}
    obj["metadata"]["managedFields"] = [
        _mf("OpenAPI-Generator", {"f:metadata": {"f:labels": {f"f:{k}": {} for k in obj["metadata"]["labels"]}}}),
        _mf("kwok", {"f:status": {"f:conditions": {f'k:{{"type":"{k}"}}': field for k in kinds}}}, "status"),
    ]
    obj["spec"] = {}
    obj["status"] |= {
        "phase": "Running",
        "conditions": [
            {
                "type": k,
                "status": "True" if k == "Ready" else "False",
                "lastHeartbeatTime": TS,
                "lastTransitionTime": TS,
                "reason": f"Kubelet{k}",
                "message": f"kubelet reports {k}",
            }
            for k in kinds
        ],
        "addresses": [{"type": "InternalIP", "address": "10.243.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            k: "kwok-0.8.0" if "Version" in k else ""
            for k in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion")
        }
        | {"kubeletVersion": "kwok-0.8.0", "operatingSystem": "linux", "architecture": "amd64"},
    }
    return obj


def resource_slice(name: str, devices: int) -> dict[str, Any]:
    devs = [fakedriver.device(f"gpu-{d}", numa=d * 2 // devices) for d in range(devices)]
    obj = fakedriver.resource_slice(name, devs, labels={fakedriver.FLEET_LABEL: "bench"})
    obj["metadata"] |= {"uid": str(uuid.uuid4()), "resourceVersion": "269", "generation": 1, "creationTimestamp": TS}
    spec_fields = {"f:devices": {}, "f:driver": {}, "f:nodeName": {}, "f:pool": {"f:generation": {}, "f:name": {}}}
    obj["metadata"]["managedFields"] = [_mf("OpenAPI-Generator", {"f:spec": spec_fields}, api="resource.k8s.io/v1")]
    return obj


def pod(name: str, uid: str, resource: str, rv: int, bound: tuple[str, str] | None) -> dict[str, Any]:
    """The bench's pod as the API server returns it: unbound, or bound to (node, claim) and Running."""
    container_fields = {
        f"f:{k}": {} for k in ("image", "imagePullPolicy", "name", "terminationMessagePath", "terminationMessagePolicy")
    }
    container_fields["f:resources"] = {
        ".": {},
        "f:limits": {".": {}, f"f:{resource}": {}},
        "f:requests": {".": {}, f"f:{resource}": {}},
    }
    spec_fields = {
        f"f:{k}": {} for k in ("automountServiceAccountToken", "dnsPolicy", "restartPolicy", "schedulerName")
    }
    spec_fields["f:containers"] = {'k:{"name":"c"}': {".": {}, **container_fields}}
    managed = [_mf("draxr-bench", {"f:spec": spec_fields})]
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "image": "registry.invalid/bench:1",
                "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "automountServiceAccountToken": False,
        "securityContext": {},
        "schedulerName": "draxr",
        "tolerations": [
            {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for t in ("not-ready", "unreachable")
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "BestEffort"}
    if bound is not None:
        node_name, claim = bound
        spec["nodeName"] = node_name
        status = {
            "phase": "Running",
            "conditions": [_cond(t) for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "hostIP": "10.243.0.1",
            "hostIPs": [{"ip": "10.243.0.1"}],
            "podIP": "10.244.0.1",
            "podIPs": [{"ip": "10.244.0.1"}],
            "startTime": TS,
            "containerStatuses": [
                {
                    "name": "c",
                    "state": {"running": {"startedAt": TS}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.invalid/bench:1",
                    "imageID": "",
                }
            ],
            "qosClass": "BestEffort",
            "extendedResourceClaimStatus": {
                "requestMappings": [
                    {"containerName": "c", "resourceName": resource, "requestName": "container-0-request-0"}
                ],
                "resourceClaimName": claim,
            },
        }
        ercs = {".": {}, "f:requestMappings": {}, "f:resourceClaimName": {}}
        managed.insert(0, _mf("draxr", {"f:status": {"f:extendedResourceClaimStatus": ercs}}, "status"))
        kwok_status = {f"f:{k}": {} for k in ("containerStatuses", "hostIP", "hostIPs", "phase", "podIP", "startTime")}
        kwok_status["f:conditions"] = {
            f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}}
            for t in ("ContainersReady", "Initialized", "Ready")
        }
        managed.append(_mf("kwok", {"f:status": kwok_status}, "status"))
    meta = {
        "name": name,
        "namespace": "dx-burst",
        "uid": uid,
        "resourceVersion": str(rv),
        "generation": 1,
        "creationTimestamp": TS,
        "managedFields": managed,
    }
    return {"metadata": meta, "spec": spec, "status": status}


def claim(pod_name: str, pod_uid: str, name: str, cls: str, rv: int, node_name: str | None) -> dict[str, Any]:
    api = "resource.k8s.io/v1"
    meta_fields = {
        "f:annotations": {".": {}, "f:resource.kubernetes.io/extended-resource-claim": {}},
        "f:finalizers": {".": {}, 'v:"resource.kubernetes.io/delete-protection"': {}},
        "f:generateName": {},
        "f:ownerReferences": {".": {}, f'k:{{"uid":"{pod_uid}"}}': {}},
    }
    managed = [_mf("draxr", {"f:metadata": meta_fields, "f:spec": {"f:devices": {"f:requests": {}}}}, api=api)]
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "generateName": f"{pod_name}-extended-resources-",
            "namespace": "dx-burst",
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(rv),
            "creationTimestamp": TS,
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "controller": True}
            ],
            "finalizers": ["resource.kubernetes.io/delete-protection"],
            "managedFields": managed,
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "container-0-request-0",
                        "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": 1},
                    }
                ]
            }
        },
    }
    if node_name is not None:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "container-0-request-0",
                            "driver": fakedriver.DRIVER,
                            "pool": node_name,
                            "device": "gpu-0",
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                    ]
                },
                "allocationTimestamp": TS,
            },
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
        }
        status_fields = {"f:allocation": {".": {}, "f:devices": {".": {}, "f:results": {}}}, "f:reservedFor": {}}
        managed.append(_mf("draxr", {"f:status": status_fields}, "status", api=api))
    return obj


def decoded(obj: dict[str, Any]) -> dict[str, Any]:
    """A fresh decode, as a watch event delivers every object (no strings shared between objects)."""
    return dict(json.loads(json.dumps(obj)))


def rss_mib() -> float:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(trace: bool) -> tuple[float, float]:
    gc.collect()
    return rss_mib(), (tracemalloc.get_traced_memory()[0] / 2**20 if trace else 0.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--classes", type=int, default=25)
    p.add_argument("--pods", type=int, default=40000)
    p.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations (slower)")
    p.add_argument(
        "--packing",
        action="store_true",
        help="then ask the allocator for every (node, class), as a burst's packing does once it has reached every"
        " node: the memory of its caches and of the CEL device views",
    )
    args = p.parse_args()
    if args.tracemalloc:
        tracemalloc.start()
    base_rss, base_traced = measure(args.tracemalloc)
    state = ClusterState()
    t0 = time.monotonic()
    for i in range(args.classes):
        cls = fakedriver.device_class(f"gpu-{i}", extended_resource_name=f"example.com/gpu-{i}")
        cls["metadata"] |= {"uid": str(uuid.uuid4()), "resourceVersion": "268"}  # (versioned: cached, as live)
        state.upsert_class(decoded(cls))
    node_tpl, slice_tpl = node("bench-0"), resource_slice("bench-0", args.devices)
    node_text, slice_text = json.dumps(node_tpl), json.dumps(slice_tpl)
    slice_uid = slice_tpl["metadata"]["uid"]  # (each slice its own: the allocator's caches key on it)
    for n in range(args.nodes):
        state.upsert_node(json.loads(node_text.replace("bench-0", f"bench-{n}")))
        text = slice_text.replace("bench-0", f"bench-{n}").replace(slice_uid, str(uuid.uuid4()))
        state.upsert_slice(json.loads(text))
    fleet_rss, fleet_traced = measure(args.tracemalloc)
    rv = 1000
    for k in range(args.pods):
        name, uid, cls = f"p-{k}", str(uuid.uuid4()), f"gpu-{k % args.classes}"
        node_name, claim_name = f"bench-{k // args.devices % args.nodes}", f"p-{k}-extended-resources-{k:05x}"
        state.upsert_pod(decoded(pod(name, uid, f"example.com/{cls}", rv, None)))
        state.upsert_claim(decoded(claim(name, uid, claim_name, cls, rv + 1, None)))
        state.upsert_claim(decoded(claim(name, uid, claim_name, cls, rv + 2, node_name)))
        state.upsert_pod(decoded(pod(name, uid, f"example.com/{cls}", rv + 3, (node_name, claim_name))))
        rv += 4
    pods_rss, pods_traced = measure(args.tracemalloc)
    elapsed = time.monotonic() - t0
    bound = sum(1 for p_ in state.pods.values() if p_.node_name)
    fleet = f"{args.nodes} nodes x {args.devices} devices"
    print(f"{fleet}, {bound} bound pods with {len(state.claims)} claims, fed in {elapsed:.1f}s")
    print(f"RSS: start {base_rss:.0f} MiB, fleet +{fleet_rss - base_rss:.0f} MiB, pods +{pods_rss - fleet_rss:.0f} MiB")
    print(f"RSS per bound pod: {1024 * (pods_rss - fleet_rss) / max(1, args.pods):.2f} KiB")
    if args.tracemalloc:
        print(f"traced: fleet {fleet_traced - base_traced:.0f} MiB, pods {pods_traced - fleet_traced:.0f} MiB")
        print(f"traced per bound pod: {1024 * (pods_traced - fleet_traced) / max(1, args.pods):.2f} KiB")
    if args.packing:
        packing(state, args)
    return 0


def packing(state: ClusterState, args: argparse.Namespace) -> None:
    """Every (node, class) through the allocator's per-node index (placement's phase 1 asks it for
    each candidate node): its class-match caches fill, and every device gets its CEL view."""
    before, t0 = measure(False)[0], time.monotonic()
    alloc = Allocator(state.inventory, state.allocated(), DEFAULT_FEATURES)
    for node_info in state.nodes.values():
        for i in range(args.classes):
            alloc.cannot_fit(node_info.raw, {f"gpu-{i}": 1})
    after = measure(False)[0]
    inv = state.inventory
    per_device = 2**20 * (after - before) / max(1, len(state.nodes) * args.devices)
    print(
        f"packing over {len(state.nodes)} nodes x {args.classes} classes in {time.monotonic() - t0:.1f}s:"
        f" RSS +{after - before:.0f} MiB ({per_device:.0f} B per device); class_matches {len(inv.class_matches)},"
        f" expression_matches {len(inv.expression_matches)}, class_candidates {len(inv.class_candidates)}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
