"""draxr's CPU per pod outside a real control plane: a burst through a fake API server.

    .venv/bin/python bench/shell_cpu.py --nodes 500 --devices 8 --classes 25 --pods 3000
    .venv/bin/python bench/shell_cpu.py --baseline /work/main/operator   # + main's code, same run

The fake API server (``--serve``, a process of its own, plain HTTP on 127.0.0.1) keeps pods and
ResourceClaims in memory, answers draxr's writes (claim create and status, pod status patch,
Binding, Event) and streams the watch events a real API server would: every object carries
managedFields, every write is an event, and each bound pod gets a kwok-like status update
(Running, conditions, IPs, container status). Every other kind draxr watches is served empty.

draxr runs as ``python -m draxr run`` (``--baseline DIR``: a second run with ``PYTHONPATH=DIR``,
e.g. main's ``operator``, on the same server and workload). Printed per run: pods/s and draxr's
CPU ms per pod from the burst's first pod to its last binding (utime+stime of the process), and
with ``--profile`` py-spy's top self/inclusive shares. The figures isolate draxr's own work per
pod; the API server's, etcd's and kwok's CPU (which e2e.py measures around it) are not in them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

JSON = dict[str, Any]
NOW = "2026-12-02T06:00:00Z"


# ---- the fake API server ------------------------------------------------------------------------------


def _fields(obj: Any) -> Any:
    """A fieldsV1-like tree of an object's keys (managedFields' shape and size)."""
    if isinstance(obj, dict):
        return {f"f:{k}": _fields(v) for k, v in obj.items()} or {}
    if isinstance(obj, list):
        return {f'k:{{"name":"{i}"}}': _fields(v) for i, v in enumerate(obj)}
    return {}


def _managed(manager: str, part: JSON, subresource: str | None = None) -> JSON:
    entry: JSON = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": NOW,
        "fieldsType": "FieldsV1",
        "fieldsV1": _fields(part),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _merge(dst: JSON, patch: JSON) -> JSON:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v
    return dst


class FakeApi:
    def __init__(self, nodes: int, devices: int, classes: int) -> None:
        from draxr_dev.devcluster import fakedriver

        fleet = fakedriver.Fleet(
            prefix="bench",
            dra_nodes=nodes,
            devices_per_node=devices,
            classes={f"gpu-{i}": f"example.com/gpu-{i}" for i in range(classes)},
        )
        self.rv = itertools.count(1000)
        self.objects: dict[str, dict[str, JSON]] = {}  # collection path -> "ns/name" -> object
        self.watchers: dict[str, list[asyncio.Queue[bytes]]] = {}
        self.bound: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self.writes: Counter[str] = Counter()
        for obj in fleet.manifests():
            plural = {"Node": "nodes", "ResourceSlice": "resourceslices", "DeviceClass": "deviceclasses"}[obj["kind"]]
            group = "/api/v1" if obj["kind"] == "Node" else "/apis/resource.k8s.io/v1"
            if obj["kind"] == "Node":
                obj["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
            self._store(f"{group}/{plural}", obj, "kubectl")

    # ---- storage and events ----
    def _stamp(self, obj: JSON) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self.rv))

    def _store(self, collection: str, obj: JSON, manager: str, event: str = "ADDED") -> JSON:
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", NOW)
        meta.setdefault("generation", 1)
        if event == "ADDED":
            meta["managedFields"] = [_managed(manager, {k: v for k, v in obj.items() if k != "status"})]
        self._stamp(obj)
        self.objects.setdefault(collection, {})[f"{meta.get('namespace', '')}/{meta['name']}"] = obj
        self._emit(collection, event, obj)
        return obj

    def _emit(self, collection: str, kind: str, obj: JSON) -> None:
        queues = self.watchers.get(collection, [])
        if queues:
            line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            for q in queues:
                q.put_nowait(line)

    @staticmethod
    def collection(path: str) -> tuple[str, str | None, str | None, str | None]:
        """(collection without namespace, namespace, name, subresource) of a request path."""
        parts = path.strip("/").split("/")
        base = parts[:2] if parts[0] == "api" else parts[:3]
        rest = parts[len(base) :]
        ns = None
        if len(rest) >= 2 and rest[0] == "namespaces" and (len(rest) > 2 or base[-1] != "v1"):
            ns, rest = rest[1], rest[2:]
        plural = rest[0] if rest else ""
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return "/" + "/".join([*base, plural]), ns, name, sub

    # ---- the workload ----
    def burst(self, n: int, classes: int, scheduler: str) -> None:
        ns = f"burst-{int(time.time() * 1000) % 100000}"
        for k in range(n):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p-{k}", "namespace": ns},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 0,
                    "schedulerName": scheduler,
                    "dnsPolicy": "ClusterFirst",
                    "enableServiceLinks": True,
                    "preemptionPolicy": "PreemptLowerPriority",
                    "priority": 0,
                    "securityContext": {},
                    "serviceAccountName": "default",
                    "tolerations": [
                        {
                            "key": f"node.kubernetes.io/{t}",
                            "operator": "Exists",
                            "effect": "NoExecute",
                            "tolerationSeconds": 300,
                        }
                        for t in ("not-ready", "unreachable")
                    ],
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.invalid/bench:1",
                            "imagePullPolicy": "IfNotPresent",
                            "resources": {
                                "limits": {f"example.com/gpu-{k % classes}": "1"},
                                "requests": {f"example.com/gpu-{k % classes}": "1"},
                            },
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                        }
                    ],
                },
                "status": {"phase": "Pending", "qosClass": "BestEffort"},
            }
            self.created[f"{ns}/p-{k}"] = time.monotonic()
            self._store("/api/v1/pods", pod, "e2e.py")

    def kwok_running(self, pod: JSON) -> None:
        status = {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": NOW}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.1",
            "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": "10.0.1.2",
            "podIPs": [{"ip": "10.0.1.2"}],
            "startTime": NOW,
            "containerStatuses": [
                {
                    "name": "c",
                    "image": "registry.invalid/bench:1",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": NOW}},
                }
            ],
        }
        _merge(pod["status"], status)
        pod["metadata"]["managedFields"].append(_managed("kwok", {"status": status}, "status"))
        self._stamp(pod)
        self._emit("/api/v1/pods", "MODIFIED", pod)

    # ---- HTTP ----
    async def handle(self, request: Any) -> Any:
        from aiohttp import web

        path, method = request.path, request.method
        if path == "/bench/burst":
            self.burst(int(request.query["n"]), int(request.query["classes"]), request.query["scheduler"])
            return web.json_response({})
        if path == "/bench/progress":
            done = [self.bound[k] - self.created[k] for k in self.bound if k in self.created]
            return web.json_response({"created": len(self.created), "bound": len(done), "writes": self.writes})
        if path == "/version":
            return web.json_response({"major": "1", "minor": "37", "gitVersion": "v1.37.2"})
        collection, ns, name, sub = self.collection(path)
        objects = self.objects.setdefault(collection, {})
        if method == "GET" and name is None:
            if request.query.get("watch") in ("true", "1"):
                return await self._watch(request, collection, ns)
            items = [o for o in objects.values() if ns is None or o["metadata"].get("namespace") == ns]
            return web.json_response(
                {"kind": "List", "metadata": {"resourceVersion": str(next(self.rv))}, "items": items}
            )
        key = f"{ns or ''}/{name}"
        body = await request.json() if request.can_read_body else None
        self.writes[f"{method} {collection.rsplit('/', 1)[-1]}{'/' + sub if sub else ''}"] += (
            1 if method != "GET" else 0
        )
        if method == "GET":
            obj = objects.get(key)
            return web.json_response(obj) if obj else _status(404, "NotFound")
        if method == "POST" and sub == "binding":
            pod = objects.get(key)
            if pod is None:
                return _status(404, "NotFound")
            pod["spec"]["nodeName"] = body["target"]["name"]
            pod["status"].setdefault("conditions", []).append(
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": NOW}
            )
            pod["metadata"]["managedFields"].append(_managed("draxr", {"spec": {"nodeName": ""}}, "binding"))
            self._stamp(pod)
            self._emit(collection, "MODIFIED", pod)
            self.bound[key] = time.monotonic()
            asyncio.get_running_loop().call_later(0.05, self.kwok_running, pod)
            return web.json_response({"kind": "Status", "status": "Success"}, status=201)
        if method == "POST":
            meta = body["metadata"]
            if "generateName" in meta and "name" not in meta:
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            meta["namespace"] = ns or meta.get("namespace")
            if collection.endswith("/events"):
                return web.json_response(body, status=201)  # (not watched: not kept)
            return web.json_response(self._store(collection, body, "draxr"), status=201)
        obj = objects.get(key)
        if obj is None:
            return _status(404, "NotFound")
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                return _status(409, "Conflict")
            managed = obj["metadata"]["managedFields"]
            if sub == "status":
                obj["status"] = body.get("status") or {}
                managed.append(_managed("draxr", {"status": obj["status"]}, "status"))
            else:
                obj["metadata"] = {**body["metadata"], "managedFields": managed}
                obj["spec"] = body.get("spec")
        elif method == "PATCH":
            ctype = request.headers.get("Content-Type", "")
            if "json-patch" in ctype:
                for op in body:
                    if op["op"] == "remove" and op["path"].startswith("/metadata/finalizers/"):
                        obj["metadata"].get("finalizers", []).pop(int(op["path"].rsplit("/", 1)[1]))
            else:
                _merge(obj, body)
                obj["metadata"]["managedFields"].append(_managed("draxr", body, sub))
        elif method == "DELETE":
            del objects[key]
            self._stamp(obj)
            self._emit(collection, "DELETED", obj)
            return web.json_response(obj)
        self._stamp(obj)
        self._emit(collection, "MODIFIED", obj)
        return web.json_response(obj)

    async def _watch(self, request: Any, collection: str, ns: str | None) -> Any:
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        q: asyncio.Queue[bytes] = asyncio.Queue()
        if request.query.get("sendInitialEvents") == "true":
            for obj in list(self.objects.get(collection, {}).values()):
                await resp.write(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
            end = {
                "kind": "Bookmark",
                "metadata": {
                    "resourceVersion": str(next(self.rv)),
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            }
            await resp.write(json.dumps({"type": "BOOKMARK", "object": end}).encode() + b"\n")
        self.watchers.setdefault(collection, []).append(q)
        try:
            while True:
                try:
                    line = await asyncio.wait_for(q.get(), 30)
                except TimeoutError:
                    bookmark = {"kind": "Bookmark", "metadata": {"resourceVersion": str(next(self.rv))}}
                    line = json.dumps({"type": "BOOKMARK", "object": bookmark}).encode() + b"\n"
                chunk = [line]
                while not q.empty() and len(chunk) < 64:
                    chunk.append(q.get_nowait())
                await resp.write(b"".join(chunk))
        finally:
            self.watchers[collection].remove(q)


def _status(code: int, reason: str) -> Any:
    from aiohttp import web

    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
    return web.json_response(body, status=code)


def serve(args: argparse.Namespace) -> None:
    from aiohttp import web

    api = FakeApi(args.nodes, args.devices, args.classes)
    app = web.Application(client_max_size=64 << 20)
    app.router.add_route("*", "/{tail:.*}", api.handle)
    tls = None
    if args.tls_dir:  # as the real API server: HTTPS (the client's TLS work is part of its CPU)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(f"{args.tls_dir}/tls.crt", f"{args.tls_dir}/tls.key")
    ready = lambda *_: print("fake api ready", flush=True)  # noqa: E731
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=tls, print=ready)


def _self_signed(tmp: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(tmp / "tls.key"), "-out", str(tmp / "tls.crt")],
        check=True, capture_output=True,
    )  # fmt: skip


# ---- the driver ---------------------------------------------------------------------------------------


def _cpu_s(pid: int, system: bool = False) -> float:
    """utime+stime (``system``: stime alone) of the process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[12]) if system else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    proc.send_signal(sig)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _says(log: Path, text: str) -> bool:
    return text in log.read_text(errors="replace")


@contextlib.asynccontextmanager
async def _process(
    argv: list[str], env: dict[str, str], log: Path, ready: str
) -> AsyncIterator[subprocess.Popen[bytes]]:
    proc = _spawn(argv, env, log)
    try:
        deadline = time.monotonic() + 120
        while not _says(log, ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[:4]} did not get ready; see {log}")
            await asyncio.sleep(0.1)
        yield proc
    finally:
        _stop(proc)


def _kubeconfig(tmp: Path, server: str, tls: bool) -> Path:
    cluster = {"server": server}
    if tls:
        cluster["certificate-authority"] = str(tmp / "tls.crt")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "fake"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def _py_spy(pid: int, raw: Path) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).parent / "py-spy"
    argv = [
        str(py_spy),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--rate",
        "100",
        "--nonblocking",
        "-o",
        str(raw),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def _profile(spy: subprocess.Popen[bytes], raw: Path, keep: str | None) -> JSON:
    from e2e import summarize_profile  # type: ignore[import-not-found]

    _stop(spy, signal.SIGINT)
    if not raw.exists():
        return {}
    if keep:
        Path(keep).write_bytes(raw.read_bytes())
    summary: JSON = summarize_profile(raw)
    return summary


async def run_one(args: argparse.Namespace, label: str, pythonpath: str | None, port: int, tmp: Path) -> JSON:
    import aiohttp

    scheme = "http" if args.plain_http else "https"
    base = f"{scheme}://127.0.0.1:{port}"
    kubeconfig = _kubeconfig(tmp, base, not args.plain_http)
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [
        sys.executable, "-m", "draxr", "run", "--scheduler-name", "draxr", "--leader-elect", "false",
        "--kubeconfig", str(kubeconfig), "--bind-address", "127.0.0.1", "--metrics-port", "0", "--health-port", "0",
        "--client-qps", str(args.qps), "--client-burst", str(args.burst), *args.draxr_args.split(),
    ]  # fmt: skip
    ready = "leading: scheduling"
    if label.startswith("ceiling"):  # bench/api_ceiling.py: the same writes without decisions
        argv = [
            sys.executable, str(REPO / "bench" / "api_ceiling.py"), "--kubeconfig", str(kubeconfig),
            "--scheduler-name", "draxr", "--concurrency", str(args.ceiling_concurrency),
            "--qps", str(args.qps), "--burst", str(args.burst),
        ]  # fmt: skip
        ready = "ceiling ready"
    log = tmp / f"{label}.log"
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False))
    async with session as http, _process(argv, env, log, ready) as proc:
        async with http.get(f"{base}/bench/progress") as r:
            progress = await r.json()
            before, events_before = progress["bound"], progress["writes"].get("POST events", 0)
        await asyncio.sleep(1)
        cpu0, sys0, t0 = _cpu_s(proc.pid), _cpu_s(proc.pid, system=True), time.monotonic()
        raw = tmp / f"pyspy-{label}.txt"
        spy = _py_spy(proc.pid, raw) if args.profile else None
        q = {"n": str(args.pods), "classes": str(args.classes), "scheduler": "draxr"}
        async with http.post(f"{base}/bench/burst", params=q) as r:
            await r.read()
        bound = 0
        while bound < args.pods and time.monotonic() - t0 < args.timeout:
            await asyncio.sleep(0.2)
            async with http.get(f"{base}/bench/progress") as r:
                bound = (await r.json())["bound"] - before
        t1, cpu1 = time.monotonic(), _cpu_s(proc.pid)
        keep = f"{args.out_profile}.{label}" if args.out_profile else None
        profile = _profile(spy, raw, keep) if spy is not None else {}
        # The kwok updates of the last pods and the Events still queued (counted: they are per pod).
        await asyncio.sleep(args.settle)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            async with http.get(f"{base}/bench/progress") as r:
                events = (await r.json())["writes"].get("POST events", 0) - events_before
            if events >= bound or label.startswith("ceiling"):
                break
            await asyncio.sleep(0.2)
        cpu2, sys2 = _cpu_s(proc.pid), _cpu_s(proc.pid, system=True)
    out = {
        "label": label,
        "pods": args.pods,
        "bound": bound,
        "seconds": round(t1 - t0, 2),
        "pods_per_s": round(bound / (t1 - t0), 1),
        "cpu_s": round(cpu2 - cpu0, 2),
        "cpu_ms_per_pod": round(1000 * (cpu2 - cpu0) / max(1, bound), 2),
        "cpu_ms_per_pod_until_bound": round(1000 * (cpu1 - cpu0) / max(1, bound), 2),
        "system_ms_per_pod": round(1000 * (sys2 - sys0) / max(1, bound), 2),
    }
    print(json.dumps(out), flush=True)
    if profile:
        out["profile"] = profile
        for what in ("self", "inclusive"):
            print(f"  {what}:", flush=True)
            for frame, share in profile[what][: args.top]:
                print(f"    {share:5.1f} %  {frame}", flush=True)
    return out


async def drive(args: argparse.Namespace) -> int:
    from draxr_dev.devcluster.controlplane import free_port

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="draxr-shellcpu-") as d:
        tmp = Path(d)
        argv = [sys.executable, __file__, "--serve", "--port", str(port), "--nodes", str(args.nodes),
                "--devices", str(args.devices), "--classes", str(args.classes)]  # fmt: skip
        if not args.plain_http:
            _self_signed(tmp)
            argv += ["--tls-dir", str(tmp)]
        results = []
        runs: list[tuple[str, str | None]] = [("branch", None)]
        if args.baseline:
            runs = [("baseline", args.baseline), *runs]
        if args.ceiling:
            runs = [("ceiling", None), *runs]
        for i, (label, path) in enumerate(runs * args.rounds):
            # A fresh server per run: the devices of the last one's pods are taken for good.
            async with _process(argv, dict(os.environ), tmp / f"api-{i}.log", "fake api ready"):
                results.append(await run_one(args, f"{label}-{i // len(runs)}", path, port, tmp))
    if args.out:
        _write(Path(args.out), results)
    return 0


def _write(path: Path, results: list[JSON]) -> None:
    path.write_text(json.dumps(results, indent=1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--classes", type=int, default=25)
    p.add_argument("--pods", type=int, default=3000, help="burst pods per run (fewer than nodes x devices)")
    p.add_argument("--qps", type=float, default=500)
    p.add_argument("--burst", type=int, default=1000)
    p.add_argument("--draxr-args", default="")
    p.add_argument("--baseline", default=None, help="PYTHONPATH of a second draxr to run first (main's operator/)")
    p.add_argument("--ceiling", action="store_true", help="also run bench/api_ceiling.py (no decisions) first")
    p.add_argument("--ceiling-concurrency", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1, help="runs of each, alternating")
    p.add_argument("--profile", action="store_true", help="py-spy each run")
    p.add_argument("--out-profile", default=None, help="keep py-spy's collapsed stacks as FILE.<label>")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", default=None)
    p.add_argument("--plain-http", action="store_true", help="no TLS between draxr and the fake API server")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tls-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args)
        return 0
    return asyncio.run(drive(args))


if __name__ == "__main__":
    sys.exit(main())
