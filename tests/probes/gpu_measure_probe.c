/* gpu_measure_probe.c: a "CUDA program" for gpu_measure_cli.sh: launches kernels through the
 * fake CUPTI (LOUPE_CUPTI_LIBRARY, tests/probes/fake_cupti.c) that loupe record --gpu loads.
 * usage: gpu_measure_probe STEPS [steps|flat|threads|odd|abort|exit121] [drop3]
 *   per step a "gemm" (32,320 ns in step 0, 3,232 ns after) and a "relu" (4,832 ns); "steps"
 *   (the default) marks each with LOUPE_STEP("train", s), its launches 300 µs inside, after an
 *   "init" kernel (320 ns) launched before the steps; "flat" launches no init and marks nothing.
 *   "threads": STEPS threads, each marking its own step s at once (the steps overlap) and
 *   launching one "thr" of 1,000 + 32 s ns inside it. "odd": steps whose even ones launch
 *   nothing. "abort" and "exit121": the steps, then abort() or exit(121).
 *   At the end it waits for its kernels (cuCtxSynchronize), as a CUDA program does before
 *   reading its results. drop3: the fake CUPTI reports 3 records dropped. */
#include <loupe/loupe.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint32_t (*launch_fn)(const char *, uint64_t, uint32_t, uint32_t, uint32_t);

static launch_fn launch;
static pthread_barrier_t all_in;

static void *one_step(void *arg) {
    int s = (int)(intptr_t)arg;
    pthread_barrier_wait(&all_in); /* every thread's step under way at once */
    LOUPE_STEP("train", s);
    usleep(300);
    launch("thr", 1000 + 32 * (uint64_t)s, 3, 1, 32);
    pthread_barrier_wait(&all_in); /* and none ends before every launch */
    usleep(300);
    return NULL;
}

int main(int argc, char **argv) {
    const char *lib = getenv("LOUPE_CUPTI_LIBRARY");
    void *h = lib != NULL ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *sym = h != NULL ? dlsym(h, "loupe_fake_cupti_launch") : NULL;
    memcpy(&launch, &sym, sizeof sym);
    if (argc < 2 || launch == NULL) {
        fprintf(stderr, "usage: LOUPE_CUPTI_LIBRARY=fake gpu_measure_probe STEPS [steps|flat]\n");
        return 2;
    }
    int steps = atoi(argv[1]);
    const char *mode = argc < 3 ? "steps" : argv[2];
    int marked = strcmp(mode, "flat") != 0;
    if (strcmp(mode, "threads") == 0) {
        pthread_t t[64];
        int n = steps < 64 ? steps : 64;
        pthread_barrier_init(&all_in, NULL, (unsigned)n);
        for (int i = 0; i < n; i++) {
            pthread_create(&t[i], NULL, one_step, (void *)(intptr_t)i);
        }
        for (int i = 0; i < n; i++) {
            pthread_join(t[i], NULL);
        }
        marked = 0;
        steps = 0;
    }
    if (argc > 3 && strcmp(argv[3], "drop3") == 0) { /* CUPTI will report 3 records dropped */
        void (*set)(int, size_t) = NULL;
        void *fs = dlsym(h, "loupe_fake_cupti_set");
        memcpy(&set, &fs, sizeof fs);
        set(0, 3);
    }
    if (marked) {
        launch("init", 320, 1, 1, 32);
    }
    for (int s = 0; s < steps; s++) {
        if (marked) {
            LOUPE_STEP("train", s);
            usleep(300); /* launches well inside the step, whatever the clocks' offset */
            if (strcmp(mode, "odd") != 0 || s % 2 == 1) {
                launch("gemm", s == 0 ? 32320 : 3232, 7, 132, 128);
                launch("relu", 4832, 7, 64, 256);
            }
            usleep(300);
        } else {
            launch("gemm", s == 0 ? 32320 : 3232, 7, 132, 128);
            launch("relu", 4832, 7, 64, 256);
        }
    }
    int (*sync)(void) = NULL;
    void *ss = dlsym(h, "cuCtxSynchronize");
    memcpy(&sync, &ss, sizeof ss);
    if (sync != NULL) {
        (void)sync();
    }
    printf("launched %d steps\n", steps);
    fflush(stdout);
    if (strcmp(mode, "abort") == 0) {
        abort();
    }
    return strcmp(mode, "exit121") == 0 ? 121 : 0;
}
