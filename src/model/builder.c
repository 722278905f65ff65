/* builder.c: the trace-model builder (see builder.h) and loupe_model_free().
 *
 * Memory: one bump arena of 64 KiB+ chunks for strings and arg arrays; slices, the per-track
 * argument tables, instants, counters, categories, threads and flows live in growable arrays
 * (realloc doubling) that the model takes over at finish. The intern table is open addressing over
 * FNV-1a hashes.
 */
#include "model/builder.h"

#include "base/error.h"

#include "base/array.h"
#include "base/hash.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} chunk;

typedef struct arena {
    chunk *head;
    /* the growable arrays handed to the model, freed with it */
    void **owned;
    size_t owned_count, owned_cap;
} arena;

typedef struct tcap {
    size_t slice_cap, instant_cap, off_cpu_cap, arg_cap;
} tcap;

/* An open-addressed table of uint32 indices + 1 (0 = empty) over a caller's hash. */
typedef struct itable {
    uint32_t *slot;
    size_t cap, count;
} itable;

typedef struct pending_flow {
    uint64_t id;
    size_t ft, fs, tt, ts;
} pending_flow;

struct loupe__mb {
    loupe_model m;
    arena *ar;
    const char *empty; /* the interned "" (m.process_name can be set to anything later) */
    int failed;
    size_t thread_cap, counter_cap, meta_cap;
    tcap *tcaps;
    const char **itab; /* intern table */
    size_t icap, icount;
    pending_flow *flows;
    size_t flow_count, flow_cap;
    /* tid -> thread index + 1 (0 = empty slot), open addressing: a trace with 1e5 threads must
     * not cost 1e10 comparisons */
    uint64_t *tkey;
    size_t *tproc;
    size_t *tval;
    size_t tcap_slots, tcount;
    size_t process_cap, sample_cap, frame_cap, node_cap;
    itable frame_tab, node_tab;
    /* interned metadata key -> index + 1, open addressing on the key's pointer */
    size_t *mslot;
    size_t mslot_cap;
    /* warnings: the first LOUPE__MB_MAX_WARNINGS kept, the rest counted */
    size_t warn_cap;
    uint64_t warn_more;
    /* categories: m.categories grows; interned pointer -> index, open addressing; the last one
     * looked up (consecutive slices mostly share one) */
    size_t cat_cap, cat_slot_cap;
    size_t *cat_slot;
    const char *last_cat;
    uint16_t last_cat_id;
    int cat_warned;
};

static void *arena_alloc(arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (a->head == NULL || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        chunk *c = malloc(sizeof(chunk) + cap);
        if (c == NULL) {
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

static void arena_free(arena *a) {
    if (a == NULL) {
        return;
    }
    for (chunk *c = a->head; c != NULL;) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
    for (size_t i = 0; i < a->owned_count; i++) {
        free(a->owned[i]);
    }
    free(a->owned);
    free(a);
}

static int arena_own(arena *a, void *p) {
    if (p == NULL) {
        return 0;
    }
    if (loupe__grow((void **)&a->owned, &a->owned_cap, a->owned_count + 1, sizeof(void *)) != 0) {
        return -1;
    }
    a->owned[a->owned_count++] = p;
    return 0;
}

loupe__mb *loupe__mb_new(void) {
    loupe__mb *mb = calloc(1, sizeof(*mb));
    if (mb == NULL) {
        return NULL;
    }
    mb->ar = calloc(1, sizeof(arena));
    if (mb->ar == NULL) {
        free(mb);
        return NULL;
    }
    mb->empty = loupe__mb_str(mb, "");
    mb->m.process_name = mb->empty;
    mb->m.host = mb->empty;
    mb->m.clock = mb->empty;
    if (loupe__grow((void **)&mb->m.categories, &mb->cat_cap, 1, sizeof(const char *)) != 0) {
        mb->failed = 1;
    } else {
        mb->m.categories[mb->m.category_count++] = mb->empty; /* index 0: none */
    }
    if (mb->failed) {
        loupe__mb_abort(mb);
        return NULL;
    }
    return mb;
}

int loupe__mb_failed(const loupe__mb *mb) {
    return mb->failed;
}
loupe_model *loupe__mb_model(loupe__mb *mb) {
    return &mb->m;
}

void *loupe__mb_alloc(loupe__mb *mb, size_t n) {
    void *p = arena_alloc(mb->ar, n);
    if (p == NULL) {
        mb->failed = 1;
    }
    return p;
}

const char *loupe__mb_strn(loupe__mb *mb, const char *s, size_t len) {
    if (mb->failed) {
        return "";
    }
    if (mb->icount * 2 >= mb->icap) {
        size_t nc = mb->icap ? mb->icap * 2 : 256;
        const char **nt = calloc(nc, sizeof(*nt));
        if (nt == NULL) {
            mb->failed = 1;
            return "";
        }
        for (size_t i = 0; i < mb->icap; i++) {
            const char *e = mb->itab[i];
            if (e != NULL) {
                size_t j = loupe__hash_bytes(e, strlen(e)) & (nc - 1);
                while (nt[j] != NULL) {
                    j = (j + 1) & (nc - 1);
                }
                nt[j] = e;
            }
        }
        free(mb->itab);
        mb->itab = nt;
        mb->icap = nc;
    }
    /* Strings with an embedded NUL are cut there: the model's strings are C strings. */
    const char *nul = memchr(s, 0, len);
    if (nul != NULL) {
        len = (size_t)(nul - s);
    }
    size_t j = loupe__hash_bytes(s, len) & (mb->icap - 1);
    while (mb->itab[j] != NULL) {
        const char *e = mb->itab[j];
        if (strncmp(e, s, len) == 0 && e[len] == 0) {
            return e;
        }
        j = (j + 1) & (mb->icap - 1);
    }
    char *c = arena_alloc(mb->ar, len + 1);
    if (c == NULL) {
        mb->failed = 1;
        return "";
    }
    memcpy(c, s, len);
    c[len] = 0;
    mb->itab[j] = c;
    mb->icount++;
    return c;
}

const char *loupe__mb_str(loupe__mb *mb, const char *s) {
    return loupe__mb_strn(mb, s ? s : "", s ? strlen(s) : 0);
}

/* The code and detail of the int calls below once the builder failed. */
static int mb_oom(void) {
    return loupe__err(LOUPE_ENOMEM, "out of memory building the trace model");
}

static size_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

/* Rehashes the tid table to twice the threads (at least 64 slots); -1 on out-of-memory. */
static size_t thread_hash(size_t process, uint64_t tid) {
    return mix64(tid ^ ((uint64_t)process * 0x9e3779b97f4a7c15ull));
}

static int thread_table_grow(loupe__mb *mb) {
    size_t nc = mb->tcap_slots ? mb->tcap_slots * 2 : 64;
    uint64_t *nk = calloc(nc, sizeof(*nk));
    size_t *np = calloc(nc, sizeof(*np));
    size_t *nv = calloc(nc, sizeof(*nv));
    if (nk == NULL || np == NULL || nv == NULL) {
        free(nk);
        free(np);
        free(nv);
        return -1;
    }
    for (size_t i = 0; i < mb->tcap_slots; i++) {
        if (mb->tval[i] != 0) {
            size_t j = thread_hash(mb->tproc[i], mb->tkey[i]) & (nc - 1);
            while (nv[j] != 0) {
                j = (j + 1) & (nc - 1);
            }
            nk[j] = mb->tkey[i];
            np[j] = mb->tproc[i];
            nv[j] = mb->tval[i];
        }
    }
    free(mb->tkey);
    free(mb->tproc);
    free(mb->tval);
    mb->tkey = nk;
    mb->tproc = np;
    mb->tval = nv;
    mb->tcap_slots = nc;
    return 0;
}

size_t loupe__mb_thread_in(loupe__mb *mb, size_t process, uint64_t tid) {
    if ((mb->tcount + 1) * 2 > mb->tcap_slots && thread_table_grow(mb) != 0) {
        mb->failed = 1;
        return SIZE_MAX;
    }
    size_t j = thread_hash(process, tid) & (mb->tcap_slots - 1);
    while (mb->tval[j] != 0) {
        if (mb->tkey[j] == tid && mb->tproc[j] == process) {
            return mb->tval[j] - 1;
        }
        j = (j + 1) & (mb->tcap_slots - 1);
    }
    size_t i = loupe__mb_thread_add(mb, tid);
    if (i == SIZE_MAX) {
        return SIZE_MAX;
    }
    mb->m.threads[i].process = process;
    mb->tkey[j] = tid;
    mb->tproc[j] = process;
    mb->tval[j] = i + 1;
    mb->tcount++;
    return i;
}

size_t loupe__mb_thread(loupe__mb *mb, uint64_t tid) {
    return loupe__mb_thread_in(mb, 0, tid);
}

size_t loupe__mb_process_add(loupe__mb *mb, uint64_t pid) {
    if (loupe__grow((void **)&mb->m.processes, &mb->process_cap, mb->m.process_count + 1,
                    sizeof(loupe_model_process)) != 0) {
        mb->failed = 1;
        return SIZE_MAX;
    }
    loupe_model_process *p = &mb->m.processes[mb->m.process_count];
    *p = (loupe_model_process){pid, mb->empty, mb->empty, mb->empty, mb->empty, 0, -1};
    return mb->m.process_count++;
}

size_t loupe__mb_process(loupe__mb *mb, uint64_t pid) {
    /* Linear: runs have a few processes (a 1,000-rank job is read once per file). */
    for (size_t i = mb->m.process_count; i-- > 0;) {
        if (mb->m.processes[i].pid == pid) {
            return i;
        }
    }
    return loupe__mb_process_add(mb, pid);
}

loupe_model_process *loupe__mb_process_at(loupe__mb *mb, size_t process) {
    return &mb->m.processes[process];
}

/* itable: finds the entry whose index eq() accepts, or the empty slot for it. */
static int itable_reserve(itable *t) {
    if ((t->count + 1) * 2 <= t->cap) {
        return 0;
    }
    return -1; /* the caller rehashes */
}

static uint64_t frame_hash(const loupe_frame *f) {
    uint64_t h = loupe__hash_bytes(f->function, strlen(f->function));
    h = h * 31 + loupe__hash_bytes(f->file, strlen(f->file));
    h = h * 31 + loupe__hash_bytes(f->module, strlen(f->module));
    return h ^ mix64(f->module_offset ^ ((uint64_t)f->line << 32 | f->inlined));
}

static uint64_t node_hash(const loupe_stack_node *n) {
    return mix64((uint64_t)n->parent << 32 | n->frame);
}

static int frame_eq(const loupe_frame *a, const loupe_frame *b) {
    /* strings are interned: pointers compare */
    return a->function == b->function && a->file == b->file && a->module == b->module &&
           a->line == b->line && a->inlined == b->inlined && a->module_offset == b->module_offset;
}

static int rehash(loupe__mb *mb, itable *t, int frames) {
    size_t nc = t->cap ? t->cap * 2 : 256;
    uint32_t *ns = calloc(nc, sizeof(*ns));
    if (ns == NULL) {
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        uint32_t v = t->slot[i];
        if (v != 0) {
            uint64_t h =
                frames ? frame_hash(&mb->m.frames[v - 1]) : node_hash(&mb->m.stack_nodes[v - 1]);
            size_t j = (size_t)h & (nc - 1);
            while (ns[j] != 0) {
                j = (j + 1) & (nc - 1);
            }
            ns[j] = v;
        }
    }
    free(t->slot);
    t->slot = ns;
    t->cap = nc;
    return 0;
}

uint32_t loupe__mb_frame(loupe__mb *mb, const loupe_frame *frame) {
    loupe_frame f = *frame;
    f.function = loupe__mb_str(mb, frame->function);
    f.file = loupe__mb_str(mb, frame->file);
    f.module = loupe__mb_str(mb, frame->module);
    itable *t = &mb->frame_tab;
    if (mb->failed || (itable_reserve(t) != 0 && rehash(mb, t, 1) != 0) ||
        mb->m.frame_count >= UINT32_MAX - 1) {
        mb->failed = 1;
        return UINT32_MAX;
    }
    size_t j = (size_t)frame_hash(&f) & (t->cap - 1);
    while (t->slot[j] != 0) {
        if (frame_eq(&mb->m.frames[t->slot[j] - 1], &f)) {
            return t->slot[j] - 1;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (loupe__grow((void **)&mb->m.frames, &mb->frame_cap, mb->m.frame_count + 1,
                    sizeof(loupe_frame)) != 0) {
        mb->failed = 1;
        return UINT32_MAX;
    }
    mb->m.frames[mb->m.frame_count] = f;
    t->slot[j] = (uint32_t)++mb->m.frame_count;
    t->count++;
    return (uint32_t)(mb->m.frame_count - 1);
}

uint32_t loupe__mb_stack(loupe__mb *mb, uint32_t parent, uint32_t frame) {
    loupe_stack_node n = {parent, frame};
    itable *t = &mb->node_tab;
    if (mb->failed || frame >= mb->m.frame_count ||
        (parent != UINT32_MAX && parent >= mb->m.stack_node_count)) {
        return UINT32_MAX; /* a reader's bad index: not a failure of the builder */
    }
    if ((itable_reserve(t) != 0 && rehash(mb, t, 0) != 0) ||
        mb->m.stack_node_count >= UINT32_MAX - 1) {
        mb->failed = 1;
        return UINT32_MAX;
    }
    size_t j = (size_t)node_hash(&n) & (t->cap - 1);
    while (t->slot[j] != 0) {
        const loupe_stack_node *e = &mb->m.stack_nodes[t->slot[j] - 1];
        if (e->parent == parent && e->frame == frame) {
            return t->slot[j] - 1;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (loupe__grow((void **)&mb->m.stack_nodes, &mb->node_cap, mb->m.stack_node_count + 1,
                    sizeof(loupe_stack_node)) != 0) {
        mb->failed = 1;
        return UINT32_MAX;
    }
    mb->m.stack_nodes[mb->m.stack_node_count] = n;
    t->slot[j] = (uint32_t)++mb->m.stack_node_count;
    t->count++;
    return (uint32_t)(mb->m.stack_node_count - 1);
}

uint32_t loupe__mb_stack_of(loupe__mb *mb, const uint32_t *frames, size_t n) {
    uint32_t node = UINT32_MAX;
    for (size_t i = n; i-- > 0;) {
        node = loupe__mb_stack(mb, node, frames[i]);
        if (node == UINT32_MAX) {
            return UINT32_MAX;
        }
    }
    return node;
}

int loupe__mb_sample(loupe__mb *mb, size_t thread, uint64_t ts_ns, uint32_t stack, uint32_t cpu) {
    if (loupe__grow((void **)&mb->m.samples, &mb->sample_cap, mb->m.sample_count + 1,
                    sizeof(loupe_sample)) != 0) {
        mb->failed = 1;
        return mb_oom();
    }
    mb->m.samples[mb->m.sample_count++] = (loupe_sample){ts_ns, thread, stack, cpu};
    return 0;
}

int loupe__mb_off_cpu(loupe__mb *mb, size_t thread, uint64_t start_ns, uint64_t dur_ns) {
    return loupe__mb_off_cpu_kind(mb, thread, start_ns, dur_ns, LOUPE_OFF_CPU_UNKNOWN);
}

int loupe__mb_off_cpu_kind(loupe__mb *mb, size_t thread, uint64_t start_ns, uint64_t dur_ns,
                           unsigned kind) {
    loupe_model_thread *th = &mb->m.threads[thread];
    if (loupe__grow((void **)&th->off_cpu, &mb->tcaps[thread].off_cpu_cap, th->off_cpu_count + 1,
                    sizeof(loupe_interval)) != 0) {
        mb->failed = 1;
        return mb_oom();
    }
    loupe_off_cpu_kind k =
        kind <= LOUPE_OFF_CPU_PREEMPTED ? (loupe_off_cpu_kind)kind : LOUPE_OFF_CPU_UNKNOWN;
    th->off_cpu[th->off_cpu_count++] = (loupe_interval){start_ns, dur_ns, k};
    return 0;
}

size_t loupe__mb_thread_add(loupe__mb *mb, uint64_t tid) {
    size_t cap = mb->thread_cap;
    if (loupe__grow((void **)&mb->m.threads, &mb->thread_cap, mb->m.thread_count + 1,
                    sizeof(loupe_model_thread)) != 0 ||
        loupe__grow((void **)&mb->tcaps, &cap, mb->m.thread_count + 1, sizeof(tcap)) != 0) {
        mb->failed = 1;
        return SIZE_MAX;
    }
    size_t i = mb->m.thread_count++;
    mb->m.threads[i].tid = tid;
    mb->m.threads[i].name = mb->empty;
    return i;
}

loupe_model_thread *loupe__mb_thread_at(loupe__mb *mb, size_t t) {
    return &mb->m.threads[t];
}

void loupe__mb_thread_name(loupe__mb *mb, size_t t, const char *name) {
    mb->m.threads[t].name = loupe__mb_str(mb, name);
}

size_t loupe__mb_slice(loupe__mb *mb, size_t t) {
    loupe_model_thread *th = &mb->m.threads[t];
    size_t *cap = &mb->tcaps[t].slice_cap;
    if (th->slice_count == *cap) {
        /* Doubling without zeroing: only the slots handed out become resident (the model of
         * a 20 M-event trace is then 28 bytes per event, not ~47). */
        size_t nc = *cap ? *cap * 2 : 4; /* small first: a trace may hold 1e5 threads */
        loupe_slice *n = realloc(th->slices, nc * sizeof(loupe_slice));
        if (n == NULL) {
            mb->failed = 1;
            return SIZE_MAX;
        }
        loupe__advise_huge(n, nc * sizeof(loupe_slice)); /* 4 KiB faults: array.h */
        th->slices = n;
        *cap = nc;
    }
    loupe_slice *s = &th->slices[th->slice_count];
    memset(s, 0, sizeof(*s));
    s->name = mb->empty;
    return th->slice_count++;
}

loupe_slice *loupe__mb_slice_at(loupe__mb *mb, size_t t, size_t i) {
    return &mb->m.threads[t].slices[i];
}

static loupe_arg *copy_args(loupe__mb *mb, const loupe_arg *args, uint32_t n) {
    if (n == 0) {
        return NULL;
    }
    loupe_arg *a = loupe__mb_alloc(mb, n * sizeof(loupe_arg));
    if (a == NULL) {
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        a[i] = args[i];
        a[i].key = loupe__mb_str(mb, args[i].key);
        if (a[i].type == LOUPE_ARG_STRING) {
            a[i].v.s = loupe__mb_str(mb, args[i].v.s);
        }
    }
    return a;
}

/* While a model is built, a thread's slice_args holds one entry per slice given args, in the
 * order they were given (entry.slice = the slice's index as appended), and the slice's depth,
 * which finish computes anyway, links to it: entry index + 1 (0 = none). The link is checked
 * against the entry (a caller may have overwritten the slice whole), so a stale one only costs a
 * new entry. finish (finish_args) maps the entries to the sorted slices and sorts them. */
static loupe_slice_arglist *find_args(loupe__mb *mb, size_t t, size_t i) {
    loupe_model_thread *th = &mb->m.threads[t];
    uint32_t link = th->slices[i].depth;
    if (link == 0 || link > th->slice_arg_count || th->slice_args[link - 1].slice != i) {
        return NULL;
    }
    return &th->slice_args[link - 1];
}

/* The entry of slice i, added (empty) when missing; NULL on out-of-memory. */
static loupe_slice_arglist *need_args(loupe__mb *mb, size_t t, size_t i) {
    loupe_slice_arglist *e = find_args(mb, t, i);
    if (e != NULL) {
        return e;
    }
    loupe_model_thread *th = &mb->m.threads[t];
    if (th->slice_arg_count >= UINT32_MAX - 1 ||
        loupe__grow((void **)&th->slice_args, &mb->tcaps[t].arg_cap, th->slice_arg_count + 1,
                    sizeof(loupe_slice_arglist)) != 0) {
        mb->failed = 1;
        return NULL;
    }
    e = &th->slice_args[th->slice_arg_count++];
    *e = (loupe_slice_arglist){i, 0, NULL};
    th->slices[i].depth = (uint32_t)th->slice_arg_count;
    return e;
}

int loupe__mb_slice_args(loupe__mb *mb, size_t t, size_t i, const loupe_arg *args, uint32_t n) {
    if (n == 0) {
        loupe_slice_arglist *e = find_args(mb, t, i);
        if (e != NULL) {
            e->count = 0; /* finish drops it */
        }
        return 0;
    }
    loupe_arg *a = copy_args(mb, args, n);
    loupe_slice_arglist *e = a != NULL ? need_args(mb, t, i) : NULL;
    if (e == NULL) {
        return mb_oom();
    }
    e->args = a;
    e->count = n;
    return 0;
}

int loupe__mb_slice_add_arg(loupe__mb *mb, size_t t, size_t i, const loupe_arg *arg) {
    loupe_slice_arglist *e = need_args(mb, t, i);
    loupe_arg *a = e != NULL ? loupe__mb_alloc(mb, (e->count + 1) * sizeof(loupe_arg)) : NULL;
    if (a == NULL) {
        return mb_oom();
    }
    if (e->count > 0) {
        memcpy(a, e->args, e->count * sizeof(loupe_arg));
    }
    a[e->count] = *arg;
    a[e->count].key = loupe__mb_str(mb, arg->key);
    if (arg->type == LOUPE_ARG_STRING) {
        a[e->count].v.s = loupe__mb_str(mb, arg->v.s);
    }
    e->args = a;
    e->count++;
    return mb->failed ? mb_oom() : 0;
}

loupe_arg *loupe__mb_slice_args_at(loupe__mb *mb, size_t t, size_t i, uint32_t *n) {
    loupe_slice_arglist *e = find_args(mb, t, i);
    *n = e != NULL ? (uint32_t)e->count : 0;
    return *n > 0 ? e->args : NULL;
}

uint16_t loupe__mb_category(loupe__mb *mb, const char *category) {
    if (category == NULL || category[0] == 0) {
        return 0;
    }
    /* An interned string is the only one at its address: the same pointer, the same string. So
     * a reader that passes the interned pointer is answered without hashing the string. */
    if (category == mb->last_cat) {
        return mb->last_cat_id;
    }
    if (mb->cat_slot_cap > 0) {
        size_t j = mix64((uint64_t)(uintptr_t)category) & (mb->cat_slot_cap - 1);
        while (mb->cat_slot[j] != 0) {
            if (mb->m.categories[mb->cat_slot[j]] == category) {
                mb->last_cat = category;
                mb->last_cat_id = (uint16_t)mb->cat_slot[j];
                return mb->last_cat_id;
            }
            j = (j + 1) & (mb->cat_slot_cap - 1);
        }
    }
    const char *k = loupe__mb_str(mb, category);
    if (mb->failed) {
        return 0;
    }
    if (k == mb->last_cat) {
        return mb->last_cat_id;
    }
    if ((mb->m.category_count + 1) * 2 > mb->cat_slot_cap) {
        size_t nc = mb->cat_slot_cap ? mb->cat_slot_cap * 2 : 64;
        size_t *nt = calloc(nc, sizeof(*nt));
        if (nt == NULL) {
            mb->failed = 1;
            return 0;
        }
        for (size_t c = 1; c < mb->m.category_count; c++) {
            size_t j = mix64((uint64_t)(uintptr_t)mb->m.categories[c]) & (nc - 1);
            while (nt[j] != 0) {
                j = (j + 1) & (nc - 1);
            }
            nt[j] = c;
        }
        free(mb->cat_slot);
        mb->cat_slot = nt;
        mb->cat_slot_cap = nc;
    }
    size_t j = mix64((uint64_t)(uintptr_t)k) & (mb->cat_slot_cap - 1);
    while (mb->cat_slot[j] != 0 && mb->m.categories[mb->cat_slot[j]] != k) {
        j = (j + 1) & (mb->cat_slot_cap - 1);
    }
    if (mb->cat_slot[j] == 0) {
        if (mb->m.category_count > UINT16_MAX) {
            /* loupe_slice.category is 16 bits (the slice's 32 bytes): a reader's 65536th
             * distinct category is dropped, said once */
            if (!mb->cat_warned) {
                mb->cat_warned = 1;
                loupe__mb_warn(mb,
                               "more than 65535 distinct slice categories: \"%.200s\" and "
                               "later new ones are dropped (the slices keep no category)",
                               k);
            }
            return 0;
        }
        if (loupe__grow((void **)&mb->m.categories, &mb->cat_cap, mb->m.category_count + 1,
                        sizeof(const char *)) != 0) {
            mb->failed = 1;
            return 0;
        }
        mb->cat_slot[j] = mb->m.category_count;
        mb->m.categories[mb->m.category_count++] = k;
    }
    mb->last_cat = k;
    mb->last_cat_id = (uint16_t)mb->cat_slot[j];
    return mb->last_cat_id;
}

void loupe__mb_slice_category(loupe__mb *mb, size_t t, size_t i, const char *category) {
    mb->m.threads[t].slices[i].category = loupe__mb_category(mb, category);
}

int loupe__mb_instant(loupe__mb *mb, size_t t, uint64_t ts, const char *name, const loupe_arg *args,
                      uint32_t n) {
    loupe_model_thread *th = &mb->m.threads[t];
    if (loupe__grow((void **)&th->instants, &mb->tcaps[t].instant_cap, th->instant_count + 1,
                    sizeof(loupe_instant)) != 0) {
        mb->failed = 1;
        return mb_oom();
    }
    loupe_instant *in = &th->instants[th->instant_count++];
    in->ts_ns = ts;
    in->name = loupe__mb_str(mb, name);
    in->args = copy_args(mb, args, n);
    in->arg_count = n;
    return mb->failed ? mb_oom() : 0;
}

int loupe__mb_counter(loupe__mb *mb, const loupe_counter_sample *c) {
    if (loupe__grow((void **)&mb->m.counters, &mb->counter_cap, mb->m.counter_count + 1,
                    sizeof(*c)) != 0) {
        mb->failed = 1;
        return mb_oom();
    }
    loupe_counter_sample *d = &mb->m.counters[mb->m.counter_count++];
    *d = *c;
    d->name = loupe__mb_str(mb, c->name);
    return mb->failed ? mb_oom() : 0;
}

int loupe__mb_flow(loupe__mb *mb, uint64_t id, size_t ft, size_t fs, size_t tt, size_t ts) {
    if (loupe__grow((void **)&mb->flows, &mb->flow_cap, mb->flow_count + 1, sizeof(pending_flow)) !=
        0) {
        mb->failed = 1;
        return mb_oom();
    }
    mb->flows[mb->flow_count++] = (pending_flow){id, ft, fs, tt, ts};
    return 0;
}

/* The slot of interned key k in the metadata table (keys are interned: the pointer is the key). */
static size_t meta_slot(const loupe__mb *mb, const char *k) {
    size_t j = mix64((uint64_t)(uintptr_t)k) & (mb->mslot_cap - 1);
    while (mb->mslot[j] != 0 && mb->m.metadata[mb->mslot[j] - 1].key != k) {
        j = (j + 1) & (mb->mslot_cap - 1);
    }
    return j;
}

int loupe__mb_metadata(loupe__mb *mb, const char *key, const char *value) {
    const char *k = loupe__mb_str(mb, key);
    const char *v = loupe__mb_str(mb, value);
    if (mb->failed) {
        return mb_oom();
    }
    if ((mb->m.metadata_count + 1) * 2 > mb->mslot_cap) {
        size_t nc = mb->mslot_cap ? mb->mslot_cap * 2 : 32;
        size_t *nt = calloc(nc, sizeof(*nt));
        if (nt == NULL) {
            mb->failed = 1;
            return mb_oom();
        }
        free(mb->mslot);
        mb->mslot = nt;
        mb->mslot_cap = nc;
        for (size_t i = 0; i < mb->m.metadata_count; i++) {
            mb->mslot[meta_slot(mb, mb->m.metadata[i].key)] = i + 1;
        }
    }
    size_t j = meta_slot(mb, k);
    if (mb->mslot[j] != 0) {
        mb->m.metadata[mb->mslot[j] - 1].value = v;
        return 0;
    }
    if (loupe__grow((void **)&mb->m.metadata, &mb->meta_cap, mb->m.metadata_count + 1,
                    sizeof(loupe_kv)) != 0) {
        mb->failed = 1;
        return mb_oom();
    }
    mb->mslot[j] = mb->m.metadata_count + 1;
    mb->m.metadata[mb->m.metadata_count++] = (loupe_kv){k, v};
    return 0;
}

int loupe__mb_warn(loupe__mb *mb, const char *fmt, ...) {
    if (mb->m.warning_count >= LOUPE__MB_MAX_WARNINGS) {
        mb->warn_more++;
        return 0;
    }
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    const char *w = loupe__mb_str(mb, tmp);
    if (mb->failed || loupe__grow((void **)&mb->m.warnings, &mb->warn_cap, mb->m.warning_count + 2,
                                  sizeof(const char *)) != 0) {
        mb->failed = 1;
        return mb_oom();
    }
    mb->m.warnings[mb->m.warning_count++] = w;
    return 0;
}

/* Sorting slices: start ascending, longer first on equal starts (the parent), then the order of
 * recording. A permutation array keeps flows pointing at the right slices. */
typedef struct sort_item {
    loupe_slice s;
    size_t orig;
} sort_item;

static int cmp_slice(const void *pa, const void *pb) {
    const sort_item *a = pa, *b = pb;
    if (a->s.start_ns != b->s.start_ns) {
        return a->s.start_ns < b->s.start_ns ? -1 : 1;
    }
    if (a->s.dur_ns != b->s.dur_ns) {
        return a->s.dur_ns > b->s.dur_ns ? -1 : 1;
    }
    return a->orig < b->orig ? -1 : (a->orig > b->orig);
}

static int cmp_counter(const void *pa, const void *pb) {
    const loupe_counter_sample *a = pa, *b = pb;
    return a->ts_ns < b->ts_ns ? -1 : (a->ts_ns > b->ts_ns);
}

static int cmp_sample(const void *pa, const void *pb) {
    const loupe_sample *a = pa, *b = pb;
    if (a->ts_ns != b->ts_ns) {
        return a->ts_ns < b->ts_ns ? -1 : 1;
    }
    return a->thread < b->thread ? -1 : (a->thread > b->thread);
}

static int cmp_interval(const void *pa, const void *pb) {
    const loupe_interval *a = pa, *b = pb;
    return a->start_ns < b->start_ns ? -1 : (a->start_ns > b->start_ns);
}

/* Sorts a thread's off-CPU intervals and joins those of one kind that overlap or touch. Of two
 * kinds that overlap (never from one kernel; a merge of two files could), the earlier keeps the
 * overlap and the later starts where it ends: the intervals never overlap. */
static void finish_off_cpu(loupe_model_thread *th) {
    if (th->off_cpu_count < 2) {
        return;
    }
    qsort(th->off_cpu, th->off_cpu_count, sizeof(loupe_interval), cmp_interval);
    size_t w = 0;
    for (size_t i = 1; i < th->off_cpu_count; i++) {
        loupe_interval *last = &th->off_cpu[w];
        loupe_interval c = th->off_cpu[i];
        uint64_t end = last->start_ns + last->dur_ns, c_end = c.start_ns + c.dur_ns;
        if (c.start_ns <= end && c.kind == last->kind) {
            if (c_end > end) {
                last->dur_ns = c_end - last->start_ns;
            }
        } else if (c.start_ns < end) {
            if (c_end > end) {
                c.start_ns = end;
                c.dur_ns = c_end - end;
                th->off_cpu[++w] = c;
            }
        } else {
            th->off_cpu[++w] = c;
        }
    }
    th->off_cpu_count = w + 1;
}

/* processes[0] and the model's pid / process_name / host describe one process: fill each side
 * from the other. */
static int finish_processes(loupe__mb *mb) {
    loupe_model *m = &mb->m;
    if (m->process_count == 0 && loupe__mb_process_add(mb, m->pid) == SIZE_MAX) {
        return -1;
    }
    loupe_model_process *p = &m->processes[0];
    if (p->pid == 0) {
        p->pid = m->pid;
    } else if (m->pid == 0) {
        m->pid = p->pid;
    }
    if (!p->name[0]) {
        p->name = m->process_name;
    } else if (!m->process_name[0]) {
        m->process_name = p->name;
    }
    if (!p->host[0]) {
        p->host = m->host;
    } else if (!m->host[0]) {
        m->host = p->host;
    }
    return 0;
}

static int cmp_instant(const void *pa, const void *pb) {
    const loupe_instant *a = pa, *b = pb;
    return a->ts_ns < b->ts_ns ? -1 : (a->ts_ns > b->ts_ns);
}

/* The depth pass over th's slices (model.h: depth): for THREAD and GPU tracks a stack of open
 * slices' ends, for ASYNC tracks lanes (each slice takes the lowest lane free at its start).
 * *ends is a stack grown as deep as the slices nest (a few entries, not one per slice: no 8 B per
 * slice to fault in). check: the slices may be unsorted; stop at the first slice out of order
 * (start_ns ascending, longer first at equal starts) and return -2, having counted nothing.
 * Counts the LOUPE_SLICE_TRUNCATED slices into *truncated. Returns 1 when a THREAD or GPU track
 * has slices that overlap partially, 0 when not, -1 on out-of-memory, -2 (check) unsorted. */
static int depth_pass(loupe_model_thread *th, uint64_t **ends, size_t *cap, int check,
                      uint64_t *truncated) {
    size_t n = th->slice_count, top = 0;
    uint64_t trunc = 0;
    int overlap = 0, async = th->kind == LOUPE_TRACK_ASYNC;
    for (size_t i = 0; i < n; i++) {
        loupe_slice *s = &th->slices[i];
        if (check && i > 0) {
            const loupe_slice *a = s - 1;
            if (a->start_ns > s->start_ns ||
                (a->start_ns == s->start_ns && a->dur_ns < s->dur_ns)) {
                return -2;
            }
        }
        trunc += (s->flags & LOUPE_SLICE_TRUNCATED) != 0;
        s->flags &= (uint16_t)~LOUPE_SLICE_HAS_ARGS; /* finish_args sets it from the entries */
        uint64_t end = s->start_ns + s->dur_ns;
        size_t l;
        if (async) {
            /* top = lanes in use; (*ends)[l] = lane l's end */
            l = 0;
            while (l < top && (*ends)[l] > s->start_ns) {
                l++;
            }
        } else {
            while (top > 0 && (*ends)[top - 1] <= s->start_ns &&
                   !((*ends)[top - 1] == s->start_ns && s->dur_ns == 0 && i > 0 &&
                     th->slices[i - 1].start_ns == s->start_ns)) {
                top--;
            }
            if (top > 0 && end > (*ends)[top - 1]) {
                overlap = 1; /* begins inside the open slice and ends after it */
            }
            l = top;
        }
        if (l == top) {
            if (top == *cap && loupe__grow((void **)ends, cap, top + 1, sizeof(uint64_t)) != 0) {
                return -1;
            }
            top++;
        }
        (*ends)[l] = end;
        s->depth = (uint32_t)l;
    }
    *truncated += trunc;
    return overlap;
}

/* Sorts a thread's slices and computes depths; fills perm[orig] = new index when perm != NULL;
 * adds the truncated slices to *truncated. Slices read from a loupe file arrive sorted per
 * track, so the depth pass runs first and checks the order as it goes: a sorted track costs one
 * pass over its slices, an unsorted one is sorted and passed again.
 * Returns 1 when a THREAD or GPU track has slices that overlap partially (split_thread() then
 * moves them to siblings), 0 otherwise, -1 on out-of-memory. */
static int finish_thread(loupe_model_thread *th, size_t *perm, uint64_t *truncated) {
    size_t n = th->slice_count;
    if (n == 0) {
        return 0;
    }
    uint64_t *ends = NULL;
    size_t cap = 0;
    int rc = depth_pass(th, &ends, &cap, 1, truncated);
    if (rc == -2) {
        sort_item *it = malloc(n * sizeof(*it));
        if (it == NULL) {
            free(ends);
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            it[i].s = th->slices[i];
            it[i].orig = i;
        }
        qsort(it, n, sizeof(*it), cmp_slice);
        for (size_t i = 0; i < n; i++) {
            th->slices[i] = it[i].s;
            if (perm != NULL) {
                perm[it[i].orig] = i;
            }
        }
        free(it);
        perm = NULL;
        rc = depth_pass(th, &ends, &cap, 0, truncated);
    }
    free(ends);
    if (perm != NULL) {
        for (size_t i = 0; i < n; i++) {
            perm[i] = i;
        }
    }
    return rc;
}

/* One track's open slices while split_thread() deals slices out: their indices (in the sorted
 * slices), innermost last. */
typedef struct lane {
    size_t *stk;
    size_t top, cap, count;
} lane;

/* Moves the slices of thread t (sorted, with a partial overlap) that do not nest onto sibling
 * tracks (model.h: sibling, sibling_of). Each slice, in start order, goes to the track where it
 * nests inside the innermost open slice that began last (its likeliest parent), else to the
 * first track with nothing open at its start, else to a new sibling: greedy, so the original
 * track keeps every slice that nests, and O(slices x siblings). perm (when not NULL) maps a slice
 * as appended to its sorted index; it is rewritten to the index on its new track, and *ptrack
 * (allocated here) to that track. *next_tid: the tid the next sibling takes. 0 or -1 (OOM). */
static int split_thread(loupe__mb *mb, size_t t, size_t *perm, size_t **ptrack,
                        uint64_t *next_tid) {
    loupe_model_thread *th = &mb->m.threads[t];
    size_t n = th->slice_count;
    lane *ln = NULL;
    size_t nl = 0, lcap = 0;
    uint32_t *which = malloc(n * sizeof(*which));
    size_t *pos = malloc(n * sizeof(*pos));
    int rc = -1;
    if (which == NULL || pos == NULL) {
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        loupe_slice *s = &th->slices[i];
        uint64_t end = s->start_ns + s->dur_ns;
        size_t best = SIZE_MAX;
        uint64_t best_start = 0;
        int best_nested = 0;
        for (size_t l = 0; l < nl; l++) {
            lane *L = &ln[l];
            /* the pop rule of finish_thread: a zero-length slice at its parent's start and end
             * stays inside it */
            while (L->top > 0) {
                const loupe_slice *o = &th->slices[L->stk[L->top - 1]];
                uint64_t oe = o->start_ns + o->dur_ns;
                if (oe > s->start_ns || (oe == s->start_ns && s->dur_ns == 0 && i > 0 &&
                                         th->slices[i - 1].start_ns == s->start_ns)) {
                    break;
                }
                L->top--;
            }
            if (L->top == 0) {
                if (best == SIZE_MAX) {
                    best = l;
                }
                continue;
            }
            const loupe_slice *o = &th->slices[L->stk[L->top - 1]];
            if (o->start_ns + o->dur_ns >= end && (!best_nested || o->start_ns > best_start)) {
                best = l;
                best_start = o->start_ns;
                best_nested = 1;
            }
        }
        if (best == SIZE_MAX) {
            if (nl > UINT32_MAX - 1 ||
                loupe__grow((void **)&ln, &lcap, nl + 1, sizeof(lane)) != 0) {
                goto out;
            }
            ln[nl] = (lane){NULL, 0, 0, 0};
            best = nl++;
        }
        lane *L = &ln[best];
        if (loupe__grow((void **)&L->stk, &L->cap, L->top + 1, sizeof(size_t)) != 0) {
            goto out;
        }
        s->depth = (uint32_t)L->top;
        L->stk[L->top++] = i;
        which[i] = (uint32_t)best;
        pos[i] = L->count++;
    }
    /* lane l > 0 becomes sibling l: index first[l] onwards */
    size_t first = mb->m.thread_count;
    for (size_t l = 1; l < nl; l++) {
        size_t len = strlen(th->name) + 32;
        char *nm = malloc(len);
        if (nm == NULL) {
            goto out;
        }
        snprintf(nm, len, th->name[0] ? "%s (overlap %zu)" : "%s(overlap %zu)", th->name, l);
        size_t k = loupe__mb_thread_add(mb, (*next_tid)++);
        th = &mb->m.threads[t]; /* the array may have moved */
        if (k == SIZE_MAX) {
            free(nm);
            goto out;
        }
        loupe_model_thread *sib = &mb->m.threads[k];
        sib->name = loupe__mb_str(mb, nm);
        free(nm);
        sib->kind = th->kind;
        sib->device = th->device;
        sib->process = th->process;
        sib->sibling = (uint32_t)l;
        sib->sibling_of = t;
        sib->slices = malloc(ln[l].count * sizeof(loupe_slice));
        if (sib->slices == NULL || mb->failed) {
            goto out;
        }
        mb->tcaps[k] = (tcap){ln[l].count, 0, 0, 0};
    }
    for (size_t i = 0; i < n; i++) {
        loupe_model_thread *d = which[i] == 0 ? th : &mb->m.threads[first + which[i] - 1];
        d->slices[pos[i]] = th->slices[i]; /* lane 0: pos[i] <= i, so in place is safe */
        d->slice_count = pos[i] + 1;
    }
    if (perm != NULL) {
        *ptrack = malloc(n * sizeof(size_t));
        if (*ptrack == NULL) {
            goto out;
        }
        for (size_t o = 0; o < n; o++) {
            size_t i = perm[o];
            (*ptrack)[o] = which[i] == 0 ? t : first + which[i] - 1;
            perm[o] = pos[i];
        }
    }
    rc = 0;
out:
    for (size_t l = 0; l < nl; l++) {
        free(ln[l].stk);
    }
    free(ln);
    free(which);
    free(pos);
    if (rc != 0) {
        mb->failed = 1;
    }
    return rc;
}

/* Marks a reader's overlap siblings: a track named "<name> (overlap N)" (or "(overlap N)")
 * whose process, kind and device match a track named <name> (model.h). Linear in the tracks for
 * each such name: they are few. */
static void mark_siblings(loupe_model *m) {
    static const char tag[] = "(overlap ";
    for (size_t t = 0; t < m->thread_count; t++) {
        loupe_model_thread *th = &m->threads[t];
        size_t len = strlen(th->name);
        if (th->sibling != 0 || len < sizeof tag || th->name[len - 1] != ')') {
            continue;
        }
        const char *p = th->name + len - 1; /* back over the digits to "(overlap " */
        while (p > th->name && p[-1] >= '0' && p[-1] <= '9') {
            p--;
        }
        size_t digits = (size_t)(th->name + len - 1 - p);
        if (digits == 0 || digits > 9 || p[0] == '0' || (size_t)(p - th->name) < sizeof tag - 1 ||
            memcmp(p - (sizeof tag - 1), tag, sizeof tag - 1) != 0) {
            continue;
        }
        size_t base = (size_t)(p - (sizeof tag - 1) - th->name);
        if (base > 0) {
            if (base < 2 || th->name[base - 1] != ' ') {
                continue;
            }
            base--; /* the space before "(overlap" */
        }
        for (size_t u = 0; u < m->thread_count; u++) {
            const loupe_model_thread *o = &m->threads[u];
            if (u != t && o->sibling == 0 && o->process == th->process && o->kind == th->kind &&
                o->device == th->device && strlen(o->name) == base &&
                memcmp(o->name, th->name, base) == 0) {
                th->sibling = (uint32_t)strtoul(p, NULL, 10);
                th->sibling_of = u;
                break;
            }
        }
    }
}

static int cmp_arglist(const void *pa, const void *pb) {
    const loupe_slice_arglist *a = pa, *b = pb;
    if (a->slice != b->slice) {
        return a->slice < b->slice ? -1 : 1;
    }
    return a->args < b->args ? -1 : (a->args > b->args); /* a deterministic order for duplicates */
}

/* Moves each thread's argument entries (made while building: slice = the index as appended) to
 * the track and index its slice has now (perms, ptracks: finish's maps, NULL for a thread whose
 * slices did not move), sorts every track's entries by slice and marks the slices
 * LOUPE_SLICE_HAS_ARGS. Entries without args are dropped. 0 or -1 (OOM). */
static int finish_args(loupe__mb *mb, size_t **perms, size_t **ptracks, size_t nthreads) {
    for (size_t t = 0; t < nthreads; t++) {
        loupe_model_thread *th = &mb->m.threads[t];
        int moved = perms != NULL && perms[t] != NULL;
        int split = ptracks != NULL && ptracks[t] != NULL;
        if (th->slice_arg_count == 0 || (!moved && !split)) {
            continue;
        }
        loupe_slice_arglist *old = th->slice_args;
        size_t n = th->slice_arg_count;
        th->slice_args = NULL;
        th->slice_arg_count = 0;
        mb->tcaps[t].arg_cap = 0;
        for (size_t k = 0; k < n; k++) {
            loupe_slice_arglist e = old[k];
            size_t d = split ? ptracks[t][e.slice] : t;
            e.slice = moved ? perms[t][e.slice] : e.slice;
            loupe_model_thread *dt = &mb->m.threads[d];
            if (e.count > 0 &&
                loupe__grow((void **)&dt->slice_args, &mb->tcaps[d].arg_cap,
                            dt->slice_arg_count + 1, sizeof(loupe_slice_arglist)) != 0) {
                free(old);
                return -1;
            }
            if (e.count > 0) {
                dt->slice_args[dt->slice_arg_count++] = e;
            }
        }
        free(old);
    }
    for (size_t t = 0; t < mb->m.thread_count; t++) {
        loupe_model_thread *th = &mb->m.threads[t];
        size_t n = th->slice_arg_count, w = 0;
        int sorted = 1;
        for (size_t k = 1; k < n && sorted; k++) {
            sorted = th->slice_args[k - 1].slice < th->slice_args[k].slice;
        }
        if (!sorted) {
            qsort(th->slice_args, n, sizeof(loupe_slice_arglist), cmp_arglist);
        }
        for (size_t k = 0; k < n; k++) {
            loupe_slice_arglist e = th->slice_args[k];
            if (e.count == 0) {
                continue;
            }
            if (w > 0 && th->slice_args[w - 1].slice == e.slice) {
                th->slice_args[w - 1] = e; /* a second entry (a stale link): one is kept */
                continue;
            }
            th->slice_args[w++] = e;
            th->slices[e.slice].flags |= LOUPE_SLICE_HAS_ARGS;
        }
        th->slice_arg_count = w;
        if (w == 0) {
            free(th->slice_args);
            th->slice_args = NULL;
        }
    }
    return 0;
}

/* The builder's lookup tables (not the model's arrays). */
static void free_tables(loupe__mb *mb) {
    free(mb->tkey);
    free(mb->tproc);
    free(mb->tval);
    free(mb->mslot);
    free(mb->frame_tab.slot);
    free(mb->node_tab.slot);
    free(mb->cat_slot);
}

/* The per-thread index arrays of finish (perms, ptracks) over its first n threads. */
static void free_maps(size_t **v, size_t n) {
    if (v != NULL) {
        for (size_t t = 0; t < n; t++) {
            free(v[t]);
        }
        free(v);
    }
}

loupe_model *loupe__mb_finish(loupe__mb *mb) {
    loupe_model *m = NULL;
    size_t **perms = NULL, **ptracks = NULL;
    size_t nthreads = mb->m.thread_count;
    uint64_t next_tid = 0;
    if (mb->failed) {
        goto fail;
    }
    int any_args = 0;
    for (size_t t = 0; t < mb->m.thread_count && !any_args; t++) {
        any_args = mb->m.threads[t].slice_arg_count > 0;
    }
    /* perms: slice index as appended -> sorted, for the flows (every thread) and the argument
     * entries (the threads that have some) */
    if (mb->flow_count > 0 || any_args) {
        perms = calloc(mb->m.thread_count ? mb->m.thread_count : 1, sizeof(*perms));
        if (perms == NULL) {
            goto fail;
        }
    }
    if (finish_processes(mb) != 0) {
        goto fail;
    }
    if (mb->m.sample_count > 1) {
        qsort(mb->m.samples, mb->m.sample_count, sizeof(loupe_sample), cmp_sample);
    }
    /* the tracks as built: split_thread() appends siblings, already finished */
    nthreads = mb->m.thread_count;
    if (perms != NULL) {
        ptracks = calloc(nthreads ? nthreads : 1, sizeof(*ptracks));
        if (ptracks == NULL) {
            goto fail;
        }
    }
    for (size_t t = 0; t < nthreads; t++) {
        loupe_model_thread *th = &mb->m.threads[t];
        finish_off_cpu(th);
        if (perms != NULL && th->slice_count > 0 &&
            (mb->flow_count > 0 || th->slice_arg_count > 0)) {
            perms[t] = malloc(th->slice_count * sizeof(size_t));
            if (perms[t] == NULL) {
                goto fail;
            }
        }
        size_t *perm = perms ? perms[t] : NULL;
        int fr = finish_thread(th, perm, &mb->m.truncated_zones);
        if (fr < 0) {
            goto fail;
        }
        if (fr > 0 && th->kind != LOUPE_TRACK_ASYNC) {
            if (next_tid == 0) {
                for (size_t u = 0; u < mb->m.thread_count; u++) {
                    uint64_t v = mb->m.threads[u].tid;
                    next_tid = v >= next_tid ? v + 1 : next_tid;
                }
            }
            if (split_thread(mb, t, perm, perm ? &ptracks[t] : NULL, &next_tid) != 0) {
                goto fail;
            }
            th = &mb->m.threads[t];
        }
        if (th->instant_count > 1) {
            qsort(th->instants, th->instant_count, sizeof(loupe_instant), cmp_instant);
        }
    }
    /* truncated_zones was counted by finish_thread(): split_thread() moves slices, never adds */
    if (finish_args(mb, perms, ptracks, nthreads) != 0) {
        goto fail;
    }
    mark_siblings(&mb->m);
    if (mb->m.counter_count > 1) {
        /* qsort is not stable; counters are appended in time order per thread, and equal
         * timestamps keep an arbitrary order, which is harmless for counters. */
        qsort(mb->m.counters, mb->m.counter_count, sizeof(loupe_counter_sample), cmp_counter);
    }
    if (mb->flow_count > 0) {
        mb->m.flows = malloc(mb->flow_count * sizeof(loupe_flow));
        if (mb->m.flows == NULL) {
            goto fail;
        }
        for (size_t i = 0; i < mb->flow_count; i++) {
            pending_flow *f = &mb->flows[i];
            size_t ft = ptracks[f->ft] ? ptracks[f->ft][f->fs] : f->ft;
            size_t tt = ptracks[f->tt] ? ptracks[f->tt][f->ts] : f->tt;
            mb->m.flows[i] = (loupe_flow){f->id, ft, perms[f->ft][f->fs], tt, perms[f->tt][f->ts]};
        }
        mb->m.flow_count = mb->flow_count;
    }
    if (mb->warn_more > 0) {
        /* room for this one was reserved by loupe__mb_warn (count + 2) */
        char tmp[96];
        snprintf(tmp, sizeof tmp, "and %llu more warnings", (unsigned long long)mb->warn_more);
        mb->m.warnings[mb->m.warning_count++] = loupe__mb_str(mb, tmp);
        if (mb->failed) {
            goto fail;
        }
    }
    m = malloc(sizeof(*m));
    arena *a = mb->ar;
    size_t need = a->owned_count + 10 + 4 * mb->m.thread_count;
    if (m == NULL || loupe__grow((void **)&a->owned, &a->owned_cap, need, sizeof(void *)) != 0) {
        free(m);
        m = NULL;
        goto fail;
    }
    /* cannot fail now: room was reserved */
    int own = arena_own(a, mb->m.threads) | arena_own(a, mb->m.counters) |
              arena_own(a, mb->m.flows) | arena_own(a, mb->m.metadata) |
              arena_own(a, (void *)mb->m.warnings) | arena_own(a, mb->m.processes) |
              arena_own(a, mb->m.samples) | arena_own(a, mb->m.frames) |
              arena_own(a, mb->m.stack_nodes) | arena_own(a, (void *)mb->m.categories);
    for (size_t t = 0; t < mb->m.thread_count; t++) {
        own |= arena_own(a, mb->m.threads[t].slices) | arena_own(a, mb->m.threads[t].instants) |
               arena_own(a, mb->m.threads[t].off_cpu) | arena_own(a, mb->m.threads[t].slice_args);
    }
    (void)own;
    *m = mb->m;
    m->loupe__arena = a;
    free_maps(perms, nthreads);
    free_maps(ptracks, nthreads);
    free(mb->tcaps);
    free(mb->itab);
    free(mb->flows);
    free_tables(mb);
    free(mb);
    return m;
fail:
    free_maps(perms, nthreads);
    free_maps(ptracks, nthreads);
    loupe__mb_abort(mb);
    return NULL;
}

void loupe__mb_abort(loupe__mb *mb) {
    if (mb == NULL) {
        return;
    }
    /* The arrays are handed to the arena only by a finish that succeeds. */
    for (size_t t = 0; t < mb->m.thread_count; t++) {
        free(mb->m.threads[t].slices);
        free(mb->m.threads[t].instants);
        free(mb->m.threads[t].off_cpu);
        free(mb->m.threads[t].slice_args);
    }
    free(mb->m.threads);
    free((void *)mb->m.categories);
    free(mb->m.counters);
    free(mb->m.flows);
    free(mb->m.metadata);
    free((void *)mb->m.warnings);
    free(mb->m.processes);
    free(mb->m.samples);
    free(mb->m.frames);
    free(mb->m.stack_nodes);
    arena_free(mb->ar);
    free(mb->tcaps);
    free(mb->itab);
    free(mb->flows);
    free_tables(mb);
    free(mb);
}

int loupe__model_warn(loupe_model *m, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    size_t len = strlen(tmp);
    /* Both go into the arena: the old array stays there until loupe_model_free(). */
    char *w = arena_alloc(m->loupe__arena, len + 1);
    const char **v = arena_alloc(m->loupe__arena, (m->warning_count + 1) * sizeof(*v));
    if (w == NULL || v == NULL) {
        return mb_oom();
    }
    memcpy(w, tmp, len + 1);
    if (m->warning_count > 0) {
        memcpy(v, m->warnings, m->warning_count * sizeof(*v));
    }
    v[m->warning_count++] = w;
    m->warnings = v;
    return 0;
}

void loupe_model_free(loupe_model *m) {
    if (m == NULL) {
        return;
    }
    arena_free(m->loupe__arena);
    free(m);
}

uint64_t loupe_model_events_recorded(const loupe_model *m) {
    uint64_t n = 0;
    for (size_t i = 0; i < m->thread_count; i++) {
        n += m->threads[i].events_recorded;
    }
    return n;
}

uint64_t loupe_model_events_dropped(const loupe_model *m) {
    uint64_t n = 0;
    for (size_t i = 0; i < m->thread_count; i++) {
        n += m->threads[i].events_dropped;
    }
    return n;
}

const loupe_arg *loupe_slice_args(const loupe_model_thread *th, size_t slice, size_t *count) {
    *count = 0;
    if (slice >= th->slice_count || !(th->slices[slice].flags & LOUPE_SLICE_HAS_ARGS)) {
        return NULL;
    }
    size_t lo = 0, hi = th->slice_arg_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (th->slice_args[mid].slice < slice) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == th->slice_arg_count || th->slice_args[lo].slice != slice) {
        return NULL; /* a track built by hand, or a view whose slices were copied without them */
    }
    *count = th->slice_args[lo].count;
    return th->slice_args[lo].args;
}

const char *loupe_slice_category(const loupe_model *m, const loupe_slice *s) {
    return s->category < m->category_count ? m->categories[s->category] : "";
}
