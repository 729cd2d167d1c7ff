#!/usr/bin/env bash
# Builds (or reuses) tests/scheduler_harness; see hack/build-harness.sh.
exec bash "$(dirname "${BASH_SOURCE[0]}")/build-harness.sh" scheduler-harness "$@"
