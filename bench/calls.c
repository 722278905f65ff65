/* calls.c: the call-heavy function for function tracing. Built three ways (CMake sets
 * BENCH_CALLS_PREFIX): into loupe_bench with -finstrument-functions (bench_fi_*) and without it
 * (bench_fp_*), and into the standalone programs that uftrace records (calls_main.c).
 *
 * run(n) calls leaf() n times. leaf is tiny and noipa so that every call stays a real call
 * whose cost is mostly the instrumentation's.
 */
#include "bench.h"

#ifndef BENCH_CALLS_PREFIX
#error "define BENCH_CALLS_PREFIX (bench_fi_ or bench_fp_)"
#endif
#define CALLS_CAT2(a, b) a##b
#define CALLS_CAT(a, b) CALLS_CAT2(a, b)
#define CALLS_FN(x) CALLS_CAT(BENCH_CALLS_PREFIX, x)

/* noipa (GCC) keeps the compiler from treating leaf() as known-pure across the call; clang has
 * no such attribute and does not need it here (noinline plus the asm barrier suffice). */
#if defined(__clang__)
#define CALLS_NOIPA noinline
#else
#define CALLS_NOIPA noinline, noipa
#endif

uint64_t CALLS_FN(leaf)(uint64_t x);
uint64_t CALLS_FN(run)(uint64_t n);

__attribute__((CALLS_NOIPA)) uint64_t CALLS_FN(leaf)(uint64_t x) {
    __asm__ volatile("" : "+r"(x));
    return x * 2654435761u + 1;
}

__attribute__((CALLS_NOIPA)) uint64_t CALLS_FN(run)(uint64_t n) {
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        acc += CALLS_FN(leaf)(i);
    }
    return acc;
}
