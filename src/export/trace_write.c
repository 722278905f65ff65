/* trace_write.c: loupe_trace_write() (loupe/writer.h): one model into one file of a chosen
 * format, through the writers of writers.h and a file sink; the file appears only when complete
 * (<path>.tmp, then rename), like the run directory's files (rundir.c). */
#include "export/writers.h"

#include "base/error.h"
#include "export/registry.h"

#include <errno.h>
#include <loupe/writer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

loupe_file_format loupe_file_format_from_name(const char *path) {
    const loupe_format_desc *d = loupe_format_by_path(path);
    return d != NULL ? d->file_format : LOUPE_FILE_UNKNOWN;
}

loupe_file_format loupe_file_format_parse(const char *name) {
    const loupe_format_desc *d = loupe_format_by_name(name);
    return d != NULL ? d->file_format : LOUPE_FILE_UNKNOWN;
}

int loupe_trace_write(const loupe_model *m, const char *path, loupe_file_format format) {
    if (m == NULL || path == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_write: %s is NULL",
                          m == NULL ? "the model" : "path");
    }
    const loupe__format *f = loupe__format_by_file(format);
    if (f == NULL || f->write == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_write: unknown format %d", (int)format);
    }
    /* Chrome JSON is gzipped by the file's name (a.json stays text); the binary formats never. */
    int gz = f->d.gzip && ends_with(path, ".gz");
    return loupe__write_file(m, path, gz, f->write);
}

int loupe__write_file(const loupe_model *m, const char *path, int gz,
                      int (*write)(const loupe_model *, loupe__sink *)) {
    size_t n = strlen(path);
    /* The user's directory, checked before the temporary's name can stand in for the path in
     * the detail ("cannot create x/t.json.tmp" when x is missing). */
    size_t d = n;
    while (d > 0 && path[d - 1] != '/') {
        d--;
    }
    while (d > 1 && path[d - 1] == '/') {
        d--; /* "a//t.json": the directory is "a"; "/t.json": "/" */
    }
    if (d > 0) {
        char *dir = malloc(d + 1);
        if (dir == NULL) {
            return loupe__err(LOUPE_ENOMEM, "cannot write %s: out of memory", path);
        }
        memcpy(dir, path, d);
        dir[d] = 0;
        struct stat st;
        int missing = stat(dir, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
        if (missing == ENOENT || missing == ENOTDIR) {
            int r = missing == ENOENT
                        ? loupe__err(LOUPE_EIO,
                                     "cannot create %s: the directory %s does not exist (create "
                                     "it first)",
                                     path, dir)
                        : loupe__err(LOUPE_EIO,
                                     "cannot create %s: %s is not a directory (it, or a directory "
                                     "above it, is a file)",
                                     path, dir);
            free(dir);
            return r;
        }
        free(dir);
    }
    char *tmp = malloc(n + 5);
    if (tmp == NULL) {
        return loupe__err(LOUPE_ENOMEM, "cannot write %s: out of memory", path);
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    loupe__sink s;
    int r = loupe__sink_open_file(&s, tmp, gz); /* detail: "cannot create <tmp>: ..." */
    if (r != 0) {
        free(tmp);
        return loupe__err_prefix(r, "cannot write %s", path);
    }
    r = write(m, &s);
    if (r == 0) {
        r = loupe__sink_close(&s); /* detail: "cannot write <tmp>: ... (errno N)" */
    } else {
        loupe__sink_discard(&s); /* keeps the writer's detail */
    }
    if (r == 0 && rename(tmp, path) != 0) {
        int e = errno;
        r = loupe__err(LOUPE_EIO, "cannot write %s: rename from %s: %s (errno %d)", path, tmp,
                       strerror(e), e);
    }
    if (r != 0) {
        unlink(tmp);
        free(tmp);
        return r;
    }
    free(tmp);
    return 0;
}

/* The flame-graph writers with a fixed weight (loupe__write_file takes no context). */
static int folded_time(const loupe_model *m, loupe__sink *s) {
    return loupe__write_folded_weighted(m, s, LOUPE_FLAME_WEIGHT_TIME);
}

static int folded_samples(const loupe_model *m, loupe__sink *s) {
    return loupe__write_folded_weighted(m, s, LOUPE_FLAME_WEIGHT_SAMPLES);
}

static int svg_time(const loupe_model *m, loupe__sink *s) {
    return loupe__write_svg_weighted(m, s, LOUPE_FLAME_WEIGHT_TIME);
}

static int svg_samples(const loupe_model *m, loupe__sink *s) {
    return loupe__write_svg_weighted(m, s, LOUPE_FLAME_WEIGHT_SAMPLES);
}

int loupe_trace_write_opts(const loupe_model *m, const char *path, loupe_file_format format,
                           const loupe_write_options *o) {
    loupe_flame_weight w = o != NULL ? o->flame_weight : LOUPE_FLAME_WEIGHT_AUTO;
    if (w != LOUPE_FLAME_WEIGHT_AUTO && w != LOUPE_FLAME_WEIGHT_TIME &&
        w != LOUPE_FLAME_WEIGHT_SAMPLES) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_trace_write_opts: flame_weight %d is none of "
                          "LOUPE_FLAME_WEIGHT_AUTO, _TIME and _SAMPLES",
                          (int)w);
    }
    if (w == LOUPE_FLAME_WEIGHT_AUTO || (format != LOUPE_FILE_FOLDED && format != LOUPE_FILE_SVG)) {
        return loupe_trace_write(m, path, format);
    }
    if (m == NULL || path == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_write_opts: %s is NULL",
                          m == NULL ? "the model" : "path");
    }
    int samples = w == LOUPE_FLAME_WEIGHT_SAMPLES;
    if (format == LOUPE_FILE_FOLDED) {
        return loupe__write_file(m, path, 0, samples ? folded_samples : folded_time);
    }
    return loupe__write_file(m, path, 0, samples ? svg_samples : svg_time);
}
