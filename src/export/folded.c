/* folded.c: collapsed stacks ("folded", Brendan Gregg's format; brendangregg/FlameGraph's
 * stackcollapse output) for flame graphs: main;root;child;leaf <self ns> one line per distinct
 * stack of zone names under its track's root frame (the thread's name: one root per thread, so two
 * threads' stacks never sum into one), weighted by self time in ns (a slice's duration minus its
 * direct children's), in order of first appearance. Stacks whose self time is 0 are left out.
 * Frames are separated by ';', so a ';' in a name becomes ':', and a newline or carriage return
 * becomes a space (speedscope reads `^(.*) (\d+)$` per line).
 *
 * Also the call tree both this writer and svg.c walk (flame.h): a node is (parent node, name), so
 * memory is one node per distinct stack and a line is written from the parent links, never kept
 * as a string; stacks are cut at LOUPE__FLAME_MAX_DEPTH zones, which bounds the output at
 * O(slices * LOUPE__FLAME_MAX_DEPTH) bytes however deep the nesting.
 */
#include "export/flame.h"

#include "base/hash.h"
#include "export/writers.h"

#include <loupe/writer.h>
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
    for (size_t i = 0; f->owned != NULL && i < f->owned_count; i++) {
        free(f->owned[i]);
    }
    free(f->owned);
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
    return loupe__write_folded_weighted(m, s, LOUPE_FLAME_WEIGHT_AUTO);
}

int loupe__write_folded_weighted(const loupe_model *m, loupe__sink *s, int weight) {
    loupe__flame f;
    int rc = loupe__flame_use_samples(m, weight) ? loupe__flame_build_samples(m, &f)
                                                 : loupe__flame_build(m, &f);
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

/* ---- the call tree of the CPU samples ---- */

int loupe__flame_use_samples(const loupe_model *m, int weight) {
    if (weight != LOUPE_FLAME_WEIGHT_AUTO) {
        return weight == LOUPE_FLAME_WEIGHT_SAMPLES;
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        if (m->threads[t].slice_count > 0) {
            return 0;
        }
    }
    return m->sample_count > 0;
}

/* Per frame its name in the graph (summary.c's rule: the function, else "module+0xoffset",
 * else "[unknown]"); the made ones are kept in f->owned. */
static const char **frame_names(const loupe_model *m, loupe__flame *f) {
    const char **names = malloc((m->frame_count + 1) * sizeof(*names));
    f->owned = calloc(m->frame_count + 1, sizeof(*f->owned));
    if (names == NULL || f->owned == NULL) {
        free(names);
        return NULL;
    }
    for (size_t i = 0; i < m->frame_count; i++) {
        const loupe_frame *fr = &m->frames[i];
        if (fr->function[0] != 0) {
            names[i] = fr->function;
        } else if (fr->module[0] != 0) {
            size_t n = strlen(fr->module) + 24;
            char *str = malloc(n);
            if (str == NULL) {
                free(names);
                return NULL;
            }
            snprintf(str, n, "%s+0x%llx", fr->module, (unsigned long long)fr->module_offset);
            f->owned[f->owned_count++] = str;
            names[i] = str;
        } else {
            names[i] = "[unknown]";
        }
    }
    return names;
}

/* The node of stack node k under root for the thread being built: memo[k] when stamp[k] says
 * it is this thread's, else made from its parent's (iteratively, outermost first, through
 * path). LOUPE__FLAME_NONE on out-of-memory. */
typedef struct sample_memo {
    size_t *node;
    size_t *stamp;  /* thread index + 1 the node[] entry is of */
    uint32_t *path; /* work list: stack nodes, leaf first */
    const char **names;
} sample_memo;

static size_t stack_node(const loupe_model *m, loupe__flame *f, sample_memo *mm, size_t root,
                         size_t stamp, uint32_t k) {
    size_t n = 0;
    for (uint32_t c = k;
         c < m->stack_node_count && mm->stamp[c] != stamp && n < m->stack_node_count;
         c = m->stack_nodes[c].parent) {
        mm->path[n++] = c;
    }
    for (size_t i = n; i-- > 0;) {
        uint32_t c = mm->path[i];
        uint32_t up = m->stack_nodes[c].parent;
        size_t parent = up < m->stack_node_count ? mm->node[up] : root;
        uint32_t depth = f->nodes[parent].depth + 1;
        size_t made;
        if (depth > LOUPE__FLAME_MAX_DEPTH) {
            made = parent; /* inside "[deeper frames]", which counts it */
        } else {
            uint32_t fi = m->stack_nodes[c].frame;
            const char *name = depth == LOUPE__FLAME_MAX_DEPTH ? LOUPE__FLAME_DEEPER_FRAMES
                               : fi < m->frame_count           ? mm->names[fi]
                                                               : "[unknown]";
            made = node(f, parent, name, depth);
            if (made == LOUPE__FLAME_NONE) {
                return LOUPE__FLAME_NONE;
            }
        }
        mm->node[c] = made;
        mm->stamp[c] = stamp;
    }
    return k < m->stack_node_count ? mm->node[k] : root;
}

int loupe__flame_build_samples(const loupe_model *m, loupe__flame *f) {
    memset(f, 0, sizeof *f);
    f->samples = 1;
    sample_memo mm = {0};
    size_t *by_thread = NULL, *start = NULL;
    if (make_labels(m, f) != 0 || (mm.names = frame_names(m, f)) == NULL) {
        goto oom;
    }
    size_t nn = m->stack_node_count + 1, nt = m->thread_count;
    mm.node = malloc(nn * sizeof(size_t));
    mm.stamp = calloc(nn, sizeof(size_t));
    mm.path = malloc(nn * sizeof(uint32_t));
    by_thread = malloc((m->sample_count + 1) * sizeof(size_t));
    start = calloc(nt + 2, sizeof(size_t));
    if (mm.node == NULL || mm.stamp == NULL || mm.path == NULL || by_thread == NULL ||
        start == NULL) {
        goto oom;
    }
    /* the samples by thread (a counting sort: stable, so each thread's stay in time order) */
    for (size_t i = 0; i < m->sample_count; i++) {
        if (m->samples[i].thread < nt) {
            start[m->samples[i].thread + 2]++;
        }
    }
    for (size_t t = 0; t < nt; t++) {
        start[t + 2] += start[t + 1];
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        if (m->samples[i].thread < nt) {
            by_thread[start[m->samples[i].thread + 1]++] = i;
        }
    }
    for (size_t t = 0; t < nt; t++) {
        if (start[t] == start[t + 1]) {
            continue;
        }
        size_t root = node(f, LOUPE__FLAME_NONE, f->labels[t], 0);
        if (root == LOUPE__FLAME_NONE) {
            goto oom;
        }
        for (size_t j = start[t]; j < start[t + 1]; j++) {
            const loupe_sample *sm = &m->samples[by_thread[j]];
            size_t leaf;
            if (sm->stack < m->stack_node_count) {
                leaf = stack_node(m, f, &mm, root, t + 1, sm->stack);
            } else {
                leaf = node(f, root, LOUPE__FLAME_NO_STACK, 1);
            }
            if (leaf == LOUPE__FLAME_NONE) {
                goto oom;
            }
            f->nodes[leaf].self_ns++;
            for (size_t k = leaf; k != LOUPE__FLAME_NONE; k = f->nodes[k].parent) {
                f->nodes[k].total_ns++;
            }
        }
    }
    free(mm.names);
    free(mm.node);
    free(mm.stamp);
    free(mm.path);
    free(by_thread);
    free(start);
    return 0;
oom:
    free(mm.names);
    free(mm.node);
    free(mm.stamp);
    free(mm.path);
    free(by_thread);
    free(start);
    loupe__flame_free(f);
    return loupe__err(LOUPE_ENOMEM, "flame graph: out of memory building the samples' call tree");
}
