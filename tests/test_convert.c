/* test_convert.c: `loupe convert` (the CLI, as users run it) and loupe_trace_write(): JSON ->
 * XPlane -> JSON keeps every zone; folded stacks exact; the format from --to or the extension;
 * usage errors exit 2 with a message, unreadable input exits 1; a failed write leaves no file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *g_dir;

static const char FIXTURE[] =
    "{\"traceEvents\":[\n"
    "{\"ph\":\"M\",\"pid\":1,\"tid\":11,\"name\":\"thread_name\",\"args\":{\"name\":\"main "
    "\\\"thr\\\"\"}},\n"
    "{\"ph\":\"M\",\"pid\":1,\"tid\":12,\"name\":\"thread_name\",\"args\":{\"name\":\"worker\"}},\n"
    "{\"ph\":\"X\",\"pid\":1,\"tid\":11,\"ts\":10,\"dur\":100,\"name\":\"outer\","
    "\"args\":{\"step_num\":4,\"tag\":\"x\\\"y\"}},\n"
    "{\"ph\":\"X\",\"pid\":1,\"tid\":11,\"ts\":20,\"dur\":30.5,\"name\":\"in;ner #a=1#\"},\n"
    "{\"ph\":\"X\",\"pid\":1,\"tid\":11,\"ts\":60,\"dur\":10.001,\"name\":\"in;ner #a=1#\"},\n"
    "{\"ph\":\"X\",\"pid\":1,\"tid\":12,\"ts\":15,\"dur\":7,\"name\":\"work \\u20ac\"},\n"
    "{\"ph\":\"X\",\"pid\":1,\"tid\":12,\"ts\":15,\"dur\":2,\"name\":\"line\\nbreak\"},\n"
    "{\"ph\":\"i\",\"pid\":1,\"tid\":12,\"ts\":16,\"s\":\"t\",\"name\":\"ping\"},\n"
    "{\"ph\":\"C\",\"pid\":1,\"ts\":12,\"name\":\"q\",\"args\":{\"value\":3}}\n"
    "]}\n";

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir("convert");
    char p[4200];
    snprintf(p, sizeof p, "%s/in.json", g_dir);
    tu_write_file(p, FIXTURE);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* Runs `loupe convert ARGS` in g_dir; returns the exit status, output in *out (may be NULL). */
static int convert(const char *args, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' convert %s 2>&1", g_dir, tu_cli(), args);
    char *o = NULL;
    int rc = tu_run(cmd, &o);
    if (out != NULL) {
        *out = o;
    } else {
        free(o);
    }
    return rc;
}

static loupe_model *read_in_dir(const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    loupe_model *m = NULL;
    int rc = loupe_trace_read(p, &m);
    if (rc != 0) {
        fail_msg("%s: %s", p, loupe_last_error());
    }
    return m;
}

static void same_zones(const loupe_model *a, const loupe_model *b) {
    assert_int_equal(a->thread_count, b->thread_count);
    for (size_t t = 0; t < a->thread_count; t++) {
        const loupe_model_thread *x = &a->threads[t], *y = &b->threads[t];
        assert_int_equal(x->tid, y->tid);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->slice_count, y->slice_count);
        for (size_t i = 0; i < x->slice_count; i++) {
            assert_string_equal(x->slices[i].name, y->slices[i].name);
            assert_int_equal(x->slices[i].start_ns, y->slices[i].start_ns);
            assert_int_equal(x->slices[i].dur_ns, y->slices[i].dur_ns);
            assert_int_equal(x->slices[i].depth, y->slices[i].depth);
            assert_int_equal(x->slices[i].arg_count, y->slices[i].arg_count);
        }
        assert_int_equal(x->instant_count, y->instant_count);
    }
    assert_int_equal(a->counter_count, b->counter_count);
}

static void test_json_xplane_json(void **state) {
    (void)state;
    char *out;
    assert_int_equal(convert("in.json -o t.xplane.pb", &out), 0);
    assert_non_null(strstr(out, "(xplane, "));
    assert_non_null(strstr(out, "2 threads, 5 slices)"));
    free(out);
    assert_int_equal(convert("t.xplane.pb -o back.json.gz", NULL), 0);
    loupe_model *a = read_in_dir("in.json"), *b = read_in_dir("t.xplane.pb"),
                *c = read_in_dir("back.json.gz");
    same_zones(a, b);
    same_zones(a, c);
    assert_int_equal(b->threads[0].slices[0].args[0].v.i, 4);
    assert_string_equal(c->threads[0].slices[0].args[1].v.s, "x\"y");
    loupe_model_free(a);
    loupe_model_free(b);
    loupe_model_free(c);
    /* gzip magic on the .gz output */
    size_t n;
    char p[4200];
    snprintf(p, sizeof p, "%s/back.json.gz", g_dir);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    unsigned char mg[2];
    assert_int_equal(fread(mg, 1, 2, f), 2);
    fclose(f);
    assert_int_equal(mg[0], 0x1f);
    assert_int_equal(mg[1], 0x8b);
    (void)n;
}

/* Folded stacks: self time in ns per distinct stack, ';' in names as ':', newlines as spaces. */
static void test_folded(void **state) {
    (void)state;
    assert_int_equal(convert("in.json -o f.folded", NULL), 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/f.folded", g_dir);
    size_t n;
    char *text = tu_read_file(p, &n);
    assert_string_equal(text, "outer;in:ner #a=1# 40501\n"
                              "outer 59499\n"
                              "work \xe2\x82\xac;line break 2000\n"
                              "work \xe2\x82\xac 5000\n");
    free(text);
    /* --to wins over the extension; the same bytes from an XPlane input */
    assert_int_equal(convert("in.json -o t.xplane.pb", NULL), 0);
    assert_int_equal(convert("t.xplane.pb -o stacks.json --to folded", NULL), 0);
    snprintf(p, sizeof p, "%s/stacks.json", g_dir);
    text = tu_read_file(p, &n);
    assert_non_null(strstr(text, "outer 59499\n"));
    free(text);
}

static void test_perfetto(void **state) {
    (void)state;
    assert_int_equal(convert("in.json -o t.pftrace", NULL), 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/t.pftrace", g_dir);
    size_t n;
    char *text = tu_read_file(p, &n);
    assert_true(n > 16);
    assert_int_equal((unsigned char)text[0], 0x0A); /* Trace.packet, field 1, length-delimited */
    free(text);
}

static void test_errors(void **state) {
    (void)state;
    char *out;
    assert_int_equal(convert("in.json -o out.unknown", &out), 2);
    assert_non_null(strstr(out, "cannot tell the format from 'out.unknown': name it with --to"));
    free(out);
    assert_int_equal(convert("in.json -o x.json --to yaml", &out), 2);
    assert_non_null(strstr(out, "unknown format 'yaml'"));
    free(out);
    assert_int_equal(convert("in.json", &out), 2);
    assert_non_null(strstr(out, "no output given (-o OUT)"));
    free(out);
    assert_int_equal(convert("missing.json -o x.json", &out), 1);
    assert_non_null(strstr(out, "missing.json: No such file or directory"));
    free(out);
    assert_int_equal(convert("in.json -o /nonexistent-dir/x.json", &out), 1);
    assert_non_null(strstr(out, "cannot create /nonexistent-dir/x.json.tmp"));
    free(out);
    assert_int_equal(convert("--help", &out), 0);
    assert_non_null(strstr(out, "usage: loupe convert IN -o OUT"));
    free(out);
}

static void test_format_names(void **state) {
    (void)state;
    assert_int_equal(loupe_file_format_from_name("a/h.xplane.pb"), LOUPE_FILE_XPLANE);
    assert_int_equal(loupe_file_format_from_name("t.json.gz"), LOUPE_FILE_CHROME_JSON);
    assert_int_equal(loupe_file_format_from_name("t.pftrace"), LOUPE_FILE_PERFETTO_PROTO);
    assert_int_equal(loupe_file_format_from_name("t.collapsed"), LOUPE_FILE_FOLDED);
    assert_int_equal(loupe_file_format_from_name("t.gz"), LOUPE_FILE_UNKNOWN);
    assert_int_equal(loupe_file_format_parse("perfetto"), LOUPE_FILE_PERFETTO_PROTO);
    assert_int_equal(loupe_file_format_parse(NULL), LOUPE_FILE_UNKNOWN);
    assert_int_equal(loupe_trace_write(NULL, "x", LOUPE_FILE_XPLANE), LOUPE_EINVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_xplane_json), cmocka_unit_test(test_folded),
        cmocka_unit_test(test_perfetto),         cmocka_unit_test(test_errors),
        cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
