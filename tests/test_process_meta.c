/* test_process_meta.c: what a model knows about each of its processes (pid, name, host, label,
 * cmdline, parent pid, rank) survives the Chrome JSON writer and reader (process_name,
 * process_labels and loupe's loupe_process M events) and the Perfetto protobuf writer and reader
 * (ProcessDescriptor pid / cmdline / process_name and the "processes" annotation), for a run of
 * three processes: a launcher, its child, and an MPI rank on another host. Also: each process's
 * tracks stay in their process, and same-name counters of two processes stay apart.
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
#include "testutil.h"

static void set_process(loupe__mb *mb, size_t p, const char *name, const char *host,
                        const char *label, const char *cmdline, uint64_t parent, int64_t rank) {
    loupe_model_process *pr = loupe__mb_process_at(mb, p);
    pr->name = loupe__mb_str(mb, name);
    pr->host = loupe__mb_str(mb, host);
    pr->label = loupe__mb_str(mb, label);
    pr->cmdline = loupe__mb_str(mb, cmdline);
    pr->parent_pid = parent;
    pr->rank = rank;
}

static loupe_model *three_processes(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 4000;
    m->process_name = loupe__mb_str(mb, "mpirun");
    m->host = loupe__mb_str(mb, "node-a");
    m->origin_unix_ns = 1764428400000000000ull;
    size_t p0 = loupe__mb_process(mb, 4000);
    size_t p1 = loupe__mb_process(mb, 4001);
    size_t p2 = loupe__mb_process(mb, 4002);
    set_process(mb, p0, "mpirun", "node-a", "", "mpirun -n 2 ./app \"x y\"", 3999, -1);
    set_process(mb, p1, "app", "node-a", "rank 0", "./app \"x y\"", 4000, 0);
    set_process(mb, p2, "app", "node-b", "rank 1", "./app \"x y\"", 4000, 1);
    size_t proc[3] = {p0, p1, p2};
    for (size_t k = 0; k < 3; k++) {
        size_t t = loupe__mb_thread_in(mb, proc[k], 4000 + k);
        size_t i = loupe__mb_slice(mb, t);
        loupe_slice *s = loupe__mb_slice_at(mb, t, i);
        s->start_ns = 1000 * (k + 1);
        s->dur_ns = 500;
        s->name = loupe__mb_str(mb, k == 0 ? "launch" : "compute");
        loupe_counter_sample c = {
            .ts_ns = 1000 * (k + 1), .name = "rss", .i = (int64_t)k, .process = proc[k]};
        assert_int_equal(loupe__mb_counter(mb, &c), 0);
    }
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static void check_processes(const loupe_model *m, const loupe_model *back) {
    tu_models_equal(m, back);
    assert_int_equal(back->process_count, 3);
    for (size_t k = 0; k < 3; k++) {
        const loupe_model_process *a = &m->processes[k], *b = &back->processes[k];
        assert_int_equal(b->pid, a->pid);
        assert_string_equal(b->name, a->name);
        assert_string_equal(b->host, a->host);
        assert_string_equal(b->label, a->label);
        assert_string_equal(b->cmdline, a->cmdline);
        assert_int_equal(b->parent_pid, a->parent_pid);
        assert_int_equal(b->rank, a->rank);
    }
    assert_string_equal(back->processes[2].host, "node-b");
    assert_string_equal(back->processes[0].cmdline, "mpirun -n 2 ./app \"x y\"");
    assert_int_equal(back->processes[0].parent_pid, 3999);
    assert_int_equal(back->processes[0].rank, -1);
    assert_int_equal(back->processes[2].rank, 1);
    assert_int_equal(back->thread_count, 3);
    for (size_t t = 0; t < 3; t++) {
        assert_int_equal(back->threads[t].process, m->threads[t].process);
    }
    assert_int_equal(back->counter_count, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(back->counters[i].name, "rss");
        assert_int_equal(back->counters[i].process, i);
        assert_int_equal(back->counters[i].i, (int64_t)i);
    }
}

typedef int (*write_fn)(const loupe_model *m, loupe__sink *s);
typedef int (*read_fn)(const char *name, char *buf, size_t n, loupe_model **out);

static int write_json(const loupe_model *m, loupe__sink *s) {
    return loupe__write_chrome_json(m, s, 0);
}

static int write_json_perfetto(const loupe_model *m, loupe__sink *s) {
    return loupe__write_chrome_json(m, s, 1);
}

static void round_trip(write_fn w, read_fn r, const char *name) {
    loupe_model *m = three_processes();
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(w(m, &s), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    loupe_model *back = NULL;
    if (r(name, s.mem, s.mem_len, &back) != 0) { /* r frees the buffer */
        fail_msg("%s: %s", name, loupe_last_error());
    }
    check_processes(m, back);
    loupe_model_free(back);
    loupe_model_free(m);
}

static void test_chrome_json(void **state) {
    (void)state;
    round_trip(write_json, loupe__chrome_json_read_mem, "mem.json");
}

static void test_chrome_json_perfetto_variant(void **state) {
    (void)state;
    round_trip(write_json_perfetto, loupe__chrome_json_read_mem, "perfetto_trace.json");
}

static void test_perfetto_proto(void **state) {
    (void)state;
    round_trip(loupe__write_perfetto_proto, loupe__perfetto_proto_read_mem, "mem.pftrace");
}

/* The JSON's process events, exactly. */
static void test_json_events(void **state) {
    (void)state;
    loupe_model *m = three_processes();
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(loupe__write_chrome_json(m, &s, 0), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    char *text = malloc(s.mem_len + 1);
    assert_non_null(text);
    memcpy(text, s.mem, s.mem_len);
    text[s.mem_len] = 0;
    free(s.mem);
    assert_non_null(strstr(text,
                           "{\"ph\":\"M\",\"pid\":4000,\"tid\":4000,\"name\":\"loupe_process\","
                           "\"args\":{\"host\":\"node-a\",\"label\":\"\",\"cmdline\":"
                           "\"mpirun -n 2 ./app \\\"x y\\\"\",\"parent_pid\":3999,"
                           "\"rank\":-1}}"));
    assert_non_null(strstr(text,
                           "{\"ph\":\"M\",\"pid\":4002,\"tid\":4002,\"name\":\"process_labels\","
                           "\"args\":{\"labels\":\"rank 1\"}}"));
    assert_non_null(strstr(text,
                           "{\"ph\":\"M\",\"pid\":4002,\"tid\":4002,\"name\":\"loupe_process\","
                           "\"args\":{\"host\":\"node-b\",\"label\":\"rank 1\",\"cmdline\":"
                           "\"./app \\\"x y\\\"\",\"parent_pid\":4000,\"rank\":1}}"));
    free(text);
    loupe_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chrome_json),
        cmocka_unit_test(test_chrome_json_perfetto_variant),
        cmocka_unit_test(test_perfetto_proto),
        cmocka_unit_test(test_json_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
