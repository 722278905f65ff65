/* gpu_measure.c: `loupe gpu-measure [options] -- PROG ARGS`: runs PROG under `loupe record --gpu`
 * (the CUPTI device tracer), reads the kernels back from the trace and prints, per kernel name,
 * count, total, mean, p50, min and max, and the iterations' totals with their spread. The
 * iterations are the program's LOUPE_STEP steps (each kernel in the step it was launched in) or
 * an even split of the launches (--iterations N, with Mosaic's checks). Uses only the public API
 * (loupe_gpu_measure_kernels() does the split and statistics, as for loupe_gpu_measure()). */
#include "cli.h"

#include <loupe/loupe.h>

#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe gpu-measure [--iterations N] [--per-kernel] [--json[=FILE]] [-o DIR]\n"
            "                         -- PROGRAM [ARGS...]\n"
            "\n"
            "Times PROGRAM's GPU kernels with CUPTI, as the Mosaic GPU profiler's measure() does\n"
            "for JAX: runs it under `loupe record --gpu --no-sample`, then prints per kernel name\n"
            "the launches, total, mean, p50, min and max GPU time, and the iterations' totals:\n"
            "min, median, max and spread, with a warning when the spread is above 5%% or the\n"
            "first iteration is an outlier. CUPTI allows one subscriber: not under Nsight\n"
            "Systems, Nsight Compute, compute-sanitizer or CUDA-GDB.\n"
            "\n"
            "options:\n"
            "  --iterations N  cut the launches, in launch order, into N equal iterations; the\n"
            "                  count must divide by N and the names repeat in the same order\n"
            "                  (Mosaic's checks). Default: PROGRAM's LOUPE_STEP steps (each\n"
            "                  kernel in the step under way on the thread that launched it;\n"
            "                  steps that launched none are left out) when it marks any, else 1\n"
            "  --per-kernel    also list every iteration's kernels and their times\n"
            "  --json          the whole result as one JSON object on stdout (mixed with\n"
            "                  PROGRAM's own output, if it writes any)\n"
            "  --json=FILE     the JSON object in FILE instead\n"
            "  -o DIR          keep the trace in the log directory DIR (default: a temporary\n"
            "                  one, removed)\n"
            "  -h, --help      this help\n"
            "\n"
            "Times are CUPTI's activity timestamps (the GPU's timer); the resolution line gives\n"
            "the tick they show. The tests' CUPTI is chosen with LOUPE_CUPTI_LIBRARY.\n"
            "\n"
            "exit status: 0 measured; 1 no kernel ran, CUPTI could not be used, or the\n"
            "launches do not split into the iterations; 2 usage; 120-123 loupe record's own\n"
            "(PROGRAM did not run: see `loupe record --help`); PROGRAM's own status when it\n"
            "failed (after the table).\n");
}

typedef struct step {
    uint64_t start, end;
    uint64_t tid; /* the thread that marked it */
    size_t index; /* in start order: its iteration */
} step;

/* The kernels and steps read from the trace. */
typedef struct measured {
    loupe_gpu_kernel_timing *k;
    uint64_t *launch; /* per kernel: its launch on the trace's clock, UINT64_MAX unknown */
    uint64_t *ltid;   /* per kernel: the launching thread (CUPTI's threadId), 0 unknown */
    size_t n, cap;
    step *steps;
    size_t nsteps, capsteps;
    int several; /* steps come from more than one process */
    size_t step_process;
    char step_name[128];
} measured;

static const loupe_arg *arg_of(const loupe_arg *a, size_t n, const char *key) {
    for (size_t i = 0; a != NULL && i < n; i++) {
        if (strcmp(a[i].key, key) == 0) {
            return &a[i];
        }
    }
    return NULL;
}

static uint64_t arg_u(const loupe_arg *a) {
    return a == NULL ? 0 : a->type == LOUPE_ARG_INT64 ? (uint64_t)a->v.i : a->v.u;
}

static int by_start(const void *a, const void *b) {
    const step *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* The kernels (GPU tracks, category "kernel") and the top-level steps (slices with a
 * step_num argument) of m. 0, or -1 on out-of-memory. */
static int gather(const loupe_model *m, measured *ms) {
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        for (size_t i = 0; i < th->slice_count; i++) {
            const loupe_slice *s = &th->slices[i];
            size_t na = 0;
            const loupe_arg *a = loupe_slice_args(th, i, &na);
            if (th->kind == LOUPE_TRACK_GPU && strcmp(loupe_slice_category(m, s), "kernel") == 0) {
                if (ms->n == ms->cap) {
                    size_t nc = ms->cap ? ms->cap * 2 : 256;
                    loupe_gpu_kernel_timing *nk = realloc(ms->k, nc * sizeof *nk);
                    if (nk == NULL) {
                        return -1;
                    }
                    ms->k = nk;
                    uint64_t *nl = realloc(ms->launch, nc * sizeof *nl);
                    if (nl == NULL) {
                        return -1;
                    }
                    ms->launch = nl;
                    uint64_t *nt = realloc(ms->ltid, nc * sizeof *nt);
                    if (nt == NULL) {
                        return -1;
                    }
                    ms->ltid = nt;
                    ms->cap = nc;
                }
                loupe_gpu_kernel_timing *k = &ms->k[ms->n];
                memset(k, 0, sizeof *k);
                k->name = s->name;
                k->start_unix_ns = m->origin_unix_ns + s->start_ns;
                k->dur_ns = s->dur_ns;
                k->device = th->device;
                unsigned stream = 0;
                if (th->name != NULL && sscanf(th->name, "stream %u", &stream) == 1) {
                    k->stream = stream;
                }
                k->correlation_id = (uint32_t)arg_u(arg_of(a, na, "correlation_id"));
                const loupe_arg *l = arg_of(a, na, "launch_ns");
                ms->launch[ms->n] = l != NULL ? arg_u(l) : UINT64_MAX;
                ms->ltid[ms->n] = arg_u(arg_of(a, na, "launch_tid"));
                ms->n++;
            } else if (th->kind == LOUPE_TRACK_THREAD && s->depth == 0 &&
                       arg_of(a, na, "step_num") != NULL) {
                if (ms->nsteps == ms->capsteps) {
                    size_t nc = ms->capsteps ? ms->capsteps * 2 : 64;
                    step *nv = realloc(ms->steps, nc * sizeof *nv);
                    if (nv == NULL) {
                        return -1;
                    }
                    ms->steps = nv;
                    ms->capsteps = nc;
                }
                ms->steps[ms->nsteps++] = (step){s->start_ns, s->start_ns + s->dur_ns, th->tid, 0};
                if (ms->nsteps == 1) {
                    ms->step_process = th->process;
                }
                ms->several |= th->process != ms->step_process;
                if (ms->step_name[0] == 0) {
                    snprintf(ms->step_name, sizeof ms->step_name, "%s", s->name);
                }
            }
        }
    }
    if (ms->nsteps > 1) {
        qsort(ms->steps, ms->nsteps, sizeof *ms->steps, by_start);
    }
    for (size_t i = 0; i < ms->nsteps; i++) {
        ms->steps[i].index = i;
    }
    return 0;
}

/* By thread, then start: each thread's steps side by side (steps_by_tid). */
static int by_tid_start(const void *a, const void *b) {
    const step *x = a, *y = b;
    if (x->tid != y->tid) {
        return x->tid < y->tid ? -1 : 1;
    }
    return by_start(a, b);
}

/* The last of v[0..n) (sorted by start) that starts at or before t, if it still runs at t:
 * its iteration, or SIZE_MAX. */
static size_t covering(const step *v, size_t n, uint64_t t) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].start <= t) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo == 0 || t >= v[lo - 1].end ? SIZE_MAX : v[lo - 1].index;
}

/* The step a kernel was launched in: on the thread that launched it when that thread marks
 * steps (threads' steps overlap in time), else the step under way at its launch; SIZE_MAX when
 * none. bytid is ms->steps sorted by by_tid_start. */
static size_t step_of(const measured *ms, const step *bytid, uint64_t t, uint64_t tid) {
    if (tid != 0) {
        size_t lo = 0, hi = ms->nsteps;
        while (lo < hi) { /* the first step of thread tid */
            size_t mid = lo + (hi - lo) / 2;
            if (bytid[mid].tid < tid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        size_t end = lo;
        while (end < ms->nsteps && bytid[end].tid == tid) {
            end++;
        }
        if (end > lo) {
            return covering(bytid + lo, end - lo, t);
        }
    }
    return covering(ms->steps, ms->nsteps, t);
}

/* Per kernel name: the rows of the table. */
typedef struct row {
    const char *name;
    size_t count;
    uint64_t total, min, max, p50;
} row;

static int by_name_dur(const void *a, const void *b) {
    const loupe_gpu_kernel_timing *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : (x->dur_ns > y->dur_ns) - (x->dur_ns < y->dur_ns);
}

static int by_total(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->total != y->total) {
        return x->total < y->total ? 1 : -1;
    }
    return strcmp(x->name, y->name);
}

/* The rows of r's kernels, by total time, largest first; *nrows set. NULL on out-of-memory. */
static row *rows_of(const loupe_gpu_measure_result *r, size_t *nrows) {
    size_t n = r->kernel_count;
    loupe_gpu_kernel_timing *k = malloc(n * sizeof *k);
    row *rows = malloc(n * sizeof *rows);
    if (k == NULL || rows == NULL) {
        free(k);
        free(rows);
        return NULL;
    }
    memcpy(k, r->kernels, n * sizeof *k);
    qsort(k, n, sizeof *k, by_name_dur);
    size_t nr = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        row w = {.name = k[i].name, .min = k[i].dur_ns};
        while (j < n && strcmp(k[j].name, k[i].name) == 0) {
            w.total += k[j].dur_ns;
            w.max = k[j].dur_ns;
            j++;
        }
        w.count = j - i;
        w.p50 = k[i + (w.count - 1) / 2].dur_ns;
        rows[nr++] = w;
        i = j;
    }
    free(k);
    qsort(rows, nr, sizeof *rows, by_total);
    *nrows = nr;
    return rows;
}

static void fmt(char *buf, size_t size, uint64_t ns) {
    loupe_cli_fmt_dur(buf, size, ns);
}

/* s right-aligned in width columns: UTF-8 continuation bytes ("µ") take no column. */
static void rpad(char *out, size_t size, const char *s, int width) {
    int cols = 0;
    for (const char *p = s; *p != 0; p++) {
        cols += ((unsigned char)*p & 0xC0) != 0x80;
    }
    snprintf(out, size, "%*s%s", cols < width ? width - cols : 0, "", s);
}

static void print_table(const loupe_gpu_measure_result *r, const row *rows, size_t nrows,
                        const char *how, int per_kernel) {
    printf("%-40s %8s %12s %12s %12s %12s %12s\n", "kernel", "launches", "total", "mean", "p50",
           "min", "max");
    for (size_t i = 0; i < nrows; i++) {
        char t[32], mean[32], p[32], mn[32], mx[32];
        fmt(t, sizeof t, rows[i].total);
        fmt(mean, sizeof mean, rows[i].total / rows[i].count);
        fmt(p, sizeof p, rows[i].p50);
        fmt(mn, sizeof mn, rows[i].min);
        fmt(mx, sizeof mx, rows[i].max);
        char name[41];
        snprintf(name, sizeof name, "%s", rows[i].name);
        char c[5][48];
        rpad(c[0], sizeof c[0], t, 12);
        rpad(c[1], sizeof c[1], mean, 12);
        rpad(c[2], sizeof c[2], p, 12);
        rpad(c[3], sizeof c[3], mn, 12);
        rpad(c[4], sizeof c[4], mx, 12);
        printf("%-40s %8zu %s %s %s %s %s\n", name, rows[i].count, c[0], c[1], c[2], c[3], c[4]);
    }
    char mn[32], md[32], mx[32];
    fmt(mn, sizeof mn, r->min_ns);
    fmt(md, sizeof md, r->median_ns);
    fmt(mx, sizeof mx, r->max_ns);
    printf("\niterations: %u (%s); per iteration: min %s, median %s, max %s, spread %.1f%%\n",
           r->iterations, how, mn, md, mx, 100 * r->spread);
    if (per_kernel) {
        for (uint32_t it = 0; it < r->iterations; it++) {
            char tot[32];
            fmt(tot, sizeof tot, r->iteration_ns[it]);
            printf("iteration %u: %s\n", it, tot);
            for (size_t i = 0; i < r->kernel_count; i++) {
                if (r->kernels[i].iteration == it) {
                    char d[32];
                    fmt(d, sizeof d, r->kernels[i].dur_ns);
                    char c[48];
                    rpad(c, sizeof c, d, 12);
                    printf("  %-40s %s  stream %u\n", r->kernels[i].name, c, r->kernels[i].stream);
                }
            }
        }
    }
    char res[64] = "unknown (fewer than two timed kernels)";
    if (r->resolution_ns > 0) {
        snprintf(res, sizeof res, "%llu ns", (unsigned long long)r->resolution_ns);
    }
    printf("clock: %s; resolution %s\n", r->clock, res);
}

static json_t *json_of(const loupe_gpu_measure_result *r, const row *rows, size_t nrows,
                       const char *how, int per_kernel) {
    json_t *o = json_object();
    json_object_set_new(o, "iterations", json_integer(r->iterations));
    json_object_set_new(o, "split", loupe_cli_jstr(how));
    json_t *ks = json_array();
    for (size_t i = 0; i < nrows; i++) {
        json_t *k = json_object();
        json_object_set_new(k, "name", loupe_cli_jstr(rows[i].name));
        json_object_set_new(k, "launches", json_integer((json_int_t)rows[i].count));
        json_object_set_new(k, "total_ns", json_integer(loupe_cli_jint(rows[i].total)));
        json_object_set_new(k, "mean_ns",
                            json_integer(loupe_cli_jint(rows[i].total / rows[i].count)));
        json_object_set_new(k, "p50_ns", json_integer(loupe_cli_jint(rows[i].p50)));
        json_object_set_new(k, "min_ns", json_integer(loupe_cli_jint(rows[i].min)));
        json_object_set_new(k, "max_ns", json_integer(loupe_cli_jint(rows[i].max)));
        json_array_append_new(ks, k);
    }
    json_object_set_new(o, "kernels", ks);
    json_t *its = json_array();
    for (uint32_t i = 0; i < r->iterations; i++) {
        json_array_append_new(its, json_integer(loupe_cli_jint(r->iteration_ns[i])));
    }
    json_object_set_new(o, "iteration_ns", its);
    json_object_set_new(o, "min_ns", json_integer(loupe_cli_jint(r->min_ns)));
    json_object_set_new(o, "median_ns", json_integer(loupe_cli_jint(r->median_ns)));
    json_object_set_new(o, "max_ns", json_integer(loupe_cli_jint(r->max_ns)));
    json_object_set_new(o, "spread", json_real(r->spread));
    json_object_set_new(o, "clock", json_string(r->clock));
    json_object_set_new(o, "resolution_ns", json_integer(loupe_cli_jint(r->resolution_ns)));
    json_t *ws = json_array();
    for (const char *w = r->warnings; *w != 0;) {
        const char *nl = strchr(w, '\n');
        size_t len = nl != NULL ? (size_t)(nl - w) : strlen(w);
        json_array_append_new(ws, json_stringn(w, len));
        w += len + (nl != NULL);
    }
    json_object_set_new(o, "warnings", ws);
    if (per_kernel) {
        json_t *pk = json_array();
        for (uint32_t it = 0; it < r->iterations; it++) {
            json_t *one = json_array();
            for (size_t i = 0; i < r->kernel_count; i++) {
                if (r->kernels[i].iteration == it) {
                    json_t *k = json_object();
                    json_object_set_new(k, "name", loupe_cli_jstr(r->kernels[i].name));
                    json_object_set_new(k, "dur_ns",
                                        json_integer(loupe_cli_jint(r->kernels[i].dur_ns)));
                    json_object_set_new(k, "stream", json_integer(r->kernels[i].stream));
                    json_array_append_new(one, k);
                }
            }
            json_array_append_new(pk, one);
        }
        json_object_set_new(o, "per_kernel", pk);
    }
    return o;
}

/* Runs `loupe record --gpu --no-sample -q -o dir -- prog...`; returns its wait
 * status, or -1 (said) when it could not be started. */
static int run_record(const char *dir, char **prog) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "loupe gpu-measure: cannot find the loupe command (/proc/self/exe): %s\n",
                strerror(errno));
        return -1;
    }
    exe[n] = 0;
    size_t np = 0;
    while (prog[np] != NULL) {
        np++;
    }
    const char **argv = calloc(np + 12, sizeof *argv);
    if (argv == NULL) {
        fprintf(stderr, "loupe gpu-measure: out of memory\n");
        return -1;
    }
    size_t a = 0;
    argv[a++] = exe;
    argv[a++] = "record";
    argv[a++] = "--gpu";
    argv[a++] = "--no-sample";
    argv[a++] = "-q";
    argv[a++] = "-o";
    argv[a++] = dir;
    argv[a++] = "--";
    for (size_t i = 0; i < np; i++) {
        argv[a++] = prog[i];
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "loupe gpu-measure: fork: %s\n", strerror(errno));
        free((void *)argv);
        return -1;
    }
    if (pid == 0) {
        setenv("LOUPE_RECORD_FOR_GPU_MEASURE", "1", 1); /* no run-directory line: ours */
        execv(exe, (char *const *)(uintptr_t)argv);
        _exit(122);
    }
    free((void *)argv);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "loupe gpu-measure: waitpid: %s\n", strerror(errno));
            return -1;
        }
    }
    return st;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    (void)remove(path);
    return 0;
}

/* The temporary log directory and everything loupe record wrote in it. */
static void rm_tree(const char *dir) {
    (void)nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int loupe_cmd_gpu_measure(int argc, char **argv) {
    long iterations = 0;
    int per_kernel = 0, as_json = 0;
    const char *keep_dir = NULL, *json_file = NULL;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--iterations") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            iterations = strtol(argv[++i], &end, 10);
            if (*end != 0 || end == argv[i] || errno != 0 || iterations > INT32_MAX ||
                iterations < INT32_MIN) {
                fprintf(stderr, "loupe gpu-measure: --iterations wants a number, not '%s'\n",
                        argv[i]);
                return 2;
            }
            if (iterations < 1) {
                fprintf(stderr, "loupe gpu-measure: iterations=%ld must be positive\n", iterations);
                return 2;
            }
        } else if (strcmp(a, "--per-kernel") == 0) {
            per_kernel = 1;
        } else if (strcmp(a, "--json") == 0) {
            as_json = 1;
        } else if (strncmp(a, "--json=", 7) == 0) {
            as_json = 1;
            json_file = a + 7;
            if (json_file[0] == 0) {
                fprintf(stderr, "loupe gpu-measure: --json= wants a file name\n");
                return 2;
            }
        } else if (strcmp(a, "-o") == 0 && i + 1 < argc) {
            keep_dir = argv[++i];
            if (strcmp(keep_dir, "--") == 0 || keep_dir[0] == 0) {
                fprintf(stderr, "loupe gpu-measure: -o wants a log directory before '--'\n");
                return 2;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "loupe gpu-measure: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            break;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "loupe gpu-measure: no PROGRAM to run\n");
        usage(stderr);
        return 2;
    }
    const char *dir = keep_dir;
    if (dir == NULL) {
        const char *td = getenv("TMPDIR");
        static char tmpl[PATH_MAX];
        snprintf(tmpl, sizeof tmpl, "%s/loupe-gpu-measure.XXXXXX",
                 td != NULL && td[0] != 0 ? td : "/tmp");
        dir = mkdtemp(tmpl);
        if (dir == NULL) {
            fprintf(stderr, "loupe gpu-measure: cannot make a temporary directory %s: %s\n", tmpl,
                    strerror(errno));
            return 1;
        }
    }
    int st = run_record(dir, argv + i);
    int status = 1;
    loupe_model *m = NULL;
    loupe_gpu_measure_result *r = NULL;
    measured ms;
    memset(&ms, 0, sizeof ms);
    step *bytid = NULL;
    size_t *used = NULL;
    if (st < 0) {
        goto out;
    }
    int prog_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char file[PATH_MAX];
    int rc = loupe_trace_find(dir, file, sizeof file);
    if (rc != 0 && WIFEXITED(st) && prog_status >= 120 && prog_status <= 123) {
        status = prog_status; /* loupe record's own: it said why PROGRAM did not run */
        goto out;
    }
    if (rc == 0) {
        rc = loupe_trace_read(file, &m);
    }
    if (rc != 0) {
        fprintf(stderr, "loupe gpu-measure: no trace of PROGRAM to read in %s: %s\n", dir,
                loupe_last_error());
        goto out;
    }
    if (gather(m, &ms) != 0) {
        fprintf(stderr, "loupe gpu-measure: out of memory\n");
        goto out;
    }
    const char *note = loupe_cli_meta(m, "device_tracer");
    loupe_model_counts mc;
    loupe_model_counts_of(m, &mc);
    if (mc.gpu_lost != 0) { /* as loupe_gpu_measure(): a partial set of kernels is no timing */
        fprintf(stderr,
                "loupe gpu-measure: %llu GPU activity records were lost (%s): the timings "
                "would be incomplete\n",
                (unsigned long long)mc.gpu_lost, note != NULL ? note : "CUPTI");
        status = prog_status != 0 ? prog_status : 1;
        goto out;
    }
    if (ms.n == 0) {
        if (note != NULL && strncmp(note, "CUPTI:", 6) != 0) {
            /* the tracer's note without its frame: "device tracer: WHY; the session goes on
             * host-only" */
            const char *why = strncmp(note, "device tracer: ", 15) == 0 ? note + 15 : note;
            const char *tail = strstr(why, "; the session goes on host-only");
            int len = tail != NULL ? (int)(tail - why) : (int)strlen(why);
            fprintf(stderr,
                    "loupe gpu-measure: CUPTI profiling is not supported on this platform "
                    "(%.*s)\n",
                    len, why);
        } else if (loupe_cli_meta(m, "loupe_recovered") != NULL) {
            fprintf(stderr,
                    "loupe gpu-measure: PROGRAM died before its session stopped (%s): CUPTI "
                    "hands its records over at the stop, so the kernels that ran are not in "
                    "the trace\n",
                    loupe_cli_meta(m, "loupe_recovered"));
        } else {
            fprintf(stderr, "loupe gpu-measure: no GPU kernel ran\n");
        }
        status = prog_status != 0 ? prog_status : 1;
        goto out;
    }
    loupe_gpu_measure_options o = {.iterations = 1};
    char how[256];
    snprintf(how, sizeof how, "one: all launches");
    size_t outside = 0, unplaced = 0;
    if (iterations > 0) {
        o.iterations = (int32_t)iterations;
        snprintf(how, sizeof how, "%ld equal runs of the launches", iterations);
    } else if (ms.nsteps > 0 && !ms.several) {
        o.iterations = (int32_t)(ms.nsteps < INT32_MAX ? ms.nsteps : INT32_MAX);
        o.split = LOUPE_GPU_SPLIT_GIVEN;
        snprintf(how, sizeof how, "by the steps '%s'", ms.step_name);
        bytid = malloc(ms.nsteps * sizeof *bytid);
        used = calloc(ms.nsteps, sizeof *used); /* per step: has kernels, then its iteration */
        if (bytid == NULL || used == NULL) {
            fprintf(stderr, "loupe gpu-measure: out of memory\n");
            goto out;
        }
        memcpy(bytid, ms.steps, ms.nsteps * sizeof *bytid);
        qsort(bytid, ms.nsteps, sizeof *bytid, by_tid_start);
        size_t kept = 0;
        for (size_t k = 0; k < ms.n; k++) {
            size_t s = ms.launch[k] != UINT64_MAX ? step_of(&ms, bytid, ms.launch[k], ms.ltid[k])
                                                  : SIZE_MAX;
            if (s == SIZE_MAX) {
                outside += ms.launch[k] != UINT64_MAX;
                unplaced += ms.launch[k] == UINT64_MAX;
                continue;
            }
            ms.k[kept] = ms.k[k];
            ms.k[kept].iteration = (uint32_t)s;
            ms.launch[kept] = ms.launch[k];
            used[s] = 1;
            kept++;
        }
        ms.n = kept;
        /* a step that launched nothing is no iteration: its 0 ns would hide the others' spread
         * (the median of 0, 0, 0, 4 µs is 0) */
        size_t live = 0;
        for (size_t s = 0; s < ms.nsteps; s++) {
            used[s] = used[s] ? live++ : SIZE_MAX;
        }
        for (size_t k = 0; k < ms.n; k++) {
            ms.k[k].iteration = (uint32_t)used[ms.k[k].iteration];
        }
        if (live > 0 && live < ms.nsteps) {
            fprintf(stderr,
                    "loupe gpu-measure: note: %zu of %zu steps '%s' launched no GPU kernel and "
                    "are left out of the iterations\n",
                    ms.nsteps - live, ms.nsteps, ms.step_name);
        }
        o.iterations = (int32_t)(live > 0 ? live : 1);
    } else if (ms.nsteps > 0) {
        fprintf(stderr,
                "loupe gpu-measure: note: several processes mark steps; their launch times are "
                "not on one clock, so the launches make one iteration (use --iterations N)\n");
    }
    if (outside + unplaced > 0) {
        fprintf(stderr,
                "loupe gpu-measure: note: %zu of %zu kernels were launched outside the steps "
                "'%s'%s and are left out\n",
                outside + unplaced, ms.n + outside + unplaced, ms.step_name,
                unplaced > 0 ? " (or have no launch time)" : "");
    }
    rc = loupe_gpu_measure_kernels(ms.k, ms.n, &o, &r);
    if (rc != 0) {
        fprintf(stderr, "loupe gpu-measure: %s\n", loupe_last_error());
        goto out;
    }
    if (r == NULL) {
        fprintf(stderr, "loupe gpu-measure: no GPU kernel was launched inside the steps\n");
        goto out;
    }
    size_t nrows = 0;
    row *rows = rows_of(r, &nrows);
    if (rows == NULL) {
        fprintf(stderr, "loupe gpu-measure: out of memory\n");
        goto out;
    }
    if (as_json) {
        json_t *j = json_of(r, rows, nrows, how, per_kernel);
        char *text = json_dumps(j, JSON_INDENT(2));
        json_decref(j);
        if (text == NULL) {
            free(rows);
            fprintf(stderr, "loupe gpu-measure: out of memory\n");
            goto out;
        }
        FILE *f = json_file != NULL ? fopen(json_file, "w") : stdout;
        int bad = f == NULL || fprintf(f, "%s\n", text) < 0;
        bad |= f != NULL && f != stdout && fclose(f) != 0;
        free(text);
        if (bad) {
            fprintf(stderr, "loupe gpu-measure: cannot write the result to %s: %s\n",
                    json_file != NULL ? json_file : "stdout", strerror(errno));
            free(rows);
            goto out;
        }
    } else {
        print_table(r, rows, nrows, how, per_kernel);
    }
    for (const char *w = r->warnings; *w != 0;) {
        const char *nl = strchr(w, '\n');
        int len = (int)(nl != NULL ? (size_t)(nl - w) : strlen(w));
        fprintf(stderr, "loupe gpu-measure: warning: %.*s\n", len, w);
        w += len + (nl != NULL);
    }
    free(rows);
    if (keep_dir != NULL) {
        fprintf(stderr, "loupe gpu-measure: the trace is in %s\n", file);
    }
    status = prog_status != 0 ? prog_status : 0;
    if (prog_status != 0) {
        fprintf(stderr, "loupe gpu-measure: PROGRAM exited with status %d\n", prog_status);
    }
out:
    loupe_gpu_measure_result_free(r);
    loupe_model_free(m);
    free(ms.k);
    free(ms.launch);
    free(ms.ltid);
    free(ms.steps);
    free(bytid);
    free(used);
    if (keep_dir == NULL) {
        rm_tree(dir);
    }
    return status;
}
