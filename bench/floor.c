/* floor.c: the floors every recording case is divided by, measured in the same process run.
 *
 * Per iteration the rdtsc floor does what a zone must do at least: read the TSC twice and store
 * two 16-byte events (timestamp, source-location pointer) into a per-thread ring that stays in
 * cache (4096 slots, 64 KiB). The clock floor does the same with clock_gettime(CLOCK_MONOTONIC)
 * (the vDSO), the cost a recorder pays without the TSC. The ring index stays in a register: no
 * recorder can do less.
 */
#include "bench.h"

#include <time.h>

typedef struct floor_ev {
    uint64_t a, b;
} floor_ev;

#define RING_SLOTS 4096u /* 64 KiB: L2-resident */

static _Thread_local floor_ev ring[RING_SLOTS] __attribute__((aligned(64)));
static _Thread_local uint32_t ring_pos;
static const char floor_name[] __attribute__((aligned(16))) = "zone";

static inline uint64_t tsc(void) {
    return __builtin_ia32_rdtsc();
}

static inline uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define FLOOR_LOOP(now)                                                                            \
    do {                                                                                           \
        uint32_t j = ring_pos;                                                                     \
        const uint64_t loc = (uint64_t)(uintptr_t)floor_name;                                      \
        for (uint64_t i = 0; i < n; i++) {                                                         \
            ring[j].a = now();                                                                     \
            ring[j].b = loc;                                                                       \
            j = (j + 1) & (RING_SLOTS - 1);                                                        \
            __asm__ volatile("");                                                                  \
            ring[j].a = now();                                                                     \
            ring[j].b = loc | 1;                                                                   \
            j = (j + 1) & (RING_SLOTS - 1);                                                        \
        }                                                                                          \
        ring_pos = j;                                                                              \
    } while (0)

__attribute__((noinline)) void bench_floor_rdtsc(uint64_t n) {
    FLOOR_LOOP(tsc);
}

__attribute__((noinline)) void bench_floor_clock(uint64_t n) {
    FLOOR_LOOP(mono_ns);
}

__attribute__((noinline)) void bench_empty_loop(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        __asm__ volatile("");
    }
}

uint64_t bench_floor_checksum(void) {
    uint64_t s = 0;
    for (uint32_t i = 0; i < RING_SLOTS; i++) {
        s += ring[i].a ^ ring[i].b;
    }
    return s;
}
