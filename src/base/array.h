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

#endif
