/* test_result_threads.c: a loupe_trace_result owns what it points at. A result one thread filled
 * stays valid (same paths, same per-thread figures) after another thread starts and stops a new
 * session, which used to free the shared per-thread array; loupe_trace_result_free() twice, on a
 * zeroed result and on NULL is safe; the size field's rules (0 accepted, a short size refused
 * without leaving the session running). Also runs under TSan (its name has "thread"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void record_one(const char *run_name, const char *thread_name, int zones) {
    loupe_trace_options o = {.log_dir = tu_dir, .run_name = run_name};
    assert_int_equal(loupe_start_trace(&o), 0);
    loupe_set_thread_name(thread_name);
    for (int i = 0; i < zones; i++) {
        LOUPE_ZONE("z");
    }
}

static void *second_session(void *arg) {
    (void)arg;
    record_one("second", "other", 7);
    loupe_trace_result r = {.size = sizeof r};
    int rc = loupe_stop_trace(&r);
    loupe_trace_result_free(&r);
    return (void *)(intptr_t)rc;
}

static void test_result_outlives_other_sessions(void **state) {
    (void)state;
    record_one("first", "main-t", 3);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    char run[4200], json[4200], xplane[4200];
    snprintf(run, sizeof run, "%s/plugins/profile/first", tu_dir);
    snprintf(json, sizeof json, "%s", loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    snprintf(xplane, sizeof xplane, "%s", loupe_trace_result_path(&r, LOUPE_FORMAT_XPLANE));
    assert_string_equal(r.run_dir, run);
    assert_int_equal(r.file_count, 2); /* the default set, in the registry's order */
    assert_int_equal(r.files[0].format, LOUPE_FORMAT_CHROME_JSON);
    assert_int_equal(r.files[1].format, LOUPE_FORMAT_XPLANE);
    assert_null(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_JSON));
    assert_null(loupe_trace_result_path(NULL, LOUPE_FORMAT_CHROME_JSON));
    assert_int_equal(r.thread_count, 1);
    assert_int_equal(r.events_recorded, 6);
    const loupe_thread_stats *threads = r.threads;

    pthread_t th;
    for (int round = 0; round < 3; round++) { /* another thread's start and stop, three times */
        assert_int_equal(pthread_create(&th, NULL, second_session, NULL), 0);
        void *rc;
        assert_int_equal(pthread_join(th, &rc), 0);
        assert_int_equal((intptr_t)rc, 0);
        char again[4200];
        snprintf(again, sizeof again, "%s/plugins/profile/second%s", tu_dir,
                 round == 0   ? ""
                 : round == 1 ? "_1"
                              : "_2");
        struct stat st;
        assert_int_equal(stat(again, &st), 0);
    }
    /* r is untouched: the same array, the same figures, the same paths */
    assert_ptr_equal(r.threads, threads);
    assert_int_equal(r.thread_count, 1);
    assert_string_equal(r.threads[0].name, "main-t");
    assert_int_equal(r.threads[0].events_recorded, 6);
    assert_int_equal(r.threads[0].events_dropped, 0);
    assert_int_equal(r.threads[0].capacity_needed, 6);
    assert_string_equal(r.run_dir, run);
    assert_string_equal(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), json);
    assert_string_equal(loupe_trace_result_path(&r, LOUPE_FORMAT_XPLANE), xplane);

    loupe_trace_result_free(&r);
    assert_int_equal(r.size, sizeof r);
    assert_null(r.run_dir);
    assert_null(r.files);
    assert_null(r.threads);
    assert_int_equal(r.file_count, 0);
    assert_int_equal(r.thread_count, 0);
    assert_int_equal(r.events_recorded, 0);
    loupe_trace_result_free(&r); /* twice: safe */
    loupe_trace_result z = {0};
    loupe_trace_result_free(&z); /* zeroed: safe */
    loupe_trace_result_free(NULL);
}

static void test_size_rules(void **state) {
    (void)state;
    /* size 0: this layout */
    record_one("zero", "t0", 1);
    loupe_trace_result r = {0};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.size, 0);
    assert_int_equal(r.events_recorded, 2);
    assert_non_null(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    loupe_trace_result_free(&r);
    /* a short size: the result is not touched, but the session ends and is written */
    record_one("short", "t1", 1);
    loupe_trace_result s = {.size = 8, .events_recorded = 12345};
    assert_int_equal(loupe_stop_trace(&s), LOUPE_EINVALID);
    char expect[256];
    snprintf(expect, sizeof expect,
             "loupe_stop_trace: result->size is 8, neither 0 nor sizeof(loupe_trace_result) (%zu): "
             "set it with loupe_trace_result r = {.size = sizeof r}",
             sizeof(loupe_trace_result));
    assert_string_equal(loupe_last_error(), expect);
    assert_int_equal(s.events_recorded, 12345);
    assert_null(s.run_dir);
    assert_int_equal(loupe_is_tracing(), 0);
    char run[4200];
    snprintf(run, sizeof run, "%s/plugins/profile/short", tu_dir);
    struct stat st;
    assert_int_equal(stat(run, &st), 0);
    assert_int_equal(loupe_write_last_trace(tu_dir, &s), LOUPE_EINVALID);
    assert_int_equal(s.events_recorded, 12345);
    /* the kept trace, written again: a filled result of its own */
    loupe_trace_result w = {.size = sizeof w};
    assert_int_equal(loupe_write_last_trace(tu_dir, &w), 0);
    assert_int_equal(w.events_recorded, 2);
    assert_int_equal(w.thread_count, 1);
    assert_string_equal(w.threads[0].name, "t1");
    assert_int_equal(w.file_count, 2);
    loupe_trace_result_free(&w);
    /* stop with nothing active: the result is zeroed, size kept */
    loupe_trace_result n = {.size = sizeof n, .events_recorded = 5};
    assert_int_equal(loupe_stop_trace_if_active(&n), 0);
    assert_int_equal(n.size, sizeof n);
    assert_int_equal(n.events_recorded, 0);
    assert_int_equal(loupe_stop_trace(&n), LOUPE_ENOT_STARTED);
    loupe_trace_result_free(&n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_result_outlives_other_sessions, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_size_rules, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
