#!/usr/bin/env bash
# The real-node demo (called by `bash hack/demo.sh --real-node`): the dev control plane with node
# `localhost` run by kubelet + containerd + our DRA kubelet plugin, draxr, and one pod asking for
# draxr.dev/real-gpu the device-plugin way: an init container and two containers, each printing the
# DRAXR_* variables the plugin's CDI spec put into it. `bash hack/demo.sh down` stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=${DRAXR_DEV_DIR:-$PWD/.dev}
BIN=${DRAXR_BIN_DIR:?run through hack/demo.sh --real-node}
DRAXR_NODE_BIN_DIR=$(bash hack/build-node.sh | tail -n 1)
export DRAXR_NODE_BIN_DIR
.venv/bin/python -m draxr_dev.devcluster --dir "$DEV" down >/dev/null
.venv/bin/python -m draxr_dev.devcluster --dir "$DEV" up --scheduler --nodes 0 --real-node --real-node-devices 4
export KUBECONFIG="$DEV/admin.kubeconfig"
echo
echo "\$ kubectl get nodes,resourceslices,deviceclasses"
"$BIN/kubectl" get nodes,resourceslices,deviceclasses -o wide
echo
echo "\$ kubectl apply -k crds/   # ExtendedResourceMappings and DevicePluginRecords (the node agent's), as the other demo"
"$BIN/kubectl" apply -k crds/
.venv/bin/draxr run --kubeconfig "$KUBECONFIG" --bind-address 127.0.0.1 --metrics-port 18080 --health-port 18081 \
  > "$DEV/draxr.log" 2>&1 &
echo $! > "$DEV/draxr.pid"
for _ in $(seq 120); do curl -sf http://127.0.0.1:18081/readyz >/dev/null && break; sleep 0.5; done
echo "draxr running (pid $(cat "$DEV/draxr.pid"), log $DEV/draxr.log)"
echo
echo "\$ kubectl apply   # init container asks 1, container a asks 2, container b asks 1; schedulerName: draxr"
"$BIN/kubectl" create namespace real-demo --dry-run=client -o yaml | "$BIN/kubectl" apply -f - >/dev/null
"$BIN/kubectl" -n real-demo delete pod devices --ignore-not-found >/dev/null
"$BIN/kubectl" -n real-demo apply -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: devices}
spec:
  schedulerName: draxr
  restartPolicy: Never
  hostNetwork: true
  tolerations: [{key: draxr.dev/real-node, operator: Exists, effect: NoSchedule}]
  initContainers:
  - {name: init, image: draxr.local/busybox:1, imagePullPolicy: Never, command: [sh, -c, 'env | grep ^DRAXR_ | sort'],
     resources: {limits: {draxr.dev/real-gpu: "1"}}}
  containers:
  - {name: a, image: draxr.local/busybox:1, imagePullPolicy: Never, command: [sh, -c, 'env | grep ^DRAXR_ | sort'],
     resources: {limits: {draxr.dev/real-gpu: "2"}}}
  - {name: b, image: draxr.local/busybox:1, imagePullPolicy: Never, command: [sh, -c, 'env | grep ^DRAXR_ | sort'],
     resources: {limits: {draxr.dev/real-gpu: "1"}}}
YAML
for _ in $(seq 240); do
  phase=$("$BIN/kubectl" -n real-demo get pod devices -o jsonpath='{.status.phase}')
  [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
  sleep 0.5
done
echo
echo "\$ kubectl -n real-demo get pod devices -o jsonpath='{.status.extendedResourceClaimStatus}'"
"$BIN/kubectl" -n real-demo get pod devices -o jsonpath='{.status.extendedResourceClaimStatus}'; echo
echo "\$ kubectl -n real-demo get pod devices   # phase: $phase"
"$BIN/kubectl" -n real-demo get pod devices -o wide
for c in init a b; do
  echo
  echo "\$ kubectl -n real-demo logs devices -c $c"
  "$BIN/kubectl" -n real-demo logs devices -c "$c"
done
echo
echo "The special claim is released once the pod is done; stop everything with: bash hack/demo.sh down"
