/* test_reader_threads.c: loupe_trace_read() on 4 threads at once, each on a file of another
 * format (plain JSON, gzipped JSON with v1 flows, whose binding sorts with a comparator, XPlane,
 * Perfetto protobuf), as reader.h promises ("any thread"). Each thread reads its file 20 times
 * and checks the model against the one read alone first. The TSan build runs this test (its name
 * holds "thread"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <loupe/loupe.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define ROUNDS 20

typedef struct job {
    char path[4096];
    size_t slices, threads, flows, warnings;
    int failed;
    char why[512];
} job;

static void shape(const loupe_model *m, size_t *slices, size_t *threads, size_t *flows,
                  size_t *warnings) {
    *slices = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        *slices += m->threads[t].slice_count;
    }
    *threads = m->thread_count;
    *flows = m->flow_count;
    *warnings = m->warning_count;
}

static void *reader(void *arg) {
    job *j = arg;
    for (int i = 0; i < ROUNDS && !j->failed; i++) {
        loupe_model *m = NULL;
        int rc = loupe_trace_read(j->path, &m);
        if (rc != 0) {
            snprintf(j->why, sizeof j->why, "%s", loupe_last_error());
            j->failed = 1;
            break;
        }
        size_t s, t, f, w;
        shape(m, &s, &t, &f, &w);
        if (s != j->slices || t != j->threads || f != j->flows || w != j->warnings) {
            snprintf(j->why, sizeof j->why, "round %d: %zu/%zu/%zu/%zu", i, s, t, f, w);
            j->failed = 1;
        }
        loupe_model_free(m);
    }
    return NULL;
}

static void test_concurrent_readers(void **state) {
    (void)state;
    /* a trace with flows v1 (bound by sorting slices), many threads, and a cut end (a warning) */
    char *text = malloc(1 << 20);
    size_t o = (size_t)sprintf(text, "[");
    for (int i = 0; i < 2000; i++) {
        o += (size_t)sprintf(text + o,
                             "{\"ph\":\"X\",\"ts\":%d,\"dur\":5,\"tid\":%d,\"name\":\"z%d\"},"
                             "{\"ph\":\"s\",\"ts\":%d,\"id\":%d,\"tid\":%d,\"bp\":\"e\"},"
                             "{\"ph\":\"f\",\"ts\":%d,\"id\":%d,\"tid\":%d},",
                             i * 10, i % 50 + 1, i % 7, i * 10 + 1, i, i % 50 + 1, i * 10 + 2, i,
                             i % 50 + 1);
    }
    o += (size_t)sprintf(text + o, "{\"ph\":\"X\",\"ts\":1");
    job jobs[4];
    memset(jobs, 0, sizeof jobs);
    snprintf(jobs[0].path, sizeof jobs[0].path, "%s/a.json", tu_dir);
    tu_write_file(jobs[0].path, text);
    free(text);
    loupe_model *m = tu_read_back(jobs[0].path);
    snprintf(jobs[1].path, sizeof jobs[1].path, "%s/b.trace.json.gz", tu_dir);
    snprintf(jobs[2].path, sizeof jobs[2].path, "%s/c.xplane.pb", tu_dir);
    snprintf(jobs[3].path, sizeof jobs[3].path, "%s/d.pftrace", tu_dir);
    assert_int_equal(loupe_trace_write(m, jobs[1].path, LOUPE_FILE_CHROME_JSON), 0);
    assert_int_equal(loupe_trace_write(m, jobs[2].path, LOUPE_FILE_XPLANE), 0);
    assert_int_equal(loupe_trace_write(m, jobs[3].path, LOUPE_FILE_PERFETTO_PROTO), 0);
    loupe_model_free(m);
    for (int i = 0; i < 4; i++) {
        loupe_model *one = tu_read_back(jobs[i].path);
        shape(one, &jobs[i].slices, &jobs[i].threads, &jobs[i].flows, &jobs[i].warnings);
        loupe_model_free(one);
    }
    assert_int_equal(jobs[0].slices, 2000);
    assert_int_equal(jobs[0].threads, 50);
    assert_int_equal(jobs[0].warnings, 1); /* the cut last event */
    assert_int_equal(jobs[0].flows, 1950); /* the last 50 f ends have no next slice */
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, reader, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
    }
    for (int i = 0; i < 4; i++) {
        if (jobs[i].failed) {
            fail_msg("%s: %s", jobs[i].path, jobs[i].why);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_readers),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
