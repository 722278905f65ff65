/* floor.c: the floors every recording case is divided by, measured in the same process run.
 *
 * Per iteration the rdtsc floor does what a zone must do at least: read the TSC twice and store
 * two 16-byte events (timestamp, source-location pointer) into a per-thread ring that stays in
 * cache (4096 slots, 64 KiB). The clock floor does the same with clock_gettime(CLOCK_MONOTONIC)
 * (the vDSO), the cost a recorder pays without the TSC. The ring index stays in a register: no
 * recorder can do less.
 */
#include "bench.h"

#include <sys/mman.h>
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

/* ---- a recorder's least ----
 * The rdtsc floor keeps its ring index in a register and writes a ring that stays in cache: no
 * recorder can do that, since its cursor outlives the call and its events must be kept. These
 * loops are the least a recorder that keeps its events does per event, and nothing more: read a
 * thread-local buffer pointer and test it, read the TSC (for a timed event), load the cursor,
 * test the room against the limit, prefetch for writing 1 KiB ahead, store the 16-byte slot,
 * publish the cursor (a release store). No session or level test, no reentrancy guard, no
 * reserve for the zone's end: what loupe adds to this is its cost for safety (annotate.h's
 * signal-safety guarantee) and for keep-first's whole zones. The buffer is populated fresh
 * memory (MAP_POPULATE), as the pool's chunks are, and is written forward only. */

typedef struct least_buf {
    floor_ev *cur, *limit;
} least_buf;

static least_buf least_shared; /* one buffer: the least rows run on one thread */
static _Thread_local least_buf *least_tls;
static void *least_base;
static size_t least_size;
static uint64_t least_full_count;

int bench_least_prepare(uint64_t events) {
    bench_least_release();
    size_t size = (size_t)events * sizeof(floor_ev);
    void *p =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        return -1;
    }
    least_base = p;
    least_size = size;
    least_shared.cur = p;
    least_shared.limit = (floor_ev *)p + events;
    least_full_count = 0;
    return 0;
}

uint64_t bench_least_release(void) {
    if (least_base != NULL) {
        munmap(least_base, least_size);
        least_base = NULL;
        least_shared.cur = least_shared.limit = NULL;
    }
    return least_full_count;
}

/* Out of line, as a recorder's slow path: counts an event that found no room. */
__attribute__((noinline)) static void least_full(void) {
    least_full_count++;
}

/* One 16-byte slot {a, b}; a timed slot reads the TSC after the buffer test, as loupe does. */
#define LEAST_PUSH(a_expr, b_val)                                                                  \
    do {                                                                                           \
        least_buf *t = least_tls;                                                                  \
        if (__builtin_expect(t != NULL, 1)) {                                                      \
            uint64_t a_ = (a_expr);                                                                \
            floor_ev *e = t->cur;                                                                  \
            if (__builtin_expect(e < t->limit, 1)) {                                               \
                __builtin_prefetch(e + 64, 1, 3);                                                  \
                __atomic_store_n(&e->a, a_, __ATOMIC_RELAXED);                                     \
                __atomic_store_n(&e->b, (b_val), __ATOMIC_RELAXED);                                \
                __atomic_store_n(&t->cur, e + 1, __ATOMIC_RELEASE);                                \
            } else {                                                                               \
                least_full();                                                                      \
            }                                                                                      \
        } else {                                                                                   \
            least_tls = &least_shared; /* the thread's first event: it takes the buffer */         \
        }                                                                                          \
    } while (0)

__attribute__((noinline)) void bench_least_zone(uint64_t n) {
    const uint64_t loc = (uint64_t)(uintptr_t)floor_name;
    for (uint64_t i = 0; i < n; i++) {
        LEAST_PUSH(tsc(), loc);
        __asm__ volatile("");
        LEAST_PUSH(tsc(), loc | 1);
    }
}

__attribute__((noinline)) void bench_least_args(uint64_t n) {
    const uint64_t loc = (uint64_t)(uintptr_t)floor_name;
    for (uint64_t i = 0; i < n; i++) {
        LEAST_PUSH(tsc(), loc);
        LEAST_PUSH(i, loc | 2);         /* an argument: its value and its key, one slot */
        LEAST_PUSH(4096, loc | 2 | 16); /* untimed, as loupe's */
        __asm__ volatile("");
        LEAST_PUSH(tsc(), loc | 1);
    }
}
