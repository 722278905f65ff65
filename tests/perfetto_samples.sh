#!/usr/bin/env bash
# perfetto_samples.sh: the CPU samples of a .pftrace checked with Perfetto's own schema
# (perfetto_trace_pb2, from the `perfetto` PyPI package): tests/test_samples_io writes its
# sampled model (--write-pftrace), tests/probes/perfetto_samples.py parses every packet, checks
# the interning rules and prints the samples, compared here exactly.
# Python: $LOUPE_PERFETTO_PY, else a venv BUILD_DIR/../.venv-perfetto filled once by pip
# (bounded by LOUPE_PIP_TIMEOUT, default 300 s). Exits 77 when neither can be had.
# Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "perfetto_samples: FAIL: $*" >&2; exit 1; }
py=${LOUPE_PERFETTO_PY:-}
if [ -z "$py" ]; then
  venv=$(cd "$build/.." && pwd)/.venv-perfetto
  py=$venv/bin/python
  if [ ! -f "$venv/.loupe-ready" ]; then
    exec 9>"$venv.lock"
    command -v flock >/dev/null && flock -w $(( ${LOUPE_PIP_TIMEOUT:-300} + 60 )) 9
    if [ ! -f "$venv/.loupe-ready" ]; then
      rm -rf "$venv"
      if ! python3 -m venv "$venv" >/dev/null 2>&1 ||
         ! timeout "${LOUPE_PIP_TIMEOUT:-300}" "$py" -m pip install -q --disable-pip-version-check \
           perfetto >"$venv.pip.log" 2>&1; then
        rm -rf "$venv"
        echo "perfetto_samples: SKIPPED: pip could not install perfetto (see $venv.pip.log);"
        echo "  set LOUPE_PERFETTO_PY to a python that has it"
        exit 77
      fi
      touch "$venv/.loupe-ready"
    fi
  fi
fi
"$py" -c 'from perfetto.protos.perfetto.trace import perfetto_trace_pb2' 2>/dev/null || {
  echo "perfetto_samples: SKIPPED: $py has no perfetto_trace_pb2"; exit 77; }
"$build/tests/test_samples_io" --write-pftrace "$tmp/s.pftrace" || fail "test_samples_io --write-pftrace"
"$py" "$src/tests/probes/perfetto_samples.py" "$tmp/s.pftrace" > "$tmp/out.txt" \
  || fail "perfetto_trace_pb2 check: $(cat "$tmp/out.txt")"
cat > "$tmp/want.txt" <<'TXT'
1000000 4242 4242 0 | main;work;helper
2000000 4242 4242 0 | main;work;helper
3000000 4242 4242 1 | main;work
3000000 4242 4243 2 | main;work;memcpy;do_syscall_64
4000000 4242 4243 -1 | jit 0x7f00
5000000 4242 4243 3 | 
TXT
diff "$tmp/want.txt" "$tmp/out.txt" || fail "samples as Perfetto reads them differ"
echo "ok"
