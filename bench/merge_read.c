/* merge_read.c: loupe_bench_merge RUN_DIR [REPS]: the time to read a multi-process run
 * directory as one model (src/import/run.c reads each process's file, src/model/merge.c merges
 * them) against the time to read the same files one by one, best of REPS (default 3) each, in
 * CPU seconds.
 * bench/mpi_scale.sh runs it on a 4-rank run; the bound is merged <= 2 x separate.
 * Prints one line: files, slices, flows, both times and their ratio. Public API only. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_PROCESS_CPUTIME_ID */
#include <loupe/loupe.h>
#include <loupe/reader.h>
#include <loupe/writer.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of this process (single-threaded reads): a shared, loaded machine changes the wall
 * time of a run far more than its CPU time. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t slices_of(const loupe_model *m) {
    size_t n = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    return n;
}

/* Reads path; exits on error. */
static loupe_model *read_or_die(const char *path) {
    loupe_model *m = NULL;
    int rc = loupe_trace_read(path, &m);
    if (rc != 0) {
        fprintf(stderr, "loupe_bench_merge: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        exit(1);
    }
    return m;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: loupe_bench_merge RUN_DIR [REPS]\n");
        return 2;
    }
    const char *dir = argv[1];
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    /* the files run.c reads: per rank the .xplane.pb (its first choice) */
    const char *suffix = loupe_format_by_file_format(LOUPE_FILE_XPLANE)->suffix;
    char *files[4096];
    size_t nf = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        perror(dir);
        return 1;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL && nf < 4096;) {
        size_t n = strlen(e->d_name), k = strlen(suffix);
        if (n > k && strcmp(e->d_name + n - k, suffix) == 0) {
            size_t len = strlen(dir) + n + 2;
            files[nf] = malloc(len);
            snprintf(files[nf++], len, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    double sep = 1e30, merged = 1e30;
    size_t slices = 0, mslices = 0, flows = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        slices = 0;
        for (size_t i = 0; i < nf; i++) {
            loupe_model *m = read_or_die(files[i]);
            slices += slices_of(m);
            loupe_model_free(m);
        }
        double t1 = now_s();
        loupe_model *m = read_or_die(dir);
        double t2 = now_s();
        mslices = slices_of(m);
        flows = m->flow_count;
        loupe_model_free(m);
        sep = t1 - t0 < sep ? t1 - t0 : sep;
        merged = t2 - t1 < merged ? t2 - t1 : merged;
    }
    printf("merge: %zu files, %zu slices (merged: %zu, %zu flows): separately %.3f s, merged "
           "%.3f s (CPU), ratio %.2f\n",
           nf, slices, mslices, flows, sep, merged, merged / sep);
    for (size_t i = 0; i < nf; i++) {
        free(files[i]);
    }
    return mslices == slices ? 0 : 1;
}
