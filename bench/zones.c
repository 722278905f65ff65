/* zones.c: loupe's recording loops, compiled with loupe's inline hot path (annotate.h) as a
 * user's code would be. One zone per iteration; the empty asm keeps the zone from being merged
 * or hoisted without adding work. */
#include "bench.h"

#include <loupe/loupe.h>

__attribute__((noinline)) void bench_zone_static(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        LOUPE_ZONE("zone");
        __asm__ volatile("");
    }
}

/* The explicit form (loupe_zone_begin / loupe_zone_end): out of line while tracing, for the
 * stack of open explicit zones that lets a skipped end give its slot back. */
static const loupe_srcloc explicit_sl = {"zone_explicit", "bench_zone_explicit", "zones.c", 0,
                                         LOUPE_LEVEL_INFO};

__attribute__((noinline)) void bench_zone_explicit(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        loupe_zone_begin(&explicit_sl);
        __asm__ volatile("");
        loupe_zone_end(&explicit_sl);
    }
}

__attribute__((noinline)) void bench_zone_dyn(uint64_t n) {
    /* A name the compiler cannot see as a constant: the caller's buffer. */
    static char name[] = BENCH_DYN_NAME;
    char *volatile p = name;
    for (uint64_t i = 0; i < n; i++) {
        LOUPE_ZONE_DYN(p);
        __asm__ volatile("");
    }
}

__attribute__((noinline)) void bench_zone_args(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        LOUPE_ZONE("zone_args");
        LOUPE_ARG_I64("index", i);
        LOUPE_ARG_I64("bytes", 4096);
        __asm__ volatile("");
    }
}

__attribute__((noinline)) void bench_counter(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        LOUPE_COUNTER_I64("queue_depth", i);
        __asm__ volatile("");
    }
}

/* The same zone and arguments as bench_zone_args, in one call (LOUPE_ZONE_ARGS): one state
 * test, one guard and one room check for the begin and both arguments. */
__attribute__((noinline)) void bench_zone_args_fused(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        LOUPE_ZONE_ARGS("zone_args", "index", (int64_t)i, "bytes", (int64_t)4096);
        __asm__ volatile("");
    }
}
