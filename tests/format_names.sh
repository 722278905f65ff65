#!/bin/bash
# format_names.sh: the format registry (src/export/registry.c) is the only list of formats. A
# format's name or file suffix, as a C string literal, may appear only in its registry row and
# in its writer's and readers' files; a new list of names (a switch, a help text, a table of
# suffixes) in src/ or cli/ fails here and should iterate the registry instead
# (loupe_format_info() and friends, loupe/writer.h).
set -u
src=${2:?usage: format_names.sh BUILD_DIR SOURCE_DIR}
cd "$src" || exit 1
allowed='^(src/export/registry\.c|src/export/(chrome_json|xplane|perfetto_proto|folded|svg|mosaic_json)\.c|src/import/[a-z_]+\.c):'
# names: the literal exactly; suffixes: any literal ending with them ("%s/perfetto_trace.json.gz")
patterns=(
    '"json"' '"chrome"' '"xplane"' '"perfetto"' '"pftrace"' '"perfetto-json"' '"folded"'
    '"collapsed"' '"svg"' '"flamegraph"' '"[^"]*\.svg"'
    '"[^"]*\.trace\.json\.gz"' '"[^"]*\.xplane\.pb"' '"[^"]*\.xspace\.pb"' '"[^"]*\.pftrace"'
    '"[^"]*\.perfetto-trace"' '"[^"]*perfetto_trace\.json\.gz"' '"[^"]*\.folded"'
    '"[^"]*\.collapsed"'
)
found=0
checked=0
for p in "${patterns[@]}"; do
    hits=$(grep -rnE --include='*.c' --include='*.h' -- "$p" src cli)
    [ -n "$hits" ] && checked=$((checked + 1))
    bad=$(printf '%s\n' "$hits" | grep -vE "$allowed" | grep -v '^$')
    if [ -n "$bad" ]; then
        echo "FAIL: $p outside the registry and the writers/readers:"
        printf '%s\n' "$bad"
        found=1
    fi
done
# The registry itself must hold every name (else the grep above checks nothing).
for n in json chrome xplane perfetto pftrace perfetto-json folded collapsed svg flamegraph; do
    grep -q "\"$n\"" src/export/registry.c || { echo "FAIL: \"$n\" is not in registry.c"; found=1; }
done
[ "$checked" -ge 8 ] || { echo "FAIL: only $checked patterns matched anything"; found=1; }
[ "$found" = 0 ] && echo "ok: ${#patterns[@]} patterns, each only in the registry, writers, readers"
exit "$found"
