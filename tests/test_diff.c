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
    assert_non_null(strstr(out, "1 regression: p50 more than 10.0% slower"));
    free(out);
    assert_int_equal(diff("base.json new.json --threshold 25", &out), 0);
    assert_non_null(strstr(out, "no regression (p50 threshold 25.0%)"));
    free(out);
    /* fewer samples needed: c is judged, and regresses (+900%) */
    assert_int_equal(diff("base.json new.json --threshold 25 --min-count 2", &out), 1);
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

static void test_across_formats(void **state) {
    (void)state;
    char cmd[8192], *out;
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' convert base.json -o base.xplane.pb 2>&1", g_dir,
             tu_cli());
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    assert_int_equal(diff("base.xplane.pb base.json", &out), 0);
    assert_non_null(strstr(out, "no regression (p50 threshold 10.0%)"));
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regression_exit),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_across_formats),
        cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
