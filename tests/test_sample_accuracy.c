/* test_sample_accuracy.c: the on-CPU time the trace gives a thread (its span less its off-CPU
 * intervals, what `loupe summary` prints) matches the thread's own measure of its CPU time, and
 * a thread that spends its CPU in system calls gets samples in proportion to it.
 *
 * Two threads, each measuring itself inside one zone ("measured"):
 *  - "late": registers, then blocks (a read of a pipe) until the main thread has seen the
 *    sampler open its event and 50 ms more, so that the event opens while it is switched out
 *    (its first switch record is a switch-in); then it burns 30 ms of CPU in three parts with
 *    sleeps between. Compared from the main thread's zone "mark", which begins once the event
 *    is open (loupe__sample_watching): the time between a registration and its open, which no
 *    record shows, does not count. The first version assumed the open within 50 ms of the
 *    registration; a CI run under TSan at load had it later.
 *  Reference for both: the thread's own task-clock counter (what `perf stat -e task-clock`
 *  reports), the clock of the switch records. CLOCK_THREAD_CPUTIME_ID is printed beside it but
 *  not compared: the scheduler's clock leaves out the time the hypervisor stole from the VM,
 *  which task-clock and perf's timestamps count. On this 2-core VM under 4 spinning processes,
 *  30 ms of CPU read up to 5.1 ms more in task-clock than in CPUTIME (120 rounds; the worst
 *  ones in rounds where /proc/stat's steal moved), and the trace gave late 8.7 ms over
 *  CPUTIME in 1 run of 12 (a CI run under TSan too).
 *  - "often": usleep(50) in a loop for 400 ms, thousands of blocks a second. Reference: its own
 *    task-clock counter (what `perf stat -e task-clock` reports), which counts the same window
 *    as the switch records: the kernel's context-switch path is outside both and inside
 *    CLOCK_THREAD_CPUTIME_ID (docs/record.md, "on-CPU time"), so that clock is only an upper
 *    bound here. It starts measuring once its event is open too.
 * Tolerance: 10% + 2 ms of the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "record/sample.h"
#include "session/session.h"

#include <linux/perf_event.h>
#include <loupe/loupe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct probe {
    int go[2]; /* a pipe: the main thread writes a byte when the thread may go on */
    volatile int registered;
    uint64_t tid;
    uint64_t cpu_ns;  /* CLOCK_THREAD_CPUTIME_ID over the zone (printed) */
    uint64_t tclk_ns; /* its own task-clock counter over the zone; 0 when none */
} probe;

static uint64_t clock_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A counting task-clock event on the calling thread, kernel time included when allowed. */
static int task_clock_fd(int exclude_kernel) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.exclude_kernel = exclude_kernel ? 1u : 0u;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static uint64_t task_clock(int fd) {
    uint64_t v = 0;
    if (fd >= 0 && read(fd, &v, sizeof v) != (ssize_t)sizeof v) {
        v = 0;
    }
    return v;
}

static void burn_cpu(uint64_t ns) {
    uint64_t end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
    }
}

static void *late_main(void *arg) {
    probe *p = arg;
    p->tid = (uint64_t)syscall(SYS_gettid);
    int fd = task_clock_fd(0);
    if (fd < 0) {
        fd = task_clock_fd(1);
    }
    uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = task_clock(fd);
    {
        LOUPE_ZONE("measured"); /* registers: the sampler opens its event while it blocks */
        __atomic_store_n(&p->registered, 1, __ATOMIC_RELEASE);
        char c;
        if (read(p->go[0], &c, 1) != 1) {
            abort();
        }
        for (int i = 0; i < 3; i++) {
            burn_cpu(10000000);
            usleep(5000);
        }
    }
    p->tclk_ns = task_clock(fd) - t0;
    p->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    if (fd >= 0) {
        close(fd);
    }
    return NULL;
}

static void *often_main(void *arg) {
    probe *p = arg;
    p->tid = (uint64_t)syscall(SYS_gettid);
    int fd = task_clock_fd(0);
    if (fd < 0) {
        fd = task_clock_fd(1); /* task-clock counts kernel time either way */
    }
    { LOUPE_ZONE("reg"); }
    __atomic_store_n(&p->registered, 1, __ATOMIC_RELEASE);
    char c;
    if (read(p->go[0], &c, 1) != 1) { /* its event is open */
        abort();
    }
    uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = task_clock(fd);
    {
        LOUPE_ZONE("measured");
        uint64_t end = clock_ns(CLOCK_MONOTONIC) + 400000000u;
        while (clock_ns(CLOCK_MONOTONIC) < end) {
            usleep(50);
        }
    }
    p->tclk_ns = task_clock(fd) - t0;
    p->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    if (fd >= 0) {
        close(fd);
    }
    return NULL;
}

static const loupe_model_thread *thread_of(const loupe_model *m, uint64_t tid, size_t *index) {
    for (size_t i = 0; i < m->thread_count; i++) {
        if (m->threads[i].kind == LOUPE_TRACK_THREAD && m->threads[i].tid == tid) {
            *index = i;
            return &m->threads[i];
        }
    }
    fail_msg("no track for thread %llu", (unsigned long long)tid);
    return NULL;
}

/* The zone "measured" of a thread from `from` (model ns) on: its on-CPU time (duration less
 * off-CPU) and the samples inside it. */
static uint64_t on_cpu_in_zone(const loupe_model *m, uint64_t tid, uint64_t from, size_t *samples) {
    size_t t = 0;
    const loupe_model_thread *th = thread_of(m, tid, &t);
    const loupe_slice *z = NULL;
    for (size_t i = 0; i < th->slice_count; i++) {
        if (strcmp(th->slices[i].name, "measured") == 0) {
            z = &th->slices[i];
        }
    }
    assert_non_null(z);
    uint64_t a = z->start_ns > from ? z->start_ns : from, b = z->start_ns + z->dur_ns, off = 0;
    for (size_t i = 0; i < th->off_cpu_count; i++) {
        uint64_t x = th->off_cpu[i].start_ns, y = x + th->off_cpu[i].dur_ns;
        x = x < a ? a : x;
        y = y > b ? b : y;
        off += y > x ? y - x : 0;
    }
    *samples = 0;
    for (size_t i = 0; i < m->sample_count; i++) {
        *samples +=
            m->samples[i].thread == t && m->samples[i].ts_ns >= a && m->samples[i].ts_ns < b;
    }
    return b - a - off;
}

/* The start of the main thread's zone "mark" (model ns). */
static uint64_t mark_ns(const loupe_model *m, uint64_t tid) {
    size_t t = 0;
    const loupe_model_thread *th = thread_of(m, tid, &t);
    for (size_t i = 0; i < th->slice_count; i++) {
        if (strcmp(th->slices[i].name, "mark") == 0) {
            return th->slices[i].start_ns;
        }
    }
    fail_msg("no zone \"mark\"");
    return 0;
}

/* Starts a probe thread and waits until it registered and the sampler has its event open (10 s
 * at most: a sampler that never opens it fails the test). */
static void start_probe(pthread_t *th, probe *p, void *(*fn)(void *)) {
    assert_int_equal(pipe(p->go), 0);
    assert_int_equal(pthread_create(th, NULL, fn, p), 0);
    int waited = 0;
    while (
        (!__atomic_load_n(&p->registered, __ATOMIC_ACQUIRE) || !loupe__sample_watching(p->tid)) &&
        waited < 10000) {
        usleep(1000);
        waited++;
    }
    if (waited == 10000) {
        fail_msg("the sampler opened no event on thread %llu in 10 s", (unsigned long long)p->tid);
    }
}

static void go_on(probe *p) {
    assert_int_equal(write(p->go[1], "g", 1), 1);
}

static void expect_near(const char *what, uint64_t got, const probe *p) {
    uint64_t want = p->tclk_ns, tol = want / 10 + 2000000u;
    printf("%s: on-CPU %.3f ms, task-clock %.3f ms (tolerance %.3f ms), CPUTIME %.3f ms\n", what,
           (double)got / 1e6, (double)want / 1e6, (double)tol / 1e6, (double)p->cpu_ns / 1e6);
    assert_true(want > 0);
    assert_in_range(got, want > tol ? want - tol : 0, want + tol);
}

static void test_on_cpu_matches_cpu_time(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir,
                             .sampling_hz = 999,
                             .sampling_stacks = LOUPE_SAMPLING_STACKS_FP,
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO};
    assert_int_equal(loupe_start_trace(&o), 0);
    probe late = {0}, often = {0};
    pthread_t a, b;
    start_probe(&a, &late, late_main);
    /* its event is open: on-CPU is compared from here; it stays blocked 50 ms more, which a
     * trace that took the open for a running thread would count as on-CPU */
    { LOUPE_ZONE("mark"); }
    usleep(50000);
    go_on(&late);
    start_probe(&b, &often, often_main);
    go_on(&often);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    for (int i = 0; i < 2; i++) {
        close(late.go[i]);
        close(often.go[i]);
    }
    assert_int_equal(loupe_stop_trace(NULL), 0);
    const loupe_model *m = loupe__kept_model();
    assert_non_null(m);
    assert_int_equal(m->samples_lost, 0);

    size_t n_late, n_often;
    /* before the fix: the 50 ms it still blocked after the open counted as on-CPU (80 ms) */
    uint64_t mark = mark_ns(m, (uint64_t)syscall(SYS_gettid));
    expect_near("late", on_cpu_in_zone(m, late.tid, mark, &n_late), &late);
    uint64_t often_on = on_cpu_in_zone(m, often.tid, 0, &n_often);
    assert_true(often.tclk_ns > 0);
    expect_near("often", often_on, &often);
    assert_true(often_on <= often.cpu_ns + often.cpu_ns / 10 + 2000000u);

    /* Samples at 999 Hz: one per 1.001 ms of task-clock time. Most of a usleep loop's CPU time is
     * in the kernel: only an event that may count kernel mode samples it. */
    int kfd = task_clock_fd(0);
    if (kfd < 0) {
        printf("often: %zu samples; kernel-mode samples not allowed here (perf_event_paranoid "
               "2 without CAP_PERFMON): not checked\n",
               n_often);
        return;
    }
    close(kfd);
    size_t expect = (size_t)(often.tclk_ns / 1001000u);
    printf("often: %zu samples, %zu expected from its task-clock\n", n_often, expect);
    assert_true(expect >= 5);
    assert_true(n_often * 10 >= expect * 3); /* >= 30%: before the fix, 1 in 20 */
}

int main(void) {
    if (!tu_perf_allowed()) {
        printf("test_sample_accuracy: skipped: perf_event_open is not allowed here\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_on_cpu_matches_cpu_time, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
