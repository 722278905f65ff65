/* testutil.c: see testutil.h. */
#include "testutil.h"
#include "probes/tsan_grpc.h" /* the server tests start gRPC: TSan suppressions */

#include <errno.h>
#include <loupe/loupe.h>

#include <loupe/model.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

char *tu_tmpdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/loupe-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

void tu_rmtree(const char *path) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) {
        fprintf(stderr, "warning: could not remove %s\n", path);
    }
}

char *tu_read_file(const char *path, size_t *len) {
    gzFile f = gzopen(path, "rb"); /* reads plain files too */
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (cap - n < 65536) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        int r = gzread(f, buf + n, (unsigned)(cap - n));
        assert_true(r >= 0);
        if (r == 0) {
            break;
        }
        n += (size_t)r;
    }
    gzclose(f);
    buf[n] = 0;
    if (len) {
        *len = n;
    }
    return buf;
}

json_t *tu_load_json(const char *path) {
    size_t n;
    char *text = tu_read_file(path, &n);
    json_error_t err;
    json_t *j = json_loadb(text, n, JSON_ALLOW_NUL, &err);
    if (j == NULL) {
        fail_msg("%s: JSON error at line %d col %d: %s", path, err.line, err.column, err.text);
    }
    free(text);
    return j;
}

int tu_run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    buf[n] = 0;
    int st = pclose(p);
    if (out) {
        *out = buf;
    } else {
        free(buf);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void tu_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

const char *tu_cli(void) {
    const char *c = getenv("LOUPE_CLI");
    return c ? c : LOUPE_BINARY_DIR "/loupe";
}

/* ---- model comparison (round-trip tests) ---- */

size_t tu_nargs(const loupe_model_thread *th, size_t slice) {
    size_t n;
    (void)loupe_slice_args(th, slice, &n);
    return n;
}

const loupe_arg *tu_args(const loupe_model_thread *th, size_t slice) {
    size_t n;
    return loupe_slice_args(th, slice, &n);
}

void tu_args_equal(const loupe_arg *a, const loupe_arg *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(a[i].key, b[i].key);
        assert_int_equal(a[i].type, b[i].type);
        switch (a[i].type) {
        case LOUPE_ARG_INT64:
            assert_true(a[i].v.i == b[i].v.i);
            break;
        case LOUPE_ARG_UINT64:
            assert_true(a[i].v.u == b[i].v.u);
            break;
        case LOUPE_ARG_DOUBLE:
            assert_memory_equal(&a[i].v.d, &b[i].v.d, sizeof(double));
            break;
        case LOUPE_ARG_BOOL:
            assert_int_equal(a[i].v.b, b[i].v.b);
            break;
        default:
            assert_string_equal(a[i].v.s, b[i].v.s);
        }
    }
}

void tu_models_equal(const loupe_model *a, const loupe_model *b) {
    assert_int_equal(a->pid, b->pid);
    assert_string_equal(a->process_name, b->process_name);
    assert_string_equal(a->host, b->host);
    assert_true(a->origin_unix_ns == b->origin_unix_ns);
    assert_int_equal(a->duration_ns, b->duration_ns);
    assert_string_equal(a->clock, b->clock);
    assert_memory_equal(&a->tsc_ghz, &b->tsc_ghz, sizeof(double));
    assert_int_equal(a->unmatched_ends, b->unmatched_ends);
    assert_int_equal(a->truncated_zones, b->truncated_zones);
    assert_int_equal(a->thread_count, b->thread_count);
    for (size_t t = 0; t < a->thread_count; t++) {
        /* the reader's order: host threads, then GPU planes by device */
        const loupe_model_thread *x = &a->threads[t], *y = NULL;
        for (size_t u = 0; u < b->thread_count; u++) {
            if (b->threads[u].tid == x->tid && b->threads[u].kind == x->kind &&
                b->threads[u].device == x->device) {
                y = &b->threads[u];
            }
        }
        assert_non_null(y);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->events_recorded, y->events_recorded);
        assert_int_equal(x->events_dropped, y->events_dropped);
        assert_int_equal(x->capacity_needed, y->capacity_needed);
        assert_int_equal(x->slice_count, y->slice_count);
        for (size_t i = 0; i < x->slice_count; i++) {
            const loupe_slice *p = &x->slices[i], *q = &y->slices[i];
            assert_int_equal(p->start_ns, q->start_ns);
            assert_int_equal(p->dur_ns, q->dur_ns);
            assert_string_equal(p->name, q->name);
            assert_string_equal(loupe_slice_category(a, p), loupe_slice_category(b, q));
            assert_int_equal(p->depth, q->depth);
            assert_int_equal(p->flags, q->flags);
            assert_int_equal(tu_nargs(x, i), tu_nargs(y, i));
            tu_args_equal(tu_args(x, i), tu_args(y, i), tu_nargs(x, i));
        }
        assert_int_equal(x->instant_count, y->instant_count);
        for (size_t i = 0; i < x->instant_count; i++) {
            assert_int_equal(x->instants[i].ts_ns, y->instants[i].ts_ns);
            assert_string_equal(x->instants[i].name, y->instants[i].name);
            assert_int_equal(x->instants[i].arg_count, y->instants[i].arg_count);
            tu_args_equal(x->instants[i].args, y->instants[i].args, x->instants[i].arg_count);
        }
    }
    assert_int_equal(a->counter_count, b->counter_count);
    for (size_t i = 0; i < a->counter_count; i++) {
        assert_int_equal(a->counters[i].ts_ns, b->counters[i].ts_ns);
        assert_string_equal(a->counters[i].name, b->counters[i].name);
        assert_int_equal(a->counters[i].is_double, b->counters[i].is_double);
        if (a->counters[i].is_double) {
            assert_memory_equal(&a->counters[i].d, &b->counters[i].d, sizeof(double));
        } else {
            assert_int_equal(a->counters[i].i, b->counters[i].i);
        }
    }
    assert_int_equal(a->flow_count, b->flow_count);
    for (size_t f = 0; f < a->flow_count; f++) {
        const loupe_flow *p = &a->flows[f];
        int found = 0;
        for (size_t g = 0; g < b->flow_count; g++) {
            const loupe_flow *q = &b->flows[g];
            if (q->id != p->id) {
                continue;
            }
            const loupe_model_thread *pa = &a->threads[p->from_thread],
                                     *qa = &b->threads[q->from_thread];
            const loupe_model_thread *pb = &a->threads[p->to_thread],
                                     *qb = &b->threads[q->to_thread];
            found |= pa->tid == qa->tid && pa->kind == qa->kind && pb->tid == qb->tid &&
                     pb->kind == qb->kind && p->from_slice == q->from_slice &&
                     p->to_slice == q->to_slice;
        }
        assert_true(found);
    }
    assert_int_equal(a->metadata_count, b->metadata_count);
    for (size_t i = 0; i < a->metadata_count; i++) {
        assert_string_equal(a->metadata[i].key, b->metadata[i].key);
        assert_string_equal(a->metadata[i].value, b->metadata[i].value);
    }
}

/* ---- per-test temporary directory ---- */

char *tu_dir;

int tu_setup(void **state) {
    (void)state;
    tu_dir = tu_tmpdir(program_invocation_short_name);
    return 0;
}

int tu_teardown(void **state) {
    (void)state;
    loupe_stop_trace_if_active(NULL);
    tu_rmtree(tu_dir);
    free(tu_dir);
    tu_dir = NULL;
    return 0;
}

loupe_model *tu_read_back(const char *path) {
    loupe_model *m = NULL;
    int rc = loupe_trace_read(path, &m);
    if (rc != 0) {
        fail_msg("reading %s: %s: %s", path, loupe_strerror(rc), loupe_last_error());
    }
    return m;
}

const char *tu_meta(const loupe_model *m, const char *key, const char *dflt) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return m->metadata[i].value;
        }
    }
    return dflt;
}

int tu_perf_allowed(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.exclude_kernel = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0) {
        return 0;
    }
    close(fd);
    return 1;
}
