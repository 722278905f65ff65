/* rundir_find.c: loupe_trace_find() (loupe/reader.h), the run directory read back: which file of
 * a log_dir or run directory `loupe summary` reads. It sits beside rundir.c, which writes the
 * layout (plugins/profile/<run>/<host><suffix>, each file written as <file>.tmp and renamed once
 * complete), so that one folder knows the layout both ways; it only walks the file system. */
#include "base/array.h"
#include "base/error.h"

#include <loupe/reader.h>
#include <loupe/writer.h>
#include <loupe/writer.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Natural order: digit runs compare as numbers, so run "..._10" sorts after "..._9" and a name
 * sorts after its own prefix ("X" < "X_2"). */
static int natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (is_digit(*a) && is_digit(*b)) {
            while (*a == '0' && is_digit(a[1])) {
                a++;
            }
            while (*b == '0' && is_digit(b[1])) {
                b++;
            }
            size_t la = 0, lb = 0;
            while (is_digit(a[la])) {
                la++;
            }
            while (is_digit(b[lb])) {
                lb++;
            }
            if (la != lb) {
                return la < lb ? -1 : 1;
            }
            int c = memcmp(a, b, la);
            if (c != 0) {
                return c;
            }
            a += la;
            b += lb;
        } else {
            if (*a != *b) {
                return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            }
            a++;
            b++;
        }
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_kind(const char *dir, const char *name, mode_t kind) {
    char p[4096];
    struct stat st;
    if (snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p) || stat(p, &st) != 0) {
        return 0;
    }
    return (st.st_mode & S_IFMT) == kind;
}

static int cmp_name(const void *a, const void *b) {
    return natural_cmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i]);
    }
    free(v);
}

/* The entries of dir of one kind (S_IFREG / S_IFDIR), not hidden, in natural order. */
static int list_dir(const char *dir, mode_t kind, char ***out, size_t *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return loupe__err(LOUPE_EIO, "%s: %s", dir, strerror(errno));
    }
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !is_kind(dir, e->d_name, kind)) {
            continue;
        }
        char *s = strdup(e->d_name);
        if (s == NULL || loupe__grow((void **)&v, &cap, n + 1, sizeof(char *)) != 0) {
            free(s);
            free_names(v, n);
            closedir(d);
            return loupe__err(LOUPE_ENOMEM, "%s: out of memory listing it", dir);
        }
        v[n++] = s;
    }
    closedir(d);
    if (n > 1) {
        qsort(v, n, sizeof(char *), cmp_name);
    }
    *out = v;
    *count = n;
    return 0;
}

static int put_path(char *buf, size_t size, const char *dir, const char *name) {
    int w = name != NULL ? snprintf(buf, size, "%s/%s", dir, name) : snprintf(buf, size, "%s", dir);
    if (w < 0 || (size_t)w >= size) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_trace_find: the path of %s%s%s needs %d bytes, "
                          "the buffer holds %zu",
                          dir, name ? "/" : "", name ? name : "", w + 1, size);
    }
    return 0;
}

/* The length of the "<host>.<pid>" prefix (or an MPI rank's "rank<N>") when name is one and then
 * suffix, else 0 (the same rule as src/import/run.c, which reads such a run). */
static size_t pid_prefix(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    if (n <= k || strcmp(name + n - k, suffix) != 0) {
        return 0;
    }
    size_t p = n - k, d = p;
    while (d > 0 && is_digit(name[d - 1])) {
        d--;
    }
    if (d < p && d == 4 && strncmp(name, "rank", 4) == 0) {
        return p;
    }
    return d < p && d >= 2 && name[d - 1] == '.' ? p : 0;
}

/* Non-zero when names hold traces of two or more processes (<host>.<pid><suffix>, written by
 * `loupe record` following a process tree; rank<N><suffix>, by an MPI job's ranks): the run is
 * read whole, merged (src/import/run.c). */
static int multi_process(char **names, size_t n, const char *const *suffixes, size_t ns) {
    const char *first = NULL;
    size_t first_len = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t s = 0; s < ns; s++) {
            size_t pl = pid_prefix(names[i], suffixes[s]);
            if (pl == 0) {
                continue;
            }
            if (first == NULL) {
                first = names[i];
                first_len = pl;
            } else if (pl != first_len || strncmp(first, names[i], pl) != 0) {
                return 1;
            }
            break;
        }
    }
    return 0;
}

/* A part of a split XPlane trace (src/export/xplane.c): <x>.part<k>.xplane.pb beside its
 * <x>.xplane.pb. The reader of the first part reads the others with it, so a part is no trace
 * of its own here. */
static int is_part(char **names, size_t n, const char *name, const char *suffix) {
    size_t len = strlen(name), k = strlen(suffix);
    if (len <= k || strcmp(name + len - k, suffix) != 0) {
        return 0;
    }
    size_t d = len - k;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') {
        d--;
    }
    if (d == len - k || d < 6 || memcmp(name + d - 5, ".part", 5) != 0) {
        return 0;
    }
    size_t base = d - 5;
    for (size_t i = 0; i < n; i++) {
        if (strlen(names[i]) == base + k && strncmp(names[i], name, base) == 0 &&
            strcmp(names[i] + base, suffix) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The trace to read in a run directory: of loupe's own files the one that reads fastest and
 * holds the whole model (an .xplane.pb, then a .pftrace: protobuf, no text to parse; on 3 M
 * events 8.8 and 4.8 M events/s against 3.3 for the .trace.json.gz), else any *.json /
 * *.json.gz (another tool's). The parts of a split .xplane.pb are read with its first (is_part()).
 * A <file>.tmp is a write that did not finish (rundir.c renames a file only once complete) and is
 * never a candidate. 1 when found, 0 when dir holds none (*tmp_out: how many .tmp files it holds),
 * or an error. */
static int trace_in_dir(const char *dir, char *buf, size_t size, size_t *tmp_out) {
    char **names;
    size_t n;
    int rc = list_dir(dir, S_IFREG, &names, &n);
    if (rc != 0) {
        return rc;
    }
    /* the suffixes come from the format registry (registry.c), as rundir.c writes them */
    const loupe_format_desc *pf = loupe_format_by_file_format(LOUPE_FILE_PERFETTO_PROTO);
    const loupe_format_desc *xp = loupe_format_by_file_format(LOUPE_FILE_XPLANE);
    const loupe_format_desc *js = loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON);
    const char *const passes[][2] = {{xp->suffix, NULL},
                                     {pf->suffix, NULL},
                                     {js->suffix, NULL},
                                     {js->suffixes[0], js->suffixes[1]}};
    const char *pick = NULL;
    int found = 0;
    *tmp_out = 0;
    const char *const proc_suffixes[] = {xp->suffix, pf->suffix, js->suffix};
    if (multi_process(names, n, proc_suffixes, 3)) {
        free_names(names, n);
        rc = put_path(buf, size, dir, NULL); /* the directory: loupe_trace_read() merges it */
        return rc != 0 ? rc : 1;
    }
    for (size_t i = 0; i < n; i++) {
        *tmp_out += ends_with(names[i], ".tmp") ? 1u : 0u;
    }
    for (size_t pass = 0; pass < sizeof passes / sizeof passes[0] && !found; pass++) {
        size_t hits = 0;
        char list[512] = "";
        for (size_t i = 0; i < n; i++) {
            const char *s = names[i];
            int ok = ends_with(s, passes[pass][0]) ||
                     (passes[pass][1] != NULL && ends_with(s, passes[pass][1]));
            if (!ok || (pass == 0 && is_part(names, n, s, xp->suffix))) {
                continue;
            }
            pick = s;
            size_t l = strlen(list);
            snprintf(list + l, sizeof(list) - l, "%s%s", hits ? ", " : "", s);
            hits++;
        }
        if (hits > 1) {
            rc = loupe__err(LOUPE_EIO, "%s holds %zu traces (%s): name the one to read", dir, hits,
                            list);
            free_names(names, n);
            return rc;
        }
        found = hits == 1;
    }
    rc = found ? put_path(buf, size, dir, pick) : 0;
    free_names(names, n);
    return rc != 0 ? rc : found;
}

static _Thread_local char skipped[1024];

const char *loupe_trace_find_skipped(void) {
    return skipped;
}

/* Adds "<run> (<why>)" to the note of skipped runs. */
static void note_skip(size_t *count, const char *run, size_t tmp) {
    size_t l = strlen(skipped);
    if (l + 64 < sizeof skipped) {
        snprintf(skipped + l, sizeof skipped - l, "%s%s (%s)", *count ? ", " : "", run,
                 tmp ? "only .tmp files: a write that did not finish" : "no trace file");
    }
    (*count)++;
}

int loupe_trace_find(const char *path, char *buf, size_t size) {
    skipped[0] = 0;
    if (path == NULL || buf == NULL || size == 0) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_find: %s",
                          path == NULL  ? "path is NULL"
                          : buf == NULL ? "buf is NULL"
                                        : "size is 0");
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        return loupe__err(LOUPE_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        return put_path(buf, size, path, NULL);
    }
    /* A log_dir (plugins/profile/<run>/) first, else a directory holding the trace. */
    char profile[4096];
    if (snprintf(profile, sizeof(profile), "%s/plugins/profile", path) >= (int)sizeof(profile)) {
        return loupe__err(LOUPE_EINVALID, "%s: path too long", path);
    }
    int rc;
    size_t tmp = 0;
    if (stat(profile, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = trace_in_dir(path, buf, size, &tmp);
        if (rc == 0) {
            return loupe__err(LOUPE_EIO,
                              "%s: no complete trace in it (*%s, *%s, *%s, *%s%s) and no "
                              "plugins/profile/<run> directory",
                              path, loupe_format_by_file_format(LOUPE_FILE_XPLANE)->suffix,
                              loupe_format_by_file_format(LOUPE_FILE_PERFETTO_PROTO)->suffix,
                              loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON)->suffixes[0],
                              loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON)->suffixes[1],
                              tmp ? "; only .tmp files, left by a write that did not finish" : "");
        }
        return rc < 0 ? rc : 0;
    }
    char **runs;
    size_t n;
    if ((rc = list_dir(profile, S_IFDIR, &runs, &n)) != 0) {
        return rc;
    }
    if (n == 0) {
        free(runs);
        return loupe__err(LOUPE_EIO, "%s: no run in it", profile);
    }
    /* Newest first; a run without a complete trace (a failed capture, a kill during the write)
     * is skipped and named in loupe_trace_find_skipped(). */
    size_t skips = 0;
    rc = 0;
    for (size_t i = n; i-- > 0 && rc == 0;) {
        char run[4096];
        int w = snprintf(run, sizeof(run), "%s/%s", profile, runs[i]);
        if (w < 0 || (size_t)w >= sizeof(run)) {
            rc = loupe__err(LOUPE_EINVALID, "%s: path too long", profile);
            break;
        }
        rc = trace_in_dir(run, buf, size, &tmp);
        if (rc == 0) {
            note_skip(&skips, runs[i], tmp);
        }
    }
    free_names(runs, n);
    if (rc == 0) {
        char why[sizeof skipped];
        memcpy(why, skipped, sizeof why);
        skipped[0] = 0;
        return loupe__err(LOUPE_EIO, "%s: no run holds a complete trace: %s", profile, why);
    }
    return rc < 0 ? rc : 0;
}
