/* spool_rss.c: the spool's figures in docs/performance.md. One thread records ZONES zones
 * (2 events each) at full speed, with the spool (`spool`: session_events 1 Mi events, 16 MiB, the
 * file in LOG_DIR) or without it (`nospool`: session_events 128 Mi events, room for all of
 * them); a second thread samples VmRSS every 5 ms. Prints the recording rate and the peak
 * VmRSS; with `stop`, also stops the session (the collector reads the spool back into the model:
 * its memory is the model's, docs/performance.md) and prints the counts; without it, exits at
 * once after recording (the spool file is left in LOG_DIR: its size says what was spooled).
 *
 * usage: loupe_bench_spool spool|nospool ZONES LOG_DIR [stop] */
#include <loupe/loupe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long vm_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = atol(line + 6);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib;
}

static int done;
static long peak;

static void *monitor(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        long r = vm_rss_kib();
        if (r > peak) {
            peak = r;
        }
        struct timespec d = {0, 5000000};
        nanosleep(&d, NULL);
    }
    return NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s spool|nospool ZONES LOG_DIR [stop]\n", argv[0]);
        return 2;
    }
    int spool = strcmp(argv[1], "spool") == 0;
    uint64_t zones = strtoull(argv[2], NULL, 10);
    int stop = argc > 4 && strcmp(argv[4], "stop") == 0;
    loupe_trace_options o = {.log_dir = argv[3],
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO,
                             .session_events = spool ? (uint64_t)1 << 20 : (uint64_t)128 << 20,
                             .buffer_events = UINT32_MAX,
                             .spool_dir = spool ? "" : NULL};
    long rss0 = vm_rss_kib();
    if (loupe_start_trace(&o) != 0) {
        fprintf(stderr, "%s\n", loupe_last_error());
        return 1;
    }
    pthread_t mon;
    pthread_create(&mon, NULL, monitor, NULL);
    double t0 = now_s();
    for (uint64_t i = 0; i < zones; i++) {
        LOUPE_ZONE("z");
    }
    double t1 = now_s();
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    pthread_join(mon, NULL);
    printf("%s: %llu events, %.1f M events/s, peak VmRSS %ld MiB (%ld MiB before the start)\n",
           spool ? "spool" : "nospool", (unsigned long long)(2 * zones),
           2.0 * (double)zones / (t1 - t0) / 1e6, peak / 1024, rss0 / 1024);
    fflush(stdout);
    if (!stop) {
        _exit(0);
    }
    loupe_trace_result r = {.size = sizeof r};
    double t2 = now_s();
    int rc = loupe_stop_trace(&r);
    printf("stop: rc %d, %llu recorded, %llu dropped, %.2f s, VmRSS after %ld MiB\n", rc,
           (unsigned long long)r.events_recorded, (unsigned long long)r.events_dropped,
           now_s() - t2, vm_rss_kib() / 1024);
    loupe_trace_result_free(&r);
    return rc != 0;
}
