#!/usr/bin/env bash
# xprof_validate.sh BUILD_DIR SOURCE_DIR: loupe's XSpace files read by the real consumers: xprof's
# trace-viewer converter and jax.profiler.ProfileData (tests/xprof_check.py says what is checked).
# The files: test_xplane in dump mode (a hand-built model with every event kind, GPU planes and
# hostile names, a recorded two-thread session with 20 steps, and 3 steps of 10, 20 and 30 ms
# with flows to a worker thread, hand-built and recorded, CPU samples on two threads, and two
# processes with an async track: their lines and names, and a trace split into 3 parts over the
# lowered 2 GiB limit, each part converted alone, and two processes' GPU planes), each with `loupe summary --json` of it for
# the step check.
# Needs pip packages xprof and jax in one venv shared by every build directory and every run:
# $LOUPE_XPROF_VENV when set (tools/test.sh sets it to build-test/.venv-xprof for all its
# stages), else BUILD_DIR/../.venv-xprof when that directory is writable, else
# BUILD_DIR/xprof-venv. It is created and filled once (pip, bounded by LOUPE_PIP_TIMEOUT seconds,
# default 420) under an flock on <venv>.lock, so two builds testing at once never fill it
# together, and reused from then on (<venv>/.loupe-ready marks it complete). When pip cannot
# install them (offline), the test is skipped (exit 77) and says why. Each consumer run is
# bounded too (120 s), so the suite never hangs on it.
set -uo pipefail
build=$1
src=$2
name=xprof_validate
. "$src/tests/probes/xprof_venv.sh" # finds or fills the shared venv; sets $venv and $py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loupe-xprof.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! LOUPE_XPLANE_DUMP=$tmp "$build/tests/test_xplane" >"$tmp/dump.log" 2>&1; then
  cat "$tmp/dump.log"
  echo "xprof_validate: FAIL: test_xplane could not write the files"
  exit 1
fi
status=0
for c in full session steps recorded_steps samples processes; do
  echo "== $c.xplane.pb ($(stat -c %s "$tmp/$c.xplane.pb") bytes)"
  if ! "$build/loupe" summary --json --top 0 "$tmp/$c.xplane.pb" >"$tmp/$c.summary.json"; then
    echo "xprof_validate: FAIL: loupe summary $c.xplane.pb"
    status=1
    continue
  fi
  # the consumers log to stderr (absl); keep their output for a failure
  if ! timeout 120 "$py" "$src/tests/xprof_check.py" "$tmp/$c.xplane.pb" "$tmp/$c.expect.json" \
      "$tmp/$c.summary.json" >"$tmp/$c.log" 2>&1; then
    grep -v '^[IW]0000' "$tmp/$c.log" | tail -20
    echo "xprof_validate: FAIL: $c"
    status=1
  else
    grep -E '^(xprof|jax)' "$tmp/$c.log"
  fi
done
# a trace over the XPlane limit (lowered): 3 parts, each a whole XSpace that xprof converts
# alone, the zones spread over them, each exactly once
parts=("$tmp/split.xplane.pb" "$tmp/split.part2.xplane.pb" "$tmp/split.part3.xplane.pb")
echo "== split.xplane.pb (3 parts: $(stat -c %s "${parts[@]}" | tr '\n' ' ')bytes)"
if ! timeout 120 "$py" "$src/tests/xprof_check.py" --parts 6000 "${parts[@]}" \
    >"$tmp/split.log" 2>&1; then
  grep -v '^[IW]0000' "$tmp/split.log" | tail -20
  echo "xprof_validate: FAIL: split"
  status=1
else
  grep -E '^xprof' "$tmp/split.log"
fi
# check LABEL PREFIX ARGS...: xprof_check.py ARGS (bounded), its PREFIX lines, or its log's end
check() {
  local label=$1 prefix=$2
  shift 2
  if ! timeout 120 "$py" "$src/tests/xprof_check.py" "$@" >"$tmp/$label.log" 2>&1; then
    grep -v '^[IW]0000' "$tmp/$label.log" | tail -20
    echo "xprof_validate: FAIL: $label"
    status=1
  else
    grep -E "^$prefix" "$tmp/$label.log"
  fi
}
check gpu_processes xprof --gpu-processes "$tmp/gpu_processes.xplane.pb"
# every stat of every file through jax's ProfileData: test_xplane's dumps and a `loupe record` of
# a program that sleeps (sampling on: its off-CPU interval's varints are bytes >= 0x80, which
# 0.4's bytes_values handed to ProfileData's UTF-8 decoding). Not in sanitizer builds (the
# recorded program would need the sanitizer runtime preloaded: record_cli.sh covers that).
every=("$tmp"/*.xplane.pb)
if [ -z "$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")" ]; then
  if "$build/loupe" record -q -o "$tmp/rec" --print-run-dir "$tmp/rec.run" -- sleep 0.2 \
      >/dev/null 2>"$tmp/rec.err"; then
    every+=("$(cat "$tmp/rec.run")"/*.xplane.pb)
  else
    cat "$tmp/rec.err"
    echo "xprof_validate: FAIL: loupe record -- sleep 0.2"
    status=1
  fi
fi
# one timeline (tests/xprof_timeline.py): a process tree under `loupe record` (follow server 3 20:
# a parent and 3 workers of 20 "worker" zones each) is 4 files; XProf's view of them together
# has every worker zone where the merged run has it (each file counts from loupe record's start;
# 0.4 counted each from its own, so the workers were their start-up apart). Not in sanitizer
# builds, as above.
if [ -z "$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")" ]; then
  if "$build/loupe" record -q --format xplane -o "$tmp/tree" --print-run-dir "$tmp/tree.run" \
      -- "$build/tests/follow_probe" server 3 20 >/dev/null 2>"$tmp/tree.err" &&
      "$build/loupe" convert "$(cat "$tmp/tree.run")" -o "$tmp/tree_merged.xplane.pb" \
      >/dev/null 2>>"$tmp/tree.err"; then
    if ! timeout 120 "$py" "$src/tests/xprof_timeline.py" worker 60 "$tmp/tree_merged.xplane.pb" \
        "$(cat "$tmp/tree.run")"/*.xplane.pb >"$tmp/tree.log" 2>&1; then
      grep -v '^[IWE]0000' "$tmp/tree.log" | tail -20
      echo "xprof_validate: FAIL: one timeline of a process tree"
      status=1
    else
      grep '^xprof' "$tmp/tree.log"
    fi
  else
    cat "$tmp/tree.err"
    echo "xprof_validate: FAIL: loupe record -- follow_probe server 3 20"
    status=1
  fi
fi
echo "== every stat of ${#every[@]} files"
check every_stat jax --every-stat "${every[@]}"
exit $status
