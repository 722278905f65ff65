/* case_calls.c: function tracing (-finstrument-functions, calls.c built with and without it):
 * the plain call, the hooks' cost with no trace, and loupe recording every call.
 */
#include "harness.h"

#include <loupe/loupe.h>

static volatile uint64_t sink; /* run()'s result: keeps the calls observable */

void bench_calls_instrumented(uint64_t n) {
    sink = bench_fi_run(n);
}
void bench_calls_plain(uint64_t n) {
    sink = bench_fp_run(n);
}

/* Interleaves the floor, plain and instrumented repetitions; s[r] = instrumented - plain, ns
 * per call. */
static void time_call_overhead(uint64_t n, double *s, double *plain, double *fs) {
    bench_loop_fn fns[2] = {bench_calls_plain, bench_calls_instrumented};
    uint64_t ns[2] = {n, n};
    double t[2][BENCH_MAX_REPS];
    bench_time_multi(fns, ns, 2, t, fs);
    for (int r = 0; r < bench_cfg.reps; r++) {
        plain[r] = t[0][r];
        s[r] = t[1][r] - t[0][r];
    }
}

void bench_cases_calls(void) {
    uint64_t n = bench_scaled(500000);
    double s[BENCH_MAX_REPS], plain[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];

    bench_case *p = bench_add_case("calls: uninstrumented leaf() call", "ns/call");
    bench_case *c0 =
        bench_add_case("calls: -finstrument-functions, no trace (overhead)", "ns/call");
    time_call_overhead(n, s, plain, fs);
    bench_set_stats(p, plain, bench_cfg.reps, NULL);
    bench_set_stats(c0, s, bench_cfg.reps, fs);
    bench_note(c0, "the hooks resolve to libloupe's, which test the session word and return");

    bench_case *c = bench_add_case("loupe function tracing (overhead per call)", "ns/call");
    /* run(n) records 2 events for itself and 2 per call of leaf(); run() runs reps + 1 times. */
    uint64_t expected = (uint64_t)(bench_cfg.reps + 1) * (2 * n + 2);
    if (bench_session_start(expected + 64, 1) != 0) {
        c->na = 1;
        bench_note(c, "loupe_start_trace failed: %s", loupe_last_error());
        return;
    }
    time_call_overhead(n, s, plain, fs);
    bench_session_stop(c, expected);
    bench_set_stats(c, s, bench_cfg.reps, fs);
}
