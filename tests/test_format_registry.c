/* test_format_registry.c: the format registry's public lookups (loupe/writer.h) with exact values,
 * the comma-list parser's messages, the old one-liners over it, and loupe_version(). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>
#include <stdio.h>
#include <string.h>

static void test_rows(void **state) {
    (void)state;
    assert_int_equal(loupe_format_count(), 8);
    static const char *const names[] = {"json",   "xplane", "perfetto", "perfetto-json",
                                        "folded", "svg",    "pprof",    "llvm-prof"};
    static const char *const written[] = {
        ".trace.json.gz", ".xplane.pb", ".pftrace", "perfetto_trace.json.gz",
        ".folded",        ".svg",       ".pb.gz",   ".afdo"};
    static const unsigned bits[] = {LOUPE_FORMAT_CHROME_JSON,
                                    LOUPE_FORMAT_XPLANE,
                                    LOUPE_FORMAT_PERFETTO_PROTO,
                                    LOUPE_FORMAT_PERFETTO_JSON,
                                    0,
                                    0,
                                    0,
                                    0};
    static const loupe_file_format files[] = {LOUPE_FILE_CHROME_JSON,    LOUPE_FILE_XPLANE,
                                              LOUPE_FILE_PERFETTO_PROTO, LOUPE_FILE_PERFETTO_JSON,
                                              LOUPE_FILE_FOLDED,         LOUPE_FILE_SVG,
                                              LOUPE_FILE_PPROF,          LOUPE_FILE_LLVM_PROF};
    static const int gz[] = {1, 0, 0, 1, 0, 0, 1, 0}, host[] = {1, 1, 1, 0, 0, 0, 0, 0},
                     rd[] = {1, 1, 1, 1, 0, 0, 0, 0};
    static const char *const mime[] = {"application/gzip",
                                       "application/octet-stream",
                                       "application/octet-stream",
                                       NULL,
                                       NULL,
                                       NULL,
                                       NULL,
                                       NULL};
    for (size_t i = 0; i < 8; i++) {
        const loupe_format_desc *d = loupe_format_info(i);
        assert_non_null(d);
        assert_string_equal(d->name, names[i]);
        assert_string_equal(d->suffix, written[i]);
        assert_int_equal(d->run_dir_bit, bits[i]);
        assert_int_equal(d->file_format, files[i]);
        assert_int_equal(d->gzip, gz[i]);
        assert_int_equal(d->host_prefixed, host[i]);
        assert_int_equal(d->can_write, 1);
        assert_int_equal(d->can_read, rd[i]);
        if (mime[i] == NULL) {
            assert_null(d->mime_type);
        } else {
            assert_string_equal(d->mime_type, mime[i]);
        }
        assert_ptr_equal(loupe_format_by_name(names[i]), d);
        assert_ptr_equal(loupe_format_by_file_format(files[i]), d);
        if (bits[i] != 0) {
            assert_ptr_equal(loupe_format_by_bit(bits[i]), d);
        }
    }
    assert_null(loupe_format_info(8));
    assert_null(loupe_format_by_bit(0));
    assert_null(loupe_format_by_bit(LOUPE_FORMAT_CHROME_JSON | LOUPE_FORMAT_XPLANE));
    assert_null(loupe_format_by_file_format(LOUPE_FILE_UNKNOWN));
}

static void test_names_and_paths(void **state) {
    (void)state;
    assert_ptr_equal(loupe_format_by_name("chrome"), loupe_format_info(0));
    assert_ptr_equal(loupe_format_by_name("pftrace"), loupe_format_info(2));
    assert_ptr_equal(loupe_format_by_name("collapsed"), loupe_format_info(4));
    assert_null(loupe_format_by_name("JSON")); /* case-sensitive */
    assert_ptr_equal(loupe_format_by_name("flamegraph"), loupe_format_info(5));
    assert_ptr_equal(loupe_format_by_name("pprof"), loupe_format_info(6));
    assert_ptr_equal(loupe_format_by_name("afdo"), loupe_format_info(7));
    assert_null(loupe_format_by_name("png"));
    assert_null(loupe_format_by_name(""));
    assert_null(loupe_format_by_name(NULL));
    static const struct {
        const char *path;
        loupe_file_format f;
    } paths[] = {
        {"a.json", LOUPE_FILE_CHROME_JSON},
        {"d/h.trace.json.gz", LOUPE_FILE_CHROME_JSON},
        {"d/perfetto_trace.json.gz", LOUPE_FILE_CHROME_JSON},
        {"h.xplane.pb", LOUPE_FILE_XPLANE},
        {"h.xspace.pb", LOUPE_FILE_XPLANE},
        {"t.pftrace", LOUPE_FILE_PERFETTO_PROTO},
        {"t.perfetto-trace", LOUPE_FILE_PERFETTO_PROTO},
        {"t.perfetto", LOUPE_FILE_PERFETTO_PROTO},
        {"t.pb", LOUPE_FILE_PERFETTO_PROTO},
        {"s.folded", LOUPE_FILE_FOLDED},
        {"s.collapsed", LOUPE_FILE_FOLDED},
        {"s.collapsedstack.txt", LOUPE_FILE_FOLDED},
        {"cpu.pb.gz", LOUPE_FILE_PPROF},
        {"cpu.pprof", LOUPE_FILE_PPROF},
        {"cpu.pprof.gz", LOUPE_FILE_PPROF},
        {"app.afdo", LOUPE_FILE_LLVM_PROF},
        {"code.prof", LOUPE_FILE_LLVM_PROF},
        {"x.yaml", LOUPE_FILE_UNKNOWN},
        {"json", LOUPE_FILE_UNKNOWN},
        {"", LOUPE_FILE_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        assert_int_equal(loupe_file_format_from_name(paths[i].path), paths[i].f);
        const loupe_format_desc *d = loupe_format_by_path(paths[i].path);
        assert_int_equal(d != NULL ? d->file_format : LOUPE_FILE_UNKNOWN, paths[i].f);
    }
    assert_null(loupe_format_by_path(NULL));
    assert_int_equal(loupe_file_format_parse("perfetto-json"), LOUPE_FILE_PERFETTO_JSON);
    assert_int_equal(loupe_file_format_parse("pftrace"), LOUPE_FILE_PERFETTO_PROTO);
    assert_int_equal(loupe_file_format_parse("yaml"), LOUPE_FILE_UNKNOWN);
    assert_int_equal(loupe_file_format_parse(NULL), LOUPE_FILE_UNKNOWN);
}

static void test_parse_list(void **state) {
    (void)state;
    unsigned bits = 99;
    assert_int_equal(loupe_format_parse_list("json", &bits), 0);
    assert_int_equal(bits, LOUPE_FORMAT_CHROME_JSON);
    assert_int_equal(loupe_format_parse_list("perfetto,json,chrome,perfetto-json", &bits), 0);
    assert_int_equal(bits, LOUPE_FORMAT_PERFETTO_PROTO | LOUPE_FORMAT_CHROME_JSON |
                               LOUPE_FORMAT_PERFETTO_JSON);
    assert_int_equal(loupe_format_parse_list("xplane,pftrace", &bits), 0);
    assert_int_equal(bits, LOUPE_FORMAT_XPLANE | LOUPE_FORMAT_PERFETTO_PROTO);
    static const struct {
        const char *list, *detail;
    } bad[] = {
        {"json,png", "'png': unknown format (known: json, xplane, perfetto and perfetto-json)"},
        {"svg", "'svg': a run directory never gets this format (known: json, xplane, perfetto and "
                "perfetto-json)"},
        {"folded", "'folded': a run directory never gets this format (known: json, xplane, "
                   "perfetto and perfetto-json)"},
        {"json,", "'json,': an empty entry in the format list (known: json, xplane, perfetto and "
                  "perfetto-json)"},
        {"", "'': an empty entry in the format list (known: json, xplane, perfetto and "
             "perfetto-json)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bits = 99;
        assert_int_equal(loupe_format_parse_list(bad[i].list, &bits), LOUPE_EINVALID);
        assert_int_equal(bits, 0);
        assert_string_equal(loupe_last_error(), bad[i].detail);
    }
    assert_int_equal(loupe_format_parse_list(NULL, &bits), LOUPE_EINVALID);
    assert_string_equal(loupe_last_error(), "loupe_format_parse_list: list is NULL");
    assert_int_equal(loupe_format_parse_list("json", NULL), LOUPE_EINVALID);
}

static void test_version(void **state) {
    (void)state;
    assert_string_equal(loupe_version(), LOUPE_VERSION_STRING);
    assert_int_equal(loupe_version_number(),
                     LOUPE_VERSION_MAJOR * 10000 + LOUPE_VERSION_MINOR * 100 + LOUPE_VERSION_PATCH);
    char s[32];
    snprintf(s, sizeof s, "%d.%d.%d", LOUPE_VERSION_MAJOR, LOUPE_VERSION_MINOR,
             LOUPE_VERSION_PATCH);
    assert_string_equal(loupe_version(), s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_names_and_paths),
        cmocka_unit_test(test_parse_list),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
