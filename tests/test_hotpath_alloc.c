/* test_hotpath_alloc.c: the record path allocates nothing after a thread's first event
 * (a design guard of the recorder). This program interposes
 * malloc/calloc/realloc/free/aligned_alloc (forwarding to glibc's __libc_* functions) and counts
 * calls made during a recording loop of every event kind. Skipped in sanitizer builds, whose
 * runtimes own malloc. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOUPE_TEST_NO_INTERPOSE 1
#endif

static _Thread_local int counting __attribute__((unused));
static _Thread_local long allocs __attribute__((unused));

#ifndef LOUPE_TEST_NO_INTERPOSE
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);

void *malloc(size_t n) {
    allocs += counting;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    allocs += counting;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    allocs += counting;
    return __libc_realloc(p, n);
}
void *aligned_alloc(size_t al, size_t n) {
    allocs += counting;
    return __libc_memalign(al, n);
}
void free(void *p) {
    __libc_free(p);
}
#endif

static __attribute__((unused)) void burst(int n) {
    for (int i = 0; i < n; i++) {
        LOUPE_ZONE("z");
        LOUPE_ARG_I64("i", i);
        LOUPE_ARG_F64("f", i * 0.5);
        LOUPE_ARG_STR("s", "string value");
        char name[32];
        snprintf(name, sizeof name, "dyn-%d", i % 3);
        LOUPE_ZONE_DYN(name);
        LOUPE_COUNTER_F64("c", i);
        LOUPE_INSTANT("i");
        LOUPE_FLOW_IN((uint64_t)i);
        LOUPE_ZONE_ARGS("fused", "i", i, "d", 0.5);
    }
}

static void test_no_allocation_after_first_event(void **state) {
    (void)state;
#ifdef LOUPE_TEST_NO_INTERPOSE
    skip();
#else
    char *dir = tu_tmpdir("alloc");
    loupe_trace_options o = {.log_dir = dir, .buffer_events = 1u << 21};
    assert_int_equal(loupe_start_trace(&o), 0);
    burst(1);
    counting = 1;
    allocs = 0;
    burst(50000);
    counting = 0;
    assert_int_equal(allocs, 0);
    /* the interposer works: an allocation is counted */
    counting = 1;
    void *p = malloc(16);
    __asm__ volatile("" : : "r"(p) : "memory"); /* keep the malloc/free pair from being elided */
    counting = 0;
    free(p);
    assert_int_equal(allocs, 1);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_dropped, 0);
    loupe_trace_result_free(&r);
    tu_rmtree(dir);
    free(dir);
#endif
}

int main(void) {
#ifdef LOUPE_TEST_NO_INTERPOSE
    /* its one test needs the interposed allocator: skipped (CTest's SKIP_RETURN_CODE 77) */
    puts("test_hotpath_alloc: skipped: sanitizer build (the sanitizer owns malloc)");
    return 77;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_allocation_after_first_event),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
