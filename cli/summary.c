/* summary.c: `loupe summary`, a table of a trace's zones (slices) by name: count, total, self
 * time, mean, p50, p99, max and share of the traced wall time, as text or JSON.
 *
 * Uses only the public API: loupe_trace_find() resolves a file, run directory or log_dir, and
 * loupe_trace_read() gives the model. Self time is a slice's duration minus the durations of its
 * direct children, found from the model's order (start order, parents first) and depths.
 * Percentiles are nearest-rank on the sorted durations.
 *
 * `% time` is per thread: a zone's total as a share of the traced time of the threads it ran on
 * (the trace's duration times that number of threads), so a zone that keeps one thread busy is
 * 100% whatever the number of threads; nested zones count in their parents' totals too, which is
 * why the column does not sum to 100% and the header says so. Names are never cut (C++ template
 * names differ past any width): the name is the last column. Events dropped on full buffers come
 * first, with the zones whose self time they inflate. A trace with CPU samples ends with a
 * hot-functions table (self and total samples per function; see "hot functions" below).
 */
#include "cli.h"

#include <loupe/loupe.h>

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_TOP 30

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: loupe summary [PATH] [--by-thread] [--top N] [--json]\n"
        "\n"
        "Summarises the zones of a trace: per zone name, the number of slices, their total\n"
        "time, self time (total minus the time of direct children), mean, p50, p99 (nearest\n"
        "rank), max, and %% time. Rows are sorted by total time, largest first. Names are\n"
        "never cut: the name is the last column.\n"
        "\n"
        "%% time is per thread: the time the zone ran (its slices that overlap counted once)\n"
        "as a share of the traced time of the threads it ran on (the trace's duration times\n"
        "that number of threads; with --by-thread, of its own thread). A zone that keeps one\n"
        "thread busy is 100%%, never more. Nested zones count in their parents' totals as\n"
        "well, so the column does not sum to 100%%.\n"
        "\n"
        "Then the busy time of each track: the time its top-level slices cover (every slice\n"
        "of an async track), overlapping ones counted once. Slices that overlapped partly on\n"
        "one track (a foreign trace's X events, CUDA kernels on one stream) are on overlap\n"
        "sibling tracks, \"<track> (overlap N)\": a track's row counts its siblings with it,\n"
        "and so do the thread counts and --by-thread rows above. --top N keeps the N\n"
        "busiest tracks (in track order), then says how many more there are.\n"
        "\n"
        "PATH is a trace file (Chrome JSON, gzipped or not: *.trace.json.gz, *.json,\n"
        "*.json.gz, from loupe or another tool; XPlane *.xplane.pb, from loupe or\n"
        "jax.profiler; Perfetto protobuf *.pftrace), a run directory holding one, or a\n"
        "log_dir: then the newest run under <log_dir>/plugins/profile/ is read. Without\n"
        "PATH: ./loupe-log, where loupe record writes by default.\n"
        "\n"
        "options:\n"
        "  --by-thread   one row per (thread, zone name) instead of per zone name\n"
        "  --by-rank     an MPI run (PATH: its run directory or log_dir): per zone name, the\n"
        "                per-rank total's min, mean and max across ranks, the imbalance\n"
        "                (max / mean) and the rank of the max; then the rank that arrives last\n"
        "                at the collectives (docs/mpi.md)\n"
        "  --top N       show the N rows with the largest total (default %d; 0 = all)\n"
        "  --json        print JSON instead of a table: {\"file\", \"duration_ns\", \"threads\",\n"
        "                \"slices\", \"zones\": [{\"name\", \"thread\" (with --by-thread: the\n"
        "                tid, and \"thread_name\"), \"count\", \"total_ns\", \"self_ns\",\n"
        "                \"mean_ns\", \"p50_ns\", \"p99_ns\", \"max_ns\", \"percent\",\n"
        "                \"threads_ran_on\"}], \"events_dropped\", \"capacity_needed\",\n"
        "                \"dropped\": [{\"thread\", \"thread_name\", \"events_dropped\",\n"
        "                \"self_inflated\": [names], \"overflow\" (keep-first,\n"
        "                keep-last, or lost: a GPU tracer's lost records), \"missing\"\n"
        "                (after, before, or anywhere), \"missing_ns\"}],\n"
        "                \"unmatched_ends\",\n"
        "                \"truncated_zones\", \"samples\", \"samples_lost\",\n"
        "                \"sample_period_ns\", \"hot_functions\": [{\"function\", \"thread\",\n"
        "                \"thread_name\" (with --by-thread), \"self_samples\",\n"
        "                \"total_samples\", \"self_percent\", \"total_percent\"}],\n"
        "                \"tracks\": [{\"thread\", \"thread_name\",\n"
        "                \"kind\", \"slices\", \"busy_ns\", \"percent\",\n"
        "                \"overlap_siblings\"}] (the --top busiest), \"tracks_not_shown\"}\n"
        "  -h, --help    show this help\n",
        DEFAULT_TOP);
    fputs(/* two strings: C11 compilers need only take 4095 bytes in one */
          "\n"
          "The output starts with the events dropped when buffers were full, per thread, and\n"
          "their effect. Keep-first (the default): the drops began after that thread's last\n"
          "recorded zone began, so its zones after that are missing, and the zones open then\n"
          "that have children (its enclosing zones; itself if zones of its name have any) lost\n"
          "their later children: their self time is too high. Keep-last (loupe record\n"
          "--keep-last, the trace's loupe_overflow metadata): the oldest events gave way, so\n"
          "the zones before the first kept one are missing, and those open there begin there,\n"
          "cut short. Then the per-thread capacity that would have held them all (loupe\n"
          "record --buffer-events).\n"
          "\n"
          "A trace with CPU samples (from loupe record's sampling) also gets a hot-functions\n"
          "table: per function, its self samples (the function itself was running), its\n"
          "total samples (it was on the stack) and both as a % of the samples, that is of\n"
          "the CPU time sampled; per thread with --by-thread; --top N functions per table.\n"
          "\n"
          "While it reads, a progress meter is drawn on stderr when stderr is a terminal,\n"
          "once the read has taken LOUPE_PROGRESS_AFTER_MS (default 1000) ms.\n\n"
          "exit status: 0 success, 1 the trace cannot be read, 2 bad usage\n",
          f);
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loupe summary: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'loupe summary --help' for usage.\n");
    va_end(ap);
    return 2;
}

typedef struct entry {
    const char *name;
    size_t thread; /* the track, or the track its overlap sibling was split from */
    uint64_t dur, self;
    uint64_t start;
} entry;

typedef struct row {
    const char *name;
    size_t thread;
    uint64_t count, total, self, mean, p50, p99, max;
    uint64_t threads; /* the number of threads the zone ran on */
    double percent;
    uint64_t busy; /* the union of its slices per thread, summed over its threads */
} row;

static int g_by_thread; /* qsort has no context argument */

static int cmp_entry(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    if (c != 0) {
        return c;
    }
    if (g_by_thread && a->thread != b->thread) {
        return a->thread < b->thread ? -1 : 1;
    }
    return a->dur < b->dur ? -1 : (a->dur > b->dur);
}

static int cmp_row(const void *pa, const void *pb) {
    const row *a = pa, *b = pb;
    if (a->total != b->total) {
        return a->total > b->total ? -1 : 1;
    }
    int c = strcmp(a->name, b->name);
    if (c != 0) {
        return c;
    }
    return a->thread < b->thread ? -1 : (a->thread > b->thread);
}

/* Nearest rank: the smallest value with at least pct% of the values at or below it. */
static uint64_t percentile(const entry *sorted, uint64_t n, unsigned pct) {
    uint64_t rank = (pct * n + 99) / 100;
    return sorted[rank > 0 ? rank - 1 : 0].dur;
}

/* The track a track's time counts on: the one an overlap sibling was split from (model.h). */
static size_t track_root(const loupe_model *m, size_t t) {
    const loupe_model_thread *th = &m->threads[t];
    return th->sibling != 0 && th->sibling_of < m->thread_count ? th->sibling_of : t;
}

static int cmp_span(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    if (a->thread != b->thread) {
        return a->thread < b->thread ? -1 : 1;
    }
    return a->start < b->start ? -1 : (a->start > b->start);
}

/* The time covered by n intervals (start, dur) per thread, summed over the threads: overlapping
 * slices (a zone inside itself, a kernel beside its predecessor on the stream) count once. Sorts
 * e by (thread, start). */
static uint64_t union_ns(entry *e, size_t n) {
    qsort(e, n, sizeof(*e), cmp_span);
    uint64_t sum = 0, lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = e[i].start, b = e[i].start + e[i].dur;
        if (i == 0 || e[i].thread != e[i - 1].thread || a > hi) {
            sum += hi - lo;
            lo = a;
            hi = b;
        } else if (b > hi) {
            hi = b;
        }
    }
    return sum + (hi - lo);
}

/* The rows of the table (unsorted by total yet): *out, *count. -1 on out-of-memory. */
static int make_rows(const loupe_model *m, int by_thread, row **out, size_t *count) {
    size_t n = 0, maxn = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
        if (m->threads[t].slice_count > maxn) {
            maxn = m->threads[t].slice_count;
        }
    }
    *out = NULL;
    *count = 0;
    if (n == 0) {
        return 0;
    }
    entry *e = malloc(n * sizeof(*e));
    uint64_t *child = malloc(maxn * sizeof(*child));
    size_t *stack = malloc(maxn * sizeof(*stack));
    row *rows = NULL;
    if (e == NULL || child == NULL || stack == NULL) {
        goto fail;
    }
    size_t k = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        /* stack[d]: the last slice seen at depth d, the parent of the next one at d + 1 */
        size_t top = 0;
        memset(child, 0, th->slice_count * sizeof(*child));
        for (size_t i = 0; i < th->slice_count; i++) {
            const loupe_slice *s = &th->slices[i];
            size_t d = s->depth;
            if (d > top) {
                d = top; /* a depth the order does not support: treat it as the deepest open */
            }
            if (d > 0) {
                child[stack[d - 1]] += s->dur_ns;
            }
            stack[d] = i;
            top = d + 1;
        }
        for (size_t i = 0; i < th->slice_count; i++) {
            const loupe_slice *s = &th->slices[i];
            e[k++] = (entry){s->name, track_root(m, t), s->dur_ns,
                             s->dur_ns > child[i] ? s->dur_ns - child[i] : 0, s->start_ns};
        }
    }
    g_by_thread = by_thread;
    qsort(e, n, sizeof(*e), cmp_entry);
    rows = malloc(n * sizeof(*rows));
    /* seen[t]: 1 + the last row that counted thread t */
    size_t *seen = calloc(m->thread_count ? m->thread_count : 1, sizeof(*seen));
    if (rows == NULL || seen == NULL) {
        free(seen);
        goto fail;
    }
    size_t r = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        row *w = &rows[r++];
        memset(w, 0, sizeof(*w));
        w->name = e[i].name;
        w->thread = e[i].thread;
        while (j < n && strcmp(e[j].name, w->name) == 0 &&
               (!by_thread || e[j].thread == w->thread)) {
            w->total += e[j].dur;
            w->self += e[j].self;
            if (seen[e[j].thread] != r) {
                seen[e[j].thread] = r;
                w->threads++;
            }
            j++;
        }
        w->count = j - i;
        w->mean = (w->total + w->count / 2) / w->count;
        w->p50 = percentile(e + i, w->count, 50);
        w->p99 = percentile(e + i, w->count, 99);
        w->max = e[j - 1].dur;
        w->busy = union_ns(e + i, w->count);
        double span = (double)m->duration_ns * (double)w->threads;
        w->percent = span > 0 ? (double)w->busy * 100.0 / span : 0.0;
        w->percent = w->percent > 100.0 ? 100.0 : w->percent;
        i = j;
    }
    free(seen);
    qsort(rows, r, sizeof(*rows), cmp_row);
    free(e);
    free(child);
    free(stack);
    *out = rows;
    *count = r;
    return 0;
fail:
    free(e);
    free(child);
    free(stack);
    free(rows);
    return -1;
}

/* ---- busy time per track ---- */

/* A track with its overlap siblings: the union of their top-level slices (every slice of an
 * async track, whose lanes overlap by design). */
typedef struct busy {
    size_t thread; /* the track (the siblings' sibling_of) */
    uint64_t busy, slices, siblings;
    double percent;
} busy;

/* One busy entry per track that has slices and is no sibling, in track order (*out malloc'd);
 * -1 on out-of-memory. */
static int make_busy(const loupe_model *m, busy **out, size_t *count) {
    *out = NULL;
    *count = 0;
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        for (size_t i = 0; i < th->slice_count; i++) {
            n += th->kind == LOUPE_TRACK_ASYNC || th->slices[i].depth == 0;
        }
    }
    entry *e = malloc((n ? n : 1) * sizeof(*e));
    busy *b = malloc((m->thread_count ? m->thread_count : 1) * sizeof(*b));
    size_t *at = malloc((m->thread_count ? m->thread_count : 1) * sizeof(*at));
    if (e == NULL || b == NULL || at == NULL) {
        free(e);
        free(b);
        free(at);
        return -1;
    }
    size_t k = 0, nb = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        at[t] = SIZE_MAX;
        if (track_root(m, t) == t) {
            at[t] = nb;
            b[nb++] = (busy){t, 0, 0, 0, 0.0};
        }
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        busy *w = &b[at[track_root(m, t)]];
        w->slices += th->slice_count;
        w->siblings += track_root(m, t) != t;
        for (size_t i = 0; i < th->slice_count; i++) {
            const loupe_slice *s = &th->slices[i];
            if (th->kind == LOUPE_TRACK_ASYNC || s->depth == 0) {
                e[k++] = (entry){s->name, track_root(m, t), s->dur_ns, 0, s->start_ns};
            }
        }
    }
    /* sorted by (root, start): each root's intervals are contiguous */
    qsort(e, k, sizeof(*e), cmp_span);
    for (size_t i = 0; i < k;) {
        size_t j = i;
        while (j < k && e[j].thread == e[i].thread) {
            j++;
        }
        busy *w = &b[at[e[i].thread]];
        w->busy = union_ns(e + i, j - i);
        i = j;
    }
    size_t w = 0;
    for (size_t i = 0; i < nb; i++) {
        if (b[i].slices > 0) {
            b[i].percent =
                m->duration_ns > 0 ? (double)b[i].busy * 100.0 / (double)m->duration_ns : 0.0;
            b[i].percent = b[i].percent > 100.0 ? 100.0 : b[i].percent;
            b[w++] = b[i];
        }
    }
    free(e);
    free(at);
    *out = b;
    *count = w;
    return 0;
}

static const char *kind_name(loupe_track_kind k) {
    return k == LOUPE_TRACK_GPU ? "gpu" : k == LOUPE_TRACK_ASYNC ? "async" : "thread";
}

/* ---- text output ---- */

/* What follows a track's name: " (tid)" for a thread or GPU track; nothing for a named async
 * track, whose id is no thread id (the collector numbers them above any Linux tid) and whose
 * name is unique in its process; the id alone for a track without a name. */
static void tid_suffix(const loupe_model_thread *th, char *buf, size_t size) {
    if (th->name[0] && th->kind == LOUPE_TRACK_ASYNC) {
        buf[0] = 0;
    } else {
        snprintf(buf, size, th->name[0] ? " (%llu)" : "%llu", (unsigned long long)th->tid);
    }
}

/* Display columns of UTF-8 text (one per code point). */
static size_t cols(const char *s) {
    size_t n = 0;
    for (; *s; s++) {
        n += ((unsigned char)*s & 0xC0) != 0x80;
    }
    return n;
}

/* A name printed whole, control characters shown as '?'. */
static void put_name(const char *name) {
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        putchar(*p < 0x20 || *p == 0x7f ? '?' : (char)*p);
    }
}

/* The numeric columns (cells); the thread (with --by-thread) and the name follow, uncut. */
enum { NCOL = 10, CELL = 64 };

static const char *const g_head[NCOL] = {"name", "thread", "count", "total", "self",
                                         "mean", "p50",    "p99",   "max",   "% time"};

/* Cell c of a row (row NULL: the header). */
static void cell(char *buf, const loupe_model *m, const row *w, size_t c) {
    if (w == NULL) {
        snprintf(buf, CELL, "%s", g_head[c]);
        return;
    }
    (void)m;
    switch (c) {
    case 0:
    case 1:
        buf[0] = 0; /* printed whole by print_table */
        break;
    case 2:
        snprintf(buf, CELL, "%llu", (unsigned long long)w->count);
        break;
    case 3:
        loupe_cli_fmt_dur(buf, CELL, w->total);
        break;
    case 4:
        loupe_cli_fmt_dur(buf, CELL, w->self);
        break;
    case 5:
        loupe_cli_fmt_dur(buf, CELL, w->mean);
        break;
    case 6:
        loupe_cli_fmt_dur(buf, CELL, w->p50);
        break;
    case 7:
        loupe_cli_fmt_dur(buf, CELL, w->p99);
        break;
    case 8:
        loupe_cli_fmt_dur(buf, CELL, w->max);
        break;
    default:
        snprintf(buf, CELL, "%.2f", w->percent);
        break;
    }
}

static void pad(size_t n) {
    while (n-- > 0) {
        putchar(' ');
    }
}

/* Two passes over the cells: the widths, then the lines (names left, numbers right-aligned). */
static void print_table(const loupe_model *m, const row *rows, size_t nrows, int by_thread) {
    size_t width[NCOL] = {0}, thread_w = cols(g_head[1]);
    char buf[CELL];
    for (size_t i = 0; by_thread && i < nrows; i++) {
        const loupe_model_thread *th = &m->threads[rows[i].thread];
        char tid[32];
        tid_suffix(th, tid, sizeof tid);
        size_t n = cols(th->name) + strlen(tid);
        thread_w = n > thread_w ? n : thread_w;
    }
    for (size_t i = 0; i <= nrows; i++) {
        for (size_t c = 0; c < NCOL; c++) {
            cell(buf, m, i == 0 ? NULL : &rows[i - 1], c);
            size_t n = cols(buf);
            width[c] = n > width[c] ? n : width[c];
        }
    }
    for (size_t i = 0; i <= nrows; i++) {
        const row *w = i == 0 ? NULL : &rows[i - 1];
        for (size_t c = 2; c < NCOL; c++) {
            cell(buf, m, w, c);
            size_t n = cols(buf);
            fputs(c > 2 ? "  " : "", stdout);
            pad(width[c] - n);
            fputs(buf, stdout);
        }
        if (by_thread) {
            /* the thread is its name and (tid), whole, padded to the widest */
            const loupe_model_thread *th = w ? &m->threads[w->thread] : NULL;
            char tid[32] = "";
            if (th != NULL) {
                tid_suffix(th, tid, sizeof tid);
            }
            fputs("  ", stdout);
            if (th == NULL) {
                fputs(g_head[1], stdout);
                pad(thread_w - cols(g_head[1]));
            } else {
                put_name(th->name);
                fputs(tid, stdout);
                pad(thread_w - cols(th->name) - strlen(tid));
            }
        }
        fputs("  ", stdout);
        if (w == NULL) {
            fputs(g_head[0], stdout);
        } else {
            put_name(w->name);
        }
        putchar('\n');
    }
}

static uint64_t max_capacity(const loupe_model *m) {
    uint64_t c = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        c = m->threads[t].capacity_needed > c ? m->threads[t].capacity_needed : c;
    }
    return c;
}

static size_t slice_total(const loupe_model *m) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    return n;
}

/* Whether slice i of th has a child: the next slice in the model's order (start order, parents
 * first) is one level deeper. */
static int has_child(const loupe_model_thread *th, size_t i) {
    return i + 1 < th->slice_count && th->slices[i + 1].depth == th->slices[i].depth + 1;
}

/* Whether some slice named name on th has a child: a zone that has children anywhere may have
 * lost some to the drops; one that never has any (a flat zone) lost none. */
static int name_has_children(const loupe_model_thread *th, const char *name) {
    for (size_t i = 0; i < th->slice_count; i++) {
        if (has_child(th, i) && strcmp(th->slices[i].name, name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Keep-first: the zones whose self time the drops inflate. The drops began after the thread's
 * last recorded zone began, and room was kept for the ends of the zones open then, so those
 * zones (the last slice and its ancestors) are whole but lost the children they had after it.
 * The ancestors have a child (the last slice's branch) and so may have had more; the last slice
 * only when zones of its name have children at all. Innermost first, into out (up to max);
 * returns how many. Keep-last (ring): none, the missing zones are the earlier ones and the zones
 * open when the kept events begin are cut short at that point, not inflated. */
static int g_keep_last; /* the trace's overflow policy is keep-last ("loupe_overflow") */

static size_t self_inflated(const loupe_model_thread *th, const char **out, size_t max) {
    size_t n = 0;
    if (th->slice_count == 0 || g_keep_last) {
        return 0;
    }
    size_t i = th->slice_count - 1;
    uint32_t d = th->slices[i].depth;
    if (name_has_children(th, th->slices[i].name)) {
        out[n++] = th->slices[i].name;
    }
    for (size_t j = i; j-- > 0 && d > 0 && n < max;) {
        if (th->slices[j].depth == d - 1) {
            d--;
            out[n++] = th->slices[j].name;
        }
    }
    return n;
}

/* Keep-last: the zones cut short where the kept events begin (their begins were overwritten:
 * truncated slices starting at the thread's first kept time), outermost first. */
static size_t cut_short(const loupe_model_thread *th, const char **out, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < th->slice_count && n < max; i++) {
        const loupe_slice *s = &th->slices[i];
        if (s->start_ns != th->slices[0].start_ns || !(s->flags & LOUPE_SLICE_TRUNCATED)) {
            break;
        }
        out[n++] = s->name;
    }
    return n;
}

#define MAX_INFLATED 8

/* The trace's count of events dropped because a recording call was re-entered on its thread (a
 * signal handler, the program's allocator): "loupe_events_reentered", 0 when none. */
static uint64_t reentered_drops(const loupe_model *m) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, "loupe_events_reentered") == 0) {
            return strtoull(m->metadata[i].value, NULL, 10);
        }
    }
    return 0;
}

/* The trace's overflow policy: "loupe_overflow" is "keep-last" in a trace recorded with
 * LOUPE_OVERFLOW_KEEP_LAST (loupe record --keep-last); absent, keep-first. */
static int keep_last(const loupe_model *m) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, "loupe_overflow") == 0) {
            return strcmp(m->metadata[i].value, "keep-last") == 0;
        }
    }
    return 0;
}

/* "a", "a and b", "a, b and c" */
static void put_names(const char *const *z, size_t n) {
    for (size_t k = 0; k < n; k++) {
        fputs(k == 0 ? "" : k + 1 == n ? " and " : ", ", stdout);
        put_name(z[k]);
    }
}

/* Whether a GPU track's drops are an in-kernel trace's cut tail (src/gpu/join.c marks it with a
 * "loupe: truncated" instant: its buffer kept the first events, so the zones after its last are
 * missing), not CUPTI's lost records, which may be anywhere. */
static int gpu_tail_cut(const loupe_model_thread *th) {
    for (size_t i = 0; i < th->instant_count; i++) {
        if (th->instants[i].name != NULL && strcmp(th->instants[i].name, "loupe: truncated") == 0) {
            return 1;
        }
    }
    return 0;
}

/* The warnings that come first: the events each thread dropped, and their effect. */
static void print_warnings(const loupe_model *m) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        /* a spool that could not be written: the drops below are its, not a capacity's */
        if (strcmp(m->metadata[i].key, "loupe_spool_error") == 0 && m->metadata[i].value[0]) {
            printf("warning: the spool failed, events that did not fit in memory after that were "
                   "dropped: %s\n",
                   m->metadata[i].value);
        }
    }
    uint64_t reentered = reentered_drops(m), total = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        total += m->threads[t].events_dropped;
    }
    if (reentered > 0 && reentered >= total) {
        /* no buffer filled: only the interrupted calls' own events are missing */
        printf("warning: %llu events were dropped where a signal handler (or the program's own "
               "allocator) interrupted a recording call on the same thread: they are counted, "
               "and nothing else is missing\n",
               (unsigned long long)reentered);
        return;
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->events_dropped == 0) {
            continue;
        }
        const char *z[MAX_INFLATED];
        size_t n =
            g_keep_last ? cut_short(th, z, MAX_INFLATED) : self_inflated(th, z, MAX_INFLATED);
        if (th->kind == LOUPE_TRACK_GPU && !gpu_tail_cut(th)) {
            /* CUPTI's lost records (its activity buffers were full, or it gave them no
             * timestamps): charged to the first stream, from anywhere in the session, so no
             * zone "after" anything is known to be missing */
            const char *dt = loupe_cli_meta(m, "device_tracer");
            printf("warning: GPU track ");
            put_name(th->name[0] ? th->name : "(unnamed)");
            printf(": %llu GPU activity records were lost, from any stream (which kernels, "
                   "copies or memsets is not known); every GPU zone recorded is whole%s%s%s\n",
                   (unsigned long long)th->events_dropped, dt != NULL ? " (" : "",
                   dt != NULL ? dt : "", dt != NULL ? ")" : "");
            continue;
        }
        printf("warning: thread %llu", (unsigned long long)th->tid);
        if (th->name[0]) {
            fputs(" (", stdout);
            put_name(th->name);
            putchar(')');
        }
        printf(" dropped %llu events", (unsigned long long)th->events_dropped);
        if (th->slice_count == 0) {
            fputs(": none of its zones were recorded\n", stdout);
            continue;
        }
        char at[64];
        if (g_keep_last) {
            /* the ring kept the newest events: the missing zones are the earlier ones */
            loupe_cli_fmt_dur(at, sizeof at, th->slices[0].start_ns);
            printf(" (keep-last: the oldest gave way to the newest): its zones before %s are "
                   "missing",
                   at);
            if (n > 0) {
                fputs("; ", stdout);
                put_names(z, n);
                printf(" %s open then: %s begin%s there, cut short", n == 1 ? "was" : "were",
                       n == 1 ? "it" : "they", n == 1 ? "s" : "");
            }
            putchar('\n');
            continue;
        }
        loupe_cli_fmt_dur(at, sizeof at, th->slices[th->slice_count - 1].start_ns);
        if (n > 0) {
            fputs(": the self time of ", stdout);
            put_names(z, n);
            printf(" %s inflated (%s open when the drops began: %s children after that were "
                   "dropped); its zones after %s are missing\n",
                   n == 1 ? "is" : "are", n == 1 ? "it was" : "they were", n == 1 ? "its" : "their",
                   at);
        } else {
            printf(": its zones after the one that began at %s (", at);
            put_name(th->slices[th->slice_count - 1].name);
            fputs(", whole) are missing\n", stdout);
        }
    }
}

/* ---- hot functions: the CPU samples by function ----
 *
 * Self samples: the samples whose innermost frame is the function. Total samples: those whose
 * stack holds it anywhere (once per sample, however deep the recursion). The percentages are of
 * all the samples in scope (the trace, or with --by-thread the thread), that is of the sampled
 * CPU time: the sampler fires per period of CPU time, so a function in 25% of the samples used
 * about 25% of the CPU time the program was seen using. Functions are keyed by name; a frame
 * without one is "module+0xoffset" (or "[unknown]"). Rows: by self samples, then total, then
 * name. */

static size_t g_hot_top; /* --top, for the JSON's hot functions */

typedef struct hot_row {
    const char *name;
    size_t thread;              /* SIZE_MAX: every thread */
    uint64_t self, total, seen; /* seen: the last sample (index + 1) counted in total */
} hot_row;

typedef struct hot_set {
    const char **fname; /* per frame: its key */
    char **owned;       /* the formatted names (frames without a function) */
    size_t owned_count;
    hot_row *rows;
    size_t count, cap;
    size_t *slot; /* hash of (thread, name) -> row index + 1 */
    size_t slot_cap;
    size_t *thread_samples; /* samples per thread */
} hot_set;

static uint64_t hot_hash(const char *s, size_t thread) {
    uint64_t h = 1469598103934665603ull ^ thread;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    }
    return h;
}

static hot_row *hot_get(hot_set *h, const char *name, size_t thread) {
    if ((h->count + 1) * 2 > h->slot_cap) {
        size_t nc = h->slot_cap ? h->slot_cap * 2 : 256;
        size_t *ns = calloc(nc, sizeof(*ns));
        hot_row *nr = realloc(h->rows, nc * sizeof(*nr));
        if (ns == NULL || nr == NULL) {
            free(ns);
            if (nr != NULL) {
                h->rows = nr;
            }
            return NULL;
        }
        h->rows = nr;
        for (size_t i = 0; i < h->count; i++) {
            size_t j = hot_hash(nr[i].name, nr[i].thread) & (nc - 1);
            while (ns[j] != 0) {
                j = (j + 1) & (nc - 1);
            }
            ns[j] = i + 1;
        }
        free(h->slot);
        h->slot = ns;
        h->slot_cap = nc;
    }
    size_t j = hot_hash(name, thread) & (h->slot_cap - 1);
    for (; h->slot[j] != 0; j = (j + 1) & (h->slot_cap - 1)) {
        hot_row *r = &h->rows[h->slot[j] - 1];
        if (r->thread == thread && strcmp(r->name, name) == 0) {
            return r;
        }
    }
    h->rows[h->count] = (hot_row){name, thread, 0, 0, 0};
    h->slot[j] = ++h->count;
    return &h->rows[h->count - 1];
}

static void hot_free(hot_set *h) {
    for (size_t i = 0; i < h->owned_count; i++) {
        free(h->owned[i]);
    }
    free(h->owned);
    free(h->fname);
    free(h->rows);
    free(h->slot);
    free(h->thread_samples);
}

static int cmp_hot(const void *pa, const void *pb) {
    const hot_row *a = pa, *b = pb;
    if (a->thread != b->thread) {
        return a->thread < b->thread ? -1 : 1;
    }
    if (a->self != b->self) {
        return a->self > b->self ? -1 : 1;
    }
    if (a->total != b->total) {
        return a->total > b->total ? -1 : 1;
    }
    return strcmp(a->name, b->name);
}

/* Fills h with one row per function (per (thread, function) when by_thread), sorted. */
static int hot_make(const loupe_model *m, int by_thread, hot_set *h) {
    memset(h, 0, sizeof(*h));
    h->fname = calloc(m->frame_count + 1, sizeof(*h->fname));
    h->owned = calloc(m->frame_count + 1, sizeof(*h->owned));
    h->thread_samples = calloc(m->thread_count + 1, sizeof(*h->thread_samples));
    if (h->fname == NULL || h->owned == NULL || h->thread_samples == NULL) {
        return -1;
    }
    for (size_t f = 0; f < m->frame_count; f++) {
        const loupe_frame *fr = &m->frames[f];
        if (fr->function[0] != 0) {
            h->fname[f] = fr->function;
        } else if (fr->module[0] != 0) {
            size_t n = strlen(fr->module) + 24;
            char *s = malloc(n);
            if (s == NULL) {
                return -1;
            }
            snprintf(s, n, "%s+0x%llx", fr->module, (unsigned long long)fr->module_offset);
            h->owned[h->owned_count++] = s;
            h->fname[f] = s;
        } else {
            h->fname[f] = "[unknown]";
        }
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        const loupe_sample *s = &m->samples[i];
        size_t scope = by_thread ? s->thread : SIZE_MAX;
        if (s->thread < m->thread_count) {
            h->thread_samples[s->thread]++;
        }
        uint64_t leaf = 1;
        size_t depth = 0;
        for (uint32_t k = s->stack; k < m->stack_node_count && depth <= m->stack_node_count;
             k = m->stack_nodes[k].parent, depth++) {
            uint32_t f = m->stack_nodes[k].frame;
            hot_row *r = hot_get(h, f < m->frame_count ? h->fname[f] : "[unknown]", scope);
            if (r == NULL) {
                return -1;
            }
            r->self += leaf;
            leaf = 0;
            if (r->seen != i + 1) {
                r->seen = i + 1;
                r->total++;
            }
        }
        if (s->stack == UINT32_MAX) {
            hot_row *r = hot_get(h, "[no stack]", scope);
            if (r == NULL) {
                return -1;
            }
            r->self++;
            r->total++;
        }
    }
    if (h->count > 1) {
        qsort(h->rows, h->count, sizeof(*h->rows), cmp_hot);
    }
    return 0;
}

static uint64_t hot_scope_samples(const loupe_model *m, const hot_set *h, size_t thread) {
    return thread == SIZE_MAX ? m->sample_count : h->thread_samples[thread];
}

static double hot_pct(uint64_t part, uint64_t whole) {
    return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0;
}

/* The hot-functions table(s), after the zones: nothing when the trace has no samples. */
static int print_hot_text(const loupe_model *m, int by_thread, size_t top) {
    if (m->sample_count == 0) {
        return 0;
    }
    hot_set h;
    if (hot_make(m, by_thread, &h) != 0) {
        hot_free(&h);
        return -1;
    }
    char per[64];
    loupe_cli_fmt_dur(per, sizeof per, m->sample_period_ns);
    printf("\nhot functions: %zu CPU sample%s", m->sample_count, m->sample_count == 1 ? "" : "s");
    if (m->sample_period_ns > 0) {
        printf(", one per %s of CPU time", per);
    }
    if (m->samples_lost > 0) {
        printf(", %llu lost", (unsigned long long)m->samples_lost);
    }
    /* the sampler comes up after the session's start (the zones do not wait for it): its
     * samples begin this far in (a merged trace's first process says) */
    const char *began = loupe_cli_meta(m, "loupe_sampling_began_ns");
    if (began != NULL && strtoull(began, NULL, 10) > 0) {
        char at[64];
        loupe_cli_fmt_dur(at, sizeof at, strtoull(began, NULL, 10));
        printf(", sampling from %s into the trace", at);
    }
    printf("\nself: samples in the function itself; total: on the stack; %% of the %s\n",
           by_thread ? "thread's samples" : "samples (the CPU time sampled)");
    for (size_t i = 0; i < h.count;) {
        size_t thread = h.rows[i].thread, end = i;
        while (end < h.count && h.rows[end].thread == thread) {
            end++;
        }
        if (thread != SIZE_MAX) {
            const loupe_model_thread *th = &m->threads[thread];
            printf("\nthread %llu%s%s%s: %llu sample%s\n", (unsigned long long)th->tid,
                   th->name[0] ? " (" : "", th->name, th->name[0] ? ")" : "",
                   (unsigned long long)h.thread_samples[thread],
                   h.thread_samples[thread] == 1 ? "" : "s");
        } else {
            putchar('\n');
        }
        printf("%8s %8s %7s %7s  %s\n", "self", "total", "self %", "total %", "function");
        uint64_t whole = hot_scope_samples(m, &h, thread);
        size_t shown = top == 0 || top > end - i ? end - i : top;
        for (size_t j = i; j < i + shown; j++) {
            const hot_row *r = &h.rows[j];
            printf("%8llu %8llu %6.1f%% %6.1f%%  %s\n", (unsigned long long)r->self,
                   (unsigned long long)r->total, hot_pct(r->self, whole), hot_pct(r->total, whole),
                   r->name);
        }
        if (shown < end - i) {
            printf("(%zu more function%s; --top 0 shows all)\n", end - i - shown,
                   end - i - shown == 1 ? "" : "s");
        }
        i = end;
    }
    hot_free(&h);
    return 0;
}

/* "samples", "samples_lost", "sample_period_ns" and "hot_functions" in the JSON output. */
static int put_hot_json(json_t *root, const loupe_model *m, int by_thread, size_t top) {
    int bad = 0;
    bad |= json_object_set_new(root, "samples", json_integer(loupe_cli_jint(m->sample_count)));
    bad |= json_object_set_new(root, "samples_lost", json_integer(loupe_cli_jint(m->samples_lost)));
    bad |= json_object_set_new(root, "sample_period_ns",
                               json_integer(loupe_cli_jint(m->sample_period_ns)));
    json_t *arr = json_array();
    bad |= arr == NULL || json_object_set_new(root, "hot_functions", arr);
    hot_set h;
    if (bad || hot_make(m, by_thread, &h) != 0) {
        hot_free(&h);
        return -1;
    }
    size_t in_scope = 0;
    for (size_t i = 0; i < h.count && !bad; i++) {
        const hot_row *r = &h.rows[i];
        in_scope = i > 0 && h.rows[i - 1].thread == r->thread ? in_scope + 1 : 0;
        if (top != 0 && in_scope >= top) {
            continue;
        }
        uint64_t whole = hot_scope_samples(m, &h, r->thread);
        json_t *o = json_object();
        bad |= o == NULL || json_array_append_new(arr, o);
        if (bad) {
            break;
        }
        bad |= json_object_set_new(o, "function", loupe_cli_jstr(r->name));
        if (r->thread != SIZE_MAX) {
            const loupe_model_thread *th = &m->threads[r->thread];
            bad |= json_object_set_new(o, "thread", json_integer(loupe_cli_jint(th->tid)));
            bad |= json_object_set_new(o, "thread_name", loupe_cli_jstr(th->name));
        }
        bad |= json_object_set_new(o, "self_samples", json_integer(loupe_cli_jint(r->self)));
        bad |= json_object_set_new(o, "total_samples", json_integer(loupe_cli_jint(r->total)));
        bad |= json_object_set_new(o, "self_percent", json_real(hot_pct(r->self, whole)));
        bad |= json_object_set_new(o, "total_percent", json_real(hot_pct(r->total, whole)));
    }
    hot_free(&h);
    return bad ? -1 : 0;
}

static int cmp_busiest(const void *pa, const void *pb) {
    const busy *a = pa, *b = pb;
    if (a->busy != b->busy) {
        return a->busy > b->busy ? -1 : 1;
    }
    return a->thread < b->thread ? -1 : (a->thread > b->thread);
}

static int cmp_track_order(const void *pa, const void *pb) {
    const busy *a = pa, *b = pb;
    return a->thread < b->thread ? -1 : (a->thread > b->thread);
}

/* --top N for the busy table: the N busiest tracks (ties: track order), kept in track order;
 * returns how many are kept. */
static size_t keep_busiest(busy *b, size_t nb, size_t top) {
    if (top == 0 || nb <= top) {
        return nb;
    }
    qsort(b, nb, sizeof(*b), cmp_busiest);
    qsort(b, top, sizeof(*b), cmp_track_order);
    return top;
}

/* Busy time per track: the time, % of the traced time, then the track, whole; nb of all rows
 * (the rest were cut by --top). */
static void print_busy(const loupe_model *m, const busy *b, size_t nb, size_t all) {
    char dur[64], pct[32];
    size_t dw = strlen("busy"), pw = strlen("% time");
    for (size_t i = 0; i < nb; i++) {
        loupe_cli_fmt_dur(dur, sizeof dur, b[i].busy);
        snprintf(pct, sizeof pct, "%.2f", b[i].percent);
        dw = cols(dur) > dw ? cols(dur) : dw;
        pw = strlen(pct) > pw ? strlen(pct) : pw;
    }
    printf("\nbusy time per track: the time its top-level slices cover, overlapping ones (on\n"
           "its overlap siblings too) counted once\n\n");
    pad(dw - strlen("busy"));
    fputs("busy  ", stdout);
    pad(pw - strlen("% time"));
    fputs("% time  track\n", stdout);
    for (size_t i = 0; i < nb; i++) {
        const loupe_model_thread *th = &m->threads[b[i].thread];
        loupe_cli_fmt_dur(dur, sizeof dur, b[i].busy);
        snprintf(pct, sizeof pct, "%.2f", b[i].percent);
        pad(dw - cols(dur));
        printf("%s  ", dur);
        pad(pw - strlen(pct));
        printf("%s  %s ", pct, kind_name(th->kind));
        char tid[32];
        tid_suffix(th, tid, sizeof tid);
        put_name(th->name);
        fputs(tid, stdout);
        if (b[i].siblings > 0) {
            printf(" and %llu overlap sibling%s", (unsigned long long)b[i].siblings,
                   b[i].siblings == 1 ? "" : "s");
        }
        putchar('\n');
    }
    if (nb < all) {
        printf("... %zu more track%s (--top 0 shows all)\n", all - nb, all - nb == 1 ? "" : "s");
    }
}

static void print_cpu_split(const loupe_model *m);

static void print_processes(const loupe_model *m);

static void print_text(const char *file, const loupe_model *m, const row *rows, size_t nrows,
                       size_t shown, int by_thread, const busy *b, size_t nb, size_t nb_all) {
    char dur[64];
    print_warnings(m);
    loupe_cli_fmt_dur(dur, sizeof dur, m->duration_ns);
    printf("%s: %zu thread%s, %zu slice%s, %s traced\n", file, m->thread_count,
           m->thread_count == 1 ? "" : "s", slice_total(m), slice_total(m) == 1 ? "" : "s", dur);
    uint64_t dropped = loupe_model_events_dropped(m), cap = max_capacity(m);
    if (dropped > 0 && cap > 0) {
        printf("events dropped: %llu (capacity that would have held them: %llu events per "
               "thread)\n",
               (unsigned long long)dropped, (unsigned long long)cap);
    } else if (dropped > 0) {
        printf("events dropped: %llu\n", (unsigned long long)dropped);
    }
    if (m->unmatched_ends > 0) {
        printf("unmatched ends: %llu (zone ends without a begin, ignored)\n",
               (unsigned long long)m->unmatched_ends);
    }
    if (m->truncated_zones > 0) {
        printf("truncated zones: %llu (cut short: an end that never came, closed by an outer "
               "zone's end or the stop, or a begin before a keep-last window)\n",
               (unsigned long long)m->truncated_zones);
    }
    putchar('\n');
    print_processes(m);
    if (nrows == 0) {
        printf("no zones in this trace\n");
        print_cpu_split(m); /* a sampling-only recording still has its threads' off-CPU time */
        return;
    }
    printf("%% time: the time a zone ran (its overlapping slices counted once) as a share of\n"
           "the traced time (%s) of %s; nested zones count in their parents too,\n"
           "so the column does not sum to 100%%\n\n",
           dur, by_thread ? "its thread" : "each thread it ran on");
    print_table(m, rows, shown, by_thread);
    if (shown < nrows) {
        printf("(%zu more row%s; --top 0 shows all)\n", nrows - shown,
               nrows - shown == 1 ? "" : "s");
    }
    print_busy(m, b, nb, nb_all);
    print_cpu_split(m);
}

/* ---- on- vs. off-CPU time (from the context switches sampling saw) ---- */

/* Off-CPU time by kind (loupe_off_cpu_kind): unknown, waiting, preempted. */
typedef struct off_split {
    uint64_t by[3];
} off_split;

static uint64_t off_total(const off_split *o) {
    return o->by[LOUPE_OFF_CPU_UNKNOWN] + o->by[LOUPE_OFF_CPU_WAITING] +
           o->by[LOUPE_OFF_CPU_PREEMPTED];
}

/* Adds the part of [a, a + d) a thread spent off the CPU to *o, by kind (its off_cpu intervals
 * are sorted and do not overlap: a binary search finds the first that can touch it). */
static void off_cpu_in(const loupe_model_thread *th, uint64_t a, uint64_t d, off_split *o) {
    size_t lo = 0, hi = th->off_cpu_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const loupe_interval *v = &th->off_cpu[mid];
        if (v->start_ns + v->dur_ns <= a) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    uint64_t b = a + d;
    for (size_t i = lo; i < th->off_cpu_count && th->off_cpu[i].start_ns < b; i++) {
        uint64_t x = th->off_cpu[i].start_ns, y = x + th->off_cpu[i].dur_ns;
        x = x < a ? a : x;
        y = y > b ? b : y;
        unsigned k = th->off_cpu[i].kind <= LOUPE_OFF_CPU_PREEMPTED ? th->off_cpu[i].kind : 0;
        o->by[k] += y > x ? y - x : 0;
    }
}

/* Each thread's active span, [lo[t], hi[t]): from its first event (a zone, a sample, a context
 * switch) to its last. A thread lives for only part of most traces, so its on-CPU time is its
 * span less its off-CPU time, never the trace's whole duration. NULL on OOM. */
static uint64_t *thread_spans(const loupe_model *m) {
    uint64_t *lo = malloc(2 * (m->thread_count + 1) * sizeof *lo);
    if (lo == NULL) {
        return NULL;
    }
    uint64_t *hi = lo + m->thread_count + 1;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        lo[t] = UINT64_MAX;
        hi[t] = 0;
        for (size_t i = 0; i < th->slice_count; i++) {
            uint64_t a = th->slices[i].start_ns, b = a + th->slices[i].dur_ns;
            lo[t] = a < lo[t] ? a : lo[t];
            hi[t] = b > hi[t] ? b : hi[t];
        }
        for (size_t i = 0; i < th->off_cpu_count; i++) {
            uint64_t a = th->off_cpu[i].start_ns, b = a + th->off_cpu[i].dur_ns;
            lo[t] = a < lo[t] ? a : lo[t];
            hi[t] = b > hi[t] ? b : hi[t];
        }
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        size_t t = m->samples[i].thread;
        if (t < m->thread_count) {
            uint64_t a = m->samples[i].ts_ns;
            lo[t] = a < lo[t] ? a : lo[t];
            hi[t] = a > hi[t] ? a : hi[t];
        }
    }
    return lo;
}

/* Durations right-aligned in 12 display columns each ("µs" is 3 bytes, 2 columns), then 2
 * spaces. */
static void put_cells(const char *const *cell, int n) {
    for (int q = 0; q < n; q++) {
        pad(12 - (cols(cell[q]) < 12 ? cols(cell[q]) : 12));
        printf("%s%s", cell[q], q + 1 < n ? " " : "  ");
    }
}

typedef struct cpu_row {
    const char *name;
    uint64_t total;
    off_split off;
} cpu_row;

static int cmp_cpu_row(const void *pa, const void *pb) {
    const cpu_row *a = pa, *b = pb;
    uint64_t x = off_total(&a->off), y = off_total(&b->off);
    return x < y ? 1 : x > y ? -1 : strcmp(a->name, b->name);
}

#define CPU_ROWS 20

/* One row per zone name over the threads with off-CPU intervals, most off-CPU first: the model
 * interns its strings, so the name's pointer is its key (an open-addressed table: a trace has
 * millions of slices and thousands of names). The count in *n; NULL with *n = 0 when there are
 * none, or on OOM (*oom = 1). */
static cpu_row *cpu_zone_rows(const loupe_model *m, size_t *n_out, int *oom) {
    cpu_row *rows = NULL;
    size_t n = 0, *slot = NULL, scap = 0, ocap = 0;
    const loupe_slice **open = NULL;
    *n_out = 0;
    *oom = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->kind != LOUPE_TRACK_THREAD || th->off_cpu_count == 0) {
            continue;
        }
        size_t open_n = 0; /* the slices enclosing this one (sorted by start) */
        for (size_t i = 0; i < th->slice_count; i++) {
            const loupe_slice *sl = &th->slices[i];
            while (open_n > 0 &&
                   open[open_n - 1]->start_ns + open[open_n - 1]->dur_ns <= sl->start_ns) {
                open_n--;
            }
            int recursive = 0; /* inside a zone of its own name: its time is counted there */
            for (size_t k = 0; k < open_n && !recursive; k++) {
                recursive = open[k]->name == sl->name;
            }
            if (open_n == ocap) {
                size_t nc = ocap ? ocap * 2 : 64;
                const loupe_slice **g = realloc(open, nc * sizeof *g);
                if (g == NULL) {
                    free(open);
                    free(rows);
                    free(slot);
                    *oom = 1;
                    return NULL;
                }
                open = g;
                ocap = nc;
            }
            open[open_n++] = sl;
            if (recursive) {
                continue;
            }
            if ((n + 1) * 2 > scap) {
                size_t nc = scap ? scap * 2 : 256;
                size_t *ns = calloc(nc, sizeof *ns);
                cpu_row *g = realloc(rows, nc / 2 * sizeof *rows);
                if (ns == NULL || g == NULL) {
                    free(ns);
                    free(g != NULL ? g : rows);
                    free(slot);
                    free(open);
                    *oom = 1;
                    return NULL;
                }
                rows = g;
                for (size_t k = 0; k < n; k++) {
                    size_t j = ((uintptr_t)rows[k].name >> 4) * 0x9E3779B97F4A7C15ull & (nc - 1);
                    while (ns[j] != 0) {
                        j = (j + 1) & (nc - 1);
                    }
                    ns[j] = k + 1;
                }
                free(slot);
                slot = ns;
                scap = nc;
            }
            size_t j = ((uintptr_t)sl->name >> 4) * 0x9E3779B97F4A7C15ull & (scap - 1);
            while (slot[j] != 0 && rows[slot[j] - 1].name != sl->name) {
                j = (j + 1) & (scap - 1);
            }
            if (slot[j] == 0) {
                rows[n] = (cpu_row){sl->name, 0, {{0, 0, 0}}};
                slot[j] = ++n;
            }
            cpu_row *rw = &rows[slot[j] - 1];
            rw->total += sl->dur_ns;
            off_cpu_in(th, sl->start_ns, sl->dur_ns, &rw->off);
        }
    }
    free(slot);
    free(open);
    if (n > 0) {
        qsort(rows, n, sizeof *rows, cmp_cpu_row);
    }
    *n_out = n;
    return rows;
}

/* Whether the trace has off-CPU intervals (1) and any of unknown kind (*unknown = 1: a trace
 * written before the kinds, a kernel older than 4.17). */
static int has_off_cpu(const loupe_model *m, int *unknown) {
    int any = 0;
    *unknown = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        any |= th->off_cpu_count > 0;
        for (size_t i = 0; i < th->off_cpu_count && !*unknown; i++) {
            *unknown = th->off_cpu[i].kind == LOUPE_OFF_CPU_UNKNOWN;
        }
    }
    return any;
}

/* The cells of one row: total, on-CPU, waiting, preempted[, off-CPU of unknown kind]. */
static int cpu_cells(char buf[5][64], const char **cell, uint64_t total, const off_split *o,
                     int unknown) {
    uint64_t off = off_total(o);
    loupe_cli_fmt_dur(buf[0], sizeof buf[0], total);
    loupe_cli_fmt_dur(buf[1], sizeof buf[1], total > off ? total - off : 0);
    loupe_cli_fmt_dur(buf[2], sizeof buf[2], o->by[LOUPE_OFF_CPU_WAITING]);
    loupe_cli_fmt_dur(buf[3], sizeof buf[3], o->by[LOUPE_OFF_CPU_PREEMPTED]);
    for (int q = 0; q < 4; q++) {
        cell[q] = buf[q];
    }
    if (unknown) {
        loupe_cli_fmt_dur(buf[4], sizeof buf[4], o->by[LOUPE_OFF_CPU_UNKNOWN]);
        cell[4] = buf[4];
        return 5;
    }
    return 4;
}

/* Each thread's and each zone name's time split into running (on-CPU), waiting (switched out
 * voluntarily: blocked, sleeping) and preempted (switched out while runnable: the CPU was
 * another task's). A zone whose self time is mostly off the CPU (a thread pool's idle loop) is
 * labelled so: its "self" is blocking, not work. Printed only when the trace has off-CPU
 * intervals (a trace recorded with sampling). */
static void print_cpu_split(const loupe_model *m) {
    int unknown;
    if (!has_off_cpu(m, &unknown)) {
        return;
    }
    char buf[5][64];
    const char *cell[5];
    const char *head[5] = {"active", "on-CPU", "waiting", "preempted", "off-CPU (?)"};
    int nc = unknown ? 5 : 4;
    uint64_t *span = thread_spans(m);
    if (span == NULL) {
        fprintf(stderr, "loupe summary: out of memory for the on/off-CPU table\n");
        return;
    }
    const uint64_t *span_hi = span + m->thread_count + 1;
    printf("\non- vs. off-CPU (context switches; active: a thread's first event to its last):\n");
    put_cells(head, nc);
    printf("thread\n");
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->kind != LOUPE_TRACK_THREAD || th->off_cpu_count == 0) {
            continue;
        }
        off_split o = {{0, 0, 0}};
        uint64_t act = span_hi[t] - span[t];
        off_cpu_in(th, span[t], act, &o);
        put_cells(cell, cpu_cells(buf, cell, act, &o, unknown));
        put_name(th->name[0] ? th->name : "thread");
        printf(" (%llu)\n", (unsigned long long)th->tid);
    }
    size_t n;
    int oom;
    cpu_row *rows = cpu_zone_rows(m, &n, &oom);
    if (n > 0) {
        head[0] = "total";
        printf("\n");
        put_cells(head, nc);
        printf("zone (most off-CPU first)\n");
        for (size_t k = 0; k < n && k < CPU_ROWS; k++) {
            const off_split *o = &rows[k].off;
            put_cells(cell, cpu_cells(buf, cell, rows[k].total, o, unknown));
            /* the name last and whole (names are never cut) */
            put_name(rows[k].name);
            const char *why = "";
            if (off_total(o) * 2 > rows[k].total) {
                uint64_t w = o->by[LOUPE_OFF_CPU_WAITING], p = o->by[LOUPE_OFF_CPU_PREEMPTED],
                         u = o->by[LOUPE_OFF_CPU_UNKNOWN];
                why = u > w && u > p ? "  (mostly off-CPU)"
                      : p > w        ? "  (mostly off-CPU: preempted)"
                                     : "  (mostly off-CPU: waiting)";
            }
            printf("%s\n", why);
        }
        if (n > CPU_ROWS) {
            printf("(%zu more zone names)\n", n - CPU_ROWS);
        }
    }
    if (unknown) {
        printf("off-CPU (?): the trace does not say whether waiting or preempted (written before "
               "loupe told them apart, or a kernel older than Linux 4.17)\n");
    }
    free(rows);
    free(span);
}

/* One JSON row of the on/off-CPU split. */
static json_t *cpu_json(uint64_t total, const off_split *o) {
    uint64_t off = off_total(o);
    return json_pack("{sIsIsIsIsI}", "total_ns", loupe_cli_jint(total), "on_cpu_ns",
                     loupe_cli_jint(total > off ? total - off : 0), "waiting_ns",
                     loupe_cli_jint(o->by[LOUPE_OFF_CPU_WAITING]), "preempted_ns",
                     loupe_cli_jint(o->by[LOUPE_OFF_CPU_PREEMPTED]), "off_cpu_unknown_ns",
                     loupe_cli_jint(o->by[LOUPE_OFF_CPU_UNKNOWN]));
}

/* "cpu": {"threads": [...], "zones": [...]} (every zone name, most off-CPU first), the text
 * table's rows; absent when the trace has no off-CPU intervals. 0, or 1 on OOM. */
static int json_cpu_split(json_t *root, const loupe_model *m) {
    int unknown;
    if (!has_off_cpu(m, &unknown)) {
        return 0;
    }
    json_t *cpu = json_object(), *threads = json_array(), *zones = json_array();
    int bad = cpu == NULL || threads == NULL || zones == NULL;
    bad |= json_object_set_new(root, "cpu", cpu);
    bad |= json_object_set_new(cpu, "threads", threads);
    bad |= json_object_set_new(cpu, "zones", zones);
    uint64_t *span = bad ? NULL : thread_spans(m);
    bad |= span == NULL;
    for (size_t t = 0; t < m->thread_count && !bad; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->kind != LOUPE_TRACK_THREAD || th->off_cpu_count == 0) {
            continue;
        }
        off_split o = {{0, 0, 0}};
        uint64_t lo = span[t], act = span[m->thread_count + 1 + t] - lo;
        off_cpu_in(th, lo, act, &o);
        json_t *r = cpu_json(act, &o); /* total_ns: the thread's active span */
        bad |= r == NULL || json_array_append_new(threads, r);
        bad |= bad || json_object_set_new(r, "thread", json_integer(loupe_cli_jint(th->tid)));
        bad |= bad || json_object_set_new(r, "thread_name", loupe_cli_jstr(th->name));
        bad |= bad || json_object_set_new(r, "active_start_ns", json_integer(loupe_cli_jint(lo)));
    }
    free(span);
    size_t n;
    int oom;
    cpu_row *rows = cpu_zone_rows(m, &n, &oom);
    bad |= oom;
    for (size_t k = 0; k < n && !bad; k++) {
        json_t *r = cpu_json(rows[k].total, &rows[k].off);
        bad |= r == NULL || json_array_append_new(zones, r);
        bad |= bad || json_object_set_new(r, "name", loupe_cli_jstr(rows[k].name));
    }
    free(rows);
    return bad;
}

/* A process's slices and threads (the merged view of a process tree: one entry per process). */
static void process_counts(const loupe_model *m, size_t p, size_t *threads, size_t *slices) {
    *threads = 0;
    *slices = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        if (m->threads[t].process == p) {
            (*threads)++;
            *slices += m->threads[t].slice_count;
        }
    }
}

/* "processes: ..." above the table when the trace holds more than one (loupe record following a
 * process tree): pid, parent, name, command line, its threads and slices. */
static void print_processes(const loupe_model *m) {
    if (m->process_count < 2) {
        return;
    }
    printf("%zu processes:\n", m->process_count);
    for (size_t p = 0; p < m->process_count; p++) {
        const loupe_model_process *pr = &m->processes[p];
        size_t nt, ns;
        process_counts(m, p, &nt, &ns);
        printf("  pid %llu (parent %llu) %s: %zu thread%s, %zu slice%s%s%s\n",
               (unsigned long long)pr->pid, (unsigned long long)pr->parent_pid,
               pr->name[0] ? pr->name : "?", nt, nt == 1 ? "" : "s", ns, ns == 1 ? "" : "s",
               pr->cmdline[0] ? ": " : "", pr->cmdline);
    }
    putchar('\n');
}

static int json_processes(json_t *root, const loupe_model *m) {
    json_t *a = json_array();
    int bad = a == NULL || json_object_set_new(root, "processes", a);
    for (size_t p = 0; p < m->process_count && !bad; p++) {
        const loupe_model_process *pr = &m->processes[p];
        size_t nt, ns;
        process_counts(m, p, &nt, &ns);
        json_t *o =
            json_pack("{sIsIsosososIsI}", "pid", loupe_cli_jint(pr->pid), "parent_pid",
                      loupe_cli_jint(pr->parent_pid), "name", loupe_cli_jstr(pr->name), "host",
                      loupe_cli_jstr(pr->host), "cmdline", loupe_cli_jstr(pr->cmdline), "threads",
                      loupe_cli_jint(nt), "slices", loupe_cli_jint(ns));
        bad |= o == NULL || json_array_append_new(a, o);
    }
    return bad;
}

/* ---- JSON output ---- */

static int print_json(const char *file, const loupe_model *m, const row *rows, size_t shown,
                      int by_thread, const busy *b, size_t nb, size_t nb_all) {
    json_t *root = json_object();
    json_t *zones = json_array();
    int bad = root == NULL || zones == NULL;
    bad |= json_object_set_new(root, "file", loupe_cli_jstr(file));
    bad |= json_object_set_new(root, "duration_ns", json_integer(loupe_cli_jint(m->duration_ns)));
    bad |= json_object_set_new(root, "threads", json_integer(loupe_cli_jint(m->thread_count)));
    bad |= json_object_set_new(root, "slices", json_integer(loupe_cli_jint(slice_total(m))));
    bad |= !bad && json_processes(root, m);
    for (size_t i = 0; i < shown && !bad; i++) {
        const row *w = &rows[i];
        json_t *z = json_object();
        bad |= z == NULL || json_array_append_new(zones, z);
        if (bad) {
            break;
        }
        bad |= json_object_set_new(z, "name", loupe_cli_jstr(w->name));
        if (by_thread) {
            const loupe_model_thread *th = &m->threads[w->thread];
            bad |= json_object_set_new(z, "thread", json_integer(loupe_cli_jint(th->tid)));
            bad |= json_object_set_new(z, "thread_name", loupe_cli_jstr(th->name));
        }
        bad |= json_object_set_new(z, "count", json_integer(loupe_cli_jint(w->count)));
        bad |= json_object_set_new(z, "total_ns", json_integer(loupe_cli_jint(w->total)));
        bad |= json_object_set_new(z, "self_ns", json_integer(loupe_cli_jint(w->self)));
        bad |= json_object_set_new(z, "mean_ns", json_integer(loupe_cli_jint(w->mean)));
        bad |= json_object_set_new(z, "p50_ns", json_integer(loupe_cli_jint(w->p50)));
        bad |= json_object_set_new(z, "p99_ns", json_integer(loupe_cli_jint(w->p99)));
        bad |= json_object_set_new(z, "max_ns", json_integer(loupe_cli_jint(w->max)));
        bad |= json_object_set_new(z, "percent", json_real(w->percent));
        bad |= json_object_set_new(z, "threads_ran_on", json_integer(loupe_cli_jint(w->threads)));
    }
    bad |= json_object_set(root, "zones", zones);
    bad |= json_object_set_new(root, "events_dropped",
                               json_integer(loupe_cli_jint(loupe_model_events_dropped(m))));
    bad |=
        json_object_set_new(root, "capacity_needed", json_integer(loupe_cli_jint(max_capacity(m))));
    json_t *dropped = json_array();
    bad |= dropped == NULL || json_object_set_new(root, "dropped", dropped);
    for (size_t t = 0; t < m->thread_count && !bad; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->events_dropped == 0) {
            continue;
        }
        const char *zn[MAX_INFLATED];
        size_t n = self_inflated(th, zn, MAX_INFLATED);
        json_t *names = json_array();
        for (size_t k = 0; k < n && names != NULL; k++) {
            bad |= json_array_append_new(names, loupe_cli_jstr(zn[k]));
        }
        /* the zones missing: those after the last kept zone's start (keep-first) or before the
         * first one's (keep-last) */
        int anywhere = th->kind == LOUPE_TRACK_GPU && !gpu_tail_cut(th); /* CUPTI's lost */
        uint64_t at = th->slice_count == 0 || anywhere ? 0
                      : g_keep_last                    ? th->slices[0].start_ns
                                                       : th->slices[th->slice_count - 1].start_ns;
        json_t *d = json_pack("{sIsosIsosssssI}", "thread", loupe_cli_jint(th->tid), "thread_name",
                              loupe_cli_jstr(th->name), "events_dropped",
                              loupe_cli_jint(th->events_dropped), "self_inflated",
                              names != NULL ? names : json_null(), "overflow",
                              anywhere      ? "lost"
                              : g_keep_last ? "keep-last"
                                            : "keep-first",
                              "missing",
                              anywhere      ? "anywhere"
                              : g_keep_last ? "before"
                                            : "after",
                              "missing_ns", loupe_cli_jint(at));
        bad |= d == NULL || json_array_append_new(dropped, d);
    }
    bad |= json_object_set_new(root, "unmatched_ends",
                               json_integer(loupe_cli_jint(m->unmatched_ends)));
    bad |= json_object_set_new(root, "truncated_zones",
                               json_integer(loupe_cli_jint(m->truncated_zones)));
    json_t *tracks = json_array();
    bad |= tracks == NULL || json_object_set_new(root, "tracks", tracks);
    bad |= json_object_set_new(root, "tracks_not_shown", json_integer(loupe_cli_jint(nb_all - nb)));
    for (size_t i = 0; i < nb && !bad; i++) {
        const loupe_model_thread *th = &m->threads[b[i].thread];
        json_t *d =
            json_pack("{sIsosssIsIsfsI}", "thread", loupe_cli_jint(th->tid), "thread_name",
                      loupe_cli_jstr(th->name), "kind", kind_name(th->kind), "slices",
                      loupe_cli_jint(b[i].slices), "busy_ns", loupe_cli_jint(b[i].busy), "percent",
                      b[i].percent, "overlap_siblings", loupe_cli_jint(b[i].siblings));
        bad |= d == NULL || json_array_append_new(tracks, d);
    }
    /* what the reader dropped or repaired (loupe_model.warnings), and runs skipped on the way */
    json_t *warns = json_array();
    bad |= warns == NULL || json_object_set_new(root, "warnings", warns);
    if (!bad && loupe_trace_find_skipped()[0] != 0) {
        bad |= json_array_append_new(warns, json_sprintf("skipped runs without a complete trace: "
                                                         "%s",
                                                         loupe_trace_find_skipped()));
    }
    for (size_t i = 0; i < m->warning_count && !bad; i++) {
        bad |= json_array_append_new(warns, loupe_cli_jstr(m->warnings[i]));
    }
    bad |= !bad && json_cpu_split(root, m) != 0;
    bad |= !bad && put_hot_json(root, m, by_thread, g_hot_top) != 0;
    if (!bad) {
        bad = json_dumpf(root, stdout, JSON_INDENT(2)) != 0;
        putchar('\n');
    }
    json_decref(zones);
    json_decref(root);
    if (bad) {
        fprintf(stderr, "loupe summary: out of memory writing JSON\n");
        return 1;
    }
    return 0;
}

int loupe_cmd_summary(int argc, char **argv) {
    const char *path = NULL;
    int by_thread = 0, as_json = 0, opts_done = 0, by_rank = 0;
    size_t top = DEFAULT_TOP;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *num = NULL;
        if (opts_done || a[0] != '-' || strcmp(a, "-") == 0) {
            if (path != NULL) {
                return bad_usage("one PATH only, got '%s' as well", a);
            }
            path = a;
        } else if (strcmp(a, "--") == 0) {
            opts_done = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--by-thread") == 0) {
            by_thread = 1;
        } else if (strcmp(a, "--by-rank") == 0) {
            by_rank = 1; /* cli/summary_ranks.c */
        } else if (strcmp(a, "--json") == 0) {
            as_json = 1;
        } else if (strcmp(a, "--top") == 0) {
            if (i + 1 >= argc) {
                return bad_usage("%s needs a number of rows", a);
            }
            num = argv[++i];
        } else if (strncmp(a, "--top=", 6) == 0) {
            num = a + 6;
        } else {
            return bad_usage("unknown option '%s'", a);
        }
        if (num != NULL) {
            char *end;
            unsigned long long v = strtoull(num, &end, 10);
            if (num[0] < '0' || num[0] > '9' || *end != 0 || v > SIZE_MAX) {
                return bad_usage("--top needs a number of rows (0 = all), not '%s'", num);
            }
            top = (size_t)v;
        }
    }
    if (path == NULL) {
        /* loupe record's default log_dir, where a first `loupe record -- PROG` wrote */
        struct stat st;
        if (stat("loupe-log", &st) != 0 || !S_ISDIR(st.st_mode)) {
            return bad_usage("no PATH given (a trace file, run directory or log_dir), and no "
                             "./loupe-log (loupe record's default log directory) here");
        }
        path = "loupe-log";
    }
    if (by_rank) {
        if (as_json || by_thread) {
            return bad_usage("--by-rank does not combine with %s",
                             as_json ? "--json" : "--by-thread");
        }
        return loupe_cli_summary_by_rank(path, top);
    }
    char file[4096];
    int rc = loupe_trace_find(path, file, sizeof file);
    loupe_model *m = NULL;
    if (rc == 0) {
        loupe_cli_progress_begin("summary");
        rc = loupe_trace_read(file, &m);
        loupe_cli_progress_end();
    }
    if (rc != 0) {
        fprintf(stderr, "loupe summary: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        return 1;
    }
    loupe_cli_reader_warnings("summary", NULL, m);
    row *rows;
    size_t nrows;
    busy *b = NULL;
    size_t nb = 0;
    if (make_rows(m, by_thread, &rows, &nrows) != 0 || make_busy(m, &b, &nb) != 0) {
        fprintf(stderr, "loupe summary: out of memory\n");
        free(rows);
        loupe_model_free(m);
        return 1;
    }
    size_t shown = top == 0 || top > nrows ? nrows : top;
    int status = 0;
    g_hot_top = top;
    g_keep_last = keep_last(m);
    size_t nb_all = nb;
    nb = keep_busiest(b, nb, top);
    if (as_json) {
        status = print_json(file, m, rows, shown, by_thread, b, nb, nb_all);
    } else {
        print_text(file, m, rows, nrows, shown, by_thread, b, nb, nb_all);
        if (print_hot_text(m, by_thread, top) != 0) {
            fprintf(stderr, "loupe summary: out of memory\n");
            status = 1;
        }
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        status = 1;
    }
    free(rows);
    free(b);
    loupe_model_free(m);
    return status;
}
