/* test_sample_spool.c: the samples' spool (src/record/sample_spool.c) and its recovery.
 * - The writer and the reader agree: a spool of 10 samples, 3 intervals, a name and the module
 *   map reads back exactly; a cut record, a garbage record and an absurd frame count are each
 *   one skipped record with every other record kept; a header that is not a spool's is refused.
 * - The byte cap drops and counts (exactly), and a write error (ENOSPC, simulated) stops the
 *   spool with the exact reason in its header; the file never holds part of a record.
 * - A forked child that samples into a `loupe record`-style memfd region (LOUPE_RECORD_SHM_FD)
 *   and dies with _exit() is recovered by loupe_recover_trace() with its samples, the hot
 *   function named in >= 80% of them, the clean stop's metadata names, and the spool removed;
 *   the same child with its spool cut in the middle of a record keeps every whole record and
 *   says what it skipped. Skipped (77) where perf events are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "record/sample.h"
#include "record/sample_spool.h"

#include <errno.h>
#include <fcntl.h>
#include <loupe/loupe.h>
#include <loupe/reader.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef LOUPE_HAVE_LIBDW
#define LOUPE_TEST_WITH_LIBDW 1
#else
#define LOUPE_TEST_WITH_LIBDW 0
#endif

static char *spool_file(const char *name) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", tu_dir, name);
    return path;
}

/* A spool of 10 samples (1..10 frames), 3 intervals and one name, plus the module map. */
static void write_spool(const char *path) {
    assert_int_equal(loupe__sspool_open(path, 42, 1000, 999, 1, "999 Hz task-clock, test"), 0);
    loupe__sspool_modules();
    char comm[16] = "worker";
    loupe__sspool_name(7, comm);
    uint64_t pcs[10];
    for (uint32_t i = 0; i < 10; i++) {
        pcs[i] = 0x1000 + i;
        loupe__sspool_sample(2000 + i, 7, 1, pcs, i + 1);
    }
    for (uint64_t i = 0; i < 3; i++) {
        loupe__sspool_off(7, 3000 + i * 10, 3005 + i * 10, 1);
    }
    loupe__sspool_lost(4);
    loupe__sspool_flush();
    loupe__sspool_forget(); /* keeps the file */
}

static unsigned char *read_all(const char *path, size_t *n) {
    char *b = tu_read_file(path, n);
    assert_non_null(b);
    return (unsigned char *)b;
}

/* Byte offset of the k-th record of type type (0-based) in a spool image. */
static size_t record_at(const unsigned char *b, size_t n, uint16_t type, int k) {
    size_t at = LOUPE__SSPOOL_HEADER;
    while (at + 8 <= n) {
        uint16_t t;
        uint32_t size;
        memcpy(&t, b + at + 2, 2);
        memcpy(&size, b + at + 4, 4);
        if (t == type && k-- == 0) {
            return at;
        }
        at += size;
    }
    fail_msg("no record of type %u", type);
    return 0;
}

static void test_round_trip(void **state) {
    (void)state;
    char *path = spool_file("a.samples");
    write_spool(path);
    size_t n;
    unsigned char *b = read_all(path, &n);
    loupe__sspool_read r;
    assert_int_equal(loupe__sspool_parse(b, n, &r), 0);
    assert_int_equal(r.pid, 42);
    assert_int_equal(r.origin_mono, 1000);
    assert_int_equal(r.hz, 999);
    assert_string_equal(r.note, "999 Hz task-clock, test");
    assert_int_equal(r.samples, 10);
    assert_int_equal(r.offs, 3);
    assert_int_equal(r.names, 1);
    assert_int_equal(r.lost, 4);
    assert_int_equal(r.skipped, 0);
    assert_int_equal(r.skipped_bytes, 0);
    assert_int_equal(r.dropped_samples, 0);
    assert_int_equal(r.last_mono, 3025);
    /* the module map has this test program, by its path, with its load address */
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(el > 0);
    exe[el] = 0;
    int found = 0;
    for (size_t i = 0; i < r.nmaps; i++) {
        found += strcmp(r.maps[i].file, exe) == 0 &&
                 (uint64_t)(uintptr_t)&test_round_trip - r.maps[i].start < r.maps[i].len;
    }
    assert_int_equal(found, 1);
    /* the files on disk are the ones mapped: none is dropped */
    size_t nmaps = r.nmaps;
    assert_int_equal(loupe__sspool_keep_same_files(&r), 0);
    assert_int_equal(r.nmaps, nmaps);
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    /* this program's build-id changed by one byte: as if it were rebuilt since, it goes */
    size_t mod = LOUPE__SSPOOL_HEADER;
    for (int k = 0;; k++) {
        mod = record_at(b, n, LOUPE__SSPOOL_MODULE, k);
        uint32_t nbid, np;
        memcpy(&nbid, b + mod + 8 + 24, 4);
        memcpy(&np, b + mod + 8 + 28, 4);
        if (np == (uint32_t)el && memcmp(b + mod + 8 + 32 + nbid, exe, np) == 0) {
            assert_true(nbid > 0);
            break;
        }
    }
    b[mod + 8 + 32] ^= 1;
    assert_int_equal(loupe__sspool_parse(b, n, &r), 0);
    assert_int_equal(loupe__sspool_keep_same_files(&r), LOUPE_TEST_WITH_LIBDW ? 1 : 0);
    assert_int_equal(r.nmaps, LOUPE_TEST_WITH_LIBDW ? nmaps - 1 : nmaps);
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    /* not a spool: nothing read */
    b[0] = 'X';
    assert_int_equal(loupe__sspool_parse(b, n, &r), -1);
    assert_int_equal(loupe__sspool_parse(b, 100, &r), -1);
    loupe__sspool_read_free(&r);
    free(b);
}

static void test_hostile(void **state) {
    (void)state;
    char *path = spool_file("h.samples");
    write_spool(path);
    size_t n;
    unsigned char *b = read_all(path, &n);
    loupe__sspool_read r;
    /* cut in the middle of the last interval (a death mid-write): the two before it stay, and
     * the 20 bytes are the cut record, not an invalid one */
    size_t last = record_at(b, n, LOUPE__SSPOOL_OFF, 2);
    assert_int_equal(loupe__sspool_parse(b, last + 20, &r), 0);
    assert_int_equal(r.samples, 10);
    assert_int_equal(r.offs, 2);
    assert_int_equal(r.skipped, 0);
    assert_int_equal(r.skipped_bytes, 0);
    assert_int_equal(r.cut_bytes, 20);
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    /* garbage over the 4th sample (its 8 + 24 + 32 bytes): the other 9 stay */
    unsigned char *g = malloc(n);
    memcpy(g, b, n);
    size_t s3 = record_at(g, n, LOUPE__SSPOOL_SAMPLE, 3);
    memset(g + s3, 0xa5, 64);
    assert_int_equal(loupe__sspool_parse(g, n, &r), 0);
    assert_int_equal(r.samples, 9);
    assert_int_equal(r.offs, 3);
    assert_int_equal(r.skipped, 1);
    assert_int_equal(r.skipped_bytes, 64);
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    /* an absurd frame count in the 6th sample, its size kept: that record alone goes */
    memcpy(g, b, n);
    size_t s5 = record_at(g, n, LOUPE__SSPOOL_SAMPLE, 5);
    uint32_t absurd = 0x7fffffff;
    memcpy(g + s5 + 8 + 16, &absurd, 4);
    assert_int_equal(loupe__sspool_parse(g, n, &r), 0);
    assert_int_equal(r.samples, 9);
    assert_int_equal(r.skipped, 1);
    assert_int_equal(r.skipped_bytes, 8 + 24 + 6 * 8);
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    /* an interval that ends before it starts */
    memcpy(g, b, n);
    size_t o1 = record_at(g, n, LOUPE__SSPOOL_OFF, 1);
    uint64_t zero = 0;
    memcpy(g + o1 + 8 + 16, &zero, 8);
    assert_int_equal(loupe__sspool_parse(g, n, &r), 0);
    assert_int_equal(r.offs, 2);
    assert_int_equal(r.skipped, 1);
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    free(g);
    free(b);
}

static void test_cap_and_enospc(void **state) {
    (void)state;
    char *path = spool_file("c.samples");
    /* room for the header and three 1-frame samples (40 bytes each) */
    setenv("LOUPE_SAMPLE_SPOOL_MAX_BYTES", "4216", 1);
    assert_int_equal(loupe__sspool_open(path, 1, 0, 99, 1, "n"), 0);
    unsetenv("LOUPE_SAMPLE_SPOOL_MAX_BYTES");
    uint64_t pc = 0x1234;
    for (uint64_t i = 0; i < 10; i++) {
        loupe__sspool_sample(i, 5, 0, &pc, 1);
    }
    loupe__sspool_off(5, 1, 2, 1);
    loupe__sspool_flush();
    assert_int_equal(loupe__sspool_dropped(), 8);
    loupe__sspool_forget();
    size_t n;
    unsigned char *b = read_all(path, &n);
    assert_int_equal(n, 4096 + 3 * 40);
    loupe__sspool_read r;
    assert_int_equal(loupe__sspool_parse(b, n, &r), 0);
    assert_int_equal(r.samples, 3);
    assert_int_equal(r.dropped_samples, 7);
    assert_int_equal(r.dropped_offs, 1);
    assert_string_equal(r.reason, "");
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    free(b);
    /* a full file system after the header and two samples' worth: the batch of five fails
     * (its five are dropped), the spool stops, the file is cut back to its header */
    setenv("LOUPE_TEST_SAMPLE_SPOOL_ENOSPC", "4176", 1);
    assert_int_equal(loupe__sspool_open(path, 1, 0, 99, 1, "n"), 0);
    unsetenv("LOUPE_TEST_SAMPLE_SPOOL_ENOSPC");
    for (uint64_t i = 0; i < 5; i++) {
        loupe__sspool_sample(i, 5, 0, &pc, 1);
    }
    loupe__sspool_flush();
    loupe__sspool_sample(9, 5, 0, &pc, 1);
    loupe__sspool_flush();
    char want[4400];
    snprintf(want, sizeof want,
             "write to %s failed after 4096 bytes: No space left on device (errno 28)", path);
    assert_string_equal(loupe__sspool_reason(), want);
    assert_int_equal(loupe__sspool_dropped(), 6);
    loupe__sspool_forget();
    b = read_all(path, &n);
    assert_int_equal(n, 4096);
    assert_int_equal(loupe__sspool_parse(b, n, &r), 0);
    assert_int_equal(r.samples, 0);
    assert_string_equal(r.reason, want);
    assert_int_equal(r.dropped_samples, 6);
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    free(b);
}

/* ---- a child that dies while it samples, recovered from its memfd region ---- */
__attribute__((noinline)) static double hot_spin(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    volatile double x = 1.0;
    do {
        for (int i = 0; i < 10000; i++) {
            x = x * 1.0000001;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 400000000L);
    return x;
}

/* Forks a child that records into memfd shm (as `loupe record` makes it do), samples 400 ms
 * of CPU in hot_spin() and dies with _exit(3). */
static void run_child(int shm, const char *log) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char num[32];
        snprintf(num, sizeof num, "%d", shm);
        setenv("LOUPE_RECORD_SHM_FD", num, 1);
        snprintf(num, sizeof num, "%ld", (long)getpid());
        setenv("LOUPE_RECORD_SHM_PID", num, 1);
        loupe_trace_options o = {
            .log_dir = log, .sampling_hz = 999, .sampling_stacks = LOUPE_SAMPLING_STACKS_FP};
        if (loupe_start_trace(&o) != 0) {
            _exit(100);
        }
        {
            LOUPE_ZONE("spin");
            hot_spin();
        }
        _exit(3);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 3);
}

static const char *meta(const loupe_model *m, const char *key) {
    return tu_meta(m, key, "(none)");
}

/* Recovers the child's region: its model (read back from the .pftrace) in *out. */
static void recover(int shm, const char *log, const char *name, loupe_model **out) {
    loupe_recover_options ro = {
        .log_dir = log, .run_name = name, .formats = LOUPE_FORMAT_PERFETTO_PROTO};
    loupe_trace_result res = {.size = sizeof res};
    assert_int_equal(loupe_recover_trace(shm, &ro, &res), 0);
    const char *p = loupe_trace_result_path(&res, LOUPE_FORMAT_PERFETTO_PROTO);
    assert_non_null(p);
    assert_int_equal(loupe_trace_read(p, out), 0);
    loupe_trace_result_free(&res);
}

/* The share of samples whose leaf frame is hot_spin (or GCC's clone of it, hot_spin.isra.0),
 * and their count. */
static void hot_share(const loupe_model *m, size_t *samples, size_t *hot) {
    *samples = m->sample_count;
    *hot = 0;
    for (size_t i = 0; i < m->sample_count; i++) {
        uint32_t s = m->samples[i].stack;
        if (s != UINT32_MAX &&
            strncmp(m->frames[m->stack_nodes[s].frame].function, "hot_spin", 8) == 0) {
            (*hot)++;
        }
    }
}

static char *find_spool(const char *log) {
    static char path[4300];
    char cmd[4400], *out = NULL;
    snprintf(cmd, sizeof cmd, "ls %s/loupe-samples-*.bin 2>/dev/null", log);
    (void)tu_run(cmd, &out);
    size_t l = out != NULL ? strcspn(out, "\n") : 0;
    snprintf(path, sizeof path, "%.*s", (int)l, out != NULL ? out : "");
    free(out);
    return path;
}

static void test_death_recovered(void **state) {
    (void)state;
    if (!tu_perf_allowed()) {
        skip();
    }
    char log[4200];
    snprintf(log, sizeof log, "%s/log", tu_dir);
    int shm = memfd_create("loupe-record", MFD_CLOEXEC);
    assert_true(shm >= 0);
    run_child(shm, log);
    char *sp = find_spool(log);
    assert_true(sp[0] != 0);
    loupe_model *m = NULL;
    recover(shm, log, "whole", &m);
    size_t samples, hot;
    hot_share(m, &samples, &hot);
    /* 400 ms of CPU at 999 Hz, less what the rings held at the death (at most 50 ms) */
    assert_true(samples >= 250);
    assert_true(hot * 10 >= samples * 8);
    assert_string_equal(meta(m, "loupe_sampling"), "999 Hz task-clock, frame-pointer stacks");
    assert_string_equal(meta(m, "loupe_sampling_threads_missed"), "0");
    assert_string_equal(meta(m, "loupe_samples_spool_dropped"), "0");
    char want[128];
    size_t offs = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        offs += m->threads[t].off_cpu_count;
    }
    snprintf(want, sizeof want, "%zu samples, %zu off-CPU intervals", samples, offs);
    assert_string_equal(meta(m, "loupe_samples_spool"), want);
    assert_int_equal(m->sample_period_ns, 1001001);
    assert_int_equal(access(sp, F_OK), -1); /* read into the trace: removed */
    loupe_model_free(m);
    close(shm);
}

static void test_death_cut_spool(void **state) {
    (void)state;
    if (!tu_perf_allowed()) {
        skip();
    }
    char log[4200];
    snprintf(log, sizeof log, "%s/log", tu_dir);
    int shm = memfd_create("loupe-record", MFD_CLOEXEC);
    assert_true(shm >= 0);
    run_child(shm, log);
    char *sp = find_spool(log);
    assert_true(sp[0] != 0);
    /* cut 12 bytes into the last sample: every record before it is kept */
    size_t n;
    unsigned char *b = read_all(sp, &n);
    size_t at = LOUPE__SSPOOL_HEADER, last = 0;
    uint64_t before = 0;
    while (at + 8 <= n) {
        uint16_t t;
        uint32_t size;
        memcpy(&t, b + at + 2, 2);
        memcpy(&size, b + at + 4, 4);
        if (t == LOUPE__SSPOOL_SAMPLE) {
            last = at;
            before++;
        }
        at += size;
    }
    free(b);
    assert_true(before >= 250);
    assert_int_equal(truncate(sp, (off_t)(last + 12)), 0);
    loupe_model *m = NULL;
    recover(shm, log, "cut", &m);
    size_t samples, hot;
    hot_share(m, &samples, &hot);
    assert_int_equal(samples, before - 1);
    assert_true(hot * 10 >= samples * 8);
    size_t offs = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        offs += m->threads[t].off_cpu_count;
    }
    char want[200];
    snprintf(want, sizeof want,
             "%zu samples, %zu off-CPU intervals; its last record (12 bytes) was cut by the "
             "program's end",
             samples, offs);
    assert_string_equal(meta(m, "loupe_samples_spool"), want);
    loupe_model_free(m);
    close(shm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_hostile, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_cap_and_enospc, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_death_recovered, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_death_cut_spool, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
