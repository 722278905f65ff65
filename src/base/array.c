/* array.c: the growable array (array.h). */
#include "base/array.h"

#include <stdint.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

int loupe__grow(void **ptr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return 0;
    }
    size_t max = elem ? SIZE_MAX / elem : SIZE_MAX; /* the most items a size_t can measure */
    if (need > max) {
        return -1;
    }
    size_t nc = *cap ? *cap : 8;
    while (nc < need) {
        nc = nc > max / 2 ? max : nc * 2; /* never wraps: clamped to max, which is >= need */
    }
    void *n = realloc(*ptr, nc * elem);
    if (n == NULL) {
        return -1;
    }
    memset((char *)n + *cap * elem, 0, (nc - *cap) * elem);
    *ptr = n;
    *cap = nc;
    return 0;
}

void loupe__advise_huge(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t page = 4096, huge = (uintptr_t)2 << 20;
    if (p == NULL || bytes < 2 * huge) {
        return;
    }
    /* The whole pages around the block, not only its 2 MiB-aligned inside: a large block is
     * glibc's own mapping, and advice on part of it would split it in two, which mremap cannot
     * grow (realloc would then copy). The kernel uses huge pages where 2 MiB fit aligned. */
    uintptr_t lo = (uintptr_t)p & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    (void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}
