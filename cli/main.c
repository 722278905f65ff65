/* main.c: the loupe command: dispatches to one function per verb (cli.h, one file per verb). */
#include "cli.h"

#include <loupe/loupe.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int loupe_cli_tty(void) {
    return isatty(STDERR_FILENO);
}

typedef struct verb {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} verb;

/* One row per verb; keep the help column under 70 characters. */
static const verb verbs[] = {
    {"record", loupe_cmd_record,
     "run a program with loupe preloaded and trace it to a run directory"},
    {"summary", loupe_cmd_summary,
     "a table of the zones in a trace: count, total, self, p50, p99, ..."},
    {"diff", loupe_cmd_diff, "compare two traces zone by zone; exit 1 on a p50 regression"},
    {"convert", loupe_cmd_convert, NULL}, /* "convert a trace: <the writable formats>" */
    {"gpu-decode", loupe_cmd_gpu_decode,
     "decode an in-kernel GPU timeline buffer (loupe or Mosaic) to JSON"},
    {"gpu-measure", loupe_cmd_gpu_measure,
     "time a program's GPU kernels with CUPTI (Mosaic's measure())"},
    {"capture", loupe_cmd_capture,
     "capture N ms from running profiler servers into a run directory"},
    {"view", loupe_cmd_view, "serve a trace once for ui.perfetto.dev and print the link"},
    {"recover", loupe_cmd_recover, "write the run directory of a trace a crash left behind"},
};

/* The formats loupe convert writes (the registry, loupe/writer.h), for its line. */
static int writable(const loupe_format_desc *d) {
    return d->can_write;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe <command> [options]\n"
            "\n"
            "loupe %s: a tracing profiler for C, C++ and CUDA programs.\n"
            "\n"
            "commands:\n",
            LOUPE_VERSION_STRING);
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        if (verbs[i].help != NULL) {
            fprintf(f, "  %-11s %s\n", verbs[i].name, verbs[i].help);
        } else {
            char names[256];
            loupe_cli_format_names(names, sizeof names, writable, ", ");
            fprintf(f, "  %-11s convert a trace: %s\n", verbs[i].name, names);
        }
    }
    fprintf(f, "\nRun 'loupe <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0) {
        printf("loupe %s\n", LOUPE_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        if (strcmp(name, verbs[i].name) == 0) {
            return verbs[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "loupe: unknown command '%s'\n", name);
    usage(stderr);
    return 2;
}
