/* case_record.c: what a thread's life costs under tracing: the first zone of a new thread, a
 * thread's create + first zone + join against the same untraced, and 100,000 short threads of
 * two zones each in one session (time against untraced, resident and address-space growth).
 *
 * These rows run unpinned (threads inherit the creator's affinity; a thread's creation and its
 * join would otherwise share one CPU with the loupe keeper) and put the single-thread cases'
 * pinning back afterwards. Threads get 128 KiB stacks, traced and untraced alike: glibc caches
 * exited threads' stacks (up to 40 MiB), which is not loupe's memory.
 */
#include "harness.h"

#include <loupe/loupe.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC_STACK (128u << 10)

static pthread_attr_t rec_attr;

static void *first_zone_timed(void *arg) {
    uint64_t t0 = bench_mono_ns();
    { LOUPE_ZONE("rec_first"); }
    *(double *)arg = (double)(bench_mono_ns() - t0) / 1000.0;
    return NULL;
}

static void *one_zone(void *arg) {
    (void)arg;
    LOUPE_ZONE("rec_one");
    return NULL;
}

static void *two_zones(void *arg) {
    (void)arg;
    { LOUPE_ZONE("rec_churn_a"); }
    { LOUPE_ZONE("rec_churn_b"); }
    return NULL;
}

/* n threads, created and joined one at a time; µs per thread. */
static double create_join(uint64_t n, void *(*fn)(void *)) {
    uint64_t t0 = bench_mono_ns();
    for (uint64_t i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, &rec_attr, fn, NULL) != 0) {
            return NAN;
        }
        pthread_join(t, NULL);
    }
    return (double)(bench_mono_ns() - t0) / 1000.0 / (double)n;
}

/* n threads, created and joined two at a time; seconds in all. */
static double churn(uint64_t n) {
    uint64_t t0 = bench_mono_ns();
    for (uint64_t i = 0; i < n; i += 2) {
        pthread_t a, b;
        if (pthread_create(&a, &rec_attr, two_zones, NULL) != 0 ||
            pthread_create(&b, &rec_attr, two_zones, NULL) != 0) {
            return NAN;
        }
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }
    return (double)(bench_mono_ns() - t0) / 1e9;
}

/* "VmRSS:" / "VmSize:" of /proc/self/status, in MiB; NAN when unreadable. */
static double status_mib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) {
        return NAN;
    }
    char line[256];
    double v = NAN;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, kl) == 0) {
            v = (double)strtoull(line + kl, NULL, 10) / 1024.0;
            break;
        }
    }
    fclose(f);
    return v;
}

static void first_event_rows(void) {
    enum { K = 32 };
    bench_case *c = bench_k.rec_first = bench_add_case("first zone of a new thread", "us");
    double s[BENCH_MAX_REPS], per[K];
    if (bench_session_start(64, 0) != 0) {
        c->na = 1;
        bench_note(c, "loupe_start_trace failed: %s", loupe_last_error());
        return;
    }
    for (int r = 0; r <= bench_cfg.reps; r++) { /* r = 0: the warm-up */
        for (int i = 0; i < K; i++) {
            pthread_t t;
            pthread_create(&t, &rec_attr, first_zone_timed, &per[i]);
            pthread_join(t, NULL);
        }
        if (r > 0) {
            s[r - 1] = bench_median(per, K);
        }
    }
    bench_session_stop(c, (uint64_t)(bench_cfg.reps + 1) * K * 2);
    bench_set_stats(c, s, bench_cfg.reps, NULL);
    bench_note(c, "begin + end, timed inside the thread; median of %d threads a repetition", K);
}

static void create_rows(void) {
    uint64_t n = bench_scaled(2000);
    bench_case *u = bench_add_case("thread create + 1 zone + join, untraced", "us/thread");
    bench_case *c = bench_k.rec_create =
        bench_add_case("thread create + 1 zone + join, traced", "us/thread");
    double su[BENCH_MAX_REPS], st[BENCH_MAX_REPS];
    uint64_t recorded = 0;
    (void)create_join(n / 4 + 1, one_zone); /* warm-up: the stack cache, the allocator */
    for (int r = 0; r < bench_cfg.reps; r++) {
        su[r] = create_join(n, one_zone);
        if (bench_session_start(64, 0) != 0) {
            c->na = 1;
            bench_note(c, "loupe_start_trace failed: %s", loupe_last_error());
            return;
        }
        st[r] = create_join(n, one_zone);
        loupe_trace_result res = {.size = sizeof res};
        (void)loupe_stop_trace(&res);
        recorded += res.events_recorded;
        if (!bench_cfg.keep && res.run_dir != NULL) {
            bench_rm_rf(res.run_dir);
        }
        loupe_trace_result_free(&res);
    }
    bench_set_stats(u, su, bench_cfg.reps, NULL);
    bench_set_stats(c, st, bench_cfg.reps, su);
    bench_note(c, "ratio: to the untraced row, interleaved; %llu of %llu events recorded",
               (unsigned long long)recorded,
               (unsigned long long)(2 * n * (uint64_t)bench_cfg.reps));
}

static void churn_rows(void) {
    uint64_t n = bench_scaled(100000) & ~(uint64_t)1;
    char name[80];
    snprintf(name, sizeof name, "%llu threads x 2 zones, untraced", (unsigned long long)n);
    bench_case *u = bench_add_case(name, "s");
    snprintf(name, sizeof name, "%llu threads x 2 zones, traced", (unsigned long long)n);
    bench_case *c = bench_k.rec_churn = bench_add_case(name, "s");
    bench_case *rss = bench_k.rec_churn_rss =
        bench_add_case("  their resident memory growth", "MiB");
    bench_case *vm = bench_k.rec_churn_vm = bench_add_case("  their address space growth", "MiB");
    double su = churn(n);
    if (bench_session_start(64, 0) != 0) {
        c->na = rss->na = vm->na = 1;
        bench_note(c, "loupe_start_trace failed: %s", loupe_last_error());
        return;
    }
    double rss0 = status_mib("VmRSS:"), vm0 = status_mib("VmSize:");
    double st = churn(n);
    double rss1 = status_mib("VmRSS:"), vm1 = status_mib("VmSize:");
    bench_session_stop(c, 4 * n);
    bench_set_value(u, su);
    bench_set_value(c, st);
    c->floor = su;
    c->ratio = st / su;
    bench_set_value(rss, rss1 - rss0);
    bench_set_value(vm, vm1 - vm0);
    bench_note(c, "one run each; ratio: to the untraced row");
    bench_note(rss, "VmRSS after the last join minus before the first thread (session started)");
    bench_note(vm, "VmSize, the same way (the session's region is reserved at the start)");
}

void bench_cases_record(void) {
    bench_unpin();
    pthread_attr_init(&rec_attr);
    pthread_attr_setstacksize(&rec_attr, REC_STACK);
    first_event_rows();
    create_rows();
    churn_rows();
    pthread_attr_destroy(&rec_attr);
    bench_pin_to(bench_ncpu - 1); /* main.c's pin_cpu */
}
