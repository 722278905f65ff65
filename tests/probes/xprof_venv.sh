# xprof_venv.sh: sourced by the script tests that run xprof and jax (tests/grpc_validate.sh):
# finds or fills the one venv that tests/xprof_validate.sh uses, with the same rules, the same
# path and the same lock, so every test and build directory shares it:
# $LOUPE_XPROF_VENV when set, else BUILD_DIR/../.venv-xprof when that directory is writable, else
# BUILD_DIR/xprof-venv; filled once by pip under an flock on <venv>.lock (bounded by
# LOUPE_PIP_TIMEOUT, default 420 s); <venv>/.loupe-ready marks it complete. Needs $build and
# $name (the test's name, for messages); sets $py. Exits 77 when pip cannot install them.
if [ -n "${LOUPE_XPROF_VENV:-}" ]; then
  venv=$LOUPE_XPROF_VENV
elif [ -w "$build/.." ]; then
  venv=$(cd "$build/.." && pwd)/.venv-xprof
else
  venv=$build/xprof-venv
fi
py=$venv/bin/python
if [ ! -f "$venv/.loupe-ready" ]; then
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  if command -v flock >/dev/null; then
    if ! flock -w $(( ${LOUPE_PIP_TIMEOUT:-420} + 120 )) 9; then
      echo "$name: FAIL: $venv.lock is still held after the pip timeout"
      exit 1
    fi
  fi
  if [ -f "$venv/.loupe-ready" ]; then
    :
  elif [ -n "${LOUPE_XPROF_VENV:-}" ] && "$py" -c 'import xprof, jax' 2>/dev/null; then
    touch "$venv/.loupe-ready"
  else
    rm -rf "$venv"
    echo "$name: installing xprof and jax into $venv (pip, once)"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      rm -rf "$venv"
      echo "$name: SKIPPED: python3 -m venv failed (Debian: apt-get install python3-venv)"
      exit 77
    fi
    if ! timeout "${LOUPE_PIP_TIMEOUT:-420}" "$py" -m pip install -q --disable-pip-version-check \
        xprof jax >"$venv.pip.log" 2>&1; then
      echo "$name: SKIPPED: pip could not install xprof and jax (offline or timed out;"
      echo "  see $venv.pip.log); set LOUPE_XPROF_VENV to a venv that has them"
      tail -3 "$venv.pip.log"
      rm -rf "$venv"
      exit 77
    fi
    touch "$venv/.loupe-ready"
  fi
  exec 9>&-
fi
