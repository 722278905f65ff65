/* diff.c: `loupe diff BASE NEW [--threshold PCT] [--min-count N] [--json]`: compares two traces
 * zone by zone (slices grouped by name over all threads): count, total, mean, p50, p99 (nearest
 * rank, as loupe summary) in each and the change in percent; rows sorted by the absolute change
 * of the total time. A zone whose p50 grew by more than the threshold is a regression, and any
 * regression makes the exit status 1, so the command can gate a CI job. Zones with fewer than
 * --min-count slices in either trace are not judged (their p50 means little) and are listed as
 * skipped. Uses only the public API (any format loupe reads, on both sides).
 */
#include "cli.h"

#include <loupe/loupe.h>

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_THRESHOLD 10.0
#define DEFAULT_MIN_COUNT 5

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe diff BASE NEW [--threshold PCT] [--min-count N] [--json]\n"
            "\n"
            "Compares two traces per zone name: count, total, mean, p50 and p99 (nearest rank)\n"
            "in BASE and NEW, and the change in percent. Rows are sorted by the absolute change\n"
            "of the total time, largest first. BASE and NEW are anything loupe summary takes\n"
            "(a trace file in any format loupe reads, a run directory, a log_dir).\n"
            "\n"
            "A zone is a regression when its p50 in NEW is more than PCT percent above BASE.\n"
            "Zones with fewer than N slices in either trace are not judged (listed as skipped),\n"
            "nor are zones found in one trace only, nor zones whose BASE p50 is 0.\n"
            "\n"
            "options:\n"
            "  --threshold PCT  the p50 slowdown that fails, in percent (default %.0f)\n"
            "  --min-count N    the fewest slices a zone needs in both traces (default %d)\n"
            "  --json           print JSON: {\"base\", \"new\", \"threshold_pct\", \"min_count\",\n"
            "                   \"regressions\", \"skipped\": [names], \"zones\": [{\"name\",\n"
            "                   \"status\", \"base\": {\"count\", \"total_ns\", \"mean_ns\",\n"
            "                   \"p50_ns\", \"p99_ns\"}, \"new\": {...}, \"change_pct\":\n"
            "                   {\"total\", \"mean\", \"p50\", \"p99\"} (null: no BASE value)}]}\n"
            "  -h, --help       show this help\n"
            "\n"
            "status of a zone: regression, slower, faster, same, skipped, added, removed\n"
            "exit status: 0 no regression, 1 at least one regression, 2 bad usage or a trace\n"
            "that cannot be read\n",
            DEFAULT_THRESHOLD, DEFAULT_MIN_COUNT);
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loupe diff: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'loupe diff --help' for usage.\n");
    va_end(ap);
    return 2;
}

typedef struct zstat {
    const char *name;
    uint64_t count, total, mean, p50, p99;
} zstat;

typedef struct dur {
    const char *name;
    uint64_t ns;
} dur;

static int cmp_dur(const void *pa, const void *pb) {
    const dur *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    if (c != 0) {
        return c;
    }
    return a->ns < b->ns ? -1 : (a->ns > b->ns);
}

static uint64_t pct_rank(const dur *sorted, uint64_t n, unsigned pct) {
    uint64_t rank = (pct * n + 99) / 100;
    return sorted[rank > 0 ? rank - 1 : 0].ns;
}

/* Per-name statistics, sorted by name. -1 on out-of-memory. */
static int zone_stats(const loupe_model *m, zstat **out, size_t *count) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    *out = NULL;
    *count = 0;
    if (n == 0) {
        return 0;
    }
    dur *d = malloc(n * sizeof(*d));
    zstat *z = malloc(n * sizeof(*z));
    if (d == NULL || z == NULL) {
        free(d);
        free(z);
        return -1;
    }
    size_t k = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            d[k++] = (dur){m->threads[t].slices[i].name, m->threads[t].slices[i].dur_ns};
        }
    }
    qsort(d, n, sizeof(*d), cmp_dur);
    size_t r = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        zstat *w = &z[r++];
        memset(w, 0, sizeof(*w));
        w->name = d[i].name;
        while (j < n && strcmp(d[j].name, w->name) == 0) {
            w->total += d[j].ns;
            j++;
        }
        w->count = j - i;
        w->mean = (w->total + w->count / 2) / w->count;
        w->p50 = pct_rank(d + i, w->count, 50);
        w->p99 = pct_rank(d + i, w->count, 99);
        i = j;
    }
    free(d);
    *out = z;
    *count = r;
    return 0;
}

enum { ST_REGRESSION, ST_SLOWER, ST_FASTER, ST_SAME, ST_SKIPPED, ST_ADDED, ST_REMOVED };
static const char *const g_status[] = {"regression", "slower", "faster", "same",
                                       "skipped",    "added",  "removed"};

typedef struct drow {
    const char *name;
    const zstat *a, *b; /* NULL when absent */
    int status;
    double abs_change; /* |total NEW - total BASE| in ns, the sort key */
} drow;

static int cmp_drow(const void *pa, const void *pb) {
    const drow *a = pa, *b = pb;
    if (a->abs_change != b->abs_change) {
        return a->abs_change > b->abs_change ? -1 : 1;
    }
    return strcmp(a->name, b->name);
}

/* Change in percent; NAN when the base is 0. */
static double change(uint64_t base, uint64_t now) {
    if (base == 0) {
        return NAN;
    }
    return ((double)now - (double)base) * 100.0 / (double)base;
}

static void fmt_pct(char *buf, size_t size, double p) {
    if (isnan(p)) {
        snprintf(buf, size, "n/a");
    } else {
        snprintf(buf, size, "%+.1f%%", p);
    }
}

/* Control characters in a name shown as '?' for the table. */
static void print_name(const char *s) {
    for (; *s; s++) {
        putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
    }
}

static void print_text(const char *fa, const char *fb, const drow *rows, size_t n, double threshold,
                       uint64_t min_count, size_t regressions) {
    printf("base: %s\nnew:  %s\n\n", fa, fb);
    printf("%-10s  %15s  %12s  %12s  %8s  %12s  %12s  %8s  %12s  %8s  %8s  %s\n", "status", "count",
           "total base", "total new", "total", "p50 base", "p50 new", "p50", "p99 new", "p99",
           "mean", "name");
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++) {
        const drow *r = &rows[i];
        static const zstat none = {0};
        const zstat *a = r->a ? r->a : &none, *b = r->b ? r->b : &none;
        char cnt[48], ta[32], tb[32], pt[16], pa[32], pb[32], pp[16], p9[32], p9p[16], mp[16];
        snprintf(cnt, sizeof cnt, "%llu -> %llu", (unsigned long long)a->count,
                 (unsigned long long)b->count);
        loupe_cli_fmt_dur(ta, sizeof ta, a->total);
        loupe_cli_fmt_dur(tb, sizeof tb, b->total);
        fmt_pct(pt, sizeof pt, r->a && r->b ? change(a->total, b->total) : NAN);
        loupe_cli_fmt_dur(pa, sizeof pa, a->p50);
        loupe_cli_fmt_dur(pb, sizeof pb, b->p50);
        fmt_pct(pp, sizeof pp, r->a && r->b ? change(a->p50, b->p50) : NAN);
        loupe_cli_fmt_dur(p9, sizeof p9, b->p99);
        fmt_pct(p9p, sizeof p9p, r->a && r->b ? change(a->p99, b->p99) : NAN);
        fmt_pct(mp, sizeof mp, r->a && r->b ? change(a->mean, b->mean) : NAN);
        printf("%-10s  %15s  %12s  %12s  %8s  %12s  %12s  %8s  %12s  %8s  %8s  ",
               g_status[r->status], cnt, ta, tb, pt, pa, pb, pp, p9, p9p, mp);
        print_name(r->name);
        putchar('\n');
        skipped += r->status == ST_SKIPPED;
    }
    printf("\n");
    if (skipped > 0) {
        printf("%zu zone%s skipped: fewer than %llu slices in a trace, not judged\n", skipped,
               skipped == 1 ? "" : "s", (unsigned long long)min_count);
    }
    if (regressions > 0) {
        printf("%zu regression%s: p50 more than %.1f%% slower\n", regressions,
               regressions == 1 ? "" : "s", threshold);
    } else {
        printf("no regression (p50 threshold %.1f%%)\n", threshold);
    }
}

static json_t *jstat(const zstat *z) {
    if (z == NULL) {
        return json_null();
    }
    return json_pack("{sIsIsIsIsI}", "count", loupe_cli_jint(z->count), "total_ns",
                     loupe_cli_jint(z->total), "mean_ns", loupe_cli_jint(z->mean), "p50_ns",
                     loupe_cli_jint(z->p50), "p99_ns", loupe_cli_jint(z->p99));
}

static json_t *jpct(const zstat *a, const zstat *b, int which) {
    if (a == NULL || b == NULL) {
        return json_null();
    }
    uint64_t x = which == 0 ? a->total : which == 1 ? a->mean : which == 2 ? a->p50 : a->p99;
    uint64_t y = which == 0 ? b->total : which == 1 ? b->mean : which == 2 ? b->p50 : b->p99;
    double c = change(x, y);
    return isnan(c) ? json_null() : json_real(c);
}

static int print_json(const char *fa, const char *fb, const drow *rows, size_t n, double threshold,
                      uint64_t min_count, size_t regressions) {
    json_t *root = json_object(), *zones = json_array(), *skipped = json_array();
    int bad = root == NULL || zones == NULL || skipped == NULL;
    bad |= json_object_set_new(root, "base", loupe_cli_jstr(fa));
    bad |= json_object_set_new(root, "new", loupe_cli_jstr(fb));
    bad |= json_object_set_new(root, "threshold_pct", json_real(threshold));
    bad |= json_object_set_new(root, "min_count", json_integer(loupe_cli_jint(min_count)));
    bad |= json_object_set_new(root, "regressions", json_integer(loupe_cli_jint(regressions)));
    for (size_t i = 0; i < n && !bad; i++) {
        const drow *r = &rows[i];
        json_t *z = json_object();
        bad |= z == NULL || json_array_append_new(zones, z);
        if (bad) {
            break;
        }
        bad |= json_object_set_new(z, "name", loupe_cli_jstr(r->name));
        bad |= json_object_set_new(z, "status", json_string(g_status[r->status]));
        bad |= json_object_set_new(z, "base", jstat(r->a));
        bad |= json_object_set_new(z, "new", jstat(r->b));
        json_t *c =
            json_pack("{sosososo}", "total", jpct(r->a, r->b, 0), "mean", jpct(r->a, r->b, 1),
                      "p50", jpct(r->a, r->b, 2), "p99", jpct(r->a, r->b, 3));
        bad |= json_object_set_new(z, "change_pct", c != NULL ? c : json_null());
        if (r->status == ST_SKIPPED) {
            bad |= json_array_append_new(skipped, loupe_cli_jstr(r->name));
        }
    }
    bad |= json_object_set(root, "skipped", skipped);
    bad |= json_object_set(root, "zones", zones);
    if (!bad) {
        bad = json_dumpf(root, stdout, JSON_INDENT(2)) != 0;
        putchar('\n');
    }
    json_decref(skipped);
    json_decref(zones);
    json_decref(root);
    if (bad) {
        fprintf(stderr, "loupe diff: out of memory writing JSON\n");
        return -1;
    }
    return 0;
}

static int load(const char *path, char *file, size_t size, loupe_model **m) {
    int rc = loupe_trace_find(path, file, size);
    if (rc == 0) {
        rc = loupe_trace_read(file, m);
    }
    if (rc != 0) {
        fprintf(stderr, "loupe diff: %s: %s\n", loupe_strerror(rc), loupe_last_error());
    }
    return rc;
}

static int parse_num(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != 0 || !(v >= 0) || isinf(v)) {
        return -1;
    }
    *out = v;
    return 0;
}

int loupe_cmd_diff(int argc, char **argv) {
    const char *paths[2] = {NULL, NULL};
    int as_json = 0, opts_done = 0;
    double threshold = DEFAULT_THRESHOLD, minc = DEFAULT_MIN_COUNT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int which = 0; /* 1 threshold, 2 min-count */
        if (opts_done || a[0] != '-' || strcmp(a, "-") == 0) {
            if (paths[1] != NULL) {
                return bad_usage("two traces only (BASE NEW), got '%s' as well", a);
            }
            paths[paths[0] == NULL ? 0 : 1] = a;
            continue;
        } else if (strcmp(a, "--") == 0) {
            opts_done = 1;
            continue;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            as_json = 1;
            continue;
        } else if (strcmp(a, "--threshold") == 0 || strcmp(a, "--min-count") == 0) {
            if (i + 1 >= argc) {
                return bad_usage("%s needs a number", a);
            }
            which = a[2] == 't' ? 1 : 2;
            val = argv[++i];
        } else if (strncmp(a, "--threshold=", 12) == 0) {
            which = 1;
            val = a + 12;
        } else if (strncmp(a, "--min-count=", 12) == 0) {
            which = 2;
            val = a + 12;
        } else {
            return bad_usage("unknown option '%s'", a);
        }
        double v;
        /* a count is a whole number that a size fits (1e23 would wrap when converted) */
        if (parse_num(val, &v) != 0 || (which == 2 && (v != floor(v) || v > 1e15))) {
            return bad_usage("%s needs a %s, not '%s'", which == 1 ? "--threshold" : "--min-count",
                             which == 1 ? "percentage >= 0" : "whole number >= 0", val);
        }
        if (which == 1) {
            threshold = v;
        } else {
            minc = v;
        }
    }
    if (paths[1] == NULL) {
        return bad_usage("two traces needed: BASE NEW");
    }
    uint64_t min_count = (uint64_t)minc;
    char fa[4096], fb[4096];
    loupe_model *ma = NULL, *mb = NULL;
    if (load(paths[0], fa, sizeof fa, &ma) != 0 || load(paths[1], fb, sizeof fb, &mb) != 0) {
        loupe_model_free(ma);
        return 2;
    }
    zstat *za = NULL, *zb = NULL;
    size_t na = 0, nb = 0;
    drow *rows = NULL;
    int status = 2;
    if (zone_stats(ma, &za, &na) != 0 || zone_stats(mb, &zb, &nb) != 0 ||
        (rows = malloc((na + nb + 1) * sizeof(*rows))) == NULL) {
        fprintf(stderr, "loupe diff: out of memory\n");
        goto done;
    }
    size_t n = 0, i = 0, j = 0, regressions = 0;
    while (i < na || j < nb) {
        int c = i >= na ? 1 : j >= nb ? -1 : strcmp(za[i].name, zb[j].name);
        drow *r = &rows[n++];
        r->a = c <= 0 ? &za[i] : NULL;
        r->b = c >= 0 ? &zb[j] : NULL;
        r->name = r->a ? r->a->name : r->b->name;
        i += c <= 0;
        j += c >= 0;
        double ta = r->a ? (double)r->a->total : 0, tb = r->b ? (double)r->b->total : 0;
        r->abs_change = fabs(tb - ta);
        if (r->a == NULL) {
            r->status = ST_ADDED;
        } else if (r->b == NULL) {
            r->status = ST_REMOVED;
        } else if (r->a->count < min_count || r->b->count < min_count || r->a->p50 == 0) {
            r->status = ST_SKIPPED;
        } else {
            double p = change(r->a->p50, r->b->p50);
            r->status = p > threshold ? ST_REGRESSION
                        : p > 0       ? ST_SLOWER
                        : p < 0       ? ST_FASTER
                                      : ST_SAME;
            regressions += r->status == ST_REGRESSION;
        }
    }
    qsort(rows, n, sizeof(*rows), cmp_drow);
    if (as_json) {
        if (print_json(fa, fb, rows, n, threshold, min_count, regressions) != 0) {
            goto done;
        }
    } else {
        print_text(fa, fb, rows, n, threshold, min_count, regressions);
    }
    status = fflush(stdout) != 0 || ferror(stdout) ? 2 : regressions > 0 ? 1 : 0;
done:
    free(rows);
    free(za);
    free(zb);
    loupe_model_free(ma);
    loupe_model_free(mb);
    return status;
}
