/* lttng_case.c: the LTTng-UST peer loop: a begin and an end tracepoint per iteration, the same
 * shape as bench_zone_static. Whether it records depends on the lttng session the benchmark
 * creates around it (case_peers.c). */
#include "bench.h"
#include "lttng_tp.h"

__attribute__((noinline)) void bench_lttng_zone(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        lttng_ust_tracepoint(loupe_bench, zone_begin);
        __asm__ volatile("");
        lttng_ust_tracepoint(loupe_bench, zone_end);
    }
}

int bench_lttng_enabled(void) {
    return lttng_ust_tracepoint_enabled(loupe_bench, zone_begin) != 0;
}
