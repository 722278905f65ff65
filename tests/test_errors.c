/* test_errors.c: loupe's error codes (loupe/error.h) and the internal convention (base/error.h):
 * every code's exact value, name and message (the values are ABI: append-only), the range apart
 * from -errno, what loupe_strerror/loupe_err_name say for 0, unknown values and -errno values,
 * the metadata-key limit's own code, an unwritable path giving LOUPE_EIO with the errno in the
 * detail, the internal helpers' codes and details, and the registry-lock / gate checks the
 * asserts use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "base/error.h"
#include "base/fs.h"
#include "export/sink.h"
#include "record/record.h"
#if LOUPE_TEST_WITH_SERVER
#include "server/query.h"
#endif

#include <errno.h>
#include <loupe/loupe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Written out by hand, not generated from LOUPE_ERRNO_MAP: a change to the table must fail here. */
typedef struct code_row {
    int code, value;
    const char *name, *message;
} code_row;

static const code_row codes[] = {
    {LOUPE_EALREADY_STARTED, -3001, "EALREADY_STARTED",
     "Profile has already been started. Only one profile may be run at a time."},
    {LOUPE_ENOT_STARTED, -3002, "ENOT_STARTED", "No profile started"},
    {LOUPE_ESERVER_RUNNING, -3003, "ESERVER_RUNNING",
     "Only one profiler server can be active at a time."},
    {LOUPE_ENO_SERVER, -3004, "ENO_SERVER", "No active profiler server."},
    {LOUPE_EGPU_OVERFLOW, -3005, "EGPU_OVERFLOW", "Insufficient space to capture a full trace"},
    {LOUPE_EINVALID, -3006, "EINVALID", "Invalid argument"},
    {LOUPE_ENOMEM, -3007, "ENOMEM", "Out of memory"},
    {LOUPE_EIO, -3008, "EIO", "I/O error"},
    {LOUPE_ENO_TRACE, -3009, "ENO_TRACE", "No recorded trace to write"},
    {LOUPE_EFORMAT, -3010, "EFORMAT", "Malformed trace input"},
    {LOUPE_EUNSUPPORTED, -3011, "EUNSUPPORTED", "Not supported"},
    {LOUPE_ETOO_MANY_NAMES, -3012, "ETOO_MANY_NAMES", "Allocated too many names"},
    {LOUPE_ETOO_MANY_KEYS, -3013, "ETOO_MANY_KEYS", "Too many metadata keys"},
};
#define NCODES (sizeof codes / sizeof codes[0])

static void test_every_code_exactly(void **state) {
    (void)state;
    for (size_t i = 0; i < NCODES; i++) {
        assert_int_equal(codes[i].code, codes[i].value);
        assert_string_equal(loupe_err_name(codes[i].code), codes[i].name);
        assert_string_equal(loupe_strerror(codes[i].code), codes[i].message);
    }
    /* the table has exactly these codes: one more in the header would be counted here */
    size_t n = 0;
#define COUNT(name, val, msg) n++;
    LOUPE_ERRNO_MAP(COUNT)
#undef COUNT
    assert_int_equal(n, NCODES);
}

/* Linux names errno values 1..133; glibc's strerror says "Unknown error N" for the others. */
static int linux_errno(int e) {
    char unknown[32];
    snprintf(unknown, sizeof unknown, "Unknown error %d", e);
    return strcmp(strerror(e), unknown) != 0;
}

static void test_range_apart_from_errno(void **state) {
    (void)state;
    int defined = 0;
    for (int e = 1; e <= 4095; e++) {
        if (!linux_errno(e)) {
            continue;
        }
        defined++;
        for (size_t i = 0; i < NCODES; i++) {
            assert_int_not_equal(codes[i].code, -e);
        }
    }
    assert_true(defined >= 130); /* the check above really saw the errno table */
    assert_true(linux_errno(EHWPOISON));
    for (size_t i = 0; i < NCODES; i++) {
        assert_true(codes[i].code <= -3001 && codes[i].code >= -3999);
        assert_true(codes[i].code < -133);
    }
}

static void test_strings_for_other_values(void **state) {
    (void)state;
    assert_string_equal(loupe_strerror(0), "Success");
    assert_string_equal(loupe_err_name(0), "OK");
    /* unknown values: positive, just past the table, just before it */
    const int unknown[] = {1, 12345, -3014, -3000, INT32_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_string_equal(loupe_strerror(unknown[i]), "Unknown error");
        assert_string_equal(loupe_err_name(unknown[i]), "EUNKNOWN");
    }
    /* -errno values are not loupe's: -EIO was LOUPE_EGPU_OVERFLOW's value before 0.1.0, -ENOMEM
     * LOUPE_ETOO_MANY_NAMES' */
    const int errnos[] = {-EPERM, -EIO, -ENOMEM, -ENOSPC, -EHWPOISON};
    for (size_t i = 0; i < sizeof errnos / sizeof errnos[0]; i++) {
        assert_string_equal(loupe_strerror(errnos[i]), "Unknown error");
        assert_string_equal(loupe_err_name(errnos[i]), "EUNKNOWN");
    }
}

static void test_metadata_key_limit(void **state) {
    (void)state;
    loupe_clear_metadata();
    char k[32];
    for (int i = 0; i < 256; i++) {
        snprintf(k, sizeof k, "key_%d", i);
        assert_int_equal(loupe_set_metadata(k, "v"), 0);
    }
    assert_int_equal(loupe_set_metadata("one_too_many", "v"), LOUPE_ETOO_MANY_KEYS);
    assert_string_equal(loupe_last_error(),
                        "loupe_set_metadata: more than 256 keys; \"one_too_many\" is not added "
                        "(replace an existing key, or loupe_clear_metadata())");
    assert_string_equal(loupe_strerror(LOUPE_ETOO_MANY_KEYS), "Too many metadata keys");
    /* a full table still takes a new value for a key it has */
    assert_int_equal(loupe_set_metadata("key_255", "replaced"), 0);
    loupe_clear_metadata();
    assert_int_equal(loupe_set_metadata("one_too_many", "v"), 0);
    loupe_clear_metadata();
}

static loupe_model *small_trace(void) {
    loupe_trace_options o = {.log_dir = tu_dir};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE("z"); }
    assert_int_equal(loupe_stop_trace(NULL), 0);
    loupe_model *m = NULL;
    char found[4200];
    assert_int_equal(loupe_trace_find(tu_dir, found, sizeof found), 0);
    assert_int_equal(loupe_trace_read(found, &m), 0);
    return m;
}

static void test_unwritable_directory(void **state) {
    (void)state;
    /* a directory that cannot be written into, as root too: a regular file in its place */
    char file[4200], dir[4300], path[4400], want[9000];
    snprintf(file, sizeof file, "%s/afile", tu_dir);
    tu_write_file(file, "x");
    snprintf(dir, sizeof dir, "%s/sub", file);
    snprintf(path, sizeof path, "%s/t.json.gz", dir);
    loupe_model *m = small_trace();
    assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_CHROME_JSON), LOUPE_EIO);
    snprintf(want, sizeof want,
             "cannot create %s: %s is not a directory (it, or a directory above it, is a file)",
             path, dir);
    assert_string_equal(loupe_last_error(), want);
    loupe_model_free(m);
    /* a session whose log_dir cannot be created */
    loupe_trace_options o = {.log_dir = dir};
    assert_int_equal(loupe_start_trace(&o), LOUPE_EIO);
    snprintf(want, sizeof want,
             "loupe_start_trace: log_dir: cannot create %s: Not a directory (errno 20)", dir);
    assert_string_equal(loupe_last_error(), want);
    assert_int_equal(loupe_is_tracing(), 0);
    /* a stop whose run directory cannot be written: the errno in the detail, the trace kept */
    char ld[4200];
    snprintf(ld, sizeof ld, "%s/gone", tu_dir);
    loupe_trace_options o2 = {.log_dir = ld};
    assert_int_equal(loupe_start_trace(&o2), 0);
    tu_rmtree(ld);
    tu_write_file(ld, "not a directory");
    assert_int_equal(loupe_stop_trace(NULL), LOUPE_EIO);
    snprintf(want, sizeof want,
             "cannot create %s/plugins/profile: Not a directory (errno 20); the trace is kept: "
             "call loupe_write_last_trace() with another directory",
             ld);
    assert_string_equal(loupe_last_error(), want);
}

/* The internal helpers keep the convention: a LOUPE_E* code, the errno in the detail. */
static void test_internal_helpers(void **state) {
    (void)state;
    char file[4200], dir[4300], want[9000];
    snprintf(file, sizeof file, "%s/plain", tu_dir);
    tu_write_file(file, "x");
    assert_int_equal(loupe__mkdirs(file), LOUPE_EIO);
    snprintf(want, sizeof want, "cannot create %s: Not a directory (errno 20)", file);
    assert_string_equal(loupe_last_error(), want);
    assert_int_equal(loupe__mkdirs(""), LOUPE_EIO);
    assert_string_equal(loupe_last_error(),
                        "cannot create \"\": No such file or directory (errno 2)");
    snprintf(dir, sizeof dir, "%s/a/b/c", tu_dir);
    assert_int_equal(loupe__mkdirs(dir), 0);
    assert_int_equal(loupe__mkdirs(dir), 0); /* existing */

    loupe__sink s;
    snprintf(dir, sizeof dir, "%s/no/such/x", tu_dir);
    assert_int_equal(loupe__sink_open_file(&s, dir, 0), LOUPE_EIO);
    snprintf(want, sizeof want, "cannot create %s: No such file or directory (errno 2)", dir);
    assert_string_equal(loupe_last_error(), want);
    assert_int_equal(loupe__sink_open_file(&s, dir, 1), LOUPE_EIO);
    assert_string_equal(loupe_last_error(), want);
    /* a full disk: /dev/full takes the open and fails the write with ENOSPC */
    FILE *probe = fopen("/dev/full", "wb");
    if (probe != NULL) {
        fclose(probe);
        assert_int_equal(loupe__sink_open_file(&s, "/dev/full", 0), 0);
        loupe__puts(&s, "hello");
        assert_int_equal(loupe__sink_close(&s), LOUPE_EIO);
        assert_string_equal(loupe_last_error(),
                            "cannot write /dev/full: No space left on device (errno 28)");
    }

#if LOUPE_TEST_WITH_SERVER /* the query parser is the server's */
    loupe__query q;
    char err[160];
    assert_int_equal(loupe__query_parse("duration_ms=abc", 15, &q, err, sizeof err),
                     LOUPE_EINVALID);
    assert_string_equal(err, "duration_ms: \"abc\" is not a whole number of milliseconds from 1 "
                             "to 4294967295");
    assert_string_equal(loupe_last_error(), err);
    assert_int_equal(loupe__query_parse("duration_ms=5", 13, &q, err, sizeof err), 0);
#endif

    /* loupe__err_prefix names the caller in front of the detail and returns the code */
    loupe__err(LOUPE_EIO, "cannot write x: I/O error (errno 5)");
    assert_int_equal(loupe__err_prefix(LOUPE_EIO, "loupe_%s", "f"), LOUPE_EIO);
    assert_string_equal(loupe_last_error(), "loupe_f: cannot write x: I/O error (errno 5)");
}

static void *held_elsewhere(void *arg) {
    (void)arg;
    return (void *)(intptr_t)loupe__registry_held();
}

/* What the asserts rely on: the registry lock knows its holder, the gate flag follows the
 * session. */
static void test_assert_checks(void **state) {
    (void)state;
    assert_int_equal(loupe__registry_held(), 0);
    loupe__registry_lock_take();
    assert_int_equal(loupe__registry_held(), 1);
    pthread_t th;
    void *other = NULL;
    assert_int_equal(pthread_create(&th, NULL, held_elsewhere, NULL), 0);
    assert_int_equal(pthread_join(th, &other), 0);
    assert_int_equal((intptr_t)other, 0); /* held, but not by that thread */
    loupe__registry_lock_give();
    assert_int_equal(loupe__registry_held(), 0);

    assert_int_equal(loupe__gate_is_open(), 0);
    loupe_trace_options o = {.log_dir = tu_dir, .host_tracer_level = LOUPE_LEVEL_NONE};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe__gate_is_open(), 1); /* also at level 0, whose state bits are 0 */
    assert_int_equal(loupe_stop_trace(NULL), 0);
    assert_int_equal(loupe__gate_is_open(), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_exactly),
        cmocka_unit_test(test_range_apart_from_errno),
        cmocka_unit_test(test_strings_for_other_values),
        cmocka_unit_test(test_metadata_key_limit),
        cmocka_unit_test_setup_teardown(test_unwritable_directory, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_internal_helpers, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_assert_checks, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
