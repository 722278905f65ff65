/* collect.c: the collector. At stop it walks every thread buffer recorded under the session's
 * state word and builds the trace model: ticks → ns (trace-relative, per-thread monotonic),
 * begins paired with ends, zones still open closed at the stop and marked truncated, names
 * interned (a pointer cache first: a static srcloc's name is hashed once, not per event),
 * function addresses symbolised, flows paired by id, loss accounted per thread.
 *
 * Pairing rule (keeps bad ends from corrupting good zones): an end closes the innermost open zone
 * when it matches it (same srcloc / dynamic / same function). When it matches a zone deeper in
 * the stack, the zones above it lost their ends (an early return, a longjmp): they are closed at
 * this time and marked truncated. An end that matches nothing open is counted as unmatched and
 * ignored. In a ring that wrapped, an end whose begin was overwritten becomes a slice from the
 * first retained timestamp, marked truncated.
 */
#include "model/collect.h"

#include "annotate/record.h"
#include "model/builder.h"

#include <stdlib.h>
#include <string.h>

/* A pointer → interned string cache (open addressing). */
typedef struct pcache {
    uintptr_t *keys;
    const char **vals;
    size_t cap, count;
} pcache;

static const char *pc_get(pcache *c, uintptr_t k) {
    if (c->cap == 0) {
        return NULL;
    }
    size_t i = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (c->cap - 1);
    while (c->keys[i] != 0) {
        if (c->keys[i] == k) {
            return c->vals[i];
        }
        i = (i + 1) & (c->cap - 1);
    }
    return NULL;
}

static int pc_put(pcache *c, uintptr_t k, const char *v) {
    if ((c->count + 1) * 2 > c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 1024;
        uintptr_t *nk = calloc(nc, sizeof(*nk));
        const char **nv = calloc(nc, sizeof(*nv));
        if (nk == NULL || nv == NULL) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t i = 0; i < c->cap; i++) {
            if (c->keys[i] != 0) {
                size_t j = (size_t)((c->keys[i] * 0x9E3779B97F4A7C15ull) >> 20) & (nc - 1);
                while (nk[j] != 0) {
                    j = (j + 1) & (nc - 1);
                }
                nk[j] = c->keys[i];
                nv[j] = c->vals[i];
            }
        }
        free(c->keys);
        free(c->vals);
        c->keys = nk;
        c->vals = nv;
        c->cap = nc;
    }
    size_t i = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (c->cap - 1);
    while (c->keys[i] != 0 && c->keys[i] != k) {
        i = (i + 1) & (c->cap - 1);
    }
    if (c->keys[i] == 0) {
        c->count++;
    }
    c->keys[i] = k;
    c->vals[i] = v;
    return 0;
}

static void pc_free(pcache *c) {
    free(c->keys);
    free(c->vals);
}

/* Kinds of open zones on the stack. */
enum { Z_STATIC, Z_DYN, Z_FUNC };

typedef struct open_zone {
    size_t slice;
    uint64_t key; /* srcloc pointer, or function address */
    int kind;
} open_zone;

/* One end of a flow, waiting for its other end. */
typedef struct flow_end {
    uint64_t id;
    size_t thread, slice;
    int used;
} flow_end;

typedef struct collector {
    loupe__mb *mb;
    const loupe__collect_params *p;
    pcache names; /* srcloc / string pointer → interned name */
    pcache funcs; /* code address → interned symbol */
    open_zone *stack;
    size_t stack_cap;
    flow_end *outs, *ins;
    size_t nouts, nins, outs_cap, ins_cap;
    uint64_t unmatched;
} collector;

static const char *intern_ptr(collector *c, const char *s) {
    if (s == NULL) {
        return loupe__mb_str(c->mb, "");
    }
    const char *v = pc_get(&c->names, (uintptr_t)s);
    if (v == NULL) {
        v = loupe__mb_str(c->mb, s);
        if (pc_put(&c->names, (uintptr_t)s, v) != 0) {
            return v; /* not cached: still correct */
        }
    }
    return v;
}

static const char *intern_func(collector *c, uint64_t addr) {
    const char *v = pc_get(&c->funcs, (uintptr_t)addr);
    if (v == NULL) {
        char buf[512];
        loupe__symbolize((uintptr_t)addr, buf, sizeof buf);
        v = loupe__mb_str(c->mb, buf);
        (void)pc_put(&c->funcs, (uintptr_t)addr, v);
    }
    return v;
}

/* Decodes a copied string of len bytes from the K_STR slots at slots[i..]; returns the number of
 * slots it took (or the ones available, when a straggler left it incomplete: then "" ). */
static size_t read_str(const loupe__ev *slots, size_t i, size_t n, uint64_t len, char *out) {
    size_t need = (size_t)((len + 14) / 15);
    if (len > LOUPE_MAX_DYN_NAME || i + need > n) {
        out[0] = 0;
        return i + need > n ? n - i : 0;
    }
    for (size_t k = 0; k < need; k++) {
        uint64_t a = __atomic_load_n(&slots[i + k].a, __ATOMIC_RELAXED);
        uint64_t b = __atomic_load_n(&slots[i + k].b, __ATOMIC_RELAXED);
        if ((b & 255u) != LOUPE__K_STR) {
            out[0] = 0;
            return k; /* torn: the rest is another record */
        }
        uint64_t hi = b >> 8;
        unsigned char chunk[15];
        memcpy(chunk, &a, 8);
        memcpy(chunk + 8, &hi, 7);
        size_t take = len - k * 15 < 15 ? (size_t)(len - k * 15) : 15;
        memcpy(out + k * 15, chunk, take);
    }
    out[len] = 0;
    return need;
}

static int push_zone(collector *c, size_t depth, size_t slice, uint64_t key, int kind) {
    if (depth >= c->stack_cap) {
        size_t nc = c->stack_cap ? c->stack_cap * 2 : 64;
        open_zone *n = realloc(c->stack, nc * sizeof(*n));
        if (n == NULL) {
            return -1;
        }
        c->stack = n;
        c->stack_cap = nc;
    }
    c->stack[depth] = (open_zone){slice, key, kind};
    return 0;
}

static int add_flow_end(flow_end **arr, size_t *n, size_t *cap, uint64_t id, size_t th, size_t sl) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        flow_end *a = realloc(*arr, nc * sizeof(**arr));
        if (a == NULL) {
            return -1;
        }
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = (flow_end){id, th, sl, 0};
    return 0;
}

static uint64_t to_ns(const loupe__collect_params *p, uint64_t ticks) {
    if (ticks <= p->start_ticks) {
        return 0;
    }
    return (uint64_t)((double)(ticks - p->start_ticks) / p->ticks_per_ns + 0.5);
}

/* Walks one thread's slots [from, to) in order. */
static int walk(collector *c, size_t ti, const loupe__ev *slots, size_t n, int wrapped,
                uint64_t *last_ns) {
    char str[LOUPE_MAX_DYN_NAME + 16];
    loupe__mb *mb = c->mb;
    size_t depth = 0;
    uint64_t prev = 0;
    uint64_t first_ns = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = __atomic_load_n(&slots[i].a, __ATOMIC_RELAXED);
        uint64_t b = __atomic_load_n(&slots[i].b, __ATOMIC_RELAXED);
        unsigned kind = (unsigned)(b & 15u);
        if (kind == LOUPE__K_PAD || kind == LOUPE__K_EXT_DATA || kind == LOUPE__K_STR) {
            continue; /* padding, or the tail of a record whose head a ring overwrote */
        }
        unsigned sub = (unsigned)(b >> 8) & 0xffu;
        if (kind == LOUPE__K_EXT &&
            (sub == LOUPE__EXT_ARG || sub == LOUPE__EXT_FLOW_OUT || sub == LOUPE__EXT_FLOW_IN)) {
            a = 0; /* no timestamp: these attach to the open zone */
        }
        uint64_t ns = a == 0 && kind == LOUPE__K_EXT ? prev : to_ns(c->p, a);
        if (ns < prev) {
            ns = prev; /* per-thread timestamps never go backwards */
        }
        if (ns > c->p->stop_ns) {
            ns = c->p->stop_ns;
        }
        prev = ns;
        if (first_ns == UINT64_MAX) {
            first_ns = ns;
        }
        switch (kind) {
        case LOUPE__K_BEGIN:
        case LOUPE__K_BEGIN_DYN:
        case LOUPE__K_FUNC_ENTER: {
            size_t si = loupe__mb_slice(mb, ti);
            if (si == SIZE_MAX) {
                return -1;
            }
            loupe_slice *s = loupe__mb_slice_at(mb, ti, si);
            s->start_ns = ns;
            int zk;
            uint64_t key;
            if (kind == LOUPE__K_BEGIN) {
                const loupe_srcloc *sl = (const loupe_srcloc *)(uintptr_t)b;
                s->name = intern_ptr(c, sl->name);
                zk = Z_STATIC;
                key = b;
            } else if (kind == LOUPE__K_BEGIN_DYN) {
                i += read_str(slots, i + 1, n, b >> 4, str);
                s->name = loupe__mb_str(mb, str);
                zk = Z_DYN;
                key = 0;
            } else {
                key = b >> 4;
                s->name = intern_func(c, key);
                s->category = loupe__mb_str(mb, "function");
                s->flags |= LOUPE_SLICE_FUNCTION;
                zk = Z_FUNC;
            }
            s->dur_ns = UINT64_MAX; /* open */
            if (push_zone(c, depth, si, key, zk) != 0) {
                return -1;
            }
            depth++;
            break;
        }
        case LOUPE__K_END:
        case LOUPE__K_FUNC_EXIT: {
            int zk = kind == LOUPE__K_FUNC_EXIT ? Z_FUNC : (b == LOUPE__K_END ? Z_DYN : Z_STATIC);
            uint64_t key = zk == Z_FUNC ? b >> 4 : (zk == Z_STATIC ? (b & ~(uint64_t)15) : 0);
            size_t d = depth;
            while (d > 0 && !(c->stack[d - 1].kind == zk && c->stack[d - 1].key == key)) {
                d--;
            }
            if (d == 0) {
                if (wrapped && zk == Z_STATIC) {
                    /* The begin was overwritten by the ring: keep the end's zone. */
                    size_t si = loupe__mb_slice(mb, ti);
                    if (si == SIZE_MAX) {
                        return -1;
                    }
                    loupe_slice *s = loupe__mb_slice_at(mb, ti, si);
                    const loupe_srcloc *sl = (const loupe_srcloc *)(uintptr_t)key;
                    s->name = intern_ptr(c, sl->name);
                    s->start_ns = first_ns;
                    s->dur_ns = ns - first_ns;
                    s->flags |= LOUPE_SLICE_TRUNCATED;
                } else if (!wrapped) {
                    c->unmatched++;
                }
                break;
            }
            /* Zones above the match lost their ends: close them here, truncated. */
            while (depth > d) {
                loupe_slice *s = loupe__mb_slice_at(mb, ti, c->stack[depth - 1].slice);
                s->dur_ns = ns - s->start_ns;
                s->flags |= LOUPE_SLICE_TRUNCATED;
                depth--;
            }
            loupe_slice *s = loupe__mb_slice_at(mb, ti, c->stack[d - 1].slice);
            s->dur_ns = ns - s->start_ns;
            depth = d - 1;
            break;
        }
        case LOUPE__K_EXT: {
            if (i + 1 >= n) {
                break; /* the straggler's half-written record */
            }
            uint64_t va = __atomic_load_n(&slots[i + 1].a, __ATOMIC_RELAXED);
            uint64_t vb = __atomic_load_n(&slots[i + 1].b, __ATOMIC_RELAXED);
            i++;
            if ((vb & 15u) != LOUPE__K_EXT_DATA) {
                i--; /* not a pair: skip the first slot only */
                break;
            }
            unsigned flags = (unsigned)(b >> 4) & 15u;
            const char *ref = (const char *)(uintptr_t)(vb >> 4);
            if (sub == LOUPE__EXT_ARG) {
                if (flags == LOUPE_ARG_STRING) {
                    i += read_str(slots, i + 1, n, va, str);
                }
                if (depth == 0) {
                    break; /* no zone open: nothing to attach to */
                }
                loupe_arg arg = {intern_ptr(c, ref), (loupe_arg_type)flags, {.u = va}};
                if (flags == LOUPE_ARG_STRING) {
                    arg.v.s = str;
                }
                if (loupe__mb_slice_add_arg(mb, ti, c->stack[depth - 1].slice, &arg) != 0) {
                    return -1;
                }
            } else if (sub == LOUPE__EXT_INSTANT) {
                if (loupe__mb_instant(mb, ti, ns, intern_ptr(c, ref), NULL, 0) != 0) {
                    return -1;
                }
            } else if (sub == LOUPE__EXT_COUNTER_I64 || sub == LOUPE__EXT_COUNTER_F64) {
                loupe_counter_sample cs = {ns, intern_ptr(c, ref), sub == LOUPE__EXT_COUNTER_F64,
                                           (int64_t)va, 0};
                if (cs.is_double) {
                    memcpy(&cs.d, &va, sizeof cs.d);
                    cs.i = 0;
                }
                if (loupe__mb_counter(mb, &cs) != 0) {
                    return -1;
                }
            } else if (sub == LOUPE__EXT_FLOW_OUT || sub == LOUPE__EXT_FLOW_IN) {
                if (depth == 0) {
                    break;
                }
                size_t sl = c->stack[depth - 1].slice;
                int r = sub == LOUPE__EXT_FLOW_OUT
                            ? add_flow_end(&c->outs, &c->nouts, &c->outs_cap, va, ti, sl)
                            : add_flow_end(&c->ins, &c->nins, &c->ins_cap, va, ti, sl);
                if (r != 0) {
                    return -1;
                }
            }
            break;
        }
        default:
            break;
        }
    }
    /* Zones still open at the stop end there, marked truncated. */
    while (depth > 0) {
        loupe_slice *s = loupe__mb_slice_at(mb, ti, c->stack[depth - 1].slice);
        s->dur_ns = c->p->stop_ns - s->start_ns;
        s->flags |= LOUPE_SLICE_TRUNCATED;
        depth--;
    }
    *last_ns = prev;
    return 0;
}

static int cmp_flow(const void *pa, const void *pb) {
    const flow_end *a = pa, *b = pb;
    return a->id < b->id ? -1 : (a->id > b->id);
}

static int pair_flows(collector *c) {
    if (c->nouts == 0 || c->nins == 0) {
        return 0; /* a flow end without its other end is not an arrow */
    }
    qsort(c->outs, c->nouts, sizeof(flow_end), cmp_flow);
    qsort(c->ins, c->nins, sizeof(flow_end), cmp_flow);
    size_t i = 0, j = 0;
    while (i < c->nouts && j < c->nins) {
        if (c->outs[i].id < c->ins[j].id) {
            i++;
        } else if (c->outs[i].id > c->ins[j].id) {
            j++;
        } else {
            if (loupe__mb_flow(c->mb, c->outs[i].id, c->outs[i].thread, c->outs[i].slice,
                               c->ins[j].thread, c->ins[j].slice) != 0) {
                return -1;
            }
            i++;
            j++;
        }
    }
    return 0;
}

/* Copies a wrapped ring oldest-first and discards what a straggler may have overwritten while
 * it was copied (cur/wraps re-read afterwards, as a seqlock reader would). */
static loupe__ev *ring_copy(const loupe__thread *t, size_t *n_out) {
    loupe__ev *cur0 = __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE);
    uint64_t w0 = __atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE);
    size_t cap = (size_t)t->cap, pos = (size_t)(cur0 - t->base);
    loupe__ev *copy = malloc(cap * sizeof(loupe__ev));
    if (copy == NULL) {
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < cap; i++) {
        const loupe__ev *e = &t->base[(pos + i) % cap];
        copy[k].a = __atomic_load_n(&e->a, __ATOMIC_RELAXED);
        copy[k].b = __atomic_load_n(&e->b, __ATOMIC_RELAXED);
        k++;
    }
    loupe__ev *cur1 = __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE);
    uint64_t w1 = __atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE);
    size_t over = (size_t)((w1 - w0) * cap + (size_t)(cur1 - t->base)) - pos;
    if (over > cap) {
        over = cap;
    }
    /* The first `over` copied slots may be torn: drop them. */
    memmove(copy, copy + over, (cap - over) * sizeof(loupe__ev));
    *n_out = cap - over;
    return copy;
}

loupe_model *loupe__collect(const loupe__collect_params *p) {
    collector c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.mb = loupe__mb_new();
    if (c.mb == NULL) {
        return NULL;
    }
    loupe_model *m = loupe__mb_model(c.mb);
    m->pid = p->pid;
    m->process_name = loupe__mb_str(c.mb, p->process_name);
    m->host = loupe__mb_str(c.mb, p->host);
    m->origin_unix_ns = p->origin_unix_ns;
    m->duration_ns = p->stop_ns;
    m->clock = loupe__mb_str(c.mb, p->use_tsc ? "tsc" : "monotonic");
    m->tsc_ghz = p->use_tsc ? p->ticks_per_ns : 0.0;
    for (size_t i = 0; i < p->metadata_count; i++) {
        loupe__mb_metadata(c.mb, p->metadata[i].key, p->metadata[i].value);
    }
    int failed = 0;
    /* Oldest registered last in the list: walk it into an array to keep a stable order. */
    size_t nt = 0;
    for (loupe__thread *t = loupe__threads; t != NULL; t = t->next) {
        nt++;
    }
    loupe__thread **ts = calloc(nt ? nt : 1, sizeof(*ts));
    if (ts == NULL) {
        loupe__mb_abort(c.mb);
        return NULL;
    }
    size_t k = nt;
    for (loupe__thread *t = loupe__threads; t != NULL; t = t->next) {
        ts[--k] = t;
    }
    for (size_t i = 0; i < nt && !failed; i++) {
        loupe__thread *t = ts[i];
        if (__atomic_load_n(&t->hot.state, __ATOMIC_ACQUIRE) != p->state) {
            continue; /* recorded nothing in this session */
        }
        size_t ti = loupe__mb_thread(c.mb, t->tid);
        if (ti == SIZE_MAX) {
            failed = 1;
            break;
        }
        loupe__mb_thread_name(c.mb, ti, t->name);
        uint64_t dropped = __atomic_load_n(&t->dropped, __ATOMIC_RELAXED);
        uint64_t wraps = __atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE);
        const loupe__ev *slots;
        loupe__ev *copy = NULL;
        size_t n;
        uint64_t total;
        if (t->ring && wraps > 0) {
            copy = ring_copy(t, &n);
            if (copy == NULL) {
                failed = 1;
                break;
            }
            slots = copy;
            loupe__ev *cur = __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE);
            total = wraps * t->cap + (uint64_t)(cur - t->base);
            dropped += total - n;
        } else {
            loupe__ev *cur = __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE);
            slots = t->base;
            n = (size_t)(cur - t->base);
            total = n;
        }
        uint64_t last = 0;
        if (walk(&c, ti, slots, n, t->ring && wraps > 0, &last) != 0) {
            failed = 1;
        }
        free(copy);
        loupe_model_thread *th = loupe__mb_thread_at(c.mb, ti);
        th->events_recorded = n;
        th->events_dropped = dropped;
        th->capacity_needed = (t->ring ? total : n + dropped);
    }
    free(ts);
    if (!failed) {
        failed = pair_flows(&c) != 0;
    }
    m->unmatched_ends = c.unmatched;
    pc_free(&c.names);
    pc_free(&c.funcs);
    free(c.stack);
    free(c.outs);
    free(c.ins);
    if (failed) {
        loupe__mb_abort(c.mb);
        return NULL;
    }
    return loupe__mb_finish(c.mb);
}
