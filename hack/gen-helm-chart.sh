#!/usr/bin/env bash
# Regenerates the Helm chart's generated files (manifests/helm/draxr/crds/ and every template with a
# GENERATED header) from `kubectl kustomize manifests/` and the cert-manager component, so that RBAC
# rules, CRDs and webhook objects live in manifests/ and crds/ only. Run it after changing either;
# tests/integration/test_helm.py fails while the chart is stale. --check only reports.
# Usage: hack/gen-helm-chart.sh [--check] [--kubectl PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh >&2
exec .venv/bin/python -m draxr_dev.helmchart "$@"
