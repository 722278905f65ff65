/* progress.c: the readers' progress reports (progress.h). */
#include "base/progress.h"

#include <stddef.h>

static loupe__progress_fn s_fn; /* atomic */

void loupe__progress_set(loupe__progress_fn fn) {
    __atomic_store_n(&s_fn, fn, __ATOMIC_RELEASE);
}

void loupe__progress(const char *stage, const char *name, uint64_t done, uint64_t total) {
    loupe__progress_fn fn = __atomic_load_n(&s_fn, __ATOMIC_ACQUIRE);
    if (fn != NULL) {
        fn(stage, name, done, total);
    }
}
