/* sample_hot.c: a CPU-bound program for test_sampling.c, built twice (with and without frame
 * pointers): it samples itself for 300 ms of CPU time in hot() called from main() and prints what
 * the kept model holds: samples, those whose leaf frame is hot, and those whose stack is
 * main > hot (hot's caller is main). argv[1]: the stacks mode ("dwarf" or "fp"). */
#include "session/session.h"

#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile double sink;

void hot(unsigned n);
/* The accumulator lives on the stack: GCC sets up no frame pointer in a leaf function that
 * needs no stack even with -fno-omit-frame-pointer, and the kernel's frame-pointer walk then
 * misses the leaf's caller (perf has the same blind spot). */
__attribute__((noinline, noclone)) void hot(unsigned n) {
    volatile double x[2] = {1.0, 0.0};
    for (unsigned i = 0; i < n; i++) {
        x[0] = x[0] * 1.0000001 + 1e-9;
    }
    sink = x[0];
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID,
                  &t); /* CPU time: a loaded machine gives as many samples */
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *dir = argc > 2 ? argv[2] : "sample_hot.out";
    loupe_trace_options o = {.log_dir = dir, .sampling_hz = 999};
    o.sampling_stacks = argc > 1 && strcmp(argv[1], "fp") == 0 ? LOUPE_SAMPLING_STACKS_FP
                                                               : LOUPE_SAMPLING_STACKS_DWARF;
    if (loupe_start_trace(&o) != 0) {
        fprintf(stderr, "start: %s\n", loupe_last_error());
        return 1;
    }
    double t0 = now_s();
    while (now_s() - t0 < 0.3) {
        hot(200000);
    }
    if (loupe_stop_trace(NULL) != 0) {
        fprintf(stderr, "stop: %s\n", loupe_last_error());
        return 1;
    }
    const loupe_model *m = loupe__kept_model();
    size_t leaf_hot = 0, main_hot = 0;
    for (size_t i = 0; i < m->sample_count; i++) {
        uint32_t s = m->samples[i].stack;
        if (s == UINT32_MAX) {
            continue;
        }
        const loupe_stack_node *n = &m->stack_nodes[s];
        if (strcmp(m->frames[n->frame].function, "hot") != 0) {
            continue;
        }
        leaf_hot++;
        /* the caller: main, or __libc_start_call_main > main when hot's frame was lost */
        if (n->parent != UINT32_MAX &&
            strcmp(m->frames[m->stack_nodes[n->parent].frame].function, "main") == 0) {
            main_hot++;
        }
    }
    if (getenv("SAMPLE_HOT_DUMP")) {
        for (size_t i = 0; i < m->sample_count && i < 5; i++) {
            for (uint32_t s = m->samples[i].stack; s != UINT32_MAX; s = m->stack_nodes[s].parent) {
                const loupe_frame *f = &m->frames[m->stack_nodes[s].frame];
                fprintf(stderr, "  %s %s:%u %s+0x%llx\n", f->function, f->file, f->line, f->module,
                        (unsigned long long)f->module_offset);
            }
            fprintf(stderr, "--\n");
        }
    }
    const char *note = "";
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, "loupe_sampling") == 0) {
            note = m->metadata[i].value;
        }
    }
    printf("samples=%zu hot=%zu main_hot=%zu lost=%llu note=%s\n", m->sample_count, leaf_hot,
           main_hot, (unsigned long long)m->samples_lost, note);
    return 0;
}
