/* test_chrome_golden.c: the Chrome JSON writer on a hand-built model, byte for byte against
 * tests/golden/chrome_basic.json (json-c's *.expected style). The model has every event kind:
 * nested slices with equal starts, typed args (a uint64 past INT64_MAX), a truncated slice, an
 * instant, int and double counters, a flow, thread names with hostile bytes, metadata.
 * Refresh after an intended format change:  LOUPE_UPDATE_GOLDEN=1 ./test_chrome_golden
 * (then review the diff of tests/golden/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "export/writers.h"
#include "model/builder.h"

#include <loupe/reader.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN LOUPE_SOURCE_DIR "/tests/golden/chrome_basic.json"

static loupe_model *basic_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 4242;
    m->process_name = loupe__mb_str(mb, "golden");
    m->host = loupe__mb_str(mb, "host-a");
    m->clock = loupe__mb_str(mb, "tsc");
    m->tsc_ghz = 2.5;
    m->origin_unix_ns = 1700000000123456789ull;
    m->duration_ns = 10000000;
    size_t t0 = loupe__mb_thread(mb, 100);
    size_t t1 = loupe__mb_thread(mb, 101);
    loupe__mb_thread_name(mb, t0, "main");
    loupe__mb_thread_name(mb, t1, "work\"er\x01\xff");
    loupe_model_thread *th = loupe__mb_thread_at(mb, t0);
    th->events_recorded = 12;
    th->events_dropped = 2;
    th->capacity_needed = 14;
    size_t a = loupe__mb_slice(mb, t0);
    *loupe__mb_slice_at(mb, t0, a) =
        (loupe_slice){.start_ns = 1000, .dur_ns = 5000000, .name = loupe__mb_str(mb, "step")};
    loupe_arg sa[] = {{.key = "step_num", .type = LOUPE_ARG_INT64, .v.i = 3}};
    assert_int_equal(loupe__mb_slice_args(mb, t0, a, sa, 1), 0);
    size_t b = loupe__mb_slice(mb, t0); /* equal start, shorter: a child */
    *loupe__mb_slice_at(mb, t0, b) =
        (loupe_slice){.start_ns = 1000, .dur_ns = 1234, .name = loupe__mb_str(mb, "load")};
    loupe_arg la[] = {
        {.key = "i", .type = LOUPE_ARG_INT64, .v.i = -7},
        {.key = "u", .type = LOUPE_ARG_UINT64, .v.u = 18446744073709551615ull},
        {.key = "d", .type = LOUPE_ARG_DOUBLE, .v.d = 0.1},
        {.key = "b", .type = LOUPE_ARG_BOOL, .v.b = 0},
        {.key = "s", .type = LOUPE_ARG_STRING, .v.s = "a\\b\"c\n"},
    };
    assert_int_equal(loupe__mb_slice_args(mb, t0, b, la, 5), 0);
    size_t c = loupe__mb_slice(mb, t1);
    *loupe__mb_slice_at(mb, t1, c) = (loupe_slice){.start_ns = 2000001,
                                                   .dur_ns = 7999999,
                                                   .name = loupe__mb_str(mb, "open"),
                                                   .flags = LOUPE_SLICE_TRUNCATED};
    size_t d = loupe__mb_slice(mb, t1);
    *loupe__mb_slice_at(mb, t1, d) = (loupe_slice){.start_ns = 3000000,
                                                   .dur_ns = 10,
                                                   .name = loupe__mb_str(mb, "fn"),
                                                   .flags = LOUPE_SLICE_FUNCTION};
    loupe__mb_slice_category(mb, t1, d, "function");
    assert_int_equal(loupe__mb_instant(mb, t0, 4000000, "mark", NULL, 0), 0);
    loupe_counter_sample c1 = {.ts_ns = 100, .name = "queue", .i = 5};
    loupe_counter_sample c2 = {.ts_ns = 200, .name = "loss", .is_double = 1, .d = 2.5};
    assert_int_equal(loupe__mb_counter(mb, &c2), 0);
    assert_int_equal(loupe__mb_counter(mb, &c1), 0);
    assert_int_equal(loupe__mb_flow(mb, 9, t0, b, t1, c), 0);
    /* a second flow out of the same slice: both ends become flow v1 events */
    assert_int_equal(loupe__mb_flow(mb, 10, t0, b, t1, d), 0);
    assert_int_equal(loupe__mb_metadata(mb, "model", "bert"), 0);
    m->unmatched_ends = 1;
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static void test_golden(void **state) {
    (void)state;
    loupe_model *m = basic_model();
    assert_int_equal(m->truncated_zones, 1);
    assert_int_equal(m->threads[0].slices[0].depth, 0);
    assert_int_equal(m->threads[0].slices[1].depth, 1);
    assert_string_equal(m->counters[0].name, "queue"); /* sorted by time */
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(loupe__write_chrome_json(m, &s, 0), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    if (getenv("LOUPE_UPDATE_GOLDEN") != NULL) {
        tu_write_file(GOLDEN, s.mem);
        print_message("updated %s\n", GOLDEN);
    }
    size_t len;
    char *want = tu_read_file(GOLDEN, &len);
    assert_string_equal(s.mem, want);
    free(want);
    free(s.mem);
    loupe_model_free(m);
}

/* A sink whose writes fail like a full disk: the error comes back, nothing is reported done. */
static int full_disk(loupe__sink *s, const void *p, size_t n) {
    (void)p;
    (void)n;
    s->err_no = 28; /* ENOSPC */
    return LOUPE_EIO;
}

static void test_failing_sink(void **state) {
    (void)state;
    loupe_model *m = basic_model();
    loupe__sink s;
    loupe__sink_open_mem(&s);
    s.write = full_disk;
    assert_int_equal(loupe__write_chrome_json(m, &s, 0), 0);
    assert_int_equal(loupe__sink_close(&s), LOUPE_EIO);
    assert_string_equal(loupe_last_error(),
                        "cannot write memory: No space left on device (errno 28)");
    loupe_model_free(m);
}

static void test_round_trip_through_reader(void **state) {
    (void)state;
    loupe_model *m = basic_model();
    char *d = tu_tmpdir("golden");
    char path[4200];
    snprintf(path, sizeof path, "%s/t.json.gz", d);
    loupe__sink s;
    assert_int_equal(loupe__sink_open_file(&s, path, 1), 0);
    assert_int_equal(loupe__write_chrome_json(m, &s, 0), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    loupe_model *r = NULL;
    assert_int_equal(loupe_trace_read(path, &r), 0);
    assert_int_equal(r->pid, 4242);
    assert_string_equal(r->process_name, "golden");
    assert_int_equal(r->duration_ns, m->duration_ns);
    assert_int_equal(r->thread_count, 2);
    for (size_t t = 0; t < 2; t++) {
        const loupe_model_thread *a = &m->threads[t], *b = &r->threads[t];
        assert_int_equal(a->tid, b->tid);
        assert_string_equal(b->name, t == 0 ? "main" : "work\"er\x01\xef\xbf\xbd");
        assert_int_equal(a->slice_count, b->slice_count);
        assert_int_equal(a->events_dropped, b->events_dropped);
        for (size_t i = 0; i < a->slice_count; i++) {
            assert_string_equal(a->slices[i].name, b->slices[i].name);
            assert_int_equal(a->slices[i].start_ns, b->slices[i].start_ns);
            assert_int_equal(a->slices[i].dur_ns, b->slices[i].dur_ns);
            assert_int_equal(a->slices[i].depth, b->slices[i].depth);
            assert_int_equal(a->slices[i].flags & LOUPE_SLICE_TRUNCATED,
                             b->slices[i].flags & LOUPE_SLICE_TRUNCATED);
        }
    }
    assert_int_equal(r->counter_count, 2);
    assert_int_equal(r->flow_count, 2);
    int seen9 = 0, seen10 = 0;
    for (size_t f = 0; f < 2; f++) {
        const loupe_flow *fl = &r->flows[f];
        assert_int_equal(fl->from_thread, 0);
        assert_string_equal(r->threads[0].slices[fl->from_slice].name, "load");
        assert_string_equal(r->threads[1].slices[fl->to_slice].name, fl->id == 9 ? "open" : "fn");
        seen9 += fl->id == 9;
        seen10 += fl->id == 10;
    }
    assert_int_equal(seen9 + seen10, 2);
    assert_int_equal(seen9, 1);
    assert_int_equal(r->unmatched_ends, 1);
    loupe_model_free(r);
    loupe_model_free(m);
    tu_rmtree(d);
    free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_failing_sink),
        cmocka_unit_test(test_round_trip_through_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
