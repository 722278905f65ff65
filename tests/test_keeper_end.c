/* test_keeper_end.c: loupe's keeper thread lives only while a session does (keeper.c). A process
 * that stopped its trace is down to its own threads, so that its end costs its parent nothing
 * more than an untraced process's: a thread still alive at exit_group() made the parent's
 * reaping wait in the kernel's /proc dentry invalidation (bench/forks.sh: 25-75x slower shells
 * and makes under `loupe record`). Thread counts are /proc/self/stat's field 20 (num_threads,
 * proc(5)); sampling is off, so the keeper is loupe's only thread. Also: the keeper is named
 * "loupe-keeper" (by itself, with prctl) by the time the start returns, in every session. And it
 * backs off while nothing is recorded (keeper.c: its nap doubles from 1 ms to 10 ms): over 600 ms
 * of an idle session it wakes at most 120 times (about 60 at 10 ms; 600 at the old 1 ms), and
 * while a thread records a zone every 0.5 ms it wakes at least 60 times in 300 ms (its 1 ms nap
 * again: about 280 on an idle machine; 10 ms naps would give 30). Wake-ups are the keeper's
 * voluntary context switches (/proc/self/task/TID/status, proc(5)): load only delays them, so the
 * idle bound cannot be reached by load, and the active one has a margin of 4x for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static long num_threads(void) {
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_true(n > 0);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* "pid (comm) state ...": field 3 follows ") " */
    assert_non_null(p);
    p += 2;
    for (int field = 3; field < 20; field++) {
        p = strchr(p, ' ');
        assert_non_null(p);
        p++;
    }
    return strtol(p, NULL, 10);
}

/* How many of this process's threads are named name (/proc/self/task/TID/comm). */
static int threads_named(const char *name) {
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int count = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, comm, sizeof comm - 1);
            close(fd);
            comm[n > 0 ? n : 0] = 0;
            comm[strcspn(comm, "\n")] = 0;
        }
        count += strcmp(comm, name) == 0;
    }
    closedir(d);
    return count;
}

/* The keeper's tid (the one thread named "loupe-keeper"), 0 when none. */
static long keeper_tid(void) {
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    long tid = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = e->d_name[0] != '.' ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            ssize_t n = read(fd, comm, sizeof comm - 1);
            close(fd);
            comm[n > 0 ? n : 0] = 0;
            if (strcmp(comm, "loupe-keeper\n") == 0) {
                tid = strtol(e->d_name, NULL, 10);
            }
        }
    }
    closedir(d);
    return tid;
}

/* voluntary_ctxt_switches of thread tid. */
static long wakeups(long tid) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_true(n > 0);
    buf[n] = 0;
    const char *p = strstr(buf, "\nvoluntary_ctxt_switches:");
    assert_non_null(p);
    return strtol(p + strlen("\nvoluntary_ctxt_switches:"), NULL, 10);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Starts a session without sampling (spooling to spool_dir when not NULL, into a 2 MiB pool);
 * returns the keeper's tid. */
static long start_session(const char *spool_dir) {
    loupe_trace_options o = {.log_dir = tu_dir, .sampling_hz = 0, .spool_dir = spool_dir};
    if (spool_dir != NULL) {
        o.session_events = 131072;
    }
    assert_int_equal(loupe_start_trace(&o), 0);
    long tid = keeper_tid();
    assert_true(tid > 0);
    return tid;
}

/* Stops the session: exactly events recorded, none dropped. */
static void stop_expect(uint64_t events) {
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, events);
    assert_int_equal(r.events_dropped, 0);
    loupe_trace_result_free(&r);
}

static void test_keeper_backs_off(void **state) {
    (void)state;
    long tid = start_session(NULL);
    { LOUPE_ZONE("first"); }
    usleep(100 * 1000); /* the back-off reaches its 10 ms */
    long w0 = wakeups(tid);
    usleep(600 * 1000); /* idle */
    long idle = wakeups(tid) - w0;
    print_message("keeper: %ld wake-ups in 600 ms idle\n", idle);
    assert_true(idle <= 120);
    w0 = wakeups(tid);
    double t0 = now_ms();
    int zones = 0;
    while (now_ms() - t0 < 300) { /* recording: a zone every 0.5 ms */
        { LOUPE_ZONE("tick"); }
        zones++;
        usleep(500);
    }
    long active = wakeups(tid) - w0;
    print_message("keeper: %ld wake-ups in 300 ms recording %d zones\n", active, zones);
    assert_true(active >= 60); /* 2x the 30 of 10 ms naps: a loaded machine stretches 1 ms naps */
    usleep(200 * 1000);        /* idle again: back at 10 ms naps */
    t0 = now_ms();
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    double stop_ms = now_ms() - t0;
    print_message("keeper: stop after idle took %.1f ms\n", stop_ms);
    assert_int_equal(r.events_recorded, 2 + 2 * (uint64_t)zones);
    assert_int_equal(r.events_dropped, 0);
    loupe_trace_result_free(&r);
}

/* Threads that join together (each takes a chunk at once) are not a chunk rate: 8 threads that
 * record one zone each at the same moment leave the keeper backing off once idle (helper-found:
 * the rate read over the tiny gap their pokes made held its naps at 1 ms for the session). */
static pthread_barrier_t g_bar;
static void *one_zone(void *arg) {
    pthread_barrier_wait(&g_bar);
    { LOUPE_ZONE("joined"); }
    return arg;
}

static void test_keeper_backs_off_after_joins(void **state) {
    (void)state;
    long tid = start_session(NULL);
    pthread_t th[8];
    assert_int_equal(pthread_barrier_init(&g_bar, NULL, 8), 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, one_zone, NULL), 0);
    }
    for (int i = 0; i < 8; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
    }
    pthread_barrier_destroy(&g_bar);
    usleep(1000 * 1000); /* the rate's memory halves every 250 ms */
    long w0 = wakeups(tid);
    usleep(600 * 1000);
    long idle = wakeups(tid) - w0;
    print_message("keeper: %ld wake-ups in 600 ms idle after 8 threads joined\n", idle);
    assert_true(idle <= 120);
    stop_expect(16);
}

/* A spooling session never backs off: only the keeper's passes give spooled chunks back to the
 * pool, and a thread that records at full speed after an idle stretch into a small pool filled
 * it while the keeper napped (helper-found: `session_events` 131,072, 124,218 of 1,600,002
 * events dropped in 3 of 8 runs). Checked on the keeper's wake-ups, which load cannot raise: over
 * 600 ms idle in a spooling session at least 200 (1 ms naps: about 550; backing off: about 60).
 * Drops themselves are not asserted here: on a loaded machine a descheduled keeper lets a
 * full-speed thread fill a 2 MiB pool also at 1 ms naps. */
static void test_spool_never_backs_off(void **state) {
    (void)state;
    char spool[600];
    snprintf(spool, sizeof spool, "%s/spool", tu_dir);
    assert_int_equal(mkdir(spool, 0755), 0);
    long tid = start_session(spool);
    { LOUPE_ZONE("first"); }
    usleep(100 * 1000);
    long w0 = wakeups(tid);
    usleep(600 * 1000);
    long idle = wakeups(tid) - w0;
    print_message("keeper: %ld wake-ups in 600 ms idle, spooling\n", idle);
    assert_true(idle >= 200);
    stop_expect(2);
}

static void *nothing(void *arg) {
    return arg;
}

/* The threads this process has besides loupe's: 1 (this one), and TSan's background thread in a
 * TSan build. */
static long g_base;

static void one_session(void) {
    loupe_trace_options o = {.log_dir = tu_dir, .sampling_hz = 0};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(num_threads(), g_base + 1); /* and the keeper */
    assert_int_equal(threads_named("loupe-keeper"), 1);
    { LOUPE_ZONE("work"); }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 2);
    loupe_trace_result_free(&r);
    assert_int_equal(num_threads(), g_base); /* the stop ended and joined the keeper */
    assert_int_equal(threads_named("loupe-keeper"), 0);
}

static void test_keeper_ends_with_session(void **state) {
    (void)state;
    /* a thread made and joined first: TSan's runtime starts its background thread with the
     * process's first pthread_create, and it then stays */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, nothing, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    g_base = num_threads();
#if !defined(__SANITIZE_THREAD__)
    assert_int_equal(g_base, 1);
#endif
    one_session();
    one_session(); /* a second session starts a keeper again, and its stop ends it again */
}

/* A fork child of a tracing parent has no keeper of its own until it starts a session; its
 * stop leaves it with one thread, as at its fork. */
static void test_keeper_in_fork_child(void **state) {
    (void)state;
#if defined(__SANITIZE_THREAD__)
    skip(); /* TSan's runtime in the fork child of a threaded parent reports reused thread ids
             * ("dup thread with used id") once the child starts a thread, and exits 66 */
#endif
    loupe_trace_options o = {.log_dir = tu_dir, .sampling_hz = 0};
    assert_int_equal(loupe_start_trace(&o), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = num_threads() != 1;
        loupe_trace_options c = {.log_dir = tu_dir, .sampling_hz = 0};
        bad |= (loupe_start_trace(&c) != 0) << 1;
        bad |= (num_threads() != 2) << 2;
        bad |= (loupe_stop_trace(NULL) != 0) << 3;
        bad |= (num_threads() != 1) << 4;
        _exit(bad);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(num_threads(), 2); /* the parent's keeper runs on */
    assert_int_equal(loupe_stop_trace(NULL), 0);
    assert_int_equal(num_threads(), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keeper_ends_with_session, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_keeper_in_fork_child, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_keeper_backs_off, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_keeper_backs_off_after_joins, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_spool_never_backs_off, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
