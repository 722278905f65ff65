/* main.c: loupe_bench, the benchmark suite. One run of this one process measures the floors,
 * loupe's recording cases, the peers (LTTng-UST in-process, uftrace on a child program) and
 * loupe's export, prints one table and optionally writes it as JSON (--json FILE). Here: the
 * configuration, the arguments, the case registry and main; harness.h says where the rest lives.
 *
 * Method (docs/performance.md says it for users):
 * - Every figure is the median of `reps` timed repetitions after one untimed warm-up repetition
 *   of the same size; min and max are given with it.
 * - Single-thread cases run on one pinned CPU and are timed with CLOCK_MONOTONIC around each
 *   repetition. Multi-thread cases pin thread i to CPU i % ncpu, start each repetition together
 *   (a barrier) and time each thread with CLOCK_THREAD_CPUTIME_ID: the figure is CPU time per
 *   zone per thread, which stays meaningful with more threads than CPUs.
 * - Ratios are to the rdtsc floor measured earlier in the same process (for the thread cases:
 *   the one-thread floor measured with the same harness).
 * - loupe's recording cases run in a session whose buffer holds every event of the case
 *   (warm-up included): what is timed is the recording path, never the drop path. After the case
 *   the session is stopped and the recorded and dropped counts are checked and reported. The
 *   stop (which writes only the Perfetto protobuf, the fastest writer) is not timed there; the
 *   export rows time a stop per format.
 * - Nothing is faked: a peer that cannot run is a row with "n/a" and the reason.
 */
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- configuration ---- */

bench_config bench_cfg = {.reps = 7, .scale = 1.0};
char bench_work_dir[256];
char bench_self_dir[4096];
int bench_ncpu;
static int pin_cpu; /* the CPU the single-thread cases run on */

/* ---- the case registry ---- */

enum { RUN_ALWAYS, RUN_PEER, RUN_EXPORT };

/* A group of cases on one topic: one progress line, one function that adds its rows. */
typedef struct bench_group {
    const char *name;                  /* the progress line on stderr */
    void (*run)(void);                 /* adds the group's rows */
    int when;                          /* RUN_PEER: not with --no-peers; RUN_EXPORT: --no-export */
    void (*skipped)(const char *flag); /* adds the rows of the skipped group, or NULL */
} bench_group;

/* In the order they run; the table lists their rows in the same order. */
static const bench_group groups[] = {
    {"floors", bench_cases_floors, RUN_ALWAYS, NULL},
    {"loupe, one thread", bench_cases_zones, RUN_ALWAYS, NULL},
    {"threads", bench_cases_threads, RUN_ALWAYS, NULL},
    {"function tracing", bench_cases_calls, RUN_ALWAYS, NULL},
    {"thread lives", bench_cases_record, RUN_ALWAYS, NULL},
    {"LTTng-UST", bench_cases_lttng, RUN_PEER, bench_skip_lttng},
    {"uftrace", bench_cases_uftrace, RUN_PEER, bench_skip_uftrace},
    {"export", bench_cases_export, RUN_EXPORT, NULL},
    {"read", bench_cases_read, RUN_EXPORT, NULL},
};

/* The option that skips a group of this kind in this run, or NULL. */
static const char *skipped_by(int when) {
    if (when == RUN_PEER && bench_cfg.skip_peers) {
        return "--no-peers";
    }
    if (when == RUN_EXPORT && bench_cfg.skip_export) {
        return "--no-export";
    }
    return NULL;
}

/* ---- main ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe_bench [--json FILE] [--reps N] [--quick] [--no-peers] [--no-export]\n"
            "                   [--keep] [--only GROUP]\n"
            "Measures loupe's recording cost against an rdtsc floor and peers (LTTng-UST,\n"
            "uftrace) in one process run, and loupe's export speed and sizes; prints a table.\n"
            "  --json FILE  also write the figures as JSON\n"
            "  --reps N     timed repetitions per case (default 7, at most %d)\n"
            "  --quick      a tenth of the iterations (a smoke run; figures are noisier)\n"
            "  --no-peers   skip LTTng-UST recording and uftrace\n"
            "  --no-export  skip the 10M-zone export case and the read case\n"
            "  --keep       keep the traces written (path printed at the end)\n"
            "  --only GROUP run one group of cases alone (its progress line's name: floors,\n"
            "               threads, export, read, ...)\n"
            "For LTTng-UST's recording case, lttng-sessiond must run before loupe_bench starts\n"
            "(bench/run.sh starts one).\n",
            BENCH_MAX_REPS);
}

static int parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0 && i + 1 < argc) {
            bench_cfg.json = argv[++i];
        } else if (strcmp(a, "--reps") == 0 && i + 1 < argc) {
            bench_cfg.reps = atoi(argv[++i]);
            if (bench_cfg.reps < 1 || bench_cfg.reps > BENCH_MAX_REPS) {
                fprintf(stderr, "loupe_bench: --reps must be 1..%d\n", BENCH_MAX_REPS);
                return 2;
            }
        } else if (strcmp(a, "--quick") == 0) {
            bench_cfg.scale = 0.1;
        } else if (strcmp(a, "--no-peers") == 0) {
            bench_cfg.skip_peers = 1;
        } else if (strcmp(a, "--no-export") == 0) {
            bench_cfg.skip_export = 1;
        } else if (strcmp(a, "--only") == 0 && i + 1 < argc) {
            bench_cfg.only = argv[++i];
        } else if (strcmp(a, "--keep") == 0) {
            bench_cfg.keep = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "loupe_bench: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int r = parse_args(argc, argv);
    if (r != 0) {
        return r;
    }
    bench_ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (bench_ncpu < 1) {
        bench_ncpu = 1;
    }
    if (bench_ncpu > 8) {
        bench_ncpu = 8;
    }
    pin_cpu = bench_ncpu - 1;
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = 0;
    char *slash = strrchr(exe, '/');
    snprintf(bench_self_dir, sizeof bench_self_dir, "%.*s", slash ? (int)(slash - exe) : 1,
             slash ? exe : ".");
    const char *tmp = getenv("TMPDIR");
    snprintf(bench_work_dir, sizeof bench_work_dir, "%s/loupe-bench-XXXXXX",
             tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(bench_work_dir) == NULL) {
        fprintf(stderr, "loupe_bench: cannot create %s: %s\n", bench_work_dir, strerror(errno));
        return 1;
    }
    bench_machine_info();

    /* Let the CPU and any daemon started with us settle before the first figure. */
    bench_pin_to(pin_cpu);
    for (uint64_t t0 = bench_mono_ns(); bench_mono_ns() - t0 < 300000000u;) {
        bench_floor_rdtsc(10000);
    }

    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        const bench_group *g = &groups[i];
        if (bench_cfg.only != NULL && strcmp(bench_cfg.only, g->name) != 0) {
            continue;
        }
        const char *flag = skipped_by(g->when);
        if (flag != NULL) {
            if (g->skipped != NULL) {
                g->skipped(flag);
            }
            continue;
        }
        fprintf(stderr, "loupe_bench: %s\n", g->name);
        g->run();
    }

    bench_evaluate_targets();
    bench_print_table();
    if (bench_cfg.keep) {
        printf("\ntraces kept under %s\n", bench_work_dir);
    } else {
        bench_rm_rf(bench_work_dir);
    }
    if (bench_cfg.json != NULL && bench_write_json(bench_cfg.json) != 0) {
        return 1;
    }
    return 0;
}
