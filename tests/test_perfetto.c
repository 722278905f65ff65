/* test_perfetto.c: the Perfetto protobuf writer and reader (src/export/perfetto_proto.c,
 * src/import/perfetto_proto.c).
 *
 * - round trip: a model with every event kind (nested, zero-length and truncated slices, every
 *   arg type, instants, int and double counters, flows across tracks and chained on one id, a
 *   GPU track sharing a host tid, an empty track, metadata) and hostile names is written, read
 *   back and compared field by field;
 * - the exact bytes of a one-zone trace, and the exact size of 1000 plain zones;
 * - wire types and the sequence rules of Perfetto's trace_processor
 * (src/trace_processor/importers/proto/), checked by walking the file: repeated fields unpacked;
 * per sequence (one per track): CLEARED first, defaults before events, NEEDS on the first event
 * packet only, iids defined once and before use, the track implied by the defaults; descriptors
 * before events, one uuid per thread;
 * - the sequence limit the writer and the reader share (base/perfetto.h): 70,000 tracks written in
 *   65,536 sequences and read back whole; 65,537 refused by name, 65,536 read in a bounded RSS;
 * - the reader's own sequence rules (packets before a clear are skipped) and bad input
 *   (truncations at every length, garbage varints, a 1 GB length, wrong wire types, NEEDS
 *   with sequence id 0): LOUPE_EFORMAT naming the offset, never a crash;
 * - a session with LOUPE_FORMAT_PERFETTO_PROTO writes <host>.pftrace, read by loupe_trace_read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pb.h"
#include "base/perfetto.h"
#include "export/sink.h"
#include "export/writers.h"
#include "import/readers.h"
#include "model/builder.h"
#include "testutil.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

/* ---- helpers ---- */

/* The writer's bytes as they are: compressed_packets chunks (the default). */
static uint8_t *write_raw(const loupe_model *m, size_t *n) {
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(loupe__write_perfetto_proto(m, &s), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    *n = s.mem_len;
    return (uint8_t *)s.mem;
}

#define ZCHUNK ((size_t)512 << 10) /* perfetto_proto.c's chunk of packets */

/* Checks that b is only compressed_packets packets, each {0x0A len, 0x92 0x03 len, a zlib
 * stream} and nothing else, and returns their packets inflated and joined: the stream the
 * writer compressed. *chunks: how many; each but the last holds at least ZCHUNK bytes, less
 * than ZCHUNK + 64 here (it ends at the first packet boundary past ZCHUNK; these packets are
 * short). */
static uint8_t *inflate_trace(const uint8_t *b, size_t n, size_t *out_n, size_t *chunks) {
    loupe__pbr p = {b, b + n, b};
    loupe__pbf f = {0};
    size_t off, len = 0, cap = 0;
    const char *what;
    uint8_t *out = NULL;
    *chunks = 0;
    int k;
    while ((k = loupe__pbr_next(&p, &f, &off, &what)) > 0) {
        assert_int_equal(f.field, 1);
        loupe__pbr q = {f.data, f.data + f.len, b};
        loupe__pbf g = {0};
        assert_int_equal(loupe__pbr_next(&q, &g, &off, &what), 1);
        assert_int_equal(g.field, 50);
        assert_int_equal(g.wire, PB_LEN);
        assert_int_equal(loupe__pbr_next(&q, &g, &off, &what), 0); /* nothing else */
        z_stream z;
        memset(&z, 0, sizeof z);
        assert_int_equal(inflateInit(&z), Z_OK); /* zlib format, as traced's deflateInit */
        z.next_in = (Bytef *)(uintptr_t)g.data;
        z.avail_in = (uInt)g.len;
        size_t start = len;
        int zr;
        do {
            if (cap - len < 65536) {
                cap = cap ? cap * 2 : 1 << 20;
                out = realloc(out, cap);
                assert_non_null(out);
            }
            z.next_out = out + len;
            z.avail_out = (uInt)(cap - len);
            zr = inflate(&z, Z_NO_FLUSH);
            len = cap - z.avail_out;
        } while (zr == Z_OK);
        assert_int_equal(zr, Z_STREAM_END);
        assert_int_equal(z.avail_in, 0);
        inflateEnd(&z);
        if (*chunks > 0) {
            assert_true(len - start > 0);
        }
        (*chunks)++;
        if (p.p < p.end) { /* not the last: at least ZCHUNK */
            assert_true(len - start >= ZCHUNK);
            assert_true(len - start < ZCHUNK + 64);
        }
    }
    assert_int_equal(k, 0);
    *out_n = len;
    return out;
}

/* The stream the writer compresses: the inflated packets, checked against what it writes with
 * LOUPE_PERFETTO_COMPRESS=0, byte for byte. */
static uint8_t *write_model(const loupe_model *m, size_t *n) {
    size_t rn, chunks;
    uint8_t *raw = write_raw(m, &rn);
    uint8_t *plain = inflate_trace(raw, rn, n, &chunks);
    free(raw);
    assert_int_equal(setenv("LOUPE_PERFETTO_COMPRESS", "0", 1), 0);
    size_t pn;
    uint8_t *direct = write_raw(m, &pn);
    assert_int_equal(unsetenv("LOUPE_PERFETTO_COMPRESS"), 0);
    assert_int_equal(pn, *n);
    assert_memory_equal(direct, plain, pn);
    free(direct);
    return plain;
}

static int read_bytes(const uint8_t *p, size_t n, loupe_model **out) {
    char *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    memcpy(copy, p, n);
    return loupe__perfetto_proto_read_mem("mem.pftrace", copy, n, out);
}

static size_t add_slice(loupe__mb *mb, size_t t, uint64_t start, uint64_t dur, const char *name,
                        const char *cat, uint32_t flags) {
    size_t i = loupe__mb_slice(mb, t);
    loupe_slice *s = loupe__mb_slice_at(mb, t, i);
    s->start_ns = start;
    s->dur_ns = dur;
    s->name = loupe__mb_str(mb, name);
    loupe__mb_slice_category(mb, t, i, cat);
    s->flags = (uint16_t)flags;
    return i;
}

static const char HOSTILE[] =
    "q\"uote\\ \n\t\x01 \xff\xfe bad-utf8 \xe2\x82 \xf0\x9f\x98\x80 {}[],:";

/* Every event kind, hostile names. */
static loupe_model *full_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 4242;
    m->process_name = loupe__mb_str(mb, HOSTILE);
    m->host = loupe__mb_str(mb, "host:with:colons");
    m->clock = loupe__mb_str(mb, "tsc");
    m->tsc_ghz = 2.918734;
    m->origin_unix_ns = 1764428400123456789ull;
    m->duration_ns = 5000000;
    m->unmatched_ends = 3;
    size_t t1 = loupe__mb_thread(mb, 100);
    loupe__mb_thread_name(mb, t1, HOSTILE);
    size_t t2 = loupe__mb_thread(mb, 200);
    size_t gpu = loupe__mb_thread(mb, 7); /* then tid 100, shared with t1 */
    loupe__mb_thread_at(mb, gpu)->tid = 100;
    loupe__mb_thread_at(mb, gpu)->kind = LOUPE_TRACK_GPU;
    loupe__mb_thread_at(mb, gpu)->device = 1;
    loupe__mb_thread_name(mb, gpu, "GPU 1 stream 7");
    size_t empty = loupe__mb_thread(mb, 300);
    loupe__mb_thread_name(mb, empty, "idle");
    for (size_t t = 0; t < 4; t++) {
        loupe_model_thread *th = loupe__mb_thread_at(mb, t);
        th->events_recorded = 10 + t;
        th->events_dropped = t;
        th->capacity_needed = t ? 1000 * t : 0;
    }
    size_t root = add_slice(mb, t1, 1000, 9000, "root", "cat", 0);
    loupe_arg args[] = {
        {.key = "i", .type = LOUPE_ARG_INT64, .v.i = INT64_MIN},
        {.key = "u", .type = LOUPE_ARG_UINT64, .v.u = UINT64_MAX},
        {.key = "d", .type = LOUPE_ARG_DOUBLE, .v.d = -0.1},
        {.key = "b", .type = LOUPE_ARG_BOOL, .v.b = 1},
        {.key = HOSTILE, .type = LOUPE_ARG_STRING, .v.s = HOSTILE},
        {.key = "", .type = LOUPE_ARG_STRING, .v.s = ""},
    };
    assert_int_equal(loupe__mb_slice_args(mb, t1, root, args, 6), 0);
    size_t child = add_slice(mb, t1, 1000, 4000, HOSTILE, HOSTILE, LOUPE_SLICE_FUNCTION);
    add_slice(mb, t1, 2000, 0, "zero", "", 0);
    add_slice(mb, t1, 5000, 0, "zero-at-end", "", 0);
    size_t sib = add_slice(mb, t1, 5000, 5000, "sibling", "cat", 0);
    add_slice(mb, t1, 20000, 30000, "", "", LOUPE_SLICE_TRUNCATED);
    size_t a2 = add_slice(mb, t2, 3000, 100, "on t2", "other", 0);
    size_t b2 = add_slice(mb, t2, 6000, 100, "on t2 again", "other", 0);
    size_t g = add_slice(mb, gpu, 4000, 2000, "kernel", "gpu", 0);
    assert_int_equal(loupe__mb_instant(mb, t1, 1500, "mark", args + 3, 3), 0);
    assert_int_equal(loupe__mb_instant(mb, t2, 0, HOSTILE, NULL, 0), 0);
    loupe_counter_sample c1 = {.ts_ns = 0, .name = "mem", .i = -5};
    loupe_counter_sample c2 = {.ts_ns = 100, .name = HOSTILE, .is_double = 1, .d = 1e300};
    loupe_counter_sample c3 = {.ts_ns = 200, .name = "mem", .i = INT64_MAX};
    assert_int_equal(loupe__mb_counter(mb, &c1), 0);
    assert_int_equal(loupe__mb_counter(mb, &c2), 0);
    assert_int_equal(loupe__mb_counter(mb, &c3), 0);
    assert_int_equal(loupe__mb_flow(mb, UINT64_MAX, t1, child, t2, a2), 0);
    assert_int_equal(loupe__mb_flow(mb, 5, t2, a2, gpu, g), 0); /* a chain on one id */
    assert_int_equal(loupe__mb_flow(mb, 5, gpu, g, t2, b2), 0);
    assert_int_equal(loupe__mb_flow(mb, 0, t1, root, t1, sib), 0);
    assert_int_equal(loupe__mb_metadata(mb, "loupe_version", "spoof"), 0);
    assert_int_equal(loupe__mb_metadata(mb, HOSTILE, HOSTILE), 0);
    assert_int_equal(loupe__mb_metadata(mb, "", ""), 0);
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static void test_round_trip(void **state) {
    (void)state;
    loupe_model *m = full_model();
    size_t n;
    uint8_t *bytes = write_model(m, &n);
    loupe_model *back = NULL;
    int rc = read_bytes(bytes, n, &back);
    if (rc != 0) {
        fail_msg("read: %s", loupe_last_error());
    }
    tu_models_equal(m, back);
    assert_int_equal(back->truncated_zones, 1);
    /* and from the compressed bytes, the default file */
    size_t cn;
    uint8_t *cb = write_raw(m, &cn);
    loupe_model *cback = NULL;
    if (read_bytes(cb, cn, &cback) != 0) {
        fail_msg("read compressed: %s", loupe_last_error());
    }
    tu_models_equal(m, cback);
    loupe_model_free(cback);
    free(cb);
    /* written again, the bytes are the same */
    size_t n2;
    uint8_t *bytes2 = write_model(back, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(bytes, bytes2, n);
    free(bytes2);
    free(bytes);
    loupe_model_free(back);
    loupe_model_free(m);
}

static loupe_model *zones_model(size_t zones, uint64_t origin) {
    loupe__mb *mb = loupe__mb_new();
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 7;
    m->origin_unix_ns = origin;
    size_t t = loupe__mb_thread(mb, 8);
    for (size_t i = 0; i < zones; i++) {
        add_slice(mb, t, 1000 + 100 * i, 10, "a", "", 0);
    }
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

/* The exact bytes of a one-zone trace (track_event.proto's field numbers and wire types). */
static void test_exact_bytes(void **state) {
    (void)state;
    loupe_model *m = zones_model(1, 0);
    size_t n;
    uint8_t *b = write_model(m, &n);
    static const uint8_t head[] = {
        /* packet 1: seq 1, flags CLEARED, ClockSnapshot {BOOTTIME 0, clock 64 = 0 incremental} */
        0x0A, 0x14, 0x50, 0x01, 0x68, 0x01, 0x32, 0x0E, 0x0A, 0x04, 0x08, 0x06, 0x10, 0x00, 0x0A,
        0x06, 0x08, 0x40, 0x10, 0x00, 0x18, 0x01,
        /* packet 2: ts 0, seq 1, TrackDescriptor {uuid 1, process {pid 7}} (no name: none) */
        0x0A, 0x0D, 0x40, 0x00, 0x50, 0x01, 0xE2, 0x03, 0x06, 0x08, 0x01, 0x1A, 0x02, 0x08, 0x07,
        /* packet 3: TrackDescriptor {uuid 2, thread {pid 7, tid 8}} */
        0x0A, 0x0F, 0x40, 0x00, 0x50, 0x01, 0xE2, 0x03, 0x08, 0x08, 0x02, 0x22, 0x04, 0x08, 0x07,
        0x10, 0x08,
        /* packet 4: the track's sequence 3: flags CLEARED, trace_packet_defaults
         * {track_event_defaults {track_uuid 2}, timestamp_clock_id 64}, ClockSnapshot
         * {BOOTTIME 0, clock 64 = 0 incremental} */
        0x0A, 0x1E, 0x50, 0x03, 0x68, 0x01, 0xDA, 0x03, 0x07, 0xD0, 0x03, 0x40, 0x5A, 0x02, 0x58,
        0x02, 0x32, 0x0E, 0x0A, 0x04, 0x08, 0x06, 0x10, 0x00, 0x0A, 0x06, 0x08, 0x40, 0x10, 0x00,
        0x18, 0x01};
    assert_true(n > sizeof head);
    assert_memory_equal(b, head, sizeof head);
    /* the last two packets, on sequence 3, the track implied by its defaults: BEGIN "a" at
     * +1000 ns, NEEDS (its sequence's first event), "a" interned there with its global iid 2
     * ("loupe_metadata" is 1), then END at +10 ns with nothing but timestamp, sequence id and
     * type */
    static const uint8_t tail[] = {0x0A, 0x16, 0x40, 0xE8, 0x07, 0x50, 0x03, 0x68, 0x02,
                                   0x62, 0x07, 0x12, 0x05, 0x08, 0x02, 0x12, 0x01, 'a',
                                   0x5A, 0x04, 0x48, 0x01, 0x50, 0x02, 0x0A, 0x08, 0x40,
                                   0x0A, 0x50, 0x03, 0x5A, 0x02, 0x48, 0x02};
    assert_memory_equal(b + n - sizeof tail, tail, sizeof tail);
    /* no process name, no host, origin 0: still the same model */
    loupe_model *back = NULL;
    assert_int_equal(read_bytes(b, n, &back), 0);
    tu_models_equal(m, back);
    loupe_model_free(back);
    free(b);
    loupe_model_free(m);
}

/* Size per zone once names are interned: 1000 zones 100 ns apart, 10 ns long. */
static void test_size(void **state) {
    (void)state;
    loupe_model *m1 = zones_model(1, 0), *m = zones_model(1000, 0);
    size_t n1, n;
    free(write_model(m1, &n1));
    free(write_model(m, &n));
    /* BEGIN 0x0A len, ts 40 xx, seq 50 03, track_event 5A 04 {48 01 50 02}: 12 bytes (a delta
     * of 90 ns fits one varint byte; no flags, no track_uuid: the sequence's defaults); END
     * 0x0A len, ts, seq, track_event 5A 02 {48 02}: 10 bytes. */
    assert_int_equal(n - n1, 999 * 22);
    loupe_model_free(m1);
    loupe_model_free(m);
}

/* The number of TrackDescriptors of a file with a counter field, and of those whose parent_uuid
 * is `parent` (0: any). */
static size_t count_descriptors(const uint8_t *b, size_t n, int counters, uint64_t parent) {
    loupe__pbr top = {b, b + n, b};
    loupe__pbf pk, f, g;
    size_t off, count = 0;
    const char *what;
    while (loupe__pbr_next(&top, &pk, &off, &what) > 0) {
        loupe__pbr p = {pk.data, pk.data + pk.len, b};
        while (loupe__pbr_next(&p, &f, &off, &what) > 0) {
            if (f.field != 60) {
                continue;
            }
            loupe__pbr q = {f.data, f.data + f.len, b};
            int is_counter = 0;
            uint64_t par = 0;
            while (loupe__pbr_next(&q, &g, &off, &what) > 0) {
                if (g.field == 8) {
                    is_counter = 1;
                } else if (g.field == 5) {
                    par = g.v;
                }
            }
            if (is_counter == counters && (parent == 0 || par == parent)) {
                count++;
            }
        }
    }
    return count;
}

/* Three processes (a parent, its child, an MPI rank on another host): cmdline, parent pid, host,
 * label and rank travel per process; "mem" counters of two processes keep two tracks; an async
 * track with two overlapping slices is written as two lanes (child tracks of the async track)
 * and read back as one async track. */
static void test_processes_counters_lanes(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 100;
    m->process_name = loupe__mb_str(mb, "launcher");
    m->host = loupe__mb_str(mb, "node-a");
    m->origin_unix_ns = 1764428400000000000ull;
    size_t p0 = loupe__mb_process(mb, 100);
    size_t p1 = loupe__mb_process(mb, 101);
    size_t p2 = loupe__mb_process(mb, 102);
    loupe_model_process *pr = loupe__mb_process_at(mb, p0);
    pr->name = loupe__mb_str(mb, "launcher");
    pr->host = loupe__mb_str(mb, "node-a");
    pr->cmdline = loupe__mb_str(mb, "launcher --n 2 'a b'");
    pr->parent_pid = 1;
    pr = loupe__mb_process_at(mb, p1);
    pr->name = loupe__mb_str(mb, "child");
    pr->host = loupe__mb_str(mb, "node-a");
    pr->cmdline = loupe__mb_str(mb, "child -x");
    pr->parent_pid = 100;
    pr = loupe__mb_process_at(mb, p2);
    pr->name = loupe__mb_str(mb, "rank");
    pr->host = loupe__mb_str(mb, "node-b");
    pr->label = loupe__mb_str(mb, "rank 3");
    pr->cmdline = loupe__mb_str(mb, "");
    pr->parent_pid = 0;
    pr->rank = 3;
    size_t t0 = loupe__mb_thread_in(mb, p0, 100);
    size_t t1 = loupe__mb_thread_in(mb, p1, 101);
    size_t t2 = loupe__mb_thread_in(mb, p2, 102);
    add_slice(mb, t0, 10, 100, "spawn", "", 0);
    add_slice(mb, t1, 20, 50, "work", "", 0);
    add_slice(mb, t2, 30, 40, "allreduce", "mpi", 0);
    size_t as = loupe__mb_thread_add(mb, 7);
    loupe_model_thread *ath = loupe__mb_thread_at(mb, as);
    ath->kind = LOUPE_TRACK_ASYNC;
    ath->process = p1;
    loupe__mb_thread_name(mb, as, "requests");
    add_slice(mb, as, 20, 100, "req", "io", 0);
    add_slice(mb, as, 40, 20, "req", "io", 0);  /* overlaps the first: lane 1 */
    add_slice(mb, as, 120, 10, "req", "io", 0); /* after the first: lane 0 */
    loupe_counter_sample c0 = {.ts_ns = 10, .name = "mem", .i = 1, .process = p0};
    loupe_counter_sample c2 = {.ts_ns = 15, .name = "mem", .i = 2, .process = p2};
    loupe_counter_sample c3 = {.ts_ns = 25, .name = "mem", .i = 3, .process = p0};
    assert_int_equal(loupe__mb_counter(mb, &c0), 0);
    assert_int_equal(loupe__mb_counter(mb, &c2), 0);
    assert_int_equal(loupe__mb_counter(mb, &c3), 0);
    m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->process_count, 3);
    size_t n;
    uint8_t *b = write_model(m, &n);
    /* two counter tracks, one per (process, name) */
    assert_int_equal(count_descriptors(b, n, 1, 0), 2);
    /* the async track is uuid 2 + its index (3: after the three threads); its two lanes */
    assert_int_equal(m->threads[3].kind, LOUPE_TRACK_ASYNC);
    assert_int_equal(count_descriptors(b, n, 0, 2 + 3), 2);
    loupe_model *back = NULL;
    if (read_bytes(b, n, &back) != 0) {
        fail_msg("read: %s", loupe_last_error());
    }
    tu_models_equal(m, back);
    assert_int_equal(back->process_count, 3);
    for (size_t k = 0; k < 3; k++) {
        const loupe_model_process *a = &m->processes[k], *c = &back->processes[k];
        assert_int_equal(c->pid, a->pid);
        assert_string_equal(c->name, a->name);
        assert_string_equal(c->host, a->host);
        assert_string_equal(c->label, a->label);
        assert_string_equal(c->cmdline, a->cmdline);
        assert_int_equal(c->parent_pid, a->parent_pid);
        assert_int_equal(c->rank, a->rank);
    }
    assert_string_equal(back->processes[0].cmdline, "launcher --n 2 'a b'");
    assert_string_equal(back->processes[2].label, "rank 3");
    assert_int_equal(back->processes[2].rank, 3);
    assert_int_equal(back->processes[1].rank, -1);
    assert_int_equal(back->counter_count, 3);
    assert_int_equal(back->counters[0].process, 0);
    assert_int_equal(back->counters[1].process, 2);
    assert_int_equal(back->counters[2].process, 0);
    assert_int_equal(back->thread_count, 4);
    const loupe_model_thread *bt = &back->threads[3];
    assert_int_equal(bt->kind, LOUPE_TRACK_ASYNC);
    assert_string_equal(bt->name, "requests");
    assert_int_equal(bt->process, 1);
    assert_int_equal(bt->slice_count, 3);
    assert_int_equal(bt->slices[0].start_ns, 20);
    assert_int_equal(bt->slices[0].depth, 0);
    assert_int_equal(bt->slices[1].start_ns, 40);
    assert_int_equal(bt->slices[1].depth, 1);
    assert_int_equal(bt->slices[2].start_ns, 120);
    assert_int_equal(bt->slices[2].depth, 0);
    free(b);
    loupe_model_free(back);
    loupe_model_free(m);
}

/* A file loupe 0.3.0 wrote (one sequence, every event with its track_uuid and flags; the async
 * track's slices on one track; "mem" of both processes on one counter track) still reads, to
 * these exact values, and written again in the new form it reads back the same. */
static void test_old_form(void **state) {
    (void)state;
    loupe_model *m = NULL;
    if (loupe__perfetto_proto_read_file(LOUPE_SOURCE_DIR "/tests/data/perfetto_0.3.0.pftrace",
                                        &m) != 0) {
        fail_msg("read: %s", loupe_last_error());
    }
    assert_int_equal(m->process_count, 2);
    assert_int_equal(m->processes[0].pid, 10);
    assert_string_equal(m->processes[0].name, "parent");
    assert_int_equal(m->processes[1].pid, 20);
    assert_string_equal(m->processes[1].name, "child");
    assert_int_equal(m->thread_count, 3);
    assert_string_equal(m->threads[0].name, "main");
    assert_int_equal(m->threads[0].slice_count, 2);
    assert_string_equal(m->threads[0].slices[0].name, "outer");
    assert_int_equal(m->threads[0].slices[0].start_ns, 0); /* the earliest event: the origin */
    assert_int_equal(m->threads[0].slices[0].dur_ns, 5000);
    assert_int_equal(tu_nargs(&m->threads[0], 0), 2);
    size_t req = SIZE_MAX, worker = SIZE_MAX;
    for (size_t t = 0; t < m->thread_count; t++) {
        if (strcmp(m->threads[t].name, "req") == 0) {
            req = t;
        } else if (strcmp(m->threads[t].name, "worker") == 0) {
            worker = t;
        }
    }
    assert_true(req != SIZE_MAX && worker != SIZE_MAX);
    assert_int_equal(m->threads[req].kind, LOUPE_TRACK_ASYNC);
    assert_int_equal(m->threads[req].slice_count, 2);
    assert_int_equal(m->threads[req].slices[1].depth, 1);
    assert_int_equal(m->threads[worker].process, 1);
    assert_int_equal(m->threads[worker].instant_count, 1);
    assert_int_equal(m->counter_count, 2);
    size_t n;
    uint8_t *b = write_model(m, &n);
    loupe_model *back = NULL;
    if (read_bytes(b, n, &back) != 0) {
        fail_msg("read: %s", loupe_last_error());
    }
    tu_models_equal(m, back);
    assert_int_equal(back->threads[req].kind, LOUPE_TRACK_ASYNC);
    assert_int_equal(back->threads[req].slices[1].depth, 1);
    free(b);
    loupe_model_free(back);
    loupe_model_free(m);
}

/* ---- walking the file: wire types and sequence rules ---- */

#define WSEQ 32  /* sequence ids the walk follows (the full model uses 1..12) */
#define WIID 256 /* iids per kind it follows */

typedef struct walk {
    int packets, events, descriptors_after_events;
    int cleared[WSEQ], needs[WSEQ], defaults[WSEQ], track_default[WSEQ], seq_events[WSEQ];
    uint8_t defined[WSEQ][4][WIID]; /* (sequence, InternedData field, iid) defined */
} walk;

static loupe__pbr sub(const loupe__pbf *f, const uint8_t *base) {
    return (loupe__pbr){f->data, f->data + f->len, base};
}

/* An iid used on sequence seq is defined there (in this packet or before). */
static void uses(const walk *w, uint64_t seq, int kind, uint64_t iid) {
    assert_true(iid > 0 && iid < WIID);
    if (!w->defined[seq][kind][iid]) {
        fail_msg("sequence %llu uses iid %llu of kind %d before defining it",
                 (unsigned long long)seq, (unsigned long long)iid, kind);
    }
}

/* A DebugAnnotation and its dict entries: names by defined iids (or inline). */
static void walk_annotation(const walk *w, uint64_t seq, const loupe__pbf *a, const uint8_t *base) {
    loupe__pbr p = sub(a, base);
    loupe__pbf f;
    size_t off;
    const char *what;
    while (loupe__pbr_next(&p, &f, &off, &what) > 0) {
        if (f.field == 1) {
            uses(w, seq, 3, f.v);
        } else if (f.field == 11) {
            walk_annotation(w, seq, &f, base);
        }
    }
}

static void walk_event(const walk *w, uint64_t seq, const loupe__pbf *ev, const uint8_t *base,
                       int *has_uuid) {
    loupe__pbr p = sub(ev, base);
    loupe__pbf f;
    size_t off;
    const char *what;
    int k;
    *has_uuid = 0;
    while ((k = loupe__pbr_next(&p, &f, &off, &what)) > 0) {
        switch (f.field) {
        case 3: /* category_iids: unpacked */
        case 9:
        case 10:
        case 11:
        case 30:
            assert_int_equal(f.wire, PB_VARINT);
            if (f.field == 3) {
                uses(w, seq, 1, f.v);
            } else if (f.field == 10) {
                uses(w, seq, 2, f.v);
            } else if (f.field == 11) {
                *has_uuid = 1;
            }
            break;
        case 47: /* flow_ids: fixed64, one per tag */
        case 48:
        case 44:
            assert_int_equal(f.wire, PB_I64);
            break;
        case 4:
            assert_int_equal(f.wire, PB_LEN);
            walk_annotation(w, seq, &f, base);
            break;
        case 22:
        case 23:
            assert_int_equal(f.wire, PB_LEN);
            break;
        default:
            fail_msg("unexpected TrackEvent field %u", f.field);
        }
    }
    assert_int_equal(k, 0);
}

static void walk_interned(walk *w, uint64_t seq, const loupe__pbf *id, const uint8_t *base) {
    loupe__pbr p = sub(id, base);
    loupe__pbf f;
    size_t off;
    const char *what;
    while (loupe__pbr_next(&p, &f, &off, &what) > 0) {
        assert_true(f.field >= 1 && f.field <= 3);
        assert_int_equal(f.wire, PB_LEN);
        loupe__pbr q = sub(&f, base);
        loupe__pbf g;
        assert_int_equal(loupe__pbr_next(&q, &g, &off, &what), 1);
        assert_int_equal(g.field, 1); /* iid first, and present */
        assert_true(g.v > 0 && g.v < WIID);
        /* each iid defined once per sequence */
        assert_false(w->defined[seq][f.field][g.v]);
        w->defined[seq][f.field][g.v] = 1;
    }
}

/* The track_uuid of a TracePacketDefaults' track_event_defaults, 0 when none. */
static uint64_t default_track(const loupe__pbf *d, const uint8_t *base) {
    loupe__pbr p = sub(d, base);
    loupe__pbf f;
    size_t off;
    const char *what;
    uint64_t uuid = 0;
    while (loupe__pbr_next(&p, &f, &off, &what) > 0) {
        if (f.field == 11) {
            loupe__pbr q = sub(&f, base);
            loupe__pbf g;
            while (loupe__pbr_next(&q, &g, &off, &what) > 0) {
                if (g.field == 11) {
                    uuid = g.v;
                }
            }
        }
    }
    return uuid;
}

/* Perfetto's trace_processor rules (proto_trace_reader.cc), per sequence: a nonzero id; the
 * sequence's first packet CLEARED; its defaults (timestamp_clock_id, track_event_defaults) before
 * its events; SEQ_NEEDS_INCREMENTAL_STATE on its first event packet only; every iid defined on
 * the sequence, once, before it is used; an event without a track_uuid only on a sequence whose
 * defaults name its track. Plus loupe's own: descriptors before events, one uuid per thread. */
static void test_wire_and_sequence(void **state) {
    (void)state;
    loupe_model *m = full_model();
    size_t n;
    uint8_t *b = write_model(m, &n);
    walk *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    loupe__pbr top = {b, b + n, b};
    loupe__pbf pk;
    size_t off;
    const char *what;
    int k;
    uint64_t thread_uuids[16];
    uint64_t tids[16];
    size_t nthreads = 0;
    while ((k = loupe__pbr_next(&top, &pk, &off, &what)) > 0) {
        assert_int_equal(pk.field, 1);
        assert_int_equal(pk.wire, PB_LEN);
        loupe__pbr p = sub(&pk, b);
        loupe__pbf f, ev = {0}, interned = {0}, defaults = {0};
        uint64_t seq = 0, flags = 0;
        int has_event = 0, has_desc = 0, has_interned = 0, has_defaults = 0;
        while (loupe__pbr_next(&p, &f, &off, &what) > 0) {
            if (f.field == 10) {
                seq = f.v;
            } else if (f.field == 13) {
                flags = f.v;
            } else if (f.field == 12) {
                interned = f;
                has_interned = 1;
            } else if (f.field == 59) {
                defaults = f;
                has_defaults = 1;
            } else if (f.field == 11) {
                has_event = 1;
                ev = f;
            } else if (f.field == 60) {
                has_desc = 1;
                loupe__pbr q = sub(&f, b);
                loupe__pbf g;
                uint64_t uuid = 0;
                while (loupe__pbr_next(&q, &g, &off, &what) > 0) {
                    if (g.field == 1) {
                        uuid = g.v;
                    } else if (g.field == 4) {
                        loupe__pbr r = sub(&g, b);
                        loupe__pbf h;
                        while (loupe__pbr_next(&r, &h, &off, &what) > 0) {
                            if (h.field == 2) {
                                /* one uuid per (pid, tid) */
                                for (size_t i = 0; i < nthreads; i++) {
                                    assert_false(tids[i] == h.v);
                                }
                                tids[nthreads] = h.v;
                                thread_uuids[nthreads++] = uuid;
                            }
                        }
                    }
                }
            }
        }
        assert_true(seq > 0 && seq < WSEQ);
        if (!w->cleared[seq]) {
            assert_int_equal(flags, 1); /* SEQ_INCREMENTAL_STATE_CLEARED first */
            w->cleared[seq] = 1;
        } else {
            assert_int_equal(flags & 1, 0);
        }
        if (has_defaults) {
            w->defaults[seq] = 1;
            w->track_default[seq] = default_track(&defaults, b) != 0;
        }
        if (has_interned) {
            walk_interned(w, seq, &interned, b);
        }
        if (has_event) {
            int has_uuid;
            walk_event(w, seq, &ev, b, &has_uuid);
            /* NEEDS on the sequence's first event packet, no flags on the others */
            assert_int_equal(flags, w->seq_events[seq] == 0 ? 2 : 0);
            assert_true(w->defaults[seq]);
            assert_true(has_uuid || w->track_default[seq]);
            w->seq_events[seq]++;
            w->events++;
        }
        if (has_desc && w->events > 0) {
            w->descriptors_after_events++;
        }
        w->packets++;
    }
    assert_int_equal(k, 0);
    assert_int_equal(w->descriptors_after_events, 0);
    assert_int_equal(nthreads, 3); /* three host threads; the GPU track has no ThreadDescriptor */
    assert_int_equal(thread_uuids[0], 2);
    /* 1 metadata + 9 slices x 2 + 2 instants + 3 counters */
    assert_int_equal(w->events, 1 + 18 + 2 + 3);
    /* sequence 1: the metadata and the 3 counters; 3..: one per track (the samples' is 2) */
    assert_int_equal(w->seq_events[1], 1 + 3);
    assert_int_equal(w->seq_events[2], 0);
    assert_int_equal(w->seq_events[3], 13); /* t1: 6 slices x 2 + 1 instant */
    assert_int_equal(w->seq_events[4], 5);  /* t2: 2 slices x 2 + 1 instant */
    assert_int_equal(w->seq_events[5], 2);  /* the GPU track: 1 slice */
    assert_int_equal(w->seq_events[6], 0);  /* the empty track: its sequence is started */
    assert_int_equal(w->cleared[6], 1);
    free(w);
    free(b);
    loupe_model_free(m);
}

/* ---- bad input ---- */

static void expect_error(const uint8_t *p, size_t n, const char *detail) {
    loupe_model *m = (loupe_model *)1;
    int rc = read_bytes(p, n, &m);
    assert_int_equal(rc, LOUPE_EFORMAT);
    assert_null(m);
    if (strstr(loupe_last_error(), detail) == NULL) {
        fail_msg("detail \"%s\" lacks \"%s\"", loupe_last_error(), detail);
    }
}

static void test_bad_input(void **state) {
    (void)state;
    static const uint8_t garbage[] = {0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    expect_error(
        garbage, sizeof garbage,
        "mem.pftrace: Perfetto protobuf: offset 1: truncated or overlong length varint (in Trace)");
    /* a 1 GiB packet claim with 2 bytes there: a file cut inside its first packet */
    static const uint8_t gig[] = {0x0A, 0x80, 0x80, 0x80, 0x80, 0x04, 0x50, 0x01};
    expect_error(gig, sizeof gig,
                 "mem.pftrace: Perfetto protobuf: the file is cut short: it ends at byte 8, "
                 "inside the TracePacket at offset 0 (1073741824 bytes announced, 2 there), "
                 "before any whole packet: nothing to read");
    static const uint8_t inner_gig[] = {0x0A, 0x07, 0x62, 0x80, 0x80, 0x80, 0x80, 0x04, 0x00};
    expect_error(inner_gig, sizeof inner_gig, "offset 3: length runs past the end");
    static const uint8_t magic[] = {'{', '}'};
    expect_error(magic, sizeof magic, "offset 0: first byte 0x7B, not a Perfetto protobuf trace");
    expect_error(magic, 0, "empty file");
    static const uint8_t seq0[] = {0x0A, 0x02, 0x68, 0x02};
    expect_error(seq0, sizeof seq0, "offset 0: SEQ_NEEDS_INCREMENTAL_STATE with sequence id 0");
    /* track_uuid (field 11) as a string */
    static const uint8_t wire[] = {0x0A, 0x09, 0x50, 0x01, 0x68, 0x01,
                                   0x5A, 0x03, 0x5A, 0x01, 0x41};
    expect_error(wire, sizeof wire,
                 "offset 8: field 11 has wire type 2, expected 0 (in TrackEvent)");
    static const uint8_t group[] = {0x0A, 0x01, 0x0B};
    expect_error(group, sizeof group, "offset 2: unsupported wire type");

    /* every truncation of a real trace: a model or LOUPE_EFORMAT, never a crash */
    loupe_model *m = full_model();
    size_t n;
    uint8_t *b = write_model(m, &n);
    size_t ok = 0;
    for (size_t len = 0; len < n; len++) {
        loupe_model *r = NULL;
        int rc = read_bytes(b, len, &r);
        if (rc == 0) {
            ok++;
            loupe_model_free(r);
        } else {
            assert_int_equal(rc, LOUPE_EFORMAT);
            assert_non_null(strstr(loupe_last_error(), len ? "offset" : "empty"));
        }
    }
    assert_true(ok > 0); /* cuts between packets read as shorter traces */
    /* single-byte corruptions */
    for (size_t i = 0; i < n; i++) {
        uint8_t save = b[i];
        b[i] ^= 0xA5;
        loupe_model *r = NULL;
        int rc = read_bytes(b, n, &r);
        assert_true(rc == 0 || rc == LOUPE_EFORMAT);
        loupe_model_free(r);
        b[i] = save;
    }
    free(b);
    loupe_model_free(m);
}

/* Reads a file of the fuzz corpus (fuzz/corpus/perfetto_proto/) into memory. */
static uint8_t *corpus_file(const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/fuzz/corpus/perfetto_proto/%s", LOUPE_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *b = malloc(1 << 17);
    assert_non_null(b);
    *n = fread(b, 1, 1 << 17, f);
    fclose(f);
    return b;
}

static void expect_corpus_error(const char *name, const char *detail) {
    size_t n;
    uint8_t *b = corpus_file(name, &n);
    loupe_model *m = (loupe_model *)1;
    assert_int_equal(read_bytes(b, n, &m), LOUPE_EFORMAT);
    assert_null(m);
    assert_string_equal(loupe_last_error(), detail);
    free(b);
}

/* compressed_packets: the chunks (size, count, round trip), the file size it buys, and the
 * hostile chunks of the fuzz corpus, made by hand (zlib stored blocks, so that the bytes do not
 * depend on zlib's version): a zlib stream cut inside its Adler-32, one nested inside another,
 * and 65 MiB of zeros deflated into 66 KB (a bomb: over the 64 MiB floor). */
static void test_compressed(void **state) {
    (void)state;
    loupe_model *m = zones_model(100000, 1700000000000000000ull);
    size_t rn, pn, chunks;
    uint8_t *raw = write_raw(m, &rn);
    uint8_t *plain = inflate_trace(raw, rn, &pn, &chunks);
    /* 100000 zones of 22 bytes and the head: 2.2 MB in chunks of 512 KiB */
    assert_int_equal(chunks, pn / ZCHUNK + 1);
    assert_int_equal(chunks, 5);
    /* the same zone over and over deflates to a few hundredths of a byte per event; the bound
     * is loose because zlib's output is not fixed across its versions */
    assert_true(rn < pn / 10);
    loupe_model *back = NULL;
    if (read_bytes(raw, rn, &back) != 0) {
        fail_msg("read: %s", loupe_last_error());
    }
    tu_models_equal(m, back);
    loupe_model_free(back);
    free(plain);
    free(raw);
    loupe_model_free(m);

    /* every cut of a compressed file: a model with the cut's warning (the whole packets of
     * the chunk's inflated start), or LOUPE_EFORMAT when the cut leaves no whole packet, never
     * a crash */
    m = full_model();
    raw = write_raw(m, &rn);
    size_t ok = 0;
    for (size_t len = 1; len < rn; len++) {
        loupe_model *r = NULL;
        int rc = read_bytes(raw, len, &r);
        if (rc == 0) {
            ok++;
            assert_int_equal(r->warning_count, 1);
            assert_non_null(strstr(r->warnings[0], "the file is cut short"));
            loupe_model_free(r);
        } else {
            assert_int_equal(rc, LOUPE_EFORMAT);
            assert_non_null(strstr(loupe_last_error(), "offset"));
        }
    }
    assert_true(ok > 0); /* one chunk: any cut is inside it, and its start reads */
    free(raw);
    loupe_model_free(m);

    expect_corpus_error("compressed_truncated",
                        "mem.pftrace: Perfetto protobuf: offset 2: compressed_packets (14 bytes): "
                        "the zlib stream is cut short (after 6 bytes inflated)");
    expect_corpus_error("compressed_nested",
                        "mem.pftrace (compressed_packets at offset 2, inflated): Perfetto "
                        "protobuf: offset 2: compressed_packets (17 bytes): nested inside another "
                        "compressed_packets (one level only)");
    expect_corpus_error("compressed_bomb",
                        "mem.pftrace: Perfetto protobuf: offset 4: compressed_packets (66267 "
                        "bytes): inflates to more than 67108864 bytes (64 times its size, at "
                        "least 64 MiB; at most 4 GiB for all of them); loupe stops there (a zlib "
                        "bomb?). Set LOUPE_READ_MAX_BYTES to a larger number of bytes to read it");
    assert_int_equal(setenv("LOUPE_READ_MAX_BYTES", "1000", 1), 0);
    expect_corpus_error("compressed_bomb",
                        "mem.pftrace: Perfetto protobuf: offset 4: compressed_packets (66267 "
                        "bytes): inflates to more than 1000 bytes; loupe stops there (a zlib "
                        "bomb?). Set LOUPE_READ_MAX_BYTES to a larger number of bytes to read it");
    assert_int_equal(unsetenv("LOUPE_READ_MAX_BYTES"), 0);
    /* corrupt deflate data: zlib's own words */
    static const uint8_t bad[] = {0x0A, 0x07, 0x92, 0x03, 0x04, 0x78, 0x01, 0x07, 0x00};
    expect_error(bad, sizeof bad,
                 "mem.pftrace: Perfetto protobuf: offset 2: compressed_packets (4 bytes): zlib: "
                 "invalid block type");
}

/* Sparse and hostile iids: 3000 sequences, each cleared twice and defining iid 1000000 (far
 * above what a dense table would hold for one entry), then a BEGIN naming it: every slice gets
 * its name (the map, not the per-sequence array, holds such iids), and the reader's tables stay
 * in proportion to the file. */
static void test_reader_sparse_iids(void **state) {
    (void)state;
    /* nested messages built bottom-up with loupe__pb_bytes (no begin/end marks) */
    loupe__pb t = {0}, pkt = {0}, in = {0}, ent = {0}, ev = {0};
    for (uint64_t seq = 1; seq <= 3000; seq++) {
        for (int clear = 0; clear < 2; clear++) {
            ent.len = in.len = pkt.len = 0;
            loupe__pb_uint(&ent, 1, 1000000); /* iid */
            loupe__pb_str(&ent, 2, clear ? "second" : "first");
            loupe__pb_bytes(&in, 2, ent.p, ent.len); /* event_names */
            loupe__pb_uint(&pkt, 10, seq);           /* trusted_packet_sequence_id */
            loupe__pb_uint(&pkt, 13, 1);             /* SEQ_INCREMENTAL_STATE_CLEARED */
            loupe__pb_bytes(&pkt, 12, in.p, in.len);
            loupe__pb_bytes(&t, 1, pkt.p, pkt.len);
        }
        ev.len = pkt.len = 0;
        loupe__pb_uint(&ev, 9, 1);           /* TYPE_SLICE_BEGIN */
        loupe__pb_uint(&ev, 10, 1000000);    /* name_iid */
        loupe__pb_uint(&ev, 11, 5);          /* track_uuid */
        loupe__pb_uint(&pkt, 8, 1000 + seq); /* timestamp */
        loupe__pb_uint(&pkt, 10, seq);
        loupe__pb_bytes(&pkt, 11, ev.p, ev.len);
        loupe__pb_bytes(&t, 1, pkt.p, pkt.len);
    }
    assert_false(t.oom || pkt.oom || in.oom || ent.oom || ev.oom);
    loupe_model *m = NULL;
    if (read_bytes(t.p, t.len, &m) != 0) {
        fail_msg("read: %s", loupe_last_error());
    }
    assert_int_equal(m->thread_count, 1);
    assert_int_equal(m->threads[0].slice_count, 3000);
    for (size_t i = 0; i < 3000; i++) {
        /* the second generation's definition: the clear dropped the first */
        assert_string_equal(m->threads[0].slices[i].name, "second");
    }
    loupe_model_free(m);
    loupe__pb_free(&t);
    loupe__pb_free(&pkt);
    loupe__pb_free(&in);
    loupe__pb_free(&ent);
    loupe__pb_free(&ev);
}

/* The reader follows the sequence rules: interned data and NEEDS packets before the first
 * CLEARED are skipped; the first definition of an iid wins. */
/* Reads a corpus file that is cut short: a model with exactly one warning, the given one. */
static loupe_model *expect_corpus_cut(const char *name, const char *warning) {
    size_t n;
    uint8_t *b = corpus_file(name, &n);
    loupe_model *m = NULL;
    if (read_bytes(b, n, &m) != 0) {
        fail_msg("%s: %s", name, loupe_last_error());
    }
    assert_int_equal(m->warning_count, 1);
    assert_string_equal(m->warnings[0], warning);
    free(b);
    return m;
}

static size_t slices_of(const loupe_model *m) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    return n;
}

/* A file cut short (issue: read as far as valid, with a warning naming what was lost and
 * where): the packets before the cut are read, and a cut compressed_packets chunk gives its
 * whole packets. The hand-made seeds (fuzz/corpus/perfetto_proto/cut_*): cut_packet is one
 * empty packet {seq 1, flags CLEARED} and 4 of the next one's 6 bytes; cut_compressed is that
 * packet, then a chunk (a zlib stored block, so that the bytes do not depend on zlib's version)
 * of three such packets, cut 3 bytes into the third. */
static void test_cut(void **state) {
    (void)state;
    loupe_model *m = expect_corpus_cut(
        "cut_packet", "mem.pftrace: Perfetto protobuf: the file is cut short: it ends at byte "
                      "10, inside the TracePacket at offset 6 (4 bytes announced, 2 there): read "
                      "the file before offset 6 (top-level packets: 1); the rest of the file is "
                      "lost");
    loupe_model_free(m);
    m = expect_corpus_cut("cut_compressed",
                          "mem.pftrace: Perfetto protobuf: the file is cut short: it ends at byte "
                          "33, inside the compressed_packets at offset 8 (29 bytes announced, 22 "
                          "there): read the file before offset 6 (top-level packets: 1) and the "
                          "chunk's first 15 inflated bytes (whole packets: 2); the rest of the "
                          "file is lost");
    loupe_model_free(m);

    /* An uncompressed trace cut 3 bytes into its 1000th packet reads as the packets before it
     * do: the same model, plus the warning. */
    loupe_model *full = zones_model(2000, 1700000000000000000ull);
    size_t n;
    uint8_t *b = write_model(full, &n);
    loupe__pbr p = {b, b + n, b};
    loupe__pbf f = {0};
    size_t off, at = 0, packets = 0;
    const char *what;
    while (packets < 1000 && loupe__pbr_next(&p, &f, &off, &what) == 1) {
        at = (size_t)(p.p - b);
        packets++;
    }
    assert_int_equal(packets, 1000);
    assert_true(loupe__pbr_next(&p, &f, &off, &what) == 1);
    const size_t next_len = f.len, head = (size_t)(f.data - b) - at; /* tag and length bytes */
    loupe_model *before = NULL, *cut = NULL;
    assert_int_equal(read_bytes(b, at, &before), 0);
    assert_int_equal(before->warning_count, 0);
    assert_int_equal(read_bytes(b, at + head + 3, &cut), 0);
    char want[400];
    snprintf(want, sizeof want,
             "mem.pftrace: Perfetto protobuf: the file is cut short: it ends at byte %zu, inside "
             "the TracePacket at offset %zu (%zu bytes announced, 3 there): read the file before "
             "offset %zu (top-level packets: 1000); the rest of the file is lost",
             at + head + 3, at, next_len, at);
    assert_int_equal(cut->warning_count, 1);
    assert_string_equal(cut->warnings[0], want);
    tu_models_equal(before, cut);
    assert_true(slices_of(cut) > 400 && slices_of(cut) < 2000);
    loupe_model_free(before);
    loupe_model_free(cut);
    free(b);

    /* The compressed file of 200000 zones (10 chunks) cut in the middle of its 4th chunk: the
     * first 3 chunks and the 4th's whole packets. How many bytes half a chunk inflates to
     * depends on zlib's version: those figures are bounded, the rest is exact. */
    loupe_model_free(full);
    full = zones_model(200000, 1700000000000000000ull);
    b = write_raw(full, &n);
    p = (loupe__pbr){b, b + n, b};
    size_t starts[16], lens[16], heads[16], k = 0;
    while (k < 16 && loupe__pbr_next(&p, &f, &off, &what) == 1) {
        starts[k] = f.offset;
        lens[k] = f.len;
        heads[k] = (size_t)(f.data - b) - f.offset;
        k++;
    }
    assert_true(k >= 5);
    /* the chunk's TracePacket {0x92 0x03 len zlib}: the field 50 starts after its header */
    const size_t zat = starts[3] + heads[3], cut_at = starts[3] + lens[3] / 2;
    loupe_model *three = NULL;
    assert_int_equal(read_bytes(b, starts[3], &three), 0);
    assert_int_equal(read_bytes(b, cut_at, &cut), 0);
    assert_int_equal(cut->warning_count, 1);
    snprintf(want, sizeof want,
             "mem.pftrace: Perfetto protobuf: the file is cut short: it ends at byte %zu, inside "
             "the compressed_packets at offset %zu (",
             cut_at, zat);
    if (strncmp(cut->warnings[0], want, strlen(want)) != 0) {
        fail_msg("warning \"%s\" does not start with \"%s\"", cut->warnings[0], want);
    }
    snprintf(want, sizeof want,
             "there): read the file before offset %zu (top-level packets: 3) and the chunk's "
             "first ",
             starts[3]);
    assert_non_null(strstr(cut->warnings[0], want));
    assert_true(slices_of(cut) > slices_of(three));
    assert_true(slices_of(cut) < 200000);
    loupe_model_free(three);
    loupe_model_free(cut);
    free(b);
    loupe_model_free(full);
}

static void test_reader_sequence_rules(void **state) {
    (void)state;
    static const uint8_t t[] = {
        /* thread track uuid 9, tid 5, no incremental state needed */
        0x0A, 0x0B, 0x50, 0x01, 0xE2, 0x03, 0x06, 0x08, 0x09, 0x22, 0x02, 0x10, 0x05,
        /* NEEDS before any clear: skipped (an INSTANT) */
        0x0A, 0x0C, 0x40, 0x05, 0x50, 0x01, 0x68, 0x02, 0x5A, 0x04, 0x48, 0x03, 0x58, 0x09,
        /* clear + name iid 1 = "x" + INSTANT name_iid 1 at ts 10 */
        0x0A, 0x17, 0x40, 0x0A, 0x50, 0x01, 0x68, 0x03, 0x62, 0x07, 0x12, 0x05, 0x08, 0x01, 0x12,
        0x01, 'x', 0x5A, 0x06, 0x48, 0x03, 0x58, 0x09, 0x50, 0x01,
        /* redefine iid 1 = "y" (ignored) + INSTANT name_iid 1 at ts 20 */
        0x0A, 0x17, 0x40, 0x14, 0x50, 0x01, 0x68, 0x02, 0x62, 0x07, 0x12, 0x05, 0x08, 0x01, 0x12,
        0x01, 'y', 0x5A, 0x06, 0x48, 0x03, 0x58, 0x09, 0x50, 0x01};
    loupe_model *m = NULL;
    int rc = read_bytes(t, sizeof t, &m);
    if (rc != 0) {
        fail_msg("%s", loupe_last_error());
    }
    assert_int_equal(m->thread_count, 1);
    assert_int_equal(m->threads[0].tid, 5);
    assert_int_equal(m->threads[0].instant_count, 2);
    assert_int_equal(m->threads[0].instants[0].ts_ns, 0); /* relative to the earliest, 10 */
    assert_string_equal(m->threads[0].instants[0].name, "x");
    assert_int_equal(m->threads[0].instants[1].ts_ns, 10);
    assert_string_equal(m->threads[0].instants[1].name, "x");
    loupe_model_free(m);
    assert_true(loupe__perfetto_proto_sniff((const char *)t, sizeof t));
    assert_false(loupe__perfetto_proto_sniff("\n{\"traceEvents\":[]}", 19));
}

/* ---- the sequence limit ---- */

/* The distinct trusted_packet_sequence_ids of an uncompressed stream, counted in seen (a byte per
 * id up to LOUPE__PERFETTO_MAX_SEQUENCES + 1); ids above that are counted in *over. */
static size_t count_sequences(const uint8_t *b, size_t n, uint8_t *seen, size_t *over) {
    loupe__pbr p = {b, b + n, b};
    loupe__pbf f = {0};
    size_t off = 0, count = 0;
    const char *what = NULL;
    *over = 0;
    while (loupe__pbr_next(&p, &f, &off, &what) > 0) {
        loupe__pbr q = {f.data, f.data + f.len, b};
        loupe__pbf g = {0};
        while (loupe__pbr_next(&q, &g, &off, &what) > 0) {
            if (g.field == 10) {
                if (g.v > LOUPE__PERFETTO_MAX_SEQUENCES) {
                    (*over)++;
                } else if (!seen[g.v]) {
                    seen[g.v] = 1;
                    count++;
                }
            }
        }
    }
    return count;
}

/* More writer tracks than the limit: they share sequences, and each event names its track where
 * it is not its sequence's default; loupe's reader gives back every thread with its slice. */
static void test_sequence_limit_writer(void **state) {
    (void)state;
    enum { THREADS = 70000 };
    loupe__mb *mb = loupe__mb_new();
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 7;
    static const char *const names[] = {"a", "b", "c", "d", "e", "f", "g"};
    for (size_t i = 0; i < THREADS; i++) {
        size_t t = loupe__mb_thread(mb, 100 + i);
        add_slice(mb, t, 1000 + 10 * i, 5 + i % 3, names[i % 7], "", 0);
    }
    m = loupe__mb_finish(mb);
    assert_non_null(m);
    /* uncompressed (write_model's check of the chunks assumes short packets; the metadata
     * packet here describes 70,000 tracks) */
    assert_int_equal(setenv("LOUPE_PERFETTO_COMPRESS", "0", 1), 0);
    size_t n;
    uint8_t *b = write_raw(m, &n);
    assert_int_equal(unsetenv("LOUPE_PERFETTO_COMPRESS"), 0);
    uint8_t *seen = calloc(LOUPE__PERFETTO_MAX_SEQUENCES + 1, 1);
    assert_non_null(seen);
    size_t over;
    /* 1 (descriptors), 3 .. 65536 (the tracks'): 65,535; no samples, so no 2 */
    assert_int_equal(count_sequences(b, n, seen, &over), LOUPE__PERFETTO_MAX_SEQUENCES - 1);
    assert_int_equal(over, 0);
    assert_false(seen[2]);
    free(seen);
    loupe_model *r = NULL;
    int rc = read_bytes(b, n, &r);
    if (rc != 0) {
        fail_msg("%s", loupe_last_error());
    }
    assert_int_equal(r->thread_count, THREADS);
    for (size_t i = 0; i < THREADS; i++) {
        const loupe_model_thread *th = &r->threads[i];
        assert_int_equal(th->tid, 100 + i);
        assert_int_equal(th->slice_count, 1);
        assert_string_equal(th->slices[0].name, names[i % 7]);
        assert_int_equal(th->slices[0].start_ns, 1000 + 10 * i);
        assert_int_equal(th->slices[0].dur_ns, 5 + i % 3);
    }
    loupe_model_free(r);
    free(b);
    loupe_model_free(m);
}

/* count packets, each on its own sequence (ids 1..count): CLEARED and a ClockSnapshot of clock 64
 * (incremental), the state a writer gives every sequence. */
static uint8_t *many_sequences(size_t count, size_t *n) {
    uint8_t *b = malloc(count * 20);
    assert_non_null(b);
    size_t o = 0;
    for (size_t id = 1; id <= count; id++) {
        uint8_t pkt[20];
        size_t k = 0;
        pkt[k++] = 0x50; /* field 10, trusted_packet_sequence_id */
        k += loupe__pb_put_varint_at(pkt + k, id);
        static const uint8_t rest[] = {0x68, 0x01, /* field 13, sequence_flags: CLEARED */
                                       0x32, 0x08, /* field 6, ClockSnapshot */
                                       0x0A, 0x06, /* .clocks: {id 64, ts 0, incremental} */
                                       0x08, 0x40, 0x10, 0x00, 0x18, 0x01};
        memcpy(pkt + k, rest, sizeof rest);
        k += sizeof rest;
        b[o++] = 0x0A;
        b[o++] = (uint8_t)k;
        memcpy(b + o, pkt, k);
        o += k;
    }
    *n = o;
    return b;
}

/* The reader refuses the 65,537th sequence by name, and holds a few hundred bytes per sequence
 * until then (0.4 held 4 KiB each: 65,536 sequences took 286 MB before that refusal; measured
 * in a child process, whose peak RSS starts at its parent's). */
static void test_sequence_limit_reader(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = many_sequences(LOUPE__PERFETTO_MAX_SEQUENCES + 1, &n);
    expect_error(b, n, "mem.pftrace: more than 65536 packet sequences");
    free(b);
    b = many_sequences(LOUPE__PERFETTO_MAX_SEQUENCES, &n);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rusage before, after;
        getrusage(RUSAGE_SELF, &before);
        loupe_model *m = NULL;
        int rc = read_bytes(b, n, &m);
        getrusage(RUSAGE_SELF, &after);
        long grew_kib = after.ru_maxrss - before.ru_maxrss;
        printf("65536 sequences read: rc %d, peak RSS +%ld KiB\n", rc, grew_kib);
        fflush(stdout);
        /* 64 MiB: the sequences and their map take about 24 MiB (less where the heap the parent
         * freed is reused); 4 KiB a sequence took 204 MiB more */
        _exit(rc == 0 && m != NULL && grew_kib < 64 * 1024 ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    free(b);
}

/* A session asked for LOUPE_FORMAT_PERFETTO_PROTO writes <host>.pftrace (not gzipped), which
 * loupe_trace_read() reads by content. */
static void test_session(void **state) {
    (void)state;
    char *dir = tu_tmpdir("perfetto");
    loupe_trace_options o = {.log_dir = dir,
                             .formats = LOUPE_FORMAT_PERFETTO_PROTO | LOUPE_FORMAT_CHROME_JSON};
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int i = 0; i < 100; i++) {
        LOUPE_ZONE("pf_zone");
    }
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_stop_trace(&r), 0);
    size_t len = strlen(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_PROTO));
    assert_true(len > 8);
    assert_string_equal(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_PROTO) + len - 8,
                        ".pftrace");
    assert_non_null(
        strstr(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), ".trace.json.gz"));
    FILE *f = fopen(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_PROTO), "rb");
    assert_non_null(f);
    assert_int_equal(fgetc(f), 0x0A); /* plain, not gzip */
    fclose(f);
    loupe_model *m = NULL;
    int rc = loupe_trace_read(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_PROTO), &m);
    if (rc != 0) {
        fail_msg("%s", loupe_last_error());
    }
    loupe_model *j = NULL;
    assert_int_equal(loupe_trace_read(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON), &j),
                     0);
    size_t zones = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            zones += strcmp(m->threads[t].slices[i].name, "pf_zone") == 0;
        }
    }
    assert_int_equal(zones, 100);
    assert_int_equal(m->origin_unix_ns, j->origin_unix_ns);
    assert_int_equal(loupe_model_events_recorded(m), loupe_model_events_recorded(j));
    assert_int_equal(m->threads[0].slices[0].start_ns, j->threads[0].slices[0].start_ns);
    loupe_model_free(m);
    loupe_model_free(j);
    tu_rmtree(dir);
    free(dir);
    loupe_trace_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_exact_bytes),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_wire_and_sequence),
        cmocka_unit_test(test_processes_counters_lanes),
        cmocka_unit_test(test_old_form),
        cmocka_unit_test(test_reader_sparse_iids),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_compressed),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_reader_sequence_rules),
        cmocka_unit_test(test_sequence_limit_writer),
        cmocka_unit_test(test_sequence_limit_reader),
        cmocka_unit_test(test_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
