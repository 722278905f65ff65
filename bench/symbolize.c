/* symbolize.c: loupe_bench_symbolize, the stop's symbolisation of CPU samples, timed.
 *
 * Synthesises N samples (default 1 M) whose stacks are addresses in this program's own code
 * (libloupe linked in statically, with DWARF line and inline info from -g) and in libc's (the
 * Debian package: .dynsym only, no debug info), and times loupe__sample_collect(), the code
 * loupe_stop_trace() runs for the samples a session's sampler drained: libdwfl over the live
 * process's modules, one lookup per distinct address (function, inline frames, file:line),
 * then the model's frames, stack nodes and samples. The addresses are drawn from a pool of
 * distinct ones with a skew (the cube of a uniform draw), so a few are hot, as in a real
 * profile, and most of the pool is still looked up; stacks share their outer frames as a
 * program's calls do (a tree of call paths, below). Figures: docs/performance.md.
 *
 * Usage: loupe_bench_symbolize [samples [distinct_addresses]]
 */
#include "model/builder.h"
#include "record/sample.h"

#include <link.h>
#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct range {
    uint64_t lo, hi;
} range;

static range self_text, libc_text;

static int find_text(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    range *r = NULL;
    if (info->dlpi_name == NULL || info->dlpi_name[0] == 0) {
        r = &self_text;
    } else if (strstr(info->dlpi_name, "/libc.so.6") != NULL) {
        r = &libc_text;
    }
    for (int i = 0; r != NULL && i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && ph->p_memsz > r->hi - r->lo) {
            r->lo = info->dlpi_addr + ph->p_vaddr;
            r->hi = r->lo + ph->p_memsz;
        }
    }
    return 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void) { /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

/* An index below n, small ones more often: the cube of a uniform draw. */
static size_t skewed(size_t n) {
    double u = (double)(next() >> 11) / 9007199254740992.0;
    return (size_t)(u * u * u * (double)n);
}

static double now_s(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    size_t distinct = argc > 2 ? strtoull(argv[2], NULL, 10) : 20000;
    dl_iterate_phdr(find_text, NULL);
    if (self_text.hi == 0 || libc_text.hi == 0 || distinct == 0) {
        fprintf(stderr, "loupe_bench_symbolize: no text segment found for %s\n",
                self_text.hi == 0 ? "this program" : "libc.so.6");
        return 1;
    }
    /* a quarter of the pool in loupe's code (with debug info), the rest in libc */
    uint64_t *pool = malloc(distinct * sizeof *pool);
    if (pool == NULL) {
        return 1;
    }
    for (size_t i = 0; i < distinct; i++) {
        const range *r = i % 4 == 0 ? &self_text : &libc_text;
        pool[i] = r->lo + next() % (r->hi - r->lo);
    }
    /* Call paths as a program has them: a tree, path j extends path j / 3 by 1 to 3 callers'
     * frames (8 levels, 16 frames deep at 5000 paths); a sample is a path (skewed: hot paths)
     * and a leaf address (skewed) below it. */
    enum { PATHS = 5000, PATH_MAX_DEPTH = 40 };
    static uint64_t path[PATHS][PATH_MAX_DEPTH];
    static uint32_t path_n[PATHS];
    for (size_t j = 0; j < PATHS; j++) {
        uint32_t d = 0;
        if (j > 0) {
            d = path_n[j / 3];
            memcpy(path[j], path[j / 3], d * 8);
        }
        for (uint32_t k = 1 + (uint32_t)(next() % 3); k > 0 && d < PATH_MAX_DEPTH; k--) {
            path[j][d++] = pool[skewed(distinct)];
        }
        path_n[j] = d;
    }
    uint64_t origin = 1000000000ull, frames = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t pcs[PATH_MAX_DEPTH + 1];
        size_t j = skewed(PATHS);
        uint32_t depth = 1 + path_n[j];
        pcs[0] = pool[skewed(distinct)];
        for (uint32_t k = 1; k < depth; k++) {
            pcs[k] = path[j][path_n[j] - k]; /* innermost first */
        }
        frames += depth;
        if (loupe__sample_inject(origin, 100 + i % 4, origin + i * 1000, (uint32_t)(i % 2), pcs,
                                 depth) != 0) {
            fprintf(stderr, "loupe_bench_symbolize: out of memory at sample %zu\n", i);
            return 1;
        }
    }
    loupe__mb *mb = loupe__mb_new();
    if (mb == NULL) {
        return 1;
    }
    double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    int rc = loupe__sample_collect(mb, n * 1000 + 1);
    double t1 = now_s(CLOCK_MONOTONIC), c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    loupe_model *m = loupe__mb_finish(mb);
    if (rc != 0 || m == NULL) {
        fprintf(stderr, "loupe_bench_symbolize: the collect failed\n");
        return 1;
    }
    printf("symbolize: %zu samples, %.1f addresses each, %zu distinct addresses (1/4 in "
           "loupe's own code, 3/4 in libc.so.6): %zu frames, %zu stack nodes in the model\n",
           m->sample_count, (double)frames / (double)n, distinct, m->frame_count,
           m->stack_node_count);
    printf("symbolize: %.3f s wall, %.3f s CPU (target <= 2 s for 1 M samples): %.0f ns of CPU "
           "per sample\n",
           t1 - t0, c1 - c0, (c1 - c0) * 1e9 / (double)n);
    loupe_model_free(m);
    free(pool);
    return 0;
}
