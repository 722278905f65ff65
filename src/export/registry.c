/* registry.c: the format registry, one row per format (in the spirit of curl's table of TLS
 * backend descriptors, lib/vtls/vtls.c: one descriptor per backend, every caller iterates it).
 * A row holds everything any part of loupe needs to know about a format: its names, the file names
 * it is written as and recognised by, its run-directory bit, gzip, the Content-Type the profiler
 * server sends, and its writer. The rows' order is the order a run directory is written in and
 * the order help texts list them in. The readers are chosen by content (import/read.c), not by
 * name; can_read says which formats they take. */
#include "export/registry.h"

#include "base/error.h"
#include "export/writers.h"

#include <loupe/trace.h>
#include <stdio.h>
#include <string.h>

static int chrome_json(const loupe_model *m, loupe__sink *s) {
    return loupe__write_chrome_json(m, s, 0);
}

static int perfetto_json(const loupe_model *m, loupe__sink *s) {
    return loupe__write_chrome_json(m, s, 1);
}

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE ((const char *const[]){NULL})

/* Suffixes recognised by loupe_format_by_path(): the longest match over all rows wins, so that
 * ".xplane.pb" is XPlane although ".pb" alone is Perfetto's. perfetto-json recognises none: a
 * perfetto_trace.json.gz is Chrome JSON to a reader. */
static const loupe__format rows[] = {
    {{.name = "json",
      .aliases = LIST("chrome"),
      .description = "Chrome Trace Event JSON",
      .file_format = LOUPE_FILE_CHROME_JSON,
      .run_dir_bit = LOUPE_FORMAT_CHROME_JSON,
      .suffix = ".trace.json.gz",
      .host_prefixed = 1,
      .suffixes = LIST(".json", ".json.gz"),
      .gzip = 1,
      .mime_type = "application/gzip",
      .can_write = 1,
      .can_read = 1},
     chrome_json},
    {{.name = "xplane",
      .aliases = NONE,
      .description = "XSpace for XProf / TensorBoard",
      .file_format = LOUPE_FILE_XPLANE,
      .run_dir_bit = LOUPE_FORMAT_XPLANE,
      .suffix = ".xplane.pb",
      .host_prefixed = 1,
      .suffixes = LIST(".xplane.pb", ".xspace.pb"),
      .gzip = 0,
      .mime_type = "application/octet-stream",
      .can_write = 1,
      .can_read = 1},
     loupe__write_xplane},
    {{.name = "perfetto",
      .aliases = LIST("pftrace"),
      .description = "Perfetto's protobuf trace",
      .file_format = LOUPE_FILE_PERFETTO_PROTO,
      .run_dir_bit = LOUPE_FORMAT_PERFETTO_PROTO,
      .suffix = ".pftrace",
      .host_prefixed = 1,
      .suffixes = LIST(".pftrace", ".perfetto-trace", ".perfetto", ".pb"),
      .gzip = 0,
      .mime_type = "application/octet-stream",
      .can_write = 1,
      .can_read = 1},
     loupe__write_perfetto_proto},
    {{.name = "perfetto-json",
      .aliases = NONE,
      .description = "Chrome JSON for ui.perfetto.dev (no top-level \"metadata\")",
      .file_format = LOUPE_FILE_PERFETTO_JSON,
      .run_dir_bit = LOUPE_FORMAT_PERFETTO_JSON,
      .suffix = "perfetto_trace.json.gz",
      .host_prefixed = 0,
      .suffixes = NONE,
      .gzip = 1,
      .mime_type = NULL, /* not served: format=json is the same trace */
      .can_write = 1,
      .can_read = 1},
     perfetto_json},
    {{.name = "folded",
      .aliases = LIST("collapsed"),
      .description = "collapsed stacks \"a;b;c <self ns>\" for flame graphs",
      .file_format = LOUPE_FILE_FOLDED,
      .run_dir_bit = 0,
      .suffix = ".folded",
      .host_prefixed = 0,
      .suffixes = LIST(".folded", ".collapsed", ".txt"),
      .gzip = 0,
      .mime_type = NULL,
      .can_write = 1,
      .can_read = 0},
     loupe__write_folded},
    {{.name = "svg",
      .aliases = LIST("flamegraph"),
      .description = "an SVG flame graph (width: total time, one root per thread)",
      .file_format = LOUPE_FILE_SVG,
      .run_dir_bit = 0,
      .suffix = ".svg",
      .host_prefixed = 0,
      .suffixes = LIST(".svg"),
      .gzip = 0,
      .mime_type = NULL,
      .can_write = 1,
      .can_read = 0},
     loupe__write_svg},
    {{.name = "pprof",
      .aliases = NONE,
      .description = "pprof's profile.proto of the CPU samples (go tool pprof, Pyroscope)",
      .file_format = LOUPE_FILE_PPROF,
      .run_dir_bit = 0,
      .suffix = ".pb.gz",
      .host_prefixed = 0,
      .suffixes = LIST(".pb.gz", ".pprof", ".pprof.gz"),
      .gzip = 1,
      .mime_type = NULL,
      .can_write = 1,
      .can_read = 0},
     loupe__write_pprof},
    {{.name = "llvm-prof",
      .aliases = LIST("afdo"),
      .description = "LLVM's sample profile of the program, for clang -fprofile-sample-use",
      .file_format = LOUPE_FILE_LLVM_PROF,
      .run_dir_bit = 0,
      .suffix = ".afdo",
      .host_prefixed = 0,
      .suffixes = LIST(".afdo", ".prof"),
      .gzip = 0,
      .mime_type = NULL,
      .can_write = 1,
      .can_read = 0},
     loupe__write_llvm_prof},
};

#define NROWS (sizeof rows / sizeof rows[0])

size_t loupe_format_count(void) {
    return NROWS;
}

const loupe_format_desc *loupe_format_info(size_t i) {
    return i < NROWS ? &rows[i].d : NULL;
}

const loupe_format_desc *loupe_format_by_name(const char *name) {
    if (name == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < NROWS; i++) {
        if (strcmp(name, rows[i].d.name) == 0) {
            return &rows[i].d;
        }
        for (const char *const *a = rows[i].d.aliases; *a != NULL; a++) {
            if (strcmp(name, *a) == 0) {
                return &rows[i].d;
            }
        }
    }
    return NULL;
}

const loupe_format_desc *loupe_format_by_path(const char *path) {
    if (path == NULL) {
        return NULL;
    }
    size_t n = strlen(path), best_len = 0;
    const loupe_format_desc *best = NULL;
    for (size_t i = 0; i < NROWS; i++) {
        for (const char *const *s = rows[i].d.suffixes; *s != NULL; s++) {
            size_t k = strlen(*s);
            if (k > best_len && n >= k && strcmp(path + n - k, *s) == 0) {
                best = &rows[i].d;
                best_len = k;
            }
        }
    }
    return best;
}

const loupe_format_desc *loupe_format_by_file_format(loupe_file_format f) {
    const loupe__format *r = loupe__format_by_file(f);
    return r != NULL ? &r->d : NULL;
}

const loupe_format_desc *loupe_format_by_bit(unsigned bit) {
    for (size_t i = 0; bit != 0 && i < NROWS; i++) {
        if (rows[i].d.run_dir_bit == bit) {
            return &rows[i].d;
        }
    }
    return NULL;
}

const loupe__format *loupe__format_by_file(loupe_file_format f) {
    for (size_t i = 0; i < NROWS; i++) {
        if (rows[i].d.file_format == f) {
            return &rows[i];
        }
    }
    return NULL;
}

/* The names of the run-directory formats, "json, xplane, perfetto and perfetto-json", for
 * error details. */
static void run_dir_names(char *buf, size_t size) {
    size_t n = 0, count = 0, total = 0;
    for (size_t i = 0; i < NROWS; i++) {
        total += rows[i].d.run_dir_bit != 0;
    }
    buf[0] = 0;
    for (size_t i = 0; i < NROWS && n < size; i++) {
        if (rows[i].d.run_dir_bit == 0) {
            continue;
        }
        const char *sep = count == 0 ? "" : count + 1 == total ? " and " : ", ";
        int w = snprintf(buf + n, size - n, "%s%s", sep, rows[i].d.name);
        n += w > 0 ? (size_t)w : 0;
        count++;
    }
}

int loupe_format_parse_list(const char *list, unsigned *bits) {
    if (bits != NULL) {
        *bits = 0;
    }
    if (list == NULL || bits == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_format_parse_list: %s is NULL",
                          list == NULL ? "list" : "bits");
    }
    char known[256];
    run_dir_names(known, sizeof known);
    unsigned out = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        char name[64];
        if (len == 0) {
            return loupe__err(LOUPE_EINVALID, "'%s': an empty entry in the format list (known: %s)",
                              list, known);
        }
        if (len >= sizeof name) {
            return loupe__err(LOUPE_EINVALID, "'%.*s...': not a format name (known: %s)", 32, p,
                              known);
        }
        memcpy(name, p, len);
        name[len] = 0;
        const loupe_format_desc *d = loupe_format_by_name(name);
        if (d == NULL) {
            return loupe__err(LOUPE_EINVALID, "'%s': unknown format (known: %s)", name, known);
        }
        if (d->run_dir_bit == 0) {
            return loupe__err(LOUPE_EINVALID,
                              "'%s': a run directory never gets this format (known: %s)", name,
                              known);
        }
        out |= d->run_dir_bit;
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
    }
    *bits = out;
    return 0;
}
