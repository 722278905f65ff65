/* test_session.c: the session state machine (trace.h): every transition and its exact message,
 * option validation, the kept trace and loupe_write_last_trace(), failed writes followed by a
 * successful retry, the scoped form, the run directory's layout and uniqueness, metadata, and
 * concurrent start/stop from 8 threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <dirent.h>
#include <loupe/loupe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_messages(void **state) {
    (void)state;
    assert_string_equal(loupe_strerror(LOUPE_EALREADY_STARTED),
                        "Profile has already been started. Only one profile may be run at a time.");
    assert_string_equal(loupe_strerror(LOUPE_ENOT_STARTED), "No profile started");
    assert_string_equal(loupe_strerror(LOUPE_ESERVER_RUNNING),
                        "Only one profiler server can be active at a time.");
    assert_string_equal(loupe_strerror(LOUPE_ENO_SERVER), "No active profiler server.");
    assert_string_equal(loupe_strerror(LOUPE_EGPU_OVERFLOW),
                        "Insufficient space to capture a full trace");
    assert_string_equal(loupe_strerror(0), "Success");
    assert_string_equal(loupe_strerror(12345), "Unknown error");
    assert_string_equal(loupe_err_name(LOUPE_ENOT_STARTED), "ENOT_STARTED");
    assert_string_equal(loupe_err_name(0), "OK");
}

static void test_transitions(void **state) {
    (void)state;
    loupe_trace_result r = {.size = sizeof r};
    /* IDLE: stop fails with the jax message; the idempotent stop succeeds. */
    assert_int_equal(loupe_stop_trace(&r), LOUPE_ENOT_STARTED);
    assert_non_null(strstr(loupe_last_error(), "IDLE"));
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_stop_trace_if_active(&r), 0);
    assert_int_equal(loupe_is_tracing(), 0);
    /* IDLE -> TRACING */
    loupe_trace_options o = {.log_dir = tu_dir};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe_is_tracing(), 1);
    /* TRACING: a second start fails and names the running session's log_dir. */
    assert_int_equal(loupe_start_trace(&o), LOUPE_EALREADY_STARTED);
    assert_non_null(strstr(loupe_last_error(), "TRACING"));
    assert_non_null(strstr(loupe_last_error(), tu_dir));
    /* TRACING -> IDLE, writing the run directory */
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(loupe_is_tracing(), 0);
    assert_true(strncmp(r.run_dir, tu_dir, strlen(tu_dir)) == 0);
    assert_non_null(strstr(r.run_dir, "/plugins/profile/"));
    struct stat st;
    assert_int_equal(stat(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), &st), 0);
    assert_null(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_JSON));
    assert_int_equal(loupe_stop_trace(NULL), LOUPE_ENOT_STARTED);
    /* and again: start works after a stop */
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe_stop_trace_if_active(NULL), 0);
    assert_int_equal(loupe_is_tracing(), 0);
    loupe_trace_result_free(&r);
}

static void test_option_errors(void **state) {
    (void)state;
    assert_int_equal(loupe_start_trace(NULL), LOUPE_EINVALID);
    loupe_trace_options o = {0};
    assert_int_equal(loupe_start_trace(&o), LOUPE_EINVALID);
    assert_non_null(strstr(loupe_last_error(), "log_dir is required"));
    o.log_dir = tu_dir;
    o.host_tracer_level = 4;
    assert_int_equal(loupe_start_trace(&o), LOUPE_EINVALID);
    assert_non_null(strstr(loupe_last_error(), "host_tracer_level 4"));
    o.host_tracer_level = 0;
    o.buffer_events = 10;
    assert_int_equal(loupe_start_trace(&o), LOUPE_EINVALID);
    assert_non_null(strstr(loupe_last_error(), "minimum of 64"));
    o.buffer_events = 0;
    o.overflow = (loupe_overflow)7;
    assert_int_equal(loupe_start_trace(&o), LOUPE_EINVALID);
    o.overflow = LOUPE_OVERFLOW_DEFAULT;
    o.run_name = "../escape";
    assert_int_equal(loupe_start_trace(&o), LOUPE_EINVALID);
    /* log_dir under a regular file cannot be created: EIO naming the path and errno */
    char file[4200], bad[4300];
    snprintf(file, sizeof file, "%s/afile", tu_dir);
    tu_write_file(file, "x");
    snprintf(bad, sizeof bad, "%s/sub", file);
    loupe_trace_options o2 = {.log_dir = bad};
    assert_int_equal(loupe_start_trace(&o2), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), bad));
    assert_non_null(strstr(loupe_last_error(), "errno 20")); /* ENOTDIR */
    /* nothing changed: a valid start works */
    assert_int_equal(loupe_is_tracing(), 0);
    o.run_name = NULL;
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe_stop_trace(NULL), 0);
}

static size_t count_runs(const char *log_dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/plugins/profile", log_dir);
    DIR *d = opendir(p);
    if (d == NULL) {
        return 0;
    }
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.') {
            n++;
        }
    }
    closedir(d);
    return n;
}

static void test_same_second_runs_do_not_collide(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .run_name = "fixed"};
    char seen[5][LOUPE_PATH_MAX];
    for (int i = 0; i < 5; i++) {
        loupe_trace_result r = {.size = sizeof r};
        assert_int_equal(loupe_start_trace(&o), 0);
        assert_int_equal(loupe_stop_trace(&r), 0);
        snprintf(seen[i], sizeof seen[i], "%s", r.run_dir);
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(seen[i], seen[j]);
        }
        loupe_trace_result_free(&r);
    }
    assert_int_equal(count_runs(tu_dir), 5);
    assert_non_null(strstr(seen[0], "/plugins/profile/fixed"));
    assert_non_null(strstr(seen[4], "/plugins/profile/fixed_4"));
}

static void test_failed_write_then_retry(void **state) {
    (void)state;
    char ld[4200];
    snprintf(ld, sizeof ld, "%s/will_be_a_file", tu_dir);
    loupe_trace_options o = {.log_dir = ld};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int i = 0; i < 100; i++) {
        LOUPE_ZONE("kept_zone");
    }
    /* Make log_dir unwritable (as root too): replace the directory by a regular file. */
    tu_rmtree(ld);
    tu_write_file(ld, "not a directory");
    loupe_trace_result r = {.size = sizeof r};
    int rc = loupe_stop_trace(&r);
    assert_int_equal(rc, LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), ld));
    assert_non_null(strstr(loupe_last_error(), "errno"));
    assert_non_null(strstr(loupe_last_error(), "loupe_write_last_trace"));
    assert_null(r.run_dir);
    assert_int_equal(r.events_recorded, 200); /* the counts are valid on failure */
    /* the session ended anyway */
    assert_int_equal(loupe_is_tracing(), 0);
    assert_int_equal(loupe_stop_trace(NULL), LOUPE_ENOT_STARTED);
    /* nothing lost: write the kept trace elsewhere */
    char ld2[4200];
    snprintf(ld2, sizeof ld2, "%s/retry", tu_dir);
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_write_last_trace(ld2, &r), 0);
    json_t *j = tu_load_json(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(json_object_get(j, "traceEvents"), i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && strcmp(name, "kept_zone") == 0) {
            n++;
        }
    }
    assert_int_equal(n, 100);
    json_decref(j);
    /* a start drops the kept trace */
    loupe_trace_options o2 = {.log_dir = ld2};
    assert_int_equal(loupe_start_trace(&o2), 0);
    assert_int_equal(loupe_write_last_trace(ld2, NULL), LOUPE_EALREADY_STARTED);
    assert_int_equal(loupe_stop_trace(NULL), 0);
    assert_int_equal(loupe_start_trace(&o2), 0);
    assert_int_equal(loupe_stop_trace_if_active(NULL), 0);
    assert_int_equal(loupe_write_last_trace(NULL, NULL), LOUPE_EINVALID);
    loupe_trace_result_free(&r);
}

static void test_perfetto_file_has_no_metadata_key(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .create_perfetto_trace = 1};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE("z"); }
    assert_int_equal(loupe_stop_trace(&r), 0);
    json_t *a = tu_load_json(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    json_t *b = tu_load_json(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_JSON));
    assert_non_null(json_object_get(a, "metadata"));
    assert_null(json_object_get(b, "metadata"));
    assert_non_null(json_object_get(b, "otherData"));
    assert_int_equal(json_array_size(json_object_get(a, "traceEvents")),
                     json_array_size(json_object_get(b, "traceEvents")));
    char expect[LOUPE_PATH_MAX + 32];
    snprintf(expect, sizeof expect, "%s/perfetto_trace.json.gz", r.run_dir);
    assert_string_equal(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_JSON), expect);
    json_decref(a);
    json_decref(b);
    loupe_trace_result_free(&r);
}

static void test_metadata(void **state) {
    (void)state;
    assert_int_equal(loupe_set_metadata(NULL, "x"), LOUPE_EINVALID);
    assert_int_equal(loupe_set_metadata("model", "resnet"), 0);
    assert_int_equal(loupe_set_metadata("model", "bert \"large\""), 0); /* replaces */
    assert_int_equal(loupe_set_metadata("batch", "32"), 0);
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe_stop_trace(&r), 0);
    json_t *j = tu_load_json(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    json_t *md = json_object_get(j, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "model")), "bert \"large\"");
    assert_string_equal(json_string_value(json_object_get(md, "batch")), "32");
    json_decref(j);
    loupe_clear_metadata();
    assert_int_equal(loupe_start_trace(&o), 0);
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_stop_trace(&r), 0);
    j = tu_load_json(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_null(json_object_get(json_object_get(j, "metadata"), "model"));
    json_decref(j);
    loupe_trace_result_free(&r);
}

static void test_scoped_session(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    int rc = -100, ran = 0;
    LOUPE_TRACE_SCOPE(&o, &r, &rc) {
        assert_int_equal(loupe_is_tracing(), 1);
        LOUPE_ZONE("in_scope");
        ran++;
    }
    assert_int_equal(ran, 1);
    assert_int_equal(rc, 0);
    assert_int_equal(loupe_is_tracing(), 0);
    assert_int_equal(r.events_recorded, 2);
    /* a failing start skips the block */
    loupe_trace_options bad = {0};
    LOUPE_TRACE_SCOPE(&bad, NULL, &rc) {
        ran++;
    }
    assert_int_equal(ran, 1);
    assert_int_equal(rc, LOUPE_EINVALID);
    loupe_trace_result_free(&r);
}

static void test_level_none_records_nothing(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir, .host_tracer_level = LOUPE_LEVEL_NONE};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe_is_tracing(), 1);
    { LOUPE_ZONE_L(LOUPE_LEVEL_CRITICAL, "nothing"); }
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 0);
    loupe_trace_result_free(&r);
}

static void test_levels(void **state) {
    (void)state;
    for (int level = 1; level <= 3; level++) {
        loupe_trace_options o = {.log_dir = tu_dir, .host_tracer_level = level};
        loupe_trace_result r = {.size = sizeof r};
        assert_int_equal(loupe_start_trace(&o), 0);
        {
            LOUPE_ZONE_L(LOUPE_LEVEL_CRITICAL, "c");
            LOUPE_ZONE_L(LOUPE_LEVEL_INFO, "i");
            LOUPE_ZONE_L(LOUPE_LEVEL_VERBOSE, "v");
        }
        assert_int_equal(loupe_stop_trace(&r), 0);
        assert_int_equal(r.events_recorded, (uint64_t)(2 * level));
        loupe_trace_result_free(&r);
    }
    /* default = INFO */
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    {
        LOUPE_ZONE_L(LOUPE_LEVEL_VERBOSE, "v");
        LOUPE_ZONE("i");
    }
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_stop_trace(&r), 0);
    assert_int_equal(r.events_recorded, 2);
    loupe_trace_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages),
        cmocka_unit_test_setup_teardown(test_transitions, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_option_errors, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_same_second_runs_do_not_collide, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_then_retry, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_perfetto_file_has_no_metadata_key, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_metadata, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_scoped_session, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_level_none_records_nothing, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_levels, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
