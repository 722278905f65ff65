/* array.c: the growable array (array.h). */
#include "base/array.h"

#include <stdint.h>
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
