/* test_reader.c: the Chrome JSON reader (loupe_trace_read) and loupe_trace_find().
 *
 * A real uftrace file (../shared/data/traces), synthetic traces with known timings written to a
 * temporary directory, and hostile input that must give LOUPE_EFORMAT, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "testutil.h"

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir("reader");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static char *path_in(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

/* Writes text to a file in the test directory and reads it; the read must succeed. For an
 * object-form or valid array-form text, the same events are also read through the whole-tree
 * path (a duplicate "traceEvents" key sends the reader there; jansson keeps the last one) and
 * the two models must be equal. */
static loupe_model *read_text(const char *text) {
    const char *p = path_in("t.json");
    tu_write_file(p, text);
    loupe_model *m = NULL;
    int rc = loupe_trace_read(p, &m);
    if (rc != 0) {
        fail_msg("loupe_trace_read: %s: %s", loupe_strerror(rc), loupe_last_error());
    }
    assert_non_null(m);
    char *dup = NULL;
    json_t *valid = text[0] == '[' ? json_loads(text, JSON_ALLOW_NUL, NULL) : NULL;
    if (text[0] == '{') {
        assert_true(asprintf(&dup, "{\"traceEvents\":[],%s", text + 1) > 0);
    } else if (json_is_array(valid)) {
        assert_true(asprintf(&dup, "{\"traceEvents\":[],\"traceEvents\":%s}", text) > 0);
    }
    json_decref(valid);
    if (dup != NULL) {
        tu_write_file(p, dup);
        free(dup);
        loupe_model *t = NULL;
        rc = loupe_trace_read(p, &t);
        if (rc != 0) {
            fail_msg("whole-tree path: %s: %s", loupe_strerror(rc), loupe_last_error());
        }
        tu_models_equal(m, t);
        loupe_model_free(t);
    }
    return m;
}

/* Writes text and reads it; returns the code (the detail stays in loupe_last_error()). */
static int read_fail(const char *text) {
    const char *p = path_in("bad.json");
    tu_write_file(p, text);
    loupe_model *m = (loupe_model *)(uintptr_t)1;
    int rc = loupe_trace_read(p, &m);
    assert_null(m);
    return rc;
}

static size_t count_named(const loupe_model *m, const char *name) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            n += strcmp(m->threads[t].slices[i].name, name) == 0;
        }
    }
    return n;
}

static const loupe_slice *find_slice(const loupe_model *m, const char *name, size_t *thread) {
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            if (strcmp(m->threads[t].slices[i].name, name) == 0) {
                if (thread != NULL) {
                    *thread = t;
                }
                return &m->threads[t].slices[i];
            }
        }
    }
    fail_msg("no slice named %s", name);
    return NULL;
}

static const loupe_model_thread *find_thread(const loupe_model *m, uint64_t tid) {
    for (size_t t = 0; t < m->thread_count; t++) {
        if (m->threads[t].tid == tid) {
            return &m->threads[t];
        }
    }
    fail_msg("no thread %llu", (unsigned long long)tid);
    return NULL;
}

static const loupe_arg *find_arg(const loupe_arg *args, size_t n, const char *key) {
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(args[i].key, key) == 0) {
            return &args[i];
        }
    }
    fail_msg("no arg %s", key);
    return NULL;
}

/* ---- real files ---- */

static void test_uftrace(void **state) {
    (void)state;
    loupe_model *m = NULL;
    int rc = loupe_trace_read(LOUPE_SHARED_DIR "/data/traces/uftrace_mt_chrome.json", &m);
    assert_int_equal(rc, 0);
    assert_int_equal(count_named(m, "mid"), 150);
    assert_int_equal(count_named(m, "leaf"), 300);
    assert_int_equal(count_named(m, "worker"), 3);
    assert_int_equal(count_named(m, "main"), 1);
    assert_int_equal(m->thread_count, 4);
    assert_int_equal(m->unmatched_ends, 0);
    assert_int_equal(m->truncated_zones, 0);
    /* the threads are the pids of the M events (uftrace puts the tid there), named by them */
    assert_string_equal(find_thread(m, 25898)->name, "[25898] mt");
    assert_string_equal(find_thread(m, 25896)->name, "[25896] mt");
    assert_int_equal(m->pid, 25896);
    assert_string_equal(m->process_name, "[25896] mt");
    /* B/E in µs with 3 decimals: worker on 25898 runs 2661138262.641 .. (its E) */
    size_t t;
    const loupe_slice *w = find_slice(m, "worker", &t);
    assert_int_equal(m->threads[t].tid, 25898);
    assert_int_equal(w->depth, 0);
    /* the first event (__monstartup at 2661138010.311) is the origin */
    const loupe_slice *first = find_slice(m, "__monstartup", NULL);
    assert_int_equal(first->start_ns, 0);
    assert_int_equal(first->dur_ns, 1913);
    assert_int_equal(w->start_ns, 2661138262641ull - 2661138010311ull);
    /* main ends last: 2661138746.706 */
    assert_int_equal(m->duration_ns, 2661138746706ull - 2661138010311ull);
    /* mid is at depth 1 under worker, leaf at depth 2 */
    for (size_t i = 0; i < m->threads[t].slice_count; i++) {
        const loupe_slice *s = &m->threads[t].slices[i];
        if (strcmp(s->name, "mid") == 0) {
            assert_int_equal(s->depth, 1);
        } else if (strcmp(s->name, "leaf") == 0) {
            assert_int_equal(s->depth, 2);
        }
    }
    /* a non-loupe metadata object goes into the model's metadata as it is */
    assert_string_equal(tu_meta(m, "command_line", NULL), "uftrace record -d mtdata ./mt");
    assert_int_equal(loupe_model_events_dropped(m), 0);
    /* the whole-tree path reads it the same (read_text compares the two) */
    char *text = tu_read_file(LOUPE_SHARED_DIR "/data/traces/uftrace_mt_chrome.json", NULL);
    loupe_model *again = read_text(text);
    tu_models_equal(m, again);
    loupe_model_free(again);
    free(text);
    loupe_model_free(m);
}

/* ---- synthetic traces ---- */

static const char NESTED[] =
    "{\"traceEvents\":[\n"
    "{\"ph\":\"M\",\"pid\":7,\"tid\":7,\"name\":\"process_name\",\"args\":{\"name\":\"proc\"}},\n"
    "{\"ph\":\"M\",\"pid\":7,\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"worker\"}},\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":2,\"ts\":1000.0,\"dur\":100,\"name\":\"outer\","
    "\"cat\":\"c1\"},\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":2,\"ts\":1010.5,\"dur\":20.25,\"name\":\"inner\"},\n"
    "{\"ph\":\"B\",\"pid\":7,\"tid\":2,\"ts\":1050,\"name\":\"b1\"},\n"
    "{\"ph\":\"B\",\"pid\":7,\"tid\":2,\"ts\":1060.001,\"name\":\"b2\"},\n"
    "{\"ph\":\"E\",\"pid\":7,\"tid\":2,\"ts\":1070,\"args\":{\"result\":3}},\n"
    "{\"ph\":\"E\",\"pid\":7,\"tid\":2,\"ts\":1080},\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":3,\"ts\":1001,\"dur\":1,\"name\":\"other\"}\n"
    "]}\n";

static void check_nested(const loupe_model *m) {
    assert_int_equal(m->pid, 7);
    assert_string_equal(m->process_name, "proc");
    assert_int_equal(m->thread_count, 2);
    const loupe_model_thread *th = find_thread(m, 2);
    assert_string_equal(th->name, "worker");
    assert_int_equal(th->slice_count, 4);
    /* start order, parents first, depth from nesting; origin = the smallest ts (1000 µs) */
    const struct {
        const char *name;
        uint64_t start, dur;
        uint32_t depth;
    } want[] = {{"outer", 0, 100000, 0},
                {"inner", 10500, 20250, 1},
                {"b1", 50000, 30000, 1},
                {"b2", 60001, 9999, 2}};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(th->slices[i].name, want[i].name);
        assert_int_equal(th->slices[i].start_ns, want[i].start);
        assert_int_equal(th->slices[i].dur_ns, want[i].dur);
        assert_int_equal(th->slices[i].depth, want[i].depth);
        assert_int_equal(th->slices[i].flags, i == 3 ? LOUPE_SLICE_HAS_ARGS : 0); /* E's args */
    }
    assert_string_equal(loupe_slice_category(m, &th->slices[0]), "c1");
    assert_string_equal(loupe_slice_category(m, &th->slices[1]), "");
    /* E's args merge into the slice it closes */
    assert_int_equal(tu_nargs(th, 3), 1);
    assert_string_equal(tu_args(th, 3)[0].key, "result");
    assert_int_equal(tu_args(th, 3)[0].v.i, 3);
    const loupe_model_thread *t3 = find_thread(m, 3);
    assert_int_equal(t3->slices[0].start_ns, 1000);
    assert_string_equal(t3->name, "");
    assert_int_equal(m->duration_ns, 100000);
    assert_int_equal(m->unmatched_ends, 0);
    assert_int_equal(m->origin_unix_ns, 0);
}

static void test_nested(void **state) {
    (void)state;
    loupe_model *m = read_text(NESTED);
    check_nested(m);
    loupe_model_free(m);
}

/* Events of exactly the shape loupe's writer gives a zone without arguments take the JSON
 * reader's fast path; the same events spelled otherwise (a blank after "ph":) take the
 * general one: both give the same model. Events near that shape (one decimal, an escape) take
 * the general path among fast ones. */
static const char FAST_X[] =
    "{\"traceEvents\":[\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":8,\"ts\":1.000,\"dur\":2.500,\"name\":\"a\"},\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":0,\"ts\":5.000,\"dur\":0.001,\"name\":\"b\"},\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":8,\"ts\":1.500,\"dur\":0.250,\"name\":\"a\"},\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":8,\"ts\":10.5,\"dur\":1.000,\"name\":\"c\"},\n"
    "{\"ph\":\"X\",\"pid\":7,\"tid\":8,\"ts\":20.000,\"dur\":1.000,\"name\":\"q\\\"x\"}\n"
    "]}\n";

static void test_fast_x(void **state) {
    (void)state;
    loupe_model *m = read_text(FAST_X);
    char slow[sizeof FAST_X + 16];
    size_t o = 0;
    for (const char *q = FAST_X; *q; q++) {
        slow[o++] = *q;
        if (strncmp(q, "\"ph\":", 5) == 0) {
            memcpy(slow + o, "ph\": ", 5);
            o += 5;
            q += 4;
        }
    }
    slow[o] = 0;
    assert_non_null(strstr(slow, "\"ph\": \"X\""));
    loupe_model *g = read_text(slow);
    tu_models_equal(m, g);
    loupe_model_free(g);
    assert_int_equal(m->thread_count, 2);
    const loupe_model_thread *th = find_thread(m, 8);
    assert_int_equal(th->slice_count, 4);
    const struct {
        const char *name;
        uint64_t start, dur;
        uint32_t depth;
    } want[] = {
        {"a", 0, 2500, 0}, {"a", 500, 250, 1}, {"c", 9500, 1000, 0}, {"q\"x", 19000, 1000, 0}};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(th->slices[i].name, want[i].name);
        assert_int_equal(th->slices[i].start_ns, want[i].start);
        assert_int_equal(th->slices[i].dur_ns, want[i].dur);
        assert_int_equal(th->slices[i].depth, want[i].depth);
        assert_string_equal(loupe_slice_category(m, &th->slices[i]), "");
    }
    /* the interned name is shared */
    assert_ptr_equal(th->slices[0].name, th->slices[1].name);
    const loupe_model_thread *t7 = find_thread(m, 7); /* tid 0: the pid's thread */
    assert_int_equal(t7->slice_count, 1);
    assert_string_equal(t7->slices[0].name, "b");
    assert_int_equal(t7->slices[0].start_ns, 4000);
    assert_int_equal(t7->slices[0].dur_ns, 1);
    assert_int_equal(m->duration_ns, 20000);
    loupe_model_free(m);
    /* a leading zero is not JSON: the fast path leaves it to the parser, which says so */
    assert_int_equal(read_fail("{\"traceEvents\":[{\"ph\":\"X\",\"pid\":07,\"tid\":8,\"ts\":1.000,"
                               "\"dur\":1.000,\"name\":\"a\"}]}"),
                     LOUPE_EFORMAT);
    const char *e = loupe_last_error();
    const char *tail = strstr(e, "bad.json: ");
    assert_non_null(tail);
    assert_string_equal(tail, "bad.json: line 1 column 34 (event 0): ',' or '}' expected");
}

static void test_gzip(void **state) {
    (void)state;
    const char *p = path_in("t.trace.json.gz");
    gzFile f = gzopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, NESTED, (unsigned)strlen(NESTED)), (int)strlen(NESTED));
    assert_int_equal(gzclose(f), Z_OK);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(p, &m), 0);
    check_nested(m);
    loupe_model_free(m);

    /* a gzip stream cut short: read up to the cut, with warnings naming the cut */
    size_t n;
    char *whole = NULL;
    FILE *in = fopen(p, "rb");
    assert_non_null(in);
    whole = malloc(1 << 16);
    n = fread(whole, 1, 1 << 16, in);
    fclose(in);
    FILE *out = fopen(p, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(whole, 1, n / 2, out), n / 2);
    fclose(out);
    free(whole);
    assert_int_equal(loupe_trace_read(p, &m), 0);
    assert_true(m->warning_count >= 1);
    assert_non_null(
        strstr(m->warnings[m->warning_count - 1], ": the gzip stream is cut short after "));
    loupe_model_free(m);
}

static void test_array_forms(void **state) {
    (void)state;
    static const char *const texts[] = {
        /* closed */
        "[{\"ph\":\"X\",\"tid\":1,\"ts\":1,\"dur\":2,\"name\":\"a\"},"
        "{\"ph\":\"X\",\"tid\":1,\"ts\":5,\"dur\":1,\"name\":\"b\"}]",
        /* unterminated, with a trailing comma (a crash-safe writer stopped between events) */
        "[{\"ph\":\"X\",\"tid\":1,\"ts\":1,\"dur\":2,\"name\":\"a\"},\n"
        "{\"ph\":\"X\",\"tid\":1,\"ts\":5,\"dur\":1,\"name\":\"b\"},\n",
        /* unterminated, no comma */
        "\xEF\xBB\xBF  [{\"ph\":\"X\",\"tid\":1,\"ts\":1,\"dur\":2,\"name\":\"a\"},"
        "{\"ph\":\"X\",\"tid\":1,\"ts\":5,\"dur\":1,\"name\":\"b\"}  ",
        /* cut inside the last event: it is dropped */
        "[{\"ph\":\"X\",\"tid\":1,\"ts\":1,\"dur\":2,\"name\":\"a\"},"
        "{\"ph\":\"X\",\"tid\":1,\"ts\":5,\"dur\":1,\"name\":\"b\",\"args\":{\"s\":\"}]\"}},"
        "{\"ph\":\"X\",\"tid\":1,\"ts\":9,\"dur\":1,\"na",
        /* closed with a trailing comma, and an empty event (xprof ends arrays with {}) */
        "[{\"ph\":\"X\",\"tid\":1,\"ts\":1,\"dur\":2,\"name\":\"a\"},{},"
        "{\"ph\":\"X\",\"tid\":1,\"ts\":5,\"dur\":1,\"name\":\"b\"},]",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        loupe_model *m = read_text(texts[i]);
        assert_int_equal(m->thread_count, 1);
        assert_int_equal(m->threads[0].slice_count, 2);
        assert_string_equal(m->threads[0].slices[1].name, "b");
        assert_int_equal(m->threads[0].slices[1].start_ns, 4000);
        assert_int_equal(m->duration_ns, 5000);
        loupe_model_free(m);
    }
    /* an array holding nothing complete is an empty trace */
    loupe_model *m = read_text("[{\"ph\":");
    assert_int_equal(m->thread_count, 0);
    assert_int_equal(m->duration_ns, 0);
    loupe_model_free(m);
}

static void test_unmatched_and_truncated(void **state) {
    (void)state;
    loupe_model *m =
        read_text("{\"traceEvents\":["
                  "{\"ph\":\"E\",\"pid\":1,\"tid\":1,\"ts\":1},"
                  "{\"ph\":\"B\",\"pid\":1,\"tid\":1,\"ts\":2,\"name\":\"open\"},"
                  "{\"ph\":\"B\",\"pid\":1,\"tid\":1,\"ts\":3,\"name\":\"closed\"},"
                  "{\"ph\":\"E\",\"pid\":1,\"tid\":1,\"ts\":4},"
                  "{\"ph\":\"E\",\"pid\":1,\"tid\":2,\"ts\":5},"
                  "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":6,\"dur\":4,\"name\":\"x\"}"
                  "]}");
    assert_int_equal(m->unmatched_ends, 2);
    assert_int_equal(m->truncated_zones, 1);
    const loupe_slice *open = find_slice(m, "open", NULL);
    /* origin 1 µs; the trace's last timestamp is 10 µs (x's end) */
    assert_int_equal(open->start_ns, 1000);
    assert_int_equal(open->dur_ns, 8000);
    assert_int_equal(open->flags, LOUPE_SLICE_TRUNCATED);
    const loupe_slice *closed = find_slice(m, "closed", NULL);
    assert_int_equal(closed->dur_ns, 1000);
    assert_int_equal(closed->depth, 1);
    assert_int_equal(closed->flags, 0);
    assert_int_equal(m->duration_ns, 9000);
    /* events counted per thread for a file loupe did not write */
    assert_int_equal(find_thread(m, 1)->events_recorded, 4);
    loupe_model_free(m);

    /* an E earlier than its B is ignored and counted; the B stays open */
    m = read_text("[{\"ph\":\"B\",\"tid\":1,\"ts\":5,\"name\":\"a\"},"
                  "{\"ph\":\"E\",\"tid\":1,\"ts\":4}]");
    assert_int_equal(m->unmatched_ends, 1);
    assert_int_equal(m->truncated_zones, 1);
    loupe_model_free(m);
}

static void test_flows(void **state) {
    (void)state;
    loupe_model *m = read_text(
        "{\"traceEvents\":["
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":10,\"name\":\"parent\"},"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":2,\"name\":\"send\",\"bind_id\":7,"
        "\"flow_out\":true},"
        /* the consumer comes first in the file: ends pair in time order */
        "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":5,\"dur\":2,\"name\":\"recv\",\"bind_id\":7,"
        "\"flow_in\":true},"
        "{\"ph\":\"B\",\"pid\":1,\"tid\":2,\"ts\":4,\"name\":\"step\",\"bind_id\":\"0x10\","
        "\"flow_in\":true,\"flow_out\":true},"
        "{\"ph\":\"E\",\"pid\":1,\"tid\":2,\"ts\":4.5},"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":3.5,\"dur\":0.2,\"name\":\"a\",\"bind_id\":16,"
        "\"flow_out\":true},"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":8,\"dur\":1,\"name\":\"z\",\"bind_id\":\"10\","
        "\"flow_in\":true},"
        /* no direction: ignored */
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":9.5,\"dur\":0.1,\"name\":\"nodir\","
        "\"bind_id\":99},"
        /* flow v1 as loupe's writer emits for extra flow ends: bp e binds to the enclosing slice */
        "{\"ph\":\"s\",\"pid\":1,\"tid\":1,\"ts\":1.5,\"id\":42,\"cat\":\"flow\",\"name\":\"flow\","
        "\"bp\":\"e\"},"
        "{\"ph\":\"f\",\"pid\":1,\"tid\":2,\"ts\":5.5,\"id\":42,\"cat\":\"flow\",\"name\":\"flow\","
        "\"bp\":\"e\"},"
        /* same id, another name: another flow, with no start */
        "{\"ph\":\"f\",\"pid\":1,\"tid\":2,\"ts\":5,\"id\":42,\"cat\":\"flow\",\"name\":\"other\"}"
        "]}");
    /* threads 1 then 2; slices by start */
    assert_int_equal(m->thread_count, 2);
    assert_int_equal(m->flow_count, 4);
    int seen7 = 0, seen16a = 0, seen16b = 0, seen42 = 0;
    for (size_t i = 0; i < m->flow_count; i++) {
        const loupe_flow *f = &m->flows[i];
        const char *from = m->threads[f->from_thread].slices[f->from_slice].name;
        const char *to = m->threads[f->to_thread].slices[f->to_slice].name;
        if (f->id == 7) {
            assert_string_equal(from, "send");
            assert_string_equal(to, "recv");
            seen7++;
        } else if (f->id == 16 && strcmp(from, "a") == 0) {
            assert_string_equal(to, "step");
            seen16a++;
        } else if (f->id == 16) {
            assert_string_equal(from, "step");
            assert_string_equal(to, "z");
            seen16b++;
        } else if (f->id == 42) {
            assert_string_equal(from, "send");
            assert_string_equal(to, "recv");
            seen42++;
        }
    }
    assert_int_equal(seen7 + seen16a + seen16b + seen42, 4);
    assert_int_equal(seen7 * seen16a * seen16b * seen42, 1);
    loupe_model_free(m);
}

static void test_counters_instants(void **state) {
    (void)state;
    loupe_model *m =
        read_text("{\"traceEvents\":["
                  "{\"ph\":\"C\",\"pid\":1,\"ts\":10,\"name\":\"mem\",\"args\":{\"value\":5}},"
                  "{\"ph\":\"C\",\"pid\":1,\"ts\":12,\"name\":\"q\",\"args\":{\"a\":1,\"b\":2.5,"
                  "\"c\":\"7.25\",\"d\":\"x\",\"e\":true}},"
                  "{\"ph\":\"i\",\"pid\":1,\"tid\":3,\"ts\":11,\"s\":\"t\",\"name\":\"mark\","
                  "\"args\":{\"k\":\"v\"}},"
                  "{\"ph\":\"I\",\"pid\":1,\"tid\":3,\"ts\":10.5,\"name\":\"old\"}"
                  "]}");
    assert_int_equal(m->counter_count, 4);
    assert_string_equal(m->counters[0].name, "mem");
    assert_int_equal(m->counters[0].ts_ns, 0);
    assert_int_equal(m->counters[0].is_double, 0);
    assert_int_equal(m->counters[0].i, 5);
    int a = 0, b = 0, c = 0;
    for (size_t i = 1; i < 4; i++) {
        const loupe_counter_sample *s = &m->counters[i];
        assert_int_equal(s->ts_ns, 2000);
        if (strcmp(s->name, "q a") == 0) {
            assert_false(s->is_double);
            assert_int_equal(s->i, 1);
            a++;
        } else if (strcmp(s->name, "q b") == 0) {
            assert_true(s->is_double);
            assert_true(s->d == 2.5);
            b++;
        } else {
            assert_string_equal(s->name, "q c");
            assert_true(s->is_double);
            assert_true(s->d == 7.25);
            c++;
        }
    }
    assert_int_equal(a + b + c, 3);
    const loupe_model_thread *th = find_thread(m, 3);
    assert_int_equal(th->instant_count, 2);
    assert_string_equal(th->instants[0].name, "old");
    assert_int_equal(th->instants[0].ts_ns, 500);
    assert_string_equal(th->instants[1].name, "mark");
    assert_int_equal(th->instants[1].ts_ns, 1000);
    assert_int_equal(th->instants[1].arg_count, 1);
    assert_string_equal(th->instants[1].args[0].v.s, "v");
    loupe_model_free(m);
}

/* An integer counter value beyond 2^53 round-trips exactly through the Chrome JSON writer:
 * written as a string of its digits typed by loupe_types (a JavaScript number would round
 * INT64_MAX to 9223372036854776000; 0.4 wrote it bare), read back as the int64 it was. */
static void test_big_counter(void **state) {
    (void)state;
    loupe_model *m = read_text("{\"traceEvents\":[{\"ph\":\"C\",\"pid\":1,\"tid\":1,\"ts\":1,"
                               "\"name\":\"big\",\"args\":{\"value\":9223372036854775807}},"
                               "{\"ph\":\"C\",\"pid\":1,\"tid\":1,\"ts\":2,\"name\":\"small\","
                               "\"args\":{\"value\":-9007199254740992}}]}");
    assert_int_equal(m->counter_count, 2);
    const char *out = path_in("big.json");
    assert_int_equal(loupe_trace_write(m, out, LOUPE_FILE_CHROME_JSON), 0);
    loupe_model_free(m);
    char *text = tu_read_file(out, NULL);
    assert_non_null(strstr(text, "\"args\":{\"value\":\"9223372036854775807\",\"loupe_types\":{"
                                 "\"value\":\"int64\"}}"));
    assert_non_null(strstr(text, "\"args\":{\"value\":-9007199254740992}"));
    free(text);
    m = NULL;
    assert_int_equal(loupe_trace_read(out, &m), 0);
    assert_int_equal(m->counter_count, 2);
    for (size_t i = 0; i < 2; i++) {
        const loupe_counter_sample *c = &m->counters[i];
        assert_false(c->is_double);
        if (strcmp(c->name, "big") == 0) {
            assert_true(c->i == INT64_MAX);
        } else {
            assert_string_equal(c->name, "small");
            assert_true(c->i == -9007199254740992ll);
        }
    }
    loupe_model_free(m);
}

static void test_args(void **state) {
    (void)state;
    loupe_model *m = read_text(
        "{\"traceEvents\":[{\"ph\":\"X\",\"tid\":1,\"ts\":0,\"dur\":1,\"name\":\"a\",\"args\":{"
        "\"i\":-42,\"big\":9223372036854775807,\"u\":18446744073709551615,"
        "\"u2\":9223372036854775808,\"d\":1.5,\"e\":1e3,\"t\":true,\"f\":false,"
        "\"s\":\"h\\u00e9llo\",\"o\":{\"x\":[1,2,{\"y\":null}]},\"arr\":[1,\"two\"],\"n\":null}},"
        /* a tid above INT64_MAX */
        "{\"ph\":\"X\",\"tid\":18446744073709551615,\"ts\":2,\"dur\":1,\"name\":\"b\"}"
        "]}");
    size_t st = 0;
    const loupe_slice *s = find_slice(m, "a", &st);
    size_t s_nargs;
    const loupe_arg *s_args =
        loupe_slice_args(&m->threads[st], (size_t)(s - m->threads[st].slices), &s_nargs);
    assert_int_equal(s_nargs, 12);
    const loupe_arg *a = find_arg(s_args, s_nargs, "i");
    assert_int_equal(a->type, LOUPE_ARG_INT64);
    assert_int_equal(a->v.i, -42);
    a = find_arg(s_args, s_nargs, "big");
    assert_int_equal(a->type, LOUPE_ARG_INT64);
    assert_true(a->v.i == INT64_MAX);
    a = find_arg(s_args, s_nargs, "u");
    assert_int_equal(a->type, LOUPE_ARG_UINT64);
    assert_true(a->v.u == UINT64_MAX);
    a = find_arg(s_args, s_nargs, "u2");
    assert_int_equal(a->type, LOUPE_ARG_UINT64);
    assert_true(a->v.u == 9223372036854775808ull);
    a = find_arg(s_args, s_nargs, "d");
    assert_int_equal(a->type, LOUPE_ARG_DOUBLE);
    assert_true(a->v.d == 1.5);
    a = find_arg(s_args, s_nargs, "e");
    assert_int_equal(a->type, LOUPE_ARG_DOUBLE);
    assert_true(a->v.d == 1000.0);
    a = find_arg(s_args, s_nargs, "t");
    assert_int_equal(a->type, LOUPE_ARG_BOOL);
    assert_int_equal(a->v.b, 1);
    a = find_arg(s_args, s_nargs, "f");
    assert_int_equal(a->type, LOUPE_ARG_BOOL);
    assert_int_equal(a->v.b, 0);
    a = find_arg(s_args, s_nargs, "s");
    assert_int_equal(a->type, LOUPE_ARG_STRING);
    assert_string_equal(a->v.s, "h\xc3\xa9llo");
    a = find_arg(s_args, s_nargs, "o");
    assert_int_equal(a->type, LOUPE_ARG_STRING);
    assert_string_equal(a->v.s, "{\"x\":[1,2,{\"y\":null}]}");
    a = find_arg(s_args, s_nargs, "arr");
    assert_string_equal(a->v.s, "[1,\"two\"]");
    a = find_arg(s_args, s_nargs, "n");
    assert_int_equal(a->type, LOUPE_ARG_STRING);
    assert_string_equal(a->v.s, "null");
    size_t t;
    find_slice(m, "b", &t);
    assert_true(m->threads[t].tid == UINT64_MAX);
    loupe_model_free(m);
}

/* A file loupe wrote: its metadata maps back onto the model, its ts are already relative. */
static void test_loupe_metadata(void **state) {
    (void)state;
#define LOUPE_FILE_FMT                                                                             \
    "{\"displayTimeUnit\":\"ns\",\"%s\":{\"loupe_version\":\"0.1.0\",\"clock\":\"tsc\","           \
    "\"tsc_ghz\":\"2.500000000\",\"origin_unix_ns\":\"1700000000000000000\","                      \
    "%s\"host\":\"box\",\"pid\":\"42\",\"events_recorded\":\"9\",\"events_dropped\":\"5\","        \
    "\"unmatched_ends\":\"2\",\"truncated_zones\":\"1\",\"loupe_thread_43_recorded\":\"4\","       \
    "\"loupe_thread_43_dropped\":\"5\",\"loupe_thread_43_capacity_needed\":\"9\","                 \
    "\"loupe_thread_44_recorded\":\"0\",\"loupe_thread_44_dropped\":\"0\","                        \
    "\"loupe_thread_44_capacity_needed\":\"0\",\"run\":\"nightly\"},\n"                            \
    "\"traceEvents\":[\n"                                                                          \
    "{\"ph\":\"M\",\"pid\":42,\"tid\":42,\"name\":\"process_name\",\"args\":{\"name\":\"app\"}}"   \
    ","                                                                                            \
    "{\"ph\":\"M\",\"pid\":42,\"tid\":43,\"name\":\"thread_name\",\"args\":{\"name\":\"main\"}}"   \
    ","                                                                                            \
    "{\"ph\":\"X\",\"pid\":42,\"tid\":43,\"ts\":5.000,\"dur\":2.500,\"name\":\"z\"},"              \
    "{\"ph\":\"X\",\"pid\":42,\"tid\":43,\"ts\":6.000,\"dur\":9.000,\"name\":\"t\","               \
    "\"args\":{\"loupe_truncated\":true}}]}"
    for (int variant = 0; variant < 4; variant++) {
        char text[4096];
        snprintf(text, sizeof text, LOUPE_FILE_FMT, variant & 1 ? "otherData" : "metadata",
                 variant & 2 ? "" : "\"duration_ns\":\"20000\",");
        loupe_model *m = read_text(text);
        assert_string_equal(m->clock, "tsc");
        assert_true(m->tsc_ghz == 2.5);
        assert_true(m->origin_unix_ns == 1700000000000000000ull);
        assert_int_equal(m->duration_ns, variant & 2 ? 15000 - 5000 : 20000);
        assert_string_equal(m->host, "box");
        assert_int_equal(m->pid, 42);
        assert_string_equal(m->process_name, "app");
        assert_int_equal(m->unmatched_ends, 2);
        assert_int_equal(m->truncated_zones, 1);
        const loupe_model_thread *th = find_thread(m, 43);
        assert_string_equal(th->name, "main");
        assert_int_equal(th->events_recorded, 4);
        assert_int_equal(th->events_dropped, 5);
        assert_int_equal(th->capacity_needed, 9);
        /* a thread known only from its loss keys is kept; t, which begins inside z and ends
         * after it, is on an overlap sibling of thread 43 (model.h) */
        assert_int_equal(m->thread_count, 3);
        assert_int_equal(find_thread(m, 44)->slice_count, 0);
        assert_int_equal(loupe_model_events_dropped(m), 5);
        /* no origin shift: ts 5 µs stays 5000 ns */
        assert_int_equal(th->slices[0].start_ns, 5000);
        assert_int_equal(th->slices[0].dur_ns, 2500);
        assert_int_equal(th->slices[1].flags, LOUPE_SLICE_TRUNCATED);
        assert_int_equal(tu_nargs(th, 1), 0);
        /* only the keys loupe does not own are metadata */
        assert_int_equal(m->metadata_count, 1);
        assert_string_equal(tu_meta(m, "run", NULL), "nightly");
        loupe_model_free(m);
    }
}

/* ---- hostile input ---- */

static void expect_format(const char *text, const char *detail) {
    int rc = read_fail(text);
    if (rc != LOUPE_EFORMAT || strstr(loupe_last_error(), detail) == NULL) {
        fail_msg("input %.60s: got %s \"%s\", want EFORMAT with \"%s\"", text, loupe_err_name(rc),
                 loupe_last_error(), detail);
    }
}

static void test_hostile(void **state) {
    (void)state;
    /* refused from the first bytes, before the file is read whole */
    expect_format("hello", "bad.json: not a trace: it starts with bytes 68 65 6c 6c (Chrome JSON "
                           "starts with '[' or '{', Perfetto protobuf and XPlane with 0a)");
    expect_format("", "bad.json: empty file (not a trace)");
    expect_format("{\"traceEvents\":[{\"ph\":\"X\",\"ts\":NaN,\"dur\":1}]}",
                  "bad.json: line 1 column 32 (event 0): invalid token (a value is a string, a "
                  "number, an object, an array, true, false or null)");
    expect_format("[{\"ph\":\"X\",\"ts\":Infinity,\"dur\":1}]", "line 1 column 17 (event 0): "
                                                                "invalid token");
    expect_format("{\"traceEvents\":[{\"ph\":\"X\",\"ts\":\"abc\",\"dur\":1}]}",
                  "event 0: ts is not a number (\"abc\")");
    expect_format("[{\"ph\":\"i\",\"ts\":1},{\"ph\":\"X\",\"ts\":2,\"dur\":[1]}]",
                  "event 1: dur is not a number");
    expect_format("[{\"ph\":\"X\",\"ts\":1}]", "event 0: X without dur");
    expect_format("[{\"ph\":\"B\"}]", "event 0: no ts");
    expect_format("[1]", "event 0: not an object");
    expect_format("[{\"ts\":1}]", "event 0: no \"ph\" string");
    expect_format("[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"name\":5}]",
                  "event 0: name is not a string");
    expect_format("[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"tid\":[]}]",
                  "event 0: tid is not an integer (an array)");
    expect_format("{\"events\":[]}", "no traceEvents array");
    expect_format("\"just a string\"", "starts with bytes 22 6a 75 73");
    expect_format("{\"metadata\":{\"loupe_version\":\"1\",\"duration_ns\":\"x\"},"
                  "\"traceEvents\":[]}",
                  "metadata \"duration_ns\" is not a non-negative integer");
    /* deeper than the parser's 1000 levels */
    size_t depth = 5000;
    char *deep = malloc(2 * depth + 64);
    strcpy(deep, "[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"args\":{\"a\":");
    size_t n = strlen(deep);
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    strcpy(deep + n + 2 * depth, "}}]");
    expect_format(deep, "(event 0): nesting deeper than 1000 levels");
    free(deep);
    /* an unterminated array with a bad event: the bad event's error, not the missing ']' */
    expect_format("[{\"ph\":\"X\",\"ts\":1,\"dur\":1},\n{\"ph\":\"X\",\"ts\":NaN,\"dur\":1},\n"
                  "{\"ph\":\"X\",\"ts\":3,\"dur\":1},\n",
                  "line 2 column 16 (event 1): invalid token");
    /* two events without a comma between them */
    expect_format("[{\"ph\":\"X\",\"ts\":1,\"dur\":1} {\"ph\":\"X\",\"ts\":3,\"dur\":1}]",
                  "bad.json: line 1 column 28: ',' or ']' expected after an event");
    expect_format("{\"traceEvents\":[] \"x\":1}",
                  "bad.json: line 1 column 19: ',' or '}' expected");
    expect_format("{\"traceEvents\":[]} x", "bad.json: line 1 column 20: text after the end of "
                                            "the trace");
    /* a string with a NUL is cut there (the model's strings are C strings) */
    loupe_model *mk = read_text("[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"name\":\"a\","
                                "\"args\":{\"s\":\"\\u0000loupe-u64:5\"}}]");
    assert_int_equal(tu_args(&mk->threads[0], 0)[0].type, LOUPE_ARG_STRING);
    assert_string_equal(tu_args(&mk->threads[0], 0)[0].v.s, "");
    loupe_model_free(mk);
    /* unknown phases are skipped, as Perfetto does */
    loupe_model *m = read_text("[{\"ph\":\"O\",\"ts\":\"no\"},{\"ph\":\"Q\"},{\"ph\":\"XX\"}]");
    assert_int_equal(m->thread_count, 0);
    loupe_model_free(m);
}

/* Every prefix of a trace, and every byte of it replaced by characters that matter to JSON:
 * a model or LOUPE_EFORMAT, never a crash (run under ASan/UBSan by the sanitizer build). */
static void test_mutations(void **state) {
    (void)state;
    static const char subst[] = {'"', '\\', '{', ']', ',', '9', '-', 0, (char)0xff};
    size_t n = strlen(NESTED);
    char *buf = malloc(n + 1);
    const char *p = path_in("mut.json");
    for (size_t len = 0; len <= n; len++) {
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(NESTED, 1, len, f), len);
        fclose(f);
        loupe_model *m = NULL;
        int rc = loupe_trace_read(p, &m);
        assert_true(rc == 0 || rc == LOUPE_EFORMAT);
        loupe_model_free(m);
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof subst; k++) {
            memcpy(buf, NESTED, n);
            buf[i] = subst[k];
            FILE *f = fopen(p, "wb");
            assert_non_null(f);
            assert_int_equal(fwrite(buf, 1, n, f), n);
            fclose(f);
            loupe_model *m = NULL;
            int rc = loupe_trace_read(p, &m);
            if (rc != 0 && rc != LOUPE_EFORMAT) {
                fail_msg("byte %zu -> %d: %s", i, subst[k], loupe_last_error());
            }
            loupe_model_free(m);
        }
    }
    free(buf);
}

static void test_io_errors(void **state) {
    (void)state;
    loupe_model *m = NULL;
    const char *missing = path_in("no-such-file.json");
    assert_int_equal(loupe_trace_read(missing, &m), LOUPE_EIO);
    assert_null(m);
    char want[4200];
    snprintf(want, sizeof want, "%s: No such file or directory", missing);
    assert_string_equal(loupe_last_error(), want);
    assert_int_equal(loupe_trace_read(g_dir, &m), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), "Is a directory"));
    assert_int_equal(loupe_trace_read(NULL, &m), LOUPE_EINVALID);
    /* over 4 GiB: refused before reading (a sparse file costs nothing) */
    const char *big = path_in("big.json");
    tu_write_file(big, "[");
    assert_int_equal(truncate(big, (off_t)(4ull << 30) + 1), 0);
    assert_int_equal(loupe_trace_read(big, &m), LOUPE_EFORMAT);
    assert_non_null(strstr(loupe_last_error(), "big.json: the file holds 4294967297 bytes; loupe "
                                               "reads traces of at most 4294967296 bytes (4 GiB "
                                               "unless LOUPE_READ_MAX_BYTES says otherwise)"));
    unlink(big);
}

/* ---- loupe_trace_find ---- */

static void mkdir_p(const char *p) {
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    assert_int_equal(system(cmd), 0);
}

static void test_find(void **state) {
    (void)state;
    char log[2048], p[4096], out[4096];
    snprintf(log, sizeof log, "%s/log", g_dir);
    static const char *const runs[] = {"2026_01_01_00_00_00", "2026_01_01_00_00_00_10",
                                       "2026_01_01_00_00_00_2"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/plugins/profile/%s", log, runs[i]);
        mkdir_p(p);
        snprintf(p, sizeof p, "%s/plugins/profile/%s/host.trace.json.gz", log, runs[i]);
        tu_write_file(p, "[]");
        snprintf(p, sizeof p, "%s/plugins/profile/%s/perfetto_trace.json.gz", log, runs[i]);
        tu_write_file(p, "[]");
    }
    /* the newest run: _10 after _2 after the plain name */
    assert_int_equal(loupe_trace_find(log, out, sizeof out), 0);
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00_10/host.trace.json.gz", log);
    assert_string_equal(out, p);
    /* a file is itself */
    assert_int_equal(loupe_trace_find(p, out, sizeof out), 0);
    assert_string_equal(out, p);
    /* a run directory: its one *.trace.json.gz wins over perfetto_trace.json.gz */
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00_2", log);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), 0);
    assert_non_null(strstr(out, "_2/host.trace.json.gz"));
    /* two traces in one run: an error naming both */
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00_2/other.trace.json.gz", log);
    tu_write_file(p, "[]");
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00_2", log);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), "holds 2 traces (host.trace.json.gz, "
                                               "other.trace.json.gz)"));
    /* a directory with one plain .json */
    snprintf(p, sizeof p, "%s/plain", g_dir);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/plain/x.json", g_dir);
    tu_write_file(p, "[]");
    snprintf(p, sizeof p, "%s/plain", g_dir);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), 0);
    snprintf(p, sizeof p, "%s/plain/x.json", g_dir);
    assert_string_equal(out, p);
    /* nothing inside */
    snprintf(p, sizeof p, "%s/empty", g_dir);
    mkdir_p(p);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), "empty: no complete trace in it (*.xplane.pb, "
                                               "*.pftrace, *.json, *.json.gz) and no "
                                               "plugins/profile/<run> directory"));
    /* newer runs without a complete trace (a failed capture; a kill during the write) are
     * skipped, and named */
    assert_string_equal(loupe_trace_find_skipped(), "");
    snprintf(p, sizeof p, "%s/plugins/profile/2027_01_01_00_00_00", log);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/plugins/profile/2027_01_02_00_00_00", log);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/plugins/profile/2027_01_02_00_00_00/host.trace.json.gz.tmp", log);
    tu_write_file(p, "[");
    assert_int_equal(loupe_trace_find(log, out, sizeof out), 0);
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00_10/host.trace.json.gz", log);
    assert_string_equal(out, p);
    assert_string_equal(loupe_trace_find_skipped(),
                        "2027_01_02_00_00_00 (only .tmp files: a write that did not finish), "
                        "2027_01_01_00_00_00 (no trace file)");
    /* the fastest complete file of a run: .xplane.pb, then .pftrace, then .trace.json.gz */
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00/host.pftrace", log);
    tu_write_file(p, "x");
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00", log);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), 0);
    assert_non_null(strstr(out, "00_00_00/host.pftrace"));
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00/host.xplane.pb", log);
    tu_write_file(p, "x");
    snprintf(p, sizeof p, "%s/plugins/profile/2026_01_01_00_00_00", log);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), 0);
    assert_non_null(strstr(out, "00_00_00/host.xplane.pb"));
    /* no run holds one */
    snprintf(p, sizeof p, "%s/log2/plugins/profile/2027_01_01_00_00_00", g_dir);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/log2", g_dir);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), "log2/plugins/profile: no run holds a complete "
                                               "trace: 2027_01_01_00_00_00 (no trace file)"));
    /* missing path, small buffer, NULL */
    snprintf(p, sizeof p, "%s/nope", g_dir);
    assert_int_equal(loupe_trace_find(p, out, sizeof out), LOUPE_EIO);
    snprintf(out, sizeof out, "%s/nope: No such file or directory", g_dir);
    assert_string_equal(loupe_last_error(), out);
    snprintf(p, sizeof p, "%s/plain/x.json", g_dir);
    assert_int_equal(loupe_trace_find(p, out, 8), LOUPE_EINVALID);
    assert_int_equal(loupe_trace_find(NULL, out, sizeof out), LOUPE_EINVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_big_counter),
        cmocka_unit_test(test_uftrace),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_fast_x),
        cmocka_unit_test(test_gzip),
        cmocka_unit_test(test_array_forms),
        cmocka_unit_test(test_unmatched_and_truncated),
        cmocka_unit_test(test_flows),
        cmocka_unit_test(test_counters_instants),
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_loupe_metadata),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_find),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
