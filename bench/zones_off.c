/* zones_off.c: the static-zone loop compiled with LOUPE_DISABLE (CMake defines it for this file
 * only): every loupe macro expands to nothing, so this loop must cost what bench_empty_loop costs.
 */
#include "bench.h"

#include <loupe/loupe.h>

#ifndef LOUPE_DISABLE
#error "zones_off.c must be compiled with -DLOUPE_DISABLE"
#endif

__attribute__((noinline)) void bench_zone_static_off(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        LOUPE_ZONE("zone");
        __asm__ volatile("");
    }
}
