/* measure.c: the checks, split and statistics of loupe_gpu_measure() (loupe/gpu.h), the
 * Mosaic GPU profiler's measure() (jax/experimental/mosaic/gpu/profiler.py, Cupti.measure):
 * kernels in launch order are cut into `iterations` equal runs, whose names must repeat; the
 * result is each iteration's sum. The CUPTI side is in cupti.c; `loupe gpu-measure` calls
 * loupe_gpu_measure_kernels() on a trace's kernels. */
#include "base/error.h"
#include "gpu/gpu_internal.h"

#include <loupe/gpu.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPREAD_WARN                                                                                \
    0.05                /* the spread (and first-iteration offset) past which a warning says so    \
                         */
#define MAX_WARMUP 1000 /* warm-up calls allowed */
#define MAX_RESOLUTION 1000u /* the tick estimate's cap, ns */

static const char *const CLOCK_TEXT =
    "CUPTI activity timestamps (the GPU's timer, mapped by CUPTI to CLOCK_REALTIME ns)";

int loupe__gpu_measure_check(const loupe_gpu_measure_options *o, int32_t *iterations,
                             int32_t *warmup) {
    int32_t it = o != NULL ? o->iterations : 1;
    int32_t w = o != NULL ? o->warmup : LOUPE_GPU_MEASURE_WARMUP_DEFAULT;
    if (it < 1) {
        return loupe__err(LOUPE_EINVALID, "iterations=%d must be positive", (int)it);
    }
    if (w < LOUPE_GPU_MEASURE_NO_WARMUP || w > MAX_WARMUP) {
        return loupe__err(LOUPE_EINVALID,
                          "warmup=%d is out of range (-1: none, 0: one call, 1..%d calls)", (int)w,
                          MAX_WARMUP);
    }
    if (o != NULL && o->split != LOUPE_GPU_SPLIT_EVEN && o->split != LOUPE_GPU_SPLIT_GIVEN) {
        return loupe__err(LOUPE_EINVALID, "split=%d is not LOUPE_GPU_SPLIT_EVEN or _GIVEN",
                          (int)o->split);
    }
    *iterations = it;
    *warmup = w == LOUPE_GPU_MEASURE_WARMUP_DEFAULT ? 1 : w < 0 ? 0 : w;
    return 0;
}

/* Launch order: CUPTI's correlation ids grow with each launch in the process; the start breaks
 * a tie (kernels taken from several processes' traces). */
static int by_launch(const void *a, const void *b) {
    const loupe_gpu_kernel_timing *x = a, *y = b;
    if (x->correlation_id != y->correlation_id) {
        return x->correlation_id < y->correlation_id ? -1 : 1;
    }
    return (x->start_unix_ns > y->start_unix_ns) - (x->start_unix_ns < y->start_unix_ns);
}

static int by_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* "3.232 µs" below 1 ms, "1.500 ms" from there. */
static void fmt_dur(char *buf, size_t size, uint64_t ns) {
    if (ns < 1000000) {
        snprintf(buf, size, "%.3f \u00b5s", (double)ns / 1e3);
    } else {
        snprintf(buf, size, "%.3f ms", (double)ns / 1e6);
    }
}

/* Appends a line to r->warnings (owned, "" to start). 0, or -1 on out-of-memory. */
static int warn(loupe_gpu_measure_result *r, const char *line) {
    size_t have = strlen(r->warnings), add = strlen(line);
    char *nw = realloc(r->warnings, have + add + 2);
    if (nw == NULL) {
        return -1;
    }
    if (have > 0) {
        nw[have++] = '\n';
    }
    memcpy(nw + have, line, add + 1);
    r->warnings = nw;
    return 0;
}

static uint64_t median_of(uint64_t *v, size_t n) {
    qsort(v, n, sizeof *v, by_u64);
    return v[(n - 1) / 2];
}

/* The statistics and warnings of a result whose iteration_ns is filled. 0, or -1 (ENOMEM). */
static int statistics(loupe_gpu_measure_result *r) {
    size_t n = r->iterations;
    uint64_t *sorted = malloc(n * sizeof *sorted);
    if (sorted == NULL) {
        return -1;
    }
    memcpy(sorted, r->iteration_ns, n * sizeof *sorted);
    r->median_ns = median_of(sorted, n);
    r->min_ns = sorted[0];
    r->max_ns = sorted[n - 1];
    /* against the max when the median is 0 (most iterations ran nothing): 100%, not 0 */
    uint64_t base = r->median_ns > 0 ? r->median_ns : r->max_ns;
    r->spread = base > 0 ? (double)(r->max_ns - r->min_ns) / (double)base : 0;
    char line[320], a[32], b[32], c[32];
    int failed = 0;
    if (n >= 2 && r->spread > SPREAD_WARN) {
        fmt_dur(a, sizeof a, r->min_ns);
        fmt_dur(b, sizeof b, r->median_ns);
        fmt_dur(c, sizeof c, r->max_ns);
        snprintf(line, sizeof line,
                 "iterations spread %.1f%% (min %s, median %s, max %s): more than %.0f%%",
                 100 * r->spread, a, b, c, 100 * SPREAD_WARN);
        failed |= warn(r, line);
    }
    if (n >= 3) {
        memcpy(sorted, r->iteration_ns + 1, (n - 1) * sizeof *sorted);
        uint64_t rest = median_of(sorted, n - 1), first = r->iteration_ns[0];
        uint64_t off = first > rest ? first - rest : rest - first;
        if (rest > 0 && (double)off > SPREAD_WARN * (double)rest) {
            fmt_dur(a, sizeof a, first);
            fmt_dur(b, sizeof b, rest);
            snprintf(line, sizeof line,
                     "the first iteration (%s) is %.1f%% %s the median of the others (%s): "
                     "more warm-up may be needed",
                     a, 100.0 * (double)off / (double)rest, first > rest ? "above" : "below", b);
            failed |= warn(r, line);
        }
    }
    size_t empty = 0;
    for (size_t i = 0; i < n; i++) {
        empty += r->iteration_ns[i] == 0;
    }
    if (empty > 0 && empty < n) {
        snprintf(line, sizeof line,
                 "%zu of %zu iterations ran no timed kernel: their 0 ns are in the statistics",
                 empty, n);
        failed |= warn(r, line);
    }
    free(sorted);
    return failed;
}

int loupe_gpu_measure_kernels(const loupe_gpu_kernel_timing *kernels, size_t n,
                              const loupe_gpu_measure_options *opts,
                              loupe_gpu_measure_result **out) {
    if (out == NULL || (kernels == NULL && n > 0)) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_measure_kernels: a NULL argument");
    }
    *out = NULL;
    int32_t it, warm;
    int rc = loupe__gpu_measure_check(opts, &it, &warm);
    if (rc != 0) {
        return rc;
    }
    if (n == 0) {
        return 0; /* no kernel ran: Mosaic's None */
    }
    int given = opts != NULL && opts->split == LOUPE_GPU_SPLIT_GIVEN;
    loupe_gpu_measure_result *r = calloc(1, sizeof *r);
    loupe_gpu_kernel_timing *k = malloc(n * sizeof *k);
    if (r == NULL || k == NULL || (r->warnings = calloc(1, 1)) == NULL) {
        free(k);
        loupe_gpu_measure_result_free(r);
        return loupe__err(LOUPE_ENOMEM, "out of memory for a GPU measurement of %zu kernels", n);
    }
    memcpy(k, kernels, n * sizeof *k);
    for (size_t i = 0; i < n; i++) {
        k[i].name = NULL; /* copied below: until then the result owns no name */
    }
    r->kernels = k;
    r->kernel_count = n;
    r->iterations = (uint32_t)it;
    r->clock = CLOCK_TEXT;
    for (size_t i = 0; i < n; i++) {
        k[i].name = strdup(kernels[i].name != NULL ? kernels[i].name : "kernel");
        if (k[i].name == NULL) {
            loupe_gpu_measure_result_free(r);
            return loupe__err(LOUPE_ENOMEM, "out of memory for a GPU measurement's names");
        }
    }
    qsort(k, n, sizeof *k, by_launch);
    if (!given) {
        if (n % (size_t)it != 0) {
            loupe_gpu_measure_result_free(r);
            return loupe__err(
                LOUPE_EINVALID,
                "The number of kernel launches is not divisible by the number of iterations");
        }
        size_t per = n / (size_t)it;
        r->kernels_per_iteration = per;
        for (size_t j = 0; j < per; j++) {
            for (size_t i = 1; i < (size_t)it; i++) {
                if (strcmp(k[i * per + j].name, k[j].name) != 0) {
                    loupe_gpu_measure_result_free(r);
                    return loupe__err(LOUPE_EINVALID,
                                      "Kernel names are not consistent across iterations");
                }
            }
        }
        for (size_t i = 0; i < n; i++) {
            k[i].iteration = (uint32_t)(i / per);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            if (k[i].iteration >= (uint32_t)it) {
                uint32_t bad = k[i].iteration;
                loupe_gpu_measure_result_free(r);
                return loupe__err(LOUPE_EINVALID,
                                  "loupe_gpu_measure_kernels: a kernel's iteration %u is not "
                                  "below iterations=%d",
                                  bad, (int)it);
            }
        }
    }
    r->iteration_ns = calloc((size_t)it, sizeof *r->iteration_ns);
    if (r->iteration_ns == NULL) {
        loupe_gpu_measure_result_free(r);
        return loupe__err(LOUPE_ENOMEM, "out of memory for a GPU measurement");
    }
    uint64_t untimed = 0, tick = 0, t0 = 0, timed = 0;
    int have_t0 = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t *sum = &r->iteration_ns[k[i].iteration];
        *sum = *sum > UINT64_MAX - k[i].dur_ns ? UINT64_MAX : *sum + k[i].dur_ns; /* saturates */
        if (k[i].start_unix_ns == 0) {
            untimed++;
            continue;
        }
        timed++;
        uint64_t ts[2] = {k[i].start_unix_ns, k[i].start_unix_ns + k[i].dur_ns};
        for (int e = 0; e < 2; e++) {
            if (!have_t0) {
                t0 = ts[e];
                have_t0 = 1;
            }
            tick = gcd(tick, ts[e] > t0 ? ts[e] - t0 : t0 - ts[e]);
        }
    }
    /* one kernel's start and end show its duration, not a tick: 0 (unknown) below two */
    r->resolution_ns = timed < 2               ? 0
                       : tick == 0             ? 1
                       : tick > MAX_RESOLUTION ? MAX_RESOLUTION
                                               : tick;
    int failed = statistics(r) != 0;
    if (!failed && untimed > 0) {
        char line[200];
        snprintf(line, sizeof line,
                 "%llu of %zu kernels had no timestamps (CUPTI gives 0 when it has no timing): "
                 "counted as 0 ns",
                 (unsigned long long)untimed, n);
        failed = warn(r, line) != 0;
    }
    if (failed) {
        loupe_gpu_measure_result_free(r);
        return loupe__err(LOUPE_ENOMEM, "out of memory for a GPU measurement");
    }
    if (opts != NULL && opts->aggregate) {
        for (size_t i = 0; i < n; i++) {
            free((char *)(uintptr_t)k[i].name);
        }
        free(k);
        r->kernels = NULL;
    }
    *out = r;
    return 0;
}

void loupe_gpu_measure_result_free(loupe_gpu_measure_result *r) {
    if (r == NULL) {
        return;
    }
    for (size_t i = 0; r->kernels != NULL && i < r->kernel_count; i++) {
        free((char *)(uintptr_t)r->kernels[i].name);
    }
    free(r->kernels);
    free(r->iteration_ns);
    free(r->warnings);
    free(r);
}
