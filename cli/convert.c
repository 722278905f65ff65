/* convert.c: `loupe convert IN -o OUT [--to FORMAT] [--merge-threads] [--weight W]`: reads any
 * trace loupe reads (the format is found from the bytes: loupe/reader.h) and writes it in another
 * (loupe/writer.h), the output format named by --to or guessed from OUT's extension. Uses only the
 * public API: --merge-threads hands the flame-graph writers a view of the model with one track
 * holding every track's slices one after another (each track's order and depths kept, so the
 * stacks stay those of their own track) and every CPU sample on it, which they draw as the one
 * root. --weight picks the flame graph's weight (loupe_write_options.flame_weight). --no-compress
 * writes a .pftrace's packets plain (LOUPE_PERFETTO_COMPRESS=0, the writer's switch). */
#include "cli.h"

#include <loupe/loupe.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MERGED_NAME "all threads"

static int writable(const loupe_format_desc *d) {
    return d->can_write;
}

static void usage(FILE *f) {
    char names[256];
    loupe_cli_format_names(names, sizeof names, writable, " or ");
    fprintf(f, "usage: loupe convert IN -o OUT [--to FORMAT] [--merge-threads] [--weight W]\n"
               "                    [--no-compress] [--module PATH]\n"
               "\n"
               "Converts a trace between formats. IN is any trace loupe reads:\n ");
    /* The readable and writable formats, from the registry (loupe/writer.h). */
    for (size_t i = 0, k = 0; i < loupe_format_count(); i++) {
        const loupe_format_desc *d = loupe_format_info(i);
        if (d->can_read && d->suffixes[0] != NULL) {
            fprintf(f, "%s %s (*%s)", k++ ? "," : "", d->name, d->suffixes[0]);
        }
    }
    fprintf(f,
            ",\n"
            "gzipped or not, or a run directory / log_dir holding one (as for loupe\n"
            "summary). The input format is found from the file's bytes. What the reader\n"
            "dropped or repaired in IN (a cut file, excluded events) is printed as warnings\n"
            "and kept in the output's metadata, \"loupe_reader_warnings\" (one per line), in\n"
            "the formats that carry metadata (json, xplane, perfetto, perfetto-json).\n"
            "\n"
            "options:\n"
            "  -o, --output OUT  the file to write (replaced only once complete); - writes\n"
            "                    to standard output (name the format with --to)\n"
            "  --to FORMAT       the output format: %s;\n"
            "                    without it, from OUT's extension:\n",
            names);
    for (size_t i = 0; i < loupe_format_count(); i++) {
        const loupe_format_desc *d = loupe_format_info(i);
        if (!d->can_write) {
            continue;
        }
        fprintf(f, "                      %-14s %s", d->name, d->description);
        for (size_t k = 0; d->suffixes[k] != NULL; k++) {
            fprintf(f, "%s*%s", k ? ", " : " (", d->suffixes[k]);
        }
        fprintf(f, "%s\n", d->suffixes[0] != NULL ? ")" : " (--to only)");
    }
    fprintf(f,
            "                    JSON and pprof are gzipped when OUT ends in .gz.\n"
            "  --merge-threads   folded stacks and SVG only: one root, \"%s\", for all\n"
            "                    threads (by default each thread is its own root, named by\n"
            "                    the thread's name or \"thread <tid>\", so that two threads'\n"
            "                    stacks never add up into one)\n"
            "  --weight W        folded stacks and SVG only: what a stack is weighted by:\n"
            "                    time (the zones' call tree, ns) or samples (the CPU\n"
            "                    samples' call tree, counts); by default time when the\n"
            "                    trace has zones, samples when it has only samples\n"
            "  --module PATH     llvm-prof only: the module (ELF file, as the trace names it)\n"
            "                    the sample profile covers (default: the program of the\n"
            "                    process with the most samples); one profile per module,\n"
            "                    for clang -fprofile-sample-use when building that module\n"
            "  --no-compress     Perfetto protobuf only: write the packets as they are\n"
            "                    instead of deflated in compressed_packets chunks (the\n"
            "                    default; Perfetto reads both); the same as\n"
            "                    LOUPE_PERFETTO_COMPRESS=0\n"
            "  -h, --help        show this help\n"
            "\n"
            "While it reads, a progress meter is drawn on stderr when stderr is a terminal,\n"
            "once the read has taken LOUPE_PROGRESS_AFTER_MS (default 1000) ms.\n\n"
            "exit status: 0 success, 1 the trace cannot be read or written, 2 bad usage\n",
            MERGED_NAME);
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

/* Writes m with all its tracks as one (see the top of the file). */
/* The key under which a converted file keeps what the reader of its input dropped or repaired
 * (the reader's warnings, one per line), in the formats that carry metadata (Chrome JSON's
 * "metadata", XPlane's and Perfetto's trace stats): a converted file says what it lost. */
#define READER_WARNINGS_KEY "loupe_reader_warnings"

/* m with its reader's warnings added to its metadata (joined to any the input already carried
 * under the key) in *out, whose metadata array and text are allocated in *owned_kv and
 * *owned_text (the caller frees both); *out = *m when there are none. -1 on out-of-memory. */
static int with_warnings(const loupe_model *m, loupe_model *out, loupe_kv **owned_kv,
                         char **owned_text) {
    *out = *m;
    *owned_kv = NULL;
    *owned_text = NULL;
    if (m->warning_count == 0) {
        return 0;
    }
    const char *prior = NULL;
    size_t len = 1;
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, READER_WARNINGS_KEY) == 0) {
            prior = m->metadata[i].value;
            len += strlen(prior) + 1;
        }
    }
    for (size_t i = 0; i < m->warning_count; i++) {
        len += strlen(m->warnings[i]) + 1;
    }
    char *text = malloc(len);
    loupe_kv *kv = malloc((m->metadata_count + 1) * sizeof(*kv));
    if (text == NULL || kv == NULL) {
        free(text);
        free(kv);
        return -1;
    }
    size_t n = 0;
    if (prior != NULL && prior[0] != 0) {
        n += (size_t)sprintf(text + n, "%s\n", prior);
    }
    for (size_t i = 0; i < m->warning_count; i++) {
        n +=
            (size_t)sprintf(text + n, "%s%s", m->warnings[i], i + 1 < m->warning_count ? "\n" : "");
    }
    size_t k = 0;
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, READER_WARNINGS_KEY) != 0) {
            kv[k++] = m->metadata[i];
        }
    }
    kv[k++] = (loupe_kv){READER_WARNINGS_KEY, text};
    out->metadata = kv;
    out->metadata_count = k;
    *owned_kv = kv;
    *owned_text = text;
    return 0;
}

static int write_merged(const loupe_model *m, const char *out, loupe_file_format f,
                        const loupe_write_options *o) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    loupe_slice *all = malloc((n ? n : 1) * sizeof(*all));
    if (all == NULL) {
        fprintf(stderr, "loupe convert: out of memory merging %zu slices\n", n);
        return -1;
    }
    for (size_t t = 0, k = 0; t < m->thread_count; t++) {
        memcpy(all + k, m->threads[t].slices, m->threads[t].slice_count * sizeof(*all));
        k += m->threads[t].slice_count;
    }
    loupe_model_thread one;
    memset(&one, 0, sizeof one);
    one.kind = LOUPE_TRACK_THREAD;
    one.name = MERGED_NAME;
    one.slice_count = n;
    one.slices = all;
    loupe_sample *samples = malloc((m->sample_count ? m->sample_count : 1) * sizeof(*samples));
    if (samples == NULL) {
        free(all);
        fprintf(stderr, "loupe convert: out of memory merging %zu samples\n", m->sample_count);
        return -1;
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        samples[i] = m->samples[i];
        samples[i].thread = 0;
    }
    loupe_model view = *m;
    view.thread_count = 1;
    view.threads = &one;
    view.samples = samples;
    int rc = loupe_trace_write_opts(&view, out, f, o);
    free(samples);
    free(all);
    return rc;
}

static int copy_to_stdout(const char *path);
static int convert_to(const char *in, const char *out, loupe_file_format f,
                      const loupe_format_desc *fd, int merge, const char *fdo_module,
                      const loupe_write_options *wo_in, int to_stdout);

int loupe_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *to = NULL;
    int opts_done = 0, merge = 0, no_compress = 0;
    const char *weight = NULL, *fdo_module = NULL;
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
        } else if (strcmp(a, "--module") == 0) {
            if (i + 1 >= argc) {
                return bad_usage("%s needs a value", a);
            }
            fdo_module = argv[++i];
        } else if (strcmp(a, "--no-compress") == 0) {
            no_compress = 1;
        } else if (strcmp(a, "--merge-threads") == 0) {
            merge = 1;
        } else if (strcmp(a, "--weight") == 0) {
            if (i + 1 >= argc) {
                return bad_usage("%s needs a value", a);
            }
            weight = argv[++i];
        } else if (strncmp(a, "--weight=", 9) == 0) {
            weight = a + 9;
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
    int to_stdout = strcmp(out, "-") == 0;
    if (to_stdout && to == NULL) {
        return bad_usage("-o - writes to standard output: name the format with --to");
    }
    loupe_file_format f =
        to != NULL ? loupe_file_format_parse(to) : loupe_file_format_from_name(out);
    const loupe_format_desc *fd = loupe_format_by_file_format(f);
    if (fd == NULL || !fd->can_write) {
        char names[256];
        loupe_cli_format_names(names, sizeof names, writable, " or ");
        if (to != NULL) {
            return bad_usage("unknown format '%s' (%s)", to, names);
        }
        return bad_usage("cannot tell the format from '%s': name it with --to (%s)", out, names);
    }
    if (merge && f != LOUPE_FILE_FOLDED && f != LOUPE_FILE_SVG) {
        return bad_usage("--merge-threads is for folded stacks and SVG flame graphs, not %s",
                         fd->name);
    }
    if (no_compress && f != LOUPE_FILE_PERFETTO_PROTO) {
        return bad_usage("--no-compress is for the Perfetto protobuf, not %s", fd->name);
    }
    if (no_compress) {
        setenv("LOUPE_PERFETTO_COMPRESS", "0", 1); /* the writer's switch (docs/formats.md) */
    }
    if (fdo_module != NULL && f != LOUPE_FILE_LLVM_PROF) {
        return bad_usage("--module is for llvm-prof sample profiles, not %s", fd->name);
    }
    loupe_write_options wo = {.flame_weight = LOUPE_FLAME_WEIGHT_AUTO};
    if (weight != NULL) {
        if (f != LOUPE_FILE_FOLDED && f != LOUPE_FILE_SVG) {
            return bad_usage("--weight is for folded stacks and SVG flame graphs, not %s",
                             fd->name);
        }
        if (strcmp(weight, "time") == 0) {
            wo.flame_weight = LOUPE_FLAME_WEIGHT_TIME;
        } else if (strcmp(weight, "samples") == 0) {
            wo.flame_weight = LOUPE_FLAME_WEIGHT_SAMPLES;
        } else {
            return bad_usage("unknown weight '%s' (time or samples)", weight);
        }
    }
    /* -o -: the file is written as a temporary one (the writers write files, complete or not
     * at all), then copied to standard output and removed */
    char tmp_out[4200] = "";
    if (to_stdout) {
        const char *td = getenv("TMPDIR");
        snprintf(tmp_out, sizeof tmp_out, "%s/loupe-convert-XXXXXX",
                 td != NULL && td[0] ? td : "/tmp");
        int tfd = mkstemp(tmp_out);
        if (tfd < 0) {
            fprintf(stderr, "loupe convert: -o -: cannot create a temporary file (%s): %s\n",
                    tmp_out, strerror(errno));
            return 1;
        }
        close(tfd);
        out = tmp_out;
    }
    int rc = convert_to(in, out, f, fd, merge, fdo_module, &wo, to_stdout);
    if (to_stdout) {
        if (rc == 0 && copy_to_stdout(tmp_out) != 0) {
            rc = 1;
        }
        unlink(tmp_out);
    }
    return rc;
}

/* Copies the file at path to standard output: 0, or -1 with the error said. */
static int copy_to_stdout(const char *path) {
    FILE *in = fopen(path, "rb");
    if (in == NULL) {
        fprintf(stderr, "loupe convert: -o -: cannot read %s back: %s\n", path, strerror(errno));
        return -1;
    }
    char buf[65536];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(buf, 1, sizeof buf, in)) > 0) {
        bad = fwrite(buf, 1, n, stdout) != n;
    }
    bad |= ferror(in) || fflush(stdout) != 0;
    fclose(in);
    if (bad) {
        fprintf(stderr, "loupe convert: -o -: writing to standard output failed: %s\n",
                strerror(errno));
        return -1;
    }
    return 0;
}

/* The conversion of in into out (format f): 0, or 1 with the error said. The report names
 * the output "-" when it goes to standard output. */
static int convert_to(const char *in, const char *out, loupe_file_format f,
                      const loupe_format_desc *fd, int merge, const char *fdo_module,
                      const loupe_write_options *wo_in, int to_stdout) {
    loupe_write_options wo = *wo_in;
    char file[4096];
    int rc = loupe_trace_find(in, file, sizeof file);
    loupe_model *m = NULL;
    if (rc == 0) {
        loupe_cli_progress_begin("convert");
        rc = loupe_trace_read(file, &m);
        loupe_cli_progress_end();
    }
    if (rc != 0) {
        fprintf(stderr, "loupe convert: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        return 1;
    }
    loupe_cli_reader_warnings("convert", NULL, m);
    loupe_model marked;
    loupe_kv *owned_kv;
    char *owned_text;
    if (with_warnings(m, &marked, &owned_kv, &owned_text) != 0) {
        fprintf(stderr, "loupe convert: out of memory\n");
        loupe_model_free(m);
        return 1;
    }
    loupe_fdo_stats fst;
    int fdo = f == LOUPE_FILE_LLVM_PROF;
    rc = fdo     ? loupe_cli_write_fdo("convert", m, fdo_module, out, &fst)
         : merge ? write_merged(&marked, out, f, &wo)
                 : loupe_trace_write_opts(&marked, out, f, &wo);
    free(owned_kv);
    free(owned_text);
    if (rc != 0) {
        if (!fdo) { /* loupe_cli_write_fdo said why */
            fprintf(stderr, "loupe convert: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        }
        loupe_model_free(m);
        return 1;
    }
    size_t slices = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        slices += m->threads[t].slice_count;
    }
    struct stat st;
    long long size = stat(out, &st) == 0 ? (long long)st.st_size : -1;
    if (to_stdout) {
        out = "-";
    }
    if (fdo) {
        loupe_cli_fdo_report("convert", out, &fst);
    } else if (f == LOUPE_FILE_PPROF) {
        /* a profile of the samples: its count is what says the file holds what it should */
        fprintf(stderr, "loupe convert: %s -> %s (%s, %lld bytes, %zu CPU sample%s, %llu lost)\n",
                file, out, fd->name, size, m->sample_count, m->sample_count == 1 ? "" : "s",
                (unsigned long long)m->samples_lost);
    } else {
        fprintf(stderr, "loupe convert: %s -> %s (%s, %lld bytes, %zu thread%s, %zu slice%s)\n",
                file, out, fd->name, size, m->thread_count, m->thread_count == 1 ? "" : "s", slices,
                slices == 1 ? "" : "s");
    }
    loupe_model_free(m);
    return 0;
}
