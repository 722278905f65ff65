/* test_build_shape.c: a build without the profiler server (-DLOUPE_WITH_SERVER=OFF) or without the
 * GPU (-DLOUPE_WITH_GPU=OFF) keeps every public function (src/server_none.c, src/gpu_none.c): each
 * one that can fail returns LOUPE_EUNSUPPORTED with a detail that names the build option; a
 * session asked for a Perfetto link still writes its trace, then says why no link was served; a
 * session with the device tracer on says in its metadata why there is no device trace; and
 * `loupe view` / `loupe gpu-decode` exit 2 with the exact message. The full shape has nothing to
 * check here (the server and GPU tests cover it): skipped there, exit 77. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define NO_SERVER "this build of loupe has no profiler server (LOUPE_WITH_SERVER=OFF)"
#define NO_GPU "this build of loupe has no GPU support (LOUPE_WITH_GPU=OFF)"

static void test_no_server_api(void **state) {
    (void)state;
    assert_int_equal(loupe_start_server(0), LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(), NO_SERVER);
    loupe_server_options so = {.port = 0};
    assert_int_equal(loupe_start_server_ex(&so), LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(), NO_SERVER);
    assert_int_equal(loupe_server_port(), 0);
    assert_int_equal(loupe_stop_server(), LOUPE_ENO_SERVER);
    assert_string_equal(loupe_last_error(), "no profiler server is running (" NO_SERVER ")");
    assert_int_equal(loupe_serve_perfetto_link("/nonexistent", NULL), LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(), "cannot serve a Perfetto link: " NO_SERVER);
}

/* The link fails at the stop, after the files are written: the trace is not lost. */
static void test_no_server_session_link(void **state) {
    (void)state;
    char *dir = tu_tmpdir("shape_link");
    loupe_trace_options o = {.log_dir = dir, .create_perfetto_link = 1};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE("shape_zone"); }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), LOUPE_EUNSUPPORTED);
    const char *pj = loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_JSON);
    assert_non_null(pj);
    char want[2 * LOUPE_PATH_MAX];
    snprintf(want, sizeof want,
             "cannot serve a Perfetto link: " NO_SERVER "; the trace was written: %s", pj);
    assert_string_equal(loupe_last_error(), want);
    assert_int_equal(access(pj, R_OK), 0);
    loupe_trace_result_free(&r);
    assert_int_equal(loupe_is_tracing(), 0);
    tu_rmtree(dir);
    free(dir);
}

static void test_no_server_cli(void **state) {
    (void)state;
    char cmd[4200], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' view /nonexistent 2>&1", tu_cli());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_string_equal(out, "loupe view: this build of loupe has no profiler server, so it cannot "
                             "serve the Perfetto link (rebuild with -DLOUPE_WITH_SERVER=ON); open "
                             "the trace in ui.perfetto.dev by hand\n");
    free(out);
}

static void no_kernels(void *arg) {
    (void)arg;
}

static void test_no_gpu_api(void **state) {
    (void)state;
    assert_null(loupe_gpu_names_new(0));
    assert_string_equal(loupe_last_error(), NO_GPU);
    loupe_gpu_names_free(NULL);
    assert_int_equal(loupe_gpu_names_add(NULL, "x", NULL), LOUPE_EUNSUPPORTED);
    assert_int_equal(loupe_gpu_names_add_many(NULL, NULL, 0, NULL), LOUPE_EUNSUPPORTED);
    assert_int_equal(loupe_gpu_names_load(NULL, "/nonexistent"), LOUPE_EUNSUPPORTED);
    assert_null(loupe_gpu_names_get(NULL, 0));
    assert_int_equal(loupe_gpu_names_count(NULL), 0);
    loupe_gpu_spec spec = {0};
    uint32_t dims[3] = {1, 1, 1}, words[4] = {0};
    assert_int_equal(loupe_gpu_buffer_bytes(&spec, dims, dims), 0);
    loupe_gpu_decoded *d = (loupe_gpu_decoded *)&spec; /* must be set to NULL */
    assert_int_equal(loupe_gpu_decode(words, 4, &spec, dims, dims, NULL, NULL, &d),
                     LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(), NO_GPU);
    assert_null(d);
    loupe_gpu_decoded_free(NULL);
    assert_int_equal(loupe_gpu_write_chrome_json(NULL, "/nonexistent"), LOUPE_EUNSUPPORTED);
    assert_int_equal(loupe_gpu_session_add(NULL, NULL), LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(), NO_GPU);
    loupe_gpu_measure_result *mr = (void *)1;
    assert_int_equal(loupe_gpu_measure(no_kernels, NULL, NULL, &mr), LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(),
                        "CUPTI profiling is not supported on this platform (" NO_GPU ")");
    assert_null(mr);
    assert_int_equal(loupe_gpu_measure_kernels(NULL, 0, NULL, &mr), LOUPE_EUNSUPPORTED);
    loupe_gpu_measure_result_free(NULL);
}

/* device_tracer_level 1: the session runs host-only and its metadata says why. */
static void test_no_gpu_session(void **state) {
    (void)state;
    char *dir = tu_tmpdir("shape_gpu");
    const char *note = "device tracer: " NO_GPU "; the session goes on host-only";
    loupe_trace_options o = {.log_dir = dir, .device_tracer_level = 1};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE("shape_zone"); }
    assert_string_equal(loupe_gpu_device_tracer_note(), note);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    loupe_model *m = tu_read_back(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    loupe_trace_result_free(&r);
    const char *got = NULL;
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, "device_tracer") == 0) {
            got = m->metadata[i].value;
        }
    }
    assert_non_null(got);
    assert_string_equal(got, note);
    loupe_model_free(m);
    /* level 0 (the default): no note */
    loupe_trace_options o0 = {.log_dir = dir};
    assert_int_equal(loupe_start_trace(&o0), 0);
    assert_string_equal(loupe_gpu_device_tracer_note(), "");
    assert_int_equal(loupe_stop_trace(NULL), 0);
    tu_rmtree(dir);
    free(dir);
}

static void test_no_gpu_cli(void **state) {
    (void)state;
    char cmd[4200], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' gpu-decode buf.bin --grid 1 --block 128 --entries 8 -o x 2>&1",
             tu_cli());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_string_equal(out, "loupe gpu-decode: this build of loupe has no GPU support (rebuild "
                             "with -DLOUPE_WITH_GPU=ON)\n");
    free(out);
}

int main(void) {
    const struct CMUnitTest no_server[] = {
        cmocka_unit_test(test_no_server_api),
        cmocka_unit_test(test_no_server_session_link),
        cmocka_unit_test(test_no_server_cli),
    };
    const struct CMUnitTest no_gpu[] = {
        cmocka_unit_test(test_no_gpu_api),
        cmocka_unit_test(test_no_gpu_session),
        cmocka_unit_test(test_no_gpu_cli),
    };
    int ran = 0, failed = 0;
    if (!LOUPE_TEST_WITH_SERVER) {
        failed += cmocka_run_group_tests(no_server, NULL, NULL);
        ran = 1;
    }
    if (!LOUPE_TEST_WITH_GPU) {
        failed += cmocka_run_group_tests(no_gpu, NULL, NULL);
        ran = 1;
    }
    if (!ran) {
        puts("test_build_shape: skipped: this build has the server and the GPU (nothing left out)");
        return 77;
    }
    return failed;
}
