/* test_gpu_device.c: the device recorder (loupe/cuda/loupe_device.cuh) run as host C under
 * LOUPE_DEV_HOST_EMULATION, then decoded: a tiny capacity never writes outside a trace's slice
 * (canary words around and between slices stay intact) while `attempted` counts every event;
 * only scope leaders write; a NULL buffer records nothing; the decoder reads what the header
 * wrote, to the exact event. The GPU itself is exercised by tools/gpu_check.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned x, y, z;
} dim3_emu;
static dim3_emu threadIdx, blockIdx, blockDim, gridDim;
static uint32_t emu_clock = 0xFFFFFF00u; /* wraps during the run */
static uint64_t emu_gt = 0xFFFFFFF0ull;  /* the low word wraps too */
static uint32_t emu_sm;

#define LOUPE_GPU_ENABLE
#define LOUPE_DEV_HOST_EMULATION
#define __device__
#define __forceinline__ static inline
static inline uint32_t loupe_dev_clock(void) {
    emu_clock += 100;
    emu_gt += 100; /* 1 cycle per ns */
    return emu_clock;
}
static inline uint64_t loupe_dev_globaltimer(void) {
    return emu_gt;
}
static inline uint32_t loupe_dev_smid(void) {
    return emu_sm;
}
#include <loupe/cuda/loupe_device.cuh>

#define CANARY 0xA5A5A5A5u

/* The "kernel": every thread records `events` B/E pairs' worth of regions (id 1 nested in 0). */
static void kernel(uint32_t *prof, uint32_t entries, uint32_t scope, unsigned pairs) {
    LOUPE_DEV_INIT(ctx, prof, entries, scope);
    for (unsigned i = 0; i < pairs; i++) {
        LOUPE_DEV_BEGIN(ctx, i % 2);
        LOUPE_DEV_INSTANT(ctx, 7);
        LOUPE_DEV_END(ctx, i % 2);
    }
    LOUPE_DEV_FINISH(ctx);
}

static void launch(uint32_t *prof, uint32_t entries, uint32_t scope, unsigned pairs,
                   const uint32_t grid[3], const uint32_t block[3]) {
    gridDim = (dim3_emu){grid[0], grid[1], grid[2]};
    blockDim = (dim3_emu){block[0], block[1], block[2]};
    for (unsigned bz = 0; bz < grid[2]; bz++) {
        for (unsigned by = 0; by < grid[1]; by++) {
            for (unsigned bx = 0; bx < grid[0]; bx++) {
                blockIdx = (dim3_emu){bx, by, bz};
                emu_sm = bx + 2 * by;
                for (unsigned tz = 0; tz < block[2]; tz++) {
                    for (unsigned ty = 0; ty < block[1]; ty++) {
                        for (unsigned tx = 0; tx < block[0]; tx++) {
                            threadIdx = (dim3_emu){tx, ty, tz};
                            kernel(prof, entries, scope, pairs);
                        }
                    }
                }
            }
        }
    }
}

static void test_tiny_capacity_never_overruns(void **state) {
    (void)state;
    const uint32_t grid[3] = {2, 2, 1}, block[3] = {32, 4, 1}; /* 128 threads: 4 warps */
    loupe_gpu_spec spec = {.entries_per_trace = LOUPE_GPU_HEADER_WORDS + 4, .scope = 32};
    size_t words = loupe_gpu_buffer_bytes(&spec, grid, block) / 4;
    assert_int_equal(words, 16 * 13);
    /* 8 canary words before and after the buffer. */
    uint32_t *mem = malloc((words + 16) * 4);
    for (size_t i = 0; i < words + 16; i++) {
        mem[i] = CANARY;
    }
    uint32_t *prof = mem + 8;
    memset(prof, 0, words * 4);
    launch(prof, spec.entries_per_trace, 32, 5, grid, block); /* 15 events, room for 2 */
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(mem[i], CANARY);
        assert_int_equal(mem[8 + words + i], CANARY);
    }
    for (size_t t = 0; t < 16; t++) {
        assert_int_equal(prof[t * 13 + 2], 30); /* attempted: 15 events, not clamped */
        assert_int_equal(prof[t * 13 + 8], LOUPE_GPU_MAGIC | LOUPE_GPU_VERSION);
    }
    loupe_gpu_decoded *d = NULL;
    assert_int_equal(
        loupe_gpu_decode(prof, words, &spec, grid, block, NULL,
                         &(loupe_gpu_decode_options){.overhead_cycles = LOUPE_GPU_OVERHEAD_OFF},
                         &d),
        0);
    assert_int_equal(d->trace_count, 16);
    assert_int_equal(d->events, 32);
    assert_int_equal(d->events_dropped, 16 * 13);
    assert_int_equal(d->traces_truncated, 16);
    assert_int_equal(d->needed_entries, LOUPE_GPU_HEADER_WORDS + 30);
    assert_true(d->ghz_measured);
    /* Emulated time: each clock read advances both clocks by 100; the start reads the timer
     * before the clock and the finish after it (as on the GPU), so a leader's 4 clock reads
     * span 300 cycles over 400 ns. */
    assert_true(fabs(d->ghz - 0.75) < 1e-12);
    for (size_t t = 0; t < d->trace_count; t++) {
        const loupe_gpu_trace *tr = &d->traces[t];
        assert_int_equal(tr->smid, tr->block_linear % 2 + 2 * (tr->block_linear / 2));
        assert_int_equal(tr->event_count, 3); /* B 0, i 7, synthetic E 0 */
        assert_int_equal(tr->events[0].kind, LOUPE_GPU_BEGIN);
        assert_int_equal(tr->events[1].kind, LOUPE_GPU_INSTANT);
        assert_int_equal(tr->events[1].name_id, 7);
        assert_int_equal(tr->events[2].synthetic, 1);
        /* 100 and 200 cycles after the start at 0.75 cycles per ns: 133 and 267 ns */
        assert_int_equal(tr->events[0].ts_ns - tr->gt_start_ns, 133);
        assert_int_equal(tr->events[1].ts_ns - tr->gt_start_ns, 267);
    }
    /* Strict: the all-or-nothing error, with the capacity that would have held everything. */
    loupe_gpu_decoded *s = NULL;
    assert_int_equal(loupe_gpu_decode(prof, words, &spec, grid, block, NULL,
                                      &(loupe_gpu_decode_options){.strict = 1}, &s),
                     LOUPE_EGPU_OVERFLOW);
    loupe_gpu_decoded_free(d);
    free(mem);
}

static void test_full_capacity_and_null_buffer(void **state) {
    (void)state;
    const uint32_t grid[3] = {3, 1, 1}, block[3] = {256, 1, 1};
    loupe_gpu_spec spec = {.entries_per_trace = LOUPE_GPU_HEADER_WORDS + 24}; /* warpgroup */
    size_t words = loupe_gpu_buffer_bytes(&spec, grid, block) / 4;
    uint32_t *prof = calloc(words, 4);
    launch(prof, spec.entries_per_trace, 128, 4, grid, block); /* 12 events: exactly full */
    loupe_gpu_decoded *d = NULL;
    assert_int_equal(loupe_gpu_decode(prof, words, &spec, grid, block, NULL, NULL, &d), 0);
    assert_int_equal(d->trace_count, 6);
    assert_int_equal(d->events, 6 * 12);
    assert_int_equal(d->events_dropped, 0);
    assert_int_equal(d->unclosed + d->unmatched_ends + d->backward_steps, 0);
    assert_int_equal(d->needed_entries, spec.entries_per_trace);
    assert_int_equal(d->overhead_cycles, 11); /* steps of 100: Mosaic's cap of 12 - 1 */
    assert_int_equal(d->traces[0].event_count, 12);
    loupe_gpu_decoded_free(d);
    /* A NULL buffer: nothing written anywhere (the emulated clocks are not even read). */
    uint32_t before = emu_clock;
    launch(NULL, spec.entries_per_trace, 128, 4, grid, block);
    assert_int_equal(emu_clock, before);
    free(prof);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_capacity_never_overruns),
        cmocka_unit_test(test_full_capacity_and_null_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
