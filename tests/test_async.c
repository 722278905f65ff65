/* test_async.c: async slices (annotate.h: loupe_async_begin / _begin_dyn / _end), begun on one
 * thread and ended on another by id, joined by the collector onto process-level async tracks
 * (one per name): exact order and durations across threads, 1000 overlapping slices of one name
 * in lanes, ends without a begin counted as unmatched, begins never ended truncated at the stop,
 * and nothing recorded while not tracing. The model checked is the collector's (the one the
 * session keeps), before any writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "session/session.h"

#include <loupe/loupe.h>
#include <loupe/writer.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const loupe_model_thread *async_track(const loupe_model *m, const char *name) {
    for (size_t t = 0; t < m->thread_count; t++) {
        if (m->threads[t].kind == LOUPE_TRACK_ASYNC && strcmp(m->threads[t].name, name) == 0) {
            return &m->threads[t];
        }
    }
    fail_msg("no async track '%s'", name);
    return NULL;
}

static size_t async_tracks(const loupe_model *m) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].kind == LOUPE_TRACK_ASYNC;
    }
    return n;
}

static void sleep_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void start(void) {
    loupe_trace_options o = {.log_dir = tu_dir};
    assert_int_equal(loupe_start_trace(&o), 0);
}

/* Thread B ends what thread A began, after A signalled it. */
typedef struct handoff {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int begun;
} handoff;

static void *ender(void *arg) {
    handoff *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->begun) {
        pthread_cond_wait(&h->cv, &h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    sleep_us(2000);
    LOUPE_ASYNC_END(7);
    LOUPE_ASYNC_END(8);
    return NULL;
}

static void test_cross_thread(void **state) {
    (void)state;
    start();
    handoff h = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t b;
    assert_int_equal(pthread_create(&b, NULL, ender, &h), 0);
    LOUPE_ZONE("main work");
    LOUPE_ASYNC_BEGIN("request", 7);
    char name[32];
    snprintf(name, sizeof name, "transfer %d", 3);
    LOUPE_ASYNC_BEGIN_DYN(name, 8);
    name[0] = 'X'; /* copied at the call */
    pthread_mutex_lock(&h.mu);
    h.begun = 1;
    pthread_cond_signal(&h.cv);
    pthread_mutex_unlock(&h.mu);
    assert_int_equal(pthread_join(b, NULL), 0);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.unmatched_ends, 0);
    assert_int_equal(r.truncated_zones, 1); /* "main work", still open at the stop */
    const loupe_model *m = loupe__kept_model();
    assert_non_null(m);
    assert_int_equal(async_tracks(m), 2);
    const loupe_model_thread *req = async_track(m, "request");
    const loupe_model_thread *xfer = async_track(m, "transfer 3");
    assert_int_equal(req->slice_count, 1);
    assert_int_equal(xfer->slice_count, 1);
    assert_int_equal(req->process, 0);
    assert_true(req->tid != xfer->tid);
    const loupe_slice *s7 = &req->slices[0], *s8 = &xfer->slices[0];
    assert_string_equal(s7->name, "request");
    assert_string_equal(s8->name, "transfer 3");
    assert_int_equal(s7->flags & LOUPE_SLICE_TRUNCATED, 0);
    assert_int_equal(s8->flags & LOUPE_SLICE_TRUNCATED, 0);
    assert_int_equal(s7->depth, 0);
    /* begun on this thread in this order, ended on B at least 2 ms after the handoff, in the
     * same order */
    assert_true(s7->start_ns <= s8->start_ns);
    assert_true(s7->start_ns + s7->dur_ns <= s8->start_ns + s8->dur_ns);
    assert_true(s7->dur_ns >= 2000000);
    assert_true(s8->dur_ns >= 2000000);
    assert_true(s8->start_ns + s8->dur_ns <= m->duration_ns);
    loupe_trace_result_free(&r);
}

/* 1000 slices of one name that all overlap: begun 0..999, ended in reverse, by id. */
static void test_thousand_overlapping(void **state) {
    (void)state;
    start();
    for (uint64_t i = 0; i < 1000; i++) {
        LOUPE_ASYNC_BEGIN("op", 1000 + i);
    }
    for (uint64_t i = 1000; i-- > 0;) {
        if (i % 2 == 0) {
            LOUPE_ASYNC_END(1000 + i);
        }
    }
    for (uint64_t i = 1000; i-- > 0;) {
        if (i % 2 == 1) {
            LOUPE_ASYNC_END(1000 + i);
        }
    }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.unmatched_ends, 0);
    assert_int_equal(r.truncated_zones, 0);
    const loupe_model *m = loupe__kept_model();
    assert_int_equal(async_tracks(m), 1);
    const loupe_model_thread *op = async_track(m, "op");
    assert_int_equal(op->slice_count, 1000);
    /* each begins before the next; all overlap (every end comes after every begin): lanes
     * 0..999 in start order */
    uint64_t last_begin = op->slices[999].start_ns;
    for (size_t i = 0; i < 1000; i++) {
        const loupe_slice *s = &op->slices[i];
        assert_string_equal(s->name, "op");
        assert_int_equal(s->depth, i);
        assert_true(s->start_ns + s->dur_ns >= last_begin);
        if (i > 0) {
            assert_true(s->start_ns >= op->slices[i - 1].start_ns);
        }
    }
    loupe_trace_result_free(&r);
}

/* Overlapping slices of one track in Chrome JSON: op 1 and op 3 on lane 0, op 2 (overlapping
 * both) on lane 1 under its own id, so that a viewer pairing b / e per id, last in first out,
 * pairs each with its own; the reader puts the lanes back into the one track, exactly. */
static void test_lanes_in_chrome_json(void **state) {
    (void)state;
    start();
    LOUPE_ASYNC_BEGIN("op", 1);
    sleep_us(100);
    LOUPE_ASYNC_BEGIN("op", 2);
    sleep_us(100);
    LOUPE_ASYNC_END(1);
    sleep_us(100);
    LOUPE_ASYNC_BEGIN("op", 3);
    sleep_us(100);
    LOUPE_ASYNC_END(2);
    sleep_us(100);
    LOUPE_ASYNC_END(3);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    const loupe_model *m = loupe__kept_model();
    const loupe_model_thread *op = async_track(m, "op");
    assert_int_equal(op->slice_count, 3);
    assert_int_equal(op->slices[0].depth, 0);
    assert_int_equal(op->slices[1].depth, 1);
    assert_int_equal(op->slices[2].depth, 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/lanes.json", tu_dir);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_CHROME_JSON), 0);

    /* the ids: lane 0 the track's, lane 1 the track's with 1 in bits 48..63 */
    char id0[32], id1[32];
    snprintf(id0, sizeof id0, "0x%llx", (unsigned long long)op->tid);
    snprintf(id1, sizeof id1, "0x%llx", (unsigned long long)(op->tid | (uint64_t)1 << 48));
    json_t *j = tu_load_json(path);
    const json_t *evs = json_object_get(j, "traceEvents");
    size_t nb = 0, nlane1 = 0;
    for (size_t i = 0; i < json_array_size(evs); i++) {
        const json_t *e = json_array_get(evs, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (ph == NULL || (strcmp(ph, "b") != 0 && strcmp(ph, "e") != 0)) {
            continue;
        }
        size_t k = nb++ / 2; /* the slice: b and e in slice order */
        const char *id = json_string_value(json_object_get(e, "id"));
        const char *tid = json_string_value(json_object_get(e, "loupe_track_id"));
        assert_string_equal(id, k == 1 ? id1 : id0);
        if (k == 1) {
            assert_string_equal(tid, id0);
            nlane1++;
        } else {
            assert_null(tid);
        }
    }
    assert_int_equal(nb, 6);
    assert_int_equal(nlane1, 2);
    json_decref(j);

    loupe_model *back = tu_read_back(path);
    assert_int_equal(async_tracks(back), 1);
    const loupe_model_thread *bop = async_track(back, "op");
    assert_int_equal(bop->slice_count, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(bop->slices[i].start_ns, op->slices[i].start_ns);
        assert_int_equal(bop->slices[i].dur_ns, op->slices[i].dur_ns);
        assert_int_equal(bop->slices[i].depth, op->slices[i].depth);
        assert_string_equal(bop->slices[i].name, "op");
    }
    loupe_model_free(back);
    loupe_trace_result_free(&r);
}

/* An end without a begin, an end of an id already ended, and a begin never ended. */
static void test_unmatched(void **state) {
    (void)state;
    start();
    LOUPE_ASYNC_END(1); /* never begun */
    LOUPE_ASYNC_BEGIN("a", 2);
    LOUPE_ASYNC_END(2);
    LOUPE_ASYNC_END(2); /* already ended */
    LOUPE_ASYNC_BEGIN("open", 3);
    LOUPE_ASYNC_BEGIN("a", 4); /* same id twice: nested, the later ends first */
    LOUPE_ASYNC_BEGIN("b", 4);
    LOUPE_ASYNC_END(4);
    sleep_us(1000);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.unmatched_ends, 2);
    assert_int_equal(r.truncated_zones, 2); /* "open" and the outer id 4 ("a") */
    const loupe_model *m = loupe__kept_model();
    assert_int_equal(m->unmatched_ends, 2);
    assert_int_equal(async_tracks(m), 3);
    const loupe_model_thread *a = async_track(m, "a");
    const loupe_model_thread *b = async_track(m, "b");
    const loupe_model_thread *o = async_track(m, "open");
    assert_int_equal(a->slice_count, 2);
    assert_int_equal(a->slices[0].flags & LOUPE_SLICE_TRUNCATED, 0);
    assert_int_equal(a->slices[1].flags & LOUPE_SLICE_TRUNCATED, LOUPE_SLICE_TRUNCATED);
    assert_int_equal(a->slices[1].start_ns + a->slices[1].dur_ns, m->duration_ns);
    assert_int_equal(b->slice_count, 1);
    assert_int_equal(b->slices[0].flags & LOUPE_SLICE_TRUNCATED, 0);
    assert_int_equal(o->slice_count, 1);
    assert_int_equal(o->slices[0].flags, LOUPE_SLICE_TRUNCATED);
    assert_int_equal(o->slices[0].start_ns + o->slices[0].dur_ns, m->duration_ns);
    assert_true(o->slices[0].dur_ns >= 1000000);
    loupe_trace_result_free(&r);
}

/* Not tracing: nothing is recorded, and an end after the next start has no begin. */
static void test_not_tracing(void **state) {
    (void)state;
    LOUPE_ASYNC_BEGIN("before", 5);
    start();
    LOUPE_ASYNC_END(5);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.unmatched_ends, 1);
    assert_int_equal(async_tracks(loupe__kept_model()), 0);
    loupe_trace_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cross_thread, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_thousand_overlapping, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_unmatched, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_lanes_in_chrome_json, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_not_tracing, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
