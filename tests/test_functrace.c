/* test_functrace.c: -finstrument-functions zones (this file is compiled with the flag, see
 * tests/CMakeLists.txt): one zone per call, names from the ELF symbol table resolved at stop
 * (static functions too), nesting as called, nothing when function_tracing is off, and loupe's
 * own (inline) functions never recorded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *dir;
static volatile int sink;

static __attribute__((noinline)) void leaf_fn(int i) {
    sink += i;
}
static __attribute__((noinline)) void mid_fn(int i) {
    leaf_fn(i);
    leaf_fn(i + 1);
}
__attribute__((noinline)) void top_fn(void);
__attribute__((noinline)) void top_fn(void) {
    for (int i = 0; i < 10; i++) {
        mid_fn(i);
    }
}

static size_t count(const loupe_model_thread *t, const char *name) {
    size_t n = 0;
    for (size_t i = 0; i < t->slice_count; i++) {
        n += strcmp(t->slices[i].name, name) == 0;
    }
    return n;
}

static void test_function_zones(void **state) {
    (void)state;
    dir = tu_tmpdir("functrace");
    loupe_trace_options o = {.log_dir = dir, .function_tracing = 1};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    top_fn();
    { LOUPE_ZONE("annotated"); /* an inline loupe function: never a function zone itself */ }
    assert_int_equal(loupe_stop_trace(&r), 0);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), &m),
                     0);
    assert_int_equal(m->thread_count, 1);
    const loupe_model_thread *t = &m->threads[0];
    assert_int_equal(count(t, "top_fn"), 1);
    assert_int_equal(count(t, "mid_fn"), 10);
    assert_int_equal(count(t, "leaf_fn"), 20);
    assert_int_equal(count(t, "annotated"), 1);
    for (size_t i = 0; i < t->slice_count; i++) {
        const loupe_slice *s = &t->slices[i];
        assert_true(strncmp(s->name, "loupe", 5) != 0); /* loupe's own code excluded */
        assert_true(strncmp(s->name, "0x", 2) != 0);    /* every address resolved */
        if (strcmp(s->name, "mid_fn") == 0) {
            assert_int_equal(s->depth, t->slices[0].depth + 1);
            assert_string_equal(loupe_slice_category(m, s), "function");
        }
        if (strcmp(s->name, "leaf_fn") == 0) {
            assert_int_equal(s->depth, t->slices[0].depth + 2);
        }
    }
    loupe_model_free(m);
    /* off: no function zones */
    o.function_tracing = 0;
    assert_int_equal(loupe_start_trace(&o), 0);
    top_fn();
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 0);
    tu_rmtree(dir);
    free(dir);
    loupe_trace_result_free(&r);
}

/* One session with options o around body(), read back from its JSON file: the model (the
 * caller frees it), r filled (the caller frees it). */
static loupe_model *traced(loupe_trace_options *o, void (*body)(void), loupe_trace_result *r) {
    assert_int_equal(loupe_start_trace(o), 0);
    body();
    assert_int_equal(loupe_stop_trace(r), 0);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(loupe_trace_result_path(r, LOUPE_FORMAT_CHROME_JSON), &m), 0);
    assert_int_equal(m->thread_count, 1);
    return m;
}

/* One session of top_fn() (1 top_fn, 10 mid_fn, 20 leaf_fn calls) with o's filters: checks the
 * events recorded, the calls of each kept and loupe_functions_filtered. */
static void filtered_run(loupe_trace_options *o, uint64_t events, size_t top, size_t mid,
                         size_t leaf, const char *filtered) {
    loupe_trace_result r = {.size = sizeof r};
    loupe_model *m = traced(o, top_fn, &r);
    assert_int_equal(r.events_recorded, events);
    assert_int_equal(count(&m->threads[0], "top_fn"), top);
    assert_int_equal(count(&m->threads[0], "mid_fn"), mid);
    assert_int_equal(count(&m->threads[0], "leaf_fn"), leaf);
    assert_string_equal(tu_meta(m, "loupe_functions_filtered", "-"), filtered);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

static void test_function_filters(void **state) {
    (void)state;
    dir = tu_tmpdir("functrace_filters");
    const char *leaf[] = {"leaf_*", NULL}, *mid[] = {"mid_fn", NULL}, *none[] = {NULL};
    /* the globs are decided at the start: filtered calls never reach the buffer */
    loupe_trace_options o = {.log_dir = dir, .function_tracing = 1, .function_exclude = leaf};
    filtered_run(&o, 22, 1, 10, 0, "20");
    o = (loupe_trace_options){.log_dir = dir, .function_tracing = 1, .function_filter = mid};
    filtered_run(&o, 60, 0, 10, 20, "1");
    o = (loupe_trace_options){
        .log_dir = dir, .function_tracing = 1, .function_filter = mid, .function_exclude = leaf};
    filtered_run(&o, 20, 0, 10, 0, "21");
    /* --depth: top_fn is 1 deep (the calls open before the start do not count) */
    o = (loupe_trace_options){.log_dir = dir, .function_tracing = 1, .function_depth = 2};
    filtered_run(&o, 22, 1, 10, 0, "20");
    /* --min-duration: decided at each call's exit, none recorded (0.4 recorded the 62 events
     * and dropped them at the stop) */
    o = (loupe_trace_options){
        .log_dir = dir, .function_tracing = 1, .function_min_duration_ns = 1000000000};
    filtered_run(&o, 0, 0, 0, 0, "31");
    /* an empty glob array is no filter; a session without filters records every call */
    o = (loupe_trace_options){.log_dir = dir, .function_tracing = 1, .function_filter = none};
    filtered_run(&o, 62, 1, 10, 20, "-");
    tu_rmtree(dir);
    free(dir);
}

#define SHORT_CALLS 30000

static __attribute__((noinline)) void slow_fn(void) {
    struct timespec t = {0, 25000000}; /* 25 ms: nanosleep sleeps at least that (POSIX) */
    while (nanosleep(&t, &t) != 0) {
    }
}

static __attribute__((noinline)) void outer_fn(void) {
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < SHORT_CALLS / 3; i++) {
            leaf_fn(i);
        }
        slow_fn();
    }
}

/* --min-duration 20 ms in a buffer of 1,024 events, 30,000 calls of a few ns and 4 of 25 ms or
 * more: the short calls are taken back at their exits, so nothing is dropped and every long call
 * is kept (0.4 recorded every call first: the buffer held 512 calls, the first slow_fn's end
 * never fit and the later ones were dropped). A leaf preempted for 20 ms is kept: the kept and
 * the filtered make 30,000 exactly, whatever the load. */
static void test_min_duration_at_exit(void **state) {
    (void)state;
    dir = tu_tmpdir("functrace_min");
    loupe_trace_options o = {.log_dir = dir,
                             .function_tracing = 1,
                             .buffer_events = 1024,
                             .function_min_duration_ns = 20000000};
    loupe_trace_result r = {.size = sizeof r};
    loupe_model *m = traced(&o, outer_fn, &r);
    assert_int_equal(r.events_dropped, 0);
    const loupe_model_thread *t = &m->threads[0];
    assert_int_equal(count(t, "outer_fn"), 1);
    assert_int_equal(count(t, "slow_fn"), 3);
    size_t leaves = count(t, "leaf_fn");
    assert_int_equal(r.events_recorded, 2 * (4 + leaves));
    char want[32];
    snprintf(want, sizeof want, "%d", SHORT_CALLS - (int)leaves);
    assert_string_equal(tu_meta(m, "loupe_functions_filtered", "-"), want);
    for (size_t i = 0; i < t->slice_count; i++) {
        assert_true(t->slices[i].dur_ns >= 20000000); /* what is kept took the time */
    }
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    tu_rmtree(dir);
    free(dir);
}

static __attribute__((noinline)) void nap_fn(void) {
    struct timespec t = {0, 1000000}; /* 1 ms at least */
    while (nanosleep(&t, &t) != 0) {
    }
}

static void naps_and_short_calls(void) {
    for (int k = 0; k < 100; k++) {
        nap_fn();
        for (int i = 0; i < 10; i++) {
            mid_fn(i);
        }
    }
}

/* --min-duration with --keep-last in a ring of 64 events: 100 naps of 1 ms, each followed by 10
 * mid_fn -> 2 leaf_fn calls of nanoseconds, which are taken back after the ring wrapped. The ring
 * holds the last naps (and a short call a preemption stretched past 0.5 ms), nothing cut short (a
 * helper saw the ring's oldest slot still hold a taken-back enter: one cut-short leaf and none of
 * the long calls). */
static void test_min_duration_keep_last(void **state) {
    (void)state;
    dir = tu_tmpdir("functrace_min_kl");
    loupe_trace_options o = {.log_dir = dir,
                             .function_tracing = 1,
                             .buffer_events = 64,
                             .overflow = LOUPE_OVERFLOW_KEEP_LAST,
                             .function_min_duration_ns = 500000};
    loupe_trace_result r = {.size = sizeof r};
    loupe_model *m = traced(&o, naps_and_short_calls, &r);
    const loupe_model_thread *t = &m->threads[0];
    size_t naps = count(t, "nap_fn");
    print_message("keep-last ring of 64: %zu naps of the last 100 kept, %zu calls in all\n", naps,
                  t->slice_count);
    /* 64 slots, 2 a call; a short call preempted past 0.5 ms is kept too, in a nap's place */
    assert_true(t->slice_count >= 25 && t->slice_count <= 32);
    assert_true(naps >= 20);
    for (size_t i = 0; i < t->slice_count; i++) {
        assert_true(t->slices[i].dur_ns >= 500000);
        assert_false(t->slices[i].flags & LOUPE_SLICE_TRUNCATED);
    }
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    tu_rmtree(dir);
    free(dir);
}

/* longjmp out of instrumented calls: their exits never come. Two shapes of a C program's error
 * handling. req_fn's setjmp is in the call that the jump returns to, which then returns: its exit
 * finds the calls above it gone. loop_fn's is in a loop that never returns meanwhile: the next
 * parse_fn's enter, whose frame is where the left one's was, finds them gone. Either way each
 * left call gets an exit marked cut in the end slot it kept (an event, so that a recursive
 * function's calls close at their own depth), read back as a truncated slice at its own depth.
 * 0.4 kept each left call's end slot for good and nested every later call inside the left ones:
 * 10,000 such errors dropped 69,084 events. */
static jmp_buf fn_env;

static __attribute__((noinline)) void tok_fn(void) {
    longjmp(fn_env, 1);
}
static __attribute__((noinline)) void parse_fn(int deep) {
    sink++;
    if (deep) {
        tok_fn();
    }
    longjmp(fn_env, 1);
}
static __attribute__((noinline)) void req_fn(int i) {
    if (setjmp(fn_env) == 0) {
        parse_fn(i % 2);
    }
}
static __attribute__((noinline)) void requests(void) {
    for (int i = 0; i < 10000; i++) {
        req_fn(i);
    }
}

static __attribute__((noinline)) void loop_fn(void) {
    for (volatile int i = 0; i < 10000; i++) {
        if (setjmp(fn_env) == 0) {
            parse_fn(i % 2);
        }
    }
}

/* Nested handlers in a recursive function whose frame is larger than the short search for its
 * return address (record.c's fs_frame): each level_fn call sets its own handler, the deepest
 * jumps back to level to, whose exit finds the levels above it gone. The collector closes a
 * function's innermost call at its exit, so each left level gets its own cut exit. */
static jmp_buf lv_env[11];

static __attribute__((noinline)) void level_fn(int k, int to) {
    char buf[4096];
    buf[k] = (char)k;
    sink += buf[k];
    if (setjmp(lv_env[k]) == 0) {
        if (k < 10) {
            level_fn(k + 1, to);
        } else {
            longjmp(lv_env[to], 1);
        }
    }
}
static __attribute__((noinline)) void levels(void) {
    for (int i = 0; i < 800; i++) {
        level_fn(0, i % 8);
    }
}

/* An inlined call's hooks get its caller's return address and stack pointer: the same frame mark
 * as its caller, which stays open (the first stack of open calls cut the caller at every
 * inlined call of an -O2 build: a helper's Lua 5.4 printing "hi" had 954 calls cut). */
static inline __attribute__((always_inline)) int sq_fn(int x) {
    sink += x;
    return x * x;
}
static __attribute__((noinline)) void outer_inl_fn(int i) {
    sink += sq_fn(i) + sq_fn(i + 1);
}
static __attribute__((noinline)) void inlined_calls(void) {
    for (int i = 0; i < 1000; i++) {
        outer_inl_fn(i);
    }
}

/* The setjmp in a caller without hooks: the calls the jump left are the outermost ones open, and
 * the next call's frame is where the left one's was. */
static __attribute__((noinline, no_instrument_function)) void loop_without_hooks(void) {
    for (volatile int i = 0; i < 10000; i++) {
        if (setjmp(fn_env) == 0) {
            parse_fn(i % 2);
        }
    }
}

/* The slices named name in t: how many, and each one's depth and truncation checked. */
static size_t check_calls(const loupe_model_thread *t, const char *name, uint32_t depth,
                          int truncated) {
    size_t n = 0;
    for (size_t i = 0; i < t->slice_count; i++) {
        const loupe_slice *s = &t->slices[i];
        if (strcmp(s->name, name) == 0) {
            assert_int_equal(s->depth, depth);
            assert_int_equal((s->flags & LOUPE_SLICE_TRUNCATED) != 0, truncated);
            n++;
        }
    }
    return n;
}

/* One session of body() with options o: r filled and nothing dropped or unmatched, truncated
 * zones cut short; the model read back (the caller frees both). */
static loupe_model *cut_run(loupe_trace_options *o, void (*body)(void), loupe_trace_result *r,
                            uint64_t truncated) {
    *r = (loupe_trace_result){.size = sizeof *r};
    loupe_model *m = traced(o, body, r);
    assert_int_equal(r->events_dropped, 0);
    assert_int_equal(r->unmatched_ends, 0);
    assert_int_equal(r->truncated_zones, truncated);
    return m;
}

static void test_longjmp_out_of_functions(void **state) {
    (void)state;
    dir = tu_tmpdir("functrace_longjmp");
    /* requests, 20,000 events of req_fn, 15,000 enters and 15,000 cut exits of the calls it left */
    loupe_trace_options o = {.log_dir = dir, .function_tracing = 1, .buffer_events = 50002};
    loupe_trace_result r;
    loupe_model *m = cut_run(&o, requests, &r, 15000);
    const loupe_model_thread *t = &m->threads[0];
    assert_int_equal(r.events_recorded, 2 + 50000);
    assert_int_equal(check_calls(t, "requests", 0, 0), 1);
    assert_int_equal(check_calls(t, "req_fn", 1, 0), 10000);
    assert_int_equal(check_calls(t, "parse_fn", 2, 1), 10000);
    assert_int_equal(check_calls(t, "tok_fn", 3, 1), 5000);
    loupe_model_free(m);
    loupe_trace_result_free(&r);

    /* the loop: each parse_fn's enter, where the left one was, cuts the calls the jump left, and
     * loop_fn's exit the last ones */
    m = cut_run(&o, loop_fn, &r, 15000);
    t = &m->threads[0];
    assert_int_equal(r.events_recorded, 2 + 15000 + 15000);
    assert_int_equal(check_calls(t, "loop_fn", 0, 0), 1);
    assert_int_equal(check_calls(t, "parse_fn", 1, 1), 10000);
    assert_int_equal(check_calls(t, "tok_fn", 2, 1), 5000);
    loupe_model_free(m);
    loupe_trace_result_free(&r);

    /* --depth 1: the left parse_fn and tok_fn calls are filtered, and no longer count as open
     * (0.4's depth counter kept them: every parse_fn after the first was filtered as too deep,
     * and said nothing else) */
    o.function_depth = 1;
    r = (loupe_trace_result){.size = sizeof r};
    m = traced(&o, loop_fn, &r);
    assert_int_equal(r.events_dropped, 0);
    assert_int_equal(r.events_recorded, 2);
    assert_string_equal(tu_meta(m, "loupe_functions_filtered", "-"), "15000");
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    o.function_depth = 2;
    r = (loupe_trace_result){.size = sizeof r};
    m = traced(&o, loop_fn, &r);
    t = &m->threads[0];
    assert_int_equal(r.events_dropped, 0);
    assert_int_equal(check_calls(t, "parse_fn", 1, 1), 10000);
    assert_string_equal(tu_meta(m, "loupe_functions_filtered", "-"), "5000");
    loupe_model_free(m);
    loupe_trace_result_free(&r);

    /* inlined calls: nothing cut, each sq_fn inside its outer_inl_fn */
    o.function_depth = 0;
    m = cut_run(&o, inlined_calls, &r, 0);
    t = &m->threads[0];
    assert_int_equal(check_calls(t, "inlined_calls", 0, 0), 1);
    assert_int_equal(check_calls(t, "outer_inl_fn", 1, 0), 1000);
    assert_int_equal(check_calls(t, "sq_fn", 2, 0), 2000);
    loupe_model_free(m);
    loupe_trace_result_free(&r);

    /* the setjmp in a caller without hooks: each parse_fn at depth 0, the left ones cut */
    m = cut_run(&o, loop_without_hooks, &r, 15000);
    t = &m->threads[0];
    assert_int_equal(check_calls(t, "parse_fn", 0, 1), 10000);
    assert_int_equal(check_calls(t, "tok_fn", 1, 1), 5000);
    loupe_model_free(m);
    loupe_trace_result_free(&r);

    /* recursion: 800 calls of level_fn at each of the 11 depths, the levels above the jump's
     * target cut (10 - to of them: 100 rounds of to = 0..7) */
    m = cut_run(&o, levels, &r, 100 * (10 + 9 + 8 + 7 + 6 + 5 + 4 + 3));
    t = &m->threads[0];
    assert_int_equal(r.events_recorded, 2 + 2 * 8800);
    size_t at_depth[12] = {0};
    for (size_t i = 0; i < t->slice_count; i++) {
        const loupe_slice *sl = &t->slices[i];
        if (strcmp(sl->name, "level_fn") == 0 && sl->depth < 12) {
            at_depth[sl->depth]++;
        }
    }
    for (int d = 1; d <= 11; d++) {
        assert_int_equal(at_depth[d], 800);
    }
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_function_zones),
        cmocka_unit_test(test_function_filters),
        cmocka_unit_test(test_min_duration_at_exit),
        cmocka_unit_test(test_min_duration_keep_last),
        cmocka_unit_test(test_longjmp_out_of_functions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
