/* case_read.c: loupe's readers, one format at a time (Chrome JSON gz, XPlane, Perfetto
 * protobuf): one session records 2 M zones on 2 threads (a tenth of the second thread's zones
 * carry two int64 arguments) and writes all three formats; then loupe_trace_read() of each file
 * is timed on this thread in CPU time (CLOCK_THREAD_CPUTIME_ID: the reads are single-threaded,
 * and on a loaded machine the wall time varies far more than the CPU time; page faults are
 * counted, being the kernel's time on this thread), the file in the page cache (read once
 * before), median of the reads.
 * Events are begin/end events, 2 per zone (docs/performance.md's count; the session's
 * events_recorded would also count the argument records). For the gzipped JSON, zlib's inflate of
 * the same file alone is timed too: the floor that reader cannot go below on one core.
 * Then each file is read again in a fresh process per repetition (fork + exec of
 * loupe_bench_read_one, next to loupe_bench), timed by the child's user + system CPU time from
 * wait4()'s rusage (exec, the library's loading and the model's free included: what `loupe
 * summary FILE` pays), median of the reads; the read targets are on these rows. The two kinds of
 * reads alternate, so that the machine's load falls on both alike.
 */
#include "harness.h"

#include <loupe/loupe.h>
#include <loupe/reader.h>

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct read_arg {
    uint64_t n, with_args;
    int cpu;
} read_arg;

static void *read_record_thread(void *p) {
    read_arg *a = p;
    bench_pin_to(a->cpu);
    bench_zone_static(a->n - a->with_args);
    bench_zone_args(a->with_args);
    return NULL;
}

/* Reads the whole file once (into the page cache); returns its size, or 0. */
static uint64_t warm_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    static char buf[1 << 20];
    uint64_t total = 0;
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0) {
        total += (uint64_t)r;
    }
    close(fd);
    return total;
}

/* zlib's inflate of a gzip file alone (gzread into a 1 MiB buffer, as the JSON reader's
 * buffer), seconds; NAN when it cannot. */
static double inflate_alone_s(const char *path) {
    uint64_t t0 = cpu_ns();
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        return NAN;
    }
    (void)gzbuffer(f, 1u << 20);
    static char buf[1 << 20];
    while (gzread(f, buf, sizeof buf) > 0) {
    }
    gzclose(f);
    return (double)(cpu_ns() - t0) / 1e9;
}

/* loupe_bench_read_one's path: next to this program (/proc/self/exe); 0, or -1. */
static int read_one_path(char *out, size_t cap) {
    char self[400];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        return -1;
    }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash == NULL) {
        return -1;
    }
    *slash = 0;
    int k = snprintf(out, cap, "%s/loupe_bench_read_one", self);
    return k > 0 && (size_t)k < cap && access(out, X_OK) == 0 ? 0 : -1;
}

/* One read of path in a fresh process: the child's user + system CPU seconds, or NAN when it
 * could not run or failed (why: a static string). The child's stdout goes to /dev/null. */
static double fresh_read_s(const char *prog, const char *path, const char **why) {
    pid_t pid = fork();
    if (pid < 0) {
        *why = "fork failed";
        return NAN;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
        }
        execl(prog, prog, path, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        *why = "loupe_bench_read_one failed";
        return NAN;
    }
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static const struct {
    unsigned bit;
    const char *label;
} read_fmts[] = {
    {LOUPE_FORMAT_CHROME_JSON, "Chrome JSON gz"},
    {LOUPE_FORMAT_XPLANE, "XPlane"},
    {LOUPE_FORMAT_PERFETTO_PROTO, "Perfetto protobuf"},
};

void bench_cases_read(void) {
    const uint64_t zones = bench_scaled(2000000);
    const uint64_t per_thread = zones / 2;
    const int reps = bench_cfg.reps < 5 ? bench_cfg.reps : 5;
    char dir[512], label[120];
    snprintf(dir, sizeof dir, "%s/read", bench_work_dir);
    /* an argument zone takes 6 slots (docs/record.md), a static one 2 */
    loupe_trace_options o = {.log_dir = dir,
                             .buffer_events = (uint32_t)(per_thread * 3 + 1024),
                             .formats = LOUPE_FORMAT_CHROME_JSON | LOUPE_FORMAT_XPLANE |
                                        LOUPE_FORMAT_PERFETTO_PROTO};
    if (loupe_start_trace(&o) != 0) {
        bench_add_na("read: record", "s", loupe_last_error());
        return;
    }
    pthread_t th[2];
    read_arg a[2] = {{per_thread, 0, 0}, {per_thread, per_thread / 10, 1 % bench_ncpu}};
    for (int i = 0; i < 2; i++) {
        pthread_create(&th[i], NULL, read_record_thread, &a[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
    }
    loupe_trace_result res = {.size = sizeof res};
    if (loupe_stop_trace(&res) != 0) {
        bench_add_na("read: record", "s", loupe_last_error());
        loupe_trace_result_free(&res);
        return;
    }
    const uint64_t events = 2 * zones;
    char prog[512];
    const int have_prog = read_one_path(prog, sizeof prog) == 0;
    for (size_t k = 0; k < sizeof read_fmts / sizeof read_fmts[0]; k++) {
        snprintf(label, sizeof label, "read %s: events/s", read_fmts[k].label);
        const char *path = loupe_trace_result_path(&res, read_fmts[k].bit);
        uint64_t bytes = path != NULL ? warm_file(path) : 0;
        if (bytes == 0) {
            bench_add_na(label, "M events/s", "the stop wrote no file");
            continue;
        }
        double evps[BENCH_MAX_REPS], secs[BENCH_MAX_REPS], fresh[BENCH_MAX_REPS];
        size_t slices = 0;
        int ok = 1;
        const char *fresh_why = have_prog ? NULL : "no loupe_bench_read_one next to loupe_bench";
        for (int r = 0; r < reps && ok; r++) {
            fresh[r] = fresh_why == NULL ? fresh_read_s(prog, path, &fresh_why) : NAN;
            fresh[r] = (double)events / fresh[r] / 1e6;
            loupe_model *m = NULL;
            uint64_t t0 = cpu_ns();
            int rc = loupe_trace_read(path, &m);
            uint64_t t1 = cpu_ns();
            if (rc != 0) {
                bench_add_na(label, "M events/s", loupe_last_error());
                ok = 0;
                break;
            }
            slices = 0;
            for (size_t t = 0; t < m->thread_count; t++) {
                slices += m->threads[t].slice_count;
            }
            loupe_model_free(m);
            secs[r] = (double)(t1 - t0) / 1e9;
            evps[r] = (double)events / secs[r] / 1e6;
        }
        if (!ok) {
            continue;
        }
        bench_case *c = bench_add_case(label, "M events/s");
        bench_set_stats(c, evps, reps, NULL);
        bench_note(c, "%llu events (2 per zone), %.1f MB file, median of %d reads, CPU time",
                   (unsigned long long)events, (double)bytes / 1e6, reps);
        if (slices != zones) {
            bench_note(c, "read %zu slices, not %llu", slices, (unsigned long long)zones);
        }
        snprintf(label, sizeof label, "read %s, fresh process: events/s", read_fmts[k].label);
        bench_case *fc = NULL;
        if (fresh_why != NULL) {
            bench_add_na(label, "M events/s", fresh_why);
        } else {
            fc = bench_add_case(label, "M events/s");
            bench_set_stats(fc, fresh, reps, NULL);
            bench_note(fc, "fork + exec of loupe_bench_read_one per read, its CPU time (wait4)");
        }
        if (read_fmts[k].bit == LOUPE_FORMAT_CHROME_JSON) {
            bench_k.rd_json = fc;
            for (int r = 0; r < reps; r++) {
                secs[r] = inflate_alone_s(path);
                evps[r] = (double)events / secs[r] / 1e6;
            }
            c = bench_add_case("read Chrome JSON gz: zlib inflate alone", "M events/s");
            bench_set_stats(c, evps, reps, NULL);
            bench_note(c, "gzread of the same file into 1 MiB, %.3f s: the reader's floor",
                       bench_median(secs, reps));
        } else if (read_fmts[k].bit == LOUPE_FORMAT_XPLANE) {
            bench_k.rd_xplane = fc;
        } else {
            bench_k.rd_pf = fc;
        }
    }
    if (!bench_cfg.keep) {
        bench_rm_rf(res.run_dir);
    }
    loupe_trace_result_free(&res);
}
