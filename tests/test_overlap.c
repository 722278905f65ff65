/* test_overlap.c: slices that overlap partially on one track are split onto sibling tracks by the
 * model builder (model.h: sibling, sibling_of), so that every writer writes proper nesting: the
 * CUDA case (k1 [1000, 2000] ns and k2 [1500, 3000] ns on one stream, programmatic dependent
 * launch) through the builder, flows kept on the right slices, and read back from every writer
 * (.json, .xplane.pb, .pftrace) with both kernels whole; foreign Chrome "X" events read from a
 * file; nested slices that stay where they are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include "model/builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static size_t add_slice(loupe__mb *mb, size_t t, const char *name, uint64_t start, uint64_t dur) {
    size_t s = loupe__mb_slice(mb, t);
    loupe_slice *sl = loupe__mb_slice_at(mb, t, s);
    sl->name = loupe__mb_str(mb, name);
    sl->start_ns = start;
    sl->dur_ns = dur;
    return s;
}

/* The track named name of kind kind (any kind when kind is -1); fails the test when there is
 * none. */
static const loupe_model_thread *track(const loupe_model *m, const char *name, int kind,
                                       size_t *index) {
    for (size_t t = 0; t < m->thread_count; t++) {
        if ((kind < 0 || (int)m->threads[t].kind == kind) &&
            strcmp(m->threads[t].name, name) == 0) {
            if (index != NULL) {
                *index = t;
            }
            return &m->threads[t];
        }
    }
    fail_msg("no track named '%s'", name);
    return NULL;
}

/* Every THREAD / GPU track nests properly: a slice ends no later than the open one it is in. */
static void assert_nesting(const loupe_model *m) {
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->kind == LOUPE_TRACK_ASYNC) {
            continue;
        }
        uint64_t ends[64];
        size_t top = 0;
        for (size_t i = 0; i < th->slice_count; i++) {
            const loupe_slice *s = &th->slices[i];
            while (top > 0 && ends[top - 1] <= s->start_ns && s->dur_ns > 0) {
                top--;
            }
            if (top > 0) {
                assert_true(s->start_ns + s->dur_ns <= ends[top - 1]);
            }
            assert_true(top < 64);
            ends[top++] = s->start_ns + s->dur_ns;
        }
    }
}

/* The k1/k2 model: a host thread whose "launch" zone has a flow to k2, and stream 7 of GPU 0. */
static loupe_model *kernels_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe__mb_model(mb)->pid = 4242;
    loupe__mb_model(mb)->duration_ns = 4000;
    size_t host = loupe__mb_thread(mb, 4242);
    loupe__mb_thread_name(mb, host, "main");
    size_t launch = add_slice(mb, host, "launch", 100, 200);
    size_t g = loupe__mb_thread_add(mb, 7);
    loupe__mb_thread_at(mb, g)->kind = LOUPE_TRACK_GPU;
    loupe__mb_thread_name(mb, g, "stream 7");
    /* appended out of order: k2 first, so the sort's permutation matters for the flow */
    size_t k2 = add_slice(mb, g, "k2", 1500, 1500);
    (void)add_slice(mb, g, "k1", 1000, 1000);
    assert_int_equal(loupe__mb_flow(mb, 9, host, launch, g, k2), 0);
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    return m;
}

/* kind: the kind the stream's tracks have (-1: whatever it is, the same for both). */
static void check_kernels(const loupe_model *m, int from_builder, int kind) {
    size_t gi, si;
    const loupe_model_thread *g = track(m, "stream 7", kind, &gi);
    const loupe_model_thread *s = track(m, "stream 7 (overlap 1)", kind, &si);
    assert_int_equal(g->slice_count, 1);
    assert_string_equal(g->slices[0].name, "k1");
    assert_int_equal(g->slices[0].start_ns, 1000);
    assert_int_equal(g->slices[0].dur_ns, 1000);
    assert_int_equal(g->slices[0].depth, 0);
    assert_int_equal(g->sibling, 0);
    assert_int_equal(s->slice_count, 1);
    assert_string_equal(s->slices[0].name, "k2");
    assert_int_equal(s->slices[0].start_ns, 1500);
    assert_int_equal(s->slices[0].dur_ns, 1500);
    assert_int_equal(s->slices[0].depth, 0);
    assert_int_equal(s->sibling, 1);
    assert_int_equal(s->sibling_of, gi);
    assert_int_equal(s->kind, g->kind);
    assert_int_equal(s->device, g->device);
    assert_int_equal(s->process, g->process);
    assert_true(s->tid != g->tid);
    if (from_builder) {
        assert_int_equal(m->thread_count, 3);
        assert_int_equal(s->tid, 4243); /* the largest tid + 1 */
    }
    /* the flow still ends at k2, now on the sibling */
    assert_int_equal(m->flow_count, 1);
    const loupe_model_thread *h = track(m, "main", LOUPE_TRACK_THREAD, NULL);
    assert_string_equal(h->slices[m->flows[0].from_slice].name, "launch");
    assert_int_equal(m->flows[0].to_thread, si);
    assert_string_equal(m->threads[si].slices[m->flows[0].to_slice].name, "k2");
    assert_nesting(m);
}

static void test_kernels_split(void **state) {
    (void)state;
    loupe_model *m = kernels_model();
    check_kernels(m, 1, LOUPE_TRACK_GPU);
    loupe_model_free(m);
}

/* Written by every writer that keeps tracks and read back: both kernels whole, the sibling
 * marked again from its name. */
static void test_kernels_every_writer(void **state) {
    (void)state;
    static const struct {
        const char *file;
        loupe_file_format format;
        int kind;
    } w[] = {/* the Chrome JSON reader gives the GPU pid's tracks back as threads */
             {"k.trace.json", LOUPE_FILE_CHROME_JSON, -1},
             {"k.xplane.pb", LOUPE_FILE_XPLANE, LOUPE_TRACK_GPU},
             {"k.pftrace", LOUPE_FILE_PERFETTO_PROTO, LOUPE_TRACK_GPU}};
    loupe_model *m = kernels_model();
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", tu_dir, w[i].file);
        assert_int_equal(loupe_trace_write(m, path, w[i].format), 0);
        loupe_model *r = tu_read_back(path);
        print_message("%s\n", w[i].file);
        check_kernels(r, 0, w[i].kind);
        loupe_model_free(r);
    }
    loupe_model_free(m);
}

/* Foreign Chrome JSON: X events on one thread that overlap partially (another tool's trace), with
 * a child nested in the second; and a properly nested pair on another thread that stays whole. */
static void test_foreign_x_events(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/foreign.json", tu_dir);
    tu_write_file(path, "{\"traceEvents\":["
                        "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":5,"
                        "\"args\":{\"name\":\"worker\"}},"
                        "{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":5,\"ts\":1,\"dur\":1},"
                        "{\"ph\":\"X\",\"name\":\"b\",\"pid\":1,\"tid\":5,\"ts\":1.5,\"dur\":1.5},"
                        "{\"ph\":\"X\",\"name\":\"c\",\"pid\":1,\"tid\":5,\"ts\":1.6,\"dur\":0.1},"
                        "{\"ph\":\"X\",\"name\":\"d\",\"pid\":1,\"tid\":5,\"ts\":1.75,\"dur\":3},"
                        "{\"ph\":\"X\",\"name\":\"p\",\"pid\":1,\"tid\":6,\"ts\":1,\"dur\":4},"
                        "{\"ph\":\"X\",\"name\":\"q\",\"pid\":1,\"tid\":6,\"ts\":2,\"dur\":1}"
                        "]}");
    loupe_model *m = tu_read_back(path);
    size_t wi;
    const loupe_model_thread *w = track(m, "worker", LOUPE_TRACK_THREAD, &wi);
    const loupe_model_thread *s1 = track(m, "worker (overlap 1)", LOUPE_TRACK_THREAD, NULL);
    const loupe_model_thread *s2 = track(m, "worker (overlap 2)", LOUPE_TRACK_THREAD, NULL);
    /* (the reader puts ts 0 at the first event) a [0, 1000] stays; b [500, 2000] overlaps it;
     * c [600, 700] is in a and b: it goes to the one that began last; d [750, 3750] overlaps
     * a and b */
    assert_int_equal(w->slice_count, 1);
    assert_string_equal(w->slices[0].name, "a");
    assert_int_equal(s1->slice_count, 2);
    assert_string_equal(s1->slices[0].name, "b");
    assert_int_equal(s1->slices[0].dur_ns, 1500);
    assert_string_equal(s1->slices[1].name, "c"); /* b's child: it goes with b */
    assert_int_equal(s1->slices[1].depth, 1);
    assert_int_equal(s1->sibling, 1);
    assert_int_equal(s1->sibling_of, wi);
    assert_int_equal(s2->slice_count, 1);
    assert_string_equal(s2->slices[0].name, "d");
    assert_int_equal(s2->slices[0].start_ns, 750);
    assert_int_equal(s2->slices[0].dur_ns, 3000);
    assert_int_equal(s2->sibling, 2);
    assert_int_equal(s2->sibling_of, wi);
    const loupe_model_thread *t6 = NULL;
    for (size_t t = 0; t < m->thread_count; t++) {
        if (m->threads[t].tid == 6) {
            t6 = &m->threads[t];
        }
    }
    assert_non_null(t6);
    assert_int_equal(t6->slice_count, 2);
    assert_int_equal(t6->slices[1].depth, 1);
    assert_int_equal(m->thread_count, 4);
    assert_nesting(m);
    loupe_model_free(m);
}

/* A track named like a sibling but without its base track is not marked. */
static void test_sibling_names(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    size_t a = loupe__mb_thread(mb, 1), b = loupe__mb_thread(mb, 2), c = loupe__mb_thread(mb, 3);
    size_t d = loupe__mb_thread(mb, 4);
    loupe__mb_thread_name(mb, a, "io");
    loupe__mb_thread_name(mb, b, "io (overlap 3)");
    loupe__mb_thread_name(mb, c, "net (overlap 1)"); /* no "net" track */
    loupe__mb_thread_name(mb, d, "io (overlap 01)"); /* not how loupe names one */
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->threads[b].sibling, 3);
    assert_int_equal(m->threads[b].sibling_of, a);
    assert_int_equal(m->threads[c].sibling, 0);
    assert_int_equal(m->threads[d].sibling, 0);
    assert_int_equal(m->threads[a].sibling, 0);
    loupe_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_split),
        cmocka_unit_test(test_sibling_names),
        cmocka_unit_test_setup_teardown(test_kernels_every_writer, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_foreign_x_events, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
