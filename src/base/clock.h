/* clock.h: the trace clock (clock.c). The hot path reads the raw TSC inline (loupe/annotate.h,
 * loupe__now) when loupe__use_tsc is set, else CLOCK_MONOTONIC in ns; everything below turns
 * ticks into nanoseconds at collection time with a measured rate. */
#ifndef LOUPE_BASE_CLOCK_H
#define LOUPE_BASE_CLOCK_H

#include <loupe/export.h>

#include <stdint.h>

/* Chooses the clock once per process (CPUID invariant TSC, env LOUPE_CLOCK=monotonic) and takes
 * the first (tick, ns) pair of the rate baseline. Thread-safety: any thread (pthread_once). */
void loupe__clock_init(void);
/* CLOCK_MONOTONIC / CLOCK_REALTIME in ns. Async-signal-safe (clock_gettime). */
uint64_t loupe__mono_ns(void);
LOUPE_API uint64_t loupe__realtime_ns(void);
/* CLOCK_REALTIME at the moment CLOCK_MONOTONIC read mono_ns, from the tightest of a few
 * (monotonic, realtime, monotonic) brackets. Async-signal-safe. */
uint64_t loupe__realtime_at(uint64_t mono_ns);
/* A (tick, CLOCK_MONOTONIC ns) pair read as close together as possible (the tightest of a few
 * brackets). Ticks are ns when the TSC is not used. */
void loupe__clock_pair(uint64_t *ticks, uint64_t *mono_ns);
/* Ticks per ns, from the longest baseline available since the process started; 1.0 without the
 * TSC. The first call may sleep 1 ms to get a baseline. */
double loupe__ticks_per_ns(void);

#endif
