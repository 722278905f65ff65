#!/usr/bin/env bash
# capture_limits.sh BUILD_DIR SOURCE_DIR: `loupe capture` against a fake profiler server (a
# Python http.server on 127.0.0.1) that answers badly: a body over --max-mb, a body that is not a
# trace (zeros; gzip of text), a 400, a 409 every time. Each time: the exact message, nothing kept
# (no file, no run directory: an older run stays the newest), the backoff between attempts, and
# a 400 is neither retried nor answered with "try again". Needs python3 (skipped without it).
set -uo pipefail
build=$1
loupe=$build/loupe
command -v python3 >/dev/null || { echo "capture_limits: SKIPPED: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loupe-caplim.XXXXXX")
srv=
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
fail() {
  echo "capture_limits: FAIL: $*"
  exit 1
}
cat >"$tmp/fake.py" <<'EOF'
import gzip, http.server, json, sys, time
MODE = {"big": (200, b"\0" * (2 << 20)), "zeros": (200, b"\0" * 102400),
        "text": (200, gzip.compress(b"hello, not a trace")),
        "bad": (400, json.dumps({"status": 400, "error": "Bad request",
                                 "detail": "duration_ms: nope"}).encode()),
        "busy": (409, json.dumps({"status": 409, "error": "busy", "detail": "a capture"}).encode())}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        if self.path.startswith("/v1/status"):
            code, body = 200, json.dumps({"unix_time_ns": time.time_ns()}).encode()
        elif self.path.startswith("/v1/clock"):  # a server without it: no clock offset
            code, body = 404, b"{}"
        else:
            code, body = MODE[sys.argv[1]]
            with open(sys.argv[2], "a") as f:
                f.write("%.3f\n" % time.monotonic())
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
EOF
# run MODE ARGS...: starts the fake server in MODE, captures from it, sets $out and $rc
run() {
  local mode=$1
  shift
  : >"$tmp/hits"
  # a fresh file per server: the last server's port in it, read before the background job's
  # redirection truncated it, then read again empty, was a failure at load ("did not start")
  rm -f "$tmp/port"
  python3 "$tmp/fake.py" "$mode" "$tmp/hits" >"$tmp/port.new" &
  srv=$!
  for _ in $(seq 300); do grep -q '^[0-9][0-9]*$' "$tmp/port.new" 2>/dev/null && break; sleep 0.1; done
  cp "$tmp/port.new" "$tmp/port" 2>/dev/null
  rm -f "$tmp/port.new"
  port=$(cat "$tmp/port")
  [ -n "$port" ] || fail "the fake server ($mode) did not start within 30 s"
  out=$(timeout 60 "$loupe" capture "127.0.0.1:$port" --duration-ms 10 --log-dir "$tmp/log" "$@" 2>&1)
  rc=$?
  kill $srv
  wait $srv 2>/dev/null
  srv=
}
has() { grep -qF -- "$1" <<<"$out" || fail "$2: no '$1' in:
$out"; }
hasnt() { ! grep -qF -- "$1" <<<"$out" || fail "$2: '$1' in:
$out"; }
mkdir -p "$tmp/log/plugins/profile/2020_01_01_00_00_00"
touch "$tmp/log/plugins/profile/2020_01_01_00_00_00/old.trace.json.gz"
left() { # nothing but the old run: no new run directory, no hidden part file
  got=$(cd "$tmp/log/plugins/profile" && ls -A | tr '\n' ' ')
  [ "$got" = "2020_01_01_00_00_00 " ] || fail "$1: left behind: $got"
}

run big --max-mb 1 --attempts 3
[ $rc = 1 ] || fail "over --max-mb: exit $rc"
has "No trace event is collected from 127.0.0.1:$port: the response is over the limit of 1048576 bytes (--max-mb); nothing kept" "over --max-mb"
has "loupe capture: No trace event is collected (not retried: a retry would fail the same way; see why below)." "over --max-mb"
[ "$(grep -c 'Starting to trace' <<<"$out")" = 1 ] || fail "over --max-mb was retried: $out"
left "over --max-mb"
echo "over --max-mb 1: refused, not retried, nothing kept"

run zeros
[ $rc = 1 ] || fail "zeros: exit $rc"
has "No trace event is collected from 127.0.0.1:$port: the response (102400 bytes) is not a json trace" "zeros"
left "zeros"
echo "100 KiB of zeros: not a json trace, nothing kept"

run text
[ $rc = 1 ] || fail "text: exit $rc"
has "No trace event is collected from 127.0.0.1:$port: the response (38 bytes) is not a json trace: " "text"
left "text"
echo "gzipped text: not a json trace (the reader says why), nothing kept"

run bad --attempts 3
[ $rc = 1 ] || fail "400: exit $rc"
has "No trace event is collected from 127.0.0.1:$port: HTTP 400: Bad request (duration_ms: nope)" "400"
hasnt "Perhaps, you want to try again" "400"
hasnt "Automatically retrying" "400"
[ "$(wc -l <"$tmp/hits")" = 1 ] || fail "400: $(wc -l <"$tmp/hits") profile requests, want 1"
left "400"
echo "400: one request, no 'try again'"

run busy --attempts 3
[ $rc = 1 ] || fail "409: exit $rc"
has "Perhaps, you want to try again (with more attempts?)." "409"
[ "$(wc -l <"$tmp/hits")" = 3 ] || fail "409: $(wc -l <"$tmp/hits") profile requests, want 3"
# backoff: 0.5 s, then 1 s (the request itself takes a few ms)
gaps=$(awk 'NR > 1 { printf "%d ", ($1 - prev) * 1000 } { prev = $1 }' "$tmp/hits")
read -r g1 g2 <<<"$gaps"
[ "$g1" -ge 500 ] && [ "$g1" -lt 1500 ] && [ "$g2" -ge 1000 ] && [ "$g2" -lt 2500 ] ||
  fail "409: gaps between attempts $gaps ms, want about 500 and 1000"
left "409"
echo "409 three times: retried after ${g1} ms and ${g2} ms, nothing kept"
# the same address twice is a usage error before any request (one file per address)
out=$("$loupe" capture 127.0.0.1:9,127.0.0.1:9 --duration-ms 10 --log-dir "$tmp/twice" 2>&1); rc=$?
[ $rc = 2 ] || fail "twice: exit $rc"
[ "$out" = "loupe capture: 127.0.0.1:9 is given twice: capture each address once" ] ||
  fail "twice: $out"
echo "an address given twice: refused"
echo "capture_limits: OK"
