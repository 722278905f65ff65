/* test_tracks_io.c: the track model (processes, threads keyed by (process, tid), async tracks,
 * per-process counters) through every writer and reader.
 *
 * - round trip: two processes (pid 100 "app" and pid 200 "helper") that both have a thread with
 *   tid 7, an async track "requests" in process 0 with two overlapping slices, a counter in each
 *   process; written as Chrome JSON and read back gives the same processes, pids, names, tracks
 *   and slices (exact values);
 * - a foreign Chrome JSON with pids 1, 2, 3, 4 and 9794104243884136841 (a valid uint64), the same
 *   tid in two pids, and async b/e/n events: one process per pid, two tracks for the shared tid,
 *   the async slices on their own track.
 * - both through XPlane too, and its layout: the other process's thread and each async lane a
 *   line of its own (names and line ids), the processes' fields (cmdline, label, host, parent,
 *   rank) back from the plane stats.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include <stdlib.h>
#include <string.h>

#include "export/sink.h"
#include "export/writers.h"
#include "import/readers.h"
#include "model/builder.h"

enum { FMT_CHROME, FMT_PERFETTO, FMT_XPLANE, FMT_COUNT };

static void add_slice(loupe__mb *mb, size_t t, uint64_t start, uint64_t dur, const char *name) {
    size_t i = loupe__mb_slice(mb, t);
    assert_true(i != SIZE_MAX);
    loupe_slice *s = loupe__mb_slice_at(mb, t, i);
    s->start_ns = start;
    s->dur_ns = dur;
    s->name = loupe__mb_str(mb, name);
    loupe__mb_slice_category(mb, t, i, "io");
}

static loupe_model *two_processes(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 100;
    m->process_name = loupe__mb_str(mb, "app");
    m->clock = loupe__mb_str(mb, "monotonic");
    m->duration_ns = 10000;
    size_t p0 = loupe__mb_process(mb, 100);
    size_t p1 = loupe__mb_process(mb, 200);
    assert_int_equal(p0, 0);
    assert_int_equal(p1, 1);
    loupe__mb_process_at(mb, p1)->name = loupe__mb_str(mb, "helper");
    size_t a = loupe__mb_thread_in(mb, p0, 7);
    size_t b = loupe__mb_thread_in(mb, p1, 7);
    loupe__mb_thread_name(mb, a, "main");
    loupe__mb_thread_name(mb, b, "worker");
    add_slice(mb, a, 1000, 500, "load");
    add_slice(mb, b, 1200, 300, "compute");
    size_t q = loupe__mb_thread_add(mb, 77);
    loupe_model_thread *qt = loupe__mb_thread_at(mb, q);
    qt->kind = LOUPE_TRACK_ASYNC;
    qt->process = p0;
    loupe__mb_thread_name(mb, q, "requests");
    add_slice(mb, q, 2000, 3000, "req 1");
    add_slice(mb, q, 2500, 1000, "req 2");
    loupe_counter_sample c = {.ts_ns = 1500, .name = "queue", .i = 3, .process = p0};
    assert_int_equal(loupe__mb_counter(mb, &c), 0);
    c = (loupe_counter_sample){
        .ts_ns = 1600, .name = "heap", .is_double = 1, .d = 2.5, .process = p1};
    assert_int_equal(loupe__mb_counter(mb, &c), 0);
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static loupe_model *round_trip(const loupe_model *m, int fmt) {
    loupe__sink s;
    loupe__sink_open_mem(&s);
    switch (fmt) {
    case FMT_PERFETTO:
        assert_int_equal(loupe__write_perfetto_proto(m, &s), 0);
        break;
    case FMT_XPLANE:
        assert_int_equal(loupe__write_xplane(m, &s), 0);
        break;
    default:
        assert_int_equal(loupe__write_chrome_json(m, &s, 0), 0);
        break;
    }
    assert_int_equal(loupe__sink_close(&s), 0);
    loupe_model *back = NULL;
    int rc = fmt == FMT_PERFETTO
                 ? loupe__perfetto_proto_read_mem("mem.pftrace", s.mem, s.mem_len, &back)
             : fmt == FMT_XPLANE ? loupe__xplane_read_mem("mem.xplane.pb", s.mem, s.mem_len, &back)
                                 : loupe__chrome_json_read_mem("mem.json", s.mem, s.mem_len, &back);
    assert_int_equal(rc, 0);
    return back;
}

static const loupe_model_thread *track(const loupe_model *m, size_t process, uint64_t tid,
                                       loupe_track_kind kind) {
    const loupe_model_thread *found = NULL;
    for (size_t i = 0; i < m->thread_count; i++) {
        const loupe_model_thread *th = &m->threads[i];
        if (th->process == process && th->tid == tid && th->kind == kind) {
            assert_null(found);
            found = th;
        }
    }
    assert_non_null(found);
    return found;
}

static void check_two_processes(const loupe_model *m) {
    assert_int_equal(m->process_count, 2);
    assert_int_equal(m->pid, 100);
    assert_string_equal(m->process_name, "app");
    assert_int_equal(m->processes[0].pid, 100);
    assert_string_equal(m->processes[0].name, "app");
    assert_int_equal(m->processes[1].pid, 200);
    assert_string_equal(m->processes[1].name, "helper");
    assert_int_equal(m->thread_count, 3);
    const loupe_model_thread *a = track(m, 0, 7, LOUPE_TRACK_THREAD);
    const loupe_model_thread *b = track(m, 1, 7, LOUPE_TRACK_THREAD);
    const loupe_model_thread *q = track(m, 0, 77, LOUPE_TRACK_ASYNC);
    assert_string_equal(a->name, "main");
    assert_string_equal(b->name, "worker");
    assert_string_equal(q->name, "requests");
    assert_int_equal(a->slice_count, 1);
    assert_int_equal(a->slices[0].start_ns, 1000);
    assert_int_equal(a->slices[0].dur_ns, 500);
    assert_string_equal(a->slices[0].name, "load");
    assert_int_equal(b->slice_count, 1);
    assert_int_equal(b->slices[0].start_ns, 1200);
    assert_int_equal(b->slices[0].dur_ns, 300);
    assert_string_equal(b->slices[0].name, "compute");
    assert_int_equal(q->slice_count, 2);
    assert_string_equal(q->slices[0].name, "req 1");
    assert_int_equal(q->slices[0].start_ns, 2000);
    assert_int_equal(q->slices[0].dur_ns, 3000);
    assert_int_equal(q->slices[0].depth, 0);
    assert_string_equal(loupe_slice_category(m, &q->slices[0]), "io");
    assert_string_equal(q->slices[1].name, "req 2");
    assert_int_equal(q->slices[1].start_ns, 2500);
    assert_int_equal(q->slices[1].dur_ns, 1000);
    assert_int_equal(q->slices[1].depth, 1); /* a second lane: it overlaps req 1 */
    assert_int_equal(m->counter_count, 2);
    assert_string_equal(m->counters[0].name, "queue");
    assert_int_equal(m->counters[0].process, 0);
    assert_int_equal(m->counters[0].ts_ns, 1500);
    assert_int_equal(m->counters[0].i, 3);
    assert_string_equal(m->counters[1].name, "heap");
    assert_int_equal(m->counters[1].process, 1);
    assert_int_equal(m->counters[1].ts_ns, 1600);
    assert_true(m->counters[1].d == 2.5);
}

static void test_round_trip(void **state) {
    (void)state;
    loupe_model *m = two_processes();
    check_two_processes(m);
    for (int f = 0; f < FMT_COUNT; f++) {
        loupe_model *back = round_trip(m, f);
        check_two_processes(back);
        loupe_model_free(back);
    }
    loupe_model_free(m);
}

static int has(const loupe__sink *s, const char *str) {
    size_t n = strlen(str);
    for (size_t i = 0; i + n <= s->mem_len; i++) {
        if (memcmp(s->mem + i, str, n) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The XPlane layout: every process's threads are lines of /host:CPU, one line per async lane,
 * the names say whose; the processes' fields come back from the plane stats. */
static void test_xplane_processes(void **state) {
    (void)state;
    loupe_model *m = two_processes();
    loupe_model_process *p1 = &m->processes[1];
    p1->cmdline = "helper --jobs 2";
    p1->label = "rank 3";
    p1->host = "node2";
    p1->parent_pid = 100;
    p1->rank = 3;
    /* a sample on each tid 7: the XPlane's "tid" stat alone would put both in process 0 */
    loupe_sample smp[2] = {{.ts_ns = 1100, .thread = 0, .stack = UINT32_MAX, .cpu = 1},
                           {.ts_ns = 1300, .thread = 1, .stack = UINT32_MAX, .cpu = 2}};
    assert_int_equal(m->threads[0].process, 0);
    assert_int_equal(m->threads[1].process, 1);
    m->samples = smp;
    m->sample_count = 2;
    m->sample_period_ns = 100;
    loupe_interval off[2] = {{1400, 50, LOUPE_OFF_CPU_WAITING},
                             {1450, 20, LOUPE_OFF_CPU_PREEMPTED}};
    m->threads[0].off_cpu = &off[0];
    m->threads[0].off_cpu_count = 1;
    m->threads[1].off_cpu = &off[1];
    m->threads[1].off_cpu_count = 1;
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(loupe__write_xplane(m, &s), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    assert_true(has(&s, "helper (200) / worker"));
    assert_true(has(&s, "requests (lane 0)"));
    assert_true(has(&s, "requests (lane 1)"));
    /* after the largest tid (7): the other process's tid 7 is line 8, the lanes 9 and 10 */
    assert_true(has(&s, "loupe_line_8_process"));
    assert_false(has(&s, "loupe_line_8_lane"));
    assert_true(has(&s, "loupe_line_9_lane"));
    assert_true(has(&s, "loupe_line_10_lane"));
    assert_false(has(&s, "loupe_line_11_"));
    assert_false(has(&s, "loupe_line_7_"));
    m->samples = NULL;
    m->sample_count = 0;
    m->threads[0].off_cpu = m->threads[1].off_cpu = NULL;
    m->threads[0].off_cpu_count = m->threads[1].off_cpu_count = 0;
    loupe_model *back = NULL;
    assert_int_equal(loupe__xplane_read_mem("mem.xplane.pb", s.mem, s.mem_len, &back), 0);
    check_two_processes(back);
    assert_int_equal(back->sample_count, 2);
    for (size_t i = 0; i < 2; i++) {
        const loupe_model_thread *th = &back->threads[back->samples[i].thread];
        assert_int_equal(back->samples[i].ts_ns, 1100 + 200 * i);
        assert_int_equal(back->samples[i].cpu, 1 + i);
        assert_int_equal(th->tid, 7);
        assert_int_equal(th->process, i);
        assert_int_equal(th->off_cpu_count, 1);
        assert_int_equal(th->off_cpu[0].start_ns, off[i].start_ns);
        assert_int_equal(th->off_cpu[0].dur_ns, off[i].dur_ns);
        assert_int_equal(th->off_cpu[0].kind, off[i].kind);
    }
    const loupe_model_process *q = &back->processes[1];
    assert_string_equal(q->cmdline, "helper --jobs 2");
    assert_string_equal(q->label, "rank 3");
    assert_string_equal(q->host, "node2");
    assert_int_equal(q->parent_pid, 100);
    assert_int_equal(q->rank, 3);
    assert_int_equal(back->processes[0].rank, -1);
    assert_int_equal(back->processes[0].parent_pid, 0);
    assert_string_equal(back->processes[0].cmdline, "");
    loupe_model_free(back);
    loupe_model_free(m);
}

static const char foreign[] =
    "{\"traceEvents\":[\n"
    "{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"one\"}},\n"
    "{\"ph\":\"M\",\"pid\":3,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"three\"}},\n"
    "{\"ph\":\"X\",\"pid\":1,\"tid\":5,\"ts\":10,\"dur\":5,\"name\":\"a\"},\n"
    "{\"ph\":\"X\",\"pid\":2,\"tid\":5,\"ts\":11,\"dur\":5,\"name\":\"b\"},\n"
    "{\"ph\":\"X\",\"pid\":3,\"tid\":6,\"ts\":12,\"dur\":5,\"name\":\"c\"},\n"
    "{\"ph\":\"X\",\"pid\":4,\"tid\":6,\"ts\":13,\"dur\":5,\"name\":\"d\"},\n"
    "{\"ph\":\"X\",\"pid\":9794104243884136841,\"tid\":1,\"ts\":14,\"dur\":1,\"name\":\"e\"},\n"
    "{\"ph\":\"b\",\"pid\":2,\"tid\":5,\"ts\":20,\"cat\":\"net\",\"id\":\"0x10\",\"name\":\"get\"},"
    "\n"
    "{\"ph\":\"b\",\"pid\":2,\"tid\":5,\"ts\":21,\"cat\":\"net\",\"id\":\"0x10\",\"name\":\"put\"},"
    "\n"
    "{\"ph\":\"n\",\"pid\":2,\"tid\":5,\"ts\":22,\"cat\":\"net\",\"id\":\"0x10\",\"name\":\"ack\"},"
    "\n"
    "{\"ph\":\"e\",\"pid\":2,\"tid\":5,\"ts\":23,\"cat\":\"net\",\"id\":\"0x10\",\"name\":\"get\"},"
    "\n"
    "{\"ph\":\"e\",\"pid\":2,\"tid\":5,\"ts\":25,\"cat\":\"net\",\"id\":\"0x10\",\"name\":\"put\"}"
    "\n"
    "]}\n";

static void check_foreign(const loupe_model *m) {
    assert_int_equal(m->process_count, 5);
    static const uint64_t pids[] = {1, 3, 2, 4, 9794104243884136841ull};
    static const char *const names[] = {"one", "three", "", "", ""};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(m->processes[i].pid, pids[i]);
        assert_string_equal(m->processes[i].name, names[i]);
    }
    assert_int_equal(m->pid, 1);
    assert_int_equal(m->thread_count, 6);
    assert_string_equal(track(m, 0, 5, LOUPE_TRACK_THREAD)->slices[0].name, "a");
    assert_string_equal(track(m, 2, 5, LOUPE_TRACK_THREAD)->slices[0].name, "b");
    assert_string_equal(track(m, 1, 6, LOUPE_TRACK_THREAD)->slices[0].name, "c");
    assert_string_equal(track(m, 3, 6, LOUPE_TRACK_THREAD)->slices[0].name, "d");
    assert_string_equal(track(m, 4, 1, LOUPE_TRACK_THREAD)->slices[0].name, "e");
    const loupe_model_thread *q = track(m, 2, 0x10, LOUPE_TRACK_ASYNC);
    assert_string_equal(q->name, "get");
    assert_int_equal(q->slice_count, 2);
    /* times relative to the first ts (10 µs) */
    assert_string_equal(q->slices[0].name, "get");
    assert_int_equal(q->slices[0].start_ns, 10000);
    assert_int_equal(q->slices[0].dur_ns, 3000);
    assert_string_equal(q->slices[1].name, "put");
    assert_int_equal(q->slices[1].start_ns, 11000);
    assert_int_equal(q->slices[1].dur_ns, 4000);
    assert_int_equal(q->slices[1].depth, 1);
    assert_int_equal(q->instant_count, 1);
    assert_string_equal(q->instants[0].name, "ack");
    assert_int_equal(q->instants[0].ts_ns, 12000);
    assert_int_equal(m->unmatched_ends, 0);
}

static void test_foreign(void **state) {
    (void)state;
    char *buf = malloc(sizeof foreign);
    assert_non_null(buf);
    memcpy(buf, foreign, sizeof foreign);
    loupe_model *m = NULL;
    assert_int_equal(loupe__chrome_json_read_mem("foreign.json", buf, sizeof foreign - 1, &m), 0);
    check_foreign(m);
    for (int f = 0; f < FMT_COUNT; f++) {
        loupe_model *back = round_trip(m, f);
        check_foreign(back);
        loupe_model_free(back);
    }
    loupe_model_free(m);
}

/* Two threads of one process with one tid (the kernel reused it after the first exited): two
 * tracks, each with its own name, slices and drop count, through Chrome JSON (the later one under
 * a fresh tid, its own in thread_name's loupe_tid), Perfetto (a track per uuid) and XPlane (the
 * later one on a line of its own, its tid in loupe_line_<id>_tid; before: one line, merged). */
static void test_tid_reuse(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 100;
    m->process_name = loupe__mb_str(mb, "app");
    m->duration_ns = 10000;
    size_t a = loupe__mb_thread_add(mb, 500);
    size_t b = loupe__mb_thread_add(mb, 500);
    assert_true(a != b);
    loupe__mb_thread_name(mb, a, "first");
    loupe__mb_thread_name(mb, b, "second");
    add_slice(mb, a, 1000, 500, "a");
    add_slice(mb, b, 3000, 700, "b");
    loupe__mb_thread_at(mb, a)->events_dropped = 3;
    loupe__mb_thread_at(mb, b)->events_dropped = 5;
    loupe__mb_thread_at(mb, a)->events_recorded = 2;
    loupe__mb_thread_at(mb, b)->events_recorded = 2;
    loupe_model *in = loupe__mb_finish(mb);
    assert_non_null(in);
    for (int f = 0; f < FMT_COUNT; f++) {
        loupe_model *back = round_trip(in, f);
        size_t n = 0;
        for (size_t i = 0; i < back->thread_count; i++) {
            const loupe_model_thread *t = &back->threads[i];
            if (t->kind != LOUPE_TRACK_THREAD || t->slice_count == 0) {
                continue;
            }
            int first = strcmp(t->name, "first") == 0;
            assert_true(first || strcmp(t->name, "second") == 0);
            assert_int_equal(t->tid, 500);
            assert_int_equal(t->slice_count, 1);
            assert_string_equal(t->slices[0].name, first ? "a" : "b");
            assert_int_equal(t->events_dropped, first ? 3 : 5);
            n++;
        }
        assert_int_equal(n, 2);
        assert_int_equal(loupe_model_events_dropped(back), 8);
        loupe_model_free(back);
    }
    loupe_model_free(in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_foreign),
        cmocka_unit_test(test_xplane_processes),
        cmocka_unit_test(test_tid_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
