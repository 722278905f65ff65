/* folded.c: collapsed stacks ("folded", Brendan Gregg's format; formats.md §5) for flame graphs:
 *     root;child;leaf <self ns>
 * one line per distinct stack of zone names, weighted by self time in ns (a slice's duration
 * minus its direct children's), summed over every thread, in order of first appearance. Stacks
 * whose self time is 0 are left out. Frames are separated by ';', so a ';' in a name becomes ':',
 * and a newline or carriage return becomes a space (speedscope reads `^(.*) (\d+)$` per line).
 * Memory: the distinct stacks and one entry per depth, not per slice.
 */
#include "export/writers.h"

#include <stdlib.h>
#include <string.h>

typedef struct fstack {
    char **keys; /* open addressing */
    uint64_t *vals;
    size_t *order; /* slot of each stack, in first-appearance order */
    size_t cap, count;
} fstack;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    }
    return h;
}

static int add(fstack *f, const char *s, size_t n, uint64_t v) {
    if ((f->count + 1) * 2 > f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 1024;
        char **nk = calloc(nc, sizeof(*nk));
        uint64_t *nv = calloc(nc, sizeof(*nv));
        size_t *no = calloc(nc, sizeof(*no));
        if (nk == NULL || nv == NULL || no == NULL) {
            free(nk);
            free(nv);
            free(no);
            return -1;
        }
        for (size_t i = 0; i < f->count; i++) {
            size_t o = f->order[i];
            size_t j = (size_t)fnv(f->keys[o], strlen(f->keys[o])) & (nc - 1);
            while (nk[j] != NULL) {
                j = (j + 1) & (nc - 1);
            }
            nk[j] = f->keys[o];
            nv[j] = f->vals[o];
            no[i] = j;
        }
        free(f->keys);
        free(f->vals);
        free(f->order);
        f->keys = nk;
        f->vals = nv;
        f->order = no;
        f->cap = nc;
    }
    size_t j = (size_t)fnv(s, n) & (f->cap - 1);
    while (f->keys[j] != NULL) {
        if (strncmp(f->keys[j], s, n) == 0 && f->keys[j][n] == 0) {
            f->vals[j] += v;
            return 0;
        }
        j = (j + 1) & (f->cap - 1);
    }
    char *k = malloc(n + 1);
    if (k == NULL) {
        return -1;
    }
    memcpy(k, s, n);
    k[n] = 0;
    f->keys[j] = k;
    f->vals[j] = v;
    f->order[f->count++] = j;
    return 0;
}

typedef struct frame {
    size_t path_len; /* the path up to and including this frame */
    uint64_t dur, child;
} frame;

int loupe__write_folded(const loupe_model *m, loupe__sink *s) {
    fstack f;
    memset(&f, 0, sizeof f);
    char *path = NULL;
    size_t path_cap = 0;
    frame *st = NULL;
    size_t st_cap = 0;
    int rc = 0;
    for (size_t t = 0; t < m->thread_count && rc == 0; t++) {
        const loupe_model_thread *th = &m->threads[t];
        size_t top = 0;
        for (size_t i = 0; i <= th->slice_count && rc == 0; i++) {
            size_t d = i < th->slice_count ? th->slices[i].depth : 0;
            if (d > top) {
                d = top;
            }
            /* close the frames at depth >= d: their children are all seen */
            while (top > d) {
                frame *fr = &st[--top];
                uint64_t self = fr->dur > fr->child ? fr->dur - fr->child : 0;
                if (top > 0) {
                    st[top - 1].child += fr->dur;
                }
                if (self > 0 && add(&f, path, fr->path_len, self) != 0) {
                    rc = loupe__err(LOUPE_ENOMEM, "folded writer: out of memory");
                }
            }
            if (i == th->slice_count) {
                break;
            }
            const loupe_slice *sl = &th->slices[i];
            size_t base = top > 0 ? st[top - 1].path_len : 0;
            size_t nl = strlen(sl->name);
            if (base + nl + 2 > path_cap || top + 1 > st_cap) {
                size_t pc = (base + nl + 2) * 2;
                size_t sc = (top + 1) * 2;
                char *np = path_cap < pc ? realloc(path, pc) : path;
                frame *ns = st_cap < sc ? realloc(st, sc * sizeof(*st)) : st;
                if (np == NULL || ns == NULL) {
                    if (np != NULL) {
                        path = np;
                    }
                    if (ns != NULL) {
                        st = ns;
                    }
                    rc = loupe__err(LOUPE_ENOMEM, "folded writer: out of memory");
                    break;
                }
                path = np;
                st = ns;
                path_cap = path_cap < pc ? pc : path_cap;
                st_cap = st_cap < sc ? sc : st_cap;
            }
            size_t o = base;
            if (top > 0) {
                path[o++] = ';';
            }
            for (size_t k = 0; k < nl; k++) {
                char c = sl->name[k];
                path[o++] = c == ';' ? ':' : (c == '\n' || c == '\r') ? ' ' : c;
            }
            st[top++] = (frame){o, sl->dur_ns, 0};
        }
    }
    for (size_t i = 0; i < f.count && rc == 0; i++) {
        size_t j = f.order[i];
        loupe__puts(s, f.keys[j]);
        loupe__put(s, " ", 1);
        loupe__put_u64(s, f.vals[j]);
        loupe__put(s, "\n", 1);
    }
    for (size_t i = 0; i < f.count; i++) {
        free(f.keys[f.order[i]]);
    }
    free(f.keys);
    free(f.vals);
    free(f.order);
    free(path);
    free(st);
    return rc;
}
