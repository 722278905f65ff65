/* case_zones.c: loupe's recording cases on one pinned thread (the loops in zones.c): a static
 * zone, a zone with a 16-byte dynamic name, a zone with two int64 arguments and a counter
 * sample, each in a session whose buffer holds all its events.
 */
#include "harness.h"

void bench_cases_zones(void) {
    bench_k.zone_static = bench_loupe_case("loupe static zone, tracing", "ns/zone",
                                           bench_zone_static, bench_scaled(500000), 2, 0);
    {
        /* A 16-byte name is copied inline after its begin, 15 bytes per 16-byte slot: 2 slots,
         * so a dynamic zone is 4 events (begin, 2 name slots, end). */
        uint64_t n = bench_scaled(200000);
        bench_k.dyn = bench_loupe_case("loupe dynamic-name zone (16 B name), tracing", "ns/zone",
                                       bench_zone_dyn, n, 4, 0);
    }
    bench_loupe_case("loupe zone + 2 int64 args, tracing", "ns/zone", bench_zone_args,
                     bench_scaled(200000), 6, 0);
    bench_loupe_case("loupe counter sample, tracing", "ns/sample", bench_counter,
                     bench_scaled(500000), 2, 0);
}
