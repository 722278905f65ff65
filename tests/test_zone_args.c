/* test_zone_args.c: LOUPE_ZONE_ARGS, a zone recorded with its arguments in one call, with exact
 * records: each value type read back with its value, nesting with other zones and a separate
 * LOUPE_ARG_*, not tracing and a level that filters the zone out, the full buffer under
 * keep-first (whole zones, then a begin without its arguments, then nothing, each drop counted)
 * and keep-last (the newest zones whole), a re-entered call (the busy guard set: all 4 events
 * dropped and counted), and a SIGPROF handler recording one inside the loop of another (every
 * handler's zone recorded whole or its 3 events counted as re-entered).
 * Under LOUPE_CLOCK=monotonic (the _monotonic test) every event takes the slow path, which
 * must give the same records and counts.
 * The model is the one the stop kept (loupe__kept_model): the collector's records, before any
 * writer, so that each argument's type is the recorded one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <loupe/loupe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "session/session.h"

/* The slices of thread 0 of the kept model (the test records on one thread). */
static const loupe_model_thread *kept_thread(void) {
    const loupe_model *m = loupe__kept_model();
    assert_non_null(m);
    assert_int_equal(m->thread_count, 1);
    return &m->threads[0];
}

/* The one place this file reads a slice's arguments: every slice it checks is on thread 0 of
 * the kept model. */
static const loupe_arg *args_of(const loupe_slice *s, size_t *n) {
    const loupe_model_thread *th = kept_thread();
    assert_true(s >= th->slices && s < th->slices + th->slice_count);
    return loupe_slice_args(th, (size_t)(s - th->slices), n);
}

static size_t arg_count(const loupe_slice *s) {
    size_t n = 0;
    (void)args_of(s, &n);
    return n;
}

static const loupe_arg *arg_at(const loupe_slice *s, uint32_t i) {
    size_t n = 0;
    const loupe_arg *a = args_of(s, &n);
    assert_true(i < n);
    return &a[i];
}

static void expect_i64(const loupe_slice *s, uint32_t i, const char *key, int64_t v) {
    const loupe_arg *a = arg_at(s, i);
    assert_string_equal(a->key, key);
    assert_int_equal(a->type, LOUPE_ARG_INT64);
    assert_int_equal(a->v.i, v);
}

static void expect_u64(const loupe_slice *s, uint32_t i, const char *key, uint64_t v) {
    const loupe_arg *a = arg_at(s, i);
    assert_string_equal(a->key, key);
    assert_int_equal(a->type, LOUPE_ARG_UINT64);
    assert_int_equal(a->v.u, v);
}

static void expect_f64(const loupe_slice *s, uint32_t i, const char *key, double v) {
    const loupe_arg *a = arg_at(s, i);
    assert_string_equal(a->key, key);
    assert_int_equal(a->type, LOUPE_ARG_DOUBLE);
    assert_true(a->v.d == v);
}

static void expect_slice(const loupe_slice *s, const char *name, uint32_t depth, uint32_t args) {
    assert_string_equal(s->name, name);
    assert_int_equal(s->depth, depth);
    assert_int_equal(arg_count(s), args);
    assert_int_equal(s->flags & LOUPE_SLICE_TRUNCATED, 0);
}

static int64_t minus5(void) {
    return -5;
}

/* Every count of pairs (1..4), every value type, nesting, and the same records as the separate
 * calls: 1 event per argument, the begin's and the end's. */
static void test_records_exact(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .formats = LOUPE_FORMAT_PERFETTO_PROTO};
    loupe_trace_result r = {.size = sizeof r};
    int calls = 0;
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE_ARGS("outer", "i", minus5(), "u", UINT64_MAX, "d", 2.5, "b", (_Bool)1);
        {
            LOUPE_ZONE_ARGS("inner", "n", (calls++, 7));
            LOUPE_ARG_I64("extra", 9); /* a separate argument after the fused ones */
        }
        { LOUPE_ZONE_ARGS("two", "x", (long long)INT64_MIN, "y", 2u); }
        { LOUPE_ZONE_ARGS("three", "a", (short)-3, "c", (unsigned char)200, "f", 1.5f); }
        {
            LOUPE_ZONE("separate"); /* the same zone in separate calls */
            LOUPE_ARG_I64("x", INT64_MIN);
            LOUPE_ARG_U64("y", 2u);
        }
    }
    assert_int_equal(calls, 1); /* each value is evaluated once */
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 6 + 4 + 4 + 5 + 4);
    assert_int_equal(r.events_dropped, 0);
    const loupe_model_thread *t = kept_thread();
    assert_int_equal(t->slice_count, 5);
    const loupe_slice *s = t->slices;
    expect_slice(&s[0], "outer", 0, 4);
    expect_i64(&s[0], 0, "i", -5);
    expect_u64(&s[0], 1, "u", UINT64_MAX);
    expect_f64(&s[0], 2, "d", 2.5);
    assert_string_equal(arg_at(&s[0], 3)->key, "b");
    assert_int_equal(arg_at(&s[0], 3)->type, LOUPE_ARG_BOOL);
    assert_int_equal(arg_at(&s[0], 3)->v.b, 1);
    expect_slice(&s[1], "inner", 1, 2);
    expect_i64(&s[1], 0, "n", 7);
    expect_i64(&s[1], 1, "extra", 9);
    expect_slice(&s[2], "two", 1, 2);
    expect_i64(&s[2], 0, "x", INT64_MIN);
    expect_u64(&s[2], 1, "y", 2);
    expect_slice(&s[3], "three", 1, 3);
    expect_i64(&s[3], 0, "a", -3);
    expect_u64(&s[3], 1, "c", 200);
    expect_f64(&s[3], 2, "f", 1.5);
    expect_slice(&s[4], "separate", 1, 2);
    expect_i64(&s[4], 0, "x", INT64_MIN);
    expect_u64(&s[4], 1, "y", 2);
    for (size_t i = 1; i < 5; i++) { /* ordered and inside outer */
        assert_true(s[i].start_ns >= s[i - 1].start_ns);
        assert_true(s[i].start_ns + s[i].dur_ns <= s[0].start_ns + s[0].dur_ns);
    }
    loupe_trace_result_free(&r);
}

/* Not tracing nothing is recorded (and the values are still evaluated once); at a level that
 * filters the zone out (LOUPE_LEVEL_CRITICAL records only CRITICAL annotations) its arguments
 * go to the enclosing recorded zone, as separate LOUPE_ARG_* calls' would. */
static void test_not_tracing_and_level(void **state) {
    (void)state;
    int calls = 0;
    { LOUPE_ZONE_ARGS("off", "n", (calls++, 1)); }
    assert_int_equal(calls, 1);
    loupe_trace_options o = {.log_dir = tu_dir,
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO,
                             .host_tracer_level = LOUPE_LEVEL_CRITICAL};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_STEP("step", 3); /* LOUPE_LEVEL_STEP: recorded at CRITICAL */
        LOUPE_ZONE_ARGS("filtered", "a", 1, "b", 2u);
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 2 + 1 + 2);
    assert_int_equal(r.events_dropped, 0);
    const loupe_model_thread *t = kept_thread();
    assert_int_equal(t->slice_count, 1);
    expect_slice(&t->slices[0], "step", 0, 3);
    expect_i64(&t->slices[0], 0, "step_num", 3);
    expect_i64(&t->slices[0], 1, "a", 1);
    expect_u64(&t->slices[0], 2, "b", 2);
    loupe_trace_result_free(&r);
}

/* Keep-first, 64 slots: an outer zone keeps 2; a zone with two arguments takes 4 (its begin,
 * 2 arguments, the slot kept for its end). 15 fit whole (60 slots); the 16th finds 2 slots: no
 * room for the whole record, so its begin and arguments take the slow path one by one, as
 * separate calls would: the begin and its end fit, both arguments are dropped (2 events); the
 * 17th to 20th are dropped whole (4 events each: a dropped begin counts its end). */
static void test_keep_first_full(void **state) {
    (void)state;
    loupe_trace_options o = {
        .log_dir = tu_dir, .formats = LOUPE_FORMAT_PERFETTO_PROTO, .buffer_events = 64};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE("outer");
        for (int64_t i = 0; i < 20; i++) {
            LOUPE_ZONE_ARGS("z", "i", i, "j", (uint64_t)(100 + i));
        }
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 64);
    assert_int_equal(r.events_dropped, 2 + 4 * 4);
    assert_int_equal(r.truncated_zones, 0);
    assert_int_equal(r.threads[0].capacity_needed, 2 + 20 * 4);
    const loupe_model_thread *t = kept_thread();
    assert_int_equal(t->slice_count, 1 + 16);
    expect_slice(&t->slices[0], "outer", 0, 0);
    for (uint32_t i = 0; i < 15; i++) {
        const loupe_slice *s = &t->slices[1 + i];
        expect_slice(s, "z", 1, 2);
        expect_i64(s, 0, "i", i);
        expect_u64(s, 1, "j", 100 + i);
    }
    expect_slice(&t->slices[16], "z", 1, 0);
    loupe_trace_result_free(&r);
}

/* Keep-last, a ring of 64 slots: 100 zones of 4 events leave the newest 64 slots, zones 84..99
 * whole with their arguments. */
static void test_keep_last_full(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir,
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO,
                             .buffer_events = 64,
                             .overflow = LOUPE_OVERFLOW_KEEP_LAST};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int64_t i = 0; i < 100; i++) {
        LOUPE_ZONE_ARGS("z", "i", i, "d", (double)i / 2);
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 64);
    assert_int_equal(r.events_dropped, 400 - 64);
    assert_int_equal(r.threads[0].capacity_needed, 400);
    const loupe_model_thread *t = kept_thread();
    assert_int_equal(t->slice_count, 16);
    for (uint32_t k = 0; k < 16; k++) {
        const loupe_slice *s = &t->slices[k];
        expect_slice(s, "z", 0, 2);
        expect_i64(s, 0, "i", 84 + k);
        expect_f64(s, 1, "d", (double)(84 + k) / 2);
    }
    loupe_trace_result_free(&r);
}

/* A call that re-enters the thread's recording (what a signal handler interrupting a recording
 * call, or an allocator loupe's slow path calls, does): the thread's busy guard is set by hand
 * here, so that the re-entry is certain. The begin, its end and both arguments are dropped and
 * counted as re-entered: 4 events; nothing is written over the zone open around it. */
static void test_reentered_exact(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .formats = LOUPE_FORMAT_PERFETTO_PROTO};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE_ARGS("open", "a", 1); /* the thread's first event: its buffer exists now */
        assert_non_null(loupe__tls);
        assert_int_equal(loupe__tls->busy, 0);
        loupe__tls->busy = 1;
        { LOUPE_ZONE_ARGS("inside", "x", 2, "y", 3u); }
        assert_int_equal(loupe__tls->busy, 1); /* restored, not cleared */
        loupe__tls->busy = 0;
        LOUPE_ZONE_ARGS("after", "z", 4);
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 3 + 3);
    assert_int_equal(r.events_dropped, 4);
    const loupe_model *m = loupe__kept_model();
    assert_string_equal(tu_meta(m, "loupe_events_reentered", "0"), "4");
    const loupe_model_thread *t = kept_thread();
    assert_int_equal(t->slice_count, 2);
    expect_slice(&t->slices[0], "open", 0, 1);
    expect_i64(&t->slices[0], 0, "a", 1);
    expect_slice(&t->slices[1], "after", 1, 1);
    expect_i64(&t->slices[1], 0, "z", 4);
    loupe_trace_result_free(&r);
}

/* ---- a signal handler recording a zone with an argument inside the loop's ---- */

static volatile sig_atomic_t sig_count;
static volatile unsigned spin; /* a little work inside each zone */
enum { WORK_ZONES = 500000 };

static void on_prof(int sig) {
    (void)sig;
    int saved = errno;
    { LOUPE_ZONE_ARGS("sig", "n", 1); }
    sig_count = sig_count + 1;
    errno = saved;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A metadata value as a number; 0 when the key is absent (written only when non-zero). */
static uint64_t meta_u64(const loupe_model *m, const char *key) {
    const char *v = tu_meta(m, key, "0");
    return strtoull(v, NULL, 10);
}

static void test_signal_handler_inside(void **state) {
    (void)state;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGPROF, &sa, NULL), 0);
    uint64_t total_signals = 0, total_reentered = 0;
    for (int run = 0; run < 5; run++) {
        sig_count = 0;
        /* room for every event: the work zones' (at most WORK_ZONES x 4) and the handlers' */
        loupe_trace_options o = {.log_dir = tu_dir,
                                 .formats = LOUPE_FORMAT_PERFETTO_PROTO,
                                 .buffer_events = WORK_ZONES * 4 + (1u << 16)};
        loupe_trace_result r = {.size = sizeof r};
        assert_int_equal(loupe_start_trace(&o), 0);
        struct itimerval it = {{0, 50}, {0, 50}};
        assert_int_equal(setitimer(ITIMER_PROF, &it, NULL), 0);
        uint64_t end = now_ns() + 100000000u, zones = 0;
        while (now_ns() < end && zones < WORK_ZONES) {
            for (int64_t i = 0; i < 1000; i++) {
                LOUPE_ZONE_ARGS("work", "i", i, "j", i + 1);
                for (int k = 0; k < 100; k++) {
                    spin = spin + 1;
                }
            }
            zones += 1000;
        }
        struct itimerval off = {{0, 0}, {0, 0}};
        assert_int_equal(setitimer(ITIMER_PROF, &off, NULL), 0);
        uint64_t signals = (uint64_t)sig_count;
        assert_int_equal(loupe_stop_trace(&r), 0);
        const loupe_model *m = loupe__kept_model();
        uint64_t reentered = meta_u64(m, "loupe_events_reentered");
        const loupe_model_thread *t = kept_thread();
        uint64_t sig_slices = 0, work_slices = 0;
        for (size_t i = 0; i < t->slice_count; i++) {
            const loupe_slice *s = &t->slices[i];
            if (strcmp(s->name, "sig") == 0) {
                sig_slices++;
                assert_true(s->depth <= 1); /* nested in a work zone, or between two */
                assert_int_equal(arg_count(s), 1);
                expect_i64(s, 0, "n", 1);
            } else {
                assert_string_equal(s->name, "work");
                if (s->depth != 0 || arg_count(s) != 2) {
                    print_message("slice %zu of %zu: depth %u, %zu args:", i, t->slice_count,
                                  s->depth, arg_count(s));
                    for (uint32_t k = 0; k < arg_count(s); k++) {
                        print_message(" %s=%lld", arg_at(s, k)->key, (long long)arg_at(s, k)->v.i);
                    }
                    print_message("\n");
                }
                assert_int_equal(s->depth, 0);
                assert_int_equal(arg_count(s), 2);
                assert_int_equal(arg_at(s, 1)->v.i, arg_at(s, 0)->v.i + 1);
                work_slices++;
            }
        }
        if (reentered % 3 != 0 || sig_slices + reentered / 3 != signals) {
            print_message("run %d: %llu signals, %llu sig slices, %llu reentered\n", run,
                          (unsigned long long)signals, (unsigned long long)sig_slices,
                          (unsigned long long)reentered);
        }
        /* a handler's zone is 3 events (begin, argument, end): recorded whole, or all 3 counted */
        assert_int_equal(reentered % 3, 0);
        assert_int_equal(sig_slices + reentered / 3, signals);
        assert_int_equal(work_slices, zones);
        assert_int_equal(r.events_dropped, reentered);
        assert_int_equal(r.unmatched_ends, 0);
        assert_int_equal(r.truncated_zones, 0);
        total_signals += signals;
        total_reentered += reentered;
        loupe_trace_result_free(&r);
    }
    signal(SIGPROF, SIG_DFL);
    print_message("%llu signals in 5 runs, %llu events dropped as re-entered\n",
                  (unsigned long long)total_signals, (unsigned long long)total_reentered);
    assert_true(total_signals > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_records_exact, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_not_tracing_and_level, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_keep_first_full, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_keep_last_full, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_reentered_exact, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_signal_handler_inside, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
