/* test_gpu_session.c: decoded GPU launches joining the session (loupe_gpu_session_add) and the
 * CUPTI device tracer through a fake CUPTI table: GPU tracks in the Chrome JSON
 * ("/device:GPU:<n>" processes, per-SM / per-trace threads), alignment to the host timeline,
 * another subscriber (error 39), no GPU, dropped records, buffer callbacks, start/stop/start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "gpu/cupti_api.h"
#include "session/capture.h"

#include <loupe/loupe.h>
#include <stdio.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define H LOUPE_GPU_HEADER_WORDS
#define GPU_PID 1000000000

static char *dir;

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir("gpu_session");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    loupe_stop_trace_if_active(NULL);
    loupe__cupti_set_api(NULL);
    tu_rmtree(dir);
    free(dir);
    return 0;
}

/* Two blocks of one warpgroup on SM 4, overlapping in time: B "k" [gt0+100, gt0+300]. */
static loupe_gpu_decoded *two_blocks(uint64_t gt0) {
    uint32_t w[2 * (H + 4)];
    memset(w, 0, sizeof w);
    for (uint32_t b = 0; b < 2; b++) {
        uint32_t *t = w + b * (H + 4);
        uint64_t s = gt0 + 50 * b;
        t[0] = (uint32_t)s;
        t[1] = 4;
        t[2] = 4;
        t[3] = (uint32_t)(s >> 32);
        t[4] = (uint32_t)(s + 400);
        t[5] = (uint32_t)((s + 400) >> 32);
        t[6] = 0;
        t[7] = 400;
        t[8] = LOUPE_GPU_MAGIC | LOUPE_GPU_VERSION;
        t[9] = 0;
        t[10] = 100;
        t[11] = LOUPE_GPU_TAG_END;
        t[12] = 300;
    }
    uint32_t grid[3] = {2, 1, 1}, block[3] = {128, 1, 1};
    loupe_gpu_spec spec = {.entries_per_trace = H + 4};
    loupe_gpu_names *nm = loupe_gpu_names_new(0);
    uint32_t id;
    assert_int_equal(loupe_gpu_names_add(nm, "k", &id), 0);
    loupe_gpu_decode_options o = {.overhead_cycles = LOUPE_GPU_OVERHEAD_OFF};
    loupe_gpu_decoded *d = NULL;
    assert_int_equal(loupe_gpu_decode(w, 2 * (H + 4), &spec, grid, block, nm, &o, &d), 0);
    loupe_gpu_names_free(nm);
    return d;
}

static json_t *stop_and_load(loupe_trace_result *r) {
    assert_int_equal(loupe_stop_trace(r), 0);
    return tu_load_json(loupe_trace_result_path(r, LOUPE_FORMAT_CHROME_JSON));
}

static uint64_t origin_of(json_t *j) {
    const char *s =
        json_string_value(json_object_get(json_object_get(j, "metadata"), "origin_unix_ns"));
    assert_non_null(s);
    return strtoull(s, NULL, 10);
}

/* The n-th event with this ph and name (n from 0), or NULL. */
static json_t *find(json_t *j, const char *ph, const char *name, int n) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(j, "traceEvents"), i, e) {
        const char *p = json_string_value(json_object_get(e, "ph"));
        const char *nm = json_string_value(json_object_get(e, "name"));
        if (p != NULL && nm != NULL && strcmp(p, ph) == 0 && strcmp(nm, name) == 0 && n-- == 0) {
            return e;
        }
    }
    return NULL;
}

static const char *thread_name(json_t *j, json_int_t pid, json_int_t tid) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(j, "traceEvents"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "M") == 0 &&
            strcmp(json_string_value(json_object_get(e, "name")), "thread_name") == 0 &&
            json_integer_value(json_object_get(e, "pid")) == pid &&
            json_integer_value(json_object_get(e, "tid")) == tid) {
            return json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        }
    }
    return NULL;
}

static void test_session_add_by_sm(void **state) {
    (void)state;
    loupe_gpu_decoded *d = two_blocks(1000000);
    loupe_gpu_add_options o = {.device = 1, .tracks = LOUPE_GPU_TRACKS_BY_SM};
    assert_int_equal(loupe_gpu_session_add(d, &o), LOUPE_ENOT_STARTED);
    assert_int_equal(loupe_start_trace(&(loupe_trace_options){.log_dir = dir}), 0);
    /* The launch's earliest block start is 2 ms after... now; known to the caller. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t launch = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + 2000000;
    o.launch_start_unix_ns = launch;
    o.kernel_name = "gemm";
    assert_int_equal(loupe_gpu_session_add(d, &o), 0);
    loupe_gpu_decoded_free(d); /* copied */
    loupe_trace_result r = {.size = sizeof r};
    json_t *j = stop_and_load(&r);
    uint64_t origin = origin_of(j);
    json_t *p = find(j, "M", "process_name", 1);
    assert_non_null(p);
    assert_int_equal(json_integer_value(json_object_get(p, "pid")), GPU_PID + 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(p, "args"), "name")),
                        "/device:GPU:1");
    json_t *k0 = find(j, "X", "k", 0), *k1 = find(j, "X", "k", 1);
    assert_non_null(k0);
    assert_non_null(k1);
    assert_null(find(j, "X", "k", 2));
    assert_int_equal(json_integer_value(json_object_get(k0, "pid")), GPU_PID + 1);
    /* Block 0 starts the launch: its slice is 100 ns after the launch start. */
    double want0 = (double)(launch - origin + 100) / 1000.0;
    assert_true(fabs(json_real_value(json_object_get(k0, "ts")) - want0) < 0.0005);
    assert_true(fabs(json_real_value(json_object_get(k0, "dur")) - 0.200) < 1e-9);
    double want1 = (double)(launch - origin + 150) / 1000.0;
    assert_true(fabs(json_real_value(json_object_get(k1, "ts")) - want1) < 0.0005);
    /* The two blocks overlap on SM 4: two lines. */
    json_int_t t0 = json_integer_value(json_object_get(k0, "tid"));
    json_int_t t1 = json_integer_value(json_object_get(k1, "tid"));
    assert_true(t0 != t1);
    assert_string_equal(thread_name(j, GPU_PID + 1, t0), "SM 4");
    assert_string_equal(thread_name(j, GPU_PID + 1, t1), "SM 4 #2");
    const char *meta =
        json_string_value(json_object_get(json_object_get(j, "metadata"), "gpu_launch_0"));
    assert_string_equal(meta, "gemm on GPU 1: 2 traces, 4 events, 0 dropped, needed_entries 13, "
                              "1.000000 GHz (measured), overhead 0 cycles, aligned by caller");
    json_decref(j);
    /* Nothing carries over into the next session. */
    assert_int_equal(loupe_start_trace(&(loupe_trace_options){.log_dir = dir}), 0);
    loupe_trace_result_free(&r);
    j = stop_and_load(&r);
    assert_null(find(j, "X", "k", 0));
    json_decref(j);
    loupe_trace_result_free(&r);
}

static void test_session_add_by_trace(void **state) {
    (void)state;
    loupe_gpu_decoded *d = two_blocks(5000);
    assert_int_equal(loupe_start_trace(&(loupe_trace_options){.log_dir = dir}), 0);
    assert_int_equal(loupe_gpu_session_add(d, NULL), 0); /* defaults: GPU 0, per trace */
    loupe_gpu_decoded_free(d);
    loupe_trace_result r = {.size = sizeof r};
    json_t *j = stop_and_load(&r);
    json_t *k0 = find(j, "X", "k", 0), *k1 = find(j, "X", "k", 1);
    assert_int_equal(json_integer_value(json_object_get(k0, "pid")), GPU_PID);
    assert_string_equal(thread_name(j, GPU_PID, json_integer_value(json_object_get(k0, "tid"))),
                        "kernel block 0 warpgroup 0");
    assert_string_equal(thread_name(j, GPU_PID, json_integer_value(json_object_get(k1, "tid"))),
                        "kernel block 1 warpgroup 0");
    const char *meta =
        json_string_value(json_object_get(json_object_get(j, "metadata"), "gpu_launch_0"));
    assert_non_null(strstr(meta, "aligned by end at loupe_gpu_session_add (lower bound)"));
    json_decref(j);
    loupe_trace_result_free(&r);
}

/* ---- fake CUPTI ---- */

static int subscribe_result, enable_result;
static int n_subscribe, n_unsubscribe, n_finalize, n_flush, n_ts_cb;
static loupe__cupti_req_fn req_fn;
static loupe__cupti_done_fn done_fn;
static uint64_t kernel_start;
static size_t fake_dropped;
static uint8_t *recs[8];
static size_t nrec, next_rec;

static int f_version(uint32_t *v) {
    *v = 130001;
    return 0;
}
static int f_subscribe(void **s, void *cb, void *u) {
    (void)cb;
    (void)u;
    n_subscribe++;
    *s = (void *)0x1;
    return subscribe_result;
}
static int f_unsubscribe(void *s) {
    (void)s;
    n_unsubscribe++;
    return 0;
}
static int f_ts(uint64_t (*fn)(void)) {
    n_ts_cb += fn != NULL && fn() > 0;
    return 0;
}
static int f_callbacks(loupe__cupti_req_fn r, loupe__cupti_done_fn d) {
    req_fn = r;
    done_fn = d;
    return 0;
}
static int f_enable(int kind) {
    (void)kind;
    return enable_result;
}
static int f_disable(int kind) {
    (void)kind;
    return 0;
}

static void put32(uint8_t *r, size_t off, uint32_t v) {
    memcpy(r + off, &v, 4);
}
static void put64(uint8_t *r, size_t off, uint64_t v) {
    memcpy(r + off, &v, 8);
}

/* FlushAll: CUPTI asks for a buffer, fills it with records, hands it back. */
static int f_flush(uint32_t flag) {
    assert_int_equal(flag, 1);
    n_flush++;
    uint8_t *buf;
    size_t size, maxr;
    req_fn(&buf, &size, &maxr);
    assert_non_null(buf);
    assert_int_equal(size, 2u << 20);
    assert_int_equal(maxr, 0);
    assert_int_equal((uintptr_t)buf % 8, 0);
    memset(buf, 0, 1024);
    static const char *kname = "my_kernel";
    uint8_t *k = buf; /* CUpti_ActivityKernel10, 216 bytes */
    put32(k, 0, 10);
    put64(k, 16, kernel_start);
    put64(k, 24, kernel_start + 5000);
    put32(k, 40, 0);
    put32(k, 48, 7);
    put32(k, 92, 42);
    memcpy(k + 104, &kname, sizeof kname);
    uint8_t *m = buf + 216; /* CUpti_ActivityMemcpy6, 96 bytes */
    put32(m, 0, 1);
    m[4] = 1; /* HtoD */
    put64(m, 8, 4096);
    put64(m, 16, kernel_start - 3000);
    put64(m, 24, kernel_start - 1000);
    put32(m, 32, 0);
    put32(m, 40, 7);
    put32(m, 44, 41);
    uint8_t *s = buf + 312; /* CUpti_ActivityMemset4, 88 bytes */
    put32(s, 0, 2);
    put64(s, 8, 256);
    put64(s, 16, kernel_start + 6000);
    put64(s, 24, kernel_start + 6500);
    put32(s, 40, 7);
    put32(s, 44, 43);
    uint8_t *a = buf + 400; /* CUpti_ActivityAPI, 40 bytes: the launch of correlation 42 */
    put32(a, 0, 5);
    put32(a, 28, 31337);
    put32(a, 32, 42);
    uint8_t *z = buf + 440; /* a kernel without timestamps: dropped and counted */
    put32(z, 0, 10);
    put32(z, 92, 44);
    recs[0] = k;
    recs[1] = m;
    recs[2] = s;
    recs[3] = a;
    recs[4] = z;
    nrec = 5;
    next_rec = 0;
    done_fn(NULL, 7, buf, size, 656);
    return 0;
}
static int f_next(uint8_t *buf, size_t valid, void **rec) {
    (void)buf;
    assert_int_equal(valid, 656);
    if (next_rec == nrec) {
        return LOUPE__CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *rec = recs[next_rec++];
    return 0;
}
static int f_dropped(void *ctx, uint32_t stream, size_t *n) {
    assert_null(ctx);
    assert_int_equal(stream, 7);
    *n = fake_dropped;
    return 0;
}
static int f_result_string(int r, const char **s) {
    *s = r == 2 ? "CUPTI_ERROR_INVALID_DEVICE" : "CUPTI_ERROR_UNKNOWN";
    return 0;
}
static int f_finalize(void) {
    n_finalize++;
    return 0;
}

static const loupe__cupti_api fake = {
    f_version, f_subscribe, f_unsubscribe, f_ts,      f_callbacks,     f_enable,
    f_disable, f_flush,     f_next,        f_dropped, f_result_string, f_finalize,
};

static void reset_fake(void) {
    subscribe_result = enable_result = 0;
    n_subscribe = n_unsubscribe = n_finalize = n_flush = n_ts_cb = 0;
    fake_dropped = 0;
    loupe__cupti_set_api(&fake);
}

static void test_cupti_other_subscriber(void **state) {
    (void)state;
    reset_fake();
    subscribe_result = LOUPE__CUPTI_ERROR_MULTIPLE_SUBSCRIBERS;
    unsetenv("CUDA_INJECTION64_PATH");
    loupe_trace_options o = {.log_dir = dir, .device_tracer_level = 1};
    assert_int_equal(loupe_start_trace(&o), 0);
    const char *want = "device tracer: another CUPTI subscriber is active (unnamed), such as "
                       "Nsight Systems, Nsight Compute or another profiler (CUPTI error 39, "
                       "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); the session goes on "
                       "host-only";
    assert_string_equal(loupe_gpu_device_tracer_note(), want);
    { LOUPE_ZONE("host work"); }
    loupe_trace_result r = {.size = sizeof r};
    json_t *j = stop_and_load(&r);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(j, "metadata"), "device_tracer")), want);
    assert_non_null(find(j, "X", "host work", 0));
    assert_int_equal(n_flush, 0);
    json_decref(j);
    /* Named when the injected library is known; start/stop/start keeps working. */
    setenv("CUDA_INJECTION64_PATH", "/opt/nsight/libToolsInjection64.so", 1);
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_non_null(strstr(loupe_gpu_device_tracer_note(),
                           "(CUDA_INJECTION64_PATH=/opt/nsight/libToolsInjection64.so)"));
    assert_int_equal(loupe_stop_trace(NULL), 0);
    unsetenv("CUDA_INJECTION64_PATH");
    subscribe_result = 0;
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_string_equal(loupe_gpu_device_tracer_note(), "");
    assert_int_equal(loupe_stop_trace(NULL), 0);
    assert_int_equal(n_subscribe, 3);
    assert_int_equal(n_unsubscribe, 1);
    assert_int_equal(n_finalize, 1);
    loupe_trace_result_free(&r);
}

static void test_cupti_no_gpu_and_level0(void **state) {
    (void)state;
    reset_fake();
    /* Level 0: CUPTI is never touched, no note. */
    assert_int_equal(loupe_start_trace(&(loupe_trace_options){.log_dir = dir}), 0);
    assert_int_equal(loupe_stop_trace(NULL), 0);
    assert_int_equal(n_subscribe, 0);
    assert_string_equal(loupe_gpu_device_tracer_note(), "");
    /* Level 1 without a device: a note, host-only. */
    enable_result = 2;
    loupe_trace_options o = {.log_dir = dir, .device_tracer_level = 1};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_string_equal(loupe_gpu_device_tracer_note(),
                        "device tracer: no GPU activity can be recorded "
                        "(CUPTI_ERROR_INVALID_DEVICE, CUPTI error 2); the session goes on "
                        "host-only");
    assert_int_equal(loupe_stop_trace(NULL), 0);
    assert_int_equal(n_unsubscribe, 1);
    o.device_tracer_level = 2;
    assert_int_equal(loupe_start_trace(&o), LOUPE_EINVALID);
    assert_string_equal(loupe_last_error(),
                        "loupe_start_trace: device_tracer_level 2 is out of range (0 off, 1 on)");
    /* A profiler-server capture asking for the device tracer (jax's default, level 1) gets it
     * as a session does: the same note here; level 0 leaves CUPTI alone. */
    int before = n_subscribe;
    loupe_model *m = NULL;
    assert_int_equal(loupe__capture_start(&(loupe__capture_opts){.level = 2, .device_level = 1}),
                     0);
    assert_int_equal(n_subscribe, before + 1);
    assert_string_equal(loupe_gpu_device_tracer_note(),
                        "device tracer: no GPU activity can be recorded "
                        "(CUPTI_ERROR_INVALID_DEVICE, CUPTI error 2); the session goes on "
                        "host-only");
    assert_int_equal(loupe__capture_stop(&m), 0);
    loupe_model_free(m);
    assert_int_equal(loupe__capture_start(&(loupe__capture_opts){.level = 2, .device_level = 0}),
                     0);
    assert_int_equal(n_subscribe, before + 1);
    assert_int_equal(loupe__capture_stop(&m), 0);
    loupe_model_free(m);
    assert_int_equal(loupe__capture_start(&(loupe__capture_opts){.level = 2, .device_level = 3}),
                     LOUPE_EINVALID);
}

static void test_cupti_records(void **state) {
    (void)state;
    reset_fake();
    fake_dropped = 3;
    loupe_trace_options o = {.log_dir = dir, .device_tracer_level = 1};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(n_ts_cb, 1);
    usleep(2000);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Inside the session: 0.5 ms ago (records starting outside it are dropped). */
    kernel_start = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - 500000;
    /* An in-kernel timeline of correlation 42: aligned on the kernel's CUPTI start. */
    loupe_gpu_decoded *d = two_blocks(777777);
    loupe_gpu_add_options ao = {.cupti_correlation_id = 42,
                                .tracks = LOUPE_GPU_TRACKS_BY_BLOCK,
                                .kernel_name = "my_kernel"};
    assert_int_equal(loupe_gpu_session_add(d, &ao), 0);
    loupe_gpu_decoded_free(d);
    loupe_trace_result r = {.size = sizeof r};
    json_t *j = stop_and_load(&r);
    assert_int_equal(n_flush, 1);
    uint64_t origin = origin_of(j);
    json_t *k = find(j, "X", "my_kernel", 0);
    assert_non_null(k);
    assert_int_equal(json_integer_value(json_object_get(k, "pid")), GPU_PID);
    assert_true(fabs(json_real_value(json_object_get(k, "ts")) -
                     (double)(kernel_start - origin) / 1000.0) < 0.0005);
    assert_true(fabs(json_real_value(json_object_get(k, "dur")) - 5.0) < 1e-9);
    assert_string_equal(json_string_value(json_object_get(k, "cat")), "kernel");
    json_t *args = json_object_get(k, "args");
    assert_int_equal(json_integer_value(json_object_get(args, "correlation_id")), 42);
    assert_int_equal(json_integer_value(json_object_get(args, "launch_tid")), 31337);
    assert_string_equal(thread_name(j, GPU_PID, json_integer_value(json_object_get(k, "tid"))),
                        "stream 7");
    json_t *m = find(j, "X", "Memcpy HtoD", 0);
    assert_non_null(m);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "args"), "bytes")),
                     4096);
    assert_non_null(find(j, "X", "Memset", 0));
    /* The in-kernel region "k" of block 0 starts 100 ns after the kernel's CUPTI start. */
    json_t *k0 = find(j, "X", "k", 0);
    assert_true(fabs(json_real_value(json_object_get(k0, "ts")) -
                     (double)(kernel_start - origin + 100) / 1000.0) < 0.0005);
    assert_string_equal(thread_name(j, GPU_PID, json_integer_value(json_object_get(k0, "tid"))),
                        "my_kernel block 0");
    json_t *meta = json_object_get(j, "metadata");
    assert_string_equal(json_string_value(json_object_get(meta, "device_tracer")),
                        "CUPTI: 1 kernels, 1 memcpys, 1 memsets, 3 records dropped by CUPTI, 1 "
                        "without timestamps or outside the session");
    assert_string_equal(json_string_value(json_object_get(meta, "events_dropped")), "4");
    assert_non_null(
        strstr(json_string_value(json_object_get(meta, "gpu_launch_0")), "aligned by cupti"));
    json_decref(j);
    assert_int_equal(r.events_dropped, 4);
    /* summary: CUPTI's lost records are from anywhere, not a cut tail (it said "its zones after
     * the one that began at ... are missing" of the stream they were charged to) */
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' summary '%s' 2>&1 | grep '^warning'", tu_cli(),
             loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_string_equal(out, "warning: GPU track stream 7: 4 GPU activity records were lost, from "
                             "any stream (which kernels, copies or memsets is not known); every "
                             "GPU zone recorded is whole (CUPTI: 1 kernels, 1 memcpys, 1 memsets, "
                             "3 records dropped by CUPTI, 1 without timestamps or outside the "
                             "session)\n");
    free(out);
    snprintf(cmd, sizeof cmd,
             "'%s' summary '%s' --json | python3 -c 'import json,sys; d=json.load(sys.stdin)"
             "[\"dropped\"]; print([(x[\"overflow\"], x[\"missing\"], x[\"events_dropped\"]) "
             "for x in d])'",
             tu_cli(), loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_string_equal(out, "[('lost', 'anywhere', 4)]\n");
    free(out);
    loupe_trace_result_free(&r);
}

/* Every writer gets the GPU tracks: Perfetto protobuf and XPlane read back as GPU tracks. */
static void check_gpu_model(const char *path) {
    loupe_model *m = NULL;
    int r = loupe_trace_read(path, &m);
    if (r != 0) {
        fprintf(stderr, "%s: %s\n", path, loupe_last_error());
    }
    assert_int_equal(r, 0);
    size_t found = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->kind != LOUPE_TRACK_GPU) {
            continue;
        }
        assert_int_equal(th->device, 2);
        assert_int_equal(th->slice_count, 1);
        assert_string_equal(th->slices[0].name, "k");
        assert_int_equal(th->slices[0].dur_ns, 200);
        found++;
    }
    assert_int_equal(found, 2);
    loupe_model_free(m);
}

static void test_every_writer(void **state) {
    (void)state;
    loupe_gpu_decoded *d = two_blocks(1000000);
    loupe_trace_options o = {.log_dir = dir,
                             .formats = LOUPE_FORMAT_CHROME_JSON | LOUPE_FORMAT_PERFETTO_PROTO |
                                        LOUPE_FORMAT_XPLANE};
    assert_int_equal(loupe_start_trace(&o), 0);
    loupe_gpu_add_options ao = {.device = 2, .tracks = LOUPE_GPU_TRACKS_BY_BLOCK};
    assert_int_equal(loupe_gpu_session_add(d, &ao), 0);
    loupe_gpu_decoded_free(d);
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    check_gpu_model(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_PROTO));
    check_gpu_model(loupe_trace_result_path(&r, LOUPE_FORMAT_XPLANE));
    loupe_trace_result_free(&r);
}

/* A stop racing loupe_gpu_session_add on another thread: every add that returned 0 is in the
 * trace (a "gpu_launch_<n>" metadata entry each), and every add after the stop fails with
 * LOUPE_ENOT_STARTED. Before the GPU join had its own session flag, an add that passed the
 * "tracing?" check while the stop ran could land after the stop took the launches: it returned 0
 * and appeared in no trace. Repeated so that the stop lands inside the add's copy. */
static loupe_gpu_decoded *race_d;
static int race_ok, race_refused, race_go;

static void *race_adder(void *arg) {
    (void)arg;
    while (__atomic_load_n(&race_go, __ATOMIC_ACQUIRE) == 0) {
    }
    for (;;) {
        int r = loupe_gpu_session_add(race_d, NULL);
        if (r == 0) {
            __atomic_add_fetch(&race_ok, 1, __ATOMIC_RELEASE);
        } else {
            assert_int_equal(r, LOUPE_ENOT_STARTED);
            __atomic_add_fetch(&race_refused, 1, __ATOMIC_RELEASE);
            return NULL; /* the session is over for this thread */
        }
    }
}

static size_t launches_in(const char *path) {
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(path, &m), 0);
    size_t n = 0;
    for (size_t i = 0; i < m->metadata_count; i++) {
        n += strncmp(m->metadata[i].key, "gpu_launch_", 11) == 0;
    }
    loupe_model_free(m);
    return n;
}

static void test_stop_races_add(void **state) {
    (void)state;
    race_d = two_blocks(1000000);
    for (int round = 0; round < 30; round++) {
        loupe_trace_options o = {.log_dir = dir, .formats = LOUPE_FORMAT_CHROME_JSON};
        assert_int_equal(loupe_start_trace(&o), 0);
        race_ok = race_refused = race_go = 0;
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, race_adder, NULL), 0);
        __atomic_store_n(&race_go, 1, __ATOMIC_RELEASE);
        while (__atomic_load_n(&race_ok, __ATOMIC_ACQUIRE) < 1 + round % 4) {
            sched_yield();
        }
        loupe_trace_result r = {.size = sizeof r};
        assert_int_equal(loupe_stop_trace(&r), 0);
        pthread_join(th, NULL);
        assert_int_equal(race_refused, 1);
        assert_int_equal(launches_in(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON)),
                         (size_t)race_ok);
        loupe_trace_result_free(&r);
    }
    loupe_gpu_decoded_free(race_d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_session_add_by_sm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_add_by_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cupti_other_subscriber, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cupti_no_gpu_and_level0, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cupti_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_races_add, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
