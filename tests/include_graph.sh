#!/usr/bin/env bash
# include_graph.sh BUILD_DIR SOURCE_DIR: the floors of docs/internals/architecture.md hold.
# Prints the include graph between the folders of src/ (an edge A -> B: a file in A includes a
# header of B) and fails on any edge that the floor table below does not allow, and on any
# "src/..." include from preload/ or cli/ (they use the public headers only).
set -uo pipefail
src=$2
declare -A allowed=(
  [base]=""
  [model]="base"
  [record]="base model"
  [export]="base model"
  [import]="base model"
  [gpu]="base model"
  [session]="base model record export gpu"
  [server]="base model export session"
  [preload]=""
)
cd "$src" || exit 1
fail=0
edges=$(for f in $(git ls-files 'src/*.c' 'src/*.h' 2>/dev/null || find src -name '*.[ch]'); do
  from=$(echo "$f" | cut -d/ -f2)
  grep -oE '^#include "[^"]+"' "$f" | sed 's/#include "//; s/"$//' | while read -r inc; do
    case $inc in
      */*) to=${inc%%/*} ;;
      *) to="(bare: $inc in $f)" ;;
    esac
    [ "$to" != "$from" ] && echo "$from -> $to"
  done
done | sort -u)
echo "$edges"
while read -r from _ to; do
  [ -z "$from" ] && continue
  case " ${allowed[$from]-} " in
    *" $to "*) ;;
    *) echo "include_graph: FAIL: $from may not include $to (floors: docs/internals/architecture.md)"
       fail=1 ;;
  esac
done <<<"$edges"
if grep -nE '^#include "(base|model|record|export|import|gpu|session|server)/' \
    $(git ls-files 'cli/*.c' 'cli/*.h' 'src/preload/*.c' 2>/dev/null); then
  echo "include_graph: FAIL: cli/ and src/preload/ use the public headers only"
  fail=1
fi
[ "$fail" = 0 ] && echo "include_graph: every edge goes down a floor"
exit "$fail"
