// gpu_probe.cu: clock facts for tools/gpu_check.sh, measured on the GPU it runs on:
//   globaltimer_tick_ns   the smallest non-zero step of %globaltimer in a tight loop
//   clock_read_cycles     cycles of one %clock read (back-to-back reads, min over 1000)
//   record_cycles         cycles of one LOUPE_DEV_BEGIN on the leader (64 records, per record)
//   ghz                   %clock cycles per %globaltimer ns over ~1 ms of spinning
//   smid_max / nsmid      the largest %smid seen over 4 x SM-count blocks, and %nsmid
#define LOUPE_GPU_ENABLE
#include <loupe/cuda/loupe_device.cuh>

#include <cuda_runtime.h>
#include <stdio.h>

struct probe_out {
    unsigned long long tick_ns;
    unsigned clock_read, record;
    unsigned long long c0, c1, g0, g1;
    unsigned smid_max, nsmid;
};

__global__ void probe(probe_out *o, uint32_t *buf, uint32_t entries) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long best = ~0ull, prev = loupe_dev_globaltimer();
        for (int i = 0; i < 200000; i++) {
            unsigned long long t = loupe_dev_globaltimer();
            if (t != prev && t - prev < best) {
                best = t - prev;
            }
            prev = t;
        }
        o->tick_ns = best;
        unsigned cr = ~0u;
        for (int i = 0; i < 1000; i++) {
            uint32_t a = loupe_dev_clock();
            uint32_t b = loupe_dev_clock();
            cr = min(cr, b - a);
        }
        o->clock_read = cr;
        long long c0 = clock64();
        unsigned long long g0 = loupe_dev_globaltimer();
        while (loupe_dev_globaltimer() - g0 < 1000000ull) {
        }
        long long c1 = clock64();
        unsigned long long g1 = loupe_dev_globaltimer();
        o->c0 = c0;
        o->c1 = c1;
        o->g0 = g0;
        o->g1 = g1;
    }
    if (blockIdx.x == 1) {
        LOUPE_DEV_INIT(ctx, buf, entries, 128);
        uint32_t a = loupe_dev_clock();
        for (int i = 0; i < 64; i++) {
            LOUPE_DEV_INSTANT(ctx, i);
        }
        uint32_t b = loupe_dev_clock();
        LOUPE_DEV_FINISH(ctx);
        if (threadIdx.x == 0) {
            o->record = (b - a) / 64;
        }
    }
    if (threadIdx.x == 0) {
        unsigned s, n;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        asm volatile("mov.u32 %0, %%nsmid;" : "=r"(n));
        atomicMax(&o->smid_max, s);
        o->nsmid = n;
    }
}

int main(void) {
    int dev = 0, sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    probe_out *o;
    uint32_t *buf;
    const uint32_t entries = 9 + 128;
    if (cudaMallocManaged(&o, sizeof *o) != cudaSuccess ||
        cudaMalloc(&buf, 4 * sms * 4 * entries) != cudaSuccess) {
        fprintf(stderr, "gpu_probe: no GPU\n");
        return 1;
    }
    *o = probe_out{};
    probe<<<4 * sms, 128>>>(o, buf, entries);
    if (cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "gpu_probe: kernel failed\n");
        return 1;
    }
    printf("globaltimer_tick_ns=%llu clock_read_cycles=%u record_cycles=%u ghz=%.4f "
           "smid_max=%u nsmid=%u sm_count=%d\n",
           o->tick_ns, o->clock_read, o->record, (double)(o->c1 - o->c0) / (double)(o->g1 - o->g0),
           o->smid_max, o->nsmid, sms);
    return 0;
}
