#!/usr/bin/env bash
# The demo: a real local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok) on 127.0.0.1 with fake GPU nodes from the fake DRA driver, shown with kubectl.
#   bash hack/demo.sh        bring it up (reuses the build cache; first run builds, 20-40 min)
#   bash hack/demo.sh down   stop every process by PID
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-up}" = "down" ]; then
  exec .venv/bin/python -m draxr.devcluster down
fi
bash hack/setup.sh
BIN=$(bash hack/build-control-plane.sh | tail -n 1)
export DRAXR_BIN_DIR="$BIN"
.venv/bin/python -m draxr.devcluster up --scheduler --nodes 3 --devices 8 --device-plugin-nodes 1 \
  --implicit-class gpu-any.example.com
export KUBECONFIG="$PWD/.dev/admin.kubeconfig"
echo
echo "\$ kubectl get nodes,deviceclasses,resourceslices"
"$BIN/kubectl" get nodes,deviceclasses,resourceslices -o wide
echo
echo "\$ kubectl get resourceslice gpu-node-0-gpu-example-com -o yaml | head -40"
"$BIN/kubectl" get resourceslice gpu-node-0-gpu-example-com -o yaml | head -40
echo
echo "The cluster keeps running. Use it with: export KUBECONFIG=$KUBECONFIG; $BIN/kubectl get nodes"
echo "Stop it with: bash hack/demo.sh down"
