#!/usr/bin/env bash
# The test command: sets up .venv, builds (or reuses) the control-plane binaries, runs ruff, mypy and pytest
# (unit and integration against a real etcd + kube-apiserver + kube-controller-manager + kwok, and the
# real-node tests: pods run by kubelet + containerd with a DRA kubelet plugin).
# Extra arguments go to pytest, e.g. hack/test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "$0")/.."
# Build the Go parts only when the selected tests need them: `hack/test.sh tests/unit` on a fresh
# clone starts at once. The selection is the arguments that are not options nor an option's value
# (-k EXPR, -m, -p, -o, -W, --deselect, --ignore...). Anything selected that is not a path under
# tests/unit, tests/differential (the Go harnesses only), tests/packaging (a wheel of a fresh clone in
# a clean venv) or tests/monitoring (promtool only) counts as needing the control plane (another
# path, a node id elsewhere); no selection at all means the whole suite. The fast tier (no
# Kubernetes build): hack/test.sh tests/unit tests/differential.
selected=()
value_next=0
serial_only=0
for arg in "$@"; do
  if [ "$value_next" = 1 ]; then
    value_next=0
    [ "$arg" != no:xdist ] || serial_only=1
    continue
  fi
  case "$arg" in
    -k|-m|-p|-o|-W|-c|--deselect|--ignore|--ignore-glob|--durations|--timeout|--maxfail|--basetemp|--rootdir)
      value_next=1 ;;
    -n*|--numprocesses*|--dist*|-s|--capture*|--pdb*|--trace|-pno:xdist) serial_only=1 ;;  # the caller's own
    -*) ;;
    *) selected+=("$arg") ;;
  esac
done
needs_cp=1 needs_135=1 needs_node=1 needs_diff=1 needs_helm=1 needs_promtool=1 needs_image=1
needs_kueue=1 needs_versions=1
if [ "${#selected[@]}" -gt 0 ]; then
  needs_cp=0 needs_135=0 needs_node=0 needs_diff=0 needs_helm=0 needs_promtool=0 needs_image=0
  needs_kueue=0 needs_versions=0
  for arg in "${selected[@]}"; do
    case "$arg" in
      tests/unit|tests/unit/*|tests/differential|tests/differential/*) ;;
      tests/packaging|tests/packaging/*|tests/monitoring|tests/monitoring/*) ;;
      *) needs_cp=1 ;;
    esac
    case "$arg" in tests|tests/|tests/integration|tests/integration/|*adoption*) needs_135=1 ;; esac
    case "$arg" in tests|tests/|tests/realnode*) needs_node=1 ;; esac
    case "$arg" in tests|tests/|tests/differential*) needs_diff=1 ;; esac
    case "$arg" in tests|tests/|tests/integration|tests/integration/|*helm*|tests/realnode*) needs_helm=1 ;; esac
    case "$arg" in tests|tests/|tests/monitoring*) needs_promtool=1 ;; esac
    case "$arg" in tests|tests/|tests/image*|tests/realnode*) needs_image=1 ;; esac
    # Kueue, and the version matrix (Kubernetes 1.34, 1.35 and 1.36 too).
    case "$arg" in tests|tests/|tests/integration|tests/integration/|*kueue*) needs_kueue=1 ;; esac
    case "$arg" in tests|tests/|tests/integration|tests/integration/|*versions*) needs_versions=1 ;; esac
  done
fi
# The fast tier (every selected path under tests/unit or tests/differential) runs on pytest-xdist's
# workers, one per core (DRAXR_TEST_WORKERS; 1: in this process), each test file on one worker
# (--dist loadfile: a differential's module-scoped cases and Go results are computed once). The
# whole suite (CI) and the tests that start clusters stay in one process: they share one control
# plane per session. -n, -s, --pdb or -p no:xdist given here run in one process too.
workers=${DRAXR_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
fast_tier=0
if [ "${#selected[@]}" -gt 0 ]; then
  fast_tier=1
  for arg in "${selected[@]}"; do
    case "$arg" in tests/unit|tests/unit/*|tests/differential|tests/differential/*) ;; *) fast_tier=0 ;; esac
  done
fi
xdist=()
if [ "$fast_tier" = 1 ] && [ "$serial_only" = 0 ] && [ "$workers" -gt 1 ]; then
  xdist=(-n "$workers" --dist loadfile)
  echo "[test] $workers pytest-xdist workers (the fast tier; DRAXR_TEST_WORKERS=1: one process)" >&2
fi
# The whole suite (CI) runs in two parts: the fast tier on pytest-xdist's workers, started in the
# background as soon as its Go harnesses are built (cold, it runs beside the remaining builds: helm,
# Kueue, Kubernetes 1.34-1.36), then everything else in one process (one control plane per session).
# DRAXR_TEST_SPLIT=0 (or one worker, or -s, --pdb, -p no:xdist): the whole suite in one process.
split=0
if [ "${#selected[@]}" = 0 ] && [ "$serial_only" = 0 ] && [ "$workers" -gt 1 ] && [ "${DRAXR_TEST_SPLIT:-1}" != 0 ]; then
  split=1
  echo "[test] the whole suite in two parts: the fast tier on $workers pytest-xdist workers beside the" \
    "remaining builds, then the rest in one process (DRAXR_TEST_SPLIT=0: all in one)" >&2
fi
# The generated tests' seed (tests/seeds.py: the differentials' cases, the chaos run's faults): a
# new one every run, CI's too (unset or "random"); a number replays that seed; "fixed" gives each
# test its fixed default, the reference seed the known deviations are pinned at. Printed here, in
# pytest's header and at the end, with the command that replays the run.
case "${DRAXR_TEST_SEED:-random}" in
  random) DRAXR_TEST_SEED=$(( (RANDOM << 15 | RANDOM) % 1000000 )) ;;
  fixed) DRAXR_TEST_SEED= ;;
esac
replay="bash hack/test.sh"
for arg in "$@"; do replay+=" $(printf '%q' "$arg")"; done
if [ -n "$DRAXR_TEST_SEED" ]; then
  export DRAXR_TEST_SEED
  seed_line="seed $DRAXR_TEST_SEED; replay: DRAXR_TEST_SEED=$DRAXR_TEST_SEED $replay"
else
  unset DRAXR_TEST_SEED
  seed_line="seeds: the tests' fixed defaults; replay: DRAXR_TEST_SEED=fixed $replay"
fi
echo "[test] $seed_line" >&2
# DRAXR_TEST_PLAN=1: print what these arguments would build (and, above, the seed), build and run
# nothing (tests/unit/test_test_sh.py).
# The 30 slowest tests at the end of every run (CI's log says where the time goes); an argument
# --durations=N given here wins.
pytest_args=(--durations=30 "${xdist[@]}" "$@")
fast_args=()
if [ "$split" = 1 ]; then
  fast_args=(--durations=30 -n "$workers" --dist loadfile "$@" tests/unit tests/differential)
  pytest_args=(--durations=30 "$@" --ignore=tests/unit --ignore=tests/differential)
fi
if [ "${DRAXR_TEST_PLAN:-}" = 1 ]; then
  if [ "$split" = 1 ]; then echo "[test] pytest ${fast_args[*]}" >&2; fi
  echo "[test] pytest ${pytest_args[*]}" >&2
  echo "cp=$needs_cp k8s-1.35=$needs_135 node=$needs_node harnesses=$needs_diff helm=$needs_helm" \
    "promtool=$needs_promtool image=$needs_image kueue=$needs_kueue versions=$needs_versions"
  exit 0
fi
bash hack/setup.sh
# Started first and in the background, waited for before pytest: draxr's image (tests/image; cold it
# is mostly downloads and unpacking, debootstrap of the base) and promtool (tests/monitoring; cold,
# about 1 GB of modules to download). Both overlap the control plane's Go builds below.
background=()
start_bg() {  # start_bg NAME SCRIPT: its stdout and stderr kept for finish_bg
  bash "$2" >"$bg_dir/$1.out" 2>"$bg_dir/$1.err" &
  eval "bg_pid_$1=$!"
  background+=("$!")
}
finish_bg() {  # finish_bg NAME: waits (not in a subshell: wait needs its parent), shows its log, sets bg_result
  local pid rc=0
  eval "pid=\$bg_pid_$1"
  wait "$pid" || rc=$?
  cat "$bg_dir/$1.err" >&2
  if [ "$rc" != 0 ]; then
    echo "[test] building $1 failed ($rc)" >&2
    exit 1
  fi
  bg_result=$(tail -n 1 "$bg_dir/$1.out")
}
bg_dir=$(mktemp -d)
trap 'kill "${background[@]}" 2>/dev/null || true; rm -rf "$bg_dir"' EXIT  # a failed build ends the run
if [ "$needs_image" = 1 ]; then start_bg image hack/build-image.sh; fi
if [ "$needs_promtool" = 1 ]; then start_bg promtool hack/build-promtool.sh; fi
if [ "$needs_cp" = 1 ]; then
  DRAXR_BIN_DIR=$(bash hack/build-control-plane.sh | tail -n 1)
  export DRAXR_BIN_DIR
  echo "[test] control-plane binaries: $DRAXR_BIN_DIR" >&2
fi
if [ "$needs_node" = 1 ]; then
  # The real node (tests/realnode): containerd, kubelet, our DRA and device plugins, the images;
  # root, and Debian's runc, CNI plugins and busybox-static (installed when missing).
  DRAXR_NODE_BIN_DIR=$(bash hack/build-node.sh | tail -n 1)
  export DRAXR_NODE_BIN_DIR
  echo "[test] real-node binaries: $DRAXR_NODE_BIN_DIR" >&2
fi
if [ "$needs_diff" = 1 ]; then
  # The differential tests' Go harnesses (upstream's DRA allocator, kube-scheduler's plugins), built
  # (or reused) here so that a cold build does not count against pytest's per-test timeout; the
  # tests' fixtures then find them in the cache.
  for harness in allocator-harness scheduler-harness; do
    binary=$(bash hack/build-harness.sh "$harness" | tail -n 1)
    echo "[test] $harness: $binary" >&2
  done
fi
if [ "$split" = 1 ]; then
  echo "[test] the fast tier starts: pytest ${fast_args[*]}" >&2
  .venv/bin/python -m pytest "${fast_args[@]}" >"$bg_dir/fast.out" 2>&1 &
  fast_pid=$!
  background+=("$fast_pid")
fi
# The builds only the suite's last modules need (helm, Kueue, Kubernetes 1.34-1.36): one background
# chain at the lowest CPU priority (hack/build-late.sh), beside the fast tier and pytest; tests/
# conftest.py runs those modules last and waits for the chain (DRAXR_LATE_BUILDS_DONE) before them.
# Cold, the builds overlap the tests instead of coming before them.
late=()
if [ "$needs_helm" = 1 ]; then late+=(helm); fi  # tests/integration/test_helm.py, test_docs.py
if [ "$needs_kueue" = 1 ]; then late+=(kueue); fi  # tests/integration/test_kueue.py
# Kubernetes 1.35: adoption mode's tests need a kube-scheduler without DRAExtendedResource.
if [ "$needs_135" = 1 ]; then late+=(k8s-1.35); fi
# The version matrix (tests/integration/test_versions.py, docs/reference/versions.md).
if [ "$needs_versions" = 1 ]; then late+=(versions); fi
late_pid=""
if [ "${#late[@]}" -gt 0 ]; then
  DRAXR_LATE_BUILDS_DONE="$bg_dir/late.done"
  export DRAXR_LATE_BUILDS_DONE
  echo "[test] building in the background (nice 19): ${late[*]}" >&2
  DONE="$DRAXR_LATE_BUILDS_DONE" nice -n 19 bash hack/build-late.sh "${late[@]}" 2>"$bg_dir/late.err" &
  late_pid=$!
  background+=("$late_pid")
fi
if [ "$needs_promtool" = 1 ]; then
  # promtool (tests/monitoring: `promtool test rules` for every alert, `promtool check rules` for
  # the alerts and every PromQL expression of the Grafana dashboard).
  finish_bg promtool
  DRAXR_PROMTOOL=$bg_result
  export DRAXR_PROMTOOL
  echo "[test] promtool: $DRAXR_PROMTOOL" >&2
fi
if [ "$needs_image" = 1 ]; then
  # The Dockerfile built by buildah on a local debootstrap base, as an OCI archive; the base is
  # cached, so a warm run only rebuilds the image when its inputs changed.
  finish_bg image
  DRAXR_IMAGE_ARCHIVE=$bg_result
  export DRAXR_IMAGE_ARCHIVE
  echo "[test] image: $DRAXR_IMAGE_ARCHIVE" >&2
fi
.venv/bin/ruff check operator tests bench hack
.venv/bin/mypy
set +e
fast_rc=0
if [ "$split" = 1 ]; then
  wait "$fast_pid"
  fast_rc=$?
  echo "[test] the fast tier (unit + differential) ended ($fast_rc); its output:" >&2
  cat "$bg_dir/fast.out"
fi
.venv/bin/python -m pytest "${pytest_args[@]}"
rc=$?
if [ -n "$late_pid" ]; then
  wait "$late_pid"
  late_rc=$?
  echo "[test] the background builds ended ($late_rc); their log:" >&2
  cat "$bg_dir/late.err" >&2
  if [ "$late_rc" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=1; fi
fi
set -e
# The seed again at the end, where a red run's reader looks.
echo "[test] $seed_line" >&2
if [ "$rc" -eq 5 ] || [ "$fast_rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: that is a failure" >&2
  exit 1
fi
if [ "$fast_rc" -ne 0 ]; then
  echo "[test] the fast tier failed ($fast_rc): see its output above" >&2
  [ "$rc" -ne 0 ] || rc=$fast_rc
fi
exit "$rc"
