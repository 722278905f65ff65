/* test_samples_io.c: CPU samples through every format loupe writes and reads back (Perfetto
 * protobuf, Chrome JSON, gzipped Chrome JSON, XPlane): the exact frames (function, file, line,
 * inlined, module, offset), stacks, timestamps, threads and CPUs, the period, the losses and
 * the off-CPU intervals; the sample-weighted folded stacks; and pprof's profile.proto. The model is
 * built with the builder (what the sampler fills at a stop). */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include "base/b64.h"
#include "base/pb.h"
#include "model/builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* Two threads, a zone on each, 6 samples over 4 stacks (one sample with no stack), an inlined
 * frame, a kernel frame, a frame with no module, and off-CPU intervals on the main thread. */
static loupe_model *sampled_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *mm = loupe__mb_model(mb);
    mm->pid = 4242;
    mm->process_name = loupe__mb_str(mb, "app");
    mm->host = loupe__mb_str(mb, "box");
    mm->clock = loupe__mb_str(mb, "monotonic");
    mm->origin_unix_ns = 1700000000000000000ull;
    mm->duration_ns = 10000000;
    mm->sample_period_ns = 1000000;
    mm->samples_lost = 3;
    size_t t0 = loupe__mb_thread(mb, 4242), t1 = loupe__mb_thread(mb, 4243);
    loupe__mb_thread_name(mb, t0, "main");
    loupe__mb_thread_name(mb, t1, "worker");
    size_t s = loupe__mb_slice(mb, t0);
    loupe_slice *sl = loupe__mb_slice_at(mb, t0, s);
    sl->start_ns = 0;
    sl->dur_ns = 9000000;
    sl->name = loupe__mb_str(mb, "run");
    s = loupe__mb_slice(mb, t1);
    sl = loupe__mb_slice_at(mb, t1, s);
    sl->start_ns = 1000000;
    sl->dur_ns = 5000000;
    sl->name = loupe__mb_str(mb, "job");
    loupe_frame fm = {"main", "app.c", 10, 0, "/usr/bin/app", 0x1000};
    loupe_frame fw = {"work", "app.c", 20, 0, "/usr/bin/app", 0x1100};
    loupe_frame fh = {"helper", "util.h", 3, 1, "/usr/bin/app", 0x1108};
    loupe_frame fl = {"memcpy", "", 0, 0, "/lib/x86_64-linux-gnu/libc.so.6", 0x9abc0};
    loupe_frame fk = {"do_syscall_64", "", 0, 0, "[kernel]", 0};
    loupe_frame fj = {"jit 0x7f00", "", 0, 0, "", 0};
    uint32_t im = loupe__mb_frame(mb, &fm), iw = loupe__mb_frame(mb, &fw);
    uint32_t ih = loupe__mb_frame(mb, &fh), il = loupe__mb_frame(mb, &fl);
    uint32_t ik = loupe__mb_frame(mb, &fk), ij = loupe__mb_frame(mb, &fj);
    uint32_t a[] = {ih, iw, im}, b[] = {iw, im}, c[] = {ik, il, iw, im}, d[] = {ij};
    uint32_t sa = loupe__mb_stack_of(mb, a, 3), sb = loupe__mb_stack_of(mb, b, 2);
    uint32_t sc = loupe__mb_stack_of(mb, c, 4), sd = loupe__mb_stack_of(mb, d, 1);
    assert_int_equal(loupe__mb_sample(mb, t0, 1000000, sa, 0), 0);
    assert_int_equal(loupe__mb_sample(mb, t0, 2000000, sa, 0), 0);
    assert_int_equal(loupe__mb_sample(mb, t0, 3000000, sb, 1), 0);
    assert_int_equal(loupe__mb_sample(mb, t1, 3000000, sc, 2), 0);
    assert_int_equal(loupe__mb_sample(mb, t1, 4000000, sd, UINT32_MAX), 0);
    assert_int_equal(loupe__mb_sample(mb, t1, 5000000, UINT32_MAX, 3), 0);
    /* one interval of each kind; the preempted one touches the waiting one and stays apart */
    assert_int_equal(loupe__mb_off_cpu_kind(mb, t0, 5000000, 1500000, LOUPE_OFF_CPU_WAITING), 0);
    assert_int_equal(loupe__mb_off_cpu_kind(mb, t0, 6500000, 500, LOUPE_OFF_CPU_PREEMPTED), 0);
    assert_int_equal(loupe__mb_off_cpu(mb, t0, 7000000, 250), 0);
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    return m;
}

/* One line per sample: "ts tid cpu | frame;frame;... (outermost first)" with every frame field. */
static char *describe(const loupe_model *m) {
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = 0;
    for (size_t i = 0; i < m->sample_count; i++) {
        const loupe_sample *s = &m->samples[i];
        assert_true(s->thread < m->thread_count);
        len += (size_t)snprintf(
            out + len, cap - len, "%llu %llu %d |", (unsigned long long)s->ts_ns,
            (unsigned long long)m->threads[s->thread].tid, s->cpu == UINT32_MAX ? -1 : (int)s->cpu);
        const char *chain[64];
        size_t n = 0;
        for (uint32_t k = s->stack; k != UINT32_MAX; k = m->stack_nodes[k].parent) {
            assert_true(k < m->stack_node_count && n < 64);
            const loupe_frame *f = &m->frames[m->stack_nodes[k].frame];
            static char buf[64][256];
            snprintf(buf[n], sizeof buf[n], "%s@%s:%u:%u:%s+%llx", f->function, f->file, f->line,
                     f->inlined, f->module, (unsigned long long)f->module_offset);
            chain[n] = buf[n];
            n++;
        }
        for (size_t j = n; j-- > 0;) {
            len += (size_t)snprintf(out + len, cap - len, " %s", chain[j]);
        }
        len += (size_t)snprintf(out + len, cap - len, "\n");
        assert_true(len < cap);
    }
    return out;
}

static const char expected_samples[] =
    "1000000 4242 0 | main@app.c:10:0:/usr/bin/app+1000 work@app.c:20:0:/usr/bin/app+1100 "
    "helper@util.h:3:1:/usr/bin/app+1108\n"
    "2000000 4242 0 | main@app.c:10:0:/usr/bin/app+1000 work@app.c:20:0:/usr/bin/app+1100 "
    "helper@util.h:3:1:/usr/bin/app+1108\n"
    "3000000 4242 1 | main@app.c:10:0:/usr/bin/app+1000 work@app.c:20:0:/usr/bin/app+1100\n"
    "3000000 4243 2 | main@app.c:10:0:/usr/bin/app+1000 work@app.c:20:0:/usr/bin/app+1100 "
    "memcpy@:0:0:/lib/x86_64-linux-gnu/libc.so.6+9abc0 do_syscall_64@:0:0:[kernel]+0\n"
    "4000000 4243 -1 | jit 0x7f00@:0:0:+0\n"
    "5000000 4243 3 |\n";

static void check_samples(const loupe_model *m) {
    char *d = describe(m);
    assert_string_equal(d, expected_samples);
    free(d);
    assert_int_equal(m->sample_period_ns, 1000000);
    assert_int_equal(m->samples_lost, 3);
    size_t with_off = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->off_cpu_count == 0) {
            continue;
        }
        with_off++;
        assert_int_equal(th->tid, 4242);
        assert_int_equal(th->off_cpu_count, 3);
        assert_int_equal(th->off_cpu[0].start_ns, 5000000);
        assert_int_equal(th->off_cpu[0].dur_ns, 1500000);
        assert_int_equal(th->off_cpu[0].kind, LOUPE_OFF_CPU_WAITING);
        assert_int_equal(th->off_cpu[1].start_ns, 6500000);
        assert_int_equal(th->off_cpu[1].dur_ns, 500);
        assert_int_equal(th->off_cpu[1].kind, LOUPE_OFF_CPU_PREEMPTED);
        assert_int_equal(th->off_cpu[2].start_ns, 7000000);
        assert_int_equal(th->off_cpu[2].dur_ns, 250);
        assert_int_equal(th->off_cpu[2].kind, LOUPE_OFF_CPU_UNKNOWN);
    }
    assert_int_equal(with_off, 1);
}

static void round_trip(const char *file, loupe_file_format format) {
    loupe_model *m = sampled_model();
    check_samples(m); /* the model itself */
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tu_dir, file);
    int rc = loupe_trace_write(m, path, format);
    if (rc != 0) {
        fail_msg("loupe_trace_write(%s): %s", path, loupe_last_error());
    }
    loupe_model *back = tu_read_back(path);
    check_samples(back);
    assert_int_equal(back->warning_count, 0);
    tu_models_equal(m, back); /* and the rest of the model is unchanged */
    loupe_model_free(back);
    loupe_model_free(m);
}

static void test_perfetto_proto(void **state) {
    (void)state;
    round_trip("s.pftrace", LOUPE_FILE_PERFETTO_PROTO);
}

static void test_chrome_json(void **state) {
    (void)state;
    round_trip("s.json", LOUPE_FILE_CHROME_JSON);
    round_trip("s.json.gz", LOUPE_FILE_CHROME_JSON);
    round_trip("perfetto_trace.json.gz", LOUPE_FILE_PERFETTO_JSON);
}

/* XPlane: the "CPU samples <tid>" lines, the frames as event metadata, the stack tree and the
 * off-CPU intervals as plane stats (src/export/xplane.c). */
static void test_xplane(void **state) {
    (void)state;
    round_trip("s.xplane.pb", LOUPE_FILE_XPLANE);
}

/* ---- flame graphs weighted by samples (loupe_write_options.flame_weight) ---- */

static const char expected_folded_samples[] = "main;main;work 1\n"
                                              "main;main;work;helper 2\n"
                                              "worker;main;work;memcpy;do_syscall_64 1\n"
                                              "worker;jit 0x7f00 1\n"
                                              "worker;[no stack] 1\n";

static const char expected_folded_time[] = "main;run 9000000\n"
                                           "worker;job 5000000\n";

static char *write_read(const loupe_model *m, const char *file, loupe_file_format format,
                        loupe_flame_weight w) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tu_dir, file);
    loupe_write_options o = {.flame_weight = w};
    int rc = loupe_trace_write_opts(m, path, format, &o);
    if (rc != 0) {
        fail_msg("loupe_trace_write_opts(%s): %s", path, loupe_last_error());
    }
    char *text = tu_read_file(path, NULL);
    assert_non_null(text);
    return text;
}

/* The folded stacks of the samples, exact: one root per thread, frames outermost first, the
 * count of samples whose innermost frame ends the line; time by default when there are zones
 * (and with TIME); samples by default when there are only samples. */
static void test_folded_samples(void **state) {
    (void)state;
    loupe_model *m = sampled_model();
    char *t = write_read(m, "s.folded", LOUPE_FILE_FOLDED, LOUPE_FLAME_WEIGHT_SAMPLES);
    assert_string_equal(t, expected_folded_samples);
    free(t);
    t = write_read(m, "t.folded", LOUPE_FILE_FOLDED, LOUPE_FLAME_WEIGHT_AUTO);
    assert_string_equal(t, expected_folded_time);
    free(t);
    t = write_read(m, "t2.folded", LOUPE_FILE_FOLDED, LOUPE_FLAME_WEIGHT_TIME);
    assert_string_equal(t, expected_folded_time);
    free(t);
    /* the same model without its zones: samples by default */
    loupe_model nz = *m;
    loupe_model_thread th[2];
    assert_int_equal(m->thread_count, 2);
    memcpy(th, m->threads, sizeof th);
    th[0].slice_count = th[1].slice_count = 0;
    nz.threads = th;
    t = write_read(&nz, "a.folded", LOUPE_FILE_FOLDED, LOUPE_FLAME_WEIGHT_AUTO);
    assert_string_equal(t, expected_folded_samples);
    free(t);
    /* a bad weight: refused, no file */
    char path[512];
    snprintf(path, sizeof path, "%s/bad.folded", tu_dir);
    loupe_write_options bad = {.flame_weight = (loupe_flame_weight)7};
    assert_int_equal(loupe_trace_write_opts(m, path, LOUPE_FILE_FOLDED, &bad), LOUPE_EINVALID);
    assert_string_equal(loupe_last_error(), "loupe_trace_write_opts: flame_weight 7 is none of "
                                            "LOUPE_FLAME_WEIGHT_AUTO, _TIME and _SAMPLES");
    assert_int_equal(access(path, F_OK), -1);
    /* NULL options: loupe_trace_write() */
    assert_int_equal(loupe_trace_write_opts(m, path, LOUPE_FILE_FOLDED, NULL), 0);
    t = tu_read_file(path, NULL);
    assert_string_equal(t, expected_folded_time);
    free(t);
    loupe_model_free(m);
}

/* The SVG of the samples: the title counts the samples, each box's tooltip its samples and
 * share; 11 boxes (2 roots, 4 + 5 frames). */
static void test_svg_samples(void **state) {
    (void)state;
    loupe_model *m = sampled_model();
    char *t = write_read(m, "s.svg", LOUPE_FILE_SVG, LOUPE_FLAME_WEIGHT_SAMPLES);
    assert_non_null(strstr(t, ">Flame graph (6 CPU samples)</text>"));
    assert_non_null(strstr(t, "<title>helper (2 samples, 33.33%)</title>"));
    assert_non_null(strstr(t, "<title>main (3 samples, 50.00%)</title>"));
    assert_non_null(strstr(t, "<title>[no stack] (1 sample, 16.67%)</title>"));
    size_t boxes = 0;
    for (const char *p = t; (p = strstr(p, "<g><title>")) != NULL; p++) {
        boxes++;
    }
    assert_int_equal(boxes, 11);
    free(t);
    loupe_model_free(m);
}

/* `loupe convert --weight samples`, also with --merge-threads; the usage errors. */
static void test_convert_weight(void **state) {
    (void)state;
    loupe_model *m = sampled_model();
    char in[512], out[512], cmd[2048];
    snprintf(in, sizeof in, "%s/in.pftrace", tu_dir);
    snprintf(out, sizeof out, "%s/out.folded", tu_dir);
    assert_int_equal(loupe_trace_write(m, in, LOUPE_FILE_PERFETTO_PROTO), 0);
    loupe_model_free(m);
    char *o = NULL;
    snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s' --weight samples 2>/dev/null", tu_cli(),
             in, out);
    assert_int_equal(tu_run(cmd, &o), 0);
    free(o);
    char *t = tu_read_file(out, NULL);
    assert_string_equal(t, expected_folded_samples);
    free(t);
    snprintf(cmd, sizeof cmd,
             "'%s' convert '%s' -o '%s' --weight=samples --merge-threads 2>/dev/null", tu_cli(), in,
             out);
    assert_int_equal(tu_run(cmd, &o), 0);
    free(o);
    t = tu_read_file(out, NULL);
    assert_string_equal(t, "all threads;main;work 1\n"
                           "all threads;main;work;helper 2\n"
                           "all threads;main;work;memcpy;do_syscall_64 1\n"
                           "all threads;jit 0x7f00 1\n"
                           "all threads;[no stack] 1\n");
    free(t);
    snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s' --weight cycles 2>&1", tu_cli(), in, out);
    assert_int_equal(tu_run(cmd, &o), 2);
    assert_string_equal(o, "loupe convert: unknown weight 'cycles' (time or samples)\n"
                           "Run 'loupe convert --help' for usage.\n");
    free(o);
    snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s/x.json' --weight time 2>&1", tu_cli(), in,
             tu_dir);
    assert_int_equal(tu_run(cmd, &o), 2);
    assert_string_equal(o, "loupe convert: --weight is for folded stacks and SVG flame graphs, "
                           "not json\n"
                           "Run 'loupe convert --help' for usage.\n");
    free(o);
}

/* ---- the Perfetto reader: a sample's thread by (pid, tid) ---- */

static void thread_packet(loupe__pb *b, uint64_t uuid, uint64_t pid, uint64_t tid,
                          const char *name) {
    size_t pk = loupe__pb_begin(b, 1);  /* Trace.packet */
    loupe__pb_uint(b, 10, 1);           /* trusted_packet_sequence_id */
    size_t td = loupe__pb_begin(b, 60); /* track_descriptor */
    loupe__pb_uint(b, 1, uuid);
    size_t th = loupe__pb_begin(b, 4); /* thread: ThreadDescriptor */
    loupe__pb_uint(b, 1, pid);
    loupe__pb_uint(b, 2, tid);
    loupe__pb_str(b, 5, name);
    loupe__pb_end(b, th);
    loupe__pb_end(b, td);
    loupe__pb_end(b, pk);
}

static void sample_packet(loupe__pb *b, uint64_t ts, uint64_t pid, uint64_t tid, uint64_t cpu) {
    size_t pk = loupe__pb_begin(b, 1);
    loupe__pb_uint(b, 8, ts); /* timestamp */
    loupe__pb_uint(b, 10, 1);
    size_t ps = loupe__pb_begin(b, 66); /* perf_sample: cpu 1, pid 2, tid 3 */
    loupe__pb_uint(b, 1, cpu);
    loupe__pb_uint(b, 2, pid);
    loupe__pb_uint(b, 3, tid);
    loupe__pb_end(b, ps);
    loupe__pb_end(b, pk);
}

/* Two processes' threads share tid 5 (tid namespaces, or two hosts): each PerfSample goes to
 * the thread of its own pid, never to the first thread with the tid. */
static void test_perfetto_pid_tid(void **state) {
    (void)state;
    loupe__pb b = {0};
    thread_packet(&b, 11, 100, 5, "in 100");
    thread_packet(&b, 12, 200, 5, "in 200");
    sample_packet(&b, 1000, 200, 5, 1);
    sample_packet(&b, 2000, 100, 5, 2);
    sample_packet(&b, 3000, 200, 5, 3);
    assert_false(b.oom);
    char path[512];
    snprintf(path, sizeof path, "%s/pidtid.pftrace", tu_dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.len, f), b.len);
    assert_int_equal(fclose(f), 0);
    loupe__pb_free(&b);
    loupe_model *m = tu_read_back(path);
    assert_int_equal(m->sample_count, 3);
    const char *want[3] = {"in 200", "in 100", "in 200"};
    for (size_t i = 0; i < 3; i++) {
        const loupe_sample *sm = &m->samples[i];
        assert_int_equal(sm->cpu, i + 1);
        assert_int_equal(m->threads[sm->thread].tid, 5);
        assert_string_equal(m->threads[sm->thread].name, want[i]);
    }
    loupe_model_free(m);
}

/* ---- the XPlane reader's sample part on hostile input ---- */

static void smeta(loupe__pb *b, uint64_t id, const char *name) {
    size_t e = loupe__pb_begin(b, 5); /* stat_metadata map entry */
    loupe__pb_uint(b, 1, id);
    size_t v = loupe__pb_begin(b, 2);
    loupe__pb_uint(b, 1, id);
    loupe__pb_str(b, 2, name);
    loupe__pb_end(b, v);
    loupe__pb_end(b, e);
}

static void xstat(loupe__pb *b, unsigned field, uint64_t mid, unsigned type, uint64_t v) {
    size_t st = loupe__pb_begin(b, field);
    loupe__pb_uint(b, 1, mid);
    loupe__pb_uint(b, type, v);
    loupe__pb_end(b, st);
}

/* An XSpace of loupe's shape: frame 0 "f", loupe_stack_nodes = nodes, a line "CPU samples 7"
 * with a sample of tid 7 and stack 0, one with stack 9, one without a tid. *nodes_at: the
 * file offset of the nodes' bytes. */
static void hostile_xspace_as(const char *path, const unsigned char *nodes, size_t n,
                              size_t *nodes_at, int type) {
    loupe__pb b = {0};
    size_t pl = loupe__pb_begin(&b, 1);
    loupe__pb_uint(&b, 1, 0);
    loupe__pb_str(&b, 2, "/host:CPU");
    size_t ln = loupe__pb_begin(&b, 3);
    loupe__pb_uint(&b, 1, 9);
    loupe__pb_str(&b, 2, "CPU samples 7");
    loupe__pb_uint(&b, 3, 1000);
    for (int i = 0; i < 3; i++) {
        size_t ev = loupe__pb_begin(&b, 4);
        loupe__pb_uint(&b, 1, 1);
        loupe__pb_uint(&b, 2, (uint64_t)i * 1000000);
        if (i < 2) {
            xstat(&b, 4, 3, 3, 7);
        }
        xstat(&b, 4, 4, 3, i == 1 ? 9 : 0);
        loupe__pb_end(&b, ev);
    }
    loupe__pb_end(&b, ln);
    size_t em = loupe__pb_begin(&b, 4);
    loupe__pb_uint(&b, 1, 1);
    size_t emv = loupe__pb_begin(&b, 2);
    loupe__pb_uint(&b, 1, 1);
    loupe__pb_str(&b, 2, "f");
    xstat(&b, 5, 5, 4, 0);
    loupe__pb_end(&b, emv);
    loupe__pb_end(&b, em);
    smeta(&b, 1, "loupe_version");
    smeta(&b, 2, "loupe_stack_nodes");
    smeta(&b, 3, "tid");
    smeta(&b, 4, "loupe_stack");
    smeta(&b, 5, "loupe_frame");
    xstat(&b, 6, 1, 3, 1);
    size_t st = loupe__pb_begin(&b, 6);
    loupe__pb_uint(&b, 1, 2);
    loupe__pb_bytes(&b, (uint32_t)type, nodes, n);
    loupe__pb_end(&b, st);
    loupe__pb_end(&b, pl);
    *nodes_at = b.len - n; /* the last bytes of the file (the ends only patch lengths before) */
    assert_false(b.oom);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.len, f), b.len);
    assert_int_equal(fclose(f), 0);
    loupe__pb_free(&b);
}

/* loupe_stack_nodes as 0.4 wrote it: a bytes_value (6). */
static void hostile_xspace(const char *path, const unsigned char *nodes, size_t n,
                           size_t *nodes_at) {
    hostile_xspace_as(path, nodes, n, nodes_at, 6);
}

/* The model of hostile_xspace_as()'s file with its one good stack node {0, 0}: node 0 is "f",
 * the first sample has it, and the two warnings are the sample without a tid and stack 9. */
static void assert_one_good_node(const char *path) {
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(path, &m), 0);
    assert_int_equal(m->stack_node_count, 1);
    assert_int_equal(m->samples[0].stack, 0);
    assert_string_equal(m->frames[m->stack_nodes[0].frame].function, "f");
    assert_int_equal(m->warning_count, 2);
    loupe_model_free(m);
}

/* RFC 4648 §10's test vectors, every length of 0..300 bytes of every value round-tripped, and
 * the malformed inputs refused. */
static void test_b64(void **state) {
    (void)state;
    static const char *const vec[][2] = {{"", ""},
                                         {"f", "Zg=="},
                                         {"fo", "Zm8="},
                                         {"foo", "Zm9v"},
                                         {"foob", "Zm9vYg=="},
                                         {"fooba", "Zm9vYmE="},
                                         {"foobar", "Zm9vYmFy"}};
    char out[512];
    unsigned char back[512];
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        size_t n = strlen(vec[i][0]);
        assert_int_equal(loupe__b64_len(n), strlen(vec[i][1]));
        loupe__b64_encode(out, (const unsigned char *)vec[i][0], n);
        out[loupe__b64_len(n)] = 0;
        assert_string_equal(out, vec[i][1]);
    }
    unsigned char in[300];
    for (size_t n = 0; n <= sizeof in; n++) {
        for (size_t k = 0; k < n; k++) {
            in[k] = (unsigned char)(k * 151 + n * 7);
        }
        loupe__b64_encode(out, in, n);
        size_t len = loupe__b64_len(n);
        assert_int_equal(loupe__b64_decode(back, (const unsigned char *)out, len), n);
        assert_memory_equal(back, in, n);
    }
    static const char *const bad[] = {"Zg=", "Z===", "Zg==Zg==", "Zh==", "Zm9=", "Zm-v", "Zm9v\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(loupe__b64_decode(back, (const unsigned char *)bad[i], strlen(bad[i])),
                         (size_t)-1);
    }
}

/* loupe_stack_nodes as 0.5 writes it: a str_value (5) of the bytes' base64, read as the bytes
 * are; text that is not base64 is LOUPE_EFORMAT at the stat. */
static void test_xplane_samples_base64(void **state) {
    (void)state;
    char path[512], want[1024];
    snprintf(path, sizeof path, "%s/b64.xplane.pb", tu_dir);
    size_t at;
    hostile_xspace_as(path, (const unsigned char *)"AAA=", 4, &at, 5); /* {0, 0} */
    assert_one_good_node(path);
    hostile_xspace_as(path, (const unsigned char *)"AA=A", 4, &at, 5);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(path, &m), LOUPE_EFORMAT);
    assert_null(m);
    /* the stat's offset: its metadata_id field (tag, id 2) and the value's tag and length
     * come before the text */
    snprintf(want, sizeof want, "%s: XPlane: offset %zu: loupe_stack_nodes: not base64", path,
             at - 4);
    assert_string_equal(loupe_last_error(), want);
}

/* Stack nodes that name nothing, a stack index past them, a sample without a tid: warned,
 * exactly, and never guessed; loupe_stack_nodes cut inside a varint: LOUPE_EFORMAT at its
 * offset. */
static void test_xplane_hostile_samples(void **state) {
    (void)state;
    char path[512], want[1024];
    snprintf(path, sizeof path, "%s/hostile.xplane.pb", tu_dir);
    size_t at;
    const unsigned char bad_parent[] = {5, 0}; /* node 0: parent 4, which is not there */
    hostile_xspace(path, bad_parent, sizeof bad_parent, &at);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(path, &m), 0);
    assert_int_equal(m->sample_count, 2);
    assert_int_equal(m->samples[0].stack, UINT32_MAX);
    assert_int_equal(m->samples[1].stack, UINT32_MAX);
    assert_int_equal(m->samples[1].ts_ns, 1000 + 1000);
    assert_int_equal(m->threads[m->samples[0].thread].tid, 7);
    assert_int_equal(m->warning_count, 3);
    snprintf(want, sizeof want,
             "%s: XPlane: stack node 0 names parent 4, which is not there; the samples with "
             "this stack have none",
             path);
    assert_string_equal(m->warnings[0], want);
    snprintf(want, sizeof want, "%s: XPlane: 1 samples without a tid stat dropped", path);
    assert_string_equal(m->warnings[1], want);
    snprintf(want, sizeof want,
             "%s: XPlane: 2 samples name a stack node that loupe_stack_nodes does not hold or "
             "could not resolve; kept without a stack",
             path);
    assert_string_equal(m->warnings[2], want);
    loupe_model_free(m);
    const unsigned char good[] = {0, 0};
    hostile_xspace(path, good, sizeof good, &at);
    assert_one_good_node(path);
    const unsigned char cut[] = {0, 0x80};
    hostile_xspace(path, cut, sizeof cut, &at);
    m = NULL;
    assert_int_equal(loupe_trace_read(path, &m), LOUPE_EFORMAT);
    assert_null(m);
    snprintf(want, sizeof want,
             "%s: XPlane: offset %zu: loupe_stack_nodes: a varint cut short or too long", path, at);
    assert_string_equal(loupe_last_error(), want);
}

/* Writes the sampled model to a .pftrace and runs `loupe summary ARGS` on it; the output. */
static char *summary_of(const char *args) {
    loupe_model *m = sampled_model();
    char path[512], cmd[1024];
    snprintf(path, sizeof path, "%s/sum.pftrace", tu_dir);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_PERFETTO_PROTO), 0);
    loupe_model_free(m);
    snprintf(cmd, sizeof cmd, "'%s' summary '%s' %s 2>&1", tu_cli(), path, args);
    char *out = NULL;
    int rc = tu_run(cmd, &out);
    if (rc != 0) {
        fail_msg("%s: exit %d: %s", cmd, rc, out != NULL ? out : "");
    }
    return out;
}

static const char expected_hot[] =
    "\nhot functions: 6 CPU samples, one per 1.000 ms of CPU time, 3 lost\n"
    "self: samples in the function itself; total: on the stack; % of the samples (the CPU time "
    "sampled)\n"
    "\n"
    "    self    total  self % total %  function\n"
    "       2        2   33.3%   33.3%  helper\n"
    "       1        4   16.7%   66.7%  work\n"
    "       1        1   16.7%   16.7%  [no stack]\n"
    "       1        1   16.7%   16.7%  do_syscall_64\n"
    "       1        1   16.7%   16.7%  jit 0x7f00\n"
    "       0        4    0.0%   66.7%  main\n"
    "       0        1    0.0%   16.7%  memcpy\n";

static const char expected_hot_by_thread[] =
    "\nhot functions: 6 CPU samples, one per 1.000 ms of CPU time, 3 lost\n"
    "self: samples in the function itself; total: on the stack; % of the thread's samples\n"
    "\n"
    "thread 4242 (main): 3 samples\n"
    "    self    total  self % total %  function\n"
    "       2        2   66.7%   66.7%  helper\n"
    "       1        3   33.3%  100.0%  work\n"
    "(1 more function; --top 0 shows all)\n"
    "\n"
    "thread 4243 (worker): 3 samples\n"
    "    self    total  self % total %  function\n"
    "       1        1   33.3%   33.3%  [no stack]\n"
    "       1        1   33.3%   33.3%  do_syscall_64\n"
    "(4 more functions; --top 0 shows all)\n";

/* The hot-functions table after the zones, exact, overall and per thread; and in --json. */
static void test_summary_hot(void **state) {
    (void)state;
    char *out = summary_of("");
    const char *hot = strstr(out, "\nhot functions:");
    assert_non_null(hot);
    assert_string_equal(hot, expected_hot);
    free(out);
    out = summary_of("--by-thread --top 2");
    hot = strstr(out, "\nhot functions:");
    assert_non_null(hot);
    assert_string_equal(hot, expected_hot_by_thread);
    free(out);
    out = summary_of("--json --by-thread --top 1");
    json_error_t err;
    json_t *root = json_loads(out, 0, &err);
    if (root == NULL) {
        fail_msg("summary --json: %s: %s", err.text, out);
    }
    assert_int_equal(json_integer_value(json_object_get(root, "samples")), 6);
    assert_int_equal(json_integer_value(json_object_get(root, "samples_lost")), 3);
    assert_int_equal(json_integer_value(json_object_get(root, "sample_period_ns")), 1000000);
    json_t *hf = json_object_get(root, "hot_functions");
    assert_int_equal(json_array_size(hf), 2); /* the top one of each thread */
    json_t *a = json_array_get(hf, 0), *b = json_array_get(hf, 1);
    assert_string_equal(json_string_value(json_object_get(a, "function")), "helper");
    assert_int_equal(json_integer_value(json_object_get(a, "thread")), 4242);
    assert_string_equal(json_string_value(json_object_get(a, "thread_name")), "main");
    assert_int_equal(json_integer_value(json_object_get(a, "self_samples")), 2);
    assert_int_equal(json_integer_value(json_object_get(a, "total_samples")), 2);
    assert_true(json_real_value(json_object_get(a, "self_percent")) == 200.0 / 3.0);
    assert_string_equal(json_string_value(json_object_get(b, "function")), "[no stack]");
    assert_int_equal(json_integer_value(json_object_get(b, "thread")), 4243);
    assert_true(json_real_value(json_object_get(b, "total_percent")) == 100.0 / 3.0);
    json_decref(root);
    free(out);
}

/* ---- pprof (src/export/pprof.c) ----
 * A decoder of the profile.proto fields the writer uses (formats.md §6), which renders the
 * profile as text: sample types, period, mappings, then each sample's values, labels and
 * locations (a location's lines innermost first, " < " between an inlined call and what it is
 * inlined into, "@module+0xaddress"), then the comments. */

typedef struct pp_loc {
    uint64_t id, mapping, address;
    uint64_t fn[8], line[8];
    size_t nlines;
} pp_loc;

typedef struct pp {
    const char *str[256];
    size_t str_len[256];
    size_t nstr;
    uint64_t fn_id[64], fn_name[64], fn_file[64];
    size_t nfn;
    pp_loc loc[64];
    size_t nloc;
    uint64_t map_id[16], map_file[16], map_limit[16], map_bid[16], map_flags[16];
    size_t nmap;
} pp;

static const char *pp_s(const pp *p, uint64_t i) {
    assert_true(i < p->nstr);
    static char buf[4][256];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%.*s", (int)p->str_len[i], p->str[i]);
    return buf[k];
}

static void pp_field(loupe__pbr *r, loupe__pbf *f) {
    size_t off;
    const char *what;
    assert_int_equal(loupe__pbr_next(r, f, &off, &what), 1);
}

static loupe__pbr pp_sub(const loupe__pbf *f) {
    assert_int_equal(f->wire, PB_LEN);
    return (loupe__pbr){f->data, f->data + f->len, f->data};
}

static const pp_loc *pp_find_loc(const pp *p, uint64_t id) {
    for (size_t i = 0; i < p->nloc; i++) {
        if (p->loc[i].id == id) {
            return &p->loc[i];
        }
    }
    fail_msg("location %llu is not in the profile", (unsigned long long)id);
    return NULL;
}

static const char *pp_fn(const pp *p, uint64_t id, int file) {
    for (size_t i = 0; i < p->nfn; i++) {
        if (p->fn_id[i] == id) {
            return pp_s(p, file ? p->fn_file[i] : p->fn_name[i]);
        }
    }
    fail_msg("function %llu is not in the profile", (unsigned long long)id);
    return NULL;
}

static const char *pp_map_file(const pp *p, uint64_t id) {
    for (size_t i = 0; i < p->nmap; i++) {
        if (p->map_id[i] == id) {
            return pp_s(p, p->map_file[i]);
        }
    }
    return "";
}

/* The profile at path (plain, not gzipped) as text. */
static char *pprof_text(const char *path) {
    size_t n;
    char *bytes = tu_read_file(path, &n);
    assert_non_null(bytes);
    static pp p;
    memset(&p, 0, sizeof p);
    const uint8_t *b = (const uint8_t *)bytes;
    /* pass 1: the tables; pass 2: the samples and the rest, in file order */
    for (int pass = 1; pass <= 2; pass++) {
        loupe__pbr r = {b, b + n, b};
        loupe__pbf f;
        size_t off;
        const char *what;
        while (loupe__pbr_next(&r, &f, &off, &what) == 1) {
            if (pass == 1 && f.field == 6) {
                assert_true(p.nstr < 256);
                p.str[p.nstr] = (const char *)f.data;
                p.str_len[p.nstr++] = f.len;
            } else if (pass == 1 && f.field == 5) {
                loupe__pbr q = pp_sub(&f);
                loupe__pbf g;
                assert_true(p.nfn < 64);
                while (loupe__pbr_next(&q, &g, &off, &what) == 1) {
                    uint64_t *dst = g.field == 1   ? &p.fn_id[p.nfn]
                                    : g.field == 2 ? &p.fn_name[p.nfn]
                                    : g.field == 4 ? &p.fn_file[p.nfn]
                                                   : NULL;
                    if (g.field == 3) {
                        assert_true(g.v == p.fn_name[p.nfn]); /* system_name = name */
                    }
                    if (dst != NULL) {
                        *dst = g.v;
                    }
                }
                p.nfn++;
            } else if (pass == 1 && f.field == 4) {
                loupe__pbr q = pp_sub(&f);
                loupe__pbf g;
                assert_true(p.nloc < 64);
                pp_loc *l = &p.loc[p.nloc++];
                while (loupe__pbr_next(&q, &g, &off, &what) == 1) {
                    if (g.field == 1) {
                        l->id = g.v;
                    } else if (g.field == 2) {
                        l->mapping = g.v;
                    } else if (g.field == 3) {
                        l->address = g.v;
                    } else if (g.field == 4) {
                        loupe__pbr lr = pp_sub(&g);
                        loupe__pbf h;
                        assert_true(l->nlines < 8);
                        while (loupe__pbr_next(&lr, &h, &off, &what) == 1) {
                            if (h.field == 1) {
                                l->fn[l->nlines] = h.v;
                            } else if (h.field == 2) {
                                l->line[l->nlines] = h.v;
                            }
                        }
                        l->nlines++;
                    }
                }
            } else if (pass == 1 && f.field == 3) {
                loupe__pbr q = pp_sub(&f);
                loupe__pbf g;
                assert_true(p.nmap < 16);
                while (loupe__pbr_next(&q, &g, &off, &what) == 1) {
                    if (g.field == 1) {
                        p.map_id[p.nmap] = g.v;
                    } else if (g.field == 3) {
                        p.map_limit[p.nmap] = g.v;
                    } else if (g.field == 5) {
                        p.map_file[p.nmap] = g.v;
                    } else if (g.field == 6) {
                        p.map_bid[p.nmap] = g.v;
                    } else if (g.field >= 7 && g.field <= 10 && g.v != 0) {
                        p.map_flags[p.nmap] |= 1u << (g.field - 7);
                    } else {
                        assert_true(g.v == 0); /* memory_start, file_offset */
                    }
                }
                p.nmap++;
            }
        }
        assert_true(r.p == r.end);
    }
    assert_true(p.nstr > 0 && p.str_len[0] == 0); /* string 0 is "" */
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = 0;
#define PUT(...)                                                                                   \
    (len += (size_t)snprintf(out + len, cap - len, __VA_ARGS__), assert_true(len < cap))
    loupe__pbr r = {b, b + n, b};
    loupe__pbf f;
    size_t off;
    const char *what;
    while (loupe__pbr_next(&r, &f, &off, &what) == 1) {
        if (f.field == 1 || f.field == 11) {
            loupe__pbr q = pp_sub(&f);
            loupe__pbf t, u;
            pp_field(&q, &t);
            pp_field(&q, &u);
            PUT("%s %s/%s\n", f.field == 1 ? "type" : "period_type", pp_s(&p, t.v), pp_s(&p, u.v));
        } else if (f.field == 3) {
            loupe__pbr q = pp_sub(&f);
            loupe__pbf g;
            uint64_t id = 0, limit = 0, file = 0, bid = 0, fl = 0;
            while (loupe__pbr_next(&q, &g, &off, &what) == 1) {
                id = g.field == 1 ? g.v : id;
                limit = g.field == 3 ? g.v : limit;
                file = g.field == 5 ? g.v : file;
                bid = g.field == 6 ? g.v : bid;
                fl |= g.field >= 7 && g.field <= 10 && g.v != 0 ? 1u << (g.field - 7) : 0;
            }
            PUT("mapping %llu %s limit 0x%llx%s%s%s%s%s\n", (unsigned long long)id, pp_s(&p, file),
                (unsigned long long)limit, fl & 1 ? " fn" : "", fl & 2 ? " files" : "",
                fl & 4 ? " lines" : "", fl & 8 ? " inline" : "", bid != 0 ? " build-id" : "");
        } else if (f.field == 2) {
            loupe__pbr q = pp_sub(&f);
            loupe__pbf g;
            uint64_t locs[64], vals[3];
            size_t nl = 0, nv = 0;
            char labels[256] = "";
            size_t ll = 0;
            while (loupe__pbr_next(&q, &g, &off, &what) == 1) {
                if (g.field == 1) {
                    assert_true(nl < 64);
                    locs[nl++] = g.v;
                } else if (g.field == 2) {
                    assert_true(nv < 3);
                    vals[nv++] = g.v;
                } else if (g.field == 3) {
                    loupe__pbr lr = pp_sub(&g);
                    loupe__pbf h;
                    uint64_t key = 0, sv = 0, num = 0;
                    int is_num = 0;
                    while (loupe__pbr_next(&lr, &h, &off, &what) == 1) {
                        key = h.field == 1 ? h.v : key;
                        sv = h.field == 2 ? h.v : sv;
                        if (h.field == 3) {
                            num = h.v;
                            is_num = 1;
                        }
                    }
                    ll += (size_t)snprintf(labels + ll, sizeof labels - ll, " %s=", pp_s(&p, key));
                    ll += is_num ? (size_t)snprintf(labels + ll, sizeof labels - ll, "%llu",
                                                    (unsigned long long)num)
                                 : (size_t)snprintf(labels + ll, sizeof labels - ll, "%s",
                                                    pp_s(&p, sv));
                }
            }
            assert_int_equal(nv, 3);
            PUT("sample %llu %llu %llu%s |", (unsigned long long)vals[0],
                (unsigned long long)vals[1], (unsigned long long)vals[2], labels);
            for (size_t i = 0; i < nl; i++) {
                const pp_loc *l = pp_find_loc(&p, locs[i]);
                PUT("%s", i ? " ;" : "");
                for (size_t k = 0; k < l->nlines; k++) {
                    PUT("%s %s", k ? " <" : "", pp_fn(&p, l->fn[k], 0));
                    const char *file = pp_fn(&p, l->fn[k], 1);
                    if (file[0] != 0 || l->line[k] != 0) {
                        PUT(" %s:%llu", file, (unsigned long long)l->line[k]);
                    }
                }
                if (l->mapping != 0 || l->address != 0) {
                    PUT(" @%s+0x%llx", pp_map_file(&p, l->mapping), (unsigned long long)l->address);
                }
            }
            PUT("\n");
        } else if (f.field == 9 || f.field == 10 || f.field == 12) {
            PUT("%s %llu\n",
                f.field == 9    ? "time"
                : f.field == 10 ? "duration"
                                : "period",
                (unsigned long long)f.v);
        } else if (f.field == 13) {
            PUT("comment %s\n", pp_s(&p, f.v));
        } else if (f.field == 14) {
            PUT("default %s\n", pp_s(&p, f.v));
        }
    }
#undef PUT
    free(bytes);
    return out;
}

static const char expected_pprof_head[] =
    "type samples/count\n"
    "type cpu/nanoseconds\n"
    "type off_cpu/nanoseconds\n"
    "sample 2 2000000 0 thread=main tid=4242 pid=4242 | helper util.h:3 < work app.c:20 "
    "@/usr/bin/app+0x1108 ; main app.c:10 @/usr/bin/app+0x1000\n"
    "sample 1 1000000 0 thread=main tid=4242 pid=4242 | work app.c:20 @/usr/bin/app+0x1100 ; "
    "main app.c:10 @/usr/bin/app+0x1000\n"
    "sample 1 1000000 0 thread=worker tid=4243 pid=4242 | do_syscall_64 @[kernel]+0x0 ; memcpy "
    "@/lib/x86_64-linux-gnu/libc.so.6+0x9abc0 ; work app.c:20 @/usr/bin/app+0x1100 ; main "
    "app.c:10 @/usr/bin/app+0x1000\n"
    "sample 1 1000000 0 thread=worker tid=4243 pid=4242 | jit 0x7f00\n"
    "sample 1 1000000 0 thread=worker tid=4243 pid=4242 | [no stack]\n"
    "sample 0 0 250 thread=main tid=4242 pid=4242 | [off-CPU]\n"
    "sample 0 0 1500000 thread=main tid=4242 pid=4242 | [off-CPU: waiting]\n"
    "sample 0 0 500 thread=main tid=4242 pid=4242 | [off-CPU: preempted]\n"
    "mapping 1 /usr/bin/app limit 0x1109 fn files lines inline\n"
    "mapping 2 [kernel] limit 0x1 fn\n"
    "mapping 3 /lib/x86_64-linux-gnu/libc.so.6 limit 0x9abc1 fn";
static const char expected_pprof_tail[] = "time 1700000000000000000\n"
                                          "duration 10000000\n"
                                          "period_type cpu/nanoseconds\n"
                                          "period 1000000\n"
                                          "comment written by loupe " LOUPE_VERSION_STRING "\n"
                                          "comment 6 CPU samples every 1000000 ns, 3 lost\n"
                                          "comment process 4242 app on box: 6 samples\n"
                                          "default cpu\n";

/* The sampled model as pprof: every sample, location, line, mapping and label exact; a second
 * write gives the same bytes, and a gzipped one the same bytes gzipped. libc's mapping has a
 * build-id exactly when the file is there to read it from. */
static void test_pprof(void **state) {
    (void)state;
    loupe_model *m = sampled_model();
    char path[512];
    snprintf(path, sizeof path, "%s/cpu.pprof", tu_dir);
    assert_int_equal(loupe_file_format_from_name(path), LOUPE_FILE_PPROF);
    assert_int_equal(loupe_file_format_from_name("cpu.pb.gz"), LOUPE_FILE_PPROF);
    assert_int_equal(loupe_file_format_from_name("cpu.pb"), LOUPE_FILE_PERFETTO_PROTO);
    assert_int_equal(loupe_file_format_parse("pprof"), LOUPE_FILE_PPROF);
    if (loupe_trace_write(m, path, LOUPE_FILE_PPROF) != 0) {
        fail_msg("%s: %s", path, loupe_last_error());
    }
    char *t = pprof_text(path);
    size_t head = strlen(expected_pprof_head);
    assert_memory_equal(t, expected_pprof_head, head);
    int libc = access("/lib/x86_64-linux-gnu/libc.so.6", R_OK) == 0;
    const char *rest = t + head;
    const char *want = libc ? " build-id\n" : "\n";
    assert_memory_equal(rest, want, strlen(want));
    assert_string_equal(rest + strlen(want), expected_pprof_tail);
    size_t n1, n2;
    char *b1 = tu_read_file(path, &n1);
    char path2[512];
    snprintf(path2, sizeof path2, "%s/cpu.pb.gz", tu_dir);
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_PPROF), 0);
    char *b2 = tu_read_file(path, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    assert_int_equal(loupe_trace_write(m, path2, LOUPE_FILE_PPROF), 0);
    char *gz = tu_read_file(path2, &n2); /* gunzipped: the same bytes */
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, gz, n1);
    free(gz);
    FILE *g = fopen(path2, "rb");
    assert_non_null(g);
    assert_int_equal(fgetc(g), 0x1f); /* gzip's magic (RFC 1952) */
    assert_int_equal(fgetc(g), 0x8b);
    fclose(g);
    free(b1);
    free(b2);
    free(t);
    /* no samples and no off-CPU time: an error, and no file */
    loupe_model bare = *m;
    loupe_model_thread th[2];
    memcpy(th, m->threads, sizeof th);
    th[0].off_cpu_count = 0;
    th[1].off_cpu_count = 0;
    bare.threads = th;
    bare.sample_count = 0;
    snprintf(path, sizeof path, "%s/none.pb.gz", tu_dir);
    assert_int_equal(loupe_trace_write(&bare, path, LOUPE_FILE_PPROF), LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(),
                        "the trace holds no CPU samples, and a pprof profile is made of them: "
                        "record with sampling on (loupe record samples at 999 Hz unless "
                        "--no-sample; loupe_trace_options.sampling_hz)");
    assert_int_equal(access(path, F_OK), -1);
    loupe_model_free(m);
}

/* ---- the FDO sample profile (loupe/fdo.h) of addresses in this program ---- */

static void *fdo_ret; /* the return address of fdo_target's call in fdo_caller */
__attribute__((noinline, noclone)) static void fdo_target(void) {
    fdo_ret = __builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}
#define FDO_CALLER_LINE (__LINE__ + 1)
__attribute__((noinline, noclone)) static void fdo_caller(void) {
    fdo_target(); /* FDO_CALLER_LINE + 1 */
    __asm__ volatile("" ::: "memory");
}

static void test_fdo_profile(void **state) {
    (void)state;
    char *out = (char *)1;
    size_t len = 7;
    /* jax.profiler's message when nothing is tracing */
    assert_int_equal(loupe_stop_and_get_fdo_profile(NULL, &out, &len, NULL), LOUPE_ENOT_STARTED);
    assert_string_equal(loupe_strerror(LOUPE_ENOT_STARTED), "No profile started");
    assert_null(out);
    assert_int_equal(len, 0);
    assert_int_equal(loupe_fdo_profile(NULL, NULL, &out, NULL, NULL), LOUPE_EINVALID);
    assert_string_equal(loupe_last_error(), "loupe_fdo_profile: the model is NULL");

    fdo_caller();
    Dl_info di;
    assert_int_not_equal(dladdr(fdo_ret, &di), 0);
    char exe[PATH_MAX];
    assert_non_null(realpath("/proc/self/exe", exe));
    uint64_t base = (uint64_t)(uintptr_t)di.dli_fbase;
    uint64_t target = (uint64_t)(uintptr_t)fdo_target - base;
    uint64_t ret = (uint64_t)(uintptr_t)fdo_ret - base;
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *mm = loupe__mb_model(mb);
    mm->pid = 1;
    mm->sample_period_ns = 1000000;
    size_t t0 = loupe__mb_thread(mb, 1);
    loupe_frame ft = {"fdo_target", "", 0, 0, loupe__mb_str(mb, exe), target};
    loupe_frame fc = {"fdo_caller", "", 0, 0, loupe__mb_str(mb, exe), ret};
    loupe_frame fl = {"memcpy", "", 0, 0, "/lib/x86_64-linux-gnu/libc.so.6", 0x9abc0};
    uint32_t it = loupe__mb_frame(mb, &ft), ic = loupe__mb_frame(mb, &fc);
    uint32_t il = loupe__mb_frame(mb, &fl);
    uint32_t a[] = {it, ic}, b[] = {il, ic};
    uint32_t sa = loupe__mb_stack_of(mb, a, 2), sb = loupe__mb_stack_of(mb, b, 2);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(loupe__mb_sample(mb, t0, 1000000u * (uint64_t)(i + 1), sa, 0), 0);
    }
    assert_int_equal(loupe__mb_sample(mb, t0, 5000000, sb, 0), 0);
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);

    loupe_fdo_stats st;
    loupe_fdo_options o = {.module = exe};
    int r = loupe_fdo_profile(m, &o, &out, &len, &st);
    if (r == LOUPE_EUNSUPPORTED && strstr(loupe_last_error(), "without libdw") != NULL) {
        loupe_model_free(m);
        skip(); /* a build without elfutils */
    }
    if (r != 0) {
        fail_msg("%s", loupe_last_error());
    }
    /* fdo_target's first instruction: on its first line (offset 0, which makes the head) or,
     * as gcc -O2 places it, on the statement below; fdo_caller has no samples of its own and
     * one call site, one line below its first */
    int off = -1, head = -1, n = -1;
    assert_int_equal(sscanf(out, "fdo_target:3:%d\n %d: 3\n%n", &head, &off, &n), 2);
    assert_true(n > 0 && (off == 0 || off == 1));
    assert_int_equal(head, off == 0 ? 3 : 1);
    char want[256];
    snprintf(want, sizeof want, "fdo_caller:0:1\n %d: 0 fdo_target:3\n",
             (FDO_CALLER_LINE + 1) - FDO_CALLER_LINE);
    assert_string_equal(out + n, want);
    assert_int_equal(len, strlen(out));
    assert_int_equal(st.samples, 4);
    assert_int_equal(st.samples_used, 3);
    assert_int_equal(st.samples_elsewhere, 1);
    assert_int_equal(st.samples_line0 + st.samples_no_debug_info, 0);
    assert_int_equal(st.functions, 2);
    assert_string_equal(st.module, exe);
    free(out);

    /* a module that is not there; one that holds none of the samples; an unknown format */
    o.module = "/nonexistent/app";
    assert_int_equal(loupe_fdo_profile(m, &o, &out, &len, NULL), LOUPE_EIO);
    assert_null(out);
    assert_true(
        strncmp(loupe_last_error(), "cannot read /nonexistent/app for its line tables: ", 50) == 0);
    o.module = "/dev/null"; /* there, but none of the samples is in it */
    assert_int_equal(loupe_fdo_profile(m, &o, &out, &len, NULL), LOUPE_EUNSUPPORTED);
    char mods[PATH_MAX + 256];
    snprintf(mods, sizeof mods,
             "none of the trace's 4 samples is in /dev/null; the modules its samples are in: %s, "
             "/lib/x86_64-linux-gnu/libc.so.6",
             exe);
    assert_string_equal(loupe_last_error(), mods);
    o.module = exe;
    o.format = (loupe_fdo_format)9;
    assert_int_equal(loupe_fdo_profile(m, &o, &out, &len, NULL), LOUPE_EINVALID);
    assert_string_equal(loupe_last_error(), "loupe_fdo_profile: format 9 is not "
                                            "LOUPE_FDO_LLVM_TEXT (the one format written so far)");
    loupe_model_free(m);
    /* a sample of the module at an address no function holds (its ELF header) */
    mb = loupe__mb_new();
    assert_non_null(mb);
    t0 = loupe__mb_thread(mb, 1);
    loupe_frame fz = {"?", "", 0, 0, loupe__mb_str(mb, exe), 0};
    uint32_t iz = loupe__mb_frame(mb, &fz);
    assert_int_equal(loupe__mb_sample(mb, t0, 1000, loupe__mb_stack_of(mb, &iz, 1), 0), 0);
    m = loupe__mb_finish(mb);
    assert_non_null(m);
    o.format = LOUPE_FDO_LLVM_TEXT;
    assert_int_equal(loupe_fdo_profile(m, &o, &out, &len, NULL), LOUPE_EUNSUPPORTED);
    assert_null(out);
    char msg[PATH_MAX + 256];
    snprintf(msg, sizeof msg,
             "none of the 1 samples could be placed on a line of %s (1 in it without DWARF line "
             "tables, 0 on line 0, 0 in other modules): build it with -g or -gline-tables-only",
             exe);
    assert_string_equal(loupe_last_error(), msg);
    loupe_model_free(m);
}

int main(int argc, char **argv) {
    /* --write-pftrace PATH: the sampled model as a .pftrace, for tests/perfetto_samples.sh */
    if (argc == 3 && strcmp(argv[1], "--write-pftrace") == 0) {
        loupe_model *m = sampled_model();
        int rc = loupe_trace_write(m, argv[2], LOUPE_FILE_PERFETTO_PROTO);
        loupe_model_free(m);
        if (rc != 0) {
            fprintf(stderr, "%s: %s\n", argv[2], loupe_last_error());
        }
        return rc != 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_perfetto_proto, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_chrome_json, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_xplane, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_summary_hot, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_folded_samples, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_svg_samples, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_convert_weight, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_perfetto_pid_tid, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_xplane_hostile_samples, tu_setup, tu_teardown),
        cmocka_unit_test(test_b64),
        cmocka_unit_test_setup_teardown(test_xplane_samples_base64, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_pprof, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_fdo_profile, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
