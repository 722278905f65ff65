/* test_reader_bounds.c: readers that never mislead and stay bounded: what is dropped or
 * excluded is named in the model's warnings (exact texts), hostile input fails fast with a clear
 * message, size limits (LOUPE_READ_MAX_BYTES, the gzip ratio), 64-bit integers through every
 * format and back, the thread lookup's cost on 1e5 threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include "model/builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "testutil.h"

static const char *path_in(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", tu_dir, name);
    return buf;
}

/* Reads text as file name; the read must succeed. */
static loupe_model *read_ok(const char *name, const char *text) {
    const char *p = path_in(name);
    tu_write_file(p, text);
    loupe_model *m = NULL;
    int rc = loupe_trace_read(p, &m);
    if (rc != 0) {
        fail_msg("%s: %s", loupe_err_name(rc), loupe_last_error());
    }
    return m;
}

/* Asserts warning i is "<dir>/<name>: <rest>". */
static void warning_is(const loupe_model *m, size_t i, const char *name, const char *rest) {
    char want[8192];
    snprintf(want, sizeof want, "%s/%s: %s", tu_dir, name, rest);
    assert_true(i < m->warning_count);
    assert_string_equal(m->warnings[i], want);
}

static size_t slices(const loupe_model *m) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    return n;
}

static void test_absurd_times(void **state) {
    (void)state;
    /* one ts 46 years before the others: excluded, not a trace of 46 years */
    loupe_model *m = read_ok("neg.json", "[{\"ph\":\"X\",\"ts\":-1461972216707720,\"dur\":1,"
                                         "\"name\":\"bad\"},{\"ph\":\"X\",\"ts\":5,\"dur\":2,"
                                         "\"name\":\"ok\"},{\"ph\":\"X\",\"ts\":6,\"dur\":-3,"
                                         "\"name\":\"neg\"}]");
    assert_int_equal(slices(m), 1);
    assert_string_equal(m->threads[0].slices[0].name, "ok");
    assert_int_equal(m->duration_ns, 2000);
    assert_int_equal(m->warning_count, 2);
    warning_is(m, 0, "neg.json",
               "1 event excluded: a negative ts, or a ts, dur or end beyond 2^62 ns (the first: "
               "event 0, ts -1461972216707720000 ns, dur 1000 ns)");
    warning_is(m, 1, "neg.json", "1 X event with a negative dur skipped (the first: event 2)");
    loupe_model_free(m);
    /* beyond 2^62 ns, in every spelling */
    m = read_ok("far.json", "[{\"ph\":\"X\",\"ts\":1e300,\"dur\":1},"
                            "{\"ph\":\"X\",\"ts\":18446744073709551615,\"dur\":1},"
                            "{\"ph\":\"X\",\"ts\":99999999999999999999999,\"dur\":1},"
                            "{\"ph\":\"i\",\"ts\":-9999999999999999999},"
                            "{\"ph\":\"X\",\"ts\":1e400,\"dur\":1},"
                            "{\"ph\":\"X\",\"ts\":1,\"dur\":4611686018427387},"
                            "{\"ph\":\"X\",\"ts\":\"1e20\",\"dur\":1},"
                            "{\"ph\":\"X\",\"ts\":3,\"dur\":1,\"name\":\"ok\"}]");
    assert_int_equal(slices(m), 1);
    assert_int_equal(m->warning_count, 1);
    warning_is(m, 0, "far.json",
               "7 events excluded: a negative ts, or a ts, dur or end beyond 2^62 ns (the first: "
               "event 0, ts 1e300)");
    loupe_model_free(m);
    /* the largest ts in range converts to ns exactly from its decimal text */
    m = read_ok("edge.json", "[{\"ph\":\"X\",\"ts\":4611686018427387.000,\"dur\":0.903},"
                             "{\"ph\":\"X\",\"ts\":1.0005,\"dur\":0.0004}]");
    assert_int_equal(m->warning_count, 0);
    assert_int_equal(m->threads[0].slices[0].start_ns, 0);
    assert_int_equal(m->threads[0].slices[0].dur_ns, 0); /* ts 1000.5 ns -> 1001; dur 0.4 -> 0 */
    assert_true(m->threads[0].slices[1].start_ns == 4611686018427387000ull - 1001);
    assert_int_equal(m->threads[0].slices[1].dur_ns, 903);
    loupe_model_free(m);
}

static void test_damage(void **state) {
    (void)state;
    /* damage in the middle that runs to the end: the events before it, and a warning with the
     * bytes dropped */
    loupe_model *m = read_ok("mid.json", "[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"name\":\"A\"},"
                                         "{\"ph\":\"X\",\"ts\":1,\"du A,B,B]");
    assert_int_equal(slices(m), 1);
    assert_int_equal(m->warning_count, 1);
    warning_is(m, 0, "mid.json",
               "line 1 column 39: the input ends inside event 1 (the text ends inside a string): "
               "1 events read, the cut event (the last 27 bytes) dropped");
    loupe_model_free(m);
    /* an array not closed */
    m = read_ok("open.json",
                "[{\"ph\":\"X\",\"ts\":1,\"dur\":1},\n{\"ph\":\"X\",\"ts\":2,\"dur\":1}");
    assert_int_equal(slices(m), 2);
    assert_int_equal(m->warning_count, 1);
    warning_is(m, 0, "open.json",
               "the events array (line 1 column 1) is not closed: the input ends after event 2; "
               "2 events read");
    loupe_model_free(m);
    /* a cut last event in the object form: the object is not closed either */
    m = read_ok("cut.json",
                "{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1,\"dur\":1},{\"ph\":\"X\",\"ts\":");
    assert_int_equal(slices(m), 1);
    assert_int_equal(m->warning_count, 2);
    warning_is(m, 0, "cut.json",
               "line 1 column 43: the input ends inside event 1 (a value expected): 1 events "
               "read, the cut event (the last 15 bytes) dropped");
    warning_is(m, 1, "cut.json",
               "the top-level object is not closed: the input ends at byte 57; keys after that "
               "point (\"metadata\", loss accounting) are lost");
    loupe_model_free(m);
    /* a second traceEvents key */
    m = read_ok("dup.json", "{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1,\"dur\":1}],"
                            "\"traceEvents\":[{\"ph\":\"X\",\"ts\":2,\"dur\":1}]}");
    assert_int_equal(slices(m), 2);
    assert_int_equal(m->warning_count, 1);
    warning_is(m, 0, "dup.json",
               "line 1 column 44: a second \"traceEvents\" key; its events are read as well "
               "(from event 1)");
    loupe_model_free(m);
    /* a lone surrogate escape decodes as U+FFFD */
    m = read_ok("sur.json",
                "[{\"ph\":\"X\",\"ts\":1,\"dur\":1,\"name\":\"a\\ud800b\\ud83d\\ude00\"}]");
    assert_string_equal(m->threads[0].slices[0].name, "a\xef\xbf\xbd"
                                                      "b\xf0\x9f\x98\x80");
    loupe_model_free(m);
    /* a clean file has no warnings */
    m = read_ok("clean.json", "[{\"ph\":\"X\",\"ts\":1,\"dur\":1}]");
    assert_int_equal(m->warning_count, 0);
    assert_null(m->warnings);
    loupe_model_free(m);
}

/* Peak RSS so far, KiB. */
static long peak_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void expect_fail(const char *path, int code, const char *detail) {
    loupe_model *m = (loupe_model *)(uintptr_t)1;
    int rc = loupe_trace_read(path, &m);
    assert_null(m);
    if (rc != code || strstr(loupe_last_error(), detail) == NULL) {
        fail_msg("%s: got %s \"%s\", want %s with \"%s\"", path, loupe_err_name(rc),
                 loupe_last_error(), loupe_err_name(code), detail);
    }
}

static void test_limits(void **state) {
    (void)state;
    /* a 1 GiB sparse file: refused from its first bytes, in bounded memory */
    const char *p = path_in("sparse.json");
    tu_write_file(p, "");
    assert_int_equal(truncate(p, (off_t)1 << 30), 0);
    long before = peak_kib();
    expect_fail(p, LOUPE_EFORMAT, "sparse.json: not a trace: it starts with bytes 00 00 00 00");
    assert_true(peak_kib() - before < 16 * 1024);
    unlink(p);
    /* a gzip bomb: 80 MiB of blanks after '[' compress to ~80 KiB (ratio ~1000) */
    p = path_in("bomb.json.gz");
    gzFile g = gzopen(p, "wb9");
    assert_non_null(g);
    char *blank = malloc(1 << 20);
    memset(blank, ' ', 1 << 20);
    gzwrite(g, "[", 1);
    for (int i = 0; i < 80; i++) {
        assert_int_equal(gzwrite(g, blank, 1 << 20), 1 << 20);
    }
    gzclose(g);
    free(blank);
    expect_fail(p, LOUPE_EFORMAT,
                "bomb.json.gz: more than 67108864 bytes once uncompressed (64 times the file, at "
                "least 64 MiB, at most 4 GiB); loupe stops there (a gzip bomb?). Set "
                "LOUPE_READ_MAX_BYTES to a larger number of bytes to read it");
    /* LOUPE_READ_MAX_BYTES: raises (the bomb is then read: an empty-ish array not closed) or
     * lowers the limit */
    setenv("LOUPE_READ_MAX_BYTES", "100000000", 1);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(p, &m), 0);
    assert_int_equal(m->warning_count, 1);
    loupe_model_free(m);
    setenv("LOUPE_READ_MAX_BYTES", "10", 1);
    p = path_in("small.json");
    tu_write_file(p, "[{\"ph\":\"i\",\"ts\":1}]");
    expect_fail(p, LOUPE_EFORMAT,
                "small.json: the file holds 19 bytes; loupe reads traces of at most 10 bytes");
    setenv("LOUPE_READ_MAX_BYTES", "ten", 1);
    expect_fail(p, LOUPE_EINVALID, "LOUPE_READ_MAX_BYTES=ten: not a positive number of bytes");
    unsetenv("LOUPE_READ_MAX_BYTES");
}

/* A model with every extreme integer as an arg, written in a format and read back. */
static loupe_model *int_model(void) {
    loupe__mb *mb = loupe__mb_new();
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 7;
    m->duration_ns = 100;
    size_t t = loupe__mb_thread(mb, 7);
    size_t s = loupe__mb_slice(mb, t);
    loupe_slice *sl = loupe__mb_slice_at(mb, t, s);
    sl->start_ns = 10;
    sl->dur_ns = 20;
    sl->name = loupe__mb_str(mb, "z");
    loupe_arg args[] = {
        {.key = "min", .type = LOUPE_ARG_INT64, .v.i = INT64_MIN},
        {.key = "max", .type = LOUPE_ARG_INT64, .v.i = INT64_MAX},
        {.key = "p53", .type = LOUPE_ARG_INT64, .v.i = ((int64_t)1 << 53) + 1},
        {.key = "n53", .type = LOUPE_ARG_INT64, .v.i = -((int64_t)1 << 53) - 1},
        {.key = "umax", .type = LOUPE_ARG_UINT64, .v.u = UINT64_MAX},
        {.key = "u53", .type = LOUPE_ARG_UINT64, .v.u = ((uint64_t)1 << 53) + 1},
        {.key = "small", .type = LOUPE_ARG_INT64, .v.i = -5},
        {.key = "digits", .type = LOUPE_ARG_STRING, .v.s = "9223372036854775807"},
    };
    assert_int_equal(loupe__mb_slice_args(mb, t, s, args, 8), 0);
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static void test_int64_round_trip(void **state) {
    (void)state;
    loupe_model *m = int_model();
    static const struct {
        loupe_file_format f;
        const char *name;
    } formats[] = {{LOUPE_FILE_CHROME_JSON, "ints.trace.json.gz"},
                   {LOUPE_FILE_XPLANE, "ints.xplane.pb"},
                   {LOUPE_FILE_PERFETTO_PROTO, "ints.pftrace"}};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        const char *p = path_in(formats[i].name);
        int rc = loupe_trace_write(m, p, formats[i].f);
        if (rc != 0) {
            fail_msg("%s: %s", formats[i].name, loupe_last_error());
        }
        loupe_model *b = tu_read_back(p);
        const loupe_model_thread *th = NULL;
        for (size_t t = 0; t < b->thread_count; t++) {
            th = b->threads[t].slice_count > 0 ? &b->threads[t] : th;
        }
        assert_non_null(th);
        assert_int_equal(th->slice_count, 1);
        size_t sl_nargs;
        const loupe_arg *sl_args = loupe_slice_args(th, 0, &sl_nargs);
        if (sl_nargs != 8) {
            fail_msg("%s: %zu args", formats[i].name, sl_nargs);
        }
        tu_args_equal(sl_args, tu_args(&m->threads[0], 0), 8);
        loupe_model_free(b);
    }
    /* JSON: beyond 2^53 as exact digits in a string, typed by loupe_types */
    size_t len;
    char *text = tu_read_file(path_in("ints.trace.json.gz"), &len);
    assert_non_null(strstr(text, "\"min\":\"-9223372036854775808\",\"max\":\"9223372036854775807\","
                                 "\"p53\":\"9007199254740993\",\"n53\":\"-9007199254740993\","
                                 "\"umax\":\"18446744073709551615\",\"u53\":\"9007199254740993\","
                                 "\"small\":-5,\"digits\":\"9223372036854775807\",\"loupe_types\":"
                                 "{\"min\":\"int64\",\"max\":\"int64\",\"p53\":\"int64\","
                                 "\"n53\":\"int64\",\"umax\":\"uint64\",\"u53\":\"uint64\"}"));
    free(text);
    loupe_model_free(m);
}

/* The writer leaves out what the reader would refuse: nothing it writes fails to read. */
static void test_writer_bound(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    size_t t = loupe__mb_thread(mb, 1);
    for (int k = 0; k < 2; k++) {
        size_t s = loupe__mb_slice(mb, t);
        loupe_slice *sl = loupe__mb_slice_at(mb, t, s);
        sl->start_ns = k == 0 ? 5 : ((uint64_t)1 << 62) - 10;
        sl->dur_ns = k == 0 ? 1 : 20;
        sl->name = loupe__mb_str(mb, k == 0 ? "in" : "beyond");
    }
    loupe_model *m = loupe__mb_finish(mb);
    const char *p = path_in("bound.trace.json.gz");
    assert_int_equal(loupe_trace_write(m, p, LOUPE_FILE_CHROME_JSON), 0);
    loupe_model *b = tu_read_back(p);
    assert_int_equal(slices(b), 1);
    assert_string_equal(b->threads[0].slices[0].name, "in");
    assert_int_equal(b->warning_count, 0);
    loupe_model_free(b);
    loupe_model_free(m);
}

/* An XSpace whose first plane is longer than the bytes sniffed (jax's: every event is in its
 * first plane) is recognised by its content, whatever the file is called (loupe capture checks
 * a capture's body saved as ".part-<host>"). */
static void test_long_first_plane(void **state) {
    (void)state;
    loupe__mb *mb = loupe__mb_new();
    size_t t = loupe__mb_thread(mb, 1);
    for (int k = 0; k < 20000; k++) {
        size_t s = loupe__mb_slice(mb, t);
        loupe_slice *sl = loupe__mb_slice_at(mb, t, s);
        sl->start_ns = (uint64_t)k * 10;
        sl->dur_ns = 5;
        sl->name = loupe__mb_str(mb, k % 2 ? "odd" : "even");
    }
    loupe_model *m = loupe__mb_finish(mb);
    /* the same for a Perfetto protobuf trace: a packet crosses the end of the sniffed bytes */
    static const loupe_file_format fs[2] = {LOUPE_FILE_XPLANE, LOUPE_FILE_PERFETTO_PROTO};
    static const char *names[2] = {".part-127.0.0.1_9999", "capture-no-suffix"};
    for (int k = 0; k < 2; k++) {
        const char *p = path_in(names[k]);
        /* uncompressed: deflated, these 20000 slices are one short packet */
        assert_int_equal(setenv("LOUPE_PERFETTO_COMPRESS", "0", 1), 0);
        assert_int_equal(loupe_trace_write(m, p, fs[k]), 0);
        assert_int_equal(unsetenv("LOUPE_PERFETTO_COMPRESS"), 0);
        size_t len;
        free(tu_read_file(p, &len));
        assert_true(len > 65536 * 2);
        loupe_model *b = tu_read_back(p);
        assert_int_equal(slices(b), 20000);
        loupe_model_free(b);
    }
    loupe_model_free(m);
}

/* Truncated protobuf files name their format and the offset; never the JSON parser's words. */
static void test_truncated_protobuf(void **state) {
    (void)state;
    loupe_model *m = int_model();
    /* Both are read as far as valid, with a warning. The .pftrace's one compressed_packets chunk
     * loses the last 3 bytes of its Adler-32 (the deflate data is whole), so every packet of it
     * reads. */
    static const struct {
        loupe_file_format f;
        const char *name;
    } formats[] = {{LOUPE_FILE_XPLANE, "cut.xplane.pb"},
                   {LOUPE_FILE_PERFETTO_PROTO, "cut.pftrace"}};
    for (size_t i = 0; i < 2; i++) {
        const char *p = path_in(formats[i].name);
        assert_int_equal(loupe_trace_write(m, p, formats[i].f), 0);
        size_t len;
        char *whole = tu_read_file(p, &len);
        FILE *f = fopen(p, "wb");
        assert_int_equal(fwrite(whole, 1, len - 3, f), len - 3);
        fclose(f);
        free(whole);
        if (formats[i].f == LOUPE_FILE_XPLANE) {
            /* the last 3 bytes are those of an XSpace field after the planes: every plane
             * reads */
            loupe_model *r = NULL;
            if (loupe_trace_read(p, &r) != 0) {
                fail_msg("%s: %s", p, loupe_last_error());
            }
            assert_int_equal(slices(r), slices(m));
            assert_int_equal(r->warning_count, 1);
            char want[4400];
            snprintf(want, sizeof want,
                     "%s: XPlane: the file is cut short: it ends at byte %zu, inside an XSpace "
                     "field at offset ",
                     p, len - 3);
            if (strncmp(r->warnings[0], want, strlen(want)) != 0) {
                fail_msg("warning \"%s\"", r->warnings[0]);
            }
            loupe_model_free(r);
            continue;
        }
        loupe_model *r = NULL;
        if (loupe_trace_read(p, &r) != 0) {
            fail_msg("%s: %s", p, loupe_last_error());
        }
        assert_int_equal(slices(r), slices(m));
        assert_int_equal(r->warning_count, 1);
        char want[4400];
        snprintf(want, sizeof want,
                 "%s: Perfetto protobuf: the file is cut short: it ends at byte %zu, inside the "
                 "compressed_packets at offset ",
                 p, len - 3);
        if (strncmp(r->warnings[0], want, strlen(want)) != 0 ||
            strstr(r->warnings[0], "there): read the file before offset 0 (top-level packets: "
                                   "0) and the chunk's first ") == NULL) {
            fail_msg("warning \"%s\"", r->warnings[0]);
        }
        loupe_model_free(r);
    }
    loupe_model_free(m);
}

/* 1e5 threads of one event each: linear in the threads (a scan per event took 7 s). */
static void test_many_threads(void **state) {
    (void)state;
    const size_t n = 100000;
    char *text = malloc(n * 64 + 16);
    size_t o = 0;
    text[o++] = '[';
    for (size_t i = 0; i < n; i++) {
        o += (size_t)sprintf(text + o, "%s{\"ph\":\"X\",\"ts\":%zu,\"dur\":1,\"tid\":%zu}",
                             i ? "," : "", i, i + 1);
    }
    text[o++] = ']';
    text[o] = 0;
    struct timespec a, b;
    long before = peak_kib();
    clock_gettime(CLOCK_MONOTONIC, &a);
    loupe_model *m = read_ok("threads.json", text);
    clock_gettime(CLOCK_MONOTONIC, &b);
    free(text);
    assert_int_equal(m->thread_count, n);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    /* generous for a sanitizer build: the hash takes ~0.05 s, the scan took 7 s */
    if (s > 3.0) {
        fail_msg("1e5 threads took %.2f s", s);
    }
    /* ~40 MiB; 64 preallocated slices per thread made it 370 (generous for sanitizers) */
    long grew = peak_kib() - before;
    if (grew > 250 * 1024) {
        fail_msg("1e5 threads took %ld MiB", grew / 1024);
    }
    loupe_model_free(m);
}

/* A file larger than the reader's window (4 MiB): events, escaped strings and one event larger
 * than the window cross refills; errors and warnings past the first window give the right line
 * and byte. Plain and gzipped. */
static void test_window(void **state) {
    (void)state;
    const size_t n = 200000; /* ~14 MB */
    size_t cap = n * 96 + (16u << 20);
    char *text = malloc(cap);
    size_t o = (size_t)sprintf(text, "{\"traceEvents\":[\n");
    for (size_t i = 0; i < n; i++) {
        o += (size_t)sprintf(text + o,
                             "{\"ph\":\"X\",\"ts\":%zu,\"dur\":1,\"tid\":%zu,"
                             "\"name\":\"q\\\"%zu\\u00e9\\n\"},\n",
                             i, i % 3 + 1, i % 10);
        if (i == n / 2) { /* one event of 6 MiB: an arg larger than the window */
            o += (size_t)sprintf(text + o, "{\"ph\":\"i\",\"ts\":1,\"args\":{\"big\":\"");
            memset(text + o, 'x', 6u << 20);
            o += 6u << 20;
            o += (size_t)sprintf(text + o, "\"}},\n");
        }
    }
    o +=
        (size_t)sprintf(text + o, "{\"ph\":\"X\",\"ts\":7,\"dur\":1}],\"metadata\":{\"k\":\"v\"}}");
    char p[4096];
    snprintf(p, sizeof p, "%s", path_in("big.json"));
    tu_write_file(p, text);
    loupe_model *m = tu_read_back(p);
    assert_int_equal(slices(m), n + 1);
    assert_int_equal(m->thread_count, 4); /* tids 1, 2, 3, and 0 for the big instant */
    assert_int_equal(m->warning_count, 0);
    assert_string_equal(m->threads[0].slices[1].name, "q\"3\xc3\xa9\n");
    assert_int_equal(m->threads[3].instant_count, 1);
    assert_int_equal(strlen(m->threads[3].instants[0].args[0].v.s), 6u << 20);
    assert_int_equal(m->metadata_count, 1);
    loupe_model_free(m);
    /* gzipped, the same */
    const char *gz = path_in("big.json.gz");
    gzFile g = gzopen(gz, "wb1");
    assert_int_equal(gzwrite(g, text, (unsigned)o), (int)o);
    gzclose(g);
    m = tu_read_back(gz);
    assert_int_equal(slices(m), n + 1);
    loupe_model_free(m);
    /* a NaN in event 150000, past the first window: line 150003 (the header, the big event's
     * line and the events before it) */
    char *bad = strstr(text, "{\"ph\":\"X\",\"ts\":150000,");
    assert_non_null(bad);
    memcpy(bad + 15, "NaN   ", 6);
    tu_write_file(p, text);
    expect_fail(p, LOUPE_EFORMAT, "big.json: line 150003 column 16 (event 150001): invalid token");
    /* cut in the middle of the last window: the events before the cut, and where */
    bad[0] = 0;
    tu_write_file(p, text);
    m = tu_read_back(p);
    assert_int_equal(slices(m), 150000);
    assert_int_equal(m->warning_count, 2);
    char want[256];
    snprintf(want, sizeof want,
             "the events array (line 1 column 16) is not closed: the input ends "
             "after event 150001; 150001 events read");
    warning_is(m, 0, "big.json", want);
    loupe_model_free(m);
    free(text);
}

/* `loupe summary` prints the warnings on stderr and in --json under "warnings". */
static void test_summary_warnings(void **state) {
    (void)state;
    const char *p = path_in("sw.json");
    tu_write_file(p, "[{\"ph\":\"X\",\"ts\":1,\"dur\":-1},{\"ph\":\"X\",\"ts\":2,\"dur\":1}");
    char cmd[8300], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' summary '%s' 2>&1 >/dev/null", tu_cli(), p);
    assert_int_equal(tu_run(cmd, &out), 0);
    char want[8400];
    snprintf(want, sizeof want,
             "loupe summary: warning: %s: the events array (line 1 column 1) is not closed: the "
             "input ends after event 2; 2 events read\n"
             "loupe summary: warning: %s: 1 X event with a negative dur skipped (the first: event "
             "0)\n",
             p, p);
    assert_string_equal(out, want);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' summary --json '%s' 2>/dev/null", tu_cli(), p);
    assert_int_equal(tu_run(cmd, &out), 0);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    assert_non_null(j);
    json_t *w = json_object_get(j, "warnings");
    assert_int_equal(json_array_size(w), 2);
    assert_non_null(strstr(json_string_value(json_array_get(w, 1)), "negative dur skipped"));
    json_decref(j);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_absurd_times),     cmocka_unit_test(test_damage),
        cmocka_unit_test(test_limits),           cmocka_unit_test(test_int64_round_trip),
        cmocka_unit_test(test_writer_bound),     cmocka_unit_test(test_truncated_protobuf),
        cmocka_unit_test(test_many_threads),     cmocka_unit_test(test_window),
        cmocka_unit_test(test_summary_warnings), cmocka_unit_test(test_long_first_plane),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
