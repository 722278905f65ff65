/* gpu_measure_probe.c: a "CUDA program" for gpu_measure_cli.sh: launches kernels through the
 * fake CUPTI (LOUPE_CUPTI_LIBRARY, tests/probes/fake_cupti.c) that loupe record --gpu loads.
 * usage: gpu_measure_probe STEPS [steps|flat] [drop3]
 *   per step a "gemm" (32,320 ns in step 0, 3,232 ns after) and a "relu" (4,832 ns); "steps"
 *   (the default) marks each with LOUPE_STEP("train", s), its launches 300 µs inside, after an
 *   "init" kernel (320 ns) launched before the steps; "flat" launches no init and marks nothing.
 *   At the end it waits for its kernels (cuCtxSynchronize), as a CUDA program does before
 *   reading its results. drop3: the fake CUPTI reports 3 records dropped. */
#include <loupe/loupe.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint32_t (*launch_fn)(const char *, uint64_t, uint32_t, uint32_t, uint32_t);

int main(int argc, char **argv) {
    const char *lib = getenv("LOUPE_CUPTI_LIBRARY");
    void *h = lib != NULL ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    launch_fn launch = NULL;
    void *sym = h != NULL ? dlsym(h, "loupe_fake_cupti_launch") : NULL;
    memcpy(&launch, &sym, sizeof sym);
    if (argc < 2 || launch == NULL) {
        fprintf(stderr, "usage: LOUPE_CUPTI_LIBRARY=fake gpu_measure_probe STEPS [steps|flat]\n");
        return 2;
    }
    int steps = atoi(argv[1]);
    int marked = argc < 3 || strcmp(argv[2], "flat") != 0;
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
            launch("gemm", s == 0 ? 32320 : 3232, 7, 132, 128);
            launch("relu", 4832, 7, 64, 256);
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
    return 0;
}
