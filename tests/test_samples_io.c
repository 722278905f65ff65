/* test_samples_io.c: CPU samples through every format loupe writes and reads back (Perfetto
 * protobuf, Chrome JSON, gzipped Chrome JSON, XPlane): the exact frames (function, file, line,
 * inlined, module, offset), stacks, timestamps, threads and CPUs, the period, the losses and
 * the off-CPU intervals; and the sample-weighted folded stacks. The model is built with the
 * builder (what the sampler fills at a stop). */
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
