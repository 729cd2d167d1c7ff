#!/usr/bin/env bash
# The demo: a real local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok) on 127.0.0.1 with fake GPU nodes, the draxr operator, and a sample Job asking for
# example.com/gpu the device-plugin way.
#   bash hack/demo.sh        bring it up and run the workload (first run builds the binaries)
#   bash hack/demo.sh down   stop the operator and every control-plane process by PID
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
  exec .venv/bin/python -m draxr.devcluster --dir "$DEV" down
fi
bash hack/setup.sh
BIN=$(bash hack/build-control-plane.sh | tail -n 1)
export DRAXR_BIN_DIR="$BIN"
stop_operator
.venv/bin/python -m draxr.devcluster --dir "$DEV" down >/dev/null
.venv/bin/python -m draxr.devcluster --dir "$DEV" up --scheduler --nodes 3 --devices 8 --device-plugin-nodes 1 \
  --implicit-class gpu-any.example.com
export KUBECONFIG="$DEV/admin.kubeconfig"
echo
echo "\$ kubectl get nodes,deviceclasses,resourceslices"
"$BIN/kubectl" get nodes,deviceclasses,resourceslices -o wide
echo
.venv/bin/draxr run --kubeconfig "$KUBECONFIG" --bind-address 127.0.0.1 --metrics-port 18080 --health-port 18081 \
  > "$DEV/draxr.log" 2>&1 &
echo $! > "$DEV/draxr.pid"
echo "draxr running (pid $(cat "$DEV/draxr.pid"), log $DEV/draxr.log, metrics http://127.0.0.1:18080/metrics)"
.venv/bin/python -m draxr.devcluster --dir "$DEV" demo
echo
echo "\$ curl -s 127.0.0.1:18080/metrics | grep -E '^draxr_(resourceclaim_creates|resourceclaims_released|schedule_attempts)_total'"
curl -s 127.0.0.1:18080/metrics | grep -E '^draxr_(resourceclaim_creates|resourceclaims_released|schedule_attempts)_total' || true
echo
echo "The cluster and draxr keep running: export KUBECONFIG=$KUBECONFIG; $BIN/kubectl get pods -A"
echo "Stop everything with: bash hack/demo.sh down"
