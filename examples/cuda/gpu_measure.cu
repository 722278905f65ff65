// gpu_measure.cu: loupe_gpu_measure() (loupe/gpu.h, the Mosaic GPU profiler's measure()) on a
// real kernel, against CUDA events around the same launches (tools/gpu_check.sh):
//   measure_us   the median of loupe_gpu_measure's per-iteration totals (20 iterations of one
//                launch of `spin`, ~1 ms each)
//   events_us    the median of cudaEventElapsedTime around each of 20 launches
//   diff_us, diff_pct, kernels, resolution_ns, warnings
// Prints one line of key=value; exit status 1 when loupe_gpu_measure failed.
#include <loupe/loupe.h>

#include <algorithm>
#include <cuda_runtime.h>
#include <stdio.h>
#include <vector>

__global__ void spin(unsigned long long cycles, unsigned *sink) {
    long long t0 = clock64();
    unsigned x = threadIdx.x;
    while (clock64() - t0 < (long long)cycles) {
        x = x * 1664525u + 1013904223u;
    }
    if (x == 0x12345678u) {
        *sink = x;
    }
}

static unsigned *sink;
static unsigned long long cycles;

static void launch(void *arg) {
    (void)arg;
    spin<<<132, 128>>>(cycles, sink);
    cudaDeviceSynchronize();
}

int main() {
    cudaMalloc(&sink, sizeof *sink);
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    cycles = (unsigned long long)khz * 1000ull / 1000ull; // ~1 ms at the base clock
    spin<<<132, 128>>>(cycles, sink);
    cudaDeviceSynchronize();

    const int n = 20;
    loupe_gpu_measure_options o = {};
    o.iterations = n;
    loupe_gpu_measure_result *r = NULL;
    int rc = loupe_gpu_measure(launch, NULL, &o, &r);
    if (rc != 0 || r == NULL) {
        printf("measure_error=\"%s\"\n", rc != 0 ? loupe_last_error() : "no kernel");
        return 1;
    }

    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ev;
    for (int i = 0; i < n; i++) {
        cudaEventRecord(a);
        spin<<<132, 128>>>(cycles, sink);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        ev.push_back(ms);
    }
    std::sort(ev.begin(), ev.end());
    double events_us = ev[(n - 1) / 2] * 1000.0;
    double measure_us = (double)r->median_ns / 1000.0;
    double diff = measure_us > events_us ? measure_us - events_us : events_us - measure_us;
    int warned = r->warnings[0] != 0;
    printf("measure_us=%.3f events_us=%.3f diff_us=%.3f diff_pct=%.3f kernels=%zu "
           "resolution_ns=%llu spread_pct=%.2f warnings=%d\n",
           measure_us, events_us, diff, 100.0 * diff / events_us, r->kernel_count,
           (unsigned long long)r->resolution_ns, 100.0 * r->spread, warned);
    loupe_gpu_measure_result_free(r);
    return 0;
}
