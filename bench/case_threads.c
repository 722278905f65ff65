/* case_threads.c: the static zone recorded on 1, 2 and 4 threads at once, each thread's CPU
 * time per zone next to the rdtsc floor run on the same threads (bench_time_threads).
 */
#include "harness.h"

#include <loupe/loupe.h>

#include <stdio.h>

void bench_cases_threads(void) {
    static const int counts[] = {1, 2, 4};
    double s[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];
    char name[80];
    for (size_t i = 0; i < 3; i++) {
        uint64_t n = bench_scaled(250000);
        snprintf(name, sizeof name, "floor rdtsc, %d thread%s (CPU ns per thread)", counts[i],
                 counts[i] > 1 ? "s" : "");
        bench_case *f = bench_add_case(name, "ns/zone");
        snprintf(name, sizeof name, "loupe static zone, %d thread%s (CPU ns per thread)", counts[i],
                 counts[i] > 1 ? "s" : "");
        bench_case *c = bench_k.mt[i] = bench_add_case(name, "ns/zone");
        uint64_t per_thread = (uint64_t)(bench_cfg.reps + 1) * n * 2;
        if (bench_session_start(per_thread + 64, 0) != 0) {
            c->na = f->na = 1;
            bench_note(c, "loupe_start_trace failed: %s", loupe_last_error());
            continue;
        }
        bench_time_threads(bench_zone_static, n, counts[i], s, fs);
        bench_session_stop(c, per_thread * (uint64_t)counts[i]);
        bench_set_stats(c, s, bench_cfg.reps, fs);
        bench_set_stats(f, fs, bench_cfg.reps, fs);
        bench_note(f, "the same threads, interleaved with the loupe row below");
        if (counts[i] == 1) {
            /* what any recorder that keeps its events pays, on the same kind of thread */
            bench_k.least_zone = bench_least_row(
                "floor: a recorder's least, zone, 1 thread (CPU ns)", bench_least_zone, n, 2);
        }
    }
}
