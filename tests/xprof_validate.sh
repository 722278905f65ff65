#!/usr/bin/env bash
# xprof_validate.sh BUILD_DIR SOURCE_DIR: loupe's XSpace files read by the real consumers: xprof's
# trace-viewer converter and jax.profiler.ProfileData (tests/xprof_check.py says what is checked).
# The files: test_xplane in dump mode (a hand-built model with every event kind, GPU planes and
# hostile names, and a recorded two-thread session).
# Needs pip packages xprof and jax: a venv under BUILD_DIR/xprof-venv, created and filled once
# (bounded by LOUPE_PIP_TIMEOUT seconds, default 420), or $LOUPE_XPROF_VENV when set. When pip
# cannot install them (offline), the test is skipped (exit 77) and says why. Each consumer run is
# bounded too (120 s), so the suite never hangs on it.
set -uo pipefail
build=$1
src=$2
venv=${LOUPE_XPROF_VENV:-$build/xprof-venv}
py=$venv/bin/python
if [ ! -f "$venv/.loupe-ready" ]; then
  if [ -n "${LOUPE_XPROF_VENV:-}" ] && "$py" -c 'import xprof, jax' 2>/dev/null; then
    :
  else
    rm -rf "$venv"
    echo "xprof_validate: installing xprof and jax into $venv (pip, once)"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      echo "xprof_validate: SKIPPED: python3 -m venv failed (Debian: apt-get install python3-venv)"
      exit 77
    fi
    if ! timeout "${LOUPE_PIP_TIMEOUT:-420}" "$py" -m pip install -q --disable-pip-version-check \
        xprof jax >"$build/xprof-pip.log" 2>&1; then
      echo "xprof_validate: SKIPPED: pip could not install xprof and jax (offline or timed out;"
      echo "  see $build/xprof-pip.log); set LOUPE_XPROF_VENV to a venv that has them"
      tail -3 "$build/xprof-pip.log"
      rm -rf "$venv"
      exit 77
    fi
  fi
  touch "$venv/.loupe-ready"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loupe-xprof.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! LOUPE_XPLANE_DUMP=$tmp "$build/tests/test_xplane" >"$tmp/dump.log" 2>&1; then
  cat "$tmp/dump.log"
  echo "xprof_validate: FAIL: test_xplane could not write the files"
  exit 1
fi
status=0
for c in full session; do
  echo "== $c.xplane.pb ($(stat -c %s "$tmp/$c.xplane.pb") bytes)"
  # the consumers log to stderr (absl); keep their output for a failure
  if ! timeout 120 "$py" "$src/tests/xprof_check.py" "$tmp/$c.xplane.pb" "$tmp/$c.expect.json" \
      >"$tmp/$c.log" 2>&1; then
    grep -v '^[IW]0000' "$tmp/$c.log" | tail -20
    echo "xprof_validate: FAIL: $c"
    status=1
  else
    grep -E '^(xprof|jax)' "$tmp/$c.log"
  fi
done
exit $status
