/* bench.h: the loops the benchmark's cases time (harness.h declares the harness).
 *
 * The loops live in separate translation units because each needs its own compile flags:
 * floor.c (no loupe), zones.c (loupe on), zones_off.c (-DLOUPE_DISABLE), calls.c (built with
 * and without -finstrument-functions), lttng_case.c (LTTng-UST tracepoints). Every loop is a
 * non-inlined function taking its iteration count, so that the harness can time any of them
 * alike.
 */
#ifndef LOUPE_BENCH_H
#define LOUPE_BENCH_H

#include <stdint.h>

typedef void (*bench_loop_fn)(uint64_t n);

/* floor.c: what a zone must do at least, per iteration: two timestamps and two 16-byte stores
 * into a thread-local ring that stays in cache. */
void bench_floor_rdtsc(uint64_t n);
void bench_floor_clock(uint64_t n);
/* The empty loop (the loop overhead the cheapest cases are compared with). */
void bench_empty_loop(uint64_t n);
/* Sums the calling thread's ring, so that its stores are observable. */
uint64_t bench_floor_checksum(void);
/* floor.c: a recorder's least (a thread-local cursor, a room test, fresh populated memory; no
 * session test, guard or reserve), for one thread: bench_least_prepare maps and populates room
 * for `events` 16-byte slots (0, or -1 when the mapping failed); bench_least_zone writes 2 slots
 * per iteration, bench_least_args 4 (a zone with two one-slot arguments); bench_least_release
 * unmaps it and returns the slots that found no room (0 when the room was enough). */
int bench_least_prepare(uint64_t events);
uint64_t bench_least_release(void);
void bench_least_zone(uint64_t n);
void bench_least_args(uint64_t n);

/* zones.c: loupe's recording cases (one zone per iteration unless said). */
void bench_zone_static(uint64_t n);
void bench_zone_explicit(uint64_t n);
void bench_zone_dyn(uint64_t n);        /* 16-byte dynamic name */
void bench_zone_args(uint64_t n);       /* a static zone with two int64 arguments */
void bench_zone_args_fused(uint64_t n); /* the same in one LOUPE_ZONE_ARGS call */
void bench_counter(uint64_t n);         /* one LOUPE_COUNTER_I64 sample per iteration */
/* The dynamic name the dyn case copies (16 bytes, without the NUL). */
#define BENCH_DYN_NAME "dynamic_zone_016"

/* zones_off.c: the static zone compiled with LOUPE_DISABLE. */
void bench_zone_static_off(uint64_t n);

/* calls.c, compiled twice: bench_fi_* with -finstrument-functions, bench_fp_* without. Each
 * run(n) makes n calls of a small non-inlined leaf function. bench_calls_* (case_calls.c) are
 * the two as loops. */
uint64_t bench_fi_run(uint64_t n);
uint64_t bench_fp_run(uint64_t n);
void bench_calls_instrumented(uint64_t n);
void bench_calls_plain(uint64_t n);

/* lttng_case.c (only with LTTng-UST): a begin and an end tracepoint per iteration. */
void bench_lttng_zone(uint64_t n);
/* Non-zero when the session daemon has enabled the begin tracepoint in this process. */
int bench_lttng_enabled(void);

#endif
