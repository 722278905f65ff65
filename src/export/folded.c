/* folded.c: collapsed stacks ("folded", Brendan Gregg's format; formats.md §5) for flame graphs:
 *     main;root;child;leaf <self ns>
 * one line per distinct stack of zone names under its track's root frame (the thread's name:
 * one root per thread, so two threads' stacks never sum into one), weighted by self time in ns
 * (a slice's duration minus its direct children's), in order of first appearance. Stacks whose
 * self time is 0 are left out. Frames are separated by ';', so a ';' in a name becomes ':', and a
 * newline or carriage return becomes a space (speedscope reads `^(.*) (\d+)$` per line).
 *
 * Also the call tree both this writer and svg.c walk (flame.h): a node is (parent node, name), so
 * memory is one node per distinct stack and a line is written from the parent links, never kept
 * as a string; stacks are cut at LOUPE__FLAME_MAX_DEPTH zones, which bounds the output at
 * O(slices * LOUPE__FLAME_MAX_DEPTH) bytes however deep the nesting.
 */
#include "export/flame.h"

#include "base/hash.h"
#include "export/writers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t key_hash(size_t parent, const char *name) {
    /* the parent's index mixed in with the FNV prime (a different parent, a different chain) */
    return loupe__hash_str(name) ^
           ((uint64_t)(parent + 1) * LOUPE__FNV_PRIME * 0x9e3779b97f4a7c15ull);
}

static int grow_slots(loupe__flame *f) {
    size_t nc = f->slot_cap ? f->slot_cap * 2 : 1024;
    size_t *ns = calloc(nc, sizeof(*ns));
    if (ns == NULL) {
        return -1;
    }
    for (size_t i = 0; i < f->count; i++) {
        size_t j = (size_t)f->nodes[i].hash & (nc - 1);
        while (ns[j] != 0) {
            j = (j + 1) & (nc - 1);
        }
        ns[j] = i + 1;
    }
    free(f->slots);
    f->slots = ns;
    f->slot_cap = nc;
    return 0;
}

/* The node (parent, name), made when new; LOUPE__FLAME_NONE on out-of-memory. */
static size_t node(loupe__flame *f, size_t parent, const char *name, uint32_t depth) {
    if ((f->count + 1) * 2 > f->slot_cap && grow_slots(f) != 0) {
        return LOUPE__FLAME_NONE;
    }
    uint64_t h = key_hash(parent, name);
    size_t j = (size_t)h & (f->slot_cap - 1);
    for (; f->slots[j] != 0; j = (j + 1) & (f->slot_cap - 1)) {
        const loupe__flame_node *n = &f->nodes[f->slots[j] - 1];
        if (n->hash == h && n->parent == parent && strcmp(n->name, name) == 0) {
            return f->slots[j] - 1;
        }
    }
    if (f->count == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 256;
        loupe__flame_node *nn = realloc(f->nodes, nc * sizeof(*nn));
        if (nn == NULL) {
            return LOUPE__FLAME_NONE;
        }
        f->nodes = nn;
        f->cap = nc;
    }
    f->nodes[f->count] = (loupe__flame_node){name, parent, depth, 0, 0, h};
    f->slots[j] = f->count + 1;
    return f->count++;
}

typedef struct label_ix {
    const char *label;
    size_t thread;
} label_ix;

static int cmp_label(const void *pa, const void *pb) {
    const label_ix *a = pa, *b = pb;
    int c = strcmp(a->label, b->label);
    return c != 0 ? c : (a->thread > b->thread) - (a->thread < b->thread);
}

static char *label_of(const loupe_model_thread *th, int with_tid) {
    char buf[96];
    const char *name = th->name != NULL ? th->name : "";
    if (name[0] == 0) {
        if (th->kind == LOUPE_TRACK_GPU) {
            snprintf(buf, sizeof buf, "GPU %u track %llu", (unsigned)th->device,
                     (unsigned long long)th->tid);
        } else {
            snprintf(buf, sizeof buf, "thread %llu", (unsigned long long)th->tid);
        }
        name = buf;
    }
    size_t n = strlen(name);
    char *out = malloc(n + 48);
    if (out == NULL) {
        return NULL;
    }
    memcpy(out, name, n + 1);
    if (with_tid) {
        if (th->kind == LOUPE_TRACK_GPU) {
            snprintf(out + n, 48, " (GPU %u track %llu)", (unsigned)th->device,
                     (unsigned long long)th->tid);
        } else {
            snprintf(out + n, 48, " (tid %llu)", (unsigned long long)th->tid);
        }
    }
    return out;
}

/* One label per track; two tracks with the same label both get their ids appended. */
static int make_labels(const loupe_model *m, loupe__flame *f) {
    size_t n = m->thread_count;
    f->labels = calloc(n ? n : 1, sizeof(*f->labels));
    label_ix *ix = malloc((n ? n : 1) * sizeof(*ix));
    if (f->labels == NULL || ix == NULL) {
        free(ix);
        return -1;
    }
    f->label_count = n;
    for (size_t t = 0; t < n; t++) {
        f->labels[t] = label_of(&m->threads[t], 0);
        if (f->labels[t] == NULL) {
            free(ix);
            return -1;
        }
        ix[t] = (label_ix){f->labels[t], t};
    }
    /* sorted, equal labels are neighbours: O(n log n) for the 1e5-thread traces readers take */
    qsort(ix, n, sizeof(*ix), cmp_label);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && strcmp(ix[j].label, ix[i].label) == 0) {
            j++;
        }
        for (size_t k = i; j - i > 1 && k < j; k++) {
            size_t t = ix[k].thread;
            char *l = label_of(&m->threads[t], 1);
            if (l == NULL) {
                free(ix);
                return -1;
            }
            free(f->labels[t]);
            f->labels[t] = l;
        }
        i = j;
    }
    free(ix);
    return 0;
}

typedef struct open_frame {
    size_t node;
    uint64_t dur, child;
    int deeper; /* the LOUPE__FLAME_DEEPER node: all its subtree's time is its own */
} open_frame;

int loupe__flame_build(const loupe_model *m, loupe__flame *f) {
    memset(f, 0, sizeof *f);
    open_frame *st = NULL;
    size_t st_cap = 0;
    if (make_labels(m, f) != 0) {
        goto oom;
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->slice_count == 0) {
            continue;
        }
        size_t root = node(f, LOUPE__FLAME_NONE, f->labels[t], 0);
        if (root == LOUPE__FLAME_NONE) {
            goto oom;
        }
        size_t top = 0;
        for (size_t i = 0; i <= th->slice_count; i++) {
            size_t d = i < th->slice_count ? th->slices[i].depth : 0;
            if (d > top) {
                d = top; /* a depth the order does not support: the deepest open frame's child */
            }
            /* close the frames at depth >= d: their children are all seen */
            while (top > d) {
                open_frame *fr = &st[--top];
                uint64_t self = fr->deeper            ? fr->dur
                                : fr->dur > fr->child ? fr->dur - fr->child
                                                      : 0;
                f->nodes[fr->node].self_ns += self;
                if (top > 0) {
                    st[top - 1].child += fr->dur;
                } else {
                    f->nodes[root].total_ns += fr->dur;
                }
            }
            if (i == th->slice_count) {
                break;
            }
            if (d > LOUPE__FLAME_MAX_DEPTH) {
                continue; /* inside the "[deeper zones]" frame, which holds its time */
            }
            const loupe_slice *sl = &th->slices[i];
            if (top + 1 > st_cap) {
                size_t nc = st_cap ? st_cap * 2 : 64;
                open_frame *ns = realloc(st, nc * sizeof(*ns));
                if (ns == NULL) {
                    goto oom;
                }
                st = ns;
                st_cap = nc;
            }
            int deeper = d == LOUPE__FLAME_MAX_DEPTH;
            size_t parent = top > 0 ? st[top - 1].node : root;
            size_t k = node(f, parent, deeper ? LOUPE__FLAME_DEEPER : sl->name, (uint32_t)d + 1);
            if (k == LOUPE__FLAME_NONE) {
                goto oom;
            }
            f->nodes[k].total_ns += sl->dur_ns;
            st[top++] = (open_frame){k, sl->dur_ns, 0, deeper};
        }
    }
    free(st);
    return 0;
oom:
    free(st);
    loupe__flame_free(f);
    return loupe__err(LOUPE_ENOMEM, "flame graph: out of memory building the call tree");
}

void loupe__flame_free(loupe__flame *f) {
    for (size_t i = 0; f->labels != NULL && i < f->label_count; i++) {
        free(f->labels[i]);
    }
    free(f->labels);
    free(f->nodes);
    free(f->slots);
    memset(f, 0, sizeof *f);
}

/* A frame as folded text: ';' (the separator) as ':', line breaks (the record end) as ' '. */
static void put_frame(loupe__sink *s, const char *name) {
    const char *p = name;
    for (;;) {
        size_t n = strcspn(p, ";\n\r");
        loupe__put(s, p, n);
        if (p[n] == 0) {
            return;
        }
        loupe__put(s, p[n] == ';' ? ":" : " ", 1);
        p += n + 1;
    }
}

int loupe__write_folded(const loupe_model *m, loupe__sink *s) {
    loupe__flame f;
    int rc = loupe__flame_build(m, &f);
    if (rc != 0) {
        return rc;
    }
    /* a chain, root first: at most the root, LOUPE__FLAME_MAX_DEPTH zones and the deeper node */
    size_t chain[LOUPE__FLAME_MAX_DEPTH + 2];
    for (size_t i = 0; i < f.count; i++) {
        if (f.nodes[i].self_ns == 0) {
            continue;
        }
        size_t n = 0;
        for (size_t k = i; k != LOUPE__FLAME_NONE; k = f.nodes[k].parent) {
            chain[n++] = k;
        }
        while (n > 0) {
            put_frame(s, f.nodes[chain[--n]].name);
            loupe__put(s, n > 0 ? ";" : " ", 1);
        }
        loupe__put_u64(s, f.nodes[i].self_ns);
        loupe__put(s, "\n", 1);
    }
    loupe__flame_free(&f);
    return 0;
}
