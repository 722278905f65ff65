/* case_zones.c: loupe's recording cases on one pinned thread (the loops in zones.c): a static
 * zone, a zone with a 16-byte dynamic name, a zone with two int64 arguments and a counter
 * sample, each in a session whose buffer holds all its events. The dynamic-name and argument
 * zones are timed twice: with the wall clock, as the other single-thread rows, and in thread CPU
 * time on a thread of their own with the floor run on it just before each repetition (as the
 * "1 thread" static row of case_threads.c), which time spent descheduled on a shared machine
 * does not reach.
 */
#include "harness.h"

#include <loupe/loupe.h>

#include <stdio.h>

/* The CPU-time row of fn: its events_per_iter events per iteration, n iterations a repetition. */
static bench_case *cpu_row(const char *name, bench_loop_fn fn, uint64_t n,
                           unsigned events_per_iter) {
    double s[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];
    bench_case *c = bench_add_case(name, "ns/zone");
    uint64_t events = (uint64_t)(bench_cfg.reps + 1) * n * events_per_iter;
    if (bench_session_start(events + 64, 0) != 0) {
        c->na = 1;
        bench_note(c, "loupe_start_trace failed: %s", loupe_last_error());
        return c;
    }
    bench_time_threads(fn, n, 1, s, fs);
    bench_session_stop(c, events);
    bench_set_stats(c, s, bench_cfg.reps, fs);
    return c;
}

void bench_cases_zones(void) {
    bench_k.zone_static = bench_loupe_case("loupe static zone, tracing", "ns/zone",
                                           bench_zone_static, bench_scaled(500000), 2, 0);
    bench_loupe_case("loupe explicit zone (loupe_zone_begin/end), tracing", "ns/zone",
                     bench_zone_explicit, bench_scaled(500000), 2, 0);
    {
        /* A 16-byte name is copied inline after its begin, 15 bytes per 16-byte slot: 2 slots,
         * so a dynamic zone is 4 events (begin, 2 name slots, end). */
        uint64_t n = bench_scaled(200000);
        bench_k.dyn = bench_loupe_case("loupe dynamic-name zone (16 B name), tracing", "ns/zone",
                                       bench_zone_dyn, n, 4, 0);
    }
    /* An argument is one slot: a zone with two is 4 events (begin, 2 arguments, end). */
    bench_loupe_case("loupe zone + 2 int64 args, tracing", "ns/zone", bench_zone_args,
                     bench_scaled(200000), 4, 0);
    /* The same zone and arguments in one LOUPE_ZONE_ARGS call: the same 4 events. */
    bench_loupe_case("loupe zone + 2 int64 args in one call, tracing", "ns/zone",
                     bench_zone_args_fused, bench_scaled(200000), 4, 0);
    bench_loupe_case("loupe counter sample, tracing", "ns/sample", bench_counter,
                     bench_scaled(500000), 2, 0);
    cpu_row("loupe dynamic-name zone (16 B name), 1 thread (CPU ns)", bench_zone_dyn,
            bench_scaled(200000), 4);
    bench_k.least_args =
        bench_least_row("floor: a recorder's least, zone + 2 one-slot args, 1 thread (CPU ns)",
                        bench_least_args, bench_scaled(200000), 4);
    bench_k.args_cpu = cpu_row("loupe zone + 2 int64 args, 1 thread (CPU ns)", bench_zone_args,
                               bench_scaled(200000), 4);
    bench_k.args_fused_cpu = cpu_row("loupe zone + 2 int64 args in one call, 1 thread (CPU ns)",
                                     bench_zone_args_fused, bench_scaled(200000), 4);
}
