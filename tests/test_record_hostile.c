/* test_record_hostile.c: the recorder inside programs that are hard on it, with exact counts:
 * a program with its own allocator and zones inside it (linked, -finstrument-functions, under
 * `loupe record`); zones in a SIGPROF handler firing every 50 µs over 8 malloc-heavy threads
 * (every signal's zone recorded or counted); 20,000 short threads in one session (bounded
 * memory); a reused thread id (its own counts on each track); keep-first at the last slot; a
 * dynamic name too long for its buffer (cut and counted); a stop racing threads' first events;
 * a relative log_dir with a chdir before the stop; the first event of a new thread.
 * Runs threads: the TSan build runs this file (label `threads`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <loupe/loupe.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* ---- helpers ---- */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
    struct timespec d = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
}

/* The one *.trace.json.gz in run_dir (malloc'd); fails the test when there is not exactly one. */
static char *trace_in(const char *run_dir) {
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/*.trace.json.gz", run_dir);
    glob_t g;
    assert_int_equal(glob(pat, 0, NULL, &g), 0);
    assert_int_equal(g.gl_pathc, 1);
    char *p = strdup(g.gl_pathv[0]);
    globfree(&g);
    return p;
}

static loupe_model *read_run(const char *run_dir) {
    char *t = trace_in(run_dir);
    loupe_model *m = tu_read_back(t);
    free(t);
    return m;
}

static size_t slices_named(const loupe_model *m, const char *name) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            n += strcmp(m->threads[t].slices[i].name, name) == 0;
        }
    }
    return n;
}

/* A metadata value as a number; 0 when the key is absent (loupe writes these keys only when
 * non-zero). */
static uint64_t meta_u64(const loupe_model *m, const char *key) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return strtoull(m->metadata[i].value, NULL, 10);
        }
    }
    return 0;
}

static const loupe_thread_stats *stats_named(const loupe_trace_result *r, const char *name) {
    for (size_t i = 0; i < r->thread_count; i++) {
        if (strcmp(r->threads[i].name, name) == 0) {
            return &r->threads[i];
        }
    }
    return NULL;
}

/* The last non-empty line of text (in place). */
static const char *last_line(char *text) {
    size_t n = strlen(text);
    while (n > 0 && text[n - 1] == '\n') {
        text[--n] = 0;
    }
    char *nl = strrchr(text, '\n');
    return nl ? nl + 1 : text;
}

/* "VmRSS:" / "VmSize:" of /proc/self/status, in KiB. */
static uint64_t status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, kl) == 0) {
            v = strtoull(line + kl, NULL, 10);
            break;
        }
    }
    fclose(f);
    assert_true(v > 0);
    return v;
}

static void watchdog_fired(int sig) {
    (void)sig;
    static const char msg[] = "test_record_hostile: watchdog: a run took too long (hang)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

/* Fails the test (exit 1) instead of hanging when secs pass before watchdog(0). */
static void watchdog(unsigned secs) {
    signal(SIGALRM, watchdog_fired);
    alarm(secs);
}

/* ---- 1. a program with its own allocator ---- */

enum { OM_WORKERS = 4, OM_ITERS = 2000 }; /* tests/probes/own_malloc.c's */

static void check_own_malloc_run(const char *run_dir, int functrace) {
    loupe_model *m = read_run(run_dir);
    const uint64_t n = OM_WORKERS * OM_ITERS;
    assert_int_equal(slices_named(m, "own_malloc"), n);
    assert_int_equal(slices_named(m, "own_calloc"), n);
    assert_int_equal(slices_named(m, "own_realloc"), n);
    assert_int_equal(slices_named(m, "own_aligned_alloc"), n);
    assert_int_equal(slices_named(m, "own_memalign"), n);
    assert_int_equal(slices_named(m, "own_posix_memalign"), n);
    assert_int_equal(slices_named(m, "own_free"), 5 * n);
    assert_int_equal(loupe_model_events_dropped(m), 0);
    assert_int_equal(meta_u64(m, "loupe_events_reentered"), 0);
    assert_int_equal(m->truncated_zones, 0);
    if (functrace) {
        assert_int_equal(slices_named(m, "worker"), OM_WORKERS); /* its function zone */
        assert_true(slices_named(m, "malloc") >= n);
    }
    loupe_model_free(m);
}

static void run_own_malloc(const char *exe, int functrace) {
    if (SANITIZED) {
        print_message("skipped: a sanitizer's runtime owns malloc (replacing it is the test)\n");
        skip();
    }
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' '%s/log' %s", exe, tu_dir, functrace ? "functrace" : "");
    int rc = tu_run(cmd, &out);
    if (rc != 0) {
        print_message("own_malloc exited %d: %s\n", rc, out);
    }
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, " dropped 0\n"));
    check_own_malloc_run(last_line(out), functrace);
    free(out);
}

static void test_own_malloc_linked(void **state) {
    (void)state;
    run_own_malloc(LOUPE_OWN_MALLOC, 0);
}

static void test_own_malloc_instrumented(void **state) {
    (void)state;
    run_own_malloc(LOUPE_OWN_MALLOC_FI, 1);
}

static void test_own_malloc_under_record(void **state) {
    (void)state;
    if (SANITIZED) {
        print_message("skipped: a sanitizer's runtime owns malloc (replacing it is the test)\n");
        skip();
    }
    char cmd[8192], *out = NULL;
    /* the run directory is the last line on stderr (stdout is the program's) */
    snprintf(cmd, sizeof cmd, "'%s' record -q -o '%s/rec' -- '%s' 2>&1 >/dev/null", tu_cli(),
             tu_dir, LOUPE_OWN_MALLOC_SHARED);
    int rc = tu_run(cmd, &out);
    if (rc != 0) {
        print_message("loupe record exited %d: %s\n", rc, out);
    }
    assert_int_equal(rc, 0);
    check_own_malloc_run(last_line(out), 0);
    free(out);
}

/* ---- 2. zones in a SIGPROF handler ---- */

enum { SIG_WORKERS = 8, SIG_RUNS = 20 };
static unsigned long sig_count; /* atomic */
static int sig_stop;            /* atomic */

static void on_prof(int sig) {
    (void)sig;
    int saved = errno;
    { LOUPE_ZONE("sig"); }
    __atomic_fetch_add(&sig_count, 1, __ATOMIC_RELAXED);
    errno = saved;
}

static void *sig_worker(void *arg) {
    (void)arg;
    void *volatile keep;
    while (!__atomic_load_n(&sig_stop, __ATOMIC_RELAXED)) {
        LOUPE_ZONE("work");
        for (size_t k = 0; k < 1024; k++) {
            char *p = malloc(16 + (k * 24) % 4000);
            if (p == NULL) {
                abort();
            }
            p[0] = (char)k;
            keep = p;
            free(keep);
        }
    }
    return NULL;
}

static void test_sigprof_zones_threads(void **state) {
    (void)state;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGPROF, &sa, NULL), 0);
    uint64_t total_signals = 0, total_dropped = 0;
    for (int run = 0; run < SIG_RUNS; run++) {
        watchdog(30);
        __atomic_store_n(&sig_count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&sig_stop, 0, __ATOMIC_RELAXED);
        loupe_trace_options o = {.log_dir = tu_dir, .formats = LOUPE_FORMAT_CHROME_JSON};
        assert_int_equal(loupe_start_trace(&o), 0);
        struct itimerval it = {{0, 50}, {0, 50}};
        assert_int_equal(setitimer(ITIMER_PROF, &it, NULL), 0);
        pthread_t th[SIG_WORKERS];
        for (int i = 0; i < SIG_WORKERS; i++) {
            assert_int_equal(pthread_create(&th[i], NULL, sig_worker, NULL), 0);
        }
        sleep_ns(300000000u);
        __atomic_store_n(&sig_stop, 1, __ATOMIC_RELAXED);
        for (int i = 0; i < SIG_WORKERS; i++) {
            assert_int_equal(pthread_join(th[i], NULL), 0);
        }
        struct itimerval off = {{0, 0}, {0, 0}};
        assert_int_equal(setitimer(ITIMER_PROF, &off, NULL), 0);
        /* A signal generated before the disarm is delivered to this (the only) thread on the
         * way out of setitimer: every signal's handler has run by now, inside the session. */
        uint64_t signals = __atomic_load_n(&sig_count, __ATOMIC_RELAXED);
        loupe_trace_result r = {.size = sizeof r};
        assert_int_equal(loupe_stop_trace(&r), 0);
        loupe_model *m = read_run(r.run_dir);
        uint64_t sig_slices = slices_named(m, "sig");
        uint64_t reentered = meta_u64(m, "loupe_events_reentered");
        const loupe_thread_stats *over =
            stats_named(&r, "(events of threads loupe could not register)");
        uint64_t unregistered = over ? over->events_dropped : 0;
        if (sig_slices + (reentered + unregistered) / 2 != signals ||
            (reentered + unregistered) % 2 != 0 || r.events_dropped != reentered + unregistered) {
            print_message("run %d: %llu signals, %llu sig slices, %llu reentered, %llu "
                          "unregistered, %llu dropped\n",
                          run, (unsigned long long)signals, (unsigned long long)sig_slices,
                          (unsigned long long)reentered, (unsigned long long)unregistered,
                          (unsigned long long)r.events_dropped);
        }
        assert_int_equal((reentered + unregistered) % 2, 0);
        assert_int_equal(sig_slices + (reentered + unregistered) / 2, signals);
        /* nothing else is lost: the buffers are large enough for every event */
        assert_int_equal(r.events_dropped, reentered + unregistered);
        assert_int_equal(r.unmatched_ends, 0);
        assert_int_equal(r.truncated_zones, 0);
        total_signals += signals;
        total_dropped += reentered + unregistered;
        loupe_model_free(m);
        loupe_trace_result_free(&r);
        alarm(0);
    }
    signal(SIGPROF, SIG_DFL);
    print_message("%llu signals in %d runs, %llu events dropped as re-entered or unregistered\n",
                  (unsigned long long)total_signals, SIG_RUNS, (unsigned long long)total_dropped);
    assert_true(total_signals > 0);
}

/* ---- 3. thread churn ---- */

enum { CHURN_THREADS = 20000 };

static void *churn_worker(void *arg) {
    (void)arg;
    { LOUPE_ZONE("churn_a"); }
    { LOUPE_ZONE("churn_b"); }
    return NULL;
}

static void test_thread_churn_threads(void **state) {
    (void)state;
    watchdog(240);
    loupe_trace_options o = {.log_dir = tu_dir, .formats = LOUPE_FORMAT_CHROME_JSON};
    assert_int_equal(loupe_start_trace(&o), 0);
    uint64_t rss0 = status_kib("VmRSS:"), vm0 = status_kib("VmSize:");
    pthread_attr_t at;
    pthread_attr_init(&at);
    /* small stacks: glibc caches up to 40 MiB of exited threads' stacks, which is not loupe's */
    pthread_attr_setstacksize(&at, SANITIZED ? 1u << 20 : 128u << 10);
    for (int i = 0; i < CHURN_THREADS; i += 2) {
        pthread_t a, b;
        assert_int_equal(pthread_create(&a, &at, churn_worker, NULL), 0);
        assert_int_equal(pthread_create(&b, &at, churn_worker, NULL), 0);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }
    pthread_attr_destroy(&at);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    uint64_t rss1 = status_kib("VmRSS:"), vm1 = status_kib("VmSize:");
    print_message("%d threads: VmRSS +%llu KiB, VmSize +%lld KiB\n", CHURN_THREADS,
                  (unsigned long long)(rss1 > rss0 ? rss1 - rss0 : 0),
                  (long long)vm1 - (long long)vm0);
    assert_int_equal(r.events_recorded, 4u * CHURN_THREADS);
    assert_int_equal(r.events_dropped, 0);
    assert_int_equal(r.thread_count, CHURN_THREADS);
    assert_int_equal(r.truncated_zones, 0);
    for (size_t i = 0; i < r.thread_count; i++) {
        assert_int_equal(r.threads[i].events_recorded, 4);
        assert_int_equal(r.threads[i].events_dropped, 0);
    }
    loupe_trace_result_free(&r);
    alarm(0);
    if (SANITIZED) {
        /* the sanitizer's runtime keeps per-thread state, shadow and a quarantine of its own */
        print_message("memory bounds not checked under a sanitizer (the counts were)\n");
        return;
    }
    assert_true(rss1 <= rss0 + 64u * 1024);
    assert_true(vm1 <= vm0 + 64u * 1024);
}

/* ---- 4. a reused thread id ---- */

static void *tid_a(void *arg) {
    *(uint64_t *)arg = (uint64_t)syscall(SYS_gettid);
    for (int i = 0; i < 100; i++) {
        LOUPE_ZONE("tid_a");
    }
    return NULL;
}

typedef struct tid_b_arg {
    uint64_t want, got;
} tid_b_arg;

static void *tid_b(void *arg) {
    tid_b_arg *b = arg;
    b->got = (uint64_t)syscall(SYS_gettid);
    if (b->got != b->want) {
        return NULL; /* not the reused tid: records nothing, the caller tries again */
    }
    for (int i = 0; i < 10; i++) {
        LOUPE_ZONE("tid_b");
    }
    return NULL;
}

/* In the new PID namespace (pid 1 there): A records, exits; B is given A's tid. Exit 0 when the
 * stop reported both with their own counts, 77 when ns_last_pid cannot be written. */
static int tid_reuse_in_ns(const char *log_dir) {
    loupe_trace_options o = {
        .log_dir = log_dir, .buffer_events = 64, .formats = LOUPE_FORMAT_CHROME_JSON};
    if (loupe_start_trace(&o) != 0) {
        fprintf(stderr, "start: %s\n", loupe_last_error());
        return 1;
    }
    pthread_t t;
    uint64_t a_tid = 0;
    pthread_create(&t, NULL, tid_a, &a_tid);
    pthread_join(t, NULL);
    tid_b_arg b = {a_tid, 0};
    for (int tries = 0; tries < 500 && b.got != a_tid; tries++) {
        int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
        if (fd < 0) {
            fprintf(stderr, "ns_last_pid: %s\n", strerror(errno));
            return 77;
        }
        char v[32];
        int n = snprintf(v, sizeof v, "%llu", (unsigned long long)(a_tid - 1));
        ssize_t w = write(fd, v, (size_t)n);
        int e = errno;
        close(fd);
        if (w != n) {
            fprintf(stderr, "ns_last_pid: %s\n", strerror(e));
            return 77;
        }
        pthread_create(&t, NULL, tid_b, &b);
        pthread_join(t, NULL);
        if (b.got != a_tid) {
            sleep_ns(1000000); /* A's tid is freed a little after the join */
        }
    }
    if (b.got != a_tid) {
        fprintf(stderr, "tid %llu never came back\n", (unsigned long long)a_tid);
        return 1;
    }
    loupe_trace_result r = {.size = sizeof r};
    if (loupe_stop_trace(&r) != 0) {
        fprintf(stderr, "stop: %s\n", loupe_last_error());
        return 1;
    }
    int bad = 0;
    size_t same = 0, seen_a = 0, seen_b = 0;
    for (size_t i = 0; i < r.thread_count; i++) {
        const loupe_thread_stats *s = &r.threads[i];
        fprintf(stderr, "thread %llu: recorded %llu dropped %llu capacity %llu\n",
                (unsigned long long)s->tid, (unsigned long long)s->events_recorded,
                (unsigned long long)s->events_dropped, (unsigned long long)s->capacity_needed);
        if (s->tid != a_tid) {
            continue;
        }
        same++;
        /* keep-first in 64 slots: 32 zones whole, 68 dropped with their ends */
        if (s->events_recorded == 64 && s->events_dropped == 136 && s->capacity_needed == 200) {
            seen_a++;
        } else if (s->events_recorded == 20 && s->events_dropped == 0 && s->capacity_needed == 20) {
            seen_b++;
        }
    }
    bad |= r.thread_count != 2 || same != 2 || seen_a != 1 || seen_b != 1;
    bad |= r.events_recorded != 84 || r.events_dropped != 136;
    loupe_trace_result_free(&r);
    return bad;
}

static void test_tid_reuse_threads(void **state) {
    (void)state;
    watchdog(60);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        if (unshare(CLONE_NEWPID) != 0) {
            fprintf(stderr, "unshare(CLONE_NEWPID): %s\n", strerror(errno));
            _exit(77);
        }
        pid_t g = fork(); /* pid 1 of the new namespace */
        if (g < 0) {
            _exit(1);
        }
        if (g == 0) {
            _exit(tid_reuse_in_ns(tu_dir));
        }
        int st;
        waitpid(g, &st, 0);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    alarm(0);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77) {
        print_message("skipped: no PID namespace or ns_last_pid here (needs root)\n");
        skip();
    }
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- 5. keep-first at the last slot ---- */

static void test_keep_first_last_slot(void **state) {
    (void)state;
    loupe_trace_options o = {
        .log_dir = tu_dir, .buffer_events = 64, .formats = LOUPE_FORMAT_CHROME_JSON};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int i = 0; i < 30; i++) {
        LOUPE_ZONE("fill"); /* 60 slots */
    }
    { LOUPE_ZONE_DYN("d"); /* begin, one name slot, end: 63 */ }
    { LOUPE_ZONE("last"); /* needs 2, 1 left: dropped whole */ }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 63);
    assert_int_equal(r.events_dropped, 2);
    assert_int_equal(r.truncated_zones, 0);
    assert_int_equal(r.unmatched_ends, 0);
    assert_int_equal(r.thread_count, 1);
    assert_int_equal(r.threads[0].capacity_needed, 65);
    loupe_model *m = read_run(r.run_dir);
    assert_int_equal(m->thread_count, 1);
    assert_int_equal(m->threads[0].slice_count, 31);
    assert_int_equal(slices_named(m, "fill"), 30);
    assert_int_equal(slices_named(m, "d"), 1);
    assert_int_equal(slices_named(m, "last"), 0);
    assert_int_equal(m->truncated_zones, 0);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* ---- 6. a dynamic name longer than its buffer ---- */

static void test_long_dyn_name_cut_counted(void **state) {
    (void)state;
    char name[2001];
    for (int i = 0; i < 2000; i++) {
        name[i] = (char)('a' + i % 26);
    }
    name[2000] = 0;
    loupe_trace_options o = {
        .log_dir = tu_dir, .buffer_events = 64, .formats = LOUPE_FORMAT_CHROME_JSON};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE_DYN(name); }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    /* record.c str_len: (64 slots - the begin - its end) x 15 bytes = 930 bytes in 62 slots */
    assert_int_equal(r.events_recorded, 64);
    assert_int_equal(r.events_dropped, 0);
    loupe_model *m = read_run(r.run_dir);
    assert_int_equal(m->thread_count, 1);
    assert_int_equal(m->threads[0].slice_count, 1);
    const char *got = m->threads[0].slices[0].name;
    assert_int_equal(strlen(got), 930);
    assert_memory_equal(got, name, 930);
    assert_int_equal(meta_u64(m, "loupe_strings_cut"), 1);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* ---- 7. a stop racing threads' first events ---- */

enum { RACE_THREADS = 8, RACE_ZONES = 100, RACE_RUNS = 20 };

typedef struct race {
    pthread_barrier_t go;
    int done;    /* atomic: threads that recorded their zones */
    int release; /* atomic: the stop is over */
} race;

static void *race_worker(void *arg) {
    race *rc = arg;
    pthread_barrier_wait(&rc->go);
    for (int i = 0; i < RACE_ZONES; i++) {
        LOUPE_ZONE("race");
    }
    __atomic_fetch_add(&rc->done, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&rc->release, __ATOMIC_ACQUIRE)) {
        sched_yield(); /* alive at the stop */
    }
    return NULL;
}

static void test_stop_races_first_events_threads(void **state) {
    (void)state;
    watchdog(120);
    for (int run = 0; run < RACE_RUNS; run++) {
        race rc;
        memset(&rc, 0, sizeof rc);
        pthread_barrier_init(&rc.go, NULL, RACE_THREADS);
        loupe_trace_options o = {.log_dir = tu_dir, .formats = LOUPE_FORMAT_CHROME_JSON};
        assert_int_equal(loupe_start_trace(&o), 0);
        pthread_t th[RACE_THREADS];
        for (int i = 0; i < RACE_THREADS; i++) {
            assert_int_equal(pthread_create(&th[i], NULL, race_worker, &rc), 0);
        }
        while (__atomic_load_n(&rc.done, __ATOMIC_ACQUIRE) != RACE_THREADS) {
            sched_yield();
        }
        loupe_trace_result r = {.size = sizeof r};
        assert_int_equal(loupe_stop_trace(&r), 0);
        __atomic_store_n(&rc.release, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < RACE_THREADS; i++) {
            pthread_join(th[i], NULL);
        }
        pthread_barrier_destroy(&rc.go);
        if (r.events_recorded != 2u * RACE_THREADS * RACE_ZONES) {
            print_message("run %d: %llu events recorded, %llu dropped\n", run,
                          (unsigned long long)r.events_recorded,
                          (unsigned long long)r.events_dropped);
        }
        assert_int_equal(r.events_recorded, 2u * RACE_THREADS * RACE_ZONES);
        assert_int_equal(r.events_dropped, 0);
        assert_int_equal(r.truncated_zones, 0);
        assert_int_equal(r.thread_count, RACE_THREADS);
        for (size_t i = 0; i < r.thread_count; i++) {
            assert_int_equal(r.threads[i].events_recorded, 2 * RACE_ZONES);
        }
        loupe_trace_result_free(&r);
    }
    alarm(0);
}

/* ---- 8. a relative log_dir ---- */

static void test_relative_log_dir(void **state) {
    (void)state;
    char old[4096], base[4096];
    assert_non_null(getcwd(old, sizeof old));
    assert_int_equal(chdir(tu_dir), 0);
    assert_non_null(getcwd(base, sizeof base));
    char other[4200];
    snprintf(other, sizeof other, "%s/elsewhere", base);
    assert_int_equal(mkdir(other, 0755), 0);
    loupe_trace_options o = {
        .log_dir = "rel-dir", .formats = LOUPE_FORMAT_CHROME_JSON, .run_name = "run"};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE("rel"); }
    assert_int_equal(chdir(other), 0);
    loupe_trace_result r = {.size = sizeof r};
    int rc = loupe_stop_trace(&r);
    assert_int_equal(chdir(old), 0);
    assert_int_equal(rc, 0);
    char want[4400];
    snprintf(want, sizeof want, "%s/rel-dir/plugins/profile/run", base);
    assert_string_equal(r.run_dir, want);
    struct stat st;
    assert_int_equal(stat(want, &st), 0);
    char stray[4400];
    snprintf(stray, sizeof stray, "%s/rel-dir", other);
    assert_int_equal(stat(stray, &st), -1);
    loupe_trace_result_free(&r);
}

/* ---- 9. the first event of a new thread (a sanity bound; the target is in bench/) ---- */

enum { FIRST_THREADS = 9 };

static void *first_worker(void *arg) {
    uint64_t t0 = now_ns();
    { LOUPE_ZONE("first"); }
    *(uint64_t *)arg = now_ns() - t0;
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_first_event_bound_threads(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .formats = LOUPE_FORMAT_CHROME_JSON};
    assert_int_equal(loupe_start_trace(&o), 0);
    uint64_t ns[FIRST_THREADS];
    for (int i = 0; i < FIRST_THREADS; i++) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, first_worker, &ns[i]), 0);
        pthread_join(t, NULL);
    }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 2u * FIRST_THREADS);
    qsort(ns, FIRST_THREADS, sizeof ns[0], cmp_u64);
    print_message("first zone of a new thread: median %llu ns, max %llu ns\n",
                  (unsigned long long)ns[FIRST_THREADS / 2],
                  (unsigned long long)ns[FIRST_THREADS - 1]);
    assert_true(ns[FIRST_THREADS / 2] < 5000000u);
    loupe_trace_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        /* first: it forks, and its grandchild should start from a process that never traced */
        cmocka_unit_test_setup_teardown(test_tid_reuse_threads, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_own_malloc_linked, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_own_malloc_instrumented, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_own_malloc_under_record, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_keep_first_last_slot, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_long_dyn_name_cut_counted, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_relative_log_dir, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_first_event_bound_threads, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_stop_races_first_events_threads, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_thread_churn_threads, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_sigprof_zones_threads, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
