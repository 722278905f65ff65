/* case_floors.c: the floors every ratio is taken against (the rdtsc and the clock_gettime
 * floor, floor.c), and the three cheapest loops timed together: the empty loop, the static zone
 * compiled out (zones_off.c) and the static zone with no trace active (zones.c).
 */
#include "harness.h"

#include <stdint.h>

static volatile uint64_t sink; /* the floor ring's checksum: keeps its stores observable */

void bench_cases_floors(void) {
    double s[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];
    bench_case *c = bench_add_case("floor: 2x rdtsc + 2x 16 B TLS stores", "ns/zone");
    bench_time_loop(bench_floor_rdtsc, bench_scaled(2000000), s, NULL);
    bench_set_stats(c, s, bench_cfg.reps, NULL);
    c->floor = c->med;
    c->ratio = 1.0;
    c = bench_add_case("floor: 2x clock_gettime(MONOTONIC) + 2x 16 B stores", "ns/zone");
    bench_time_loop(bench_floor_clock, bench_scaled(1000000), s, fs);
    bench_set_stats(c, s, bench_cfg.reps, fs);
    {
        /* The three cheapest loops, interleaved: compiled out must equal the empty loop. */
        bench_loop_fn fns[3] = {bench_empty_loop, bench_zone_static_off, bench_zone_static};
        uint64_t ns[3] = {bench_scaled(50000000), bench_scaled(50000000), bench_scaled(50000000)};
        double t[3][BENCH_MAX_REPS], d[BENCH_MAX_REPS];
        bench_time_multi(fns, ns, 3, t, fs);
        bench_k.empty = bench_add_case("empty loop", "ns/iter");
        bench_set_stats(bench_k.empty, t[0], bench_cfg.reps, fs);
        bench_k.notrace = bench_add_case("loupe static zone, no trace active", "ns/zone");
        bench_set_stats(bench_k.notrace, t[2], bench_cfg.reps, fs);
        bench_k.off = bench_add_case("loupe static zone, compiled out (LOUPE_DISABLE)", "ns/zone");
        bench_set_stats(bench_k.off, t[1], bench_cfg.reps, fs);
        for (int i = 0; i < bench_cfg.reps; i++) {
            d[i] = t[1][i] - t[0][i];
        }
        bench_k.compiled_out_delta = bench_median(d, bench_cfg.reps);
        bench_note(bench_k.off, "%+.3f ns vs the empty loop (median of paired differences)",
                   bench_k.compiled_out_delta);
    }
    sink = bench_floor_checksum();
}
