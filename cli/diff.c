/* diff.c: `loupe diff BASE NEW [options]`: compares two traces zone by zone (slices grouped by
 * name over all threads): count, total, mean, p50, p99 (nearest rank, as loupe summary) in each
 * and the change; rows sorted by the absolute change of the total time. Any regression makes the
 * exit status 1, so the command can gate a CI job. Uses only the public API (any format loupe
 * reads, on both sides).
 *
 * A zone is a regression only when three tests agree, so that two runs of the same binary on the
 * same input report none (their p50s differ by a few percent from scheduling and caches alone):
 *   - its p50 grew by more than --threshold percent,
 *   - and by at least --min-delta (default 1 µs): an absolute floor, below which a percentage of
 *     a tiny zone is noise (a 200 ns zone that takes 240 ns is +20%),
 *   - and the per-call durations of NEW are larger than BASE's with a one-sided Mann-Whitney U
 *     test's p-value below --alpha (default 0.01).
 * Why Mann-Whitney U (Mann & Whitney 1947; the normal approximation with the tie correction and a
 * continuity correction, as scipy.stats.mannwhitneyu does for large samples): per-call durations
 * are skewed and heavy-tailed (a page fault, a preemption), so a test on ranks assumes no
 * distribution and one outlier moves it by one rank, not by its size; it is exact arithmetic on
 * sorted arrays (O(n log n), deterministic), where a bootstrap of the p50 difference would need
 * thousands of resamples and a random seed to give the same answer twice. Zones with fewer than
 * --min-count slices on either side are not judged (the approximation needs samples) and are
 * listed as skipped. With one test per zone, alpha 0.01 keeps the expected false alarms of a
 * 100-zone trace at about one in a run only if every threshold is also crossed.
 *
 * A trace that dropped events (full buffers) undercounts some zones and inflates the self time of
 * others: diff warns on stderr and in the output, and exits 3 (distinct from a regression).
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
#define DEFAULT_MIN_DELTA_NS 1000
#define DEFAULT_ALPHA 0.01
#define EXIT_DROPPED 3
#define EXIT_NO_ZONES 4

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: loupe diff BASE NEW [--threshold PCT] [--min-delta DUR] [--alpha P]\n"
        "                  [--min-count N] [--json]\n"
        "\n"
        "Compares two traces per zone name: count, total, mean, p50 and p99 (nearest rank)\n"
        "in BASE and NEW, and the change in percent. Rows are sorted by the absolute change\n"
        "of the total time, largest first. BASE and NEW are anything loupe summary takes\n"
        "(a trace file in any format loupe reads, a run directory, a log_dir).\n"
        "\n"
        "A zone is a regression when all three hold, so that two runs of the same program\n"
        "on the same input show none:\n"
        "  - its p50 in NEW is more than PCT percent above BASE,\n"
        "  - and at least DUR above it (an absolute noise floor for short zones),\n"
        "  - and a one-sided Mann-Whitney U test on the per-call durations (normal\n"
        "    approximation, tie and continuity corrections) says NEW's are larger with a\n"
        "    p-value below P. A rank test: durations are skewed and heavy-tailed, so it\n"
        "    assumes no distribution and an outlier counts as one rank, not its size.\n"
        "Zones with fewer than N slices in either trace are not judged (listed as skipped),\n"
        "nor are zones found in one trace only, nor zones whose BASE p50 is 0. A zone\n"
        "whose p50 grew by more than PCT but less than DUR, or not significantly, is\n"
        "\"noise\"; one whose p50 grew by PCT or less, but by DUR and significantly, is\n"
        "\"slower\"; one whose p50 fell by DUR and significantly (the same test, NEW's\n"
        "durations smaller) is \"faster\"; any other change is \"same\". Names are\n"
        "never cut: the name is the last column.\n"
        "\n"
        "options:\n"
        "  --threshold PCT  the p50 slowdown that fails, in percent (default %.0f)\n"
        "  --min-delta DUR  the p50 slowdown that fails, as a time: 1us, 500ns, 2ms, 0.5s\n"
        "                   or a number of ns (default 1us; 0 turns the floor off)\n"
        "  --alpha P        the p-value below which a slowdown is significant (default %.2f;\n"
        "                   1 turns the test off)\n"
        "  --min-count N    the fewest slices a zone needs in both traces (default %d)\n"
        "  --json           print JSON: {\"base\", \"new\", \"threshold_pct\",\n"
        "                   \"min_delta_ns\", \"alpha\", \"min_count\", \"events_dropped\":\n"
        "                   {\"base\", \"new\"}, \"warnings\": [text], \"regressions\",\n"
        "                   \"skipped\": [names], \"zones\": [{\"name\", \"status\", \"base\":\n"
        "                   {\"count\", \"total_ns\", \"mean_ns\", \"p50_ns\", \"p99_ns\"},\n"
        "                   \"new\": {...}, \"delta_p50_ns\", \"p_value\" (null: not tested),\n"
        "                   \"change_pct\": {\"total\", \"mean\", \"p50\", \"p99\"} (null: no\n"
        "                   BASE value)}]}\n"
        "  -h, --help       show this help\n"
        "\n"
        "status of a zone: regression, slower, noise, faster, same, skipped, added, removed\n"
        "While it reads, a progress meter is drawn on stderr when stderr is a terminal,\n"
        "once the read has taken LOUPE_PROGRESS_AFTER_MS (default 1000) ms.\n\n"
        "exit status: 0 no regression; 1 at least one regression; 2 bad usage or a trace\n"
        "that cannot be read; 3 a trace dropped events (full buffers: counts and self\n"
        "times are wrong, so the comparison cannot be trusted; wins over 0 and 1, the\n"
        "output still says whether a regression was found); 4 neither trace has zones\n"
        "(a sampling-only recording: diff compares zones, not samples)\n",
        DEFAULT_THRESHOLD, DEFAULT_ALPHA, DEFAULT_MIN_COUNT);
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
    const uint64_t *ns; /* the count durations, ascending (into the trace's array) */
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

/* Per-name statistics, sorted by name; *durs (caller frees) holds every zone's sorted durations.
 * -1 on out-of-memory. */
static int zone_stats(const loupe_model *m, zstat **out, size_t *count, uint64_t **durs) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    *out = NULL;
    *count = 0;
    *durs = NULL;
    if (n == 0) {
        return 0;
    }
    dur *d = malloc(n * sizeof(*d));
    zstat *z = malloc(n * sizeof(*z));
    uint64_t *ns = malloc(n * sizeof(*ns));
    if (d == NULL || z == NULL || ns == NULL) {
        free(d);
        free(z);
        free(ns);
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
        w->ns = ns + i;
        while (j < n && strcmp(d[j].name, w->name) == 0) {
            w->total += d[j].ns;
            ns[j] = d[j].ns;
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
    *durs = ns;
    return 0;
}

/* The one-sided p-value that b's values are larger than a's (both ascending): Mann-Whitney U
 * with mid-ranks for ties, the normal approximation with the tie-corrected variance
 * n_a n_b / 12 * ((N + 1) - sum(t^3 - t) / (N (N - 1))) and a continuity correction of 1/2
 * (scipy.stats.mannwhitneyu, method="asymptotic", alternative="greater"). 1 when every value is
 * the same. */
static double mwu_greater(const uint64_t *a, uint64_t na, const uint64_t *b, uint64_t nb) {
    double rank_b = 0, ties = 0;
    uint64_t i = 0, j = 0, r = 0; /* r: values ranked so far */
    while (i < na || j < nb) {
        uint64_t v = i < na && (j >= nb || a[i] <= b[j]) ? a[i] : b[j];
        uint64_t ca = 0, cb = 0;
        while (i < na && a[i] == v) {
            i++;
            ca++;
        }
        while (j < nb && b[j] == v) {
            j++;
            cb++;
        }
        double t = (double)(ca + cb);
        double mid = (double)r + (t + 1.0) / 2.0; /* ranks r+1 .. r+t */
        rank_b += mid * (double)cb;
        ties += t * t * t - t;
        r += ca + cb;
    }
    double n1 = (double)na, n2 = (double)nb, n = n1 + n2;
    double u = rank_b - n2 * (n2 + 1.0) / 2.0;
    double var = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    if (!(var > 0)) {
        return 1.0;
    }
    double z = (u - n1 * n2 / 2.0 - 0.5) / sqrt(var);
    return 0.5 * erfc(z / sqrt(2.0));
}

enum { ST_REGRESSION, ST_SLOWER, ST_NOISE, ST_FASTER, ST_SAME, ST_SKIPPED, ST_ADDED, ST_REMOVED };
static const char *const g_status[] = {"regression", "slower",  "noise", "faster",
                                       "same",       "skipped", "added", "removed"};

typedef struct drow {
    const char *name;
    const zstat *a, *b; /* NULL when absent */
    int status;
    double abs_change; /* |total NEW - total BASE| in ns, the sort key */
    double p_value;    /* NAN when not tested */
} drow;

/* What the comparison is judged by (the options). */
typedef struct judge {
    double threshold, alpha;
    uint64_t min_count, min_delta;
} judge;

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

static void fmt_p(char *buf, size_t size, double p) {
    if (isnan(p)) {
        snprintf(buf, size, "-");
    } else if (p < 0.0001) {
        snprintf(buf, size, "<0.0001");
    } else {
        snprintf(buf, size, "%.4f", p);
    }
}

/* A signed difference of two durations, "+1.500 µs" / "-812 ns". */
static void fmt_delta(char *buf, size_t size, uint64_t base, uint64_t now) {
    char d[32];
    loupe_cli_fmt_dur(d, sizeof d, now >= base ? now - base : base - now);
    snprintf(buf, size, "%s%s", now >= base ? "+" : "-", d);
}

/* The warning for a trace that dropped events; "" when it dropped none. */
static void drop_warning(char *buf, size_t size, const char *which, const char *file,
                         uint64_t dropped) {
    buf[0] = 0;
    if (dropped > 0) {
        snprintf(buf, size,
                 "%s %s dropped %llu events (buffers were full): its counts and totals are too "
                 "low and the self time of the zones open when the drops began is too high, so "
                 "this comparison cannot be trusted; record it again with a larger buffer "
                 "(loupe record --buffer-events)",
                 which, file, (unsigned long long)dropped);
    }
}

static void print_text(const char *fa, const char *fb, const drow *rows, size_t n, const judge *jg,
                       size_t regressions, char warn[2][8400]) {
    for (int k = 0; k < 2; k++) {
        if (warn[k][0]) {
            printf("warning: %s\n", warn[k]);
        }
    }
    printf("base: %s\nnew:  %s\n\n", fa, fb);
    printf("%-10s  %15s  %12s  %12s  %8s  %12s  %12s  %8s  %13s  %8s  %12s  %8s  %8s  %s\n",
           "status", "count", "total base", "total new", "total", "p50 base", "p50 new", "p50",
           "p50 delta", "p-value", "p99 new", "p99", "mean", "name");
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++) {
        const drow *r = &rows[i];
        static const zstat none = {0};
        const zstat *a = r->a ? r->a : &none, *b = r->b ? r->b : &none;
        char cnt[48], ta[32], tb[32], pt[16], pa[32], pb[32], pp[16], p9[32], p9p[16], mp[16];
        char dl[40], pv[16];
        snprintf(cnt, sizeof cnt, "%llu -> %llu", (unsigned long long)a->count,
                 (unsigned long long)b->count);
        loupe_cli_fmt_dur(ta, sizeof ta, a->total);
        loupe_cli_fmt_dur(tb, sizeof tb, b->total);
        fmt_pct(pt, sizeof pt, r->a && r->b ? change(a->total, b->total) : NAN);
        loupe_cli_fmt_dur(pa, sizeof pa, a->p50);
        loupe_cli_fmt_dur(pb, sizeof pb, b->p50);
        fmt_pct(pp, sizeof pp, r->a && r->b ? change(a->p50, b->p50) : NAN);
        if (r->a && r->b) {
            fmt_delta(dl, sizeof dl, a->p50, b->p50);
        } else {
            snprintf(dl, sizeof dl, "-");
        }
        fmt_p(pv, sizeof pv, r->p_value);
        loupe_cli_fmt_dur(p9, sizeof p9, b->p99);
        fmt_pct(p9p, sizeof p9p, r->a && r->b ? change(a->p99, b->p99) : NAN);
        fmt_pct(mp, sizeof mp, r->a && r->b ? change(a->mean, b->mean) : NAN);
        printf("%-10s  %15s  %12s  %12s  %8s  %12s  %12s  %8s  %13s  %8s  %12s  %8s  %8s  ",
               g_status[r->status], cnt, ta, tb, pt, pa, pb, pp, dl, pv, p9, p9p, mp);
        print_name(r->name);
        putchar('\n');
        skipped += r->status == ST_SKIPPED;
    }
    printf("\n");
    if (skipped > 0) {
        printf("%zu zone%s skipped: fewer than %llu slices in a trace, not judged\n", skipped,
               skipped == 1 ? "" : "s", (unsigned long long)jg->min_count);
    }
    char floor[32];
    loupe_cli_fmt_dur(floor, sizeof floor, jg->min_delta);
    if (regressions > 0) {
        printf("%zu regression%s: p50 more than %.1f%% and %s slower, p-value below %g\n",
               regressions, regressions == 1 ? "" : "s", jg->threshold, floor, jg->alpha);
    } else {
        printf("no regression (p50 threshold %.1f%%, floor %s, p-value below %g)\n", jg->threshold,
               floor, jg->alpha);
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

static int print_json(const char *fa, const char *fb, const drow *rows, size_t n, const judge *jg,
                      size_t regressions, const uint64_t dropped[2], char warn[2][8400],
                      const loupe_model *ms[2]) {
    json_t *root = json_object(), *zones = json_array(), *skipped = json_array();
    json_t *warnings = json_array();
    int bad = root == NULL || zones == NULL || skipped == NULL || warnings == NULL;
    bad |= json_object_set_new(root, "base", loupe_cli_jstr(fa));
    bad |= json_object_set_new(root, "new", loupe_cli_jstr(fb));
    bad |= json_object_set_new(root, "threshold_pct", json_real(jg->threshold));
    bad |= json_object_set_new(root, "min_delta_ns", json_integer(loupe_cli_jint(jg->min_delta)));
    bad |= json_object_set_new(root, "alpha", json_real(jg->alpha));
    bad |= json_object_set_new(root, "min_count", json_integer(loupe_cli_jint(jg->min_count)));
    bad |= json_object_set_new(
        root, "events_dropped",
        json_pack("{sIsI}", "base", loupe_cli_jint(dropped[0]), "new", loupe_cli_jint(dropped[1])));
    for (int k = 0; k < 2 && !bad; k++) {
        if (warn[k][0]) {
            bad |= json_array_append_new(warnings, loupe_cli_jstr(warn[k]));
        }
    }
    /* the reader's, "BASE: ..." and "NEW: ..." (what it dropped or repaired in each input) */
    for (int k = 0; k < 2 && !bad; k++) {
        for (size_t i = 0; i < ms[k]->warning_count && !bad; i++) {
            size_t l = strlen(ms[k]->warnings[i]) + 8;
            char *w = malloc(l);
            bad |= w == NULL;
            if (w != NULL) {
                snprintf(w, l, "%s: %s", k == 0 ? "BASE" : "NEW", ms[k]->warnings[i]);
                bad |= json_array_append_new(warnings, loupe_cli_jstr(w));
                free(w);
            }
        }
    }
    bad |= json_object_set(root, "warnings", warnings);
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
        json_t *dl = json_null();
        if (r->a && r->b) {
            dl = json_integer((json_int_t)r->b->p50 - (json_int_t)r->a->p50);
        }
        bad |= json_object_set_new(z, "delta_p50_ns", dl);
        bad |= json_object_set_new(z, "p_value",
                                   isnan(r->p_value) ? json_null() : json_real(r->p_value));
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
    json_decref(warnings);
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
        loupe_cli_progress_begin("diff");
        rc = loupe_trace_read(file, m);
        loupe_cli_progress_end();
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

/* A duration: a number of ns, or a number with ns, us, µs, ms or s. */
static int parse_dur(const char *s, uint64_t *out) {
    char *end;
    double v = strtod(s, &end);
    static const struct {
        const char *unit;
        double ns;
    } units[] = {{"", 1}, {"ns", 1}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    if (end == s || !(v >= 0) || isinf(v)) {
        return -1;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            double ns = v * units[i].ns;
            if (ns > 1e18) {
                return -1;
            }
            *out = (uint64_t)llround(ns);
            return 0;
        }
    }
    return -1;
}

int loupe_cmd_diff(int argc, char **argv) {
    const char *paths[2] = {NULL, NULL};
    int as_json = 0, opts_done = 0;
    double minc = DEFAULT_MIN_COUNT;
    judge jg = {DEFAULT_THRESHOLD, DEFAULT_ALPHA, DEFAULT_MIN_COUNT, DEFAULT_MIN_DELTA_NS};
    static const char *const opt[] = {"", "--threshold", "--min-count", "--min-delta", "--alpha"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int which = 0; /* 1 threshold, 2 min-count, 3 min-delta, 4 alpha */
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
        }
        for (int k = 1; k <= 4 && which == 0; k++) {
            size_t len = strlen(opt[k]);
            if (strcmp(a, opt[k]) == 0) {
                if (i + 1 >= argc) {
                    return bad_usage("%s needs a %s", a, k == 3 ? "duration" : "number");
                }
                which = k;
                val = argv[++i];
            } else if (strncmp(a, opt[k], len) == 0 && a[len] == '=') {
                which = k;
                val = a + len + 1;
            }
        }
        if (which == 0) {
            return bad_usage("unknown option '%s'", a);
        }
        double v = 0;
        if (which == 3) {
            if (parse_dur(val, &jg.min_delta) != 0) {
                return bad_usage("--min-delta needs a duration (1us, 500ns, 2ms, 0.5s or ns), "
                                 "not '%s'",
                                 val);
            }
            continue;
        }
        /* a count is a whole number that a size fits (1e23 would wrap when converted) */
        if (parse_num(val, &v) != 0 || (which == 2 && (v != floor(v) || v > 1e15)) ||
            (which == 4 && v > 1)) {
            return bad_usage("%s needs a %s, not '%s'", opt[which],
                             which == 1   ? "percentage >= 0"
                             : which == 2 ? "whole number >= 0"
                                          : "p-value between 0 and 1",
                             val);
        }
        if (which == 1) {
            jg.threshold = v;
        } else if (which == 2) {
            minc = v;
        } else {
            jg.alpha = v;
        }
    }
    if (paths[1] == NULL) {
        return bad_usage("two traces needed: BASE NEW");
    }
    jg.min_count = (uint64_t)minc;
    char fa[4096], fb[4096];
    loupe_model *ma = NULL, *mb = NULL;
    if (load(paths[0], fa, sizeof fa, &ma) != 0 || load(paths[1], fb, sizeof fb, &mb) != 0) {
        loupe_model_free(ma);
        return 2;
    }
    uint64_t dropped[2] = {loupe_model_events_dropped(ma), loupe_model_events_dropped(mb)};
    static char warn[2][8400];
    drop_warning(warn[0], sizeof warn[0], "BASE", fa, dropped[0]);
    drop_warning(warn[1], sizeof warn[1], "NEW", fb, dropped[1]);
    for (int k = 0; k < 2; k++) {
        if (warn[k][0]) {
            fprintf(stderr, "loupe diff: warning: %s\n", warn[k]);
        }
    }
    loupe_cli_reader_warnings("diff", "BASE", ma);
    loupe_cli_reader_warnings("diff", "NEW", mb);
    zstat *za = NULL, *zb = NULL;
    uint64_t *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    drow *rows = NULL;
    int status = 2;
    if (zone_stats(ma, &za, &na, &da) != 0 || zone_stats(mb, &zb, &nb, &db) != 0 ||
        (rows = malloc((na + nb + 1) * sizeof(*rows))) == NULL) {
        fprintf(stderr, "loupe diff: out of memory\n");
        goto done;
    }
    if (na == 0 && nb == 0) {
        fprintf(stderr,
                "loupe diff: neither trace has zones to compare (BASE %s: %zu CPU samples; NEW "
                "%s: %zu): diff compares zones only; `loupe summary` shows each trace's hot "
                "functions\n",
                fa, ma->sample_count, fb, mb->sample_count);
        status = EXIT_NO_ZONES;
        goto done;
    }
    size_t n = 0, i = 0, j = 0, regressions = 0;
    while (i < na || j < nb) {
        int c = i >= na ? 1 : j >= nb ? -1 : strcmp(za[i].name, zb[j].name);
        drow *r = &rows[n++];
        r->a = c <= 0 ? &za[i] : NULL;
        r->b = c >= 0 ? &zb[j] : NULL;
        r->name = r->a ? r->a->name : r->b->name;
        r->p_value = NAN;
        i += c <= 0;
        j += c >= 0;
        double ta = r->a ? (double)r->a->total : 0, tb = r->b ? (double)r->b->total : 0;
        r->abs_change = fabs(tb - ta);
        if (r->a == NULL) {
            r->status = ST_ADDED;
        } else if (r->b == NULL) {
            r->status = ST_REMOVED;
        } else if (r->a->count < jg.min_count || r->b->count < jg.min_count || r->a->p50 == 0) {
            r->status = ST_SKIPPED;
        } else {
            double p = change(r->a->p50, r->b->p50);
            r->p_value = mwu_greater(r->a->ns, r->a->count, r->b->ns, r->b->count);
            int real = r->b->p50 >= r->a->p50 + jg.min_delta && r->p_value < jg.alpha;
            /* a speedup passes the same two tests the other way (NEW's durations smaller);
             * a change that fails either is within the noise: "same" */
            int real_faster = r->a->p50 >= r->b->p50 + jg.min_delta &&
                              mwu_greater(r->b->ns, r->b->count, r->a->ns, r->a->count) < jg.alpha;
            r->status = p > jg.threshold       ? (real ? ST_REGRESSION : ST_NOISE)
                        : p > 0 && real        ? ST_SLOWER
                        : p < 0 && real_faster ? ST_FASTER
                                               : ST_SAME;
            regressions += r->status == ST_REGRESSION;
        }
    }
    qsort(rows, n, sizeof(*rows), cmp_drow);
    if (as_json) {
        const loupe_model *ms[2] = {ma, mb};
        if (print_json(fa, fb, rows, n, &jg, regressions, dropped, warn, ms) != 0) {
            goto done;
        }
    } else {
        print_text(fa, fb, rows, n, &jg, regressions, warn);
    }
    status = fflush(stdout) != 0 || ferror(stdout) ? 2
             : dropped[0] > 0 || dropped[1] > 0    ? EXIT_DROPPED
             : regressions > 0                     ? 1
                                                   : 0;
done:
    free(rows);
    free(za);
    free(zb);
    free(da);
    free(db);
    loupe_model_free(ma);
    loupe_model_free(mb);
    return status;
}
