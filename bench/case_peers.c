/* case_peers.c: the peers, measured in the same run as loupe: LTTng-UST in this process (the
 * tracepoint loop in lttng_case.c, without and with a recording session made with the lttng
 * command) and uftrace recording a child program (loupe_bench_calls, calls_main.c). A peer that
 * cannot run is an n/a row that says why.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- LTTng-UST ---- */

#ifdef BENCH_HAVE_LTTNG
static int lttng_cmd(const char *a0, const char *a1, const char *a2, const char *a3, const char *a4,
                     char *out, size_t size) {
    /* --no-sessiond: never leave a daemon behind; without one the case says so. */
    const char *argv[] = {"lttng", "--no-sessiond", a0, a1, a2, a3, a4, NULL};
    return bench_run_cmd(argv, out, size, 1);
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

void bench_cases_lttng(void) {
    const char *name_off = "LTTng-UST begin+end, no session";
    const char *name_on = "LTTng-UST begin+end, session recording";
#ifndef BENCH_HAVE_LTTNG
    bench_add_na(name_off, "ns/zone",
                 "built without LTTng-UST (install liblttng-ust-dev and rebuild)");
    bench_add_na(name_on, "ns/zone",
                 "built without LTTng-UST (install liblttng-ust-dev and rebuild)");
#else
    double s[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];
    bench_case *off = bench_add_case(name_off, "ns/zone");
    if (bench_lttng_enabled()) {
        bench_note(off, "a session outside this run enables loupe_bench:*: measured anyway");
    }
    bench_time_loop(bench_lttng_zone, bench_scaled(20000000), s, fs);
    bench_set_stats(off, s, bench_cfg.reps, fs);

    char lttng[4096], out[8192], sess[64], outdir[512], why[256];
    if (!bench_find_in_path("lttng", lttng, sizeof lttng)) {
        bench_add_na(name_on, "ns/zone", "lttng (Debian package lttng-tools) is not installed");
        return;
    }
    snprintf(sess, sizeof sess, "loupe_bench_%d", (int)getpid());
    snprintf(outdir, sizeof outdir, "--output=%s/lttng", bench_work_dir);
    if (lttng_cmd("create", sess, outdir, NULL, NULL, out, sizeof out) != 0) {
        char msg[300];
        if (strstr(out, "No session daemon") != NULL) {
            snprintf(msg, sizeof msg,
                     "no lttng-sessiond is running (start one before "
                     "loupe_bench, as bench/run.sh does)");
        } else {
            bench_first_line(out, why, sizeof why);
            snprintf(msg, sizeof msg, "lttng create failed: %s", why);
        }
        bench_add_na(name_on, "ns/zone", msg);
        return;
    }
    char sopt[80];
    snprintf(sopt, sizeof sopt, "--session=%s", sess);
    int ok = lttng_cmd("enable-event", "--userspace", "loupe_bench:*", sopt, NULL, out,
                       sizeof out) == 0 &&
             lttng_cmd("start", sess, NULL, NULL, NULL, out, sizeof out) == 0;
    if (!ok) {
        bench_first_line(out, why, sizeof why);
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
        bench_add_na(name_on, "ns/zone", why);
        return;
    }
    bench_case *on = bench_k.lttng = bench_add_case(name_on, "ns/zone");
    uint64_t n = bench_scaled(200000);
    bench_time_loop(bench_lttng_zone, n, s, fs);
    bench_set_stats(on, s, bench_cfg.reps, fs);
    char out2[8192];
    (void)lttng_cmd("stop", sess, NULL, NULL, NULL, out, sizeof out);
    (void)lttng_cmd("destroy", sess, NULL, NULL, NULL, out2, sizeof out2);
    uint64_t events = (uint64_t)(bench_cfg.reps + 1) * n * 2;
    uint64_t lost = lttng_discarded(out);
    if (lost == 0) {
        lost = lttng_discarded(out2);
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/lttng", bench_work_dir);
    uint64_t bytes = bench_du_bytes(dir);
    bench_note(on, "%llu events, %llu discarded (as lttng stop reports), %.1f B/zone on disk (CTF)",
               (unsigned long long)events, (unsigned long long)lost,
               (double)bytes / (double)(events / 2));
    if (!bench_cfg.keep) {
        bench_rm_rf(dir);
    }
#endif
}

/* ---- uftrace ---- */

/* Runs a calls program (optionally under uftrace) and returns its loop time in ns, or -1. */
static double run_calls(const char *uftrace, const char *prog, uint64_t n, char *out, size_t size) {
    char num[32], data[512];
    snprintf(num, sizeof num, "%llu", (unsigned long long)n);
    snprintf(data, sizeof data, "%s/uftrace.data", bench_work_dir);
    int r;
    if (uftrace != NULL) {
        const char *argv[] = {uftrace, "record", "--no-pager", "-d", data, prog, num, NULL};
        r = bench_run_cmd(argv, out, size, 1);
    } else {
        const char *argv[] = {prog, num, NULL};
        r = bench_run_cmd(argv, out, size, 1);
    }
    const char *p = strstr(out, "LOUPE_BENCH_CALLS ns=");
    if (r != 0 || p == NULL) {
        return -1;
    }
    return (double)strtoull(p + strlen("LOUPE_BENCH_CALLS ns="), NULL, 10);
}

void bench_cases_uftrace(void) {
    const char *name = "uftrace record (overhead per call)";
    char uftrace[4096], prog[4200], plain[4200], out[16384], why[256];
    if (!bench_find_in_path("uftrace", uftrace, sizeof uftrace)) {
        bench_add_na(name, "ns/call", "uftrace (Debian package uftrace) is not installed");
        return;
    }
    snprintf(prog, sizeof prog, "%s/loupe_bench_calls", bench_self_dir);
    snprintf(plain, sizeof plain, "%s/loupe_bench_calls_plain", bench_self_dir);
    if (access(prog, X_OK) != 0 || access(plain, X_OK) != 0) {
        bench_add_na(name, "ns/call", "loupe_bench_calls(_plain) not found next to loupe_bench");
        return;
    }
    uint64_t n = bench_scaled(1000000);
    double s[BENCH_MAX_REPS], fs[BENCH_MAX_REPS];
    char data[512];
    snprintf(data, sizeof data, "%s/uftrace.data", bench_work_dir);
    for (int r = -1; r < bench_cfg.reps; r++) {
        uint64_t t0 = bench_mono_ns();
        bench_floor_rdtsc(bench_floor_n());
        double f = (double)(bench_mono_ns() - t0) / (double)bench_floor_n();
        double p = run_calls(NULL, plain, n, out, sizeof out);
        double u = run_calls(uftrace, prog, n, out, sizeof out);
        if (p < 0 || u < 0) {
            bench_first_line(out, why, sizeof why);
            char msg[300];
            snprintf(msg, sizeof msg, "uftrace record failed: %s", why);
            bench_add_na(name, "ns/call", msg);
            return;
        }
        if (r >= 0) {
            s[r] = (u - p) / (double)n;
            fs[r] = f;
        }
    }
    bench_case *c = bench_add_case(name, "ns/call");
    bench_set_stats(c, s, bench_cfg.reps, fs);
    uint64_t bytes = bench_du_bytes(data);
    bench_note(c, "child process, -finstrument-functions build; %.1f B/call in uftrace.data",
               (double)bytes / (double)n);
    if (strstr(out, "LOST") != NULL || strstr(out, "lost") != NULL) {
        bench_note(c, "uftrace reported lost records");
    }
    if (!bench_cfg.keep) {
        bench_rm_rf(data);
    }
}

/* ---- when --no-peers skips them ---- */

void bench_skip_lttng(const char *flag) {
    bench_add_na("LTTng-UST begin+end, session recording", "ns/zone", flag);
}

void bench_skip_uftrace(const char *flag) {
    bench_add_na("uftrace record (overhead per call)", "ns/call", flag);
}
