/* test_summary.c: `loupe summary`, run as a command on synthetic traces with known durations.
 *
 * The trace: thread 11 ("main") runs "frame" (10 ms) three times, each holding two "work"
 * children of 3 ms; thread 12 runs "io" ten times for 1, 2, ..., 10 ms and one "work" of 1 ms.
 * It spans 0 .. 201 ms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "testutil.h"

static char *g_dir;
static char g_trace[4096];

static void append(char **buf, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char **buf, size_t *len, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof tmp);
    *buf = realloc(*buf, *len + (size_t)n + 1);
    assert_non_null(*buf);
    memcpy(*buf + *len, tmp, (size_t)n + 1);
    *len += (size_t)n;
}

static char *make_trace(void) {
    char *t = NULL;
    size_t n = 0;
    append(&t, &n, "{\"traceEvents\":[\n");
    append(&t, &n,
           "{\"ph\":\"M\",\"pid\":1,\"tid\":11,\"name\":\"thread_name\","
           "\"args\":{\"name\":\"main\"}}");
    for (int k = 0; k < 3; k++) {
        int base = k * 20000; /* µs */
        append(&t, &n,
               ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":11,\"ts\":%d,\"dur\":10000,"
               "\"name\":\"frame\"}",
               base);
        append(&t, &n, ",\n{\"ph\":\"B\",\"pid\":1,\"tid\":11,\"ts\":%d,\"name\":\"work\"}",
               base + 1000);
        append(&t, &n, ",\n{\"ph\":\"E\",\"pid\":1,\"tid\":11,\"ts\":%d}", base + 4000);
        append(&t, &n,
               ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":11,\"ts\":%d.000,\"dur\":3000.000,"
               "\"name\":\"work\"}",
               base + 5000);
    }
    for (int k = 1; k <= 10; k++) {
        append(&t, &n,
               ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":12,\"ts\":%d,\"dur\":%d,"
               "\"name\":\"io\"}",
               60000 + (k - 1) * 11000, k * 1000);
    }
    append(&t, &n,
           ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":12,\"ts\":200000,\"dur\":1000,"
           "\"name\":\"work\"}\n]}\n");
    return t;
}

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir("summary");
    snprintf(g_trace, sizeof g_trace, "%s/known.json", g_dir);
    char *t = make_trace();
    tu_write_file(g_trace, t);
    free(t);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* Runs `loupe summary ARGS` (stdout only); returns the exit status, the output in *out. */
static int summary(const char *args, char **out) {
    char *cmd;
    assert_true(asprintf(&cmd, "'%s' summary %s", tu_cli(), args) > 0);
    int st = tu_run(cmd, out);
    free(cmd);
    return st;
}

static json_t *summary_json(const char *args) {
    char *out;
    int st = summary(args, &out);
    if (st != 0) {
        fail_msg("loupe summary %s: exit %d: %s", args, st, out);
    }
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    if (j == NULL) {
        fail_msg("not JSON (%s): %s", err.text, out);
    }
    free(out);
    return j;
}

static json_int_t zint(const json_t *z, const char *key) {
    const json_t *v = json_object_get(z, key);
    if (!json_is_integer(v)) {
        fail_msg("zone field %s is not an integer", key);
    }
    return json_integer_value(v);
}

static void check_zone(const json_t *z, const char *name, json_int_t count, json_int_t total,
                       json_int_t self, json_int_t p50, json_int_t p99, json_int_t max) {
    assert_string_equal(json_string_value(json_object_get(z, "name")), name);
    assert_int_equal(zint(z, "count"), count);
    assert_int_equal(zint(z, "total_ns"), total);
    assert_int_equal(zint(z, "self_ns"), self);
    assert_int_equal(zint(z, "mean_ns"), (total + count / 2) / count);
    assert_int_equal(zint(z, "p50_ns"), p50);
    assert_int_equal(zint(z, "p99_ns"), p99);
    assert_int_equal(zint(z, "max_ns"), max);
    /* per thread: of 201 ms times the threads the zone ran on ("work": both) */
    double span = 201e6 * (double)zint(z, "threads_ran_on");
    assert_int_equal(zint(z, "threads_ran_on"), strcmp(name, "work") == 0 ? 2 : 1);
    double pct = json_real_value(json_object_get(z, "percent"));
    assert_true(pct > (double)total * 100.0 / span - 1e-9);
    assert_true(pct < (double)total * 100.0 / span + 1e-9);
}

static void test_json(void **state) {
    (void)state;
    char args[4200];
    snprintf(args, sizeof args, "'%s' --json", g_trace);
    json_t *j = summary_json(args);
    assert_string_equal(json_string_value(json_object_get(j, "file")), g_trace);
    assert_int_equal(json_integer_value(json_object_get(j, "duration_ns")), 201000000);
    assert_int_equal(json_integer_value(json_object_get(j, "threads")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "slices")), 20);
    assert_int_equal(json_integer_value(json_object_get(j, "events_dropped")), 0);
    const json_t *zones = json_object_get(j, "zones");
    assert_int_equal(json_array_size(zones), 3);
    /* by total, largest first; p50/p99 nearest rank */
    check_zone(json_array_get(zones, 0), "io", 10, 55000000, 55000000, 5000000, 10000000, 10000000);
    check_zone(json_array_get(zones, 1), "frame", 3, 30000000, 12000000, 10000000, 10000000,
               10000000);
    check_zone(json_array_get(zones, 2), "work", 7, 19000000, 19000000, 3000000, 3000000, 3000000);
    assert_null(json_object_get(json_array_get(zones, 0), "thread"));
    json_decref(j);

    /* --top limits the rows; 0 means all */
    snprintf(args, sizeof args, "--top 2 --json '%s'", g_trace);
    j = summary_json(args);
    assert_int_equal(json_array_size(json_object_get(j, "zones")), 2);
    json_decref(j);
    snprintf(args, sizeof args, "--json --top=0 '%s'", g_trace);
    j = summary_json(args);
    assert_int_equal(json_array_size(json_object_get(j, "zones")), 3);
    json_decref(j);
}

static void test_by_thread(void **state) {
    (void)state;
    char args[4200];
    snprintf(args, sizeof args, "'%s' --by-thread --json", g_trace);
    json_t *j = summary_json(args);
    const json_t *zones = json_object_get(j, "zones");
    assert_int_equal(json_array_size(zones), 4);
    static const struct {
        const char *name;
        json_int_t thread, count, total;
    } want[] = {{"io", 12, 10, 55000000},
                {"frame", 11, 3, 30000000},
                {"work", 11, 6, 18000000},
                {"work", 12, 1, 1000000}};
    for (size_t i = 0; i < 4; i++) {
        const json_t *z = json_array_get(zones, i);
        assert_string_equal(json_string_value(json_object_get(z, "name")), want[i].name);
        assert_int_equal(zint(z, "thread"), want[i].thread);
        assert_int_equal(zint(z, "count"), want[i].count);
        assert_int_equal(zint(z, "total_ns"), want[i].total);
    }
    assert_string_equal(json_string_value(json_object_get(json_array_get(zones, 1), "thread_name")),
                        "main");
    json_decref(j);
}

static void test_table(void **state) {
    (void)state;
    char args[4200], *out;
    snprintf(args, sizeof args, "'%s'", g_trace);
    assert_int_equal(summary(args, &out), 0);
    char head[4300];
    snprintf(head, sizeof head, "%s: 2 threads, 20 slices, 201.000 ms traced\n", g_trace);
    assert_true(strncmp(out, head, strlen(head)) == 0);
    assert_null(strstr(out, "dropped"));
    /* rows in order of total, units adapted, columns aligned: every row as long as the header */
    const char *io = strstr(out, "  io\n");
    const char *frame = strstr(out, "  frame\n");
    const char *work = strstr(out, "  work\n");
    assert_non_null(io);
    assert_non_null(frame);
    assert_non_null(work);
    assert_true(io < frame && frame < work);
    assert_non_null(strstr(out, "  27.36  io\n"));
    assert_non_null(strstr(out, "% time: the time a zone ran (its overlapping slices counted "
                                "once) as a share of\nthe traced time (201.000 ms) of each "
                                "thread it ran on; nested zones count in their parents too,\n"));
    /* busy time per track: main's 3 frames, 30 ms of 201; thread 12's io and work, 56 ms */
    assert_non_null(strstr(out, "\n     busy  % time  track\n"
                                "30.000 ms   14.93  thread main (11)\n"
                                "56.000 ms   27.86  thread 12\n"));
    /* numbers right-aligned: every row's name starts where the header's does */
    const char *hdr = strstr(out, "  name\n");
    assert_non_null(hdr);
    const char *hl = hdr;
    while (hl > out && hl[-1] != '\n') {
        hl--;
    }
    const char *il = io;
    while (il > out && il[-1] != '\n') {
        il--;
    }
    assert_int_equal((size_t)(hdr - hl), (size_t)(io - il));
    free(out);

    snprintf(args, sizeof args, "'%s' --top 1", g_trace);
    assert_int_equal(summary(args, &out), 0);
    assert_null(strstr(out, "  frame\n"));
    assert_non_null(strstr(out, "(2 more rows; --top 0 shows all)"));
    free(out);
}

/* A loupe file with loss accounting, an unmatched end and a truncated zone; gzipped, in a
 * log_dir: the newest run is found. */
static void test_loss_and_log_dir(void **state) {
    (void)state;
    char run[4200], p[4300];
    snprintf(run, sizeof run, "%s/log/plugins/profile/2026_01_01_00_00_00_2", g_dir);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/log/plugins/profile/2026_01_01_00_00_00'", run,
             g_dir);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/host.trace.json.gz", run);
    static const char text[] =
        "{\"metadata\":{\"loupe_version\":\"0.1.0\",\"clock\":\"monotonic\",\"duration_ns\":"
        "\"1000000\",\"unmatched_ends\":\"1\",\"loupe_thread_5_recorded\":\"10\","
        "\"loupe_thread_5_dropped\":\"7\",\"loupe_thread_5_capacity_needed\":\"4096\"},"
        "\"traceEvents\":[{\"ph\":\"X\",\"pid\":5,\"tid\":5,\"ts\":1,\"dur\":2,\"name\":\"z\","
        "\"args\":{\"loupe_truncated\":true}}]}";
    gzFile f = gzopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(gzputs(f, text), (int)strlen(text));
    assert_int_equal(gzclose(f), Z_OK);
    char args[4400], *out;
    snprintf(args, sizeof args, "'%s/log'", g_dir);
    assert_int_equal(summary(args, &out), 0);
    snprintf(cmd, sizeof cmd, "%s: 1 thread, 1 slice, 1.000 ms traced\n", p);
    assert_non_null(strstr(out, cmd));
    /* first, the drop and its effect: z was open when the drops began */
    /* z has no children: its self time is whole, only the zones after it are missing */
    static const char want_drop[] = "warning: thread 5 dropped 7 events: its zones after the one "
                                    "that began at 1.000 µs (z, whole) are missing\n";
    assert_true(strncmp(out, want_drop, strlen(want_drop)) == 0);
    assert_non_null(
        strstr(out, "\nevents dropped: 7 (capacity that would have held them: 4096 events per "
                    "thread)\n"));
    assert_non_null(strstr(out, "\nunmatched ends: 1 "));
    assert_non_null(strstr(out, "\ntruncated zones: 1 "));
    free(out);
    snprintf(args, sizeof args, "'%s/log' --json", g_dir);
    json_t *j = summary_json(args);
    assert_int_equal(json_integer_value(json_object_get(j, "events_dropped")), 7);
    assert_int_equal(json_integer_value(json_object_get(j, "capacity_needed")), 4096);
    json_decref(j);
}

/* Drops that are all re-entered calls (a signal handler inside a recording call) are said to
 * be just that: no buffer filled, nothing else is missing. */
static void test_reentered_drops(void **state) {
    (void)state;
    char p[4300];
    snprintf(p, sizeof p, "%s/reentered.trace.json", g_dir);
    static const char text[] =
        "{\"metadata\":{\"loupe_version\":\"0.2.0\",\"clock\":\"monotonic\",\"duration_ns\":"
        "\"1000000\",\"loupe_events_reentered\":\"2\",\"loupe_thread_5_recorded\":\"2\","
        "\"loupe_thread_5_dropped\":\"2\",\"loupe_thread_5_capacity_needed\":\"4\"},"
        "\"traceEvents\":[{\"ph\":\"X\",\"pid\":5,\"tid\":5,\"ts\":1,\"dur\":2,"
        "\"name\":\"z\"}]}";
    tu_write_file(p, text);
    char args[4400], *out;
    snprintf(args, sizeof args, "'%s'", p);
    assert_int_equal(summary(args, &out), 0);
    static const char want[] =
        "warning: 2 events were dropped where a signal handler (or the program's own allocator) "
        "interrupted a recording call on the same thread: they are counted, and nothing else is "
        "missing\n";
    assert_true(strncmp(out, want, strlen(want)) == 0);
    assert_null(strstr(out, "inflated"));
    free(out);
}

static void test_real_file(void **state) {
    (void)state;
    json_t *j =
        summary_json("--top 0 --json '" LOUPE_SHARED_DIR "/data/traces/uftrace_mt_chrome.json'");
    const json_t *zones = json_object_get(j, "zones");
    int seen = 0;
    for (size_t i = 0; i < json_array_size(zones); i++) {
        const json_t *z = json_array_get(zones, i);
        const char *name = json_string_value(json_object_get(z, "name"));
        if (strcmp(name, "mid") == 0) {
            assert_int_equal(zint(z, "count"), 150);
            seen++;
        } else if (strcmp(name, "leaf") == 0) {
            assert_int_equal(zint(z, "count"), 300);
            seen++;
        } else if (strcmp(name, "main") == 0) {
            assert_int_equal(i, 0); /* main holds everything else on its thread */
            seen++;
        }
    }
    assert_int_equal(seen, 3);
    assert_int_equal(json_integer_value(json_object_get(j, "threads")), 4);
    json_decref(j);
}

static void test_errors(void **state) {
    (void)state;
    char args[8400], *out, want[8400];
    snprintf(args, sizeof args, "'%s/missing.json' 2>&1", g_dir);
    assert_int_equal(summary(args, &out), 1);
    snprintf(want, sizeof want,
             "loupe summary: I/O error: %s/missing.json: No such file or directory\n", g_dir);
    assert_string_equal(out, want);
    free(out);

    snprintf(args, sizeof args, "%s/bad.json", g_dir);
    tu_write_file(args, "{\"traceEvents\":[{\"ph\":\"X\",\"ts\":\"abc\",\"dur\":1}]}");
    snprintf(args, sizeof args, "'%s/bad.json' 2>&1", g_dir);
    assert_int_equal(summary(args, &out), 1);
    snprintf(want, sizeof want,
             "loupe summary: Malformed trace input: %s/bad.json: event 0: ts is not a number "
             "(\"abc\")\n",
             g_dir);
    assert_string_equal(out, want);
    free(out);

    /* no PATH: ./loupe-log (loupe record's default), said when there is none */
    char *cmd;
    assert_true(asprintf(&cmd, "cd '%s' && '%s' summary 2>&1", g_dir, tu_cli()) > 0);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_string_equal(out, "loupe summary: no PATH given (a trace file, run directory or "
                             "log_dir), and no ./loupe-log (loupe record's default log "
                             "directory) here\nRun 'loupe summary --help' for usage.\n");
    free(out);
    snprintf(args, sizeof args,
             "mkdir -p '%s/loupe-log/plugins/profile/2026_01_02_03_04_05' && "
             "cp '%s' '%s/loupe-log/plugins/profile/2026_01_02_03_04_05/'",
             g_dir, g_trace, g_dir);
    assert_int_equal(system(args), 0);
    assert_int_equal(tu_run(cmd, &out), 0);
    if (strstr(out, "loupe-log/plugins/profile/2026_01_02_03_04_05/known.json: ") != out) {
        fail_msg("summary in a directory with ./loupe-log: %s", out);
    }
    free(out);
    free(cmd);
    snprintf(args, sizeof args, "'%s' --top x 2>&1", g_trace);
    assert_int_equal(summary(args, &out), 2);
    assert_string_equal(out, "loupe summary: --top needs a number of rows (0 = all), not 'x'\n"
                             "Run 'loupe summary --help' for usage.\n");
    free(out);
    snprintf(args, sizeof args, "'%s' --frobnicate 2>&1", g_trace);
    assert_int_equal(summary(args, &out), 2);
    assert_non_null(strstr(out, "unknown option '--frobnicate'"));
    free(out);
    snprintf(args, sizeof args, "'%s' '%s' 2>&1", g_trace, g_trace);
    assert_int_equal(summary(args, &out), 2);
    free(out);
    assert_int_equal(summary("--top 2>&1", &out), 2);
    free(out);
}

/* Writes a Chrome JSON file of X events (name, tid, ts µs, dur µs) into the test directory. */
static void write_x(const char *path, const char *const *names, const int *tids, const double *ts,
                    const double *dur, size_t n) {
    char *t = NULL;
    size_t len = 0;
    append(&t, &len, "{\"traceEvents\":[\n");
    append(&t, &len,
           "{\"ph\":\"M\",\"pid\":1,\"tid\":7,\"name\":\"thread_name\","
           "\"args\":{\"name\":\"stream 7\"}}");
    for (size_t i = 0; i < n; i++) {
        append(&t, &len,
               ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
               "\"name\":\"%s\"}",
               tids[i], ts[i], dur[i], names[i]);
    }
    append(&t, &len, "\n]}\n");
    tu_write_file(path, t);
    free(t);
}

static const json_t *find_zone(const json_t *zones, const char *name) {
    for (size_t i = 0; i < json_array_size(zones); i++) {
        const json_t *z = json_array_get(zones, i);
        if (strcmp(json_string_value(json_object_get(z, "name")), name) == 0) {
            return z;
        }
    }
    fail_msg("no zone %s", name);
    return NULL;
}

/* CUDA kernels on one stream overlapping under programmatic dependent launch: k1 [1000, 2000] ns,
 * k2 [1500, 3000] ns. Both kernels whole; the stream (with its overlap sibling) busy 2000 ns, not
 * 2500. */
static void test_overlapping_kernels(void **state) {
    (void)state;
    char path[4200], args[4300];
    snprintf(path, sizeof path, "%s/kernels.json", g_dir);
    static const char *const names[] = {"k1", "k2"};
    static const int tids[] = {7, 7};
    static const double ts[] = {1, 1.5}, dur[] = {1, 1.5};
    write_x(path, names, tids, ts, dur, 2);
    snprintf(args, sizeof args, "'%s' --json", path);
    json_t *j = summary_json(args);
    const json_t *zones = json_object_get(j, "zones");
    assert_int_equal(json_array_size(zones), 2);
    const json_t *k1 = find_zone(zones, "k1"), *k2 = find_zone(zones, "k2");
    assert_int_equal(zint(k1, "total_ns"), 1000);
    assert_int_equal(zint(k1, "self_ns"), 1000);
    assert_int_equal(zint(k2, "total_ns"), 1500);
    assert_int_equal(zint(k2, "self_ns"), 1500);
    assert_int_equal(zint(k2, "threads_ran_on"), 1);
    assert_int_equal(zint(k1, "threads_ran_on"), 1); /* the sibling is the same stream */
    assert_int_equal(json_integer_value(json_object_get(j, "duration_ns")), 2000);
    const json_t *tracks = json_object_get(j, "tracks");
    assert_int_equal(json_array_size(tracks), 1);
    const json_t *t = json_array_get(tracks, 0);
    assert_string_equal(json_string_value(json_object_get(t, "thread_name")), "stream 7");
    assert_int_equal(zint(t, "thread"), 7);
    assert_int_equal(zint(t, "busy_ns"), 2000);
    assert_int_equal(zint(t, "slices"), 2);
    assert_int_equal(zint(t, "overlap_siblings"), 1);
    assert_true(json_real_value(json_object_get(t, "percent")) == 100.0);
    json_decref(j);
    char *out;
    snprintf(args, sizeof args, "'%s'", path);
    assert_int_equal(summary(args, &out), 0);
    assert_non_null(strstr(out, "\n    busy  % time  track\n"
                                "2.000 µs  100.00  thread stream 7 (7) and 1 overlap sibling\n"));
    free(out);
}

/* Overlapping X slices of one name on one thread, x [0, 625] and x [375, 1000] ns: 1250 ns of
 * slices in a 1000 ns trace. Its % time is of the 1000 ns it ran, 100%, never 125%; its total
 * and self stay the slices' sum. */
static void test_overlap_not_double_counted(void **state) {
    (void)state;
    char path[4200], args[4300];
    snprintf(path, sizeof path, "%s/xx.json", g_dir);
    static const char *const names[] = {"x", "x", "y"};
    static const int tids[] = {7, 7, 8};
    static const double ts[] = {0, 0.375, 0.5}, dur[] = {0.625, 0.625, 0.25};
    write_x(path, names, tids, ts, dur, 3);
    snprintf(args, sizeof args, "'%s' --json", path);
    json_t *j = summary_json(args);
    const json_t *zones = json_object_get(j, "zones");
    const json_t *x = find_zone(zones, "x"), *y = find_zone(zones, "y");
    assert_int_equal(zint(x, "count"), 2);
    assert_int_equal(zint(x, "total_ns"), 1250);
    assert_int_equal(zint(x, "self_ns"), 1250);
    assert_int_equal(zint(x, "threads_ran_on"), 1);
    assert_true(json_real_value(json_object_get(x, "percent")) == 100.0);
    assert_true(json_real_value(json_object_get(y, "percent")) == 25.0);
    const json_t *tracks = json_object_get(j, "tracks");
    assert_int_equal(json_array_size(tracks), 2);
    assert_int_equal(zint(json_array_get(tracks, 0), "busy_ns"), 1000);
    assert_int_equal(zint(json_array_get(tracks, 1), "busy_ns"), 250);
    assert_int_equal(zint(json_array_get(tracks, 1), "overlap_siblings"), 0);
    json_decref(j);
    /* --by-thread: one row for x on thread 7 (with its sibling) */
    snprintf(args, sizeof args, "'%s' --json --by-thread", path);
    j = summary_json(args);
    zones = json_object_get(j, "zones");
    assert_int_equal(json_array_size(zones), 2);
    x = find_zone(zones, "x");
    assert_int_equal(zint(x, "thread"), 7);
    assert_int_equal(zint(x, "count"), 2);
    assert_true(json_real_value(json_object_get(x, "percent")) == 100.0);
    json_decref(j);
}

/* On- vs. off-CPU: a thread waiting for 800 us of a 1 ms zone "wait" and preempted for 200 us of
 * a 500 us zone "work": the exact table, and the same figures in --json. */
static void test_off_cpu(void **state) {
    (void)state;
    char path[4200], args[4300];
    snprintf(path, sizeof path, "%s/offcpu.json", g_dir);
    tu_write_file(
        path, "{\"traceEvents\":[{\"ph\":\"M\",\"pid\":1,\"tid\":7,\"name\":\"thread_name\","
              "\"args\":{\"name\":\"worker\"}},"
              "{\"ph\":\"X\",\"pid\":1,\"tid\":7,\"ts\":0,\"dur\":1000,\"name\":\"wait\"},"
              "{\"ph\":\"X\",\"pid\":1,\"tid\":7,\"ts\":1000,\"dur\":500,\"name\":\"work\"}],"
              "\"samples\":[],\"loupeSamples\":{\"period_ns\":0,\"lost\":0,\"off_cpu\":[{\"pid\":1,"
              "\"tid\":7,\"start_ns\":100000,\"dur_ns\":800000,\"kind\":\"waiting\"},{\"pid\":1,"
              "\"tid\":7,\"start_ns\":1100000,\"dur_ns\":200000,\"kind\":\"preempted\"}]}}");
    char *out;
    snprintf(args, sizeof args, "'%s'", path);
    assert_int_equal(summary(args, &out), 0);
    const char *want =
        "\non- vs. off-CPU (context switches; active: a thread's first event to its last):\n"
        "      active       on-CPU      waiting    preempted  thread\n"
        "    1.500 ms   500.000 µs   800.000 µs   200.000 µs  worker (7)\n"
        "\n"
        "       total       on-CPU      waiting    preempted  zone (most off-CPU first)\n"
        "    1.000 ms   200.000 µs   800.000 µs         0 ns  wait  (mostly off-CPU: waiting)\n"
        "  500.000 µs   300.000 µs         0 ns   200.000 µs  work\n";
    if (strstr(out, want) == NULL || strstr(out, "off-CPU (?)") != NULL) {
        fail_msg("no on/off-CPU table in:\n%s", out);
    }
    free(out);
    snprintf(args, sizeof args, "'%s' --json", path);
    json_t *j = summary_json(args);
    const json_t *cpu = json_object_get(j, "cpu");
    const json_t *th = json_object_get(cpu, "threads"), *zones = json_object_get(cpu, "zones");
    assert_int_equal(json_array_size(th), 1);
    const json_t *t0 = json_array_get(th, 0);
    assert_int_equal(zint(t0, "thread"), 7);
    assert_string_equal(json_string_value(json_object_get(t0, "thread_name")), "worker");
    assert_int_equal(zint(t0, "total_ns"), 1500000);
    assert_int_equal(zint(t0, "on_cpu_ns"), 500000);
    assert_int_equal(zint(t0, "waiting_ns"), 800000);
    assert_int_equal(zint(t0, "preempted_ns"), 200000);
    assert_int_equal(zint(t0, "off_cpu_unknown_ns"), 0);
    assert_int_equal(json_array_size(zones), 2);
    const json_t *z = json_array_get(zones, 0); /* most off-CPU first */
    assert_string_equal(json_string_value(json_object_get(z, "name")), "wait");
    assert_int_equal(zint(z, "total_ns"), 1000000);
    assert_int_equal(zint(z, "on_cpu_ns"), 200000);
    assert_int_equal(zint(z, "waiting_ns"), 800000);
    assert_int_equal(zint(z, "preempted_ns"), 0);
    z = json_array_get(zones, 1);
    assert_string_equal(json_string_value(json_object_get(z, "name")), "work");
    assert_int_equal(zint(z, "on_cpu_ns"), 300000);
    assert_int_equal(zint(z, "waiting_ns"), 0);
    assert_int_equal(zint(z, "preempted_ns"), 200000);
    json_decref(j);
}

/* A thread that lives for part of the trace: its on-CPU time is its active span (first event to
 * last) less its off-CPU time, not the trace's duration; a recursive zone counts once (its inner
 * instance's time is inside the outer one's). Thread 8: "rec" [1000, 1400) us holding "rec"
 * [1100, 1300) us, waiting [1150, 1250) us; thread 7 makes the trace 3 ms long. */
static void test_off_cpu_span_recursion(void **state) {
    (void)state;
    char path[4200], args[4300];
    snprintf(path, sizeof path, "%s/offcpu_rec.json", g_dir);
    tu_write_file(path,
                  "{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":7,\"ts\":0,\"dur\":3000,"
                  "\"name\":\"long\"},{\"ph\":\"X\",\"pid\":1,\"tid\":8,\"ts\":1000,\"dur\":400,"
                  "\"name\":\"rec\"},{\"ph\":\"X\",\"pid\":1,\"tid\":8,\"ts\":1100,\"dur\":200,"
                  "\"name\":\"rec\"}],\"samples\":[],\"loupeSamples\":{\"period_ns\":0,\"lost\":0,"
                  "\"off_cpu\":[{\"pid\":1,\"tid\":8,\"start_ns\":1150000,\"dur_ns\":100000,"
                  "\"kind\":\"waiting\"}]}}");
    char *out;
    snprintf(args, sizeof args, "'%s'", path);
    assert_int_equal(summary(args, &out), 0);
    const char *want =
        "      active       on-CPU      waiting    preempted  thread\n"
        "  400.000 µs   300.000 µs   100.000 µs         0 ns  thread (8)\n"
        "\n"
        "       total       on-CPU      waiting    preempted  zone (most off-CPU first)\n"
        "  400.000 µs   300.000 µs   100.000 µs         0 ns  rec\n";
    if (strstr(out, want) == NULL) {
        fail_msg("want:\n%s\nin:\n%s", want, out);
    }
    free(out);
    snprintf(args, sizeof args, "'%s' --json", path);
    json_t *j = summary_json(args);
    const json_t *t0 = json_array_get(json_object_get(json_object_get(j, "cpu"), "threads"), 0);
    assert_int_equal(zint(t0, "thread"), 8);
    assert_int_equal(zint(t0, "total_ns"), 400000);
    assert_int_equal(zint(t0, "active_start_ns"), 1000000);
    assert_int_equal(zint(t0, "on_cpu_ns"), 300000);
    json_decref(j);
}

/* A sampling-only recording (no zones) still shows its threads' on- and off-CPU time; a trace
 * whose intervals have no kind (written before the kinds) gets an "off-CPU (?)" column that
 * says so, never a guess. */
static void test_off_cpu_no_zones(void **state) {
    (void)state;
    char path[4200], args[4300];
    snprintf(path, sizeof path, "%s/offcpu0.json", g_dir);
    tu_write_file(path, "{\"metadata\":{\"loupe_version\":\"0.3.0\",\"duration_ns\":\"1500000\"},"
                        "\"traceEvents\":[{\"ph\":\"M\",\"pid\":1,\"tid\":7,\"name\":"
                        "\"thread_name\",\"args\":{\"name\":\"worker\"}}],\"samples\":[],"
                        "\"loupeSamples\":{\"period_ns\":0,\"lost\":0,\"off_cpu\":[{\"pid\":1,"
                        "\"tid\":7,\"start_ns\":100000,\"dur_ns\":800000}]}}");
    char *out;
    snprintf(args, sizeof args, "'%s'", path);
    assert_int_equal(summary(args, &out), 0);
    const char *want =
        "no zones in this trace\n\non- vs. off-CPU (context switches; active: a thread's "
        "first event to its last):\n"
        "      active       on-CPU      waiting    preempted  off-CPU (?)  thread\n"
        "  800.000 µs         0 ns         0 ns         0 ns   800.000 µs  worker (7)\n"
        "off-CPU (?): the trace does not say whether waiting or preempted (written before loupe "
        "told them apart, or a kernel older than Linux 4.17)\n";
    if (strstr(out, want) == NULL) {
        fail_msg("no on/off-CPU table in:\n%s", out);
    }
    free(out);
}

/* The drop warning follows the policy and the zones: keep-first inflates only zones that have
 * children (a, open around the last b; b never has any), keep-last (the trace's loupe_overflow)
 * loses the earlier zones and cuts short the one open where the kept events begin. */
static void test_drops_by_policy(void **state) {
    (void)state;
    char p[4300], args[4400], *out;
    snprintf(p, sizeof p, "%s/keep_first.json", g_dir);
    tu_write_file(p, "{\"metadata\":{\"loupe_version\":\"0.4.0\",\"clock\":\"monotonic\","
                     "\"duration_ns\":\"1000000\",\"loupe_thread_5_recorded\":\"10\","
                     "\"loupe_thread_5_dropped\":\"7\",\"loupe_thread_5_capacity_needed\":\"17\"},"
                     "\"traceEvents\":[{\"ph\":\"X\",\"pid\":5,\"tid\":5,\"ts\":1,\"dur\":99,"
                     "\"name\":\"a\"},{\"ph\":\"X\",\"pid\":5,\"tid\":5,\"ts\":10,\"dur\":10,"
                     "\"name\":\"b\"},{\"ph\":\"X\",\"pid\":5,\"tid\":5,\"ts\":50,\"dur\":10,"
                     "\"name\":\"b\"}]}");
    snprintf(args, sizeof args, "'%s'", p);
    assert_int_equal(summary(args, &out), 0);
    static const char want_first[] =
        "warning: thread 5 dropped 7 events: the self time of a is inflated (it was open when the "
        "drops began: its children after that were dropped); its zones after 50.000 µs are "
        "missing\n";
    assert_true(strncmp(out, want_first, strlen(want_first)) == 0);
    free(out);

    snprintf(p, sizeof p, "%s/keep_last.json", g_dir);
    tu_write_file(p, "{\"metadata\":{\"loupe_version\":\"0.4.0\",\"clock\":\"monotonic\","
                     "\"duration_ns\":\"1000000\",\"loupe_overflow\":\"keep-last\","
                     "\"loupe_thread_5_recorded\":\"10\",\"loupe_thread_5_dropped\":\"7\","
                     "\"loupe_thread_5_capacity_needed\":\"17\"},"
                     "\"traceEvents\":[{\"ph\":\"X\",\"pid\":5,\"tid\":5,\"ts\":40,\"dur\":5,"
                     "\"name\":\"z\",\"args\":{\"loupe_truncated\":true}},{\"ph\":\"X\",\"pid\":5,"
                     "\"tid\":5,\"ts\":50,\"dur\":10,\"name\":\"z\"}]}");
    snprintf(args, sizeof args, "'%s'", p);
    assert_int_equal(summary(args, &out), 0);
    static const char want_last[] =
        "warning: thread 5 dropped 7 events (keep-last: the oldest gave way to the newest): its "
        "zones before 40.000 µs are missing; z was open then: it begins there, cut short\n";
    assert_true(strncmp(out, want_last, strlen(want_last)) == 0);
    assert_null(strstr(out, "inflated"));
    free(out);
    snprintf(args, sizeof args, "'%s' --json", p);
    json_t *j = summary_json(args);
    const json_t *d = json_array_get(json_object_get(j, "dropped"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "overflow")), "keep-last");
    assert_string_equal(json_string_value(json_object_get(d, "missing")), "before");
    assert_int_equal(json_integer_value(json_object_get(d, "missing_ns")), 40000);
    assert_int_equal(json_array_size(json_object_get(d, "self_inflated")), 0);
    json_decref(j);
}

/* The busy table keeps the --top busiest tracks (in track order) and counts the rest; an async
 * track is shown by its name, not as a thread id. */
static void test_busy_top_async(void **state) {
    (void)state;
    char p[4300], args[4400], *out;
    snprintf(p, sizeof p, "%s/busy_top.json", g_dir);
    tu_write_file(p, "{\"traceEvents\":["
                     "{\"ph\":\"X\",\"pid\":1,\"tid\":11,\"ts\":0,\"dur\":100,\"name\":\"w\"},"
                     "{\"ph\":\"X\",\"pid\":1,\"tid\":12,\"ts\":0,\"dur\":300,\"name\":\"w\"},"
                     "{\"ph\":\"X\",\"pid\":1,\"tid\":13,\"ts\":0,\"dur\":200,\"name\":\"w\"},"
                     "{\"ph\":\"X\",\"pid\":1,\"tid\":14,\"ts\":0,\"dur\":50,\"name\":\"w\"},"
                     "{\"ph\":\"b\",\"cat\":\"c\",\"id\":\"0x7\",\"pid\":1,\"ts\":10,"
                     "\"name\":\"request\"},{\"ph\":\"e\",\"cat\":\"c\",\"id\":\"0x7\",\"pid\":1,"
                     "\"ts\":410,\"name\":\"request\"}]}");
    snprintf(args, sizeof args, "'%s' --by-thread --top 3", p);
    assert_int_equal(summary(args, &out), 0);
    static const char want[] = "      busy  % time  track\n"
                               "300.000 µs   73.17  thread 12\n"
                               "200.000 µs   48.78  thread 13\n"
                               "400.000 µs   97.56  async request\n"
                               "... 2 more tracks (--top 0 shows all)\n";
    const char *at = strstr(out, "      busy  % time  track\n");
    assert_non_null(at);
    assert_true(strncmp(at, want, strlen(want)) == 0);
    assert_non_null(strstr(out, "97.56  request  request\n"));
    free(out);
    snprintf(args, sizeof args, "'%s' --top 0", p);
    assert_int_equal(summary(args, &out), 0);
    assert_non_null(strstr(out, "   12.20  thread 14\n"));
    assert_null(strstr(out, "more tracks"));
    free(out);
    snprintf(args, sizeof args, "'%s' --top 1 --json", p);
    json_t *j = summary_json(args);
    assert_int_equal(json_array_size(json_object_get(j, "tracks")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "tracks_not_shown")), 4);
    json_decref(j);
}

static void test_help(void **state) {
    (void)state;
    char *out;
    assert_int_equal(summary("--help 2>/dev/null", &out), 0);
    static const char first[] = "usage: loupe summary [PATH] [--by-thread] [--top N] [--json]\n";
    assert_true(strncmp(out, first, strlen(first)) == 0);
    assert_non_null(strstr(out, "--by-thread"));
    assert_non_null(strstr(out, "exit status"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_by_thread),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_loss_and_log_dir),
        cmocka_unit_test(test_real_file),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_reentered_drops),
        cmocka_unit_test(test_overlapping_kernels),
        cmocka_unit_test(test_overlap_not_double_counted),
        cmocka_unit_test(test_off_cpu),
        cmocka_unit_test(test_off_cpu_span_recursion),
        cmocka_unit_test(test_off_cpu_no_zones),
        cmocka_unit_test(test_drops_by_policy),
        cmocka_unit_test(test_busy_top_async),
        cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
