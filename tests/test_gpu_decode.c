/* test_gpu_decode.c: the in-kernel timeline decoder (gpu.h) on synthetic buffers built to the
 * exact word: golden decodes (nested regions, warp and warpgroup scope, Mosaic layout), every
 * validation error with its exact message, clock wraps, the measured clock rate, overhead
 * subtraction, backward steps, overflow in both modes, an all-zero buffer, the name table limit,
 * and the standalone Chrome JSON writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H LOUPE_GPU_HEADER_WORDS
#define END LOUPE_GPU_TAG_END
#define INST LOUPE_GPU_TAG_INSTANT

static const char *ODD =
    "Profiler collected an odd number of trace events. This likely indicates memory corruption "
    "due to insufficient profiling space. Try again with a larger profiling space.";

/* A loupe-layout trace header. */
static void hdr(uint32_t *t, uint64_t gt0, uint64_t gt1, uint32_t sm, uint32_t clk0, uint32_t clk1,
                uint32_t attempted) {
    t[0] = (uint32_t)gt0;
    t[1] = sm;
    t[2] = attempted;
    t[3] = (uint32_t)(gt0 >> 32);
    t[4] = (uint32_t)gt1;
    t[5] = (uint32_t)(gt1 >> 32);
    t[6] = clk0;
    t[7] = clk1;
    t[8] = LOUPE_GPU_MAGIC | LOUPE_GPU_VERSION;
}

static void ev(uint32_t *t, uint32_t hw, uint32_t k, uint32_t tag, uint32_t clk) {
    t[hw + 2 * k] = tag;
    t[hw + 2 * k + 1] = clk;
}

static const uint32_t G1[3] = {1, 1, 1}, B128[3] = {128, 1, 1};
static const loupe_gpu_decode_options NO_OV = {.overhead_cycles = LOUPE_GPU_OVERHEAD_OFF};

static loupe_gpu_decoded *decode_ok(const uint32_t *w, size_t n, const loupe_gpu_spec *spec,
                                    const uint32_t grid[3], const uint32_t block[3],
                                    const loupe_gpu_names *names,
                                    const loupe_gpu_decode_options *o) {
    loupe_gpu_decoded *d = NULL;
    int r = loupe_gpu_decode(w, n, spec, grid, block, names, o, &d);
    if (r != 0) {
        fprintf(stderr, "decode: %s: %s\n", loupe_strerror(r), loupe_last_error());
    }
    assert_int_equal(r, 0);
    assert_non_null(d);
    return d;
}

static void assert_ev(const loupe_gpu_event *e, uint64_t ts, int kind, const char *name,
                      int synthetic) {
    assert_int_equal(e->ts_ns, ts);
    assert_int_equal(e->kind, kind);
    assert_string_equal(e->name, name);
    assert_int_equal(e->synthetic, synthetic);
}

static void test_golden_nested_warpgroup(void **state) {
    (void)state;
    loupe_gpu_names *nm = loupe_gpu_names_new(0);
    const char *names[] = {"Init", "load"};
    uint32_t ids[2];
    assert_int_equal(loupe_gpu_names_add_many(nm, names, 2, ids), 0);
    assert_int_equal(ids[1], 1);
    loupe_gpu_spec spec = {.entries_per_trace = H + 8, .scope = 128};
    uint32_t w[H + 8] = {0};
    hdr(w, 1000, 1500, 5, 0x1000, 0x1000 + 500, 8);
    ev(w, H, 0, 0, 0x1000 + 100);
    ev(w, H, 1, 1, 0x1000 + 200);
    ev(w, H, 2, 1 | END, 0x1000 + 300);
    ev(w, H, 3, 0 | END, 0x1000 + 400);
    /* Default options: overhead estimated as min(12, 100) - 1 = 11 cycles per event; 1 GHz
     * measured from 500 cycles over 500 ns. */
    loupe_gpu_decoded *d = decode_ok(w, H + 8, &spec, G1, B128, nm, NULL);
    assert_int_equal(d->trace_count, 1);
    assert_int_equal(d->overhead_cycles, 11);
    assert_true(d->ghz_measured);
    assert_true(fabs(d->ghz - 1.0) < 1e-12);
    const loupe_gpu_trace *t = &d->traces[0];
    assert_int_equal(t->smid, 5);
    assert_int_equal(t->gt_start_ns, 1000);
    assert_int_equal(t->gt_end_ns, 1500);
    assert_int_equal(t->event_count, 4);
    assert_ev(&t->events[0], 1100, LOUPE_GPU_BEGIN, "Init", 0);
    assert_ev(&t->events[1], 1189, LOUPE_GPU_BEGIN, "load", 0);
    assert_ev(&t->events[2], 1278, LOUPE_GPU_END, "load", 0);
    assert_ev(&t->events[3], 1367, LOUPE_GPU_END, "Init", 0);
    assert_int_equal(d->events, 4);
    assert_int_equal(d->events_dropped, 0);
    assert_int_equal(d->needed_entries, H + 8);
    assert_string_equal(d->warnings, "");
    loupe_gpu_decoded_free(d);
    loupe_gpu_names_free(nm);
}

static void test_golden_warp_scope(void **state) {
    (void)state;
    /* grid 2, block 64, warp scope: 2 traces per block, 4 in all; slice t = block*2 + warp. */
    uint32_t grid[3] = {2, 1, 1}, block[3] = {32, 2, 1};
    loupe_gpu_spec spec = {.entries_per_trace = H + 4, .scope = 32};
    assert_int_equal(loupe_gpu_buffer_bytes(&spec, grid, block), 4 * (H + 4) * 4);
    uint32_t w[4 * (H + 4)];
    memset(w, 0, sizeof w);
    for (uint32_t t = 0; t < 4; t++) {
        uint32_t *s = w + t * (H + 4);
        /* Later traces start earlier: the result is sorted by start. */
        hdr(s, 10000 - 1000 * t, 10000 - 1000 * t + 100, 10 + t, 0, 100, 4);
        ev(s, H, 0, INST | 7, 10);
        ev(s, H, 1, INST | 8, 60);
    }
    loupe_gpu_decoded *d = decode_ok(w, 4 * (H + 4), &spec, grid, block, NULL, &NO_OV);
    assert_int_equal(d->traces_per_block, 2);
    assert_int_equal(d->trace_count, 4);
    for (uint32_t i = 0; i < 4; i++) {
        const loupe_gpu_trace *t = &d->traces[i];
        uint32_t idx = 3 - i;
        assert_int_equal(t->index, idx);
        assert_int_equal(t->block_linear, idx / 2);
        assert_int_equal(t->trace_in_block, idx % 2);
        assert_int_equal(t->smid, 10 + idx);
        assert_int_equal(t->event_count, 2);
        assert_ev(&t->events[0], 10000 - 1000 * idx + 10, LOUPE_GPU_INSTANT, "#7", 0);
        assert_ev(&t->events[1], 10000 - 1000 * idx + 60, LOUPE_GPU_INSTANT, "#8", 0);
    }
    loupe_gpu_decoded_free(d);
}

static void expect_error(const uint32_t *w, size_t n, const loupe_gpu_spec *spec,
                         const uint32_t grid[3], const uint32_t block[3],
                         const loupe_gpu_decode_options *o, int code, const char *detail) {
    loupe_gpu_decoded *d = (loupe_gpu_decoded *)1;
    int r = loupe_gpu_decode(w, n, spec, grid, block, NULL, o, &d);
    assert_int_equal(r, code);
    assert_null(d);
    assert_string_equal(loupe_last_error(), detail);
}

static void test_validation_errors(void **state) {
    (void)state;
    uint32_t w[2 * (H + 4)];
    memset(w, 0, sizeof w);
    loupe_gpu_spec spec = {.entries_per_trace = H + 4};
    uint32_t b96[3] = {96, 1, 1};
    expect_error(w, H + 4, &spec, G1, b96, NULL, LOUPE_EINVALID,
                 "Block size is not a multiple of 128");
    assert_int_equal(loupe_gpu_buffer_bytes(&spec, G1, b96), 0);
    loupe_gpu_spec s64 = {.entries_per_trace = H + 4, .scope = 64};
    expect_error(w, H + 4, &s64, G1, B128, NULL, LOUPE_EINVALID,
                 "Unsupported trace scope: 64 (use 32 for a warp, 128 for a warpgroup)");
    loupe_gpu_spec small = {.entries_per_trace = 8};
    expect_error(w, 8, &small, G1, B128, NULL, LOUPE_EINVALID,
                 "entries_per_trace 8 is below the 9 header words of the loupe layout");
    expect_error(w, H + 3, &spec, G1, B128, NULL, LOUPE_EFORMAT,
                 "Buffer size mismatch: 12 words (48 bytes), expected 1 traces x 13 entries = 13 "
                 "words");
    hdr(w, 1, 2, 0, 0, 1, 0);
    w[8] = 0xDEADBEEF;
    expect_error(w, H + 4, &spec, G1, B128, NULL, LOUPE_EFORMAT,
                 "Trace 0 (block 0, warpgroup 0): bad magic 0xdeadbeef (expected 0x4c500001: a "
                 "loupe layout version 1 buffer; a JAX buffer needs the Mosaic layout)");
    w[8] = LOUPE_GPU_MAGIC | 2;
    expect_error(w, H + 4, &spec, G1, B128, NULL, LOUPE_EFORMAT,
                 "Trace 0: layout version 2 is not supported (this loupe reads version 1)");
    hdr(w, 1, 2, 0, 0, 1, 3);
    char odd[400];
    snprintf(odd, sizeof odd, "%s (trace 0: 3 entries)", ODD);
    expect_error(w, H + 4, &spec, G1, B128, NULL, LOUPE_EFORMAT, odd);
    /* Mosaic layout: the same odd-count text. */
    loupe_gpu_spec ms = {.entries_per_trace = 8, .layout = LOUPE_GPU_LAYOUT_MOSAIC};
    uint32_t mw[8] = {100, 1, 5, 0, 0, 0, 0, 0};
    snprintf(odd, sizeof odd, "%s (trace 0: 5 entries)", ODD);
    expect_error(mw, 8, &ms, G1, B128, NULL, LOUPE_EFORMAT, odd);
    assert_string_equal(loupe_strerror(LOUPE_EGPU_OVERFLOW),
                        "Insufficient space to capture a full trace");
    assert_int_equal(loupe_gpu_decode(NULL, 0, &spec, G1, B128, NULL, NULL, NULL), LOUPE_EINVALID);
    /* fallback_ghz: 0 is the default; anything outside 0.001..1000 GHz is refused */
    loupe_gpu_decode_options bad = {.fallback_ghz = -1.0};
    expect_error(w, H + 4, &spec, G1, B128, &bad, LOUPE_EINVALID,
                 "loupe_gpu_decode: fallback_ghz -1 is not a clock rate from 0.001 to 1000 GHz "
                 "(0 = the 1 GHz default)");
    bad.fallback_ghz = 1e-300;
    expect_error(w, H + 4, &spec, G1, B128, &bad, LOUPE_EINVALID,
                 "loupe_gpu_decode: fallback_ghz 1e-300 is not a clock rate from 0.001 to 1000 "
                 "GHz (0 = the 1 GHz default)");
}

static void test_clock_wrap_in_trace(void **state) {
    (void)state;
    loupe_gpu_spec spec = {.entries_per_trace = H + 4};
    uint32_t w[H + 4] = {0};
    hdr(w, 7000, 7000 + 512, 0, 0xFFFFFF00u, 0x00000100u, 4);
    ev(w, H, 0, 3, 0xFFFFFF80u);
    ev(w, H, 1, 3 | END, 0x00000080u); /* the u32 %clock wrapped between the two */
    loupe_gpu_decoded *d = decode_ok(w, H + 4, &spec, G1, B128, NULL, &NO_OV);
    assert_true(fabs(d->ghz - 1.0) < 1e-12); /* 512 cycles over 512 ns, across the wrap */
    assert_ev(&d->traces[0].events[0], 7000 + 128, LOUPE_GPU_BEGIN, "#3", 0);
    assert_ev(&d->traces[0].events[1], 7000 + 384, LOUPE_GPU_END, "#3", 0);
    assert_int_equal(d->backward_steps, 0);
    loupe_gpu_decoded_free(d);
}

static void test_globaltimer_wrap_across_blocks(void **state) {
    (void)state;
    /* loupe layout: 64-bit globaltimer; block 1 starts after the low word wrapped. */
    uint32_t grid[3] = {2, 1, 1};
    loupe_gpu_spec spec = {.entries_per_trace = H + 2};
    uint32_t w[2 * (H + 2)];
    memset(w, 0, sizeof w);
    hdr(w, 0x1FFFFFFF0ull, 0x1FFFFFFF0ull + 100, 1, 0, 100, 2);
    ev(w, H, 0, INST, 50);
    hdr(w + H + 2, 0x200000010ull, 0x200000010ull + 100, 2, 0, 100, 2);
    ev(w + H + 2, H, 0, INST, 50);
    loupe_gpu_decoded *d = decode_ok(w, 2 * (H + 2), &spec, grid, B128, NULL, &NO_OV);
    assert_int_equal(d->traces[0].index, 0);
    assert_int_equal(d->traces[1].index, 1);
    assert_int_equal(d->traces[0].events[0].ts_ns, 0x1FFFFFFF0ull + 50);
    assert_int_equal(d->traces[1].events[0].ts_ns, 0x200000010ull + 50);
    loupe_gpu_decoded_free(d);
    /* Mosaic layout: u32 globaltimer_lo, unwrapped around the first trace's start. */
    loupe_gpu_spec ms = {.entries_per_trace = 5, .layout = LOUPE_GPU_LAYOUT_MOSAIC};
    uint32_t m[10] = {0xFFFFFFF0u, 4, 2, INST | 0, 1000, 0x00000010u, 6, 2, INST | 0, 2000};
    d = decode_ok(m, 10, &ms, grid, B128, NULL, NULL);
    assert_false(d->ghz_measured);
    assert_int_equal(d->traces[0].index, 0);
    assert_int_equal(d->traces[0].gt_start_ns, 0xFFFFFFF0ull);
    assert_int_equal(d->traces[1].index, 1);
    assert_int_equal(d->traces[1].gt_start_ns, 0xFFFFFFF0ull + 32);
    assert_int_equal(d->traces[1].events[0].ts_ns, 0xFFFFFFF0ull + 32);
    loupe_gpu_decoded_free(d);
}

static void test_measured_1755_mhz(void **state) {
    (void)state;
    /* 1 ms of globaltimer over 1,755,600 cycles: 1.7556 GHz (the clock ran 0.03% fast). */
    loupe_gpu_spec spec = {.entries_per_trace = H + 6};
    uint32_t w[H + 6] = {0};
    uint32_t c0 = 4000000000u; /* wraps during the trace, too */
    hdr(w, 5000000, 6000000, 0, c0, c0 + 1755600u, 6);
    ev(w, H, 0, 1, c0 + 175500u);         /* 100 µs at 1.755 GHz */
    ev(w, H, 1, 1 | END, c0 + 877500u);   /* 500 µs */
    ev(w, H, 2, INST | 2, c0 + 1579500u); /* 900 µs */
    loupe_gpu_decoded *d = decode_ok(w, H + 6, &spec, G1, B128, NULL, &NO_OV);
    assert_true(d->ghz_measured);
    assert_true(fabs(d->ghz / 1.755 - 1.0) < 0.001);
    const uint64_t want[3] = {100000, 500000, 900000};
    for (int i = 0; i < 3; i++) {
        double got = (double)(d->traces[0].events[i].ts_ns - 5000000);
        assert_true(fabs(got / (double)want[i] - 1.0) < 0.001);
    }
    loupe_gpu_decoded_free(d);
    /* The old assumption (1 GHz) would be 75% off: the decoder does not make it. */
}

static void test_overhead_subtraction(void **state) {
    (void)state;
    loupe_gpu_spec spec = {.entries_per_trace = H + 8};
    uint32_t w[H + 8] = {0};
    hdr(w, 0, 100, 0, 0, 100, 8);
    ev(w, H, 0, INST, 10);
    ev(w, H, 1, INST, 15); /* min step 5 → overhead 4 cycles per event */
    ev(w, H, 2, INST, 25);
    ev(w, H, 3, INST, 45);
    loupe_gpu_decoded *d = decode_ok(w, H + 8, &spec, G1, B128, NULL, NULL);
    assert_int_equal(d->overhead_cycles, 4);
    const uint64_t want[4] = {10, 11, 17, 33};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(d->traces[0].events[i].ts_ns, want[i]);
    }
    loupe_gpu_decoded_free(d);
    loupe_gpu_decode_options fixed = {.overhead_cycles = 3};
    d = decode_ok(w, H + 8, &spec, G1, B128, NULL, &fixed);
    assert_int_equal(d->overhead_cycles, 3);
    assert_int_equal(d->traces[0].events[3].ts_ns, 45 - 9);
    loupe_gpu_decoded_free(d);
}

static void test_backward_steps(void **state) {
    (void)state;
    loupe_gpu_spec spec = {.entries_per_trace = H + 8};
    uint32_t w[H + 8] = {0};
    hdr(w, 0, 300, 7, 0, 300, 8);
    ev(w, H, 0, INST, 100);
    ev(w, H, 1, INST, 80); /* back 20 cycles: clamped, warned */
    ev(w, H, 2, INST, 200);
    ev(w, H, 3, INST, 195); /* back 5: clamped, not warned */
    loupe_gpu_decoded *d = decode_ok(w, H + 8, &spec, G1, B128, NULL, &NO_OV);
    assert_int_equal(d->backward_steps, 2);
    assert_int_equal(d->backward_warnings, 1);
    assert_string_equal(d->warnings, "Profiler clock went significantly backwards in trace 0 "
                                     "(SM 7) at event 1: 100 -> 80 cycles\n");
    const uint64_t want[4] = {100, 101, 200, 201};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(d->traces[0].events[i].ts_ns, want[i]);
    }
    loupe_gpu_decoded_free(d);
}

/* Nested a > b > c in a trace holding 4 events of the 6 attempted. */
static void fill_overflow(uint32_t *w, uint32_t hw) {
    ev(w, hw, 0, 0, 10);
    ev(w, hw, 1, 1, 20);
    ev(w, hw, 2, 2, 30);
    ev(w, hw, 3, 2 | END, 40);
}

static void test_overflow_both_modes(void **state) {
    (void)state;
    loupe_gpu_spec spec = {.entries_per_trace = H + 8};
    uint32_t w[H + 8] = {0};
    hdr(w, 0, 100, 2, 0, 100, 12); /* attempted 12 entries = 6 events; room for 4 */
    fill_overflow(w, H);
    loupe_gpu_decoded *d = decode_ok(w, H + 8, &spec, G1, B128, NULL, &NO_OV);
    const loupe_gpu_trace *t = &d->traces[0];
    assert_true(t->truncated);
    assert_int_equal(t->events_attempted, 6);
    assert_int_equal(t->events_recorded, 4);
    assert_int_equal(t->events_dropped, 2);
    assert_int_equal(d->events_dropped, 2);
    assert_int_equal(d->traces_truncated, 1);
    assert_int_equal(d->needed_entries, 12 + H);
    assert_int_equal(d->unclosed, 0); /* closing after a truncation is expected */
    assert_int_equal(t->event_count, 6);
    assert_ev(&t->events[3], 40, LOUPE_GPU_END, "#2", 0);
    assert_ev(&t->events[4], 40, LOUPE_GPU_END, "#1", 1);
    assert_ev(&t->events[5], 40, LOUPE_GPU_END, "#0", 1);
    assert_string_equal(d->warnings, "Trace 0 (block 0, warpgroup 0, SM 2): 2 of 6 events "
                                     "dropped; entries_per_trace 21 would hold them\n");
    loupe_gpu_decoded_free(d);
    loupe_gpu_decode_options strict = {.strict = 1};
    expect_error(w, H + 8, &spec, G1, B128, &strict, LOUPE_EGPU_OVERFLOW,
                 "Insufficient space to capture a full trace: 1 of 1 traces overflowed (first: "
                 "trace 0 recorded 4 of 6 events); entries_per_trace 21 would hold every event "
                 "(now 17)");
    /* Mosaic: E = 12 keeps 4 events of nested a > b > c (12 - 3 = 9 usable words). */
    loupe_gpu_spec ms = {.entries_per_trace = 12, .layout = LOUPE_GPU_LAYOUT_MOSAIC};
    uint32_t m[12] = {500, 1, 12};
    fill_overflow(m, 3);
    d = decode_ok(m, 12, &ms, G1, B128, NULL, &NO_OV);
    assert_int_equal(d->traces[0].events_recorded, 4);
    assert_int_equal(d->traces[0].events_dropped, 2);
    assert_int_equal(d->needed_entries, 15);
    assert_int_equal(d->traces[0].event_count, 6); /* 3 B + 3 E after the synthetic closes */
    loupe_gpu_decoded_free(d);
    expect_error(m, 12, &ms, G1, B128, &strict, LOUPE_EGPU_OVERFLOW,
                 "Insufficient space to capture a full trace: 1 of 1 traces overflowed (first: "
                 "trace 0 recorded 4 of 6 events); entries_per_trace 15 would hold every event "
                 "(now 12)");
}

static void test_all_zero(void **state) {
    (void)state;
    uint32_t grid[3] = {4, 1, 1};
    uint32_t *w = calloc(4 * (H + 6), 4);
    loupe_gpu_spec spec = {.entries_per_trace = H + 6};
    loupe_gpu_decoded *d = decode_ok(w, 4 * (H + 6), &spec, grid, B128, NULL, NULL);
    assert_int_equal(d->trace_count, 0);
    assert_int_equal(d->traces_empty, 4);
    assert_int_equal(d->events, 0);
    assert_int_equal(d->needed_entries, H);
    loupe_gpu_decoded_free(d);
    loupe_gpu_spec ms = {.entries_per_trace = H + 6, .layout = LOUPE_GPU_LAYOUT_MOSAIC};
    d = decode_ok(w, 4 * (H + 6), &ms, grid, B128, NULL, NULL);
    assert_int_equal(d->trace_count, 0);
    assert_int_equal(d->events, 0);
    loupe_gpu_decoded_free(d);
    free(w);
}

static void test_nesting_errors(void **state) {
    (void)state;
    loupe_gpu_spec spec = {.entries_per_trace = H + 8};
    uint32_t w[H + 8] = {0};
    hdr(w, 0, 100, 0, 0, 100, 8);
    ev(w, H, 0, 9 | END, 10); /* an end without a begin: dropped */
    ev(w, H, 1, 1, 20);
    ev(w, H, 2, 2, 30);
    ev(w, H, 3, 1 | END, 40); /* closes 2 (lost end) then 1 */
    loupe_gpu_decoded *d = decode_ok(w, H + 8, &spec, G1, B128, NULL, &NO_OV);
    assert_int_equal(d->unmatched_ends, 1);
    assert_int_equal(d->unclosed, 1);
    const loupe_gpu_trace *t = &d->traces[0];
    assert_int_equal(t->event_count, 4);
    assert_ev(&t->events[2], 40, LOUPE_GPU_END, "#2", 1);
    assert_ev(&t->events[3], 40, LOUPE_GPU_END, "#1", 0);
    assert_string_equal(d->warnings, "Trace 0: end of `#9` without an open region: dropped\n"
                                     "Trace 0: `#2` was still open at the end of `#1`: closed "
                                     "there\n");
    loupe_gpu_decoded_free(d);
}

static void test_name_table_limit(void **state) {
    (void)state;
    loupe_gpu_names *t = loupe_gpu_names_new(3);
    uint32_t id = 99;
    const char *abc[] = {"a", "b", "c"};
    uint32_t ids[3];
    assert_int_equal(loupe_gpu_names_add_many(t, abc, 3, ids), 0);
    assert_int_equal(ids[2], 2);
    assert_int_equal(loupe_gpu_names_add(t, "d", &id), LOUPE_ETOO_MANY_NAMES);
    assert_string_equal(loupe_strerror(LOUPE_ETOO_MANY_NAMES), "Allocated too many names");
    assert_string_equal(loupe_last_error(), "Allocated too many names: the table holds 3 of at "
                                            "most 3; 1 more do not fit (nothing was added)");
    assert_int_equal(id, 99);
    assert_int_equal(loupe_gpu_names_count(t), 3);
    assert_int_equal(loupe_gpu_names_add(t, "b", &id), 0); /* present: no room needed */
    assert_int_equal(id, 1);
    loupe_gpu_names_free(t);
    /* All or nothing: 2 new names with room for 1 add neither. */
    t = loupe_gpu_names_new(4);
    assert_int_equal(loupe_gpu_names_add_many(t, abc, 3, NULL), 0);
    const char *xy[] = {"x", "a", "y", "x"};
    assert_int_equal(loupe_gpu_names_add_many(t, xy, 4, NULL), LOUPE_ETOO_MANY_NAMES);
    assert_string_equal(loupe_last_error(), "Allocated too many names: the table holds 3 of at "
                                            "most 4; 2 more do not fit (nothing was added)");
    assert_int_equal(loupe_gpu_names_count(t), 3);
    assert_null(loupe_gpu_names_get(t, 3));
    const char *xa[] = {"x", "a", "x"};
    assert_int_equal(loupe_gpu_names_add_many(t, xa, 3, ids), 0);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 0);
    assert_int_equal(ids[2], 3);
    assert_string_equal(loupe_gpu_names_get(t, 3), "x");
    loupe_gpu_names_free(t);
}

static void test_mosaic_golden_and_json(void **state) {
    (void)state;
    loupe_gpu_names *nm = loupe_gpu_names_new(0);
    uint32_t id;
    assert_int_equal(loupe_gpu_names_add(nm, "Init", &id), 0);
    assert_int_equal(loupe_gpu_names_add(nm, "load", &id), 0);
    /* Two blocks of 128 threads (1 warpgroup each), E = 16: header {gt_lo, smid, used}. */
    uint32_t grid[3] = {2, 1, 1};
    loupe_gpu_spec ms = {.entries_per_trace = 16, .layout = LOUPE_GPU_LAYOUT_MOSAIC};
    uint32_t m[32] = {0};
    uint32_t b0[] = {1000, 3, 8, 0, 500, 1, 520, 1 | END, 600, 0 | END, 700};
    uint32_t b1[] = {1400, 8, 4, 0, 9000, 0 | END, 9300};
    memcpy(m, b0, sizeof b0);
    memcpy(m + 16, b1, sizeof b1);
    loupe_gpu_decoded *d = decode_ok(m, 32, &ms, grid, B128, nm, NULL);
    assert_int_equal(d->overhead_cycles, 11); /* min(12, 20, 80, 100, 300) - 1 */
    assert_false(d->ghz_measured);
    const loupe_gpu_trace *t = &d->traces[0];
    assert_int_equal(t->smid, 3);
    assert_ev(&t->events[0], 1000, LOUPE_GPU_BEGIN, "Init", 0);
    assert_ev(&t->events[1], 1009, LOUPE_GPU_BEGIN, "load", 0);
    assert_ev(&t->events[2], 1078, LOUPE_GPU_END, "load", 0);
    assert_ev(&t->events[3], 1167, LOUPE_GPU_END, "Init", 0);
    assert_int_equal(t->gt_end_ns, 1167);
    t = &d->traces[1];
    assert_ev(&t->events[0], 1400, LOUPE_GPU_BEGIN, "Init", 0);
    assert_ev(&t->events[1], 1400 + 300 - 11, LOUPE_GPU_END, "Init", 0);
    char *dir = tu_tmpdir("gpu_json");
    char path[512];
    snprintf(path, sizeof path, "%s/out.json", dir);
    assert_int_equal(loupe_gpu_write_chrome_json(d, path), 0);
    json_t *j = tu_load_json(path);
    json_t *evs = json_object_get(j, "traceEvents");
    assert_string_equal(json_string_value(json_object_get(j, "displayTimeUnit")), "ns");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "metadata"), "events")),
                     6);
    size_t i, nb = 0;
    json_t *e;
    json_array_foreach(evs, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (strcmp(ph, "B") == 0 && nb++ == 1) {
            /* the second B: "load" on SM 3 (pid 4), trace 0 (tid 1), 9 ns after the origin */
            assert_string_equal(json_string_value(json_object_get(e, "name")), "load");
            assert_int_equal(json_integer_value(json_object_get(e, "pid")), 4);
            assert_int_equal(json_integer_value(json_object_get(e, "tid")), 1);
            assert_true(fabs(json_real_value(json_object_get(e, "ts")) - 0.009) < 1e-9);
        }
    }
    assert_int_equal(nb, 3);
    json_decref(j);
    tu_rmtree(dir);
    free(dir);
    loupe_gpu_decoded_free(d);
    loupe_gpu_names_free(nm);
}

static void test_names_file_and_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir("gpu_cli");
    char p_names[512], p_buf[512], p_out[512], cmd[2048];
    snprintf(p_names, sizeof p_names, "%s/names.txt", dir);
    snprintf(p_buf, sizeof p_buf, "%s/buf.bin", dir);
    snprintf(p_out, sizeof p_out, "%s/out.json", dir);
    tu_write_file(p_names, "Init\r\nload\n");
    uint32_t w[H + 8] = {0};
    hdr(w, 0, 100, 2, 0, 100, 12);
    fill_overflow(w, H);
    FILE *f = fopen(p_buf, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < H + 8; i++) { /* little-endian on any host */
        unsigned char b[4] = {(unsigned char)w[i], (unsigned char)(w[i] >> 8),
                              (unsigned char)(w[i] >> 16), (unsigned char)(w[i] >> 24)};
        fwrite(b, 1, 4, f);
    }
    fclose(f);
    char *out = NULL;
    snprintf(cmd, sizeof cmd,
             "%s gpu-decode %s --grid 1 --block 128,1,1 --entries %u --names %s -o %s 2>/dev/null",
             tu_cli(), p_buf, H + 8, p_names, p_out);
    assert_int_equal(tu_run(cmd, &out), 0);
    const char *want = "1 traces, 4 events, 2 dropped, needed entries 21 (have 17), "
                       "1.0000 GHz measured, overhead 9 cycles -> ";
    assert_int_equal(strncmp(out, want, strlen(want)), 0);
    json_t *j = tu_load_json(p_out);
    json_t *e = json_array_get(json_object_get(j, "traceEvents"), 3); /* M, M SM 2, M thread */
    assert_string_equal(json_string_value(json_object_get(e, "name")), "Init");
    json_decref(j);
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s gpu-decode %s --grid 1 --block 128 --entries %u --strict -o %s 2>&1", tu_cli(),
             p_buf, H + 8, p_out);
    assert_int_equal(tu_run(cmd, &out), 1);
    assert_non_null(strstr(out, "Insufficient space to capture a full trace"));
    free(out);
    static const char *bad_ghz[] = {"inf", "1e-300", "0", "-1", "nan", "2000"};
    for (size_t k = 0; k < sizeof bad_ghz / sizeof bad_ghz[0]; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s gpu-decode %s --grid 1 --block 128 --entries %u --ghz %s -o %s 2>&1", tu_cli(),
                 p_buf, H + 8, bad_ghz[k], p_out);
        assert_int_equal(tu_run(cmd, &out), 2);
        assert_non_null(strstr(out, "not a clock rate in GHz from 0.001 to 1000"));
        free(out);
    }
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_nested_warpgroup),
        cmocka_unit_test(test_golden_warp_scope),
        cmocka_unit_test(test_validation_errors),
        cmocka_unit_test(test_clock_wrap_in_trace),
        cmocka_unit_test(test_globaltimer_wrap_across_blocks),
        cmocka_unit_test(test_measured_1755_mhz),
        cmocka_unit_test(test_overhead_subtraction),
        cmocka_unit_test(test_backward_steps),
        cmocka_unit_test(test_overflow_both_modes),
        cmocka_unit_test(test_all_zero),
        cmocka_unit_test(test_nesting_errors),
        cmocka_unit_test(test_name_table_limit),
        cmocka_unit_test(test_mosaic_golden_and_json),
        cmocka_unit_test(test_names_file_and_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
