/* test_spool.c: the spool of full chunks (loupe_trace_options.spool_dir, src/record/spool.c).
 * A session with a capacity of 8 chunks and a spool records 100 times that many events on 4
 * threads: every event is in the trace, in order, nothing is dropped, and the process's memory
 * grows by less than 16 MiB (the events are 50 MiB). A spool_dir that cannot be created, or a
 * spool file that cannot be opened, fails the start with the exact message; keep-last with a
 * spool is refused. A spool that hits the file-size limit (RLIMIT_FSIZE: EFBIG) keeps the
 * program running: the trace says loupe_spool_error, the chunks stay in memory up to the
 * capacity and the rest is counted as dropped, exactly.
 *
 * The recording threads pace themselves on their own descriptor (white box: record/record.h):
 * after each burst of a quarter chunk, a thread waits until the keeper has spooled every chunk
 * it finished and given it back, so that it never holds more than two chunks and the capacity
 * (8 chunks, 4 threads) is never the limit: the test checks the spool, not a race with the
 * keeper. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "record/record.h"
#include "record/spool.h"

#include <errno.h>
#include <loupe/loupe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK LOUPE_CHUNK_EVENTS
#define CAPACITY_CHUNKS 8u
#define THREADS 4
/* 100 times the capacity, in events, shared by the threads: 2 events a zone */
#define TOTAL_EVENTS (100u * CAPACITY_CHUNKS * CHUNK)
#define ZONES_PER_THREAD (TOTAL_EVENTS / 2u / THREADS)
#define BURST (CHUNK / 8u) /* zones: a quarter chunk */
#define REC_SIZE (sizeof(loupe__spool_rec) + (size_t)CHUNK * 16u)

static long vm_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib;
}

/* Waits until the keeper has spooled every chunk this thread finished (its chain is its
 * current chunk only) and given them back to the pool, or the spool failed. The keeper takes a
 * chunk out of the chain before it gives it back: the pass that did so is over once the keeper's
 * heartbeat (written first in each pass) changes. 0, or -1 after 20 s. */
static int wait_spooled(void) {
    loupe__thread *t = (loupe__thread *)(void *)loupe__tls;
    uint64_t beat = 0;
    int out = 0;
    for (int i = 0; i < 200000; i++) {
        if (t == NULL || loupe__spool_failed()) {
            return 0;
        }
        if (!out && __atomic_load_n(&t->first_chunk, __ATOMIC_ACQUIRE) == t->cur_chunk) {
            out = 1;
            beat = __atomic_load_n(&LOUPE__HDR->rate_mono, __ATOMIC_ACQUIRE);
        }
        if (out && __atomic_load_n(&LOUPE__HDR->rate_mono, __ATOMIC_ACQUIRE) != beat) {
            return 0;
        }
        struct timespec d = {0, 100000};
        nanosleep(&d, NULL);
    }
    return -1;
}

/* Records zones zones, in bursts, each burst followed by wait(): named "spooled", or "spilled"
 * with spilled set. 0, or -1 when a wait timed out. */
static int paced(uint32_t zones, int (*wait)(void), int spilled) {
    for (uint32_t i = 0; i < zones; i += BURST) {
        uint32_t n = zones - i < BURST ? zones - i : BURST;
        for (uint32_t k = 0; k < n; k++) {
            if (spilled) {
                LOUPE_ZONE("spilled");
            } else {
                LOUPE_ZONE("spooled");
            }
        }
        if (wait() != 0) {
            return -1;
        }
    }
    return 0;
}

static int paced_zones(uint32_t zones) {
    return paced(zones, wait_spooled, 0);
}

static long peak_kib;
static int workers_done;

static void *worker(void *arg) {
    (void)arg;
    int r = paced_zones(ZONES_PER_THREAD);
    __atomic_fetch_add(&workers_done, 1, __ATOMIC_RELEASE);
    return (void *)(intptr_t)r;
}

/* Checks that every thread of m with slices has per_thread of them, all named name at depth 0,
 * in order, none overlapping the next; returns how many threads had slices. */
static size_t ordered_zones(const loupe_model *m, const char *name, size_t per_thread) {
    size_t threads = 0;
    for (size_t i = 0; i < m->thread_count; i++) {
        const loupe_model_thread *mt = &m->threads[i];
        if (mt->slice_count == 0) {
            continue;
        }
        threads++;
        assert_int_equal(mt->slice_count, per_thread);
        for (size_t k = 0; k < mt->slice_count; k++) {
            assert_string_equal(mt->slices[k].name, name);
            assert_int_equal(mt->slices[k].depth, 0);
            if (k > 0) {
                assert_true(mt->slices[k].start_ns >=
                            mt->slices[k - 1].start_ns + mt->slices[k - 1].dur_ns);
            }
        }
    }
    return threads;
}

static char *spool_file_of(const char *dir, long pid) {
    char *f = malloc(4200);
    assert_non_null(f);
    int n = snprintf(f, 4200, "%s/loupe-spool-%ld.bin", dir, pid);
    assert_true(n > 0 && n < 4200);
    return f;
}

static void test_spool_keeps_every_event(void **state) {
    (void)state;
    char spool[4200];
    snprintf(spool, sizeof spool, "%s/spool", tu_dir);
    long before = vm_rss_kib();
    assert_true(before > 0);
    loupe_trace_options o = {.log_dir = tu_dir,
                             .run_name = "big",
                             .session_events = CAPACITY_CHUNKS * CHUNK,
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO,
                             .spool_dir = spool};
    assert_int_equal(loupe_start_trace(&o), 0);
    char *file = spool_file_of(spool, (long)getpid());
    struct stat st;
    assert_int_equal(stat(file, &st), 0); /* made at the start */
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, worker, NULL), 0);
    }
    while (__atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < THREADS) {
        long now = vm_rss_kib();
        peak_kib = now > peak_kib ? now : peak_kib;
        struct timespec d = {0, 2000000};
        nanosleep(&d, NULL);
    }
    for (int i = 0; i < THREADS; i++) {
        void *r;
        assert_int_equal(pthread_join(th[i], &r), 0);
        assert_int_equal((intptr_t)r, 0);
    }
    long after = vm_rss_kib();
    peak_kib = after > peak_kib ? after : peak_kib;
    /* every finished chunk went to the file: at most one chunk per thread is in memory */
    uint64_t spooled = loupe__spool_chunks();
    assert_true(spooled >= TOTAL_EVENTS / CHUNK - THREADS);
    assert_true(spooled <= TOTAL_EVENTS / CHUNK);
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal((uint64_t)st.st_size, spooled * REC_SIZE);
    /* RSS: the capacity (512 KiB), the populated chunks ahead of it, descriptors, the keeper's
     * index; without the spool, the 50 MiB of events. */
    fprintf(stderr, "test_spool: VmRSS %ld KiB before, %ld KiB at the peak; %llu chunks spooled\n",
            before, peak_kib, (unsigned long long)spooled);
    assert_true(peak_kib - before < 16 * 1024);

    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(stat(file, &st), -1); /* removed at the stop */
    assert_int_equal(errno, ENOENT);
    for (size_t i = 0; i < r.thread_count; i++) {
        fprintf(stderr, "test_spool: thread %zu: %llu recorded, %llu dropped\n", i,
                (unsigned long long)r.threads[i].events_recorded,
                (unsigned long long)r.threads[i].events_dropped);
    }
    assert_int_equal(r.events_recorded, TOTAL_EVENTS);
    assert_int_equal(r.events_dropped, 0);
    assert_int_equal(r.thread_count, THREADS);
    for (size_t i = 0; i < r.thread_count; i++) {
        assert_int_equal(r.threads[i].events_recorded, 2u * ZONES_PER_THREAD);
        assert_int_equal(r.threads[i].events_dropped, 0);
        assert_int_equal(r.threads[i].capacity_needed, 2u * ZONES_PER_THREAD);
    }
    /* read back: every zone, in order, none overlapping the next on its thread */
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_PROTO));
    assert_int_equal(ordered_zones(m, "spooled", ZONES_PER_THREAD), THREADS);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    free(file);
}

static void test_spool_dir_errors(void **state) {
    (void)state;
    char path[4200], msg[8600];
    /* a spool_dir that cannot be created: a regular file is in the way */
    snprintf(path, sizeof path, "%s/plain", tu_dir);
    tu_write_file(path, "x");
    snprintf(path, sizeof path, "%s/plain/spool", tu_dir);
    loupe_trace_options o = {.log_dir = tu_dir, .spool_dir = path};
    assert_int_equal(loupe_start_trace(&o), LOUPE_EIO);
    snprintf(msg, sizeof msg,
             "loupe_start_trace: spool_dir %s: cannot create %s: Not a directory (errno 20)", path,
             path);
    assert_string_equal(loupe_last_error(), msg);
    /* a spool file that cannot be opened: a directory has its name (EISDIR, root included) */
    snprintf(path, sizeof path, "%s/spool2", tu_dir);
    char *file = spool_file_of(path, (long)getpid());
    assert_int_equal(mkdir(path, 0777), 0);
    assert_int_equal(mkdir(file, 0777), 0);
    o.spool_dir = path;
    assert_int_equal(loupe_start_trace(&o), LOUPE_EIO);
    snprintf(msg, sizeof msg,
             "loupe_start_trace: spool_dir %s: cannot open %s: Is a directory (errno 21)", path,
             file);
    assert_string_equal(loupe_last_error(), msg);
    free(file);
    /* an unwritable spool_dir (root writes anywhere: then only the cases above) */
    if (geteuid() != 0) {
        snprintf(path, sizeof path, "%s/ro", tu_dir);
        assert_int_equal(mkdir(path, 0500), 0);
        o.spool_dir = path;
        assert_int_equal(loupe_start_trace(&o), LOUPE_EIO);
        snprintf(msg, sizeof msg,
                 "loupe_start_trace: spool_dir %s: cannot create %s: Permission denied (errno 13)",
                 path, path);
        assert_string_equal(loupe_last_error(), msg);
    }
    /* keep-last reuses its oldest chunks: no spool */
    o.spool_dir = "";
    o.overflow = LOUPE_OVERFLOW_KEEP_LAST;
    assert_int_equal(loupe_start_trace(&o), LOUPE_EINVALID);
    assert_string_equal(loupe_last_error(),
                        "loupe_start_trace: spool_dir needs the keep-first overflow policy (a "
                        "keep-last session reuses its oldest chunks instead of spooling them)");
    /* after each failure, a start works: "" is log_dir */
    o.overflow = LOUPE_OVERFLOW_KEEP_FIRST;
    o.run_name = "after";
    assert_int_equal(loupe_start_trace(&o), 0);
    file = spool_file_of(tu_dir, (long)getpid());
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(loupe_stop_trace(NULL), 0);
    assert_int_equal(stat(file, &st), -1);
    free(file);
}

/* The child of test_spool_write_error: 0, or the number of the check that failed. */
static int full_disk_child(void) {
    char spool[4200];
    snprintf(spool, sizeof spool, "%s/full", tu_dir);
    loupe_trace_options o = {.log_dir = tu_dir,
                             .run_name = "full",
                             .session_events = CAPACITY_CHUNKS * CHUNK,
                             .formats = LOUPE_FORMAT_CHROME_JSON,
                             .spool_dir = spool};
    if (loupe_start_trace(&o) != 0) {
        return 1;
    }
    /* 10 and a half records fit: the 11th is cut short, and the rest of it fails: EFBIG */
    struct rlimit old, lim;
    if (getrlimit(RLIMIT_FSIZE, &old) != 0) {
        return 2;
    }
    lim = old;
    lim.rlim_cur = 10 * REC_SIZE + REC_SIZE / 2;
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
        return 3;
    }
    /* 40 chunks of zones, on this thread */
    if (paced_zones(40u * CHUNK / 2u) != 0) {
        return 4;
    }
    if (setrlimit(RLIMIT_FSIZE, &old) != 0) { /* the trace itself is written at the stop */
        return 5;
    }
    if (!loupe__spool_failed() || loupe__spool_chunks() != 10) {
        return 6;
    }
    loupe_trace_result r = {.size = sizeof r};
    if (loupe_stop_trace(&r) != 0) {
        return 7;
    }
    /* 10 chunks spooled, then the capacity's 8 in memory: the rest dropped */
    if (r.events_recorded != 18u * CHUNK || r.events_dropped != 40u * CHUNK - 18u * CHUNK) {
        fprintf(stderr, "recorded %llu, dropped %llu\n", (unsigned long long)r.events_recorded,
                (unsigned long long)r.events_dropped);
        return 8;
    }
    loupe_model *m = NULL;
    if (loupe_trace_read(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), &m) != 0) {
        return 9;
    }
    char want[8600];
    snprintf(want, sizeof want,
             "write to %s/loupe-spool-%ld.bin failed after 10 chunks: File too large (errno 27)",
             spool, (long)getpid());
    int found = 0;
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, "loupe_spool_error") == 0) {
            found = strcmp(m->metadata[i].value, want) == 0 ? 1 : -1;
            if (found < 0) {
                fprintf(stderr, "loupe_spool_error: '%s'\n", m->metadata[i].value);
            }
        }
    }
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    return found == 1 ? 0 : 10;
}

static void test_spool_write_error(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        _exit(full_disk_child());
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A spill spool (spool_spill): the chunks stay in memory until half the capacity is used, then
 * the keeper writes the finished ones until a quarter is left. The recording thread waits
 * whenever half is used until the keeper brought it below (or the spool stopped), so the
 * capacity is never the limit. 0, or -1 after 20 s. */
static int wait_below_half(void) {
    loupe__region_hdr *h = LOUPE__HDR;
    for (int i = 0; i < 200000; i++) {
        if (loupe__spool_failed() ||
            __atomic_load_n(&h->chunks_in_use, __ATOMIC_RELAXED) * 2 < CAPACITY_CHUNKS) {
            return 0;
        }
        struct timespec d = {0, 100000};
        nanosleep(&d, NULL);
    }
    return -1;
}

static int paced_below_half(uint32_t zones) {
    return paced(zones, wait_below_half, 1);
}

/* The spill spool: no file while the session fits in memory; past half the capacity, the
 * oldest chunks go to the file: 40 chunks of events in a capacity of 8, nothing dropped, every
 * zone read back in order, the file removed at the stop. */
static void test_spool_spill(void **state) {
    (void)state;
    char spool[4200];
    snprintf(spool, sizeof spool, "%s/spill", tu_dir);
    loupe_trace_options o = {.log_dir = tu_dir,
                             .run_name = "spill",
                             .session_events = CAPACITY_CHUNKS * CHUNK,
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO,
                             .spool_dir = spool,
                             .spool_spill = 1};
    assert_int_equal(loupe_start_trace(&o), 0);
    char *file = spool_file_of(spool, (long)getpid());
    struct stat st;
    /* 2 chunks of events: a quarter of the capacity, which stays in memory */
    for (uint32_t k = 0; k < CHUNK; k++) {
        LOUPE_ZONE("spilled");
    }
    struct timespec d = {0, 30000000}; /* 30 ms: the keeper passes every 1 to 10 ms */
    nanosleep(&d, NULL);
    assert_int_equal(stat(file, &st), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(loupe__spool_chunks(), 0);
    /* 38 chunks more, paced */
    assert_int_equal(paced_below_half(38u * CHUNK / 2u), 0);
    /* the keeper may still be writing down to a quarter: the file's size once it is still */
    uint64_t spooled = 0;
    int still = 0;
    for (int i = 0; i < 2000 && !still; i++) {
        spooled = loupe__spool_chunks();
        assert_int_equal(stat(file, &st), 0);
        still = (uint64_t)st.st_size == spooled * REC_SIZE && loupe__spool_chunks() == spooled;
        if (!still) {
            struct timespec w = {0, 1000000};
            nanosleep(&w, NULL);
        }
    }
    assert_true(still);
    fprintf(stderr, "test_spool: spill: %llu of 40 chunks spooled\n", (unsigned long long)spooled);
    assert_true(spooled >= 40u - CAPACITY_CHUNKS / 2u && spooled < 40u);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(stat(file, &st), -1);
    assert_int_equal(r.events_recorded, 40u * CHUNK);
    assert_int_equal(r.events_dropped, 0);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_PROTO));
    assert_int_equal(ordered_zones(m, "spilled", 20u * CHUNK), 1);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    free(file);
}

/* A spool's disk budget reached mid-run: 3 chunks fit the budget, then the spool stops; the
 * capacity's 8 chunks stay in memory, the rest of 40 is dropped and counted exactly, and the
 * trace names the budget. */
static void test_spool_budget(void **state) {
    (void)state;
    char spool[4200];
    snprintf(spool, sizeof spool, "%s/budget", tu_dir);
    loupe_trace_options o = {.log_dir = tu_dir,
                             .run_name = "budget",
                             .session_events = CAPACITY_CHUNKS * CHUNK,
                             .formats = LOUPE_FORMAT_CHROME_JSON,
                             .spool_dir = spool,
                             .spool_spill = 1,
                             .spool_budget_bytes = 3 * REC_SIZE + REC_SIZE / 2};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(paced_below_half(40u * CHUNK / 2u), 0);
    assert_true(loupe__spool_failed());
    assert_int_equal(loupe__spool_chunks(), 3);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 11u * CHUNK);
    assert_int_equal(r.events_dropped, 29u * CHUNK);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    char want[8600];
    snprintf(want, sizeof want,
             "the spool %s/loupe-spool-%ld.bin reached its budget of %.1f KiB (as given) after 3 "
             "chunks; later events past the session's capacity were dropped",
             spool, (long)getpid(), (double)(3 * REC_SIZE + REC_SIZE / 2) / 1024.0);
    assert_string_equal(tu_meta(m, "loupe_spool_error", "-"), want);
    assert_int_equal(loupe_model_events_dropped(m), 29u * CHUNK);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* Without a per-thread limit by default (keep-first): one thread records more than 0.4's 1 Mi
 * events of default limit, all of them, in a session with room; keep-last keeps its ring. */
static void test_no_thread_limit_by_default(void **state) {
    (void)state;
    loupe_trace_options o = {
        .log_dir = tu_dir, .run_name = "nolimit", .formats = LOUPE_FORMAT_PERFETTO_PROTO};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (uint32_t k = 0; k < 600000; k++) {
        LOUPE_ZONE("many");
    }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 1200000);
    assert_int_equal(r.events_dropped, 0);
    loupe_trace_result_free(&r);
    o.overflow = LOUPE_OVERFLOW_KEEP_LAST;
    o.run_name = "ring";
    assert_int_equal(loupe_start_trace(&o), 0);
    for (uint32_t k = 0; k < 600000; k++) {
        LOUPE_ZONE("many");
    }
    r = (loupe_trace_result){.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_true(r.events_recorded <= LOUPE_DEFAULT_BUFFER_EVENTS);
    assert_true(r.events_recorded >= LOUPE_DEFAULT_BUFFER_EVENTS - CHUNK);
    assert_int_equal(r.events_recorded + r.events_dropped, 1200000);
    loupe_trace_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_spool_keeps_every_event, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_spool_dir_errors, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_spool_write_error, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_spool_spill, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_spool_budget, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_no_thread_limit_by_default, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
