/* main.c: the loupe command: dispatches to one function per verb (cli.h). */
#include "cli.h"

#include <loupe/loupe.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int loupe_cli_tty(void) {
    return isatty(STDERR_FILENO);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe <command> [options]\n"
            "\n"
            "loupe %s: a tracing profiler for C, C++ and CUDA programs.\n"
            "\n"
            "commands:\n"
            "  record    run a program with loupe preloaded and trace it to a run directory\n"
            "  summary   a table of the zones in a trace: count, total, self, p50, p99, ...\n"
            "\n"
            "Run 'loupe <command> --help' for a command's options.\n",
            LOUPE_VERSION_STRING);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0 || strcmp(verb, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(verb, "--version") == 0) {
        printf("loupe %s\n", LOUPE_VERSION_STRING);
        return 0;
    }
    if (strcmp(verb, "record") == 0) {
        return loupe_cmd_record(argc - 1, argv + 1);
    }
    if (strcmp(verb, "summary") == 0) {
        return loupe_cmd_summary(argc - 1, argv + 1);
    }
    fprintf(stderr, "loupe: unknown command '%s'\n", verb);
    usage(stderr);
    return 2;
}
