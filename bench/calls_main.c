/* calls_main.c: the standalone call-heavy program that uftrace records (loupe_bench_calls, built
 * with -finstrument-functions, which uftrace hooks through the PLT) and its uninstrumented twin
 * (loupe_bench_calls_plain). It times its own loop, so that uftrace's start-up and the writing of
 * its data files stay out of the figure, and prints
 *     LOUPE_BENCH_CALLS ns=<loop ns> n=<calls>
 * Usage: loupe_bench_calls N */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t bench_fx_run(uint64_t n);

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s N\n", argv[0]);
        return 2;
    }
    uint64_t n = strtoull(argv[1], NULL, 10);
    uint64_t t0 = mono_ns();
    uint64_t r = bench_fx_run(n);
    uint64_t t1 = mono_ns();
    printf("LOUPE_BENCH_CALLS ns=%llu n=%llu check=%llu\n", (unsigned long long)(t1 - t0),
           (unsigned long long)n, (unsigned long long)r);
    return 0;
}
