/* case_export.c: loupe's export, one format at a time (Chrome JSON gz, XPlane, Perfetto
 * protobuf): 10 M static zones on 2 threads, then the stop timed (collect + write), the write of
 * the kept model alone, the file's size, the stop's extra memory (VmHWM), and at the end the
 * bytes per zone in the buffers and the run's RSS.
 */
#include "harness.h"

#include <loupe/loupe.h>

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

typedef struct rec_arg {
    uint64_t n;
    int cpu;
} rec_arg;

static void *record_thread(void *p) {
    rec_arg *a = p;
    bench_pin_to(a->cpu);
    bench_zone_static(a->n);
    return NULL;
}

/* CPU time of this thread, and of the whole process (the gzip sink's helpers included), ns. */
static uint64_t cpu_ns_of(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rss_bytes(void) {
    char line[256];
    bench_read_line("/proc/self/statm", line, sizeof line);
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
    snprintf(dir, sizeof dir, "%s/loupe", bench_work_dir);
    loupe_trace_options o = {.log_dir = dir, .buffer_events = (uint32_t)buffer, .formats = f};
    if (loupe_start_trace(&o) != 0) {
        return -1;
    }
    pthread_t th[2];
    rec_arg a[2];
    for (int i = 0; i < 2; i++) {
        a[i] = (rec_arg){per_thread, i % bench_ncpu};
        pthread_create(&th[i], NULL, record_thread, &a[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
    }
    return 0;
}

void bench_cases_export(void) {
    const uint64_t zones = bench_scaled(10000000);
    const uint64_t per_thread = zones / 2;
    const uint64_t buffer = per_thread * 2 + 1024;
    const int reps = bench_cfg.reps < 3 ? bench_cfg.reps : 3;
    const size_t nfmt = sizeof export_fmts / sizeof export_fmts[0];
    double collect_s[3 * BENCH_MAX_REPS];
    int ncollect = 0;
    uint64_t rss_before = 0, slots = 0, events = 0;
    char label[120];
    bench_k.model_per_event = (double)sizeof(loupe_slice) / 2.0; /* a zone is 2 events, 1 slice */

    for (size_t k = 0; k < nfmt; k++) {
        const export_fmt *fm = &export_fmts[k];
        double stop_s[BENCH_MAX_REPS], write_s[BENCH_MAX_REPS], stop_evps[BENCH_MAX_REPS],
            write_evps[BENCH_MAX_REPS], mbps[BENCH_MAX_REPS], extra[BENCH_MAX_REPS],
            thread_evps[BENCH_MAX_REPS], proc_evps[BENCH_MAX_REPS];
        uint64_t bytes = 0, raw = 0, dropped = 0;
        int hwm = 0;
        for (int r = 0; r < reps; r++) {
            if (export_record(fm->bit, per_thread, buffer) != 0) {
                snprintf(label, sizeof label, "export %s: stop", fm->label);
                bench_add_na(label, "s", loupe_last_error());
                return;
            }
            rss_before = rss_bytes();
            hwm = reset_peak_rss() == 0;
            loupe_trace_result res = {.size = sizeof res};
            uint64_t t0 = bench_mono_ns();
            int rc = loupe_stop_trace(&res);
            uint64_t t1 = bench_mono_ns();
            uint64_t peak = hwm ? peak_rss_bytes() : 0;
            const char *path = loupe_trace_result_path(&res, fm->bit);
            struct stat st;
            if (rc != 0 || path == NULL || stat(path, &st) != 0) {
                loupe_trace_result_free(&res);
                snprintf(label, sizeof label, "export %s: stop", fm->label);
                bench_add_na(label, "s", rc != 0 ? loupe_last_error() : "the stop wrote no file");
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
            if (!bench_cfg.keep) {
                bench_rm_rf(res.run_dir);
            }
            loupe_trace_result_free(&res);
            /* The write alone: the model kept from the stop, written again in the same format;
             * stop - write = the collection into the model. */
            char again[600];
            snprintf(again, sizeof again, "%s/again", bench_work_dir);
            loupe_trace_result res2 = {.size = sizeof res2};
            uint64_t t2 = bench_mono_ns();
            uint64_t c2 = cpu_ns_of(CLOCK_THREAD_CPUTIME_ID),
                     p2 = cpu_ns_of(CLOCK_PROCESS_CPUTIME_ID);
            rc = loupe_write_last_trace(again, &res2);
            uint64_t c3 = cpu_ns_of(CLOCK_THREAD_CPUTIME_ID),
                     p3 = cpu_ns_of(CLOCK_PROCESS_CPUTIME_ID);
            uint64_t t3 = bench_mono_ns();
            thread_evps[r] = rc == 0 ? (double)events / ((double)(c3 - c2) / 1e9) / 1e6 : NAN;
            proc_evps[r] = rc == 0 ? (double)events / ((double)(p3 - p2) / 1e9) / 1e6 : NAN;
            loupe_trace_result_free(&res2);
            bench_rm_rf(again);
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
        bench_case *c = bench_add_case(label, "s");
        bench_set_stats(c, stop_s, reps, NULL);
        bench_note(
            c, "%.0fM zones on 2 threads, %llu events, %llu dropped; %d stops, only this format",
            (double)zones / 1e6, (unsigned long long)events, (unsigned long long)dropped, reps);
        snprintf(label, sizeof label, "export %s: of which the write", fm->label);
        c = bench_add_case(label, "s");
        bench_set_stats(c, write_s, reps, NULL);
        bench_note(c, "loupe_write_last_trace of the kept model, same format");
        snprintf(label, sizeof label, "export %s: events/s of the stop", fm->label);
        c = bench_add_case(label, "M events/s");
        bench_set_stats(c, stop_evps, reps, NULL);
        bench_note(c, "one core: the stop runs on the calling thread");
        if (fm->bit == LOUPE_FORMAT_CHROME_JSON) {
            bench_k.evps = c;
        } else if (fm->bit == LOUPE_FORMAT_PERFETTO_PROTO) {
            bench_k.pf_evps = c;
        }
        snprintf(label, sizeof label, "export %s: events/s of the write alone", fm->label);
        c = bench_add_case(label, "M events/s");
        bench_set_stats(c, write_evps, reps, NULL);
        /* On a loaded machine the wall time above says little: the CPU time of the thread
         * that writes (it deflates too, whatever blocks the gzip helpers have not started) is
         * the write's time on an idle machine with a CPU per thread, and the process's CPU time
         * is the work in all (the helpers', and with one format no other writer) */
        snprintf(label, sizeof label, "export %s: write, thread CPU", fm->label);
        c = bench_add_case(label, "M events/s");
        bench_set_stats(c, thread_evps, reps, NULL);
        bench_note(c, "CLOCK_THREAD_CPUTIME_ID of the thread calling loupe_write_last_trace");
        if (fm->bit == LOUPE_FORMAT_CHROME_JSON) {
            bench_k.wr_json = c;
        } else if (fm->bit == LOUPE_FORMAT_XPLANE) {
            bench_k.wr_xplane = c;
        } else {
            bench_k.wr_pf = c;
        }
        snprintf(label, sizeof label, "export %s: write, process CPU", fm->label);
        c = bench_add_case(label, "M events/s");
        bench_set_stats(c, proc_evps, reps, NULL);
        bench_note(c, "CLOCK_PROCESS_CPUTIME_ID: every thread's work (the gzip helpers')");
        snprintf(label, sizeof label, "export %s: MB/s of file (over the write)", fm->label);
        c = bench_add_case(label, "MB/s");
        bench_set_stats(c, mbps, reps, NULL);
        snprintf(label, sizeof label, "export %s: bytes/event on disk", fm->label);
        c = bench_add_case(label, "B/event");
        bench_set_value(c, (double)bytes / (double)events);
        bench_note(c, "%.1f MB", (double)bytes / 1e6);
        if (fm->bit == LOUPE_FORMAT_PERFETTO_PROTO) {
            bench_k.pf_bytes = c;
        }
        if (fm->gz) {
            c = bench_add_case("export Chrome JSON: bytes/event before gzip", "B/event");
            bench_set_value(c, (double)raw / (double)events);
        }
        snprintf(label, sizeof label, "export %s: the stop's extra memory", fm->label);
        c = bench_add_case(label, "B/event");
        if (hwm) {
            bench_set_stats(c, extra, reps, NULL);
            bench_note(c, "peak RSS during the stop (VmHWM, reset before it) - RSS before it");
            bench_k.stop_extra_per_event =
                isnan(bench_k.stop_extra_per_event) || c->max > bench_k.stop_extra_per_event
                    ? c->max
                    : bench_k.stop_extra_per_event;
        } else {
            c->na = 1;
            bench_note(c, "cannot reset the peak RSS (/proc/self/clear_refs)");
        }
    }
    if (ncollect == 0) {
        return;
    }
    bench_case *c = bench_add_case("export: collection into the model (stop - write)", "s");
    bench_set_stats(c, collect_s, ncollect, NULL);
    bench_note(c, "all %d stops above; %.1f M events/s", ncollect, (double)events / c->med / 1e6);
    c = bench_k.memzone =
        bench_add_case("export: bytes/zone in memory (buffer slots used / zones)", "B/zone");
    bench_set_value(c, (double)slots * (double)sizeof(loupe__ev) / (double)zones);
    bench_note(c, "%zu B per event slot", sizeof(loupe__ev));
    c = bench_add_case("export: RSS before the stop (the buffers)", "MiB");
    bench_set_value(c, (double)rss_before / 1048576.0);
    bench_note(c, "the last stop's");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    c = bench_add_case("export: peak RSS of the whole run (ru_maxrss)", "MiB");
    bench_set_value(c, (double)ru.ru_maxrss / 1024.0);
    bench_note(c, "the model's slices alone: %.1f B/event (%zu B per zone)",
               bench_k.model_per_event, sizeof(loupe_slice));
}
