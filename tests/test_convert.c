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
            assert_int_equal(tu_nargs(x, i), tu_nargs(y, i));
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
    assert_int_equal(tu_args(&b->threads[0], 0)[0].v.i, 4);
    assert_string_equal(tu_args(&c->threads[0], 0)[1].v.s, "x\"y");
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
    assert_string_equal(text, "main \"thr\";outer 59499\n"
                              "main \"thr\";outer;in:ner #a=1# 40501\n"
                              "worker;work \xe2\x82\xac 5000\n"
                              "worker;work \xe2\x82\xac;line break 2000\n");
    free(text);
    /* --merge-threads: one root for both threads */
    assert_int_equal(convert("in.json -o m.folded --merge-threads", NULL), 0);
    snprintf(p, sizeof p, "%s/m.folded", g_dir);
    text = tu_read_file(p, &n);
    assert_string_equal(text, "all threads;outer 59499\n"
                              "all threads;outer;in:ner #a=1# 40501\n"
                              "all threads;work \xe2\x82\xac 5000\n"
                              "all threads;work \xe2\x82\xac;line break 2000\n");
    free(text);
    char *o = NULL;
    assert_int_equal(convert("in.json -o m.json --merge-threads", &o), 2);
    assert_non_null(strstr(o, "loupe convert: --merge-threads is for folded stacks and SVG flame "
                              "graphs, not json\n"));
    free(o);
    /* --to wins over the extension; the same bytes from an XPlane input */
    assert_int_equal(convert("in.json -o t.xplane.pb", NULL), 0);
    assert_int_equal(convert("t.xplane.pb -o stacks.json --to folded", NULL), 0);
    snprintf(p, sizeof p, "%s/stacks.json", g_dir);
    text = tu_read_file(p, &n);
    assert_non_null(strstr(text, "outer 59499\n"));
    free(text);
}

/* Two unnamed threads with the same tid in no name, and two named alike: each its own root. */
static void test_folded_roots(void **state) {
    (void)state;
    char p[4200];
    snprintf(p, sizeof p, "%s/roots.json", g_dir);
    tu_write_file(p, "{\"traceEvents\":[\n"
                     "{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"thread_name\","
                     "\"args\":{\"name\":\"w\"}},\n"
                     "{\"ph\":\"M\",\"pid\":1,\"tid\":2,\"name\":\"thread_name\","
                     "\"args\":{\"name\":\"w\"}},\n"
                     "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":1,\"name\":\"f\"},\n"
                     "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":0,\"dur\":2,\"name\":\"f\"},\n"
                     "{\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":0,\"dur\":3,\"name\":\"f\"}\n"
                     "]}\n");
    assert_int_equal(convert("roots.json -o roots.folded", NULL), 0);
    snprintf(p, sizeof p, "%s/roots.folded", g_dir);
    size_t n;
    char *text = tu_read_file(p, &n);
    assert_string_equal(text, "w (tid 1);f 1000\nw (tid 2);f 2000\nthread 3;f 3000\n");
    free(text);
}

/* 30,000 nested zones (the hostile case that printed 900 MB of folded stacks): stacks are cut at
 * 1024 zones, the rest of the chain is one "[deeper zones]" frame holding its time, so the
 * output is about 1024 * 1025 / 2 frames of 2 bytes, not 450M frames. */
static void test_folded_deep(void **state) {
    (void)state;
    enum { DEPTH = 30000, CUT = 1024 };
    char p[4200];
    snprintf(p, sizeof p, "%s/deep.json", g_dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"traceEvents\":[\n", f);
    for (int i = 0; i < DEPTH; i++) {
        fprintf(f, "%s{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%d,\"dur\":%d,\"name\":\"f\"}",
                i ? ",\n" : "", i, 2 * (DEPTH - i));
    }
    fputs("]}\n", f);
    fclose(f);
    assert_int_equal(convert("deep.json -o deep.folded", NULL), 0);
    snprintf(p, sizeof p, "%s/deep.folded", g_dir);
    size_t n;
    char *text = tu_read_file(p, &n);
    /* lines: "thread 1" + k times ";f" + " 2000\n" for k = 1..1024 (each zone's self: 1 µs on
     * either side of its child), then the deeper frame: the zone at depth 1024's 2 * 28976 µs */
    size_t expect = 0;
    for (size_t k = 1; k <= CUT; k++) {
        expect += 8 + 2 * k + 6;
    }
    expect += 8 + 2 * CUT + strlen(";[deeper zones] 57952000\n");
    assert_int_equal(n, expect);
    assert_true(n < 1200000); /* 1.1 MB, from 1.46 MB of input; was 900 MB */
    const char *last = text + n - strlen(";f;[deeper zones] 57952000\n");
    assert_string_equal(last, ";f;[deeper zones] 57952000\n");
    assert_true(strncmp(text, "thread 1;f 2000\nthread 1;f;f 2000\n", 32) == 0);
    free(text);
    /* the SVG of it is bounded too: one box per depth */
    assert_int_equal(convert("deep.json -o deep.svg", NULL), 0);
    snprintf(p, sizeof p, "%s/deep.svg", g_dir);
    text = tu_read_file(p, &n);
    size_t boxes = 0;
    for (const char *q = text; (q = strstr(q, "<rect x=\"")) != NULL; q++) {
        boxes++;
    }
    assert_int_equal(boxes, 1 + 1 + CUT + 1); /* background, root, 1024 zones, deeper */
    free(text);
}

/* The SVG flame graph byte for byte against tests/golden/flame.svg, on tests/golden/flame.json
 * (hostile names: markup, quotes, '&', invalid UTF-8, a control character, U+FFFF).
 * Refresh after an intended change (then review the diff):
 *     build-dev/loupe convert tests/golden/flame.json -o tests/golden/flame.svg */
static void test_svg_golden(void **state) {
    (void)state;
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' convert '%s/tests/golden/flame.json' -o '%s/flame.svg' 2>&1",
             tu_cli(), LOUPE_SOURCE_DIR, g_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/flame.svg", g_dir);
    size_t n, gn;
    char *got = tu_read_file(p, &n);
    char *want = tu_read_file(LOUPE_SOURCE_DIR "/tests/golden/flame.svg", &gn);
    assert_string_equal(got, want);
    /* escaped once, never raw: the name "<b>&\"x'" */
    assert_non_null(strstr(got, "<title>&lt;b&gt;&amp;&quot;x&apos; (4000 ns, 40.00%)</title>"));
    /* the tab as '?', U+FFFF (not an XML character) as '?' */
    assert_non_null(strstr(got, "<title>bad\xc3\xbf?name? (1000 ns, 10.00%)</title>"));
    assert_null(strstr(got, "<b>"));
    free(got);
    free(want);
    /* --to svg and the alias */
    snprintf(cmd, sizeof cmd,
             "'%s' convert '%s/tests/golden/flame.json' -o '%s/flame.out' --to flamegraph 2>&1",
             tu_cli(), LOUPE_SOURCE_DIR, g_dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(p, sizeof p, "%s/flame.out", g_dir);
    got = tu_read_file(p, &n);
    assert_int_equal(n, gn);
    free(got);
}

/* Invalid UTF-8 cannot come through a JSON reader: a hand-built model carries it to the SVG
 * writer (loupe_trace_write), which writes U+FFFD for each bad byte. */
static void test_svg_invalid_utf8(void **state) {
    (void)state;
    loupe_slice sl[2];
    memset(sl, 0, sizeof sl);
    sl[0] = (loupe_slice){.start_ns = 0, .dur_ns = 100, .name = "x\xff\xc3y"};
    sl[1] = (loupe_slice){.start_ns = 10, .dur_ns = 50, .name = "\xed\xa0\x80", .depth = 1};
    loupe_model_thread th;
    memset(&th, 0, sizeof th);
    th.tid = 5;
    th.name = "";
    th.slice_count = 2;
    th.slices = sl;
    loupe_model m;
    memset(&m, 0, sizeof m);
    m.thread_count = 1;
    m.threads = &th;
    m.duration_ns = 100;
    char p[4200];
    snprintf(p, sizeof p, "%s/bad.svg", g_dir);
    assert_int_equal(loupe_trace_write(&m, p, LOUPE_FILE_SVG), 0);
    size_t n;
    char *got = tu_read_file(p, &n);
    assert_non_null(strstr(got, "<title>x\xef\xbf\xbd\xef\xbf\xbdy (100 ns, 100.00%)</title>"));
    /* a surrogate's three bytes: three U+FFFD */
    assert_non_null(strstr(got, "<title>\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd (50 ns, 50.00%)"));
    assert_non_null(strstr(got, "<title>thread 5 (100 ns, 100.00%)</title>"));
    for (size_t i = 0; i < n; i++) {
        assert_true((unsigned char)got[i] != 0xff && (unsigned char)got[i] != 0xed);
    }
    free(got);
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
    /* the user's path and what is wrong with it, not the temporary written first */
    assert_non_null(strstr(out,
                           "loupe convert: I/O error: cannot create /nonexistent-dir/x.json: "
                           "the directory /nonexistent-dir does not exist (create it first)\n"));
    assert_null(strstr(out, ".tmp"));
    free(out);
    assert_int_equal(convert("--help", &out), 0);
    assert_non_null(strstr(out, "usage: loupe convert IN -o OUT"));
    free(out);
}

/* -o -: the file on standard output, as the same conversion into a file has it (byte for byte
 * for folded stacks, whose writer has no timestamps or paths in it), the report on stderr with
 * "-" for the output, nothing named "-" left; without --to it is refused (0.4 wrote a file named
 * "-"). */
static void test_stdout(void **state) {
    (void)state;
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' convert in.json -o - --to folded > stdout.folded 2> stdout.err && "
             "'%s' convert in.json -o file.folded 2>/dev/null && cmp stdout.folded file.folded "
             "&& test ! -e ./-",
             g_dir, tu_cli(), tu_cli());
    assert_int_equal(tu_run(cmd, NULL), 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/stdout.err", g_dir);
    char *err = tu_read_file(p, NULL);
    assert_non_null(err);
    assert_non_null(strstr(err, "in.json -> - (folded, "));
    free(err);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' convert in.json -o - --to json > stdout.json", g_dir,
             tu_cli());
    assert_int_equal(tu_run(cmd, NULL), 0);
    loupe_model *a = read_in_dir("stdout.json"), *b = read_in_dir("in.json");
    same_zones(a, b);
    loupe_model_free(a);
    loupe_model_free(b);
    char *out;
    assert_int_equal(convert("in.json -o -", &out), 2);
    assert_non_null(strstr(out, "-o - writes to standard output: name the format with --to"));
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
        cmocka_unit_test(test_folded_roots),     cmocka_unit_test(test_folded_deep),
        cmocka_unit_test(test_svg_golden),       cmocka_unit_test(test_svg_invalid_utf8),
        cmocka_unit_test(test_perfetto),         cmocka_unit_test(test_errors),
        cmocka_unit_test(test_stdout),           cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
