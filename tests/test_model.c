/* test_model.c: the model builder's processes, keys, async lanes, samples and off-CPU intervals:
 * (process, tid) keys never merge two pids, processes[0] mirrors the model's own fields, frames
 * and stack nodes are interned, samples come out in time order, off-CPU intervals are sorted and
 * joined, an async track's slices get lanes; the compact slice's argument table and categories. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include "model/builder.h"

#include <stdio.h>
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

/* The compact slice (model.h): 32 bytes, the args beside the slices, found again after finish
 * sorted the slices and moved an overlapping one (with its args) to a sibling track. */
static void test_slice_args_table(void **state) {
    (void)state;
    assert_int_equal(sizeof(loupe_slice), 32);
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    size_t t = loupe__mb_thread(mb, 1);
    /* appended out of order: late (300..400), outer (0..1000), partial (900..1100: begins inside
     * outer and ends after it: moved to "(overlap 1)"), inner (100..200) */
    const uint64_t at[4][2] = {{300, 100}, {0, 1000}, {900, 200}, {100, 100}};
    const char *names[4] = {"late", "outer", "partial", "inner"};
    for (size_t i = 0; i < 4; i++) {
        size_t k = loupe__mb_slice(mb, t);
        assert_int_equal(k, i);
        loupe_slice *sl = loupe__mb_slice_at(mb, t, k);
        sl->start_ns = at[i][0];
        sl->dur_ns = at[i][1];
        sl->name = loupe__mb_str(mb, names[i]);
    }
    loupe_arg a1[2] = {{.key = "min", .type = LOUPE_ARG_INT64, .v.i = INT64_MIN},
                       {.key = "max", .type = LOUPE_ARG_UINT64, .v.u = UINT64_MAX}};
    assert_int_equal(loupe__mb_slice_args(mb, t, 0, a1, 2), 0);
    loupe_arg a2 = {.key = "s", .type = LOUPE_ARG_STRING, .v.s = "two"};
    assert_int_equal(loupe__mb_slice_add_arg(mb, t, 2, &a2), 0);
    assert_int_equal(loupe__mb_slice_add_arg(mb, t, 2, &a1[0]), 0);
    /* given and taken back: no entry */
    assert_int_equal(loupe__mb_slice_args(mb, t, 3, a1, 1), 0);
    assert_int_equal(loupe__mb_slice_args(mb, t, 3, NULL, 0), 0);
    /* a reader replacing a value in place (chrome_json.c's E args) */
    uint32_t n = 0;
    loupe_arg *in_place = loupe__mb_slice_args_at(mb, t, 0, &n);
    assert_int_equal(n, 2);
    in_place[0].v.i = INT64_MAX;
    assert_null(loupe__mb_slice_args_at(mb, t, 1, &n));
    assert_int_equal(n, 0);
    /* a caller's HAS_ARGS is not believed */
    loupe__mb_slice_at(mb, t, 1)->flags = LOUPE_SLICE_HAS_ARGS | LOUPE_SLICE_TRUNCATED;
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->thread_count, 2);
    const loupe_model_thread *th = &m->threads[0], *sib = &m->threads[1];
    assert_int_equal(th->slice_count, 3);
    assert_string_equal(th->slices[0].name, "outer");
    assert_string_equal(th->slices[1].name, "inner");
    assert_string_equal(th->slices[2].name, "late");
    assert_int_equal(th->slices[0].flags, LOUPE_SLICE_TRUNCATED);
    assert_int_equal(th->slices[1].flags, 0);
    assert_int_equal(th->slices[2].flags, LOUPE_SLICE_HAS_ARGS);
    assert_int_equal(th->slices[1].depth, 1);
    assert_int_equal(th->slice_arg_count, 1);
    assert_int_equal(th->slice_args[0].slice, 2);
    size_t c = 99;
    assert_null(loupe_slice_args(th, 0, &c));
    assert_int_equal(c, 0);
    assert_null(loupe_slice_args(th, 1, &c));
    assert_int_equal(c, 0);
    assert_null(loupe_slice_args(th, 3, &c)); /* past the slices */
    assert_int_equal(c, 0);
    const loupe_arg *a = loupe_slice_args(th, 2, &c);
    assert_int_equal(c, 2);
    assert_string_equal(a[0].key, "min");
    assert_true(a[0].v.i == INT64_MAX);
    assert_string_equal(a[1].key, "max");
    assert_true(a[1].v.u == UINT64_MAX);
    assert_string_equal(sib->name, "(overlap 1)");
    assert_int_equal(sib->slice_count, 1);
    assert_string_equal(sib->slices[0].name, "partial");
    assert_int_equal(sib->slices[0].flags, LOUPE_SLICE_HAS_ARGS);
    a = loupe_slice_args(sib, 0, &c);
    assert_int_equal(c, 2);
    assert_string_equal(a[0].key, "s");
    assert_string_equal(a[0].v.s, "two");
    assert_true(a[1].v.i == INT64_MIN);
    loupe_model_free(m);
}

/* Categories: index 0 is none, each distinct one once; the 65536th distinct one is dropped to
 * none with one warning. */
static void test_slice_categories(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    size_t t = loupe__mb_thread(mb, 1);
    const char *cats[4] = {"io", "", "gpu", "io"};
    for (size_t i = 0; i < 4; i++) {
        size_t k = loupe__mb_slice(mb, t);
        loupe__mb_slice_at(mb, t, k)->start_ns = i * 10;
        loupe__mb_slice_category(mb, t, k, cats[i]);
    }
    assert_int_equal(loupe__mb_category(mb, NULL), 0);
    char buf[32];
    for (unsigned i = 2; i < 65535; i++) { /* "io" and "gpu" are 1 and 2 */
        snprintf(buf, sizeof buf, "c%u", i);
        assert_int_equal(loupe__mb_category(mb, buf), i + 1);
    }
    assert_int_equal(loupe__mb_category(mb, "one too many"), 0);
    assert_int_equal(loupe__mb_category(mb, "and another"), 0);
    assert_int_equal(loupe__mb_category(mb, "gpu"), 2);
    /* the interned pointer itself (a reader's): found by address */
    assert_int_equal(loupe__mb_category(mb, loupe__mb_str(mb, "io")), 1);
    char io[3] = "io"; /* a buffer of the caller's: by its bytes */
    assert_int_equal(loupe__mb_category(mb, io), 1);
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->category_count, 65536);
    assert_string_equal(m->categories[0], "");
    assert_string_equal(m->categories[65535], "c65534");
    const loupe_model_thread *th = &m->threads[0];
    assert_int_equal(th->slices[0].category, 1);
    assert_int_equal(th->slices[1].category, 0);
    assert_int_equal(th->slices[2].category, 2);
    assert_int_equal(th->slices[3].category, 1);
    assert_string_equal(loupe_slice_category(m, &th->slices[0]), "io");
    assert_string_equal(loupe_slice_category(m, &th->slices[1]), "");
    assert_string_equal(loupe_slice_category(m, &th->slices[2]), "gpu");
    assert_int_equal(m->warning_count, 1);
    assert_string_equal(m->warnings[0], "more than 65535 distinct slice categories: \"one too "
                                        "many\" and later new ones are dropped (the slices keep "
                                        "no category)");
    loupe_model_free(m);
    /* a model built by hand: no categories, no argument table */
    loupe_slice sl = {
        .start_ns = 0, .dur_ns = 1, .name = "x", .flags = LOUPE_SLICE_HAS_ARGS, .category = 3};
    loupe_model_thread hand = {.slice_count = 1, .slices = &sl};
    loupe_model hm = {.thread_count = 1, .threads = &hand};
    assert_string_equal(loupe_slice_category(&hm, &sl), "");
    size_t c = 99;
    assert_null(loupe_slice_args(&hand, 0, &c));
    assert_int_equal(c, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processes),        cmocka_unit_test(test_default_process),
        cmocka_unit_test(test_async_lanes),      cmocka_unit_test(test_samples),
        cmocka_unit_test(test_slice_args_table), cmocka_unit_test(test_slice_categories),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
