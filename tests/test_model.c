/* test_model.c: the model builder's processes, keys, async lanes, samples and off-CPU intervals:
 * (process, tid) keys never merge two pids, processes[0] mirrors the model's own fields, frames
 * and stack nodes are interned, samples come out in time order, off-CPU intervals are sorted and
 * joined, an async track's slices get lanes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include "model/builder.h"

#include <string.h>

#include "testutil.h"

static void test_processes(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    size_t p0 = loupe__mb_process(mb, 100);
    size_t p1 = loupe__mb_process(mb, 200);
    assert_int_equal(p0, 0);
    assert_int_equal(p1, 1);
    assert_int_equal(loupe__mb_process(mb, 200), 1);
    assert_int_equal(loupe__mb_process_add(mb, 200), 2); /* another host's pid 200 */
    loupe__mb_process_at(mb, 1)->name = loupe__mb_str(mb, "worker");
    loupe__mb_process_at(mb, 1)->rank = 1;
    loupe__mb_model(mb)->process_name = loupe__mb_str(mb, "main");
    /* the same tid in two processes: two tracks */
    size_t a = loupe__mb_thread_in(mb, p0, 7);
    size_t b = loupe__mb_thread_in(mb, p1, 7);
    assert_true(a != b);
    assert_int_equal(loupe__mb_thread_in(mb, p1, 7), b);
    assert_int_equal(loupe__mb_thread(mb, 7), a); /* loupe__mb_thread is process 0's */
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->process_count, 3);
    assert_int_equal(m->pid, 100);
    assert_string_equal(m->processes[0].name, "main");
    assert_string_equal(m->processes[1].name, "worker");
    assert_int_equal(m->processes[1].rank, 1);
    assert_int_equal(m->processes[0].rank, -1);
    assert_int_equal(m->thread_count, 2);
    assert_int_equal(m->threads[a].process, 0);
    assert_int_equal(m->threads[b].process, 1);
    loupe_model_free(m);
}

static void test_default_process(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe__mb_model(mb)->pid = 42;
    loupe__mb_model(mb)->host = loupe__mb_str(mb, "h1");
    (void)loupe__mb_thread(mb, 42);
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->process_count, 1);
    assert_int_equal(m->processes[0].pid, 42);
    assert_string_equal(m->processes[0].host, "h1");
    assert_string_equal(m->processes[0].label, "");
    loupe_model_free(m);
}

static void test_async_lanes(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    size_t t = loupe__mb_thread_add(mb, 1);
    loupe__mb_thread_at(mb, t)->kind = LOUPE_TRACK_ASYNC;
    /* k1 [1000, 2000], k2 [1500, 3000] overlap partially; k3 [2000, 2500] fits lane 0 again */
    const uint64_t se[3][2] = {{1000, 1000}, {1500, 1500}, {2000, 500}};
    for (int i = 0; i < 3; i++) {
        size_t s = loupe__mb_slice(mb, t);
        loupe__mb_slice_at(mb, t, s)->start_ns = se[i][0];
        loupe__mb_slice_at(mb, t, s)->dur_ns = se[i][1];
    }
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->threads[0].slices[0].depth, 0);
    assert_int_equal(m->threads[0].slices[1].depth, 1);
    assert_int_equal(m->threads[0].slices[2].depth, 0);
    loupe_model_free(m);
}

static void test_samples(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    size_t t = loupe__mb_thread(mb, 5);
    loupe_frame fm = {"main", "a.c", 10, 0, "/bin/a", 0x1000};
    loupe_frame fw = {"work", "a.c", 20, 0, "/bin/a", 0x1100};
    loupe_frame fi = {"helper", "a.h", 3, 1, "/bin/a", 0x1108};
    uint32_t im = loupe__mb_frame(mb, &fm), iw = loupe__mb_frame(mb, &fw);
    uint32_t ii = loupe__mb_frame(mb, &fi);
    loupe_frame again = {"work", "a.c", 20, 0, "/bin/a", 0x1100};
    assert_int_equal(loupe__mb_frame(mb, &again), iw);
    uint32_t st1[] = {ii, iw, im}; /* innermost first */
    uint32_t st2[] = {iw, im};
    uint32_t l1 = loupe__mb_stack_of(mb, st1, 3), l2 = loupe__mb_stack_of(mb, st2, 2);
    assert_int_equal(loupe__mb_stack_of(mb, st1, 3), l1);
    assert_int_equal(loupe__mb_sample(mb, t, 300, l1, 0), 0);
    assert_int_equal(loupe__mb_sample(mb, t, 100, l2, 1), 0);
    assert_int_equal(loupe__mb_sample(mb, t, 200, UINT32_MAX, UINT32_MAX), 0);
    assert_int_equal(loupe__mb_stack(mb, 99, im), UINT32_MAX); /* no such parent */
    assert_int_equal(loupe__mb_off_cpu(mb, t, 500, 100), 0);
    assert_int_equal(loupe__mb_off_cpu(mb, t, 100, 50), 0);
    assert_int_equal(loupe__mb_off_cpu(mb, t, 550, 100), 0); /* overlaps [500, 600) */
    assert_int_equal(loupe__mb_off_cpu(mb, t, 650, 10), 0);  /* touches it */
    /* kinds: one kind's touching intervals join, two kinds' stay apart, an overlap of two kinds
     * goes to the earlier, an unknown kind value is kept as unknown */
    assert_int_equal(loupe__mb_off_cpu_kind(mb, t, 1100, 50, LOUPE_OFF_CPU_WAITING), 0);
    assert_int_equal(loupe__mb_off_cpu_kind(mb, t, 1000, 100, LOUPE_OFF_CPU_WAITING), 0);
    assert_int_equal(loupe__mb_off_cpu_kind(mb, t, 1150, 20, LOUPE_OFF_CPU_PREEMPTED), 0);
    assert_int_equal(loupe__mb_off_cpu_kind(mb, t, 1160, 40, LOUPE_OFF_CPU_WAITING), 0);
    assert_int_equal(loupe__mb_off_cpu_kind(mb, t, 2000, 10, 7), 0);
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->frame_count, 3);
    assert_int_equal(m->stack_node_count, 3); /* main, main>work, main>work>helper */
    assert_int_equal(m->sample_count, 3);
    assert_int_equal(m->samples[0].ts_ns, 100);
    assert_int_equal(m->samples[1].stack, UINT32_MAX);
    assert_int_equal(m->samples[2].ts_ns, 300);
    const loupe_stack_node *n = &m->stack_nodes[m->samples[2].stack];
    assert_string_equal(m->frames[n->frame].function, "helper");
    assert_int_equal(m->frames[n->frame].inlined, 1);
    n = &m->stack_nodes[n->parent];
    assert_string_equal(m->frames[n->frame].function, "work");
    n = &m->stack_nodes[n->parent];
    assert_string_equal(m->frames[n->frame].function, "main");
    assert_int_equal(n->parent, UINT32_MAX);
    const loupe_model_thread *th = &m->threads[0];
    assert_int_equal(th->off_cpu_count, 6);
    static const loupe_interval want[6] = {
        {100, 50, LOUPE_OFF_CPU_UNKNOWN},   {500, 160, LOUPE_OFF_CPU_UNKNOWN},
        {1000, 150, LOUPE_OFF_CPU_WAITING}, {1150, 20, LOUPE_OFF_CPU_PREEMPTED},
        {1170, 30, LOUPE_OFF_CPU_WAITING},  {2000, 10, LOUPE_OFF_CPU_UNKNOWN}};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(th->off_cpu[i].start_ns, want[i].start_ns);
        assert_int_equal(th->off_cpu[i].dur_ns, want[i].dur_ns);
        assert_int_equal(th->off_cpu[i].kind, want[i].kind);
    }
    loupe_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_default_process),
        cmocka_unit_test(test_async_lanes),
        cmocka_unit_test(test_samples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
