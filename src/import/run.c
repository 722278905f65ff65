/* run.c: a run directory that several processes wrote, read as one model (loupe_trace_read() on
 * a directory; loupe_trace_find() gives the directory itself for such a run). `loupe record`
 * following a process tree has every process write <host>.<pid><suffix> into one run directory
 * (docs/record.md), an MPI job every rank rankNNNN<suffix> (docs/mpi.md); this reads one file
 * per process, the one that reads fastest and holds the whole model (.xplane.pb, then .pftrace,
 * then .trace.json.gz: the order rundir_find.c uses), and merges them (src/model/merge.c): a
 * process per file, times on the earliest file's origin (one host: one wall clock), plus each
 * file's clock correction (loupe_clock_offset_* metadata), and MPI messages as flows. */
#include "base/array.h"
#include "base/error.h"
#include "import/readers.h"
#include "model/merge.h"

#include <loupe/reader.h>
#include <loupe/writer.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct proc_file {
    char *prefix; /* "<host>.<pid>" */
    char *name;   /* the file chosen for it */
    int rank;     /* of its suffix: 0 best */
    loupe_model *m;
} proc_file;

/* The length of the "<x>.<pid>" prefix (or the "rank<N>" prefix of an MPI rank's file,
 * cli/record_mpi.c) of name when name is that prefix and then suffix; 0 otherwise. */
static size_t pid_prefix(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    if (n <= k || strcmp(name + n - k, suffix) != 0) {
        return 0;
    }
    size_t p = n - k, d = p;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') {
        d--;
    }
    /* at least one digit, a dot before them, something before the dot; or "rank" before them */
    if (d < p && d == 4 && strncmp(name, "rank", 4) == 0) {
        return p;
    }
    return d < p && d >= 2 && name[d - 1] == '.' ? p : 0;
}

static int cmp_part(const void *a, const void *b) {
    const proc_file *x = a, *y = b;
    if (x->m->origin_unix_ns != y->m->origin_unix_ns) {
        return x->m->origin_unix_ns < y->m->origin_unix_ns ? -1 : 1;
    }
    if (x->m->pid != y->m->pid) {
        return x->m->pid < y->m->pid ? -1 : 1;
    }
    return strcmp(x->prefix, y->prefix);
}

static void free_files(proc_file *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i].prefix);
        free(v[i].name);
        loupe_model_free(v[i].m);
    }
    free(v);
}

/* The process files of dir, one per prefix (the best-ranked suffix). */
static int list_processes(const char *dir, proc_file **out, size_t *count) {
    const char *suffixes[3] = {loupe_format_by_file_format(LOUPE_FILE_XPLANE)->suffix,
                               loupe_format_by_file_format(LOUPE_FILE_PERFETTO_PROTO)->suffix,
                               loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON)->suffix};
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return loupe__err(LOUPE_EIO, "%s: %s", dir, strerror(errno));
    }
    proc_file *v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        for (int r = 0; r < 3; r++) {
            size_t pl = pid_prefix(e->d_name, suffixes[r]);
            if (pl == 0) {
                continue;
            }
            size_t i = 0;
            while (i < n && (strlen(v[i].prefix) != pl || strncmp(v[i].prefix, e->d_name, pl))) {
                i++;
            }
            if (i == n) {
                if (loupe__grow((void **)&v, &cap, n + 1, sizeof *v) != 0) {
                    rc = LOUPE_ENOMEM;
                    break;
                }
                memset(&v[n], 0, sizeof v[n]);
                v[n].prefix = strndup(e->d_name, pl);
                v[n].rank = 99;
                n++;
                if (v[i].prefix == NULL) {
                    rc = LOUPE_ENOMEM;
                    break;
                }
            }
            if (r < v[i].rank) {
                char *s = strdup(e->d_name);
                if (s == NULL) {
                    rc = LOUPE_ENOMEM;
                    break;
                }
                free(v[i].name);
                v[i].name = s;
                v[i].rank = r;
            }
            break;
        }
    }
    closedir(d);
    if (rc != 0) {
        free_files(v, n);
        return loupe__err(LOUPE_ENOMEM, "%s: out of memory listing it", dir);
    }
    *out = v;
    *count = n;
    return 0;
}

static int has_meta(const loupe_model *m, const char *key) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return 1;
        }
    }
    return 0;
}

int loupe__read_run(const char *dir, loupe_model **out) {
    *out = NULL;
    proc_file *v;
    size_t n;
    int rc = list_processes(dir, &v, &n);
    if (rc != 0) {
        return rc;
    }
    if (n == 0) {
        free(v);
        return loupe__err(LOUPE_EIO, "%s: %s (and no <host>.<pid> process files in it)", dir,
                          strerror(EISDIR));
    }
    char path[8192];
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (snprintf(path, sizeof path, "%s/%s", dir, v[i].name) >= (int)sizeof path) {
            rc = loupe__err(LOUPE_EINVALID, "%s: path too long", dir);
            break;
        }
        rc = loupe_trace_read(path, &v[i].m); /* lifts each file's cmdline and parent pid */
    }
    /* One file is the model as it is, unless it is an MPI rank's (libloupe_mpi.so's metadata):
     * the merge makes its messages to itself flows, as it does every rank's of a larger run. */
    if (rc == 0 && n == 1 && !has_meta(v[0].m, "loupe_mpi_rank")) {
        *out = v[0].m;
        v[0].m = NULL;
    } else if (rc == 0) {
        qsort(v, n, sizeof *v, cmp_part); /* the earliest (the tree's root) is processes[0] */
        loupe_model **parts = calloc(n, sizeof *parts);
        const char **names = calloc(n, sizeof *names);
        if (parts == NULL || names == NULL) {
            rc = loupe__err(LOUPE_ENOMEM, "%s: out of memory merging %zu processes", dir, n);
        } else {
            for (size_t i = 0; i < n; i++) {
                parts[i] = v[i].m;
                names[i] = v[i].name;
            }
            rc = loupe__model_merge(parts, names, n, out);
            if (rc != 0) {
                (void)loupe__err_prefix(rc, "%s", dir);
            }
        }
        free(parts);
        free(names);
    }
    free_files(v, n);
    return rc;
}
