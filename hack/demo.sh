#!/usr/bin/env bash
# The demo: a real local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok) on 127.0.0.1 with fake GPU nodes, the draxr operator with its admission webhook, a sample Job
# asking for example.com/gpu the device-plugin way (schedulerName: draxr), and an unmodified
# Deployment in a namespace labelled draxr.io/enabled=true.
#   bash hack/demo.sh              bring it up and run the workload (first run builds the binaries)
#   bash hack/demo.sh --real-node  the same control plane with a real node instead (root): kubelet,
#                                  containerd and a DRA kubelet plugin; a pod's containers print
#                                  the devices draxr gave them (first run builds them, ~4 minutes)
#   bash hack/demo.sh down         stop the operator, the real node and every control-plane process
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=${DRAXR_DEV_DIR:-$PWD/.dev}
stop_operator() {
  if [ -f "$DEV/draxr.pid" ]; then
    pid=$(cat "$DEV/draxr.pid")
    if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "draxr run"; then
      kill "$pid"; for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$DEV/draxr.pid"
  fi
}
if [ "${1:-up}" = "down" ]; then
  stop_operator
  exec .venv/bin/python -m draxr_dev.devcluster --dir "$DEV" down
fi
bash hack/setup.sh
BIN=$(bash hack/build-control-plane.sh | tail -n 1)
export DRAXR_BIN_DIR="$BIN"
stop_operator
if [ "${1:-}" = "--real-node" ]; then
  exec bash hack/demo-real-node.sh
fi
.venv/bin/python -m draxr_dev.devcluster --dir "$DEV" down >/dev/null
.venv/bin/python -m draxr_dev.devcluster --dir "$DEV" up --scheduler --nodes 3 --devices 8 --device-plugin-nodes 1 \
  --implicit-class gpu-any.example.com
export KUBECONFIG="$DEV/admin.kubeconfig"
echo
echo "\$ kubectl get nodes,deviceclasses,resourceslices"
"$BIN/kubectl" get nodes,deviceclasses,resourceslices -o wide
echo
echo "\$ kubectl apply -k crds/   # and an ExtendedResourceMapping: example.com/accelerator -> gpu-any.example.com"
"$BIN/kubectl" apply -k crds/
"$BIN/kubectl" apply -f - <<'YAML'
apiVersion: draxr.io/v1alpha1
kind: ExtendedResourceMapping
metadata: {name: accelerator}
spec:
  extendedResourceName: example.com/accelerator
  deviceClassNames: [gpu-any.example.com]
  selectors:
  - cel: {expression: 'device.attributes["gpu.example.com"].numa == 1'}
YAML
echo
echo "\$ kubectl apply   # the manifests' MutatingWebhookConfiguration, its clientConfig pointed at draxr on 127.0.0.1:18443"
"$BIN/kubectl" create namespace draxr-system --dry-run=client -o yaml | "$BIN/kubectl" apply -f - >/dev/null
"$BIN/kubectl" kustomize manifests | .venv/bin/python -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d["kind"] == "MutatingWebhookConfiguration":
        for h in d["webhooks"]:
            h["clientConfig"] = {"url": "https://127.0.0.1:18443/mutate-pods"}
        print(yaml.safe_dump(d))' | "$BIN/kubectl" apply -f -
# draxr exits when it loses its leadership (an API-server outage longer than its lease), as
# kube-scheduler does, and counts on kubelet to start it again: here draxr_dev.devcluster.supervise
# does, with kubelet's back-off (10 s, doubling up to 5 min). draxr.pid is the supervisor's.
.venv/bin/python -m draxr_dev.devcluster.supervise --name draxr -- \
  .venv/bin/draxr run --kubeconfig "$KUBECONFIG" --bind-address 127.0.0.1 --metrics-port 18080 --health-port 18081 \
  --webhook-port 18443 --webhook-namespace draxr-system --webhook-extra-hosts 127.0.0.1 \
  > "$DEV/draxr.log" 2>&1 &
echo $! > "$DEV/draxr.pid"
for _ in $(seq 120); do curl -sfk https://127.0.0.1:18443/healthz >/dev/null && break; sleep 0.5; done
sleep 1  # the API server picks up the caBundle draxr wrote
echo "draxr running (log $DEV/draxr.log, metrics http://127.0.0.1:18080/metrics, webhook https://127.0.0.1:18443)," \
  "supervised as kubelet would (pid $(cat "$DEV/draxr.pid")): restarted whenever it exits, e.g. after an" \
  "API-server outage longer than its lease, with kubelet's back-off (10 s doubling up to 5 min)"
echo
echo "\$ draxr capacity   # before"
.venv/bin/draxr capacity --kubeconfig "$KUBECONFIG"
echo
echo "\$ kubectl label namespace demo draxr.io/enabled=true   # opt the namespace in: manifests stay unchanged"
"$BIN/kubectl" create namespace demo --dry-run=client -o yaml | "$BIN/kubectl" apply -f - >/dev/null
"$BIN/kubectl" label namespace demo draxr.io/enabled=true --overwrite
echo "\$ kubectl apply   # a Deployment of 2 replicas asking for example.com/accelerator: 1 (the mapping above), no schedulerName"
"$BIN/kubectl" -n demo apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: inference}
spec:
  replicas: 2
  selector: {matchLabels: {app: inference}}
  template:
    metadata: {labels: {app: inference}}
    spec:
      containers:
      - name: serve
        image: registry.invalid/server:1
        resources: {limits: {example.com/accelerator: "1"}}
YAML
.venv/bin/python -m draxr_dev.devcluster --dir "$DEV" demo
echo
"$BIN/kubectl" -n demo wait --for=condition=PodScheduled pod -l app=inference --timeout=60s >/dev/null
echo "\$ kubectl -n demo get pods -l app=inference   # steered by the webhook (see SCHEDULER)"
"$BIN/kubectl" -n demo get pods -l app=inference \
  -o custom-columns=NAME:.metadata.name,SCHEDULER:.spec.schedulerName,NODE:.spec.nodeName,CLAIM:.status.extendedResourceClaimStatus.resourceClaimName
echo
echo "\$ draxr explain demo/<an inference pod>"
.venv/bin/draxr explain --kubeconfig "$KUBECONFIG" "demo/$("$BIN/kubectl" -n demo get pods -l app=inference -o jsonpath='{.items[0].metadata.name}')"
echo
sleep 11  # the leader refreshes mapping status every 10 s
echo "\$ kubectl get extendedresourcemappings"
"$BIN/kubectl" get extendedresourcemappings
echo
echo "\$ draxr capacity   # after: the Job's claims are released, the Deployment holds 2 devices"
.venv/bin/draxr capacity --kubeconfig "$KUBECONFIG"
echo
echo "\$ curl -s 127.0.0.1:18080/metrics | grep -E '^draxr_(resourceclaim_creates|resourceclaims_released|schedule_attempts|webhook_admissions)_total'"
curl -s 127.0.0.1:18080/metrics | grep -E '^draxr_(resourceclaim_creates|resourceclaims_released|schedule_attempts|webhook_admissions)_total' || true
echo
echo "The cluster and draxr keep running: export KUBECONFIG=$KUBECONFIG; $BIN/kubectl get pods -A"
echo "Stop everything with: bash hack/demo.sh down"
