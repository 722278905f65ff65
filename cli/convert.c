/* convert.c: `loupe convert IN -o OUT [--to FORMAT]`: reads any trace loupe reads (the format
 * is found from the bytes: loupe/reader.h) and writes it in another (loupe/writer.h), the output
 * format named by --to or guessed from OUT's extension. Uses only the public API. */
#include "cli.h"

#include <loupe/loupe.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe convert IN -o OUT [--to json|xplane|perfetto|folded]\n"
            "\n"
            "Converts a trace between formats. IN is any trace loupe reads: Chrome JSON\n"
            "(gzipped or not), XPlane (*.xplane.pb), Perfetto protobuf (*.pftrace), or a run\n"
            "directory / log_dir holding one (as for loupe summary). The input format is found\n"
            "from the file's bytes.\n"
            "\n"
            "options:\n"
            "  -o, --output OUT  the file to write (replaced only once complete)\n"
            "  --to FORMAT       the output format; without it, from OUT's extension:\n"
            "                      json      Chrome Trace Event JSON (*.json; *.json.gz gzipped)\n"
            "                      xplane    XSpace for XProf / TensorBoard (*.xplane.pb)\n"
            "                      perfetto  Perfetto's protobuf trace (*.pftrace)\n"
            "                      folded    collapsed stacks \"a;b;c <self ns>\" for flame\n"
            "                                graphs (*.folded, *.collapsed, *.txt)\n"
            "  -h, --help        show this help\n"
            "\n"
            "exit status: 0 success, 1 the trace cannot be read or written, 2 bad usage\n");
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loupe convert: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'loupe convert --help' for usage.\n");
    va_end(ap);
    return 2;
}

static const char *format_name(loupe_file_format f) {
    switch (f) {
    case LOUPE_FILE_CHROME_JSON:
        return "json";
    case LOUPE_FILE_XPLANE:
        return "xplane";
    case LOUPE_FILE_PERFETTO_PROTO:
        return "perfetto";
    case LOUPE_FILE_FOLDED:
        return "folded";
    case LOUPE_FILE_UNKNOWN:
    default:
        return "?";
    }
}

int loupe_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *to = NULL;
    int opts_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts_done || a[0] != '-' || strcmp(a, "-") == 0) {
            if (in != NULL) {
                return bad_usage("one input only, got '%s' as well (the output goes after -o)", a);
            }
            in = a;
        } else if (strcmp(a, "--") == 0) {
            opts_done = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 || strcmp(a, "--to") == 0) {
            if (i + 1 >= argc) {
                return bad_usage("%s needs a value", a);
            }
            if (strcmp(a, "--to") == 0) {
                to = argv[++i];
            } else {
                out = argv[++i];
            }
        } else if (strncmp(a, "--to=", 5) == 0) {
            to = a + 5;
        } else if (strncmp(a, "--output=", 9) == 0) {
            out = a + 9;
        } else {
            return bad_usage("unknown option '%s'", a);
        }
    }
    if (in == NULL) {
        return bad_usage("no input trace given");
    }
    if (out == NULL) {
        return bad_usage("no output given (-o OUT)");
    }
    loupe_file_format f =
        to != NULL ? loupe_file_format_parse(to) : loupe_file_format_from_name(out);
    if (f == LOUPE_FILE_UNKNOWN) {
        if (to != NULL) {
            return bad_usage("unknown format '%s' (json, xplane, perfetto or folded)", to);
        }
        return bad_usage("cannot tell the format from '%s': name it with --to "
                         "(json, xplane, perfetto or folded)",
                         out);
    }
    char file[4096];
    int rc = loupe_trace_find(in, file, sizeof file);
    loupe_model *m = NULL;
    if (rc == 0) {
        rc = loupe_trace_read(file, &m);
    }
    if (rc != 0) {
        fprintf(stderr, "loupe convert: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        return 1;
    }
    rc = loupe_trace_write(m, out, f);
    if (rc != 0) {
        fprintf(stderr, "loupe convert: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        loupe_model_free(m);
        return 1;
    }
    size_t slices = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        slices += m->threads[t].slice_count;
    }
    struct stat st;
    long long size = stat(out, &st) == 0 ? (long long)st.st_size : -1;
    fprintf(stderr, "loupe convert: %s -> %s (%s, %lld bytes, %zu threads, %zu slices)\n", file,
            out, format_name(f), size, m->thread_count, slices);
    loupe_model_free(m);
    return 0;
}
