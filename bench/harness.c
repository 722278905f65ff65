/* harness.c: the harness's rows and statistics, the timing loops every case uses (one pinned
 * thread with the rdtsc floor interleaved, or several threads timed by their CPU clocks), and
 * the loupe session around a recording case. main.c's header says the method.
 */
#include "harness.h"

#include <loupe/loupe.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- rows and statistics ---- */

bench_case bench_cases[BENCH_MAX_CASES];
size_t bench_ncases;

bench_case *bench_add_case(const char *name, const char *unit) {
    if (bench_ncases == BENCH_MAX_CASES) {
        fprintf(stderr, "loupe_bench: too many cases\n");
        exit(1);
    }
    bench_case *c = &bench_cases[bench_ncases++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->unit, sizeof c->unit, "%s", unit);
    c->med = c->min = c->max = c->ratio = c->floor = NAN;
    return c;
}

void bench_note(bench_case *c, const char *fmt, ...) {
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

bench_case *bench_add_na(const char *name, const char *unit, const char *why) {
    bench_case *c = bench_add_case(name, unit);
    c->na = 1;
    snprintf(c->note, sizeof c->note, "%s", why);
    return c;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(const double *v, int n) {
    double t[BENCH_MAX_REPS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

void bench_set_stats(bench_case *c, const double *s, int n, const double *fs) {
    c->med = bench_median(s, n);
    c->min = c->max = s[0];
    for (int i = 1; i < n; i++) {
        c->min = s[i] < c->min ? s[i] : c->min;
        c->max = s[i] > c->max ? s[i] : c->max;
    }
    if (fs != NULL) {
        c->floor = bench_median(fs, n);
        c->ratio = c->med / c->floor;
    }
}

void bench_set_value(bench_case *c, double v) {
    c->med = c->min = c->max = v;
}

/* ---- clocks and CPUs ---- */

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((size_t)cpu, &set);
    (void)sched_setaffinity(0, sizeof set, &set);
}

void bench_unpin(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < bench_ncpu; i++) {
        CPU_SET((size_t)i, &set);
    }
    (void)sched_setaffinity(0, sizeof set, &set);
}

/* ---- the timing harnesses ---- */

/* Interleaving makes every ratio compare figures taken within milliseconds of each other, so
 * that a shared machine's drift cancels out. */
void bench_time_multi(const bench_loop_fn *fns, const uint64_t *ns, int k,
                      double s[][BENCH_MAX_REPS], double *fs) {
    if (fs != NULL) {
        bench_floor_rdtsc(bench_floor_n());
    }
    for (int j = 0; j < k; j++) {
        fns[j](ns[j]);
    }
    for (int r = 0; r < bench_cfg.reps; r++) {
        if (fs != NULL) {
            uint64_t t0 = bench_mono_ns();
            bench_floor_rdtsc(bench_floor_n());
            fs[r] = (double)(bench_mono_ns() - t0) / (double)bench_floor_n();
        }
        for (int j = 0; j < k; j++) {
            uint64_t t0 = bench_mono_ns();
            fns[j](ns[j]);
            s[j][r] = (double)(bench_mono_ns() - t0) / (double)ns[j];
        }
    }
}

void bench_time_loop(bench_loop_fn fn, uint64_t n, double *s, double *fs) {
    double t[1][BENCH_MAX_REPS];
    bench_time_multi(&fn, &n, 1, t, fs);
    memcpy(s, t[0], sizeof t[0]);
}

typedef struct mt_run {
    bench_loop_fn fn;
    uint64_t n;
    int nthreads;
    pthread_barrier_t bar;
    double cpu_ns[BENCH_MAX_REPS][8];
    double floor_ns[BENCH_MAX_REPS][8];
} mt_run;

typedef struct mt_arg {
    mt_run *run;
    int index;
} mt_arg;

static void *mt_thread(void *p) {
    mt_arg *a = p;
    mt_run *m = a->run;
    bench_pin_to(a->index % bench_ncpu);
    bench_floor_rdtsc(bench_floor_n());
    m->fn(m->n); /* warm-up: also the thread's first event (it joins the session) */
    for (int r = 0; r < bench_cfg.reps; r++) {
        pthread_barrier_wait(&m->bar);
        uint64_t t0 = thread_cpu_ns();
        bench_floor_rdtsc(bench_floor_n());
        uint64_t t1 = thread_cpu_ns();
        m->floor_ns[r][a->index] = (double)(t1 - t0) / (double)bench_floor_n();
        pthread_barrier_wait(&m->bar);
        t0 = thread_cpu_ns();
        m->fn(m->n);
        t1 = thread_cpu_ns();
        m->cpu_ns[r][a->index] = (double)(t1 - t0) / (double)m->n;
        pthread_barrier_wait(&m->bar);
    }
    return NULL;
}

void bench_time_threads(bench_loop_fn fn, uint64_t n, int nthreads, double *s, double *fs) {
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
    for (int r = 0; r < bench_cfg.reps; r++) {
        double sum = 0, fsum = 0;
        for (int i = 0; i < nthreads; i++) {
            sum += m.cpu_ns[r][i];
            fsum += m.floor_ns[r][i];
        }
        s[r] = sum / nthreads;
        fs[r] = fsum / nthreads;
    }
}

bench_case *bench_least_row(const char *name, bench_loop_fn fn, uint64_t n,
                            unsigned slots_per_iter) {
    double s[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];
    bench_case *c = bench_add_case(name, "ns/zone");
    uint64_t slots = (uint64_t)(bench_cfg.reps + 1) * n * slots_per_iter;
    if (bench_least_prepare(slots) != 0) {
        c->na = 1;
        bench_note(c, "mmap of %llu slots failed", (unsigned long long)slots);
        return c;
    }
    bench_time_threads(fn, n, 1, s, fs);
    uint64_t full = bench_least_release();
    bench_set_stats(c, s, bench_cfg.reps, fs);
    if (full != 0) {
        bench_note(c, "%llu SLOTS FOUND NO ROOM", (unsigned long long)full);
    } else {
        bench_note(c, "TLS cursor, room test, fresh memory; no guard, session test or reserve");
    }
    return c;
}

/* ---- loupe sessions around a case ---- */

int bench_session_start(uint64_t buffer_events, int function_tracing) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/loupe", bench_work_dir);
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

void bench_session_stop(bench_case *c, uint64_t expected_events) {
    loupe_trace_result res = {.size = sizeof res};
    int r = loupe_stop_trace(&res);
    if (r != 0) {
        bench_note(c, "stop failed: %s", loupe_last_error());
    }
    if (res.events_dropped != 0 || res.events_recorded != expected_events) {
        bench_note(c, "RECORDED %llu of %llu events, %llu DROPPED: not the pure recording path",
                   (unsigned long long)res.events_recorded, (unsigned long long)expected_events,
                   (unsigned long long)res.events_dropped);
    } else {
        bench_note(c, "%llu events recorded, 0 dropped", (unsigned long long)res.events_recorded);
    }
    if (!bench_cfg.keep && res.run_dir != NULL) {
        bench_rm_rf(res.run_dir);
    }
    loupe_trace_result_free(&res);
}

bench_case *bench_loupe_case(const char *name, const char *unit, bench_loop_fn fn, uint64_t n,
                             unsigned events_per_iter, uint64_t buffer_events) {
    bench_case *c = bench_add_case(name, unit);
    double s[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];
    uint64_t expected = (uint64_t)(bench_cfg.reps + 1) * n * events_per_iter;
    if (buffer_events < expected + 64) {
        buffer_events = expected + 64;
    }
    if (bench_session_start(buffer_events, 0) != 0) {
        c->na = 1;
        bench_note(c, "loupe_start_trace failed: %s", loupe_last_error());
        return c;
    }
    bench_time_loop(fn, n, s, fs);
    bench_session_stop(c, expected);
    bench_set_stats(c, s, bench_cfg.reps, fs);
    return c;
}
