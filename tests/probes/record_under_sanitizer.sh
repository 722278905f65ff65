# record_under_sanitizer.sh: sourced by the script tests that run `loupe record` (record_cli.sh,
# perfetto_protoc.sh): sets $loupe to the command that runs the CLI. Under ASan the preloaded
# libloupe_preload.so needs the sanitizer runtime loaded first: it is preloaded into loupe
# (loupe record passes LD_PRELOAD on to the traced program, after its own library, hence
# verify_asan_link_order=0). TSan cannot be preloaded into a program (its runtime must start
# with the process): the test is skipped there (exit 77). Needs $build and $name.
loupe="$build/loupe"
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
case "$sanitize" in
  *thread*) echo "$name: skipped: TSan build (a preloaded TSan runtime cannot start late)"; exit 77 ;;
  *address*)
    asan_rt=$(gcc -print-file-name=libasan.so)
    [ -f "$asan_rt" ] || { echo "$name: skipped: ASan build and no gcc libasan.so to preload"; exit 77; }
    run_loupe() {
      LD_PRELOAD="$asan_rt${LD_PRELOAD:+:$LD_PRELOAD}" \
        ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" "$build/loupe" "$@"
    }
    loupe=run_loupe ;;
esac
