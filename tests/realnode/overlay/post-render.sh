#!/bin/sh
# helm --post-renderer for tests/realnode/test_draxr_pod.py: the chart's rendered objects (stdin)
# through the test overlay, so that they are changed by the overlay only. Arguments (helm's
# --post-renderer-args): kubectl, and the run's kustomization directory, which lists chart.yaml
# (written here), the machine's numbers and this overlay as a component.
set -eu
kubectl=$1
dir=$2
cat >"$dir/chart.yaml"
exec "$kubectl" kustomize "$dir"
