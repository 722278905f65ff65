/* fuzz_gpu_decode.c: libFuzzer target for the in-kernel timeline decoder (loupe_gpu_decode) and
 * the decoded result's consumers (the Chrome JSON writer, the session copy). Any buffer and
 * shape must give a result or a LOUPE_E* error: never a crash, a sanitizer report or a leak.
 * Input: 8 shape bytes, then the buffer's words (little-endian; padded with zeros, or cut, to
 * the size the shape needs unless the size-mismatch bit is set):
 *   [0] bit0 Mosaic layout, bit1 warp scope, bit2 strict, bit3 keep the raw size,
 *       bits4-5 overhead mode (estimate, off, fixed = [7])
 *   [1] grid x (1..4)   [2] grid y (1..2)   [3] block x in scopes (1..4)   [4] block y (1..3)
 *   [5] entries beyond the header (0..127)   [6] names in the table (0..7)   [7] fixed overhead
 * Build: cmake -DLOUPE_FUZZ=ON -DCMAKE_C_COMPILER=clang (see fuzz/README.md). CTest replays
 * fuzz/corpus/gpu_decode/ through the same function in every build. */
#include "gpu/gpu_internal.h"

#include <loupe/loupe.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) {
        return 0;
    }
    const uint8_t *h = data;
    loupe_gpu_spec spec = {0};
    spec.layout = (h[0] & 1) ? LOUPE_GPU_LAYOUT_MOSAIC : LOUPE_GPU_LAYOUT_LOUPE;
    spec.scope = (h[0] & 2) ? 32 : 128;
    uint32_t hw = spec.layout == LOUPE_GPU_LAYOUT_MOSAIC ? 3 : 9;
    spec.entries_per_trace = hw + (h[5] & 127u);
    uint32_t grid[3] = {1u + (h[1] & 3u), 1u + (h[2] & 1u), 1};
    /* block x: a multiple of the scope, or (h[3] bit 7) off by 16 to hit the shape error */
    uint32_t block[3] = {(1u + (h[3] & 3u)) * spec.scope + ((h[3] & 0x80u) ? 16u : 0u),
                         1u + (uint32_t)(h[4] % 3u), 1};
    loupe_gpu_decode_options o = {0};
    o.strict = (h[0] & 4) != 0;
    int ovm = (h[0] >> 4) & 3;
    o.overhead_cycles = ovm == 1 ? LOUPE_GPU_OVERHEAD_OFF : ovm == 2 ? (int32_t)h[7] : 0;
    size_t raw_words = (size - 8) / 4;
    size_t need = loupe_gpu_buffer_bytes(&spec, grid, block) / 4;
    size_t n = (h[0] & 8) || need == 0 ? raw_words : need;
    uint32_t *w = calloc(n ? n : 1, 4);
    if (w == NULL) {
        return 0;
    }
    for (size_t i = 0; i < n && i < raw_words; i++) {
        const uint8_t *b = data + 8 + 4 * i;
        w[i] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    }
    loupe_gpu_names *names = loupe_gpu_names_new(8);
    static const char *const nm[] = {"Init", "load", "compute", "store", "a\"b", "\x01", "", "x"};
    if (names != NULL) {
        (void)loupe_gpu_names_add_many(names, nm, h[6] & 7u, NULL);
    }
    loupe_gpu_decoded *d = NULL;
    int rc = loupe_gpu_decode(w, n, &spec, grid, block, names, &o, &d);
    if (rc == 0) {
        /* Every pointer must be valid and every trace properly nested. */
        size_t total = strlen(d->warnings);
        for (size_t t = 0; t < d->trace_count; t++) {
            const loupe_gpu_trace *tr = &d->traces[t];
            int depth = 0;
            uint64_t last = 0;
            for (size_t k = 0; k < tr->event_count; k++) {
                const loupe_gpu_event *e = &tr->events[k];
                total += strlen(e->name);
                if (e->ts_ns < last) {
                    abort(); /* per-trace time never goes backwards */
                }
                last = e->ts_ns;
                depth += e->kind == LOUPE_GPU_BEGIN ? 1 : e->kind == LOUPE_GPU_END ? -1 : 0;
                if (depth < 0) {
                    abort();
                }
            }
            if (depth != 0 || tr->events_recorded + tr->events_dropped != tr->events_attempted) {
                abort();
            }
        }
        (void)total;
        (void)loupe_gpu_write_chrome_json(d, "/dev/null");
        loupe_gpu_decoded *c = loupe__gpu_decoded_clone(d);
        loupe_gpu_decoded_free(c);
        loupe_gpu_decoded_free(d);
    } else if (d != NULL) {
        abort(); /* nothing is allocated on error */
    }
    loupe_gpu_names_free(names);
    free(w);
    return 0;
}
