/* main.c: loupe_bench, the benchmark suite (issue 6). One run of this one process measures the
 * floors, loupe's recording cases, the peers (LTTng-UST in-process, uftrace on a child program)
 * and loupe's export, prints one table and optionally writes it as JSON (--json FILE).
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
#include "bench.h"

#include <loupe/loupe.h>

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* ---- configuration ---- */

typedef struct config {
    int reps;         /* timed repetitions per case */
    double scale;     /* multiplies every iteration count (--quick: 0.1) */
    const char *json; /* --json FILE */
    int keep;         /* --keep: leave the trace files in the work directory */
    int skip_peers;   /* --no-peers */
    int skip_export;  /* --no-export */
} config;

static config cfg = {.reps = 7, .scale = 1.0};
static char work_dir[256];  /* mkdtemp: log dirs, LTTng and uftrace output */
static char self_dir[4096]; /* the directory of this executable (the uftrace programs) */
static int pin_cpu;         /* the CPU the single-thread cases run on */
static int ncpu;

#define MAX_REPS 64

static uint64_t scaled(uint64_t n) {
    double v = (double)n * cfg.scale;
    return v < 1000.0 ? 1000u : (uint64_t)v;
}

/* ---- small utilities ---- */

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((size_t)cpu, &set);
    (void)sched_setaffinity(0, sizeof set, &set);
}

static void unpin(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < ncpu; i++) {
        CPU_SET((size_t)i, &set);
    }
    (void)sched_setaffinity(0, sizeof set, &set);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Reads the first line of a file into buf ("" when it cannot). */
static void read_line(const char *path, char *buf, size_t size) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(buf, (int)size, f) == NULL) {
            buf[0] = 0;
        }
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}

/* Finds an executable in PATH; returns 1 and its path in out. */
static int find_in_path(const char *name, char *out, size_t size) {
    const char *path = getenv("PATH");
    if (path == NULL) {
        path = "/usr/bin:/bin";
    }
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, size, "%.*s/%s", (int)len, path, name);
        if (len > 0 && access(out, X_OK) == 0) {
            return 1;
        }
        path += len;
        if (*path == ':') {
            path++;
        }
    }
    out[0] = 0;
    return 0;
}

static uint64_t du_total;
static int du_add(const char *p, const struct stat *st, int type, struct FTW *ftw) {
    (void)p;
    (void)ftw;
    if (type == FTW_F) {
        du_total += (uint64_t)st->st_size;
    }
    return 0;
}
/* Bytes in the regular files under path. */
static uint64_t du_bytes(const char *path) {
    du_total = 0;
    (void)nftw(path, du_add, 16, FTW_PHYS);
    return du_total;
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type == FTW_DP) {
        (void)rmdir(p);
    } else {
        (void)unlink(p);
    }
    return 0;
}
static void rm_rf(const char *path) {
    (void)nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Runs argv (PATH lookup), stdout and stderr into out (NUL-terminated, cut to size).
 * all_cpus: the child may run on every CPU (a tracer's own writer threads must not share the
 * traced program's CPU). Returns the exit status, or -1 when it could not run. */
static int run_cmd(char *const argv[], char *out, size_t size, int all_cpus) {
    int fds[2];
    if (pipe(fds) != 0) {
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (all_cpus) {
            unpin();
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    char scratch[4096];
    for (;;) {
        char *dst = used + 1 < size ? out + used : scratch;
        size_t room = used + 1 < size ? size - 1 - used : sizeof scratch;
        ssize_t r = read(fds[0], dst, room);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            break;
        }
        if (dst != scratch) {
            used += (size_t)r;
        }
    }
    out[used] = 0;
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            return -1;
        }
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The first non-empty line of s, for messages. */
static void first_line(const char *s, char *buf, size_t size) {
    while (*s == '\n' || *s == ' ') {
        s++;
    }
    snprintf(buf, size, "%.*s", (int)strcspn(s, "\n"), s);
}

/* ---- cases and the table ---- */

typedef struct bcase {
    char name[80];
    char unit[24];
    double med, min, max;
    double floor; /* median of the rdtsc floor repetitions interleaved with this case, or NAN */
    double ratio; /* med / floor; NAN: not a time comparable with the floor */
    int na;       /* not measured: note says why */
    char note[200];
} bcase;

#define MAX_CASES 64
static bcase cases[MAX_CASES];
static size_t ncases;
/* The cases the targets table reads (NULL when not run). */
static bcase *k_static, *k_notrace, *k_off, *k_empty, *k_dyn, *k_mt[3], *k_lttng, *k_evps,
    *k_memzone, *k_pf_evps, *k_pf_bytes;
static double stop_extra_per_event = NAN, model_per_event = NAN;
static double compiled_out_delta = NAN; /* median of (compiled out - empty loop), paired */

static bcase *add_case(const char *name, const char *unit) {
    if (ncases == MAX_CASES) {
        fprintf(stderr, "loupe_bench: too many cases\n");
        exit(1);
    }
    bcase *c = &cases[ncases++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->unit, sizeof c->unit, "%s", unit);
    c->med = c->min = c->max = c->ratio = c->floor = NAN;
    return c;
}

static void note(bcase *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(bcase *c, const char *fmt, ...) {
    size_t len = strlen(c->note);
    va_list ap;
    va_start(ap, fmt);
    if (len > 0 && len + 2 < sizeof c->note) {
        c->note[len++] = ';';
        c->note[len++] = ' ';
        c->note[len] = 0;
    }
    vsnprintf(c->note + len, sizeof c->note - len, fmt, ap);
    va_end(ap);
}

static bcase *add_na(const char *name, const char *unit, const char *why) {
    bcase *c = add_case(name, unit);
    c->na = 1;
    snprintf(c->note, sizeof c->note, "%s", why);
    return c;
}

static double median_of(const double *v, int n) {
    double t[MAX_REPS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Sets median, min and max from n samples; with fs (the floor repetitions interleaved with
 * them), the floor's median and the ratio to it. */
static void set_stats(bcase *c, const double *s, int n, const double *fs) {
    c->med = median_of(s, n);
    c->min = c->max = s[0];
    for (int i = 1; i < n; i++) {
        c->min = s[i] < c->min ? s[i] : c->min;
        c->max = s[i] > c->max ? s[i] : c->max;
    }
    if (fs != NULL) {
        c->floor = median_of(fs, n);
        c->ratio = c->med / c->floor;
    }
}

static void set_value(bcase *c, double v) {
    c->med = c->min = c->max = v;
}

static void fmt_num(char *buf, size_t size, double v) {
    if (isnan(v)) {
        snprintf(buf, size, "-");
    } else if (fabs(v) >= 10000) {
        snprintf(buf, size, "%.0f", v);
    } else if (fabs(v) >= 100) {
        snprintf(buf, size, "%.1f", v);
    } else {
        snprintf(buf, size, "%.2f", v);
    }
}

/* ---- the timing harnesses ---- */

/* Iterations of one floor repetition interleaved with a case. */
static uint64_t floor_n(void) {
    return scaled(500000);
}

/* Times k loops on this (pinned) thread: one warm-up of each, then cfg.reps rounds; a round
 * runs the rdtsc floor (when fs is not NULL) and then each loop once. s[j][r] and fs[r]: ns per
 * iteration. Interleaving makes every ratio compare figures taken within milliseconds of each
 * other, so that a shared machine's drift cancels out. */
static void time_multi(const bench_loop_fn *fns, const uint64_t *ns, int k, double s[][MAX_REPS],
                       double *fs) {
    if (fs != NULL) {
        bench_floor_rdtsc(floor_n());
    }
    for (int j = 0; j < k; j++) {
        fns[j](ns[j]);
    }
    for (int r = 0; r < cfg.reps; r++) {
        if (fs != NULL) {
            uint64_t t0 = mono_ns();
            bench_floor_rdtsc(floor_n());
            fs[r] = (double)(mono_ns() - t0) / (double)floor_n();
        }
        for (int j = 0; j < k; j++) {
            uint64_t t0 = mono_ns();
            fns[j](ns[j]);
            s[j][r] = (double)(mono_ns() - t0) / (double)ns[j];
        }
    }
}

/* One loop with the floor interleaved. */
static void time_loop(bench_loop_fn fn, uint64_t n, double *s, double *fs) {
    double t[1][MAX_REPS];
    time_multi(&fn, &n, 1, t, fs);
    memcpy(s, t[0], sizeof t[0]);
}

typedef struct mt_run {
    bench_loop_fn fn;
    uint64_t n;
    int nthreads;
    pthread_barrier_t bar;
    double cpu_ns[MAX_REPS][8];
    double floor_ns[MAX_REPS][8];
} mt_run;

typedef struct mt_arg {
    mt_run *run;
    int index;
} mt_arg;

static void *mt_thread(void *p) {
    mt_arg *a = p;
    mt_run *m = a->run;
    pin_to(a->index % ncpu);
    bench_floor_rdtsc(floor_n());
    m->fn(m->n); /* warm-up: also the thread's first event (it joins the session) */
    for (int r = 0; r < cfg.reps; r++) {
        pthread_barrier_wait(&m->bar);
        uint64_t t0 = thread_cpu_ns();
        bench_floor_rdtsc(floor_n());
        uint64_t t1 = thread_cpu_ns();
        m->floor_ns[r][a->index] = (double)(t1 - t0) / (double)floor_n();
        pthread_barrier_wait(&m->bar);
        t0 = thread_cpu_ns();
        m->fn(m->n);
        t1 = thread_cpu_ns();
        m->cpu_ns[r][a->index] = (double)(t1 - t0) / (double)m->n;
        pthread_barrier_wait(&m->bar);
    }
    return NULL;
}

/* Runs fn(n) on nthreads threads (pinned round-robin), cfg.reps times together, each time after
 * the rdtsc floor on the same threads; s[r] and fs[r] = CPU ns per iteration per thread (the mean
 * over threads) of repetition r. */
static void time_threads(bench_loop_fn fn, uint64_t n, int nthreads, double *s, double *fs) {
    static mt_run m;
    pthread_t th[8];
    mt_arg args[8];
    m.fn = fn;
    m.n = n;
    m.nthreads = nthreads;
    pthread_barrier_init(&m.bar, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
        args[i] = (mt_arg){&m, i};
        pthread_create(&th[i], NULL, mt_thread, &args[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
    }
    pthread_barrier_destroy(&m.bar);
    for (int r = 0; r < cfg.reps; r++) {
        double sum = 0, fsum = 0;
        for (int i = 0; i < nthreads; i++) {
            sum += m.cpu_ns[r][i];
            fsum += m.floor_ns[r][i];
        }
        s[r] = sum / nthreads;
        fs[r] = fsum / nthreads;
    }
}

/* ---- loupe sessions around a case ---- */

static int session_start(uint64_t buffer_events, int function_tracing) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/loupe", work_dir);
    if (buffer_events > UINT32_MAX) {
        buffer_events = UINT32_MAX;
    }
    loupe_trace_options o = {
        .log_dir = dir,
        .buffer_events = (uint32_t)buffer_events,
        .function_tracing = function_tracing,
        /* The fastest writer: these stops are not timed, only their counts are checked. */
        .formats = LOUPE_FORMAT_PERFETTO_PROTO,
    };
    int r = loupe_start_trace(&o);
    if (r != 0) {
        fprintf(stderr, "loupe_bench: loupe_start_trace: %s\n", loupe_last_error());
    }
    return r;
}

/* Stops the session and notes what it recorded against what the case should have recorded. */
static void session_stop(bcase *c, uint64_t expected_events) {
    loupe_trace_result res = {.size = sizeof res};
    int r = loupe_stop_trace(&res);
    if (r != 0) {
        note(c, "stop failed: %s", loupe_last_error());
    }
    if (res.events_dropped != 0 || res.events_recorded != expected_events) {
        note(c, "RECORDED %llu of %llu events, %llu DROPPED: not the pure recording path",
             (unsigned long long)res.events_recorded, (unsigned long long)expected_events,
             (unsigned long long)res.events_dropped);
    } else {
        note(c, "%llu events recorded, 0 dropped", (unsigned long long)res.events_recorded);
    }
    if (!cfg.keep && res.run_dir != NULL) {
        rm_rf(res.run_dir);
    }
    loupe_trace_result_free(&res);
}

/* A single-thread loupe case: the session's buffer holds (reps + 1) * n * events_per_iter. */
static bcase *loupe_case(const char *name, const char *unit, bench_loop_fn fn, uint64_t n,
                         unsigned events_per_iter, uint64_t buffer_events) {
    bcase *c = add_case(name, unit);
    double s[MAX_REPS], fs[MAX_REPS];
    uint64_t expected = (uint64_t)(cfg.reps + 1) * n * events_per_iter;
    if (buffer_events < expected + 64) {
        buffer_events = expected + 64;
    }
    if (session_start(buffer_events, 0) != 0) {
        c->na = 1;
        note(c, "loupe_start_trace failed: %s", loupe_last_error());
        return c;
    }
    time_loop(fn, n, s, fs);
    session_stop(c, expected);
    set_stats(c, s, cfg.reps, fs);
    return c;
}

/* ---- function tracing ---- */

static volatile uint64_t sink;
void bench_calls_instrumented(uint64_t n) {
    sink = bench_fi_run(n);
}
void bench_calls_plain(uint64_t n) {
    sink = bench_fp_run(n);
}

/* Interleaves the floor, plain and instrumented repetitions; s[r] = instrumented - plain, ns
 * per call. */
static void time_call_overhead(uint64_t n, double *s, double *plain, double *fs) {
    bench_loop_fn fns[2] = {bench_calls_plain, bench_calls_instrumented};
    uint64_t ns[2] = {n, n};
    double t[2][MAX_REPS];
    time_multi(fns, ns, 2, t, fs);
    for (int r = 0; r < cfg.reps; r++) {
        plain[r] = t[0][r];
        s[r] = t[1][r] - t[0][r];
    }
}

static void function_tracing_cases(void) {
    uint64_t n = scaled(500000);
    double s[MAX_REPS], plain[MAX_REPS], fs[MAX_REPS];

    bcase *p = add_case("calls: uninstrumented leaf() call", "ns/call");
    bcase *c0 = add_case("calls: -finstrument-functions, no trace (overhead)", "ns/call");
    time_call_overhead(n, s, plain, fs);
    set_stats(p, plain, cfg.reps, NULL);
    set_stats(c0, s, cfg.reps, fs);
    note(c0, "the hooks resolve to libloupe's, which test the session word and return");

    bcase *c = add_case("loupe function tracing (overhead per call)", "ns/call");
    /* run(n) records 2 events for itself and 2 per call of leaf(); run() runs reps + 1 times. */
    uint64_t expected = (uint64_t)(cfg.reps + 1) * (2 * n + 2);
    if (session_start(expected + 64, 1) != 0) {
        c->na = 1;
        note(c, "loupe_start_trace failed: %s", loupe_last_error());
        return;
    }
    time_call_overhead(n, s, plain, fs);
    session_stop(c, expected);
    set_stats(c, s, cfg.reps, fs);
}

/* ---- peers: LTTng-UST ---- */

#ifdef BENCH_HAVE_LTTNG
static int lttng_cmd(const char *a0, const char *a1, const char *a2, const char *a3, const char *a4,
                     char *out, size_t size) {
    /* --no-sessiond: never leave a daemon behind; without one the case says so. */
    char *argv[] = {(char *)"lttng", (char *)"--no-sessiond",
                    (char *)a0,      (char *)a1,
                    (char *)a2,      (char *)a3,
                    (char *)a4,      NULL};
    return run_cmd(argv, out, size, 1);
}

/* "Warning: 123 events were discarded" (lttng stop / destroy), or 0. */
static uint64_t lttng_discarded(const char *out) {
    uint64_t total = 0;
    for (const char *p = out; (p = strstr(p, "events were discarded")) != NULL; p++) {
        const char *q = p;
        while (q > out && q[-1] == ' ') {
            q--;
        }
        while (q > out && q[-1] >= '0' && q[-1] <= '9') {
            q--;
        }
        total += strtoull(q, NULL, 10);
    }
    return total;
}
#endif

static void lttng_cases(void) {
    const char *name_off = "LTTng-UST begin+end, no session";
    const char *name_on = "LTTng-UST begin+end, session recording";
#ifndef BENCH_HAVE_LTTNG
    add_na(name_off, "ns/zone", "built without LTTng-UST (install liblttng-ust-dev and rebuild)");
    add_na(name_on, "ns/zone", "built without LTTng-UST (install liblttng-ust-dev and rebuild)");
#else
    double s[MAX_REPS], fs[MAX_REPS];
    bcase *off = add_case(name_off, "ns/zone");
    if (bench_lttng_enabled()) {
        note(off, "a session outside this run enables loupe_bench:*: measured anyway");
    }
    time_loop(bench_lttng_zone, scaled(20000000), s, fs);
    set_stats(off, s, cfg.reps, fs);

    char lttng[4096], out[8192], sess[64], outdir[512], why[256];
    if (!find_in_path("lttng", lttng, sizeof lttng)) {
        add_na(name_on, "ns/zone", "lttng (Debian package lttng-tools) is not installed");
        return;
    }
    snprintf(sess, sizeof sess, "loupe_bench_%d", (int)getpid());
    snprintf(outdir, sizeof outdir, "--output=%s/lttng", work_dir);
    if (lttng_cmd("create", sess, outdir, NULL, NULL, out, sizeof out) != 0) {
        char msg[300];
        if (strstr(out, "No session daemon") != NULL) {
            snprintf(msg, sizeof msg,
                     "no lttng-sessiond is running (start one before "
                     "loupe_bench, as bench/run.sh does)");
        } else {
            first_line(out, why, sizeof why);
            snprintf(msg, sizeof msg, "lttng create failed: %s", why);
        }
        add_na(name_on, "ns/zone", msg);
        return;
    }
    char sopt[80];
    snprintf(sopt, sizeof sopt, "--session=%s", sess);
    int ok = lttng_cmd("enable-event", "--userspace", "loupe_bench:*", sopt, NULL, out,
                       sizeof out) == 0 &&
             lttng_cmd("start", sess, NULL, NULL, NULL, out, sizeof out) == 0;
    if (!ok) {
        first_line(out, why, sizeof why);
    }
    /* The session daemon enables the tracepoint in this process asynchronously. */
    for (int i = 0; ok && i < 500 && !bench_lttng_enabled(); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    if (ok && !bench_lttng_enabled()) {
        ok = 0;
        snprintf(why, sizeof why,
                 "this process is not registered with lttng-sessiond (start the daemon before "
                 "loupe_bench, as bench/run.sh does)");
    }
    if (!ok) {
        (void)lttng_cmd("destroy", sess, NULL, NULL, NULL, out, sizeof out);
        add_na(name_on, "ns/zone", why);
        return;
    }
    bcase *on = k_lttng = add_case(name_on, "ns/zone");
    uint64_t n = scaled(200000);
    time_loop(bench_lttng_zone, n, s, fs);
    set_stats(on, s, cfg.reps, fs);
    char out2[8192];
    (void)lttng_cmd("stop", sess, NULL, NULL, NULL, out, sizeof out);
    (void)lttng_cmd("destroy", sess, NULL, NULL, NULL, out2, sizeof out2);
    uint64_t events = (uint64_t)(cfg.reps + 1) * n * 2;
    uint64_t lost = lttng_discarded(out);
    if (lost == 0) {
        lost = lttng_discarded(out2);
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/lttng", work_dir);
    uint64_t bytes = du_bytes(dir);
    note(on, "%llu events, %llu discarded (as lttng stop reports), %.1f B/zone on disk (CTF)",
         (unsigned long long)events, (unsigned long long)lost,
         (double)bytes / (double)(events / 2));
    if (!cfg.keep) {
        rm_rf(dir);
    }
#endif
}

/* ---- peers: uftrace ---- */

/* Runs a calls program (optionally under uftrace) and returns its loop time in ns, or -1. */
static double run_calls(const char *uftrace, const char *prog, uint64_t n, char *out, size_t size) {
    char num[32], data[512];
    snprintf(num, sizeof num, "%llu", (unsigned long long)n);
    snprintf(data, sizeof data, "%s/uftrace.data", work_dir);
    int r;
    if (uftrace != NULL) {
        char *argv[] = {(char *)uftrace,
                        (char *)"record",
                        (char *)"--no-pager",
                        (char *)"-d",
                        data,
                        (char *)prog,
                        num,
                        NULL};
        r = run_cmd(argv, out, size, 1);
    } else {
        char *argv[] = {(char *)prog, num, NULL};
        r = run_cmd(argv, out, size, 1);
    }
    const char *p = strstr(out, "LOUPE_BENCH_CALLS ns=");
    if (r != 0 || p == NULL) {
        return -1;
    }
    return (double)strtoull(p + strlen("LOUPE_BENCH_CALLS ns="), NULL, 10);
}

static void uftrace_cases(void) {
    const char *name = "uftrace record (overhead per call)";
    char uftrace[4096], prog[4200], plain[4200], out[16384], why[256];
    if (!find_in_path("uftrace", uftrace, sizeof uftrace)) {
        add_na(name, "ns/call", "uftrace (Debian package uftrace) is not installed");
        return;
    }
    snprintf(prog, sizeof prog, "%s/loupe_bench_calls", self_dir);
    snprintf(plain, sizeof plain, "%s/loupe_bench_calls_plain", self_dir);
    if (access(prog, X_OK) != 0 || access(plain, X_OK) != 0) {
        add_na(name, "ns/call", "loupe_bench_calls(_plain) not found next to loupe_bench");
        return;
    }
    uint64_t n = scaled(1000000);
    double s[MAX_REPS], fs[MAX_REPS];
    char data[512];
    snprintf(data, sizeof data, "%s/uftrace.data", work_dir);
    for (int r = -1; r < cfg.reps; r++) {
        uint64_t t0 = mono_ns();
        bench_floor_rdtsc(floor_n());
        double f = (double)(mono_ns() - t0) / (double)floor_n();
        double p = run_calls(NULL, plain, n, out, sizeof out);
        double u = run_calls(uftrace, prog, n, out, sizeof out);
        if (p < 0 || u < 0) {
            first_line(out, why, sizeof why);
            char msg[300];
            snprintf(msg, sizeof msg, "uftrace record failed: %s", why);
            add_na(name, "ns/call", msg);
            return;
        }
        if (r >= 0) {
            s[r] = (u - p) / (double)n;
            fs[r] = f;
        }
    }
    bcase *c = add_case(name, "ns/call");
    set_stats(c, s, cfg.reps, fs);
    uint64_t bytes = du_bytes(data);
    note(c, "child process, -finstrument-functions build; %.1f B/call in uftrace.data",
         (double)bytes / (double)n);
    if (strstr(out, "LOST") != NULL || strstr(out, "lost") != NULL) {
        note(c, "uftrace reported lost records");
    }
    if (!cfg.keep) {
        rm_rf(data);
    }
}

/* ---- export and size ---- */

typedef struct rec_arg {
    uint64_t n;
    int cpu;
} rec_arg;

static void *record_thread(void *p) {
    rec_arg *a = p;
    pin_to(a->cpu);
    bench_zone_static(a->n);
    return NULL;
}

static uint64_t rss_bytes(void) {
    char line[256];
    read_line("/proc/self/statm", line, sizeof line);
    unsigned long size = 0, res = 0;
    if (sscanf(line, "%lu %lu", &size, &res) != 2) {
        return 0;
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Uncompressed bytes of a gzip file, or 0. */
static uint64_t gunzip_bytes(const char *path) {
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        return 0;
    }
    (void)gzbuffer(f, 1u << 20);
    static char buf[1 << 20];
    uint64_t total = 0;
    int r;
    while ((r = gzread(f, buf, sizeof buf)) > 0) {
        total += (uint64_t)r;
    }
    gzclose(f);
    return total;
}

/* Resets the kernel's peak-RSS mark (VmHWM) to the current RSS (clear_refs "5", Linux >= 4.0).
 * Returns 0, or -1 when it cannot (peak_rss_bytes() is then the peak of the whole run). */
static int reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f == NULL) {
        return -1;
    }
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* VmHWM (peak RSS since the last reset_peak_rss(), or since the process started), bytes. */
static uint64_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kib = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kib = strtoull(line + 6, NULL, 10);
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib * 1024u;
}

/* One format of the export rows: a session of its own that writes only this format. */
typedef struct export_fmt {
    unsigned bit;      /* LOUPE_FORMAT_* */
    const char *label; /* in the row names */
    int gz;            /* also report the uncompressed size */
} export_fmt;

static const export_fmt export_fmts[] = {
    {LOUPE_FORMAT_CHROME_JSON, "Chrome JSON gz", 1},
    {LOUPE_FORMAT_XPLANE, "XPlane", 0},
    {LOUPE_FORMAT_PERFETTO_PROTO, "Perfetto protobuf", 0},
};

/* Records per_thread static zones on each of 2 threads (pinned to CPUs 0 and 1) into a fresh
 * session that writes only format f; returns 0 or -1 (the start failed). */
static int export_record(unsigned f, uint64_t per_thread, uint64_t buffer) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/loupe", work_dir);
    loupe_trace_options o = {.log_dir = dir, .buffer_events = (uint32_t)buffer, .formats = f};
    if (loupe_start_trace(&o) != 0) {
        return -1;
    }
    pthread_t th[2];
    rec_arg a[2];
    for (int i = 0; i < 2; i++) {
        a[i] = (rec_arg){per_thread, i % ncpu};
        pthread_create(&th[i], NULL, record_thread, &a[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
    }
    return 0;
}

static void export_cases(void) {
    const uint64_t zones = scaled(10000000);
    const uint64_t per_thread = zones / 2;
    const uint64_t buffer = per_thread * 2 + 1024;
    const int reps = cfg.reps < 3 ? cfg.reps : 3;
    const size_t nfmt = sizeof export_fmts / sizeof export_fmts[0];
    double collect_s[3 * MAX_REPS];
    int ncollect = 0;
    uint64_t rss_before = 0, slots = 0, events = 0;
    char label[120];
    model_per_event = (double)sizeof(loupe_slice) / 2.0; /* a zone is 2 events, 1 slice */

    for (size_t k = 0; k < nfmt; k++) {
        const export_fmt *fm = &export_fmts[k];
        double stop_s[MAX_REPS], write_s[MAX_REPS], stop_evps[MAX_REPS], write_evps[MAX_REPS],
            mbps[MAX_REPS], extra[MAX_REPS];
        uint64_t bytes = 0, raw = 0, dropped = 0;
        int hwm = 0;
        for (int r = 0; r < reps; r++) {
            if (export_record(fm->bit, per_thread, buffer) != 0) {
                snprintf(label, sizeof label, "export %s: stop", fm->label);
                add_na(label, "s", loupe_last_error());
                return;
            }
            rss_before = rss_bytes();
            hwm = reset_peak_rss() == 0;
            loupe_trace_result res = {.size = sizeof res};
            uint64_t t0 = mono_ns();
            int rc = loupe_stop_trace(&res);
            uint64_t t1 = mono_ns();
            uint64_t peak = hwm ? peak_rss_bytes() : 0;
            const char *path = loupe_trace_result_path(&res, fm->bit);
            struct stat st;
            if (rc != 0 || path == NULL || stat(path, &st) != 0) {
                loupe_trace_result_free(&res);
                snprintf(label, sizeof label, "export %s: stop", fm->label);
                add_na(label, "s", rc != 0 ? loupe_last_error() : "the stop wrote no file");
                return;
            }
            bytes = (uint64_t)st.st_size;
            if (fm->gz && r == 0) {
                raw = gunzip_bytes(path);
            }
            events = res.events_recorded;
            dropped = res.events_dropped;
            slots = 0;
            for (size_t i = 0; i < res.thread_count; i++) {
                slots += res.threads[i].capacity_needed;
            }
            if (!cfg.keep) {
                rm_rf(res.run_dir);
            }
            loupe_trace_result_free(&res);
            /* The write alone: the model kept from the stop, written again in the same format;
             * stop - write = the collection into the model. */
            char again[600];
            snprintf(again, sizeof again, "%s/again", work_dir);
            loupe_trace_result res2 = {.size = sizeof res2};
            uint64_t t2 = mono_ns();
            rc = loupe_write_last_trace(again, &res2);
            uint64_t t3 = mono_ns();
            loupe_trace_result_free(&res2);
            rm_rf(again);
            stop_s[r] = (double)(t1 - t0) / 1e9;
            write_s[r] = rc == 0 ? (double)(t3 - t2) / 1e9 : NAN;
            collect_s[ncollect++] = stop_s[r] - write_s[r];
            stop_evps[r] = (double)events / stop_s[r] / 1e6;
            write_evps[r] = (double)events / write_s[r] / 1e6;
            mbps[r] = (double)bytes / write_s[r] / 1e6;
            extra[r] =
                hwm && peak > rss_before ? (double)(peak - rss_before) / (double)events : NAN;
        }
        snprintf(label, sizeof label, "export %s: stop (collect + write)", fm->label);
        bcase *c = add_case(label, "s");
        set_stats(c, stop_s, reps, NULL);
        note(c, "%.0fM zones on 2 threads, %llu events, %llu dropped; %d stops, only this format",
             (double)zones / 1e6, (unsigned long long)events, (unsigned long long)dropped, reps);
        snprintf(label, sizeof label, "export %s: of which the write", fm->label);
        c = add_case(label, "s");
        set_stats(c, write_s, reps, NULL);
        note(c, "loupe_write_last_trace of the kept model, same format");
        snprintf(label, sizeof label, "export %s: events/s of the stop", fm->label);
        c = add_case(label, "M events/s");
        set_stats(c, stop_evps, reps, NULL);
        note(c, "one core: the stop runs on the calling thread");
        if (fm->bit == LOUPE_FORMAT_CHROME_JSON) {
            k_evps = c;
        } else if (fm->bit == LOUPE_FORMAT_PERFETTO_PROTO) {
            k_pf_evps = c;
        }
        snprintf(label, sizeof label, "export %s: events/s of the write alone", fm->label);
        c = add_case(label, "M events/s");
        set_stats(c, write_evps, reps, NULL);
        snprintf(label, sizeof label, "export %s: MB/s of file (over the write)", fm->label);
        c = add_case(label, "MB/s");
        set_stats(c, mbps, reps, NULL);
        snprintf(label, sizeof label, "export %s: bytes/event on disk", fm->label);
        c = add_case(label, "B/event");
        set_value(c, (double)bytes / (double)events);
        note(c, "%.1f MB", (double)bytes / 1e6);
        if (fm->bit == LOUPE_FORMAT_PERFETTO_PROTO) {
            k_pf_bytes = c;
        }
        if (fm->gz) {
            c = add_case("export Chrome JSON: bytes/event before gzip", "B/event");
            set_value(c, (double)raw / (double)events);
        }
        snprintf(label, sizeof label, "export %s: the stop's extra memory", fm->label);
        c = add_case(label, "B/event");
        if (hwm) {
            set_stats(c, extra, reps, NULL);
            note(c, "peak RSS during the stop (VmHWM, reset before it) - RSS before it");
            stop_extra_per_event = isnan(stop_extra_per_event) || c->max > stop_extra_per_event
                                       ? c->max
                                       : stop_extra_per_event;
        } else {
            c->na = 1;
            note(c, "cannot reset the peak RSS (/proc/self/clear_refs)");
        }
    }
    if (ncollect == 0) {
        return;
    }
    bcase *c = add_case("export: collection into the model (stop - write)", "s");
    set_stats(c, collect_s, ncollect, NULL);
    note(c, "all %d stops above; %.1f M events/s", ncollect, (double)events / c->med / 1e6);
    c = k_memzone = add_case("export: bytes/zone in memory (buffer slots used / zones)", "B/zone");
    set_value(c, (double)slots * (double)sizeof(loupe__ev) / (double)zones);
    note(c, "%zu B per event slot", sizeof(loupe__ev));
    c = add_case("export: RSS before the stop (the buffers)", "MiB");
    set_value(c, (double)rss_before / 1048576.0);
    note(c, "the last stop's");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    c = add_case("export: peak RSS of the whole run (ru_maxrss)", "MiB");
    set_value(c, (double)ru.ru_maxrss / 1024.0);
    note(c, "the model's slices alone: %.1f B/event (%zu B per zone)", model_per_event,
         sizeof(loupe_slice));
}

/* ---- the machine ---- */

typedef struct machine {
    char cpu[128];
    int cores;
    int tsc_invariant;
    double tsc_ghz;
    char clocksource[64];
    char kernel[200];
    char compiler[128];
    double mem_gib;
} machine;

static machine mach;

static void machine_info(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int constant = 0, nonstop = 0;
    snprintf(mach.cpu, sizeof mach.cpu, "unknown");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':') != NULL) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ') {
                v++;
            }
            snprintf(mach.cpu, sizeof mach.cpu, "%.*s", (int)strcspn(v, "\n"), v);
        } else if (strncmp(line, "flags", 5) == 0) {
            constant = strstr(line, " constant_tsc") != NULL;
            nonstop = strstr(line, " nonstop_tsc") != NULL;
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    mach.tsc_invariant = constant && nonstop;
    mach.cores = ncpu;
    read_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", mach.clocksource,
              sizeof mach.clocksource);
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(mach.kernel, sizeof mach.kernel, "%s %s", u.sysname, u.release);
    }
#if defined(__clang__)
    snprintf(mach.compiler, sizeof mach.compiler, "clang %s", __clang_version__);
#elif defined(__GNUC__)
    snprintf(mach.compiler, sizeof mach.compiler, "gcc %s", __VERSION__);
#endif
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        mach.mem_gib = (double)si.totalram * si.mem_unit / 1073741824.0;
    }
    /* TSC rate against CLOCK_MONOTONIC over 50 ms. */
    uint64_t t0 = mono_ns(), c0 = __builtin_ia32_rdtsc();
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    uint64_t t1 = mono_ns(), c1 = __builtin_ia32_rdtsc();
    mach.tsc_ghz = (double)(c1 - c0) / (double)(t1 - t0);
}

/* ---- the targets of issue 6 ---- */

typedef struct target {
    const char *figure;
    const char *goal;
    char measured[120];
    int status; /* 1 met, 0 missed, -1 not measured */
} target;

static target targets[12];
static size_t ntargets;

static int usable(const bcase *c) {
    return c != NULL && !c->na && !isnan(c->med);
}

static target *add_target(const char *figure, const char *goal) {
    target *t = &targets[ntargets++];
    t->figure = figure;
    t->goal = goal;
    t->status = -1;
    snprintf(t->measured, sizeof t->measured, "not measured");
    return t;
}

static void check(target *t, int met, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(target *t, int met, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->measured, sizeof t->measured, fmt, ap);
    va_end(ap);
    t->status = met != 0;
}

static void evaluate_targets(void) {
    target *t = add_target("static-name zone, tracing, 1 thread", "<= 1.15 x rdtsc floor");
    if (usable(k_static)) {
        check(t, k_static->ratio <= 1.15, "%.2f x (%.2f ns)", k_static->ratio, k_static->med);
    }
    t = add_target("per-thread cost, 2 and 4 threads", "within 10% of 1 thread");
    if (usable(k_mt[0]) && usable(k_mt[1]) && usable(k_mt[2])) {
        /* Each ratio to the floor run on the same threads just before: drift cancels. */
        double r2 = k_mt[1]->ratio / k_mt[0]->ratio, r4 = k_mt[2]->ratio / k_mt[0]->ratio;
        check(t, r2 <= 1.10 && r4 <= 1.10, "2T %+.1f%%, 4T %+.1f%% (x floor %.2f, %.2f, %.2f)",
              (r2 - 1) * 100, (r4 - 1) * 100, k_mt[0]->ratio, k_mt[1]->ratio, k_mt[2]->ratio);
    }
    t = add_target("zone, no trace active", "<= 0.6 ns");
    if (usable(k_notrace) && usable(k_empty)) {
        check(t, k_notrace->med <= 0.6, "%.2f ns (empty loop %.2f ns)", k_notrace->med,
              k_empty->med);
    }
    t = add_target("zone, compiled out", "0 (= the empty loop)");
    if (usable(k_off) && !isnan(compiled_out_delta)) {
        check(t, fabs(compiled_out_delta) <= 0.05, "%+.3f ns vs the empty loop",
              compiled_out_delta);
    }
    t = add_target("dynamic-name zone (16 B name)", "<= 2 x static zone");
    if (usable(k_dyn) && usable(k_static)) {
        /* Ratios to their own interleaved floors: drift between the two cases cancels. */
        double r = k_dyn->ratio / k_static->ratio;
        check(t, r <= 2.0, "%.2f x (%.2f vs %.2f ns)", r, k_dyn->med, k_static->med);
    }
    t = add_target("memory per zone in the buffer", "<= 32 B");
    if (usable(k_memzone)) {
        check(t, k_memzone->med <= 32.0, "%.0f B", k_memzone->med);
    }
    t = add_target("LTTng-UST recording, same run", "loupe >= 5 x faster per zone");
    if (usable(k_lttng) && usable(k_static)) {
        double r = k_lttng->ratio / k_static->ratio;
        check(t, r >= 5.0, "%.1f x (LTTng %.1f ns = %.1f x floor)", r, k_lttng->med,
              k_lttng->ratio);
    }
    t = add_target("Chrome JSON (gzipped) export", ">= 3 M events/s, one core");
    if (usable(k_evps)) {
        check(t, k_evps->med >= 3.0, "%.2f M events/s", k_evps->med);
    }
    t = add_target("Perfetto protobuf export", ">= 15 M events/s, <= 8 B/event");
    if (usable(k_pf_evps) && usable(k_pf_bytes)) {
        check(t, k_pf_evps->med >= 15.0 && k_pf_bytes->med <= 8.0, "%.2f M events/s, %.2f B/event",
              k_pf_evps->med, k_pf_bytes->med);
    }
    t = add_target("stop with 10 M events recorded", "no copy beyond buffers + model");
    if (!isnan(stop_extra_per_event)) {
        check(t, stop_extra_per_event <= model_per_event * 1.10,
              "stop adds %.1f B/event (worst format); the model is %.1f B/event",
              stop_extra_per_event, model_per_event);
    }
}

static const char *status_word(int st) {
    return st < 0 ? "n/a" : st ? "met" : "MISSED";
}

/* ---- output ---- */

static void print_table(void) {
    printf("\nloupe_bench %s: %s, %d cores, TSC %s %.3f GHz, clocksource %s, %s, %s\n",
           LOUPE_VERSION_STRING, mach.cpu, mach.cores,
           mach.tsc_invariant ? "invariant" : "NOT invariant", mach.tsc_ghz, mach.clocksource,
           mach.kernel, mach.compiler);
    printf("median, min, max of %d repetitions after a warm-up; floor = median of the rdtsc "
           "floor (2x rdtsc + 2x 16 B stores)\nrun interleaved with the case's repetitions; "
           "x floor = median / floor\n\n",
           cfg.reps);
    printf("%-60s %9s %9s %9s  %-11s %7s %7s  %s\n", "case", "median", "min", "max", "unit",
           "floor", "x floor", "note");
    for (size_t i = 0; i < ncases; i++) {
        const bcase *c = &cases[i];
        char m[32], lo[32], hi[32], ra[32], fl[32];
        if (c->na) {
            printf("%-60s %9s %9s %9s  %-11s %7s %7s  %s\n", c->name, "n/a", "", "", c->unit, "",
                   "", c->note);
            continue;
        }
        fmt_num(fl, sizeof fl, c->floor);
        fmt_num(m, sizeof m, c->med);
        fmt_num(lo, sizeof lo, c->min);
        fmt_num(hi, sizeof hi, c->max);
        if (isnan(c->ratio)) {
            snprintf(ra, sizeof ra, "-");
        } else {
            snprintf(ra, sizeof ra, "%.2f", c->ratio);
        }
        printf("%-60s %9s %9s %9s  %-11s %7s %7s  %s\n", c->name, m, lo, hi, c->unit, fl, ra,
               c->note);
    }
    printf("\ntargets (issue 6)\n%-40s %-32s %-7s %s\n", "figure", "target", "status", "measured");
    for (size_t i = 0; i < ntargets; i++) {
        printf("%-40s %-32s %-7s %s\n", targets[i].figure, targets[i].goal,
               status_word(targets[i].status), targets[i].measured);
    }
    fflush(stdout);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);
        } else if (ch < 0x20) {
            fprintf(f, "\\u%04x", ch);
        } else {
            fputc(ch, f);
        }
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isnan(v) || isinf(v)) {
        fputs("null", f);
    } else {
        fprintf(f, "%.6g", v);
    }
}

static int write_json(const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "loupe_bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n  \"machine\": {\"cpu\": ");
    json_str(f, mach.cpu);
    fprintf(f, ", \"cores\": %d, \"tsc_invariant\": %s, \"tsc_ghz\": ", mach.cores,
            mach.tsc_invariant ? "true" : "false");
    json_num(f, mach.tsc_ghz);
    fprintf(f, ", \"clocksource\": ");
    json_str(f, mach.clocksource);
    fprintf(f, ", \"kernel\": ");
    json_str(f, mach.kernel);
    fprintf(f, ", \"compiler\": ");
    json_str(f, mach.compiler);
    fprintf(f, ", \"memory_gib\": ");
    json_num(f, mach.mem_gib);
    fprintf(f, ", \"loupe_version\": ");
    json_str(f, LOUPE_VERSION_STRING);
    fprintf(f, ", \"repetitions\": %d},\n  \"cases\": [\n", cfg.reps);
    for (size_t i = 0; i < ncases; i++) {
        const bcase *c = &cases[i];
        fprintf(f, "    {\"name\": ");
        json_str(f, c->name);
        fprintf(f, ", \"unit\": ");
        json_str(f, c->unit);
        fprintf(f, ", \"median\": ");
        json_num(f, c->na ? NAN : c->med);
        fprintf(f, ", \"min\": ");
        json_num(f, c->na ? NAN : c->min);
        fprintf(f, ", \"max\": ");
        json_num(f, c->na ? NAN : c->max);
        fprintf(f, ", \"ratio_to_floor\": ");
        json_num(f, c->na ? NAN : c->ratio);
        fprintf(f, ", \"floor_median\": ");
        json_num(f, c->na ? NAN : c->floor);
        if (c->na) {
            fprintf(f, ", \"status\": \"n/a\"");
        }
        if (c->note[0]) {
            fprintf(f, ", \"note\": ");
            json_str(f, c->note);
        }
        fprintf(f, "}%s\n", i + 1 < ncases ? "," : "");
    }
    fprintf(f, "  ],\n  \"targets\": [\n");
    for (size_t i = 0; i < ntargets; i++) {
        fprintf(f, "    {\"figure\": ");
        json_str(f, targets[i].figure);
        fprintf(f, ", \"target\": ");
        json_str(f, targets[i].goal);
        fprintf(f, ", \"status\": ");
        json_str(f, status_word(targets[i].status));
        fprintf(f, ", \"measured\": ");
        json_str(f, targets[i].measured);
        fprintf(f, "}%s\n", i + 1 < ntargets ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "loupe_bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- main ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe_bench [--json FILE] [--reps N] [--quick] [--no-peers] [--no-export]\n"
            "                   [--keep]\n"
            "Measures loupe's recording cost against an rdtsc floor and peers (LTTng-UST,\n"
            "uftrace) in one process run, and loupe's export speed and sizes; prints a table.\n"
            "  --json FILE  also write the figures as JSON\n"
            "  --reps N     timed repetitions per case (default 7, at most %d)\n"
            "  --quick      a tenth of the iterations (a smoke run; figures are noisier)\n"
            "  --no-peers   skip LTTng-UST recording and uftrace\n"
            "  --no-export  skip the 10M-zone export case\n"
            "  --keep       keep the traces written (path printed at the end)\n"
            "For LTTng-UST's recording case, lttng-sessiond must run before loupe_bench starts\n"
            "(bench/run.sh starts one).\n",
            MAX_REPS);
}

static int parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0 && i + 1 < argc) {
            cfg.json = argv[++i];
        } else if (strcmp(a, "--reps") == 0 && i + 1 < argc) {
            cfg.reps = atoi(argv[++i]);
            if (cfg.reps < 1 || cfg.reps > MAX_REPS) {
                fprintf(stderr, "loupe_bench: --reps must be 1..%d\n", MAX_REPS);
                return 2;
            }
        } else if (strcmp(a, "--quick") == 0) {
            cfg.scale = 0.1;
        } else if (strcmp(a, "--no-peers") == 0) {
            cfg.skip_peers = 1;
        } else if (strcmp(a, "--no-export") == 0) {
            cfg.skip_export = 1;
        } else if (strcmp(a, "--keep") == 0) {
            cfg.keep = 1;
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

static void progress(const char *what) {
    fprintf(stderr, "loupe_bench: %s\n", what);
}

int main(int argc, char **argv) {
    int r = parse_args(argc, argv);
    if (r != 0) {
        return r;
    }
    ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) {
        ncpu = 1;
    }
    if (ncpu > 8) {
        ncpu = 8;
    }
    pin_cpu = ncpu - 1;
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = 0;
    char *slash = strrchr(exe, '/');
    snprintf(self_dir, sizeof self_dir, "%.*s", slash ? (int)(slash - exe) : 1, slash ? exe : ".");
    const char *tmp = getenv("TMPDIR");
    snprintf(work_dir, sizeof work_dir, "%s/loupe-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(work_dir) == NULL) {
        fprintf(stderr, "loupe_bench: cannot create %s: %s\n", work_dir, strerror(errno));
        return 1;
    }
    machine_info();
    double s[MAX_REPS], fs[MAX_REPS];

    /* Let the CPU and any daemon started with us settle before the first figure. */
    pin_to(pin_cpu);
    for (uint64_t t0 = mono_ns(); mono_ns() - t0 < 300000000u;) {
        bench_floor_rdtsc(10000);
    }

    progress("floors");
    bcase *c = add_case("floor: 2x rdtsc + 2x 16 B TLS stores", "ns/zone");
    time_loop(bench_floor_rdtsc, scaled(2000000), s, NULL);
    set_stats(c, s, cfg.reps, NULL);
    c->floor = c->med;
    c->ratio = 1.0;
    c = add_case("floor: 2x clock_gettime(MONOTONIC) + 2x 16 B stores", "ns/zone");
    time_loop(bench_floor_clock, scaled(1000000), s, fs);
    set_stats(c, s, cfg.reps, fs);
    {
        /* The three cheapest loops, interleaved: compiled out must equal the empty loop. */
        bench_loop_fn fns[3] = {bench_empty_loop, bench_zone_static_off, bench_zone_static};
        uint64_t ns[3] = {scaled(50000000), scaled(50000000), scaled(50000000)};
        double t[3][MAX_REPS], d[MAX_REPS];
        time_multi(fns, ns, 3, t, fs);
        k_empty = add_case("empty loop", "ns/iter");
        set_stats(k_empty, t[0], cfg.reps, fs);
        k_notrace = add_case("loupe static zone, no trace active", "ns/zone");
        set_stats(k_notrace, t[2], cfg.reps, fs);
        k_off = add_case("loupe static zone, compiled out (LOUPE_DISABLE)", "ns/zone");
        set_stats(k_off, t[1], cfg.reps, fs);
        for (int i = 0; i < cfg.reps; i++) {
            d[i] = t[1][i] - t[0][i];
        }
        compiled_out_delta = median_of(d, cfg.reps);
        note(k_off, "%+.3f ns vs the empty loop (median of paired differences)",
             compiled_out_delta);
    }
    sink = bench_floor_checksum();

    progress("loupe, one thread");
    k_static = loupe_case("loupe static zone, tracing", "ns/zone", bench_zone_static,
                          scaled(500000), 2, 0);
    {
        /* A 16-byte name is copied inline after its begin, 15 bytes per 16-byte slot: 2 slots,
         * so a dynamic zone is 4 events (begin, 2 name slots, end). */
        uint64_t n = scaled(200000);
        k_dyn = loupe_case("loupe dynamic-name zone (16 B name), tracing", "ns/zone",
                           bench_zone_dyn, n, 4, 0);
    }
    loupe_case("loupe zone + 2 int64 args, tracing", "ns/zone", bench_zone_args, scaled(200000), 6,
               0);
    loupe_case("loupe counter sample, tracing", "ns/sample", bench_counter, scaled(500000), 2, 0);

    progress("threads");
    {
        static const int counts[] = {1, 2, 4};
        char name[80];
        for (size_t i = 0; i < 3; i++) {
            uint64_t n = scaled(250000);
            snprintf(name, sizeof name, "floor rdtsc, %d thread%s (CPU ns per thread)", counts[i],
                     counts[i] > 1 ? "s" : "");
            bcase *f = add_case(name, "ns/zone");
            snprintf(name, sizeof name, "loupe static zone, %d thread%s (CPU ns per thread)",
                     counts[i], counts[i] > 1 ? "s" : "");
            c = k_mt[i] = add_case(name, "ns/zone");
            uint64_t per_thread = (uint64_t)(cfg.reps + 1) * n * 2;
            if (session_start(per_thread + 64, 0) != 0) {
                c->na = f->na = 1;
                note(c, "loupe_start_trace failed: %s", loupe_last_error());
                continue;
            }
            time_threads(bench_zone_static, n, counts[i], s, fs);
            session_stop(c, per_thread * (uint64_t)counts[i]);
            set_stats(c, s, cfg.reps, fs);
            set_stats(f, fs, cfg.reps, fs);
            note(f, "the same threads, interleaved with the loupe row below");
        }
    }

    progress("function tracing");
    function_tracing_cases();

    if (!cfg.skip_peers) {
        progress("LTTng-UST");
        lttng_cases();
        progress("uftrace");
        uftrace_cases();
    } else {
        add_na("LTTng-UST begin+end, session recording", "ns/zone", "--no-peers");
        add_na("uftrace record (overhead per call)", "ns/call", "--no-peers");
    }

    if (!cfg.skip_export) {
        progress("export");
        export_cases();
    }

    evaluate_targets();
    print_table();
    if (cfg.keep) {
        printf("\ntraces kept under %s\n", work_dir);
    } else {
        rm_rf(work_dir);
    }
    if (cfg.json != NULL && write_json(cfg.json) != 0) {
        return 1;
    }
    return 0;
}
