/* test_record_threads.c: the recorder under threads: exact counts from 4 threads x 250k zones,
 * overflow under both policies with exact drop counts and the right events kept, threads that
 * exit before the stop, dynamic names whose buffer is overwritten, unbalanced ends, fork while
 * tracing, concurrent start/stop from 8 threads, and recording threads racing start/stop
 * (the TSan build runs this file). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* Counts occurrences of needle in the (gunzipped) file. */
static size_t count_in_file(const char *path, const char *needle) {
    size_t len;
    char *text = tu_read_file(path, &len);
    size_t n = 0, nl = strlen(needle);
    /* A plain loop: sanitizer runtimes check the whole remaining haystack on every strstr or
     * memmem call, which makes a scan of a 80 MB file quadratic. */
    for (size_t i = 0; i + nl <= len; i++) {
        if (text[i] == needle[0] && memcmp(text + i, needle, nl) == 0) {
            n++;
            i += nl - 1;
        }
    }
    free(text);
    return n;
}

static const loupe_model_thread *thread_by_tid(const loupe_model *m, uint64_t tid) {
    for (size_t i = 0; i < m->thread_count; i++) {
        if (m->threads[i].tid == tid) {
            return &m->threads[i];
        }
    }
    return NULL;
}

enum { ZONES_PER_THREAD = 250000 };

static void *zone_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ZONES_PER_THREAD; i++) {
        LOUPE_ZONE("mt_zone");
    }
    return NULL;
}

static void test_four_threads_exact_counts(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, zone_worker, NULL), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL); /* they exit before the stop: their events stay */
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 4u * 2 * ZONES_PER_THREAD);
    assert_int_equal(r.events_dropped, 0);
    assert_int_equal(r.unmatched_ends, 0);
    assert_int_equal(r.truncated_zones, 0);
    assert_int_equal(r.thread_count, 4);
    for (size_t i = 0; i < r.thread_count; i++) {
        assert_int_equal(r.threads[i].events_recorded, 2 * ZONES_PER_THREAD);
        assert_int_equal(r.threads[i].events_dropped, 0);
        assert_int_equal(r.threads[i].capacity_needed, 2 * ZONES_PER_THREAD);
    }
    assert_int_equal(count_in_file(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON),
                                   "\"name\":\"mt_zone\""),
                     4 * ZONES_PER_THREAD);
    loupe_trace_result_free(&r);
}

/* Keep-first: 100 flat zones into 64 slots. A dynamic zone named "zN" takes 3 events (begin,
 * one 15-byte name slot, end): the first 21 are kept whole (63 events), 79 are dropped
 * (237 events), and the capacity that would have held them all is 300. */
/* The value of metadata key k in m, NULL when absent. */
static const char *meta(const loupe_model *m, const char *k) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, k) == 0) {
            return m->metadata[i].value;
        }
    }
    return NULL;
}

static void test_overflow_keep_first(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .buffer_events = 64};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof name, "z%d", i);
        LOUPE_ZONE_DYN(name);
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.thread_count, 1);
    assert_int_equal(r.events_recorded, 63);
    assert_int_equal(r.events_dropped, 237);
    assert_int_equal(r.threads[0].capacity_needed, 300);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_null(meta(m, "loupe_overflow")); /* keep-first: the default, not written */
    assert_int_equal(m->threads[0].slice_count, 21);
    for (size_t i = 0; i < 21; i++) {
        char name[16];
        snprintf(name, sizeof name, "z%zu", i);
        assert_string_equal(m->threads[0].slices[i].name, name);
        assert_int_equal(m->threads[0].slices[i].flags & LOUPE_SLICE_TRUNCATED, 0);
    }
    assert_int_equal(m->threads[0].events_dropped, 237); /* the loss is in the file too */
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* Keep-first keeps room for the ends of open zones: the outer zone stays whole. */
static void test_overflow_keep_first_nested(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .buffer_events = 64};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE("outer");
        for (int i = 0; i < 100; i++) {
            LOUPE_ZONE("inner");
        }
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 64);
    assert_int_equal(r.events_dropped, 138);
    assert_int_equal(r.truncated_zones, 0);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    const loupe_model_thread *t = &m->threads[0];
    assert_int_equal(t->slice_count, 32);
    assert_string_equal(t->slices[0].name, "outer");
    assert_int_equal(t->slices[0].depth, 0);
    assert_int_equal(t->slices[0].flags & LOUPE_SLICE_TRUNCATED, 0);
    for (size_t i = 1; i < t->slice_count; i++) {
        assert_string_equal(t->slices[i].name, "inner");
        assert_int_equal(t->slices[i].depth, 1);
    }
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* Keep-last: a ring of 64 slots keeps the newest events. 100 zones with an argument (3 events
 * each: the argument is one slot) leave the end of zone 78 (a truncated slice from the first
 * kept event, without its argument) and zones 79..99 whole; 100 dynamic ones (3 events, the
 * 2-slot head never straddling the wrap) leave a contiguous tail ending at the last. */
static void test_overflow_keep_last(void **state) {
    (void)state;
    loupe_trace_options o = {
        .log_dir = tu_dir, .buffer_events = 64, .overflow = LOUPE_OVERFLOW_KEEP_LAST};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int i = 0; i < 100; i++) {
        LOUPE_ZONE("s");
        LOUPE_ARG_I64("i", i); /* 1 more event: 3 per zone */
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 64);
    assert_int_equal(r.events_dropped, 236);
    assert_int_equal(r.threads[0].capacity_needed, 300);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    /* the policy reaches the file: loupe summary says the earlier zones are the missing ones */
    assert_string_equal(meta(m, "loupe_overflow"), "keep-last");
    /* the main thread, never named by the program, has its comm as the other threads do */
    char comm[64] = "";
    FILE *f = fopen("/proc/self/comm", "r");
    assert_non_null(f);
    assert_non_null(fgets(comm, sizeof comm, f));
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    assert_string_equal(comm, "test_record_thr"); /* TASK_COMM_LEN: 15 bytes */
    assert_string_equal(m->threads[0].name, comm);
    assert_int_equal(m->threads[0].slice_count, 22);
    /* the cut zone 78 starts at the first kept event, its own end; zone 79 may begin in the same
     * ns (the two events 1 ns apart or less), and then sorts first, being longer (1 run in 15
     * under load): the truncated slice is the one at the earliest start, without its argument */
    const loupe_model_thread *th = &m->threads[0];
    size_t cut = SIZE_MAX, zone = 79;
    for (size_t i = 0; i < 22; i++) {
        if (th->slices[i].flags & LOUPE_SLICE_TRUNCATED) {
            assert_int_equal(cut, SIZE_MAX); /* one only */
            cut = i;
            assert_int_equal(th->slices[i].start_ns, th->slices[0].start_ns);
            assert_int_equal(tu_nargs(th, i), 0);
            continue;
        }
        assert_int_equal(tu_nargs(th, i), 1);
        assert_int_equal(tu_args(th, i)[0].v.i, (int64_t)zone++);
    }
    assert_true(cut <= 1);
    assert_int_equal(zone, 100);
    loupe_model_free(m);

    assert_int_equal(loupe_start_trace(&o), 0);
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof name, "z%d", i);
        LOUPE_ZONE_DYN(name);
    }
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 64);
    assert_int_equal(r.events_recorded + r.events_dropped, r.threads[0].capacity_needed);
    m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    size_t k = m->threads[0].slice_count;
    assert_true(k >= 20 && k <= 21);
    for (size_t i = 0; i < k; i++) {
        char name[16];
        snprintf(name, sizeof name, "z%zu", 100 - k + i);
        assert_string_equal(m->threads[0].slices[i].name, name);
    }
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* An argument is one slot (1 event), a string argument one more per 15 bytes, every type read
 * back with its value; in a full buffer of 64 slots a zone keeps 62 arguments (its begin and the
 * slot kept for its end take the other two) and each one dropped counts 1 event. Under
 * LOUPE_CLOCK=monotonic (the _monotonic test) every argument takes the slow path, which writes
 * the same slot. */
static void test_argument_slots(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE("args");
        LOUPE_ARG_I64("i", -5);
        LOUPE_ARG_U64("u", 7);
        LOUPE_ARG_F64("f", 2.5);
        LOUPE_ARG_BOOL("b", 1);
        LOUPE_ARG_STR("s", "sixteen bytes..."); /* 16 bytes: 2 slots after its own */
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 2 + 4 + 3);
    assert_int_equal(r.events_dropped, 0);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_int_equal(m->threads[0].slice_count, 1);
    size_t sl_nargs;
    const loupe_arg *sl_args = loupe_slice_args(&m->threads[0], 0, &sl_nargs);
    assert_int_equal(sl_nargs, 5);
    assert_string_equal(sl_args[0].key, "i");
    assert_int_equal(sl_args[0].v.i, -5);
    assert_string_equal(sl_args[1].key, "u");
    assert_int_equal(sl_args[1].v.i, 7);
    assert_string_equal(sl_args[2].key, "f");
    assert_true(sl_args[2].v.d == 2.5);
    assert_string_equal(sl_args[3].key, "b");
    assert_int_equal(sl_args[3].v.b, 1);
    assert_string_equal(sl_args[4].key, "s");
    assert_string_equal(sl_args[4].v.s, "sixteen bytes...");
    loupe_model_free(m);
    loupe_trace_result_free(&r);

    o.buffer_events = 64;
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE("full");
        for (int i = 0; i < 70; i++) {
            LOUPE_ARG_I64("n", i);
        }
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 64);
    assert_int_equal(r.events_dropped, 8);
    assert_int_equal(r.threads[0].capacity_needed, 72);
    m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_int_equal(tu_nargs(&m->threads[0], 0), 62);
    assert_int_equal(tu_args(&m->threads[0], 0)[61].v.i, 61);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* Keep-last with an outer zone whose begin is overwritten: its end still gives a slice, from
 * the first kept event, marked truncated. An argument is one slot: it never straddles the wrap. */
static void test_overflow_keep_last_lost_begin(void **state) {
    (void)state;
    loupe_trace_options o = {
        .log_dir = tu_dir, .buffer_events = 64, .overflow = LOUPE_OVERFLOW_KEEP_LAST};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE("outer");
        for (int i = 0; i < 50; i++) {
            LOUPE_ZONE("inner");
            LOUPE_ARG_I64("i", i);
        }
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_dropped + r.events_recorded, 2 + 50 * 3); /* an argument: 1 slot */
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    const loupe_model_thread *t = &m->threads[0];
    assert_string_equal(t->slices[0].name, "outer");
    assert_true(t->slices[0].flags & LOUPE_SLICE_TRUNCATED);
    size_t inner = 0;
    for (size_t i = 1; i < t->slice_count; i++) {
        assert_string_equal(t->slices[i].name, "inner");
        if (tu_nargs(t, i) == 1) {
            assert_int_equal(tu_args(t, i)[0].v.i, (int64_t)(50 - t->slice_count + i));
            inner++;
        }
    }
    assert_true(inner >= 14);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

static void test_dynamic_name_is_copied(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    char buf[64];
    {
        snprintf(buf, sizeof buf, "request-%d", 42);
        LOUPE_ZONE_DYN(buf);
        memset(buf, 'X', sizeof buf - 1); /* overwritten right after the call */
        buf[sizeof buf - 1] = 0;
        loupe_zone_ctx z = loupe_zone_begin_dyn(buf, LOUPE_LEVEL_INFO);
        strcpy(buf, "garbage");
        loupe_zone_end_dyn(z);
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_int_equal(m->threads[0].slice_count, 2);
    assert_string_equal(m->threads[0].slices[0].name, "request-42");
    assert_int_equal(strlen(m->threads[0].slices[1].name), 63);
    assert_int_equal(m->threads[0].slices[1].name[0], 'X');
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

/* Every name length from 0 to 135 bytes (the inline copy takes up to 120, in 15-byte pieces
 * with a partial last one; longer names take the slow path), each name ending right before a
 * page that cannot be read: the copy reads nothing past the name, and every byte arrives. */
static void test_dynamic_name_lengths(void **state) {
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    char *map =
        mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    char *end = map + page - 1; /* each name's terminating 0 is the page's last byte */
    *end = 0;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    enum { MAXLEN = 135 };
    for (int len = 0; len <= MAXLEN; len++) {
        char *name = end - len;
        for (int i = 0; i < len; i++) {
            name[i] = (char)('!' + (len * 7 + i) % 90); /* distinct bytes per position */
        }
        LOUPE_ZONE_DYN(name);
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    /* per zone: a begin, a slot per 15 bytes of its name, an end */
    uint64_t events = 0;
    for (int len = 0; len <= MAXLEN; len++) {
        events += 2 + (uint64_t)(len + 14) / 15;
    }
    assert_int_equal(r.events_recorded, events);
    assert_int_equal(r.events_dropped, 0);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_int_equal(m->threads[0].slice_count, MAXLEN + 1);
    /* test_record_threads_monotonic (tests/CMakeLists.txt): every event took the slow path */
    const char *clk = getenv("LOUPE_CLOCK");
    if (clk != NULL && strcmp(clk, "monotonic") == 0) {
        assert_string_equal(m->clock, "monotonic");
    }
    for (int len = 0; len <= MAXLEN; len++) {
        char want[MAXLEN + 1];
        for (int i = 0; i < len; i++) {
            want[i] = (char)('!' + (len * 7 + i) % 90);
        }
        want[len] = 0;
        assert_string_equal(m->threads[0].slices[len].name, want);
    }
    loupe_model_free(m);
    loupe_trace_result_free(&r);
    munmap(map, (size_t)page * 2);
}

static const loupe_srcloc sl_a = {"A", "f", "file.c", 1, LOUPE_LEVEL_INFO};
static const loupe_srcloc sl_b = {"B", "f", "file.c", 2, LOUPE_LEVEL_INFO};
static const loupe_srcloc sl_c = {"C", "f", "file.c", 3, LOUPE_LEVEL_INFO};

static void test_unbalanced_ends(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    loupe_zone_end(&sl_c); /* an end without a begin */
    loupe_zone_begin(&sl_a);
    loupe_zone_begin(&sl_b);
    loupe_zone_end(&sl_a); /* B's end is missing (an early return): B is closed here */
    loupe_zone_begin(&sl_c);
    loupe_zone_end(&sl_c);
    loupe_zone_end(&sl_b);   /* B was already closed: unmatched */
    loupe_zone_begin(&sl_a); /* still open at the stop */
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.unmatched_ends, 2);
    assert_int_equal(r.truncated_zones, 2);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    const loupe_model_thread *t = &m->threads[0];
    assert_int_equal(t->slice_count, 4);
    assert_string_equal(t->slices[0].name, "A");
    assert_int_equal(t->slices[0].flags & LOUPE_SLICE_TRUNCATED, 0);
    assert_string_equal(t->slices[1].name, "B");
    assert_int_equal(t->slices[1].depth, 1);
    assert_true(t->slices[1].flags & LOUPE_SLICE_TRUNCATED);
    assert_int_equal(t->slices[1].start_ns + t->slices[1].dur_ns,
                     t->slices[0].start_ns + t->slices[0].dur_ns);
    assert_string_equal(t->slices[2].name, "C");
    assert_int_equal(t->slices[2].depth, 0); /* nesting of the others is intact */
    assert_string_equal(t->slices[3].name, "A");
    assert_true(t->slices[3].flags & LOUPE_SLICE_TRUNCATED);
    assert_int_equal(t->slices[3].start_ns + t->slices[3].dur_ns, m->duration_ns);
    loupe_model_free(m);
    loupe_trace_result_free(&r);
}

static void test_fork_while_tracing(void **state) {
    (void)state;
#if defined(__SANITIZE_THREAD__)
    skip(); /* TSan's runtime in the fork child of a threaded parent reports reused thread ids
             * ("dup thread with used id") once the child starts a thread, and exits 66 */
#endif
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE("parent_before"); }
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        if (loupe_is_tracing()) {
            bad |= 1;
        }
        { LOUPE_ZONE("child_zone"); /* not recorded anywhere */ }
        if (loupe_stop_trace(NULL) != LOUPE_ENOT_STARTED) {
            bad |= 2;
        }
        char cdir[4200];
        snprintf(cdir, sizeof cdir, "%s/child", tu_dir);
        loupe_trace_options co = {.log_dir = cdir};
        loupe_trace_result cr = {.size = sizeof cr};
        if (loupe_start_trace(&co) != 0) {
            bad |= 4;
        }
        { LOUPE_ZONE("child_own"); }
        if (loupe_stop_trace(&cr) != 0 || cr.events_recorded != 2) {
            bad |= 8;
        }
        loupe_trace_result_free(&cr);
        _exit(bad);
    }
    { LOUPE_ZONE("parent_after"); }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 4);
    assert_int_equal(
        count_in_file(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), "child_zone"), 0);
    assert_int_equal(
        count_in_file(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), "\"parent_after\""),
        1);
    loupe_trace_result_free(&r);
}

/* ---- concurrency ---- */

static int ok_starts[8], ok_stops[8];

static void *start_stop_worker(void *arg) {
    int id = (int)(intptr_t)arg;
    loupe_trace_options o = {.log_dir = tu_dir, .buffer_events = 4096};
    for (int i = 0; i < 40; i++) {
        if (loupe_start_trace(&o) == 0) {
            ok_starts[id]++;
        }
        { LOUPE_ZONE("racing"); }
        int rc = loupe_stop_trace(NULL);
        if (rc == 0) {
            ok_stops[id]++;
        } else if (rc != LOUPE_ENOT_STARTED) {
            fail_msg("stop: %s: %s", loupe_strerror(rc), loupe_last_error());
        }
    }
    return NULL;
}

static void test_concurrent_start_stop_8_threads(void **state) {
    (void)state;
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, start_stop_worker, (void *)(intptr_t)i), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
    }
    int starts = 0, stops = 0;
    for (int i = 0; i < 8; i++) {
        starts += ok_starts[i];
        stops += ok_stops[i];
    }
    int final_stop = loupe_is_tracing();
    assert_int_equal(loupe_stop_trace_if_active(NULL), 0);
    assert_true(starts > 0);
    assert_int_equal(starts, stops + final_stop); /* every session ended exactly once */
    /* never stuck */
    loupe_trace_options o = {.log_dir = tu_dir};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe_stop_trace(NULL), 0);
}

static volatile int stop_recording;

static void *busy_recorder(void *arg) {
    (void)arg;
    uint64_t i = 0;
    while (!__atomic_load_n(&stop_recording, __ATOMIC_RELAXED)) {
        LOUPE_ZONE("busy");
        LOUPE_ARG_U64("i", i);
        char name[24];
        snprintf(name, sizeof name, "dyn%llu", (unsigned long long)(i % 7));
        LOUPE_ZONE_DYN(name);
        LOUPE_COUNTER_I64("i", (int64_t)i);
        i++;
    }
    return NULL;
}

/* Threads record without pause while sessions start and stop under them (both policies,
 * small buffers so that rings wrap while being collected). Each session's counts must add up. */
static void test_recording_races_start_stop(void **state) {
    (void)state;
    stop_recording = 0;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, busy_recorder, NULL), 0);
    }
    for (int i = 0; i < 30; i++) {
        loupe_trace_options o = {.log_dir = tu_dir,
                                 .buffer_events = i % 3 == 0 ? 256 : 65536,
                                 .overflow =
                                     i % 2 ? LOUPE_OVERFLOW_KEEP_LAST : LOUPE_OVERFLOW_KEEP_FIRST};
        loupe_trace_result r = {.size = sizeof r};
        assert_int_equal(loupe_start_trace(&o), 0);
        usleep(2000);
        assert_int_equal(loupe_stop_trace(&r), 0);
        for (size_t t = 0; t < r.thread_count; t++) {
            assert_true(r.threads[t].events_recorded <= (i % 3 == 0 ? 256u : 65536u));
            assert_true(r.threads[t].capacity_needed >= r.threads[t].events_recorded);
        }
        loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
        for (size_t t = 0; t < m->thread_count; t++) {
            const loupe_model_thread *mt = &m->threads[t];
            for (size_t k = 0; k < mt->slice_count; k++) { /* well-formed: inside the trace */
                assert_true(mt->slices[k].start_ns + mt->slices[k].dur_ns <= m->duration_ns);
            }
        }
        loupe_model_free(m);
        loupe_trace_result_free(&r);
    }
    __atomic_store_n(&stop_recording, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
    }
}

int main(void) {
    (void)thread_by_tid;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_four_threads_exact_counts, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_overflow_keep_first, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_overflow_keep_first_nested, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_overflow_keep_last, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_argument_slots, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_overflow_keep_last_lost_begin, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_dynamic_name_is_copied, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_dynamic_name_lengths, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_unbalanced_ends, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_fork_while_tracing, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_start_stop_8_threads, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_recording_races_start_stop, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
