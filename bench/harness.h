/* harness.h: what loupe_bench's harness offers its case files, and the case groups it runs.
 *
 * The harness is main.c (configuration, arguments, the case registry), harness.c (rows,
 * statistics, the timing loops, loupe sessions around a case), report.c (the machine, the
 * targets, the table and the JSON) and util.c (process and file helpers). Each case_*.c file
 * adds the rows of one topic; main.c's registry lists them in the order they run and print.
 * The loops they time are declared in bench.h.
 */
#ifndef LOUPE_BENCH_HARNESS_H
#define LOUPE_BENCH_HARNESS_H

#include "bench.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* ---- configuration (main.c) ---- */

typedef struct bench_config {
    int reps;         /* timed repetitions per case */
    double scale;     /* multiplies every iteration count (--quick: 0.1) */
    const char *json; /* --json FILE */
    int keep;         /* --keep: leave the trace files in the work directory */
    int skip_peers;   /* --no-peers */
    int skip_export;  /* --no-export */
    const char *only; /* --only GROUP: run that group alone */
} bench_config;

extern bench_config bench_cfg;
extern char bench_work_dir[256];  /* mkdtemp: log dirs, LTTng and uftrace output */
extern char bench_self_dir[4096]; /* the directory of this executable (the uftrace programs) */
extern int bench_ncpu;            /* online CPUs, at most 8 */

#define BENCH_MAX_REPS 64

/* n times --quick's scale, at least 1000. Inline, as are bench_mono_ns and bench_floor_n:
 * they are called inside timed intervals. */
static inline uint64_t bench_scaled(uint64_t n) {
    double v = (double)n * bench_cfg.scale;
    return v < 1000.0 ? 1000u : (uint64_t)v;
}

/* ---- rows and statistics (harness.c) ---- */

/* One row of the table (one element of the JSON's "cases"). */
typedef struct bench_case {
    char name[80];
    char unit[24];
    double med, min, max;
    double floor; /* median of the rdtsc floor repetitions interleaved with this case, or NAN */
    double ratio; /* med / floor; NAN: not a time comparable with the floor */
    int na;       /* not measured: note says why */
    char note[200];
} bench_case;

#define BENCH_MAX_CASES 80
extern bench_case bench_cases[BENCH_MAX_CASES];
extern size_t bench_ncases;

/* Appends a row (figures NAN); exits when there are BENCH_MAX_CASES already. */
bench_case *bench_add_case(const char *name, const char *unit);
/* Appends a row that was not measured, why being the note. */
bench_case *bench_add_na(const char *name, const char *unit, const char *why);
/* Appends to the row's note ("; " between notes). */
void bench_note(bench_case *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double bench_median(const double *v, int n);
/* Sets median, min and max from n samples; with fs (the floor repetitions interleaved with
 * them), the floor's median and the ratio to it. */
void bench_set_stats(bench_case *c, const double *s, int n, const double *fs);
/* One figure: median = min = max = v. */
void bench_set_value(bench_case *c, double v);

/* The rows and figures the targets table reads; the case files set them (NULL or NAN: not
 * run). Defined in report.c. */
typedef struct bench_keys {
    bench_case *zone_static, *notrace, *off, *empty, *dyn, *mt[3], *lttng, *evps, *memzone,
        *pf_evps, *pf_bytes;
    bench_case *rd_json, *rd_xplane, *rd_pf; /* case_read.c */
    bench_case *args_cpu, *args_fused_cpu;   /* case_zones.c: CPU-time rows */
    bench_case *least_zone, *least_args;     /* a recorder's least (floor.c), CPU-time rows */
    bench_case *wr_json, *wr_xplane, *wr_pf; /* case_export.c: the write, its thread's CPU time */
    bench_case *rec_first, *rec_create, *rec_churn, *rec_churn_rss,
        *rec_churn_vm; /* case_record.c */
    double stop_extra_per_event, model_per_event;
    double compiled_out_delta; /* median of (compiled out - empty loop), paired */
} bench_keys;

extern bench_keys bench_k;

/* ---- timing (harness.c) ---- */

static inline uint64_t bench_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
void bench_pin_to(int cpu);
/* Lets the calling thread run on every CPU again. */
void bench_unpin(void);
/* Iterations of one floor repetition interleaved with a case. */
static inline uint64_t bench_floor_n(void) {
    return bench_scaled(500000);
}
/* Times k loops on this (pinned) thread: one warm-up of each, then bench_cfg.reps rounds; a
 * round runs the rdtsc floor (when fs is not NULL) and then each loop once. s[j][r] and fs[r]:
 * ns per iteration. */
void bench_time_multi(const bench_loop_fn *fns, const uint64_t *ns, int k,
                      double s[][BENCH_MAX_REPS], double *fs);
/* One loop with the floor interleaved (fs NULL: without). */
void bench_time_loop(bench_loop_fn fn, uint64_t n, double *s, double *fs);
/* Runs fn(n) on nthreads (at most 8) threads pinned round-robin, bench_cfg.reps times together,
 * each time after the rdtsc floor on the same threads; s[r] and fs[r] = CPU ns per iteration
 * per thread (the mean over threads) of repetition r. */
void bench_time_threads(bench_loop_fn fn, uint64_t n, int nthreads, double *s, double *fs);
/* The CPU-time row of one of floor.c's least-recorder loops on one thread (as
 * bench_time_threads, the rdtsc floor interleaved), writing slots_per_iter slots an iteration
 * into a buffer that holds them all; notes a slot that found no room. */
bench_case *bench_least_row(const char *name, bench_loop_fn fn, uint64_t n,
                            unsigned slots_per_iter);

/* ---- loupe sessions around a case (harness.c) ---- */

/* Starts a session under the work directory that writes only the Perfetto protobuf; returns
 * loupe_start_trace's result (and says why on stderr when it failed). */
int bench_session_start(uint64_t buffer_events, int function_tracing);
/* Stops the session and notes what it recorded against what the case should have recorded. */
void bench_session_stop(bench_case *c, uint64_t expected_events);
/* A single-thread loupe case: the session's buffer holds (reps + 1) * n * events_per_iter
 * (at least buffer_events). */
bench_case *bench_loupe_case(const char *name, const char *unit, bench_loop_fn fn, uint64_t n,
                             unsigned events_per_iter, uint64_t buffer_events);

/* ---- process and file helpers (util.c) ---- */

/* Reads the first line of a file into buf ("" when it cannot). */
void bench_read_line(const char *path, char *buf, size_t size);
/* Finds an executable in PATH; returns 1 and its path in out. */
int bench_find_in_path(const char *name, char *out, size_t size);
/* Bytes in the regular files under path. */
uint64_t bench_du_bytes(const char *path);
void bench_rm_rf(const char *path);
/* Runs argv (PATH lookup), stdout and stderr into out (NUL-terminated, cut to size).
 * all_cpus: the child may run on every CPU (a tracer's own writer threads must not share the
 * traced program's CPU). Returns the exit status, or -1 when it could not run. */
int bench_run_cmd(const char *const argv[], char *out, size_t size, int all_cpus);
/* The first non-empty line of s, for messages. */
void bench_first_line(const char *s, char *buf, size_t size);

/* ---- the machine, the targets, the output (report.c) ---- */

/* Reads the CPU, clocks, kernel, compiler and memory; measures the TSC rate (50 ms). */
void bench_machine_info(void);
/* Checks the figures in bench_k against the targets. */
void bench_evaluate_targets(void);
void bench_print_table(void);
/* Returns 0, or -1 (said on stderr). */
int bench_write_json(const char *path);

/* ---- the case groups main.c's registry runs, in this order ---- */

void bench_cases_floors(void);  /* case_floors.c: floors, empty loop, no trace, compiled out */
void bench_cases_zones(void);   /* case_zones.c: loupe's recording cases on one thread */
void bench_cases_threads(void); /* case_threads.c: the static zone on 1, 2 and 4 threads */
void bench_cases_calls(void);   /* case_calls.c: -finstrument-functions, off and recording */
void bench_cases_record(void);  /* case_record.c: a thread's first zone, create cost, churn */
void bench_cases_lttng(void);   /* case_peers.c: LTTng-UST, in this process */
void bench_cases_uftrace(void); /* case_peers.c: uftrace record of a child program */
void bench_cases_export(void);  /* case_export.c: stop and write per format, sizes, memory */
void bench_cases_read(void);    /* case_read.c: loupe_trace_read per format, zlib alone */
/* The rows of a skipped peer group (flag: the option that skipped it). */
void bench_skip_lttng(const char *flag);
void bench_skip_uftrace(const char *flag);

#endif
