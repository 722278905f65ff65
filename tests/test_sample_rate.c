/* test_sample_rate.c: a sampling rate above kernel.perf_event_max_sample_rate (played by
 * LOUPE_TEST_PERF_MAX_SAMPLE_RATE) is clamped to the kernel's limit with one exact line on
 * stderr, as `perf record -F` does, and the trace samples at the limit: its note, its period
 * and its sample count say so. A rate at the limit prints nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "session/session.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* 200 ms of this thread's CPU time (task-clock counts CPU time, not wall time). */
static void burn_200ms(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    volatile double x = 1.0;
    do {
        for (int i = 0; i < 10000; i++) {
            x = x * 1.0000001;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 200000000L);
}

/* Samples at hz for 200 ms of CPU with the kernel's limit at 2000 Hz; stderr's text in *err. */
static const loupe_model *sample_at(uint32_t hz, char **err) {
    setenv("LOUPE_TEST_PERF_MAX_SAMPLE_RATE", "2000", 1);
    char path[4096];
    snprintf(path, sizeof path, "%s/stderr.txt", tu_dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    dup2(fd, 2);
    close(fd);
    loupe_trace_options o = {.log_dir = tu_dir,
                             .sampling_hz = hz,
                             .sampling_stacks = LOUPE_SAMPLING_STACKS_FP,
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO};
    int rc = loupe_start_trace(&o);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv("LOUPE_TEST_PERF_MAX_SAMPLE_RATE");
    assert_int_equal(rc, 0);
    burn_200ms();
    assert_int_equal(loupe_stop_trace(NULL), 0);
    *err = tu_read_file(path, NULL);
    return loupe__kept_model();
}

static void test_above_limit_clamped(void **state) {
    (void)state;
    char *err = NULL;
    const loupe_model *m = sample_at(5000, &err);
    assert_string_equal(err, "loupe: sampling at 2000 Hz, not 5000: that is "
                             "kernel.perf_event_max_sample_rate (raise it with sysctl -w "
                             "kernel.perf_event_max_sample_rate=5000)\n");
    free(err);
    assert_string_equal(tu_meta(m, "loupe_sampling", NULL),
                        "2000 Hz task-clock, frame-pointer stacks");
    assert_int_equal(m->sample_period_ns, 500000);
    /* 200 ms of CPU at 2000 Hz: 400 samples (5000 Hz would give 1000); 10% over for the start's
     * and the stop's edges, 25% under for the kernel's frequency mode settling on a loaded
     * machine (a CI run at load had 336) */
    assert_in_range(m->sample_count, 300, 440);
}

static void test_at_limit_silent(void **state) {
    (void)state;
    char *err = NULL;
    const loupe_model *m = sample_at(2000, &err);
    assert_string_equal(err, "");
    free(err);
    assert_string_equal(tu_meta(m, "loupe_sampling", NULL),
                        "2000 Hz task-clock, frame-pointer stacks");
    assert_in_range(m->sample_count, 300, 440); /* as above */
}

int main(void) {
    if (!tu_perf_allowed()) {
        printf("test_sample_rate: skipped: perf_event_open is not allowed here\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_above_limit_clamped, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_at_limit_silent, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
