/* test_xplane.c: the XPlane writer and reader. Round trip model -> writer -> reader -> model on a
 * model with every event kind (nested, equal-start and zero-length slices, truncated and
 * function slices with a category, instants, int and double counters, flows, typed args, GPU
 * tracks on two devices, one sharing a host tid) and hostile names; the bytes against protoc's
 * decoding with proto/xplane.proto; per-plane metadata dedup with ids from 1; the 2 GiB limit
 * (lowered) as an error with no file, and over it into a file: 3 parts read back whole (also
 * in a run directory beside another process's file); two processes' GPU planes; hostile input
 * (truncations, garbage varints, huge lengths) as LOUPE_EFORMAT naming the offset; content
 * detection; a real session's run directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "base/pb.h"
#include "export/writers.h"
#include "import/readers.h"
#include "model/builder.h"
#include "model/merge.h"
#include "model/tracks.h"

#include <loupe/loupe.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char HOSTILE[] =
    "q\"uote\\back\nnl\ttab #a=1# semi;colon \xe2\x82\xac \xf0\x9f\x94\xa5";

/* full_model() with extra metadata: kv[0..n) (key, value) pairs. */
static loupe_model *full_model_meta(const char *const *kv, size_t n);

static loupe_model *full_model(void) {
    return full_model_meta(NULL, 0);
}

static loupe_model *full_model_meta(const char *const *kv, size_t n) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 4242;
    m->process_name = loupe__mb_str(mb, "xp\"lane");
    m->host = loupe__mb_str(mb, "host-a");
    m->clock = loupe__mb_str(mb, "tsc");
    m->tsc_ghz = 2.596120183;
    m->origin_unix_ns = 1700000000123456789ull;
    m->duration_ns = 10000000;
    m->unmatched_ends = 3;
    size_t t0 = loupe__mb_thread(mb, 100);
    size_t t1 = loupe__mb_thread(mb, 4000000000ull);
    loupe__mb_thread_name(mb, t0, "main");
    loupe__mb_thread_name(mb, t1, HOSTILE);
    loupe_model_thread *th = loupe__mb_thread_at(mb, t0);
    th->events_recorded = 12;
    th->events_dropped = 2;
    th->capacity_needed = 14;
    loupe__mb_thread_at(mb, t1)->events_recorded = 9;
    size_t a = loupe__mb_slice(mb, t0);
    *loupe__mb_slice_at(mb, t0, a) =
        (loupe_slice){.start_ns = 1000, .dur_ns = 5000000, .name = loupe__mb_str(mb, "train")};
    loupe_arg sa[] = {{.key = "step_num", .type = LOUPE_ARG_INT64, .v.i = 3}};
    assert_int_equal(loupe__mb_slice_args(mb, t0, a, sa, 1), 0);
    size_t b = loupe__mb_slice(mb, t0); /* equal start, shorter: a child */
    *loupe__mb_slice_at(mb, t0, b) =
        (loupe_slice){.start_ns = 1000, .dur_ns = 1234, .name = loupe__mb_str(mb, HOSTILE)};
    loupe_arg la[] = {
        {.key = "i", .type = LOUPE_ARG_INT64, .v.i = -7},
        {.key = "u", .type = LOUPE_ARG_UINT64, .v.u = 18446744073709551615ull},
        {.key = "d", .type = LOUPE_ARG_DOUBLE, .v.d = 0.1},
        {.key = "b", .type = LOUPE_ARG_BOOL, .v.b = 1},
        {.key = "s", .type = LOUPE_ARG_STRING, .v.s = HOSTILE},
        {.key = "e", .type = LOUPE_ARG_STRING, .v.s = ""},
        {.key = "i", .type = LOUPE_ARG_BOOL, .v.b = 0}, /* same key, another type */
    };
    assert_int_equal(loupe__mb_slice_args(mb, t0, b, la, 7), 0);
    size_t z = loupe__mb_slice(mb, t0); /* zero length: still a slice, not an instant */
    *loupe__mb_slice_at(mb, t0, z) =
        (loupe_slice){.start_ns = 6000000, .dur_ns = 0, .name = loupe__mb_str(mb, "")};
    size_t c = loupe__mb_slice(mb, t1);
    *loupe__mb_slice_at(mb, t1, c) = (loupe_slice){.start_ns = 2000001,
                                                   .dur_ns = 7999999,
                                                   .name = loupe__mb_str(mb, "train"),
                                                   .flags = LOUPE_SLICE_TRUNCATED};
    size_t d = loupe__mb_slice(mb, t1);
    *loupe__mb_slice_at(mb, t1, d) = (loupe_slice){.start_ns = 3000000,
                                                   .dur_ns = 10,
                                                   .name = loupe__mb_str(mb, "fn"),
                                                   .flags = LOUPE_SLICE_FUNCTION};
    loupe__mb_slice_category(mb, t1, d, "function");
    loupe_arg ia[] = {{.key = "why", .type = LOUPE_ARG_STRING, .v.s = "checkpoint"}};
    assert_int_equal(loupe__mb_instant(mb, t0, 4000000, "mark", ia, 1), 0);
    assert_int_equal(loupe__mb_instant(mb, t1, 3000000, "fn", NULL, 0), 0); /* = a slice name */
    loupe_counter_sample c1 = {.ts_ns = 100, .name = "queue", .i = -5};
    loupe_counter_sample c2 = {.ts_ns = 200, .name = "loss", .is_double = 1, .d = 2.5};
    assert_int_equal(loupe__mb_counter(mb, &c1), 0);
    assert_int_equal(loupe__mb_counter(mb, &c2), 0);
    /* GPU tracks: device 1 first in the model, and a tid equal to a host thread's */
    size_t g1 = loupe__mb_thread(mb, 7);
    loupe_model_thread *gt = loupe__mb_thread_at(mb, g1);
    gt->kind = LOUPE_TRACK_GPU;
    gt->device = 1;
    gt->events_recorded = 2;
    loupe__mb_thread_name(mb, g1, "stream 7");
    size_t k1 = loupe__mb_slice(mb, g1);
    *loupe__mb_slice_at(mb, g1, k1) =
        (loupe_slice){.start_ns = 2500000, .dur_ns = 2000, .name = loupe__mb_str(mb, "gemm")};
    /* the builder keys threads by tid: make a GPU track with tid 100 by renaming one */
    size_t g0 = loupe__mb_thread(mb, 999);
    gt = loupe__mb_thread_at(mb, g0);
    gt->tid = 100;
    gt->kind = LOUPE_TRACK_GPU;
    gt->device = 0;
    size_t k0 = loupe__mb_slice(mb, g0);
    *loupe__mb_slice_at(mb, g0, k0) =
        (loupe_slice){.start_ns = 2600000, .dur_ns = 1000, .name = loupe__mb_str(mb, "gemm")};
    assert_int_equal(loupe__mb_flow(mb, 9, t0, b, t1, c), 0);
    assert_int_equal(loupe__mb_flow(mb, 10, t0, b, t1, d), 0);
    assert_int_equal(loupe__mb_flow(mb, 18446744073709551615ull, t1, d, g1, k1), 0);
    assert_int_equal(loupe__mb_metadata(mb, "model", "bert"), 0);
    assert_int_equal(loupe__mb_metadata(mb, "profile_start_time", HOSTILE), 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(loupe__mb_metadata(mb, kv[2 * i], kv[2 * i + 1]), 0);
    }
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static char *to_mem(const loupe_model *m, size_t *n) {
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(loupe__write_xplane(m, &s), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    *n = s.mem_len;
    return s.mem;
}

static int read_bytes(const void *p, size_t n, loupe_model **out) {
    char *buf = malloc(n + 17);
    assert_non_null(buf);
    memcpy(buf, p, n);
    buf[n] = 0;
    return loupe__xplane_read_mem("t.xplane.pb", buf, n, out);
}

/* m written and read back: the model that comes back, equal to m (the caller frees it). */
static loupe_model *written_and_read(const loupe_model *m) {
    size_t n;
    char *bytes = to_mem(m, &n);
    loupe_model *r = NULL;
    assert_int_equal(read_bytes(bytes, n, &r), 0);
    tu_models_equal(m, r);
    free(bytes);
    return r;
}

static void gpu_track(loupe__mb *mb, size_t process, uint32_t device, uint64_t tid,
                      const char *name, uint64_t start) {
    size_t t = loupe__mb_thread_add(mb, tid);
    assert_true(t != SIZE_MAX);
    loupe_model_thread *th = loupe__mb_thread_at(mb, t);
    th->kind = LOUPE_TRACK_GPU;
    th->process = process;
    th->device = device;
    th->events_recorded = 2;
    loupe__mb_thread_name(mb, t, "stream 1");
    size_t k = loupe__mb_slice(mb, t);
    *loupe__mb_slice_at(mb, t, k) =
        (loupe_slice){.start_ns = start, .dur_ns = 100, .name = loupe__mb_str(mb, name)};
}

static int mem_has(const char *p, size_t n, const char *str) {
    size_t k = strlen(str);
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(p + i, str, k) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Every process's GPU tracks: processes[0]'s device 0 is "/device:GPU:0"; the second
 * process's devices 0 and 1 (the same device index and stream tid as the first's) are
 * "/device:GPU:2" and "/device:GPU:3" (after the largest device, 1), and come back to their
 * process and device. */
static loupe_model *gpu_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 100;
    m->process_name = loupe__mb_str(mb, "app");
    m->host = loupe__mb_str(mb, "h");
    m->clock = loupe__mb_str(mb, "monotonic");
    assert_int_equal(loupe__mb_process(mb, 100), 0);
    assert_int_equal(loupe__mb_process(mb, 200), 1);
    loupe__mb_process_at(mb, 1)->name = loupe__mb_str(mb, "helper");
    size_t h = loupe__mb_thread_in(mb, 1, 7);
    loupe__mb_thread_name(mb, h, "worker");
    size_t k = loupe__mb_slice(mb, h);
    *loupe__mb_slice_at(mb, h, k) =
        (loupe_slice){.start_ns = 10, .dur_ns = 5, .name = loupe__mb_str(mb, "launch")};
    gpu_track(mb, 0, 0, LOUPE__GPU_TID(0, 1), "k00", 1000);
    gpu_track(mb, 1, 0, LOUPE__GPU_TID(0, 1), "k10", 2000);
    gpu_track(mb, 1, 1, LOUPE__GPU_TID(1, 1), "k11", 3000);
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static void test_gpu_processes(void **state) {
    (void)state;
    loupe_model *m = gpu_model();
    size_t n;
    char *bytes = to_mem(m, &n);
    assert_true(mem_has(bytes, n, "/device:GPU:0"));
    assert_false(mem_has(bytes, n, "/device:GPU:1"));
    assert_true(mem_has(bytes, n, "/device:GPU:2"));
    assert_true(mem_has(bytes, n, "/device:GPU:3"));
    assert_true(mem_has(bytes, n, "loupe_gpu_process"));
    assert_true(mem_has(bytes, n, "helper (200) / stream 1"));
    loupe_model *r = NULL;
    assert_int_equal(read_bytes(bytes, n, &r), 0);
    assert_int_equal(r->process_count, 2);
    assert_int_equal(r->processes[1].pid, 200);
    static const struct {
        size_t process;
        uint32_t device;
        const char *name;
        uint64_t start;
    } want[3] = {{0, 0, "k00", 1000}, {1, 0, "k10", 2000}, {1, 1, "k11", 3000}};
    size_t gpu = 0;
    for (size_t t = 0; t < r->thread_count; t++) {
        const loupe_model_thread *th = &r->threads[t];
        if (th->kind != LOUPE_TRACK_GPU) {
            continue;
        }
        size_t i = 0;
        while (i < 3 && strcmp(want[i].name, th->slices[0].name) != 0) {
            i++;
        }
        assert_true(i < 3);
        assert_int_equal(th->process, want[i].process);
        assert_int_equal(th->device, want[i].device);
        assert_int_equal(th->tid, LOUPE__GPU_TID(want[i].device, 1));
        assert_string_equal(th->name, "stream 1");
        assert_int_equal(th->events_recorded, 2);
        assert_int_equal(th->slice_count, 1);
        assert_int_equal(th->slices[0].start_ns, want[i].start);
        assert_int_equal(th->slices[0].dur_ns, 100);
        gpu++;
    }
    assert_int_equal(gpu, 3);
    loupe_model_free(r);
    free(bytes);
    loupe_model_free(m);
}

/* 3000 slices on one thread, 3000 nested in them on another, a counter per ms: a trace to
 * split. */
static loupe_model *split_model(uint64_t pid) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = pid;
    m->process_name = loupe__mb_str(mb, "split");
    m->host = loupe__mb_str(mb, "h");
    m->clock = loupe__mb_str(mb, "monotonic");
    m->duration_ns = 3000000000ull;
    size_t a = loupe__mb_thread(mb, pid), b = loupe__mb_thread(mb, pid + 1);
    loupe__mb_thread_name(mb, b, "worker");
    for (uint64_t i = 0; i < 3000; i++) {
        size_t k = loupe__mb_slice(mb, a);
        *loupe__mb_slice_at(mb, a, k) = (loupe_slice){
            .start_ns = 1000000 * i, .dur_ns = 500000, .name = loupe__mb_str(mb, "step")};
        k = loupe__mb_slice(mb, b);
        *loupe__mb_slice_at(mb, b, k) = (loupe_slice){
            .start_ns = 1000000 * i + 10, .dur_ns = 100, .name = loupe__mb_str(mb, "work")};
        loupe_counter_sample c = {.ts_ns = 1000000 * i + 5, .name = "q", .i = (int64_t)i};
        assert_int_equal(loupe__mb_counter(mb, &c), 0);
    }
    assert_int_equal(loupe__mb_flow(mb, 1, a, 0, b, 2999), 0); /* from part 1 to part 3 */
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* Over the limit (lowered by LOUPE_TEST_XPLANE_PART_BYTES to 40% of the whole): 3 parts,
 * x.xplane.pb, x.part2.xplane.pb and x.part3.xplane.pb, each under the limit and a valid XSpace
 * alone, read back as the whole trace (every event once, the flow across parts); written again
 * whole, the old parts go. */
static void test_split_parts(void **state) {
    (void)state;
    loupe_model *m = split_model(9);
    size_t whole;
    free(to_mem(m, &whole));
    char *dir = tu_tmpdir("xplane-split");
    char path[4200], p2[4300], p3[4300], p4[4300];
    snprintf(path, sizeof path, "%s/x.xplane.pb", dir);
    snprintf(p2, sizeof p2, "%s/x.part2.xplane.pb", dir);
    snprintf(p3, sizeof p3, "%s/x.part3.xplane.pb", dir);
    snprintf(p4, sizeof p4, "%s/x.part4.xplane.pb", dir);
    char lim[32];
    size_t limit = whole * 4 / 10;
    snprintf(lim, sizeof lim, "%zu", limit);
    setenv("LOUPE_TEST_XPLANE_PART_BYTES", lim, 1);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), 0);
    /* a memory sink has nowhere to put parts: the limit error */
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(loupe__write_xplane(m, &s), LOUPE_EUNSUPPORTED);
    loupe__sink_discard(&s);
    unsetenv("LOUPE_TEST_XPLANE_PART_BYTES");
    const char *files[3] = {path, p2, p3};
    size_t events = 0;
    for (int i = 0; i < 3; i++) {
        long n = file_size(files[i]);
        assert_true(n > 0 && (size_t)n <= limit);
        FILE *f = fopen(files[i], "rb");
        assert_non_null(f);
        char *buf = malloc((size_t)n + 1);
        assert_non_null(buf);
        assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
        fclose(f);
        loupe_model *one = NULL; /* a part alone ("t.xplane.pb" has no parts beside it) */
        assert_int_equal(loupe__xplane_read_mem("t.xplane.pb", buf, (size_t)n, &one), 0);
        for (size_t t = 0; t < one->thread_count; t++) {
            events += one->threads[t].slice_count;
        }
        events += one->counter_count;
        loupe_model_free(one);
    }
    assert_int_equal(events, 9000);
    assert_int_equal(file_size(p4), -1);
    loupe_model *r = NULL;
    assert_int_equal(loupe_trace_read(path, &r), 0);
    tu_models_equal(m, r);
    assert_int_equal(r->flow_count, 1);
    loupe_model_free(r);
    /* a run directory: the parts are no traces of their own; with a second process's file,
     * the split one is still one process */
    char found[4200];
    assert_int_equal(loupe_trace_find(dir, found, sizeof found), 0);
    assert_string_equal(found, path);
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    assert_int_equal(mkdir(run, 0755), 0);
    char h100[4300], h200[4300];
    snprintf(h100, sizeof h100, "%s/h.100.xplane.pb", run);
    snprintf(h200, sizeof h200, "%s/h.200.xplane.pb", run);
    loupe_model *m100 = split_model(100), *m200 = split_model(200);
    setenv("LOUPE_TEST_XPLANE_PART_BYTES", lim, 1);
    assert_int_equal(loupe_trace_write(m100, h100, LOUPE_FILE_XPLANE), 0);
    unsetenv("LOUPE_TEST_XPLANE_PART_BYTES");
    assert_int_equal(loupe_trace_write(m200, h200, LOUPE_FILE_XPLANE), 0);
    char q3[4300];
    snprintf(q3, sizeof q3, "%s/h.100.part3.xplane.pb", run);
    assert_true(file_size(q3) > 0);
    assert_int_equal(loupe_trace_find(run, found, sizeof found), 0);
    assert_string_equal(found, run);
    assert_int_equal(loupe_trace_read(run, &r), 0);
    assert_int_equal(r->process_count, 2);
    size_t per[2] = {0, 0};
    for (size_t t = 0; t < r->thread_count; t++) {
        per[r->threads[t].process] += r->threads[t].slice_count;
    }
    assert_int_equal(per[0], 6000);
    assert_int_equal(per[1], 6000);
    assert_int_equal(r->counter_count, 6000);
    assert_int_equal(r->flow_count, 2);
    loupe_model_free(r);
    loupe_model_free(m100);
    loupe_model_free(m200);
    /* whole again: no part left to be read with it */
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), 0);
    assert_int_equal(file_size(p2), -1);
    assert_int_equal(file_size(p3), -1);
    assert_int_equal(file_size(path), (long)whole);
    tu_rmtree(dir);
    free(dir);
    loupe_model_free(m);
}

static void test_round_trip(void **state) {
    (void)state;
    loupe_model *m = full_model();
    size_t n;
    char *bytes = to_mem(m, &n);
    assert_true(loupe__xplane_sniff(bytes, n));
    loupe_model *r = NULL;
    assert_int_equal(read_bytes(bytes, n, &r), 0);
    tu_models_equal(m, r);
    /* and once more: the second file is byte for byte the first */
    loupe_model *r2 = written_and_read(r);
    tu_models_equal(m, r2);
    loupe_model_free(r2);
    loupe_model_free(r);
    free(bytes);
    loupe_model_free(m);
}

static char *write_file(const loupe_model *m, const char *dir, const char *name) {
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    assert_non_null(path);
    sprintf(path, "%s/%s", dir, name);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), 0);
    return path;
}

/* protoc reads the file with loupe's .proto: plane names, hostnames, metadata ids from 1 per
 * plane, deduplicated names, typed stats, ref values. */
static void test_protoc_decode(void **state) {
    (void)state;
    if (system("command -v protoc >/dev/null 2>&1") != 0) {
        skip(); /* tools/setup.sh installs protobuf-compiler */
    }
    loupe_model *m = full_model();
    char *dir = tu_tmpdir("xplane");
    char *path = write_file(m, dir, "h.xplane.pb");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "protoc --decode=tensorflow.profiler.XSpace -I %s/proto %s/proto/xplane.proto < %s",
             LOUPE_SOURCE_DIR, LOUPE_SOURCE_DIR, path);
    char *out = NULL;
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "name: \"/host:CPU\""));
    assert_non_null(strstr(out, "name: \"/device:GPU:0\""));
    assert_non_null(strstr(out, "name: \"/device:GPU:1\""));
    assert_non_null(strstr(out, "name: \"Task Environment\""));
    assert_non_null(strstr(out, "hostnames: \"host-a\""));
    assert_non_null(strstr(out, "warnings: \"loupe: thread 100 dropped 2 events (buffer_events 14 "
                                "would have held them)\""));
    /* the host plane: "train" once in its event metadata, id 1 (first used) */
    const char *host = strstr(out, "name: \"/host:CPU\"");
    const char *gpu0 = strstr(out, "name: \"/device:GPU:0\"");
    assert_true(host < gpu0);
    size_t trains = 0;
    for (const char *p = host; (p = strstr(p, "name: \"train\"")) != NULL && p < gpu0; p++) {
        trains++;
    }
    assert_int_equal(trains, 1);
    assert_non_null(strstr(host, "event_metadata {\n    key: 1\n    value {\n      id: 1\n      "
                                 "name: \"train\"\n"));
    /* the main thread's line: tid, name, relative timestamp, the step event with step_num and
     * XProf's root marker _r = 1 (stat metadata 2) */
    assert_non_null(
        strstr(out, "lines {\n    id: 100\n    name: \"main\"\n    timestamp_ns: 1000\n"));
    assert_non_null(strstr(out, "events {\n      metadata_id: 1\n      offset_ps: 0\n      "
                                "duration_ps: 5000000000\n      stats {\n        metadata_id: 1\n"
                                "        int64_value: 3\n      }\n      stats {\n        "
                                "metadata_id: 2\n        int64_value: 1\n      }\n    }\n"));
    assert_non_null(strstr(host, "stat_metadata {\n    key: 2\n    value {\n      id: 2\n      "
                                 "name: \"_r\"\n"));
    /* flows 9 and 10 leave the hostile child: _pt 0 (stat 12) once, then _p (13) per flow; the
     * truncated "train" on the other thread takes flow 9 in: _ct 0 (17), _c 9 (18) */
    assert_non_null(strstr(host, "name: \"_pt\"\n    }\n  }\n  stat_metadata {\n    key: 13\n"
                                 "    value {\n      id: 13\n      name: \"_p\"\n"));
    assert_non_null(strstr(out, "      stats {\n        metadata_id: 12\n        int64_value: 0\n"
                                "      }\n      stats {\n        metadata_id: 13\n        "
                                "uint64_value: 9\n      }\n      stats {\n        metadata_id: "
                                "13\n        uint64_value: 10\n      }\n    }\n"));
    assert_non_null(strstr(out, "      stats {\n        metadata_id: 17\n        int64_value: 0\n"
                                "      }\n      stats {\n        metadata_id: 18\n        "
                                "uint64_value: 9\n      }\n    }\n"));
    assert_null(strstr(out, "loupe_flow_"));
    /* every line named: the unnamed GPU track too, marked so the reader unnames it */
    assert_non_null(strstr(out, "lines {\n    id: 100\n    name: \"track 100\"\n"));
    assert_non_null(strstr(gpu0, "name: \"loupe_thread_100_unnamed\""));
    /* /host:metadata as jax writes it (versions, process_id), and Task Environment's
     * profile_options: a ProfileOptions with version 1 */
    assert_non_null(strstr(out, "  name: \"/host:metadata\"\n  stat_metadata {\n    key: 1\n    "
                                "value {\n      id: 1\n      name: \"loupe_version\"\n"));
    assert_non_null(strstr(out,
                           "  stats {\n    metadata_id: 1\n    str_value: \"" LOUPE_VERSION_STRING
                           "\"\n  }\n  stats {\n    metadata_id: 2\n    int64_value: "
                           "4242\n  }\n}\n"));
    assert_non_null(strstr(out, "      name: \"profile_options\"\n"));
    assert_non_null(strstr(out, "    metadata_id: 3\n    bytes_value: \"(\\001\"\n"));
    assert_non_null(strstr(out, "uint64_value: 18446744073709551615"));
    assert_non_null(strstr(out, "int64_value: -7"));
    assert_non_null(strstr(out, "double_value: 0.1"));
    assert_non_null(strstr(out, "description: \"loupe:bool\""));
    assert_non_null(strstr(out, "ref_value: "));
    assert_non_null(strstr(out, "name: \"profile_start_time\""));
    assert_non_null(strstr(out, "uint64_value: 1700000000123456789"));
    assert_non_null(strstr(out, "name: \"_counters_\""));
    /* GPU plane 0: its own metadata ids from 1 */
    assert_non_null(strstr(gpu0, "event_metadata {\n    key: 1\n    value {\n      id: 1\n      "
                                 "name: \"gemm\"\n"));
    free(out);
    unlink(path);
    free(path);
    tu_rmtree(dir);
    free(dir);
    loupe_model_free(m);
}

/* One timeline (src/export/xplane.c, Times): a file with a run's base (loupe_clock_base_unix_ns,
 * 5 s before its origin) and a clock offset of -2 us counts its line timestamps from the base:
 * the main thread's line, 1 us into the trace, is at 5 s - 2 us + 1 us; the host plane says the
 * shift, and the reader takes it off again (the model comes back as it was). A base after the
 * origin (a process that started before it) leaves the times as they are. */
static void test_timeline_base(void **state) {
    (void)state;
    if (system("command -v protoc >/dev/null 2>&1") != 0) {
        skip(); /* tools/setup.sh installs protobuf-compiler */
    }
    static const char *const based[] = {"loupe_clock_base_unix_ns", "1699999995123456789",
                                        "loupe_clock_offset_ns", "-2000"};
    static const char *const later[] = {"loupe_clock_base_unix_ns", "1700000000123456790"};
    char *dir = tu_tmpdir("xplane");
    for (int k = 0; k < 2; k++) {
        loupe_model *m = k == 0 ? full_model_meta(based, 2) : full_model_meta(later, 1);
        assert_int_equal(loupe__model_timeline_shift(m), k == 0 ? 4999998000u : 0u);
        loupe_model_free(written_and_read(m));
        char *path = write_file(m, dir, "b.xplane.pb");
        char cmd[8192];
        snprintf(cmd, sizeof cmd,
                 "protoc --decode=tensorflow.profiler.XSpace -I %s/proto %s/proto/xplane.proto "
                 "< %s",
                 LOUPE_SOURCE_DIR, LOUPE_SOURCE_DIR, path);
        char *out = NULL;
        assert_int_equal(tu_run(cmd, &out), 0);
        const char *line = k == 0 ? "lines {\n    id: 100\n    name: \"main\"\n    "
                                    "timestamp_ns: 4999999000\n"
                                  : "lines {\n    id: 100\n    name: \"main\"\n    "
                                    "timestamp_ns: 1000\n";
        assert_non_null(strstr(out, line));
        const char *stat = strstr(out, "name: \"loupe_timeline_shift_ns\"");
        assert_true(k == 0 ? stat != NULL : stat == NULL);
        if (k == 0) {
            assert_non_null(strstr(out, "uint64_value: 4999998000\n"));
        }
        free(out);
        unlink(path);
        free(path);
        loupe_model_free(m);
    }
    tu_rmtree(dir);
    free(dir);
    /* a shift larger than a line's timestamp: refused, not wrapped */
    loupe_model *m = full_model_meta(based, 2);
    size_t n;
    char *bytes = to_mem(m, &n);
    /* the stat's value 4999998000 as a varint, made larger by one in its top byte */
    static const unsigned char v[] = {0xB0, 0xD4, 0x97, 0xD0, 0x12};
    size_t at = SIZE_MAX;
    for (size_t i = 0; i + sizeof v <= n; i++) {
        if (memcmp(bytes + i, v, sizeof v) == 0) {
            at = i;
        }
    }
    assert_true(at != SIZE_MAX);
    bytes[at + 4] = 0x13; /* + 2^28 ns: after the main line's timestamp */
    loupe_model *r = NULL;
    assert_int_equal(read_bytes(bytes, n, &r), LOUPE_EFORMAT);
    assert_non_null(strstr(loupe_last_error(), "line timestamp_ns before the file's "
                                               "loupe_timeline_shift_ns"));
    free(bytes);
    loupe_model_free(m);
}

/* An XSpace from its text form (protoc --encode with proto/xplane.proto), read back. */
static loupe_model *read_text_xspace(const char *dir, const char *name, const char *text) {
    char txt[4200], pb[4200], cmd[13000];
    snprintf(txt, sizeof txt, "%s/%s.txt", dir, name);
    snprintf(pb, sizeof pb, "%s/%s.xplane.pb", dir, name);
    tu_write_file(txt, text);
    snprintf(cmd, sizeof cmd,
             "protoc --encode=tensorflow.profiler.XSpace -I %s/proto %s/proto/xplane.proto < %s "
             "> %s",
             LOUPE_SOURCE_DIR, LOUPE_SOURCE_DIR, txt, pb);
    assert_int_equal(tu_run(cmd, NULL), 0);
    loupe_model *m = NULL;
    if (loupe_trace_read(pb, &m) != 0) {
        fail_msg("%s: %s", pb, loupe_last_error());
    }
    return m;
}

/* The flow and step conventions the reader maps: an older loupe file's loupe_flow_out /
 * loupe_flow_in; XProf's _pt/_p/_ct/_c with one producer and two consumers (a flow to each),
 * a consumer of another type apart; _r = 1 beside step_num
 * dropped (a step), _r without step_num and _r = 2 kept as arguments. */
static void test_flow_conventions(void **state) {
    (void)state;
    if (system("command -v protoc >/dev/null 2>&1") != 0) {
        skip(); /* tools/setup.sh installs protobuf-compiler */
    }
    char *dir = tu_tmpdir("xplane-conv");
    loupe_model *m = read_text_xspace(
        dir, "old",
        "planes { name: \"/host:CPU\"\n"
        "  lines { id: 5 name: \"a\" timestamp_ns: 100 events { metadata_id: 1 offset_ps: 0 "
        "duration_ps: 5000 stats { metadata_id: 2 uint64_value: 7 } } }\n"
        "  lines { id: 6 name: \"b\" timestamp_ns: 200 events { metadata_id: 1 offset_ps: 0 "
        "duration_ps: 5000 stats { metadata_id: 3 uint64_value: 7 } } }\n"
        "  event_metadata { key: 1 value { id: 1 name: \"z\" } }\n"
        "  stat_metadata { key: 1 value { id: 1 name: \"loupe_version\" } }\n"
        "  stat_metadata { key: 2 value { id: 2 name: \"loupe_flow_out\" } }\n"
        "  stat_metadata { key: 3 value { id: 3 name: \"loupe_flow_in\" } }\n"
        "  stats { metadata_id: 1 str_value: \"0.3.0\" } }\n");
    assert_int_equal(m->flow_count, 1);
    assert_int_equal(m->flows[0].id, 7);
    assert_int_equal(m->threads[m->flows[0].from_thread].tid, 5);
    assert_int_equal(m->threads[m->flows[0].to_thread].tid, 6);
    assert_int_equal(tu_nargs(&m->threads[0], 0), 0);
    loupe_model_free(m);
    m = read_text_xspace(
        dir, "xprof",
        "planes { name: \"/host:CPU\"\n"
        "  lines { id: 1 name: \"p\" timestamp_ns: 0\n"
        "    events { metadata_id: 1 offset_ps: 0 duration_ps: 9000000 stats { metadata_id: 1 "
        "int64_value: 1 } stats { metadata_id: 2 int64_value: 4 } stats { metadata_id: 3 "
        "int64_value: 0 } stats { metadata_id: 4 int64_value: 42 } }\n"
        "    events { metadata_id: 2 offset_ps: 1000 stats { metadata_id: 1 int64_value: 1 } }\n"
        "    events { metadata_id: 2 offset_ps: 2000 stats { metadata_id: 1 int64_value: 2 } "
        "stats { metadata_id: 2 int64_value: 5 } } }\n"
        "  lines { id: 2 name: \"c\" timestamp_ns: 0\n"
        "    events { metadata_id: 3 offset_ps: 10000000 duration_ps: 1000 stats { metadata_id: "
        "5 int64_value: 0 } stats { metadata_id: 6 int64_value: 42 } }\n"
        "    events { metadata_id: 3 offset_ps: 20000000 duration_ps: 1000 stats { metadata_id: "
        "5 int64_value: 0 } stats { metadata_id: 6 int64_value: 42 } }\n"
        "    events { metadata_id: 3 offset_ps: 30000000 duration_ps: 1000 stats { metadata_id: "
        "5 int64_value: 15 } stats { metadata_id: 6 int64_value: 42 } } }\n"
        "  event_metadata { key: 1 value { id: 1 name: \"train\" } }\n"
        "  event_metadata { key: 2 value { id: 2 name: \"r\" } }\n"
        "  event_metadata { key: 3 value { id: 3 name: \"take\" } }\n"
        "  stat_metadata { key: 1 value { id: 1 name: \"_r\" } }\n"
        "  stat_metadata { key: 2 value { id: 2 name: \"step_num\" } }\n"
        "  stat_metadata { key: 3 value { id: 3 name: \"_pt\" } }\n"
        "  stat_metadata { key: 4 value { id: 4 name: \"_p\" } }\n"
        "  stat_metadata { key: 5 value { id: 5 name: \"_ct\" } }\n"
        "  stat_metadata { key: 6 value { id: 6 name: \"_c\" } } }\n");
    assert_int_equal(m->thread_count, 2);
    const loupe_model_thread *p = &m->threads[0];
    assert_int_equal(p->tid, 1);
    assert_int_equal(p->slice_count, 3);
    /* the step: step_num only */
    assert_string_equal(p->slices[0].name, "train");
    assert_int_equal(tu_nargs(p, 0), 1);
    assert_string_equal(tu_args(p, 0)[0].key, "step_num");
    assert_int_equal(tu_args(p, 0)[0].v.i, 4);
    /* _r without step_num, and _r = 2 beside it: arguments */
    assert_int_equal(tu_nargs(p, 1), 1);
    assert_string_equal(tu_args(p, 1)[0].key, "_r");
    assert_int_equal(tu_nargs(p, 2), 2);
    assert_int_equal(tu_args(p, 2)[0].v.i, 2);
    /* one producer (type 0, id 42), consumers of type 0 twice and of type 15 once: two flows
     * from the step; the type-15 consumer has no producer */
    assert_int_equal(m->flow_count, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(m->flows[i].id, 42);
        assert_int_equal(m->flows[i].from_thread, 0);
        assert_int_equal(m->flows[i].from_slice, 0);
        assert_int_equal(m->flows[i].to_thread, 1);
        assert_int_equal(m->flows[i].to_slice, i);
    }
    loupe_model_free(m);
    tu_rmtree(dir);
    free(dir);
}

/* The 2 GiB protobuf limit (lowered here): an error before any byte, never a short file. */
static void test_size_limit(void **state) {
    (void)state;
    loupe_model *m = full_model();
    uint64_t old = loupe__xplane_limit;
    loupe__xplane_limit = 100;
    loupe__sink s;
    loupe__sink_open_mem(&s);
    int r = loupe__write_xplane(m, &s);
    assert_int_equal(r, LOUPE_EUNSUPPORTED);
    assert_non_null(strstr(loupe_last_error(), "protobuf messages must be under 2 GiB"));
    assert_int_equal(s.bytes, 0);
    loupe__sink_close(&s);
    free(s.mem);
    /* through loupe_trace_write: no file, the error says why */
    char *dir = tu_tmpdir("xplane-limit");
    char path[4200];
    snprintf(path, sizeof path, "%s/big.xplane.pb", dir);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), LOUPE_EUNSUPPORTED);
    assert_int_not_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/big.xplane.pb.tmp", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    /* through the run directory: the limit error, no .xplane.pb, but the JSON is written */
    loupe_trace_result res = {.size = sizeof res};
    assert_int_equal(
        loupe__write_run(m, dir, "run", LOUPE_FORMAT_CHROME_JSON | LOUPE_FORMAT_XPLANE, &res),
        LOUPE_EUNSUPPORTED);
    assert_non_null(strstr(loupe_last_error(), "protobuf messages must be under 2 GiB"));
    assert_non_null(strstr(loupe_last_error(), "the other files of"));
    assert_null(loupe_trace_result_path(&res, LOUPE_FORMAT_XPLANE));
    assert_int_equal(access(loupe_trace_result_path(&res, LOUPE_FORMAT_CHROME_JSON), F_OK), 0);
    snprintf(path, sizeof path, "%s/plugins/profile/run/big.xplane.pb.tmp", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    /* XPlane alone: nothing can be written, no run directory is left */
    loupe_trace_result_free(&res);
    assert_int_equal(loupe__write_run(m, dir, "run2", LOUPE_FORMAT_XPLANE, &res),
                     LOUPE_EUNSUPPORTED);
    snprintf(path, sizeof path, "%s/plugins/profile/run2", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    loupe__xplane_limit = old;
    tu_rmtree(dir);
    free(dir);
    loupe_model_free(m);
    loupe_trace_result_free(&res);
}

static void expect_format(const void *p, size_t n, const char *detail) {
    loupe_model *r = (loupe_model *)1;
    assert_int_equal(read_bytes(p, n, &r), LOUPE_EFORMAT);
    assert_null(r);
    if (strstr(loupe_last_error(), detail) == NULL) {
        fail_msg("detail '%s' lacks '%s'", loupe_last_error(), detail);
    }
}

/* A file cut inside its last plane: the planes before it are read (the same model as the file
 * cut just before that plane), with a warning naming the cut; nothing of the cut plane is (its
 * names come after its lines). */
static void test_cut_planes(void **state) {
    (void)state;
    loupe_model *m = full_model();
    size_t n;
    char *bytes = to_mem(m, &n);
    loupe__pbr p = {(const uint8_t *)bytes, (const uint8_t *)bytes + n, (const uint8_t *)bytes};
    loupe__pbf f = {0};
    size_t off, planes = 0, last = 0, last_len = 0, last_head = 0, before = 0;
    const char *what;
    while (loupe__pbr_next(&p, &f, &off, &what) == 1) {
        if (f.field == 1) {
            before = planes++;
            last = f.offset;
            last_len = f.len;
            last_head = (size_t)(f.data - (const uint8_t *)bytes) - f.offset;
        }
    }
    assert_true(planes >= 2); /* the host plane and the GPU devices' */
    const size_t cut = last + last_head + last_len / 2;
    loupe_model *whole = NULL, *r = NULL;
    assert_int_equal(read_bytes(bytes, last, &whole), 0);
    assert_int_equal(whole->warning_count, 0);
    if (read_bytes(bytes, cut, &r) != 0) {
        fail_msg("%s", loupe_last_error());
    }
    char want[600];
    snprintf(want, sizeof want,
             "t.xplane.pb: XPlane: the file is cut short: it ends at byte %zu, inside the XPlane "
             "at offset %zu (%zu bytes announced, %zu there): read the file before offset %zu "
             "(whole planes: %zu); the rest of the file is lost (an XPlane's event and stat names "
             "come after its lines, so nothing of a cut plane is read)",
             cut, last, last_len, last_len / 2, last, before);
    assert_int_equal(r->warning_count, 1);
    assert_string_equal(r->warnings[0], want);
    tu_models_equal(whole, r);
    loupe_model_free(whole);
    loupe_model_free(r);
    free(bytes);
    loupe_model_free(m);
    /* the fuzz seed: a plane {name "/host:CPU"}, then 6 bytes of a second plane's 18 */
    FILE *sf = fopen(LOUPE_SOURCE_DIR "/fuzz/corpus/xplane/cut_plane", "rb");
    assert_non_null(sf);
    char seed[64];
    size_t sn = fread(seed, 1, sizeof seed, sf);
    fclose(sf);
    assert_int_equal(sn, 19);
    r = NULL;
    if (read_bytes(seed, sn, &r) != 0) {
        fail_msg("%s", loupe_last_error());
    }
    assert_int_equal(r->warning_count, 1);
    assert_string_equal(r->warnings[0],
                        "t.xplane.pb: XPlane: the file is cut short: it ends at byte 19, inside "
                        "the XPlane at offset 13 (16 bytes announced, 4 there): read the file "
                        "before offset 13 (whole planes: 1); the rest of the file is lost (an "
                        "XPlane's event and stat names come after its lines, so nothing of a cut "
                        "plane is read)");
    loupe_model_free(r);
}

static void test_hostile_input(void **state) {
    (void)state;
    static const unsigned char varint11[] = {0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                             0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    expect_format(varint11, sizeof varint11, "offset 1: varint longer than 64 bits");
    static const unsigned char huge[] = {0x0A, 0x80, 0x80, 0x80, 0x80, 0x04, 0x08, 0x01};
    /* a 1 GiB plane claim with 2 bytes there: a file cut inside its first plane */
    expect_format(huge, sizeof huge,
                  "t.xplane.pb: XPlane: the file is cut short: it ends at byte 8, inside the "
                  "XPlane at offset 0 (1073741824 bytes announced, 2 there), before any whole "
                  "plane: nothing to read (an XPlane's event and stat names come after its "
                  "lines)");
    static const unsigned char group[] = {0x0B, 0x0C};
    expect_format(group, sizeof group, "offset 0: wire type 3 (field 1) is not supported");
    static const unsigned char cut[] = {0x0A, 0x02, 0x08, 0x80};
    expect_format(cut, sizeof cut, "offset 4: varint cut short by the end of its message");
    /* an event whose metadata id is undefined: plane{lines{events{metadata_id 5}}} */
    static const unsigned char undef[] = {0x0A, 0x11, 0x12, 0x09, '/',  'h',  'o',  's',  't', ':',
                                          'C',  'P',  'U',  0x1A, 0x04, 0x22, 0x02, 0x08, 0x05};
    expect_format(undef, sizeof undef, "offset 17: an event's metadata_id is not in the plane");
    /* every prefix and every one-byte change of a real file: a model or LOUPE_EFORMAT */
    loupe_model *m = full_model();
    size_t n;
    char *bytes = to_mem(m, &n);
    size_t errors = 0;
    for (size_t k = 0; k < n; k++) {
        loupe_model *r = NULL;
        int rc = read_bytes(bytes, k, &r);
        assert_true(rc == 0 || rc == LOUPE_EFORMAT);
        errors += rc != 0;
        loupe_model_free(r);
    }
    assert_true(errors > n / 2);
    for (size_t k = 0; k < n; k += 3) {
        char saved = bytes[k];
        bytes[k] = (char)(saved ^ 0xA5);
        loupe_model *r = NULL;
        int rc = read_bytes(bytes, n, &r);
        assert_true(rc == 0 || rc == LOUPE_EFORMAT);
        loupe_model_free(r);
        bytes[k] = saved;
    }
    free(bytes);
    loupe_model_free(m);
}

/* Content detection: XPlane by its structure, JSON (also starting with a newline) stays JSON,
 * gzipped XPlane reads too. */
static void test_detect(void **state) {
    (void)state;
    assert_false(loupe__xplane_sniff("{\"traceEvents\":[]}", 18));
    assert_false(loupe__xplane_sniff("\n{\"traceEvents\":[]}", 19));
    assert_false(loupe__xplane_sniff("[", 1));
    assert_false(loupe__xplane_sniff("", 0));
    /* a Perfetto trace: packet { timestamp 8: ... } */
    assert_false(loupe__xplane_sniff("\x0a\x02\x40\x01", 4));
    char *dir = tu_tmpdir("xplane-detect");
    char path[4200];
    snprintf(path, sizeof path, "%s/nl.json", dir);
    tu_write_file(path, "\n{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"ts\":1,\"dur\":2,"
                        "\"pid\":1,\"tid\":1}]}");
    loupe_model *r = NULL;
    assert_int_equal(loupe_trace_read(path, &r), 0);
    assert_int_equal(r->threads[0].slice_count, 1);
    loupe_model_free(r);
    loupe_model *m = full_model();
    snprintf(path, sizeof path, "%s/h.xplane.pb", dir);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), 0);
    assert_int_equal(loupe_trace_read(path, &r), 0);
    tu_models_equal(m, r);
    loupe_model_free(r);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "gzip -k %s", path);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/h.xplane.pb.gz", dir);
    assert_int_equal(loupe_trace_read(path, &r), 0);
    tu_models_equal(m, r);
    loupe_model_free(r);
    loupe_model_free(m);
    tu_rmtree(dir);
    free(dir);
}

/* Invalid UTF-8 becomes U+FFFD (protobuf strings must be UTF-8; Python's parser checks). */
static void test_invalid_utf8(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    loupe_model *m = loupe__mb_model(mb);
    m->host = loupe__mb_str(mb, "h");
    m->process_name = loupe__mb_str(mb, "p");
    m->clock = loupe__mb_str(mb, "monotonic");
    size_t t = loupe__mb_thread(mb, 1);
    loupe__mb_thread_name(mb, t,
                          "a\xff"
                          "b\xc0\xaf"
                          "c\xed\xa0\x80");
    size_t s = loupe__mb_slice(mb, t);
    *loupe__mb_slice_at(mb, t, s) =
        (loupe_slice){.start_ns = 5, .dur_ns = 1, .name = loupe__mb_str(mb, "x\xe2\x82")};
    m = loupe__mb_finish(mb);
    size_t n;
    char *bytes = to_mem(m, &n);
    loupe_model *r = NULL;
    assert_int_equal(read_bytes(bytes, n, &r), 0);
    assert_string_equal(r->threads[0].name, "a\xef\xbf\xbd"
                                            "b\xef\xbf\xbd\xef\xbf\xbd"
                                            "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    assert_string_equal(r->threads[0].slices[0].name, "x\xef\xbf\xbd\xef\xbf\xbd");
    loupe_model_free(r);
    free(bytes);
    loupe_model_free(m);
}

/* A real session: the default run directory holds <host>.xplane.pb next to the JSON, and both
 * read back to the same zones. */
static void test_session_run_dir(void **state) {
    (void)state;
    char *dir = tu_tmpdir("xplane-session");
    loupe_trace_options o = {.log_dir = dir};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int i = 0; i < 3; i++) {
        LOUPE_STEP("step", i);
        LOUPE_ZONE("inner");
    }
    loupe_trace_result res = {.size = sizeof res};
    assert_int_equal(loupe_stop_trace(&res), 0);
    assert_non_null(strstr(loupe_trace_result_path(&res, LOUPE_FORMAT_XPLANE), ".xplane.pb"));
    assert_non_null(
        strstr(loupe_trace_result_path(&res, LOUPE_FORMAT_CHROME_JSON), ".trace.json.gz"));
    loupe_model *a = NULL, *b = NULL;
    assert_int_equal(loupe_trace_read(loupe_trace_result_path(&res, LOUPE_FORMAT_CHROME_JSON), &a),
                     0);
    assert_int_equal(loupe_trace_read(loupe_trace_result_path(&res, LOUPE_FORMAT_XPLANE), &b), 0);
    assert_int_equal(b->thread_count, a->thread_count);
    assert_int_equal(b->threads[0].slice_count, 6);
    assert_int_equal(a->threads[0].slice_count, 6);
    for (size_t i = 0; i < 6; i++) {
        assert_string_equal(a->threads[0].slices[i].name, b->threads[0].slices[i].name);
        assert_int_equal(a->threads[0].slices[i].start_ns, b->threads[0].slices[i].start_ns);
        assert_int_equal(a->threads[0].slices[i].dur_ns, b->threads[0].slices[i].dur_ns);
    }
    assert_string_equal(tu_args(&b->threads[0], 0)[0].key, "step_num");
    assert_int_equal(tu_args(&b->threads[0], 2)[0].v.i, 1);
    assert_true(a->origin_unix_ns == b->origin_unix_ns);
    assert_int_equal(a->duration_ns, b->duration_ns);
    loupe_model_free(a);
    loupe_model_free(b);
    tu_rmtree(dir);
    free(dir);
    loupe_trace_result_free(&res);
}

/* A file jax.profiler wrote (jax 0.10.2 on CPU: 3 StepTraceAnnotation("train", step_num=i)
 * around TraceAnnotation("matmul") around a jitted matmul; tests/golden/jax_cpu.xplane.pb): the
 * same zones as jax's own vm.trace.json.gz of that run (7 threads, 3330 slices, 80.767 ms). */
static void test_jax_file(void **state) {
    (void)state;
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(LOUPE_SOURCE_DIR "/tests/golden/jax_cpu.xplane.pb", &m), 0);
    /* 7 threads and one overlap sibling (model.h): on the python thread, jax's Python tracer
     * ends profiler.py:385 __init__ at 60450 ns, 451 ns after the first "train" step began
     * (59999 ns): that step and everything in it go to "python (overlap 1)" */
    assert_int_equal(m->thread_count, 8);
    assert_string_equal(m->threads[7].name, "python (overlap 1)");
    assert_int_equal(m->threads[7].sibling_of, 0);
    assert_string_equal(m->threads[0].name, "python");
    size_t slices = 0, trains = 0;
    int64_t steps = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        slices += m->threads[t].slice_count;
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            const loupe_slice *s = &m->threads[t].slices[i];
            size_t s_nargs;
            const loupe_arg *s_args = loupe_slice_args(&m->threads[t], i, &s_nargs);
            if (strcmp(s->name, "train") != 0) {
                continue;
            }
            trains++;
            /* a step: its step_num, without jax's root marker _r (the writer adds it back) */
            assert_int_equal(s_nargs, 1);
            for (uint32_t a = 0; a < s_nargs; a++) {
                if (strcmp(s_args[a].key, "step_num") == 0) {
                    steps += s_args[a].v.i + 1;
                }
            }
        }
    }
    assert_int_equal(slices, 3330);
    assert_int_equal(trains, 3);
    assert_int_equal(steps, 1 + 2 + 3);         /* step_num 0, 1, 2 */
    assert_int_equal(m->duration_ns, 80766665); /* first event start to last event end */
    /* the wall clock of its first event: Task Environment's profile_start_time
     * (1795965579402069502) plus that event's 9465 ns after it */
    assert_true(m->origin_unix_ns == 1795965579402069502ull + 9465u);
    /* jax's producer/consumer stats as flows: 17 producers, 15 consumers, 15 pairs (each
     * consumer with its producer; counted from the file with jax's ProfileData); the first:
     * the python thread's ThreadpoolListener::Record (_pt 15, _p 1) to the compiler pool's
     * StartRegion (_ct 15, _c 1), 18127 ns later; type 15 in the id's top byte */
    assert_int_equal(m->flow_count, 15);
    const loupe_flow *f1 = NULL;
    for (size_t i = 0; i < m->flow_count; i++) {
        f1 = m->flows[i].id == (1ull ^ (15ull << 56)) ? &m->flows[i] : f1;
    }
    assert_non_null(f1);
    const loupe_model_thread *ft = &m->threads[f1->from_thread], *tt = &m->threads[f1->to_thread];
    assert_string_equal(ft->name, "python (overlap 1)"); /* inside the first step */
    assert_string_equal(tt->name, "tf_PjRtCompilerThreadPool/-6173318116384337041");
    assert_string_equal(ft->slices[f1->from_slice].name, "ThreadpoolListener::Record");
    assert_string_equal(tt->slices[f1->to_slice].name, "ThreadpoolListener::StartRegion");
    assert_int_equal(tt->slices[f1->to_slice].start_ns - ft->slices[f1->from_slice].start_ns,
                     18127);
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            size_t s_nargs;
            const loupe_arg *s_args = loupe_slice_args(&m->threads[t], i, &s_nargs);
            for (uint32_t a = 0; a < s_nargs; a++) {
                assert_true(strcmp(s_args[a].key, "_p") != 0 && strcmp(s_args[a].key, "_c") != 0);
            }
        }
    }
    /* written again by loupe: the same steps and flows come back */
    size_t n = 0;
    char *bytes = to_mem(m, &n);
    loupe_model *r = NULL;
    assert_int_equal(read_bytes(bytes, n, &r), 0);
    assert_int_equal(r->flow_count, 15);
    size_t steps2 = 0;
    for (size_t t = 0; t < r->thread_count; t++) {
        for (size_t i = 0; i < r->threads[t].slice_count; i++) {
            const loupe_slice *s = &r->threads[t].slices[i];
            size_t s_nargs;
            const loupe_arg *s_args = loupe_slice_args(&r->threads[t], i, &s_nargs);
            steps2 += strcmp(s->name, "train") == 0 && s_nargs == 1 &&
                      strcmp(s_args[0].key, "step_num") == 0;
        }
    }
    assert_int_equal(steps2, 3);
    loupe_model_free(r);
    free(bytes);
    loupe_model_free(m);
}

/* ---- LOUPE_XPLANE_DUMP=DIR: files for tests/xprof_validate.sh ----
 * For each case (the hand-built model, a recorded session with two threads, 3 steps of 10, 20
 * and 30 ms with flows to a worker, built and recorded with LOUPE_STEP and nanosleep):
 * <case>.xplane.pb and <case>.expect.json, what XProf and jax
 * must show: {"tracks": [{"plane", "tid", "name", "shown" (the line's name: the model's, or the
 * one the writer gives an unnamed track), "slices": [[name, start_ns, dur_ns]], "instants":
 * [[name, ts_ns]]}], "counters": [[name, ts_ns, value]], "steps": [[name, step_num, start_ns,
 * dur_ns]] (host slices with an integer step_num), "flows": [[from_tid, from_name, from_start_ns,
 * to_tid, to_name, to_start_ns, host (both ends on host threads)]]}. */

/* 3 steps "train" 0..2 of exactly 10, 20 and 30 ms on an unnamed main thread (tid = pid: named
 * by the process name), each with a "produce" child whose flow ends in a "consume" zone of the
 * thread "worker" during the same step. */
static loupe_model *steps_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 77;
    m->process_name = loupe__mb_str(mb, "steps_demo");
    m->host = loupe__mb_str(mb, "host-s");
    m->clock = loupe__mb_str(mb, "monotonic");
    m->origin_unix_ns = 1700000000000000000ull;
    m->duration_ns = 70000000;
    size_t t0 = loupe__mb_thread(mb, 77);
    size_t t1 = loupe__mb_thread(mb, 78);
    loupe__mb_thread_name(mb, t1, "worker");
    uint64_t start = 1000000;
    for (int i = 0; i < 3; i++) {
        uint64_t dur = (uint64_t)(i + 1) * UINT64_C(10000000);
        size_t st = loupe__mb_slice(mb, t0);
        *loupe__mb_slice_at(mb, t0, st) =
            (loupe_slice){.start_ns = start, .dur_ns = dur, .name = loupe__mb_str(mb, "train")};
        loupe_arg sa[] = {{.key = "step_num", .type = LOUPE_ARG_INT64, .v.i = i}};
        assert_int_equal(loupe__mb_slice_args(mb, t0, st, sa, 1), 0);
        size_t pr = loupe__mb_slice(mb, t0);
        *loupe__mb_slice_at(mb, t0, pr) = (loupe_slice){.start_ns = start + 1000,
                                                        .dur_ns = 2000000,
                                                        .name = loupe__mb_str(mb, "produce"),
                                                        .depth = 1};
        size_t co = loupe__mb_slice(mb, t1);
        *loupe__mb_slice_at(mb, t1, co) = (loupe_slice){
            .start_ns = start + 3000000, .dur_ns = 4000000, .name = loupe__mb_str(mb, "consume")};
        assert_int_equal(loupe__mb_flow(mb, (uint64_t)i + 1, t0, pr, t1, co), 0);
        start += dur;
    }
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static void *worker(void *arg) {
    (void)arg;
    loupe_set_thread_name("worker \"w\"");
    for (int i = 0; i < 50; i++) {
        LOUPE_ZONE("work;item #k=v#");
        LOUPE_INSTANT("tick");
    }
    return NULL;
}

static loupe_model *session_model(const char *dir) {
    loupe_trace_options o = {.log_dir = dir};
    assert_int_equal(loupe_start_trace(&o), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, worker, NULL), 0);
    for (int i = 0; i < 20; i++) {
        LOUPE_STEP("train", i);
        LOUPE_COUNTER_I64("queue", i);
        LOUPE_COUNTER_F64("loss", 1.0 / (i + 1));
        LOUPE_ZONE("load");
        /* steps of 200 us or more: without it they were 40-60 ns, and XProf's get_step_trace
         * left out one or two of them in 4 of 5 runs (a step db of sub-100 ns steps) */
        struct timespec t = {0, 200000};
        nanosleep(&t, NULL);
    }
    pthread_join(th, NULL);
    loupe_trace_result res = {.size = sizeof res};
    assert_int_equal(loupe_stop_trace(&res), 0);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(loupe_trace_result_path(&res, LOUPE_FORMAT_XPLANE), &m), 0);
    loupe_trace_result_free(&res);
    return m;
}

/* A recorded session: 3 LOUPE_STEP("train", i) steps sleeping 10, 20 and 30 ms, each producing a
 * flow that a worker thread consumes after the steps. */
static pthread_barrier_t steps_bar;

static void *consumer(void *arg) {
    (void)arg;
    loupe_set_thread_name("consumer");
    pthread_barrier_wait(&steps_bar);
    for (int i = 0; i < 3; i++) {
        LOUPE_ZONE("consume");
        LOUPE_FLOW_IN(100 + i);
    }
    return NULL;
}

static loupe_model *recorded_steps_model(const char *dir) {
    loupe_trace_options o = {.log_dir = dir};
    assert_int_equal(loupe_start_trace(&o), 0);
    pthread_barrier_init(&steps_bar, NULL, 2);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, consumer, NULL), 0);
    for (int i = 0; i < 3; i++) {
        LOUPE_STEP("train", i);
        {
            LOUPE_ZONE("produce");
            LOUPE_FLOW_OUT(100 + i);
        }
        struct timespec t = {0, 10000000L * (i + 1)};
        nanosleep(&t, NULL);
    }
    pthread_barrier_wait(&steps_bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&steps_bar);
    loupe_trace_result res = {.size = sizeof res};
    assert_int_equal(loupe_stop_trace(&res), 0);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(loupe_trace_result_path(&res, LOUPE_FORMAT_XPLANE), &m), 0);
    loupe_trace_result_free(&res);
    /* the steps last at least what they slept */
    size_t steps = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            const loupe_slice *sl = &m->threads[t].slices[i];
            if (strcmp(sl->name, "train") == 0) {
                assert_true(sl->dur_ns >= 10000000u * (steps + 1));
                steps++;
            }
        }
    }
    assert_int_equal(steps, 3);
    assert_int_equal(m->flow_count, 3);
    return m;
}

/* CPU samples on a named main thread and an unnamed worker: stacks main;work;helper and
 * main;work, one sample with no stack, two samples 300 us apart (the event is cut there), a
 * zone on each thread. */
static loupe_model *samples_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 90;
    m->process_name = loupe__mb_str(mb, "sampled");
    m->host = loupe__mb_str(mb, "host-p");
    m->clock = loupe__mb_str(mb, "monotonic");
    m->origin_unix_ns = 1700000000000000000ull;
    m->duration_ns = 10000000;
    m->sample_period_ns = 1000000;
    size_t t0 = loupe__mb_thread(mb, 90), t1 = loupe__mb_thread(mb, 93);
    loupe__mb_thread_name(mb, t0, "main");
    size_t z = loupe__mb_slice(mb, t0);
    *loupe__mb_slice_at(mb, t0, z) =
        (loupe_slice){.start_ns = 500000, .dur_ns = 8000000, .name = loupe__mb_str(mb, "run")};
    z = loupe__mb_slice(mb, t1);
    *loupe__mb_slice_at(mb, t1, z) =
        (loupe_slice){.start_ns = 1500000, .dur_ns = 3000000, .name = loupe__mb_str(mb, "job")};
    loupe_frame fm = {"main", "app.c", 10, 0, "/usr/bin/app", 0x1000};
    loupe_frame fw = {"work", "app.c", 20, 0, "/usr/bin/app", 0x1100};
    loupe_frame fh = {"helper", "util.h", 3, 1, "/usr/bin/app", 0x1108};
    uint32_t f[] = {loupe__mb_frame(mb, &fh), loupe__mb_frame(mb, &fw), loupe__mb_frame(mb, &fm)};
    uint32_t deep = loupe__mb_stack_of(mb, f, 3), mid = loupe__mb_stack_of(mb, f + 1, 2);
    assert_int_equal(loupe__mb_sample(mb, t0, 1000000, deep, 0), 0);
    assert_int_equal(loupe__mb_sample(mb, t0, 2000000, deep, 0), 0);
    assert_int_equal(loupe__mb_sample(mb, t0, 2300000, mid, 1), 0);
    assert_int_equal(loupe__mb_sample(mb, t0, 4000000, UINT32_MAX, 1), 0);
    assert_int_equal(loupe__mb_sample(mb, t1, 2000000, mid, UINT32_MAX), 0);
    assert_int_equal(loupe__mb_sample(mb, t1, 3000000, deep, 2), 0);
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

/* The sample lines XProf must show (src/export/xplane.c): per sampled thread, in thread order,
 * a line "CPU samples <tid>[ (<name>)]" with id max tid + 2 + k; per sample an event named by
 * its innermost function ("[no stack]" without one), lasting the period or up to the thread's
 * next sample; and (sample_stacks) the stack stat of each. */
static void dump_sample_tracks(const loupe_model *m, json_t *tracks, json_t *stacks) {
    uint64_t max_id = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        max_id = m->threads[t].tid > max_id ? m->threads[t].tid : max_id;
    }
    uint64_t line = max_id + 2;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        json_t *sl = json_array();
        uint64_t prev = 0;
        json_t *last = NULL;
        for (size_t i = 0; i < m->sample_count; i++) {
            const loupe_sample *s = &m->samples[i];
            if (s->thread != t) {
                continue;
            }
            if (last != NULL && s->ts_ns - prev < m->sample_period_ns) {
                json_array_set_new(last, 2, json_integer((json_int_t)(s->ts_ns - prev)));
            }
            const char *fn = "[no stack]";
            char stack[256] = "";
            if (s->stack != UINT32_MAX) {
                fn = m->frames[m->stack_nodes[s->stack].frame].function;
                const char *chain[16];
                size_t n = 0;
                for (uint32_t k = s->stack; k != UINT32_MAX && n < 16;
                     k = m->stack_nodes[k].parent) {
                    chain[n++] = m->frames[m->stack_nodes[k].frame].function;
                }
                size_t len = 0;
                for (size_t j = n; j-- > 0;) {
                    len += (size_t)snprintf(stack + len, sizeof stack - len, "%s%s", chain[j],
                                            j > 0 ? ";" : "");
                }
                json_array_append_new(stacks, json_pack("[sIs]", fn, (json_int_t)s->ts_ns, stack));
            }
            last = json_pack("[sII]", fn, (json_int_t)s->ts_ns, (json_int_t)m->sample_period_ns);
            json_array_append_new(sl, last);
            prev = s->ts_ns;
        }
        if (json_array_size(sl) == 0) {
            json_decref(sl);
            continue;
        }
        char shown[160];
        snprintf(shown, sizeof shown, th->name[0] ? "CPU samples %llu (%s)" : "CPU samples %llu",
                 (unsigned long long)th->tid, th->name);
        json_array_append_new(tracks, json_pack("{sssIsssssoso}", "plane", "/host:CPU", "tid",
                                                (json_int_t)line, "name", shown, "shown", shown,
                                                "slices", sl, "instants", json_array()));
        line++;
    }
}

static void dump_case(const char *dir, const char *name, const loupe_model *m) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.xplane.pb", dir, name);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), 0);
    json_t *tracks = json_array(), *counters = json_array(), *steps = json_array(),
           *flows = json_array();
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        char plane[32];
        if (th->kind == LOUPE_TRACK_GPU) {
            snprintf(plane, sizeof plane, "/device:GPU:%u", th->device);
        } else {
            snprintf(plane, sizeof plane, "/host:CPU");
        }
        json_t *sl = json_array(), *in = json_array();
        for (size_t i = 0; i < th->slice_count; i++) {
            json_array_append_new(sl, json_pack("[sII]", th->slices[i].name,
                                                (json_int_t)th->slices[i].start_ns,
                                                (json_int_t)th->slices[i].dur_ns));
        }
        for (size_t i = 0; i < th->instant_count; i++) {
            json_array_append_new(
                in, json_pack("[sI]", th->instants[i].name, (json_int_t)th->instants[i].ts_ns));
        }
        char shown[64];
        if (th->name[0]) {
            snprintf(shown, sizeof shown, "%s", th->name);
        } else if (th->kind != LOUPE_TRACK_GPU && th->tid == m->pid && m->process_name[0]) {
            snprintf(shown, sizeof shown, "%s", m->process_name);
        } else {
            snprintf(shown, sizeof shown, "%s %llu",
                     th->kind == LOUPE_TRACK_GPU ? "track" : "thread", (unsigned long long)th->tid);
        }
        json_array_append_new(tracks, json_pack("{sssIsssssoso}", "plane", plane, "tid",
                                                (json_int_t)th->tid, "name", th->name, "shown",
                                                shown, "slices", sl, "instants", in));
        for (size_t i = 0; i < th->slice_count && th->kind != LOUPE_TRACK_GPU; i++) {
            const loupe_slice *s = &th->slices[i];
            size_t s_nargs;
            const loupe_arg *s_args = loupe_slice_args(th, i, &s_nargs);
            for (uint32_t a = 0; a < s_nargs; a++) {
                if (strcmp(s_args[a].key, "step_num") == 0 && s_args[a].type == LOUPE_ARG_INT64) {
                    json_array_append_new(
                        steps, json_pack("[sIII]", s->name, (json_int_t)s_args[a].v.i,
                                         (json_int_t)s->start_ns, (json_int_t)s->dur_ns));
                }
            }
        }
    }
    for (size_t i = 0; i < m->flow_count; i++) {
        const loupe_flow *f = &m->flows[i];
        const loupe_model_thread *a = &m->threads[f->from_thread], *b = &m->threads[f->to_thread];
        int host = a->kind != LOUPE_TRACK_GPU && b->kind != LOUPE_TRACK_GPU;
        json_array_append_new(flows, json_pack("[IsIIsIb]", (json_int_t)a->tid,
                                               a->slices[f->from_slice].name,
                                               (json_int_t)a->slices[f->from_slice].start_ns,
                                               (json_int_t)b->tid, b->slices[f->to_slice].name,
                                               (json_int_t)b->slices[f->to_slice].start_ns, host));
    }
    for (size_t i = 0; i < m->counter_count; i++) {
        const loupe_counter_sample *c = &m->counters[i];
        json_array_append_new(counters, json_pack("[sIf]", c->name, (json_int_t)c->ts_ns,
                                                  c->is_double ? c->d : (double)c->i));
    }
    json_t *stacks = json_array();
    dump_sample_tracks(m, tracks, stacks);
    json_t *root = json_pack("{sososososo}", "tracks", tracks, "counters", counters, "steps", steps,
                             "flows", flows, "sample_stacks", stacks);
    assert_non_null(root);
    snprintf(path, sizeof path, "%s/%s.expect.json", dir, name);
    assert_int_equal(json_dump_file(root, path, JSON_ENSURE_ASCII), 0);
    json_decref(root);
}

static void add_slice(loupe__mb *mb, size_t t, uint64_t start, uint64_t dur, const char *name) {
    size_t i = loupe__mb_slice(mb, t);
    assert_true(i != SIZE_MAX);
    *loupe__mb_slice_at(mb, t, i) =
        (loupe_slice){.start_ns = start, .dur_ns = dur, .name = loupe__mb_str(mb, name)};
}

/* Two processes (pid 100 "app", pid 200 "helper") with a thread tid 7 each, an async track with
 * two overlapping slices and a counter per process; the lines XProf must show are written out
 * by hand: process 0's thread keeps line id 7, the other process's tid 7 is line 8 named
 * "helper (200) / worker", the async lanes lines 9 and 10. */
static void dump_processes(const char *dir) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 100;
    m->process_name = loupe__mb_str(mb, "app");
    m->host = loupe__mb_str(mb, "host-p");
    m->clock = loupe__mb_str(mb, "monotonic");
    m->origin_unix_ns = 1700000000000000000ull;
    m->duration_ns = 10000;
    assert_int_equal(loupe__mb_process(mb, 100), 0);
    size_t p1 = loupe__mb_process(mb, 200);
    loupe__mb_process_at(mb, p1)->name = loupe__mb_str(mb, "helper");
    size_t a = loupe__mb_thread_in(mb, 0, 7), b = loupe__mb_thread_in(mb, p1, 7);
    loupe__mb_thread_name(mb, a, "main");
    loupe__mb_thread_name(mb, b, "worker");
    add_slice(mb, a, 1000, 500, "load");
    add_slice(mb, b, 1200, 300, "compute");
    size_t q = loupe__mb_thread_add(mb, 77);
    loupe__mb_thread_at(mb, q)->kind = LOUPE_TRACK_ASYNC;
    loupe__mb_thread_name(mb, q, "requests");
    add_slice(mb, q, 2000, 3000, "req 1");
    add_slice(mb, q, 2500, 1000, "req 2");
    loupe_counter_sample c = {.ts_ns = 1500, .name = "queue", .i = 3};
    assert_int_equal(loupe__mb_counter(mb, &c), 0);
    c = (loupe_counter_sample){
        .ts_ns = 1600, .name = "heap", .is_double = 1, .d = 2.5, .process = p1};
    assert_int_equal(loupe__mb_counter(mb, &c), 0);
    m = loupe__mb_finish(mb);
    assert_non_null(m);
    char path[4200];
    snprintf(path, sizeof path, "%s/processes.xplane.pb", dir);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), 0);
    loupe_model_free(m);
    json_t *root = json_pack(
        "{s[{sssIsssss[[sII]]s[]}{sssIsssss[[sII]]s[]}{sssIsssss[[sII]]s[]}"
        "{sssIsssss[[sII]]s[]}]s[[sIf][sIf]]s[]s[]s[]}",
        "tracks", "plane", "/host:CPU", "tid", (json_int_t)7, "name", "main", "shown", "main",
        "slices", "load", (json_int_t)1000, (json_int_t)500, "instants", "plane", "/host:CPU",
        "tid", (json_int_t)8, "name", "worker", "shown", "helper (200) / worker", "slices",
        "compute", (json_int_t)1200, (json_int_t)300, "instants", "plane", "/host:CPU", "tid",
        (json_int_t)9, "name", "requests", "shown", "requests (lane 0)", "slices", "req 1",
        (json_int_t)2000, (json_int_t)3000, "instants", "plane", "/host:CPU", "tid", (json_int_t)10,
        "name", "requests", "shown", "requests (lane 1)", "slices", "req 2", (json_int_t)2500,
        (json_int_t)1000, "instants", "counters", "queue", (json_int_t)1500, 3.0, "heap",
        (json_int_t)1600, 2.5, "steps", "flows", "sample_stacks");
    assert_non_null(root);
    snprintf(path, sizeof path, "%s/processes.expect.json", dir);
    assert_int_equal(json_dump_file(root, path, JSON_ENSURE_ASCII), 0);
    json_decref(root);
}

/* split.xplane.pb, split.part2.xplane.pb, split.part3.xplane.pb: split_model() over a limit of
 * 40% of its size (6000 zones "step" and "work" in all, for xprof_check.py --parts). */
static void dump_split(const char *dir) {
    loupe_model *m = split_model(9);
    size_t whole;
    free(to_mem(m, &whole));
    char lim[32], path[4200];
    snprintf(lim, sizeof lim, "%zu", whole * 4 / 10);
    snprintf(path, sizeof path, "%s/split.xplane.pb", dir);
    setenv("LOUPE_TEST_XPLANE_PART_BYTES", lim, 1);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_XPLANE), 0);
    unsetenv("LOUPE_TEST_XPLANE_PART_BYTES");
    snprintf(path, sizeof path, "%s/split.part3.xplane.pb", dir);
    assert_true(file_size(path) > 0);
    snprintf(path, sizeof path, "%s/split.part4.xplane.pb", dir);
    assert_int_equal(file_size(path), -1);
    loupe_model_free(m);
}

static void dump(void **state) {
    (void)state;
    const char *dir = getenv("LOUPE_XPLANE_DUMP");
    loupe_model *m = full_model();
    dump_case(dir, "full", m);
    loupe_model_free(m);
    char *logs = tu_tmpdir("xplane-dump");
    m = session_model(logs);
    dump_case(dir, "session", m);
    loupe_model_free(m);
    m = steps_model();
    dump_case(dir, "steps", m);
    loupe_model_free(m);
    m = recorded_steps_model(logs);
    dump_case(dir, "recorded_steps", m);
    loupe_model_free(m);
    m = samples_model();
    dump_case(dir, "samples", m);
    loupe_model_free(m);
    dump_processes(dir);
    dump_split(dir);
    m = gpu_model();
    char gp[4200];
    snprintf(gp, sizeof gp, "%s/gpu_processes.xplane.pb", dir);
    assert_int_equal(loupe_trace_write(m, gp, LOUPE_FILE_XPLANE), 0);
    loupe_model_free(m);
    tu_rmtree(logs);
    free(logs);
}

int main(void) {
    if (getenv("LOUPE_XPLANE_DUMP") != NULL) {
        const struct CMUnitTest d[] = {cmocka_unit_test(dump)};
        return cmocka_run_group_tests(d, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_protoc_decode),
        cmocka_unit_test(test_timeline_base),    cmocka_unit_test(test_size_limit),
        cmocka_unit_test(test_hostile_input),    cmocka_unit_test(test_cut_planes),
        cmocka_unit_test(test_detect),           cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_session_run_dir),  cmocka_unit_test(test_jax_file),
        cmocka_unit_test(test_flow_conventions), cmocka_unit_test(test_gpu_processes),
        cmocka_unit_test(test_split_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
