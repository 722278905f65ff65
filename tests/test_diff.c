/* test_diff.c: `loupe diff` as a CI gate: a p50 slowdown beyond the threshold exits 1 and is
 * named; a smaller one exits 0; zones with too few slices are skipped and said so; rows sorted by
 * the absolute change of the total; --json exact; any format on either side (XPlane vs JSON). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *g_dir;

/* A trace: n slices of each (name, dur µs), one after another on tid 1. */
static void write_trace(const char *file, const char *const *names, const int *counts,
                        const int *dur_us, size_t k) {
    char *text = malloc(1 << 16);
    assert_non_null(text);
    size_t o = (size_t)sprintf(text, "{\"traceEvents\":[");
    long ts = 0;
    int first = 1;
    for (size_t z = 0; z < k; z++) {
        for (int i = 0; i < counts[z]; i++) {
            o += (size_t)sprintf(text + o,
                                 "%s{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%ld,\"dur\":%d,"
                                 "\"name\":\"%s\"}",
                                 first ? "" : ",", ts, dur_us[z], names[z]);
            first = 0;
            ts += dur_us[z] + 1;
        }
    }
    sprintf(text + o, "]}");
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_dir, file);
    tu_write_file(p, text);
    free(text);
}

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir("diff");
    static const char *const base_names[] = {"a", "b", "c"};
    static const int base_counts[] = {10, 10, 2}, base_durs[] = {100, 50, 100};
    write_trace("base.json", base_names, base_counts, base_durs, 3);
    static const char *const new_names[] = {"a", "b", "c", "d"};
    static const int new_counts[] = {10, 10, 2, 3}, new_durs[] = {120, 52, 1000, 10};
    write_trace("new.json", new_names, new_counts, new_durs, 4);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static int diff(const char *args, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' diff %s 2>&1", g_dir, tu_cli(), args);
    return tu_run(cmd, out);
}

static void test_regression_exit(void **state) {
    (void)state;
    char *out;
    assert_int_equal(diff("base.json new.json", &out), 1);
    /* rows by |change of total|: c (+1800 µs), a (+200), d (+30), b (+20) */
    const char *c = strstr(out, "skipped"), *a = strstr(out, "regression "),
               *d = strstr(out, "added"), *b = strstr(out, "slower");
    assert_non_null(c);
    assert_non_null(a);
    assert_non_null(d);
    assert_non_null(b);
    assert_true(c < a && a < d && d < b);
    assert_non_null(strstr(out, "+20.0%"));
    assert_non_null(strstr(out, "1 zone skipped: fewer than 5 slices in a trace, not judged"));
    assert_non_null(strstr(
        out, "1 regression: p50 more than 10.0% and 1.000 \xc2\xb5s slower, p-value below 0.01\n"));
    free(out);
    assert_int_equal(diff("base.json new.json --threshold 25", &out), 0);
    assert_non_null(strstr(out, "no regression (p50 threshold 25.0%, floor 1.000 \xc2\xb5s, "
                                "p-value below 0.01)\n"));
    free(out);
    /* fewer samples needed: c is judged: +900%, but 2 calls against 2 are not significant */
    assert_int_equal(diff("base.json new.json --threshold 25 --min-count 2", &out), 0);
    assert_non_null(strstr(out, "\nnoise "));
    free(out);
    assert_int_equal(diff("base.json new.json --threshold 25 --min-count 2 --alpha 1", &out), 1);
    free(out);
}

static void test_json(void **state) {
    (void)state;
    char *out;
    assert_int_equal(diff("--json base.json new.json", &out), 1);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    if (j == NULL) {
        fail_msg("not JSON: %s\n%s", e.text, out);
    }
    assert_int_equal(json_integer_value(json_object_get(j, "regressions")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "min_count")), 5);
    json_t *sk = json_object_get(j, "skipped");
    assert_int_equal(json_array_size(sk), 1);
    assert_string_equal(json_string_value(json_array_get(sk, 0)), "c");
    json_t *zones = json_object_get(j, "zones");
    assert_int_equal(json_array_size(zones), 4);
    json_t *a = json_array_get(zones, 1);
    assert_string_equal(json_string_value(json_object_get(a, "name")), "a");
    assert_string_equal(json_string_value(json_object_get(a, "status")), "regression");
    json_t *ab = json_object_get(a, "base"), *an = json_object_get(a, "new");
    assert_int_equal(json_integer_value(json_object_get(ab, "count")), 10);
    assert_int_equal(json_integer_value(json_object_get(ab, "p50_ns")), 100000);
    assert_int_equal(json_integer_value(json_object_get(an, "p50_ns")), 120000);
    assert_int_equal(json_integer_value(json_object_get(an, "total_ns")), 1200000);
    json_t *ch = json_object_get(a, "change_pct");
    assert_true(json_real_value(json_object_get(ch, "p50")) == 20.0);
    json_t *d = json_array_get(zones, 2);
    assert_string_equal(json_string_value(json_object_get(d, "status")), "added");
    assert_true(json_is_null(json_object_get(d, "base")));
    assert_true(json_is_null(json_object_get(json_object_get(d, "change_pct"), "p50")));
    json_decref(j);
    free(out);
}

/* A trace of 20 zones, 200 calls each, durations drawn from one distribution per zone (a base of
 * 5 + 3 z µs for zone z, times a heavy-tailed factor: 1 + u^4 * 0.5, u uniform on [0, 1), plus a
 * rare 3x outlier) by a fixed-seed LCG; scale_zone's durations times scale. */
static void write_noisy(const char *file, uint64_t seed, int scale_zone, double scale) {
    FILE *f;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_dir, file);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"traceEvents\":[", f);
    uint64_t x = seed, ts = 0;
    for (int i = 0; i < 200; i++) {
        for (int z = 0; z < 20; z++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull; /* Knuth's MMIX LCG */
            double u = (double)(x >> 11) / 9007199254740992.0;
            double d = (5.0 + 3.0 * z) * (1.0 + u * u * u * u * 0.5) * ((x & 0xff) == 0 ? 3 : 1);
            if (z == scale_zone) {
                d *= scale;
            }
            uint64_t ns = (uint64_t)(d * 1000.0);
            fprintf(f,
                    "%s{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%llu.%03llu,\"dur\":%llu.%03llu,"
                    "\"name\":\"zone %d\"}",
                    ts ? "," : "", (unsigned long long)(ts / 1000), (unsigned long long)(ts % 1000),
                    (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000), z);
            ts += ns + 1000;
        }
    }
    fputs("]}", f);
    fclose(f);
}

/* Two runs of the same program: the same distributions, other seeds: no regression (the old
 * p50-only rule called zones regressions here). One zone 30% slower: exactly that one. */
static void test_same_distribution(void **state) {
    (void)state;
    write_noisy("run1.json", 1, -1, 1.0);
    write_noisy("run2.json", 2, -1, 1.0);
    write_noisy("slow.json", 3, 7, 1.3);
    char *out;
    assert_int_equal(diff("run1.json run2.json", &out), 0);
    assert_null(strstr(out, "\nregression "));
    assert_null(strstr(out, "\nnoise "));
    assert_non_null(strstr(out, "no regression (p50 threshold 10.0%"));
    free(out);
    assert_int_equal(diff("run1.json run2.json --threshold 0 --min-delta 0 --alpha 1", &out), 1);
    free(out);
    assert_int_equal(diff("--json run1.json slow.json", &out), 1);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "regressions")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "min_delta_ns")), 1000);
    assert_true(json_real_value(json_object_get(j, "alpha")) == 0.01);
    json_t *zones = json_object_get(j, "zones");
    size_t found = 0;
    for (size_t i = 0; i < json_array_size(zones); i++) {
        json_t *z = json_array_get(zones, i);
        const char *st = json_string_value(json_object_get(z, "status"));
        if (strcmp(st, "regression") == 0) {
            found++;
            assert_string_equal(json_string_value(json_object_get(z, "name")), "zone 7");
            assert_true(json_real_value(json_object_get(z, "p_value")) < 1e-6);
            assert_true(json_integer_value(json_object_get(z, "delta_p50_ns")) > 5000);
            assert_int_equal(
                json_integer_value(json_object_get(json_object_get(z, "new"), "count")), 200);
        }
    }
    assert_int_equal(found, 1);
    json_decref(j);
    free(out);
}

/* A trace that dropped events: a warning naming it, and exit 3 (whatever the regressions). */
static void test_dropped(void **state) {
    (void)state;
    char p[4200];
    snprintf(p, sizeof p, "%s/dropped.json", g_dir);
    tu_write_file(p, "{\"metadata\":{\"loupe_version\":\"0.1.0\",\"loupe_thread_1_dropped\":\"7\"},"
                     "\"traceEvents\":[{\"ph\":"
                     "\"X\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":5,\"name\":\"a\"}]}");
    loupe_model *m = tu_read_back(p);
    assert_int_equal(loupe_model_events_dropped(m), 7);
    loupe_model_free(m);
    char *out;
    assert_int_equal(diff("base.json dropped.json", &out), 3);
    assert_non_null(strstr(out, "loupe diff: warning: NEW "));
    assert_non_null(strstr(out, "dropped.json dropped 7 events (buffers were full)"));
    free(out);
}

/* Two traces without zones (sampling-only recordings): nothing diff can compare, said so with
 * a status of its own, never "no regression". */
static void test_no_zones(void **state) {
    (void)state;
    char p[4200];
    snprintf(p, sizeof p, "%s/nozones.json", g_dir);
    tu_write_file(p, "{\"traceEvents\":[]}");
    char *out;
    assert_int_equal(diff("nozones.json nozones.json", &out), 4);
    assert_string_equal(out, "loupe diff: neither trace has zones to compare (BASE nozones.json: 0 "
                             "CPU samples; NEW nozones.json: 0): diff compares zones only; `loupe "
                             "summary` shows each trace's hot functions\n");
    free(out);
}

static void test_across_formats(void **state) {
    (void)state;
    char cmd[8192], *out;
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' convert base.json -o base.xplane.pb 2>&1", g_dir,
             tu_cli());
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    assert_int_equal(diff("base.xplane.pb base.json", &out), 0);
    assert_non_null(strstr(out, "no regression (p50 threshold 10.0%"));
    assert_non_null(strstr(out, "same"));
    free(out);
}

static void test_usage(void **state) {
    (void)state;
    char *out;
    assert_int_equal(diff("base.json", &out), 2);
    assert_non_null(strstr(out, "two traces needed: BASE NEW"));
    free(out);
    assert_int_equal(diff("base.json new.json --threshold -3", &out), 2);
    assert_non_null(strstr(out, "--threshold needs a percentage >= 0, not '-3'"));
    free(out);
    assert_int_equal(diff("base.json new.json --min-count 1e23", &out), 2);
    assert_non_null(strstr(out, "--min-count needs a whole number >= 0, not '1e23'"));
    free(out);
    assert_int_equal(diff("base.json missing.json", &out), 2);
    assert_non_null(strstr(out, "missing.json: No such file or directory"));
    free(out);
}

/* Changes that fail the floor or the test are "same", either way: produce +468 ns (+0.2%, below
 * the 1 µs floor, though significant) and short -1 µs (p = 0.6477), never "slower"/"faster". */
static void test_insignificant_is_same(void **state) {
    (void)state;
    static const char *const names[] = {"produce", "short"};
    char base[4096] = "{\"traceEvents\":[", neu[4096] = "{\"traceEvents\":[";
    static const char *const short_base[] = {"10", "11", "12", "13", "14",
                                             "15", "16", "17", "18", "19"};
    static const char *const short_new[] = {"8",  "10", "11", "12", "13",
                                            "15", "16", "17", "18", "19"};
    for (int side = 0; side < 2; side++) {
        char *t = side ? neu : base;
        long ts = 0;
        for (int z = 0; z < 2; z++) {
            for (int i = 0; i < 10; i++) {
                const char *dur =
                    z == 0 ? (side ? "200.468" : "200") : (side ? short_new[i] : short_base[i]);
                size_t o = strlen(t);
                snprintf(t + o, 4096 - o,
                         "%s{\"ph\":\"X\",\"tid\":1,\"pid\":1,\"ts\":%ld,\"dur\":%s,"
                         "\"name\":\"%s\"}",
                         ts == 0 ? "" : ",", ts, dur, names[z]);
                ts += 300;
            }
        }
        strcat(t, "]}");
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/same_base.json", g_dir);
    tu_write_file(p, base);
    snprintf(p, sizeof p, "%s/same_new.json", g_dir);
    tu_write_file(p, neu);
    char *out;
    assert_int_equal(diff("same_base.json same_new.json", &out), 0);
    assert_non_null(
        strstr(out, "\nsame               10 -> 10   145.000 \xc2\xb5s   139.000 \xc2\xb5s     "
                    "-4.1%    14.000 \xc2\xb5s    13.000 \xc2\xb5s     -7.1%     -1.000 "
                    "\xc2\xb5s    0.6477    19.000 \xc2\xb5s     +0.0%     -4.1%  short\n"));
    assert_non_null(strstr(out, "\nsame               10 -> 10      2.000 ms      2.005 ms     "
                                "+0.2%   200.000 \xc2\xb5s   200.468 \xc2\xb5s     +0.2%        "
                                "+468 ns   <0.0001   200.468 \xc2\xb5s     +0.2%     +0.2%  "
                                "produce\n"));
    assert_null(strstr(out, "slower"));
    assert_null(strstr(out, "faster"));
    free(out);
    assert_int_equal(diff("--json same_base.json same_new.json", &out), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    const json_t *zs = json_object_get(j, "zones");
    assert_int_equal(json_array_size(zs), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(json_string_value(json_object_get(json_array_get(zs, i), "status")),
                            "same");
    }
    json_decref(j);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insignificant_is_same),
        cmocka_unit_test(test_regression_exit),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_no_zones),
        cmocka_unit_test(test_across_formats),
        cmocka_unit_test(test_same_distribution),
        cmocka_unit_test(test_dropped),
        cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
