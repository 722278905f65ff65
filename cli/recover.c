/* recover.c: `loupe recover DUMP [-o LOG_DIR] [--format LIST]`: writes the run directory of a
 * trace a program left when it died of a fatal signal (<log_dir>/loupe-crash-<pid>.region, see
 * loupe_trace_options.crash_dump), through loupe_recover_trace(). Uses only the public API. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The formats a run directory can hold. */
static int run_dir_format(const loupe_format_desc *d) {
    return d->run_dir_bit != 0;
}

static void help(FILE *f) {
    char names[256];
    loupe_cli_format_names(names, sizeof names, run_dir_format, " and ");
    fprintf(f,
            "usage: loupe recover DUMP [-o LOG_DIR] [--format LIST] [--keep]\n"
            "\n"
            "Writes the run directory of a trace that a traced program left when it died of a\n"
            "fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, or SIGINT/SIGTERM with\n"
            "their default action): DUMP is the <log_dir>/loupe-crash-<pid>.region it wrote.\n"
            "Zones still open at the death end there, marked truncated. Under `loupe record`\n"
            "this happens by itself. Prints the run directory; removes DUMP unless --keep.\n"
            "A DUMP cut short (a copy that stopped early) is recovered as far as it goes: the\n"
            "chunks of events wholly in the file; a warning says how many chunks and events\n"
            "were past the cut (counted as dropped) and DUMP is kept.\n"
            "\n"
            "  -o LOG_DIR      where the run directory goes (default: DUMP's directory)\n"
            "  --format LIST   the files to write, a comma list of: %s\n"
            "  --keep          keep DUMP\n"
            "\n"
            "Exit status: 0 written, 1 the dump could not be read or holds no trace, 2 usage.\n",
            names);
}

/* A dump cut short is recovered as far as it goes (loupe_recover_trace): the trace's
 * loupe_recover_cut metadata says what was lost. Read back only when events were dropped (the
 * lost ones are counted there); says it on stderr and returns 1 when so, and the dump is kept
 * (the whole file may still be found). */
static int cut_note(const loupe_trace_result *r) {
    if (r->file_count == 0) {
        return 0;
    }
    loupe_model *m = NULL;
    if (loupe_trace_read(r->files[0].path, &m) != 0) {
        return 0;
    }
    int cut = 0;
    for (size_t i = 0; i < m->metadata_count && !cut; i++) {
        if (strcmp(m->metadata[i].key, "loupe_recover_cut") == 0) {
            fprintf(stderr, "loupe recover: warning: %s (the dump is kept)\n",
                    m->metadata[i].value);
            cut = 1;
        }
    }
    loupe_model_free(m);
    return cut;
}

int loupe_cmd_recover(int argc, char **argv) {
    const char *dump = NULL, *out = NULL, *formats = NULL;
    int keep = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            formats = argv[++i];
        } else if (strcmp(argv[i], "--keep") == 0) {
            keep = 1;
        } else if (argv[i][0] == '-' || dump != NULL) {
            fprintf(stderr, "loupe recover: unexpected argument '%s'\n", argv[i]);
            help(stderr);
            return 2;
        } else {
            dump = argv[i];
        }
    }
    if (dump == NULL) {
        help(stderr);
        return 2;
    }
    unsigned bits = 0;
    if (formats != NULL && loupe_format_parse_list(formats, &bits) != 0) {
        fprintf(stderr, "loupe recover: --format '%s': %s\n", formats, loupe_last_error());
        return 2;
    }
    char dir[PATH_MAX];
    if (out == NULL) {
        snprintf(dir, sizeof dir, "%s", dump);
        char *slash = strrchr(dir, '/');
        if (slash == NULL) {
            snprintf(dir, sizeof dir, ".");
        } else {
            *slash = 0;
        }
        out = dir;
    }
    int fd = open(dump, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "loupe recover: cannot open %s: %s\n", dump, strerror(errno));
        return 1;
    }
    loupe_recover_options o = {.log_dir = out, .formats = bits, .cause = "died of a fatal signal"};
    loupe_trace_result r = {.size = sizeof r};
    int rc = loupe_recover_trace(fd, &o, &r);
    close(fd);
    if (rc != 0) {
        fprintf(stderr, "loupe recover: %s: %s\n", dump, loupe_last_error());
        return 1;
    }
    char n1[32], n2[32];
    int cut = r.events_dropped > 0 && cut_note(&r);
    fprintf(stderr, "loupe recover: %s events recovered, %s dropped\n",
            loupe_cli_group(r.events_recorded, n1, sizeof n1),
            loupe_cli_group(r.events_dropped, n2, sizeof n2));
    printf("%s\n", r.run_dir);
    loupe_trace_result_free(&r);
    if (!keep && !cut) {
        unlink(dump);
    }
    return 0;
}
