/* clock.c: timestamps. The hot path reads the raw TSC (annotate.h) when the CPU has an invariant
 * TSC (CPUID 0x80000007 EDX bit 8, "constant_tsc nonstop_tsc" in /proc/cpuinfo), else
 * CLOCK_MONOTONIC in ns; the choice is recorded in the trace ("clock" metadata).
 *
 * Ticks become ns at collection time. The rate is measured, not assumed: the first call takes a
 * (TSC, CLOCK_MONOTONIC) pair and every later call takes another, so the rate comes from the
 * longest baseline since the process started (the error is ~50 ns of pair jitter over that
 * baseline: 5e-5 after 1 ms, 5e-8 after 1 s). Env LOUPE_CLOCK=monotonic forces the fallback.
 */
#include "base/clock.h"

#include <loupe/annotate.h>
#include <pthread.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* Read inline by the hot path (loupe__now in loupe/annotate.h): set once by loupe__clock_init. */
int loupe__use_tsc;

static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t base_ticks, base_ns;
static double last_rate = 1.0;

uint64_t loupe__mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* LOUPE_TEST_CLOCK_SHIFT_NS (tests only, docs/mpi.md): shifts this process's wall clock, and so
 * its traces' origin, by that many ns, as if its host's clock were off: the MPI tests check that
 * the run directory's merge removes a known offset. libloupe_mpi.so reads it too, so that its
 * clock measurements see the same shifted clock. getenv only reads: async-signal-safe in
 * practice (nothing here runs while the environment is being changed). */
static int64_t test_shift_ns(void) {
    const char *s = getenv("LOUPE_TEST_CLOCK_SHIFT_NS");
    return s != NULL && s[0] ? strtoll(s, NULL, 10) : 0;
}

uint64_t loupe__realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + (uint64_t)test_shift_ns();
}

uint64_t loupe__realtime_at(uint64_t mono_ns) {
    /* The tightest of a few (monotonic, realtime, monotonic) brackets: a thread preempted
     * between two separate reads would put its whole trace's origin off by the preemption
     * (hundreds of µs on a loaded node), which no later clock measurement could see. */
    uint64_t best = UINT64_MAX;
    int64_t delta = 0; /* realtime - monotonic */
    for (int i = 0; i < 5; i++) {
        uint64_t m0 = loupe__mono_ns();
        uint64_t r = loupe__realtime_ns();
        uint64_t m1 = loupe__mono_ns();
        if (m1 - m0 < best) {
            best = m1 - m0;
            delta = (int64_t)(r - (m0 + (m1 - m0) / 2));
        }
    }
    return (uint64_t)((int64_t)mono_ns + delta);
}

uint64_t loupe__now_slow(void) {
    return loupe__mono_ns();
}

static int invariant_tsc(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u) {
        __get_cpuid(0x80000007u, &a, &b, &c, &d);
        return (d >> 8) & 1u;
    }
#endif
    return 0;
}

void loupe__clock_pair(uint64_t *ticks, uint64_t *mono_ns) {
    *ticks = *mono_ns = 0;
    if (!loupe__use_tsc) {
        *ticks = *mono_ns = loupe__mono_ns();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    /* Keep the tightest of a few tries: the pair's error is half the bracket. */
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = __builtin_ia32_rdtsc();
        uint64_t ns = loupe__mono_ns();
        uint64_t t1 = __builtin_ia32_rdtsc();
        if (t1 - t0 < best) {
            best = t1 - t0;
            *ticks = t0 + (t1 - t0) / 2;
            *mono_ns = ns;
        }
    }
#endif
}

static void init_once(void) {
    const char *env = getenv("LOUPE_CLOCK");
    int force_mono = env != NULL && strcmp(env, "monotonic") == 0;
    __atomic_store_n(&loupe__use_tsc, !force_mono && invariant_tsc(), __ATOMIC_RELAXED);
    loupe__clock_pair(&base_ticks, &base_ns);
}

void loupe__clock_init(void) {
    (void)pthread_once(&clock_once, init_once);
}

double loupe__ticks_per_ns(void) {
    loupe__clock_init();
    if (!loupe__use_tsc) {
        return 1.0;
    }
    uint64_t t = 0, ns = 0;
    loupe__clock_pair(&t, &ns);
    pthread_mutex_lock(&clock_lock);
    if (ns > base_ns + 100000) { /* >= 100 µs of baseline */
        last_rate = (double)(t - base_ticks) / (double)(ns - base_ns);
    } else if (last_rate == 1.0) {
        /* Too short to measure yet: wait for a 1 ms baseline (once per process). */
        pthread_mutex_unlock(&clock_lock);
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
        return loupe__ticks_per_ns();
    }
    double r = last_rate;
    pthread_mutex_unlock(&clock_lock);
    return r;
}
