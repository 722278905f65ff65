/* array.h: the growable array (array.c): one grow() for every realloc-doubling array in src/. */
#ifndef LOUPE_BASE_ARRAY_H
#define LOUPE_BASE_ARRAY_H

#include <stddef.h>

/* Grows *ptr, an array of elem-byte items with room for *cap of them, to room for at least need
 * (doubling from 8, so n appends cost O(n)); the new items are zeroed. Returns 0 (also when
 * need <= *cap: nothing is done), or -1 when realloc fails or need * elem would not fit a size_t;
 * then *ptr and *cap are untouched (the old array stays valid and owned by the caller).
 * Thread-safety: one thread at a time per array. */
int loupe__grow(void **ptr, size_t *cap, size_t need, size_t elem);

/* Asks the kernel to back the pages of [p, p + bytes) with transparent huge pages where 2 MiB
 * fit aligned (madvise(MADV_HUGEPAGE); nothing for a block under 4 MiB, or where there is no such
 * call). For the large arrays a reader fills once (a model's slices, a file's bytes): with THP in
 * "madvise" mode (Debian's default) each 4 KiB page of a fresh malloc'd block costs a page fault
 * when first written, about a third of the CPU time of a first read in a fresh process (perf
 * record -e page-faults on loupe_trace_read of an XPlane file). Advice only: it fails silently,
 * and the block stays malloc's to realloc and free (glibc serves it from its own mmap, whose
 * flags follow the mapping through mremap). Thread-safety: any thread. */
void loupe__advise_huge(void *p, size_t bytes);

#endif
