/* tids.c: the tid each track is written with (model/tracks.h, loupe__model_written_tids). */
#include "model/tracks.h"

#include <loupe/model.h>

#include <stdlib.h>

typedef struct key {
    size_t process, index;
    uint64_t tid;
} key;

static int by_key(const void *a, const void *b) {
    const key *x = a, *y = b;
    if (x->process != y->process) {
        return x->process < y->process ? -1 : 1;
    }
    if (x->tid != y->tid) {
        return x->tid < y->tid ? -1 : 1;
    }
    return (x->index > y->index) - (x->index < y->index);
}

uint64_t *loupe__model_written_tids(const loupe_model *m, size_t *reused) {
    size_t n = m->thread_count;
    uint64_t *out = malloc((n > 0 ? n : 1) * sizeof *out);
    key *k = malloc((n > 0 ? n : 1) * sizeof *k);
    if (out == NULL || k == NULL) {
        free(out);
        free(k);
        return NULL;
    }
    size_t nk = 0;
    uint64_t top = 0;
    for (size_t i = 0; i < n; i++) {
        const loupe_model_thread *t = &m->threads[i];
        out[i] = t->tid;
        top = t->tid > top && t->tid < LOUPE__GPU_TID(0, 0) ? t->tid : top;
        if (t->kind == LOUPE_TRACK_THREAD) {
            k[nk++] = (key){t->process, i, t->tid};
        }
    }
    if (nk > 1) {
        qsort(k, nk, sizeof *k, by_key);
    }
    size_t dup = 0;
    for (size_t i = 1; i < nk; i++) {
        if (k[i].process == k[i - 1].process && k[i].tid == k[i - 1].tid) {
            out[k[i].index] = ++top; /* above every host tid of the model: no other track's */
            dup++;
        }
    }
    free(k);
    if (reused != NULL) {
        *reused = dup;
    }
    return out;
}
