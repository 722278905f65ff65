/* read_one.c: loupe_bench_read_one FILE: loupe_trace_read() of one file in a process of its
 * own, then loupe_model_free(); prints the slices read ("slices N") and exits 0, or the error
 * and exits 1. bench/case_read.c runs it once per repetition (fork + exec) and takes its CPU
 * time from wait4()'s rusage: a first read in a fresh process pays what a reader in a
 * long-running one does not (the page faults of the model's arrays, the library's first
 * touches), and `loupe summary FILE` is such a read. Public API only. */
#include <loupe/loupe.h>
#include <loupe/reader.h>

#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: loupe_bench_read_one FILE\n");
        return 2;
    }
    loupe_model *m = NULL;
    int rc = loupe_trace_read(argv[1], &m);
    if (rc != 0) {
        fprintf(stderr, "loupe_bench_read_one: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        return 1;
    }
    size_t slices = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        slices += m->threads[t].slice_count;
    }
    loupe_model_free(m);
    printf("slices %zu\n", slices);
    return 0;
}
