/* loupe/cuda/loupe_device.cuh: the in-kernel timeline recorder (device side, CUDA C++).
 *
 * Compiled out unless LOUPE_GPU_ENABLE is defined: then every LOUPE_DEV_* macro expands to
 * nothing and the kernel carries no recording code. With it, a NULL buffer is a run-time no-op
 * (one predicated branch per call).
 *
 *   __global__ void k(float *x, uint32_t *prof, uint32_t entries) {
 *       LOUPE_DEV_INIT(ctx, prof, entries, 128);   // 128: warpgroup scope; 32: warp scope
 *       LOUPE_DEV_BEGIN(ctx, 0);                   // region id 0 ("load" in the host's table)
 *       ...
 *       LOUPE_DEV_END(ctx, 0);
 *       LOUPE_DEV_INSTANT(ctx, 2);
 *       LOUPE_DEV_FINISH(ctx);                     // every thread that called INIT, at the end
 *   }
 *
 * The host sizes the buffer with loupe_gpu_buffer_bytes(), zeroes it (cudaMemset: a slice never
 * finished stays all-zero and decodes as empty), launches, copies it back and decodes it with
 * loupe_gpu_decode() (loupe/gpu.h), which documents the layout this header writes (loupe layout
 * version 1): per trace (one warp or warpgroup: `scope` threads of a block, in linear thread
 * order) a slice of `entries` u32 words, a 9-word header then {tag, %clock} pairs.
 *
 * Recording: only lane 0 of each scope records (the "leader", thread_linear % scope == 0), into
 * its own slice of GLOBAL memory: no shared memory is used, so nothing can corrupt a kernel's
 * shared memory (jax-ml/jax@61f14009ec). Every record is bounds-checked: events past the
 * capacity (entries - 9 words) are not written but counted in the header's `attempted` word.
 * Cost per record on the leader (sm_90, see docs/gpu.md for the SASS): a compare, a %clock read
 * (S2UR/CS2R), two 32-bit global stores, an add; other lanes: one predicated-off branch.
 * Clock facts (PTX ISA, "Special Registers"): %clock is the SM's 32-bit cycle counter,
 * %globaltimer a 64-bit ns timer common to all SMs, %smid the SM (may change on preemption).
 * Ids: 0 .. 2^30-1; bit 31 marks an end, bit 30 an instant (LOUPE_GPU_TAG_* in loupe/gpu.h).
 * Thread-safety: each leader writes only its own slice; no atomics, no fences.
 */
#ifndef LOUPE_CUDA_LOUPE_DEVICE_CUH
#define LOUPE_CUDA_LOUPE_DEVICE_CUH

#include <stddef.h>
#include <stdint.h>

/* Repeated from loupe/gpu.h (host-only header): keep in sync. */
#define LOUPE_DEV_MAGIC_VERSION 0x4C500001u /* LOUPE_GPU_MAGIC | LOUPE_GPU_VERSION */
#define LOUPE_DEV_HEADER_WORDS 9u
#define LOUPE_DEV_TAG_END 0x80000000u
#define LOUPE_DEV_TAG_INSTANT 0x40000000u

#ifdef LOUPE_GPU_ENABLE

/** Per-thread recorder state: lives in registers. */
typedef struct loupe_dev_ctx {
    uint32_t *slice; /* this trace's slice; NULL when off or not the leader */
    uint32_t n;      /* words attempted (2 per event), not clamped */
    uint32_t cap;    /* entries - header */
    uint32_t clk0;
    uint64_t gt0;
} loupe_dev_ctx;

/* LOUPE_DEV_HOST_EMULATION (tests only): the includer provides __device__, __forceinline__,
 * threadIdx/blockIdx/blockDim/gridDim and these three reads, so that the record path runs as
 * host C under the sanitizers (tests/test_gpu_device.c). */
#ifndef LOUPE_DEV_HOST_EMULATION
__device__ __forceinline__ uint32_t loupe_dev_clock(void) {
    uint32_t c;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(c)::"memory");
    return c;
}

__device__ __forceinline__ uint64_t loupe_dev_globaltimer(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

__device__ __forceinline__ uint32_t loupe_dev_smid(void) {
    uint32_t s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
#endif

__device__ __forceinline__ void loupe_dev_init(loupe_dev_ctx *c, uint32_t *buf, uint32_t entries,
                                               uint32_t scope) {
    uint32_t tid = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    uint32_t tpb = (blockDim.x * blockDim.y * blockDim.z) / scope;
    uint64_t block = blockIdx.x + (uint64_t)blockIdx.y * gridDim.x +
                     (uint64_t)blockIdx.z * gridDim.x * gridDim.y;
    c->n = 0;
    c->cap = entries > LOUPE_DEV_HEADER_WORDS ? entries - LOUPE_DEV_HEADER_WORDS : 0;
    c->slice = (buf != NULL && entries >= LOUPE_DEV_HEADER_WORDS && tid % scope == 0)
                   ? buf + (block * tpb + tid / scope) * entries
                   : NULL;
    if (c->slice != NULL) {
        c->gt0 = loupe_dev_globaltimer();
        c->clk0 = loupe_dev_clock();
    }
}

/* The record path: a compare, a clock read, two stores. */
__device__ __forceinline__ void loupe_dev_record(loupe_dev_ctx *c, uint32_t tag) {
    if (c->slice != NULL) {
        uint32_t i = c->n;
        c->n = i + 2;
        if (i + 2 <= c->cap) {
            uint32_t clk = loupe_dev_clock();
            uint32_t *p = c->slice + LOUPE_DEV_HEADER_WORDS + i;
            p[0] = tag;
            p[1] = clk;
        }
    }
}

__device__ __forceinline__ void loupe_dev_finish(loupe_dev_ctx *c) {
    if (c->slice != NULL) {
        uint32_t clk1 = loupe_dev_clock();
        uint64_t gt1 = loupe_dev_globaltimer();
        uint32_t *h = c->slice;
        h[0] = (uint32_t)c->gt0;
        h[1] = loupe_dev_smid();
        h[2] = c->n;
        h[3] = (uint32_t)(c->gt0 >> 32);
        h[4] = (uint32_t)gt1;
        h[5] = (uint32_t)(gt1 >> 32);
        h[6] = c->clk0;
        h[7] = clk1;
        h[8] = LOUPE_DEV_MAGIC_VERSION;
    }
}

#define LOUPE_DEV_INIT(ctx, buf, entries, scope)                                                   \
    loupe_dev_ctx ctx;                                                                             \
    loupe_dev_init(&(ctx), (buf), (entries), (scope))
#define LOUPE_DEV_BEGIN(ctx, id) loupe_dev_record(&(ctx), (uint32_t)(id))
#define LOUPE_DEV_END(ctx, id) loupe_dev_record(&(ctx), (uint32_t)(id) | LOUPE_DEV_TAG_END)
#define LOUPE_DEV_INSTANT(ctx, id) loupe_dev_record(&(ctx), (uint32_t)(id) | LOUPE_DEV_TAG_INSTANT)
#define LOUPE_DEV_FINISH(ctx) loupe_dev_finish(&(ctx))

#else /* compiled out: no code, no state, arguments not evaluated */

#define LOUPE_DEV_INIT(ctx, buf, entries, scope) ((void)0)
#define LOUPE_DEV_BEGIN(ctx, id) ((void)0)
#define LOUPE_DEV_END(ctx, id) ((void)0)
#define LOUPE_DEV_INSTANT(ctx, id) ((void)0)
#define LOUPE_DEV_FINISH(ctx) ((void)0)

#endif
#endif
