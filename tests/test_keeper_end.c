/* test_keeper_end.c: loupe's keeper thread lives only while a session does (keeper.c). A process
 * that stopped its trace is down to its own threads, so that its end costs its parent nothing
 * more than an untraced process's: a thread still alive at exit_group() made the parent's
 * reaping wait in the kernel's /proc dentry invalidation (bench/forks.sh: 25-75x slower shells
 * and makes under `loupe record`). Thread counts are /proc/self/stat's field 20 (num_threads,
 * proc(5)); sampling is off, so the keeper is loupe's only thread. Also: the keeper is named
 * "loupe-keeper" (by itself, with prctl) by the time the start returns, in every session.
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
#include <sys/wait.h>
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
