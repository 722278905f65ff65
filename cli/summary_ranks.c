/* summary_ranks.c: `loupe summary RUN --by-rank` (docs/mpi.md): the zones of an MPI run across
 * its ranks. Reads every rank's file of the run directory (rankNNNN.trace.json.gz, else
 * rankNNNN.xplane.pb), puts each on rank 0's clock with the offsets libloupe_mpi.so measured
 * (metadata loupe_clock_offset_*, linear between the two measurements), and prints
 *   - per zone name: the per-rank total time, its min / mean / max across ranks and the
 *     imbalance ratio max / mean (1.00 = balanced; Score-P's and mpiP's load-imbalance figure);
 *   - the critical-rank hint: the collective instance (name and seq) where the last rank came
 *     latest after the first, and how many of the collectives each rank was last at.
 * Public API and the readers only. */
#include "cli.h"

#include <dirent.h>
#include <limits.h>
#include <loupe/loupe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_RANKS = 4096 };

typedef struct rank_file {
    int rank;
    char path[PATH_MAX];
    loupe_model *m; /* while it is being counted: one model in memory at a time */
} rank_file;

static const char *meta(const loupe_model *m, const char *key) {
    return loupe_cli_meta(m, key);
}

static int64_t meta_i64(const loupe_model *m, const char *key, int64_t dflt, int *found) {
    const char *v = meta(m, key);
    if (found) {
        *found = v != NULL;
    }
    return v != NULL ? strtoll(v, NULL, 10) : dflt;
}

/* A time of rank file f (ns from its origin) on rank 0's clock, as unix ns (the library's
 * correction: drift only where the two measurements tell it). */
static int64_t on_rank0(const rank_file *f, uint64_t ts) {
    return (int64_t)f->m->origin_unix_ns + (int64_t)ts + loupe_model_clock_offset(f->m, ts);
}

static int has_rank_file(const char *dir) {
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL && !found;) {
        found = strncmp(e->d_name, "rank", 4) == 0 && strstr(e->d_name, ".tmp") == NULL;
    }
    if (d) {
        closedir(d);
    }
    return found;
}

/* The run directory: path itself when it holds rank files, else the newest run (by mtime)
 * under path/plugins/profile that does. */
static int find_run(const char *path, char *buf, size_t size) {
    if (has_rank_file(path)) {
        snprintf(buf, size, "%s", path);
        return 0;
    }
    char prof[PATH_MAX];
    snprintf(prof, sizeof prof, "%s/plugins/profile", path);
    DIR *d = opendir(prof);
    if (d == NULL) {
        return -1;
    }
    long long best = -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char p[PATH_MAX];
        struct stat st;
        if (e->d_name[0] == '.' ||
            snprintf(p, sizeof p, "%s/%s", prof, e->d_name) >= (int)sizeof p || stat(p, &st) != 0 ||
            !S_ISDIR(st.st_mode) || !has_rank_file(p)) {
            continue;
        }
        long long t = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        if (t > best) {
            best = t;
            snprintf(buf, size, "%s", p);
        }
    }
    closedir(d);
    return best >= 0 ? 0 : -1;
}

typedef struct zone_row {
    const char *name;
    uint64_t count;
    uint64_t *per_rank; /* total ns per rank index */
    uint64_t sort_key;
} zone_row;

static int by_max(const void *a, const void *b) {
    const zone_row *x = a, *y = b;
    return x->sort_key < y->sort_key   ? 1
           : x->sort_key > y->sort_key ? -1
                                       : strcmp(x->name, y->name);
}

typedef struct arrival {
    const char *name;
    int64_t seq;
    int64_t first, last;
    int last_rank, ranks;
} arrival;

static int64_t arg_i64(const loupe_model_thread *th, size_t slice, const char *key, int *found) {
    size_t n;
    const loupe_arg *args = loupe_slice_args(th, slice, &n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(args[i].key, key) == 0) {
            *found = 1;
            const loupe_arg *a = &args[i];
            return a->type == LOUPE_ARG_UINT64   ? (int64_t)a->v.u
                   : a->type == LOUPE_ARG_DOUBLE ? (int64_t)a->v.d
                                                 : a->v.i;
        }
    }
    *found = 0;
    return 0;
}

static int read_ranks(const char *run, rank_file **out, size_t *n_out) {
    rank_file *f = calloc(MAX_RANKS, sizeof *f);
    size_t n = 0;
    if (f == NULL) {
        return -1;
    }
    for (int r = 0; r < MAX_RANKS; r++) {
        char p[PATH_MAX];
        /* the suffixes from the format registry (loupe/writer.h): JSON first (it keeps every
         * argument), else XPlane */
        const loupe_format_desc *js = loupe_format_by_bit(LOUPE_FORMAT_CHROME_JSON);
        const loupe_format_desc *xp = loupe_format_by_bit(LOUPE_FORMAT_XPLANE);
        int w = snprintf(p, sizeof p, "%s/rank%04d%s", run, r, js ? js->suffix : "");
        if (w < 0 || (size_t)w >= sizeof p) {
            break;
        }
        if (access(p, R_OK) != 0) {
            w = snprintf(p, sizeof p, "%s/rank%04d%s", run, r, xp ? xp->suffix : "");
            if (w < 0 || (size_t)w >= sizeof p || access(p, R_OK) != 0) {
                continue;
            }
        }
        f[n].rank = r;
        memcpy(f[n].path, p, sizeof p);
        n++;
    }
    *out = f;
    *n_out = n;
    return 0;
}

/* Reads rank file x (its offsets from its metadata): 0, or -1 with the error said. */
static int open_rank(rank_file *x) {
    loupe_model *m = NULL;
    int rc = loupe_trace_read(x->path, &m);
    if (rc != 0) {
        fprintf(stderr, "loupe summary: %s: %s (rank %d left out)\n", loupe_strerror(rc),
                loupe_last_error(), x->rank);
        return -1;
    }
    x->rank = (int)meta_i64(m, "loupe_mpi_rank", x->rank, NULL);
    x->m = m;
    return 0;
}

int loupe_cli_summary_by_rank(const char *path, size_t top) {
    char run[PATH_MAX];
    if (find_run(path, run, sizeof run) != 0) {
        fprintf(stderr,
                "loupe summary: --by-rank: no rank files (rankNNNN.*) in %s or in a run under "
                "%s/plugins/profile: record with `mpirun -np N loupe record -- PROGRAM`\n",
                path, path);
        return 1;
    }
    rank_file *f = NULL;
    size_t n = 0;
    if (read_ranks(run, &f, &n) != 0 || n == 0) {
        fprintf(stderr, "loupe summary: --by-rank: no rank file of %s could be read\n", run);
        free(f);
        return 1;
    }
    /* Zones by name: names are interned per model, so rows are matched by strcmp. */
    size_t cap = 256, nrows = 0, narr = 0, carr = 256;
    zone_row *rows = calloc(cap, sizeof *rows);
    arrival *arr = calloc(carr, sizeof *arr);
    int64_t unc = 0;
    int oom = rows == NULL || arr == NULL;
    size_t hint = 0; /* the last row matched: consecutive slices often share a name */
    for (size_t k = 0; k < n && !oom; k++) {
        if (open_rank(&f[k]) != 0) {
            continue;
        }
        int64_t u = meta_i64(f[k].m, "loupe_clock_offset_uncertainty_ns", 0, NULL);
        unc = u > unc ? u : unc;
        const loupe_model *m = f[k].m;
        for (size_t t = 0; t < m->thread_count && !oom; t++) {
            const loupe_model_thread *th = &m->threads[t];
            for (size_t s = 0; s < th->slice_count && !oom; s++) {
                const loupe_slice *sl = &th->slices[s];
                size_t i = hint < nrows && strcmp(rows[hint].name, sl->name) == 0 ? hint : 0;
                while (i < nrows && strcmp(rows[i].name, sl->name) != 0) {
                    i++;
                }
                hint = i;
                if (i == nrows) {
                    if (nrows == cap) {
                        zone_row *g = realloc(rows, cap * 2 * sizeof *rows);
                        if (g == NULL) {
                            oom = 1;
                            break;
                        }
                        rows = g;
                        cap *= 2;
                    }
                    rows[i] = (zone_row){strdup(sl->name), 0, calloc(n, sizeof(uint64_t)), 0};
                    nrows++;
                    if (rows[i].per_rank == NULL || rows[i].name == NULL) {
                        oom = 1;
                        break;
                    }
                }
                rows[i].count++;
                rows[i].per_rank[k] += sl->dur_ns;
                int has_seq;
                int64_t seq = arg_i64(th, s, "seq", &has_seq);
                if (!has_seq || strncmp(sl->name, "MPI_", 4) != 0) {
                    continue;
                }
                int64_t at = on_rank0(&f[k], sl->start_ns);
                size_t a = 0;
                while (a < narr && !(arr[a].seq == seq && strcmp(arr[a].name, sl->name) == 0)) {
                    a++;
                }
                if (a == narr) {
                    if (narr == carr) {
                        arrival *g = realloc(arr, carr * 2 * sizeof *arr);
                        if (g == NULL) {
                            oom = 1;
                            break;
                        }
                        arr = g;
                        carr *= 2;
                    }
                    arr[a] = (arrival){strdup(sl->name), seq, at, at, f[k].rank, 0};
                    narr++;
                    if (arr[a].name == NULL) {
                        oom = 1;
                        break;
                    }
                }
                arr[a].ranks++;
                if (at < arr[a].first) {
                    arr[a].first = at;
                }
                if (at > arr[a].last) {
                    arr[a].last = at;
                    arr[a].last_rank = f[k].rank;
                }
            }
        }
        loupe_model_free(f[k].m); /* counted: the next rank's model takes its place */
        f[k].m = NULL;
    }
    int rc = 0;
    if (oom) {
        fprintf(stderr, "loupe summary: out of memory\n");
        rc = 1;
        goto out;
    }
    printf("%s: %zu ranks; clocks on rank 0's, aligned to within %.3f us (half the smallest "
           "measured round trip)\n",
           run, n, (double)unc / 1e3);
    for (size_t i = 0; i < nrows; i++) {
        uint64_t mx = 0;
        for (size_t k = 0; k < n; k++) {
            mx = rows[i].per_rank[k] > mx ? rows[i].per_rank[k] : mx;
        }
        rows[i].sort_key = mx;
    }
    qsort(rows, nrows, sizeof *rows, by_max);
    printf("%10s %12s %12s %12s %9s %9s  %s\n", "count", "min", "mean", "max", "imbalance",
           "max_rank", "name");
    for (size_t i = 0; i < nrows && (top == 0 || i < top); i++) {
        uint64_t mn = UINT64_MAX, mx = 0, sum = 0;
        int mxr = 0;
        for (size_t k = 0; k < n; k++) {
            uint64_t v = rows[i].per_rank[k];
            sum += v;
            mn = v < mn ? v : mn;
            if (v > mx) {
                mx = v;
                mxr = f[k].rank;
            }
        }
        double mean = (double)sum / (double)n;
        char a[32], b[32], c[32];
        loupe_cli_fmt_dur(a, sizeof a, mn);
        loupe_cli_fmt_dur(b, sizeof b, (uint64_t)(mean + 0.5));
        loupe_cli_fmt_dur(c, sizeof c, mx);
        printf("%10llu %12s %12s %12s %9.2f %9d  %s\n", (unsigned long long)rows[i].count, a, b, c,
               mean > 0 ? (double)mx / mean : 1.0, mxr, rows[i].name);
    }
    /* The critical-rank hint: the collective the last rank reached latest after the first. */
    size_t worst = SIZE_MAX, complete = 0;
    uint64_t *last_at = calloc(n, sizeof *last_at);
    for (size_t a = 0; a < narr; a++) {
        if (arr[a].ranks < 2 || (size_t)arr[a].ranks != n) {
            continue; /* a collective on a sub-communicator: not every rank's */
        }
        complete++;
        for (size_t k = 0; k < n && last_at; k++) {
            last_at[k] += f[k].rank == arr[a].last_rank;
        }
        if (worst == SIZE_MAX || arr[a].last - arr[a].first > arr[worst].last - arr[worst].first) {
            worst = a;
        }
    }
    if (worst != SIZE_MAX) {
        char d[32];
        loupe_cli_fmt_dur(d, sizeof d, (uint64_t)(arr[worst].last - arr[worst].first));
        printf("critical rank: rank %d arrives last at %s #%lld by %s (after the first rank)\n",
               arr[worst].last_rank, arr[worst].name, (long long)arr[worst].seq, d);
        size_t most = 0;
        for (size_t k = 1; k < n && last_at; k++) {
            most = last_at[k] > last_at[most] ? k : most;
        }
        if (last_at != NULL) {
            printf("critical rank: rank %d arrives last at %llu of %zu collectives\n", f[most].rank,
                   (unsigned long long)last_at[most], complete);
        }
    }
    free(last_at);
out:
    for (size_t i = 0; rows != NULL && i < nrows; i++) {
        free(rows[i].per_rank);
        free((void *)(uintptr_t)rows[i].name);
    }
    for (size_t a = 0; arr != NULL && a < narr; a++) {
        free((void *)(uintptr_t)arr[a].name);
    }
    free(rows);
    free(arr);
    for (size_t k = 0; k < n; k++) {
        loupe_model_free(f[k].m);
    }
    free(f);
    return rc;
}
