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
 * ignored. A function's exit marked LOUPE__FUNC_CUT (record.c found the call gone: a longjmp
 * out of it) closes it the same way, and marks it truncated too. In a ring that wrapped, an end
 * whose begin was overwritten becomes a slice from the first retained timestamp, marked
 * truncated.
 *
 * Async slices (annotate.h: loupe_async_begin) are gathered from every thread and paired after
 * the walk, by id and then time (an end closes the latest unended begin of its id); each name
 * gets one process-level LOUPE_TRACK_ASYNC track, tid LOUPE__ASYNC_TID + k (k = 0, 1, ... in
 * order of first begin): above any Linux tid (at most 2^22), so no writer's (pid, tid) key mixes
 * one with a thread. Unmatched ends are counted with the zones' ones; begins never ended end at
 * the stop, truncated.
 */
#include "record/collect.h"

#include "base/array.h"
#include "base/error.h"
#include "base/ownfd.h"
#include "model/builder.h"
#include "record/names.h"
#include "record/record.h"
#include "record/spool.h"

#include <assert.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    size_t slice; /* SIZE_MAX: a filtered call (no slice), open only to pair its exit */
    uint64_t key; /* srcloc pointer, or function address */
    int kind;
    int match; /* a call whose symbol matches func_include: the calls inside it are kept */
} open_zone;

/* One end of a flow, waiting for its other end. */
typedef struct flow_end {
    uint64_t id;
    size_t thread, slice;
    int used;
} flow_end;

/* One async record, waiting to be paired (name NULL for an end). */
typedef struct async_ev {
    uint64_t ns, id;
    const char *name;
    size_t seq;
} async_ev;

#define LOUPE__ASYNC_TID (1ull << 40)

typedef struct mapping {
    uintptr_t lo, hi;
} mapping;

typedef struct collector {
    loupe__mb *mb;
    const loupe__collect_params *p;
    pcache names;      /* srcloc / string pointer → interned name */
    pcache funcs;      /* code address → interned symbol */
    pcache fdec;       /* code address → its filter decision (func_decision) */
    uint64_t filtered; /* function calls the filters dropped */
    open_zone *stack;
    size_t stack_cap;
    flow_end *outs, *ins;
    size_t nouts, nins, outs_cap, ins_cap;
    uint64_t unmatched;
    mapping *maps; /* readable mappings, sorted: static names of unloaded libraries are not */
    size_t nmaps;
    uint64_t reentered; /* events dropped as re-entered calls (signal handlers, allocators) */
    int ring;           /* a thread recorded under keep-last (its drops are its oldest events) */
    uint64_t cut;       /* copied strings cut to fit */
    void *rg;           /* the region read */
    int foreign;        /* a dead program's region: no pointer of it is followed */
    uint64_t last_ns;   /* the latest event of any thread (foreign: the trace's end) */
    async_ev *asyncs;   /* async begins and ends of every thread */
    size_t nasync, async_cap;
} collector;

/* A pointer stored in the region, as this process can read it (foreign: rebased; NULL when it
 * points outside the region's chunks). */
static const loupe__ev *local_ptr(const collector *c, const loupe__ev *p) {
    if (!c->foreign || p == NULL) {
        return p;
    }
    const loupe__region_hdr *h = c->rg;
    uint64_t a = (uint64_t)(uintptr_t)p, lo = h->base_addr + h->chunk_off;
    uint64_t hi = lo + h->nchunks * LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
    if (a < lo || a > hi || (a - lo) % sizeof(loupe__ev) != 0) {
        return NULL;
    }
    return (const loupe__ev *)(const void *)((const char *)c->rg + (a - h->base_addr));
}

/* A name the dead program's events point at, from the region's name table. */
static const char *foreign_name(collector *c, int kind, uint64_t addr) {
    const char *n = loupe__names_find(c->rg, kind, addr);
    if (n != NULL) {
        return loupe__mb_str(c->mb, n);
    }
    char buf[64];
    snprintf(buf, sizeof buf, kind == LOUPE__NAME_FUNC ? "0x%llx" : "(name lost 0x%llx)",
             (unsigned long long)addr);
    return loupe__mb_str(c->mb, buf);
}

/* The process's readable mappings (/proc/self/maps), sorted by address. */
static mapping *read_maps(size_t *n) {
    *n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        return NULL;
    }
    mapping *m = NULL;
    size_t cap = 0;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r') {
            continue;
        }
        if (loupe__grow((void **)&m, &cap, *n + 1, sizeof(*m)) != 0) {
            break;
        }
        m[(*n)++] = (mapping){(uintptr_t)lo, (uintptr_t)hi};
    }
    fclose(f);
    return m;
}

/* The end of the readable mapping holding p, or 0 when p is not readable. Without a map of the
 * process (no /proc), everything is assumed readable. */
static uintptr_t readable_end(const collector *c, uintptr_t p) {
    if (c->maps == NULL) {
        return UINTPTR_MAX;
    }
    size_t lo = 0, hi = c->nmaps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->maps[mid].hi <= p) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo < c->nmaps && c->maps[lo].lo <= p) {
        /* adjacent readable mappings continue the range */
        uintptr_t end = c->maps[lo].hi;
        for (size_t k = lo + 1; k < c->nmaps && c->maps[k].lo == end; k++) {
            end = c->maps[k].hi;
        }
        return end;
    }
    return 0;
}

/* A name copied into the region's table during this session (the keeper's scans under `loupe
 * record`, a dlclose()): what the pointer held then, which is right even when its library is gone
 * and something else is mapped there now. NULL when none was copied. */
static const char *kept_name(collector *c, int kind, uint64_t addr) {
    const char *n = loupe__names_find(c->rg, kind, addr);
    return n != NULL ? loupe__mb_str(c->mb, n) : NULL;
}

static const char *intern_ptr(collector *c, const char *s) {
    if (s == NULL) {
        return loupe__mb_str(c->mb, "");
    }
    if (c->foreign) {
        return foreign_name(c, LOUPE__NAME_STR, (uint64_t)(uintptr_t)s);
    }
    const char *v = pc_get(&c->names, (uintptr_t)s);
    if (v == NULL && (v = kept_name(c, LOUPE__NAME_STR, (uint64_t)(uintptr_t)s)) != NULL) {
        (void)pc_put(&c->names, (uintptr_t)s, v);
    } else if (v == NULL) {
        uintptr_t end = readable_end(c, (uintptr_t)s);
        size_t max = end > (uintptr_t)s ? (size_t)(end - (uintptr_t)s) : 0;
        if (max == 0 || memchr(s, 0, max) == NULL) {
            v = loupe__mb_str(c->mb, "(unloaded)"); /* its library was dlclose()d */
        } else {
            v = loupe__mb_str(c->mb, s);
        }
        if (pc_put(&c->names, (uintptr_t)s, v) != 0) {
            return v; /* not cached: still correct */
        }
    }
    return v;
}

/* A static zone's name, or "(unloaded)" when its srcloc's library is gone. */
static const char *srcloc_name(collector *c, const loupe_srcloc *sl) {
    if (c->foreign) {
        return foreign_name(c, LOUPE__NAME_SRCLOC, (uint64_t)(uintptr_t)sl);
    }
    const char *kept = kept_name(c, LOUPE__NAME_SRCLOC, (uint64_t)(uintptr_t)sl);
    if (kept != NULL) {
        return kept;
    }
    uintptr_t end = readable_end(c, (uintptr_t)sl);
    if (end < (uintptr_t)sl + sizeof(*sl)) {
        return loupe__mb_str(c->mb, "(unloaded)");
    }
    return intern_ptr(c, sl->name);
}

static const char *intern_func(collector *c, uint64_t addr) {
    if (c->foreign) {
        return foreign_name(c, LOUPE__NAME_FUNC, addr);
    }
    const char *v = pc_get(&c->funcs, (uintptr_t)addr);
    if (v == NULL && (v = kept_name(c, LOUPE__NAME_FUNC, addr)) != NULL) {
        (void)pc_put(&c->funcs, (uintptr_t)addr, v);
    } else if (v == NULL) {
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

static int push_zone(collector *c, size_t depth, size_t slice, uint64_t key, int kind, int match) {
    if (loupe__grow((void **)&c->stack, &c->stack_cap, depth + 1, sizeof(open_zone)) != 0) {
        return -1;
    }
    c->stack[depth] = (open_zone){slice, key, kind, match};
    return 0;
}

/* The innermost open zone at or above stack index lo that has a slice, as a stack index;
 * SIZE_MAX when every one is a filtered call. */
static size_t top_real(const collector *c, size_t lo, size_t depth) {
    while (depth > lo) {
        if (c->stack[depth - 1].slice != SIZE_MAX) {
            return depth - 1;
        }
        depth--;
    }
    return SIZE_MAX;
}

static int any_glob(const char *const *globs, const char *name) {
    for (size_t i = 0; globs != NULL && globs[i] != NULL; i++) {
        if (fnmatch(globs[i], name, 0) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A function's filter decision, once per address: FD_INCLUDE when its symbol matches
 * func_include, FD_EXCLUDE when it matches func_exclude. */
enum { FD_INCLUDE = 1, FD_EXCLUDE = 2 };
static unsigned func_decision(collector *c, uint64_t addr) {
    static const char vals[4] = {0, 1, 2, 3}; /* the cache stores pointers: one per decision */
    const char *v = pc_get(&c->fdec, (uintptr_t)addr);
    if (v != NULL) {
        return (unsigned)*v;
    }
    const char *name = intern_func(c, addr);
    unsigned d = (any_glob(c->p->func_include, name) ? FD_INCLUDE : 0u) |
                 (any_glob(c->p->func_exclude, name) ? FD_EXCLUDE : 0u);
    (void)pc_put(&c->fdec, (uintptr_t)addr, &vals[d]);
    return d;
}

static int add_flow_end(flow_end **arr, size_t *n, size_t *cap, uint64_t id, size_t th, size_t sl) {
    if (loupe__grow((void **)arr, cap, *n + 1, sizeof(**arr)) != 0) {
        return -1;
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

/* --min-duration: removes slice si of thread ti when it is the thread's last (its callees were
 * shorter still and went first; a call that holds an annotation zone or a flow end stays).
 * 1 when removed. */
static int drop_last(collector *c, size_t ti, size_t si) {
    loupe_model_thread *th = loupe__mb_thread_at(c->mb, ti);
    if (th->slice_count == 0 || si != th->slice_count - 1) {
        return 0;
    }
    if ((c->nouts > 0 && c->outs[c->nouts - 1].thread == ti && c->outs[c->nouts - 1].slice == si) ||
        (c->nins > 0 && c->ins[c->nins - 1].thread == ti && c->ins[c->nins - 1].slice == si)) {
        return 0;
    }
    th->slice_count--; /* the next loupe__mb_slice() reuses (and zeroes) its place */
    return 1;
}

/* A thread's walk, carried across its segments (chunks, a packed tail). */
typedef struct walk_state {
    size_t depth;
    uint64_t prev;
    uint64_t first_ns;
    int done;       /* an event after the stop was met: the rest is not this session's */
    uint64_t cut;   /* copied strings cut to fit */
    size_t matched; /* open zones with match set: their callees pass func_include */
} walk_state;

/* Attaches an argument (the one-slot K_ARG record at slots[*i], or the two-slot EXT_ARG whose
 * second slot is at *i) to the innermost recorded zone open: type and value as recorded, key the
 * key's pointer; a string's value is its length and cut flag, its bytes in the K_STR slots after
 * *i, which *i moves past. 0, or -1 when out of memory. */
static int add_arg(collector *c, size_t ti, const loupe__ev *slots, size_t *i, size_t n,
                   size_t depth, uint64_t value, unsigned type, const char *key, char *str,
                   walk_state *ws) {
    if (type == LOUPE_ARG_STRING) {
        ws->cut += value >> 63;
        value &= ~(1ull << 63);
        *i += read_str(slots, *i + 1, n, value, str);
    }
    size_t tz = top_real(c, 0, depth);
    if (tz == SIZE_MAX) {
        return 0; /* no zone open: nothing to attach to */
    }
    loupe_arg arg = {intern_ptr(c, key), (loupe_arg_type)type, {.u = value}};
    if (type == LOUPE_ARG_STRING) {
        arg.v.s = str;
    }
    return loupe__mb_slice_add_arg(c->mb, ti, c->stack[tz].slice, &arg);
}

/* Walks the slots [0, n) of one segment of a thread, in order. */
static int walk(collector *c, size_t ti, const loupe__ev *slots, size_t n, int wrapped,
                walk_state *ws) {
    char str[LOUPE_MAX_DYN_NAME + 16];
    loupe__mb *mb = c->mb;
    size_t depth = ws->depth;
    uint64_t prev = ws->prev;
    uint64_t first_ns = ws->first_ns;
    for (size_t i = 0; i < n && !ws->done; i++) {
        uint64_t a = __atomic_load_n(&slots[i].a, __ATOMIC_RELAXED);
        uint64_t b = __atomic_load_n(&slots[i].b, __ATOMIC_RELAXED);
        unsigned kind = (unsigned)(b & 15u);
        if (kind == LOUPE__K_PAD || kind == LOUPE__K_EXT_DATA || kind == LOUPE__K_STR) {
            continue; /* padding, or the tail of a record whose head a ring overwrote */
        }
        if (kind == LOUPE__K_ARG) { /* a = the value, not a timestamp */
            if (add_arg(c, ti, slots, &i, n, depth, a, (unsigned)(b >> 4) & 15u,
                        (const char *)(uintptr_t)(b >> 8), str, ws) != 0) {
                return -1;
            }
            continue;
        }
        unsigned sub = (unsigned)(b >> 8) & 0xffu;
        if (kind == LOUPE__K_EXT &&
            (sub == LOUPE__EXT_ARG || sub == LOUPE__EXT_FLOW_OUT || sub == LOUPE__EXT_FLOW_IN)) {
            a = 0; /* no timestamp: these attach to the open zone */
        }
        if (a != 0 && a > c->p->stop_ticks) {
            ws->done = 1; /* recorded by a thread that passed the gate as it closed: after the
                             stop, so not shown (its zones open here end at the stop) */
            break;
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
            int match = 0;
            if (kind == LOUPE__K_FUNC_ENTER && c->p->func_filtering) {
                unsigned d = func_decision(c, b >> 4);
                match = (d & FD_INCLUDE) != 0;
                int in = match || c->p->func_include == NULL || ws->matched > 0;
                if (!in || (d & FD_EXCLUDE)) { /* open without a slice, to pair its exit */
                    if (push_zone(c, depth, SIZE_MAX, b >> 4, Z_FUNC, match) != 0) {
                        return -1;
                    }
                    ws->matched += (size_t)match;
                    c->filtered++;
                    depth++;
                    break;
                }
            }
            size_t si = loupe__mb_slice(mb, ti);
            if (si == SIZE_MAX) {
                return -1;
            }
            loupe_slice *s = loupe__mb_slice_at(mb, ti, si);
            s->start_ns = ns;
            int zk;
            uint64_t key;
            if (kind == LOUPE__K_BEGIN) {
                s->name = srcloc_name(c, (const loupe_srcloc *)(uintptr_t)b);
                zk = Z_STATIC;
                key = b;
            } else if (kind == LOUPE__K_BEGIN_DYN) {
                i += read_str(slots, i + 1, n, (b >> 4) & 0xffffffffu, str);
                s->name = loupe__mb_str(mb, str);
                ws->cut += b >> 63;
                zk = Z_DYN;
                key = 0;
            } else {
                key = b >> 4;
                s->name = intern_func(c, key);
                loupe__mb_slice_category(mb, ti, si, "function");
                s->flags |= LOUPE_SLICE_FUNCTION;
                zk = Z_FUNC;
            }
            s->dur_ns = UINT64_MAX; /* open */
            if (push_zone(c, depth, si, key, zk, match) != 0) {
                return -1;
            }
            ws->matched += (size_t)match;
            depth++;
            break;
        }
        case LOUPE__K_END:
        case LOUPE__K_FUNC_EXIT: {
            int zk = kind == LOUPE__K_FUNC_EXIT ? Z_FUNC : (b == LOUPE__K_END ? Z_DYN : Z_STATIC);
            /* a call found gone (record.c's stack of open calls): closed here, truncated */
            int cut = zk == Z_FUNC && (b & LOUPE__FUNC_CUT) != 0;
            uint64_t key = zk == Z_FUNC ? (b & ~LOUPE__FUNC_CUT) >> 4
                                        : (zk == Z_STATIC ? (b & ~(uint64_t)15) : 0);
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
                    s->name = srcloc_name(c, (const loupe_srcloc *)(uintptr_t)key);
                    s->start_ns = first_ns;
                    s->dur_ns = ns - first_ns;
                    s->flags |= LOUPE_SLICE_TRUNCATED;
                } else if (!wrapped) {
                    c->unmatched++;
                }
                break;
            }
            /* Zones above the match lost their ends: close them here, truncated. Their end must
             * come after the innermost one's start, or that zone ([t, t]) would read as a
             * sibling of its parent in every format: when the per-thread clamp made them equal
             * (the TSC of another core behind after a migration), the end moves 1 ns later. */
            size_t tr = top_real(c, d, depth);
            if (tr != SIZE_MAX) {
                const loupe_slice *top = loupe__mb_slice_at(mb, ti, c->stack[tr].slice);
                if (ns <= top->start_ns && ns < c->p->stop_ns) {
                    ns = top->start_ns + 1;
                    prev = ns;
                }
            }
            while (depth > d) {
                const open_zone *z = &c->stack[depth - 1];
                if (z->slice != SIZE_MAX) {
                    loupe_slice *s = loupe__mb_slice_at(mb, ti, z->slice);
                    s->dur_ns = ns - s->start_ns;
                    s->flags |= LOUPE_SLICE_TRUNCATED;
                }
                ws->matched -= (size_t)z->match;
                depth--;
            }
            const open_zone *z = &c->stack[d - 1];
            ws->matched -= (size_t)z->match;
            depth = d - 1;
            if (z->slice == SIZE_MAX) {
                break; /* a filtered call: counted at its enter */
            }
            loupe_slice *s = loupe__mb_slice_at(mb, ti, z->slice);
            s->dur_ns = ns - s->start_ns;
            if (cut) {
                s->flags |= LOUPE_SLICE_TRUNCATED;
            } else if (zk == Z_FUNC && s->dur_ns < c->p->func_min_ns &&
                       drop_last(c, ti, z->slice)) {
                c->filtered++;
            }
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
            if (sub == LOUPE__EXT_ARG) { /* the two-slot form: a key that does not fit K_ARG */
                if (add_arg(c, ti, slots, &i, n, depth, va, flags, ref, str, ws) != 0) {
                    return -1;
                }
            } else if (sub == LOUPE__EXT_INSTANT) {
                if (loupe__mb_instant(mb, ti, ns, intern_ptr(c, ref), NULL, 0) != 0) {
                    return -1;
                }
            } else if (sub == LOUPE__EXT_COUNTER_I64 || sub == LOUPE__EXT_COUNTER_F64) {
                loupe_counter_sample cs = {
                    ns, intern_ptr(c, ref), sub == LOUPE__EXT_COUNTER_F64, (int64_t)va, 0, 0};
                if (cs.is_double) {
                    memcpy(&cs.d, &va, sizeof cs.d);
                    cs.i = 0;
                }
                if (loupe__mb_counter(mb, &cs) != 0) {
                    return -1;
                }
            } else if (sub == LOUPE__EXT_ASYNC_BEGIN || sub == LOUPE__EXT_ASYNC_END) {
                const char *name = NULL;
                if (sub == LOUPE__EXT_ASYNC_BEGIN && (flags & LOUPE__ASYNC_DYN)) {
                    ws->cut += (b >> 28) & 1u;
                    i += read_str(slots, i + 1, n, (b >> 16) & 0xfffu, str);
                    name = loupe__mb_str(mb, str);
                } else if (sub == LOUPE__EXT_ASYNC_BEGIN) {
                    name = intern_ptr(c, ref);
                }
                if (loupe__grow((void **)&c->asyncs, &c->async_cap, c->nasync + 1,
                                sizeof(async_ev)) != 0) {
                    return -1;
                }
                c->asyncs[c->nasync] = (async_ev){ns, va, name, c->nasync};
                c->nasync++;
            } else if (sub == LOUPE__EXT_FLOW_OUT || sub == LOUPE__EXT_FLOW_IN) {
                size_t tz = top_real(c, 0, depth);
                if (tz == SIZE_MAX) {
                    break;
                }
                size_t sl = c->stack[tz].slice;
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
    ws->depth = depth;
    ws->prev = prev;
    ws->first_ns = first_ns;
    return 0;
}

/* Zones still open at the stop (or when their thread exited) end there, truncated. */
static void walk_close(collector *c, size_t ti, walk_state *ws, uint64_t close_ns) {
    if (close_ns < ws->prev) {
        close_ns = ws->prev;
    }
    while (ws->depth > 0) {
        const open_zone *z = &c->stack[ws->depth - 1];
        if (z->slice != SIZE_MAX) {
            loupe_slice *s = loupe__mb_slice_at(c->mb, ti, z->slice);
            s->dur_ns = close_ns - s->start_ns;
            s->flags |= LOUPE_SLICE_TRUNCATED;
        }
        ws->depth--;
    }
    ws->matched = 0;
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

/* By id, then time; a begin before an end at the same time (recorded on two threads in one
 * clock tick), then the order of collection. */
static int cmp_async(const void *pa, const void *pb) {
    const async_ev *a = pa, *b = pb;
    if (a->id != b->id) {
        return a->id < b->id ? -1 : 1;
    }
    if (a->ns != b->ns) {
        return a->ns < b->ns ? -1 : 1;
    }
    if ((a->name == NULL) != (b->name == NULL)) {
        return a->name != NULL ? -1 : 1;
    }
    return a->seq < b->seq ? -1 : (a->seq > b->seq);
}

/* The async track of this (interned) name, added when missing: tracks[k] holds track indices
 * for names[k]. SIZE_MAX on OOM. */
typedef struct async_tracks {
    const char **names;
    size_t *tracks;
    size_t n, cap_names, cap_tracks;
    size_t last; /* the last hit: slices of one name come in runs */
} async_tracks;

static size_t async_track(collector *c, async_tracks *at, const char *name) {
    if (at->n > 0 && at->names[at->last] == name) {
        return at->tracks[at->last];
    }
    for (size_t k = 0; k < at->n; k++) {
        if (at->names[k] == name) {
            at->last = k;
            return at->tracks[k];
        }
    }
    if (loupe__grow((void **)&at->names, &at->cap_names, at->n + 1, sizeof(*at->names)) != 0 ||
        loupe__grow((void **)&at->tracks, &at->cap_tracks, at->n + 1, sizeof(*at->tracks)) != 0) {
        return SIZE_MAX;
    }
    size_t t = loupe__mb_thread_add(c->mb, LOUPE__ASYNC_TID + at->n);
    if (t == SIZE_MAX) {
        return SIZE_MAX;
    }
    loupe_model_thread *th = loupe__mb_thread_at(c->mb, t);
    th->kind = LOUPE_TRACK_ASYNC;
    th->name = name;
    th->process = 0;
    at->names[at->n] = name;
    at->tracks[at->n] = t;
    at->last = at->n++;
    return t;
}

/* Pairs the async records (see the top of the file); end_ns closes the slices never ended. */
static int pair_asyncs(collector *c, uint64_t end_ns) {
    if (c->nasync == 0) {
        return 0;
    }
    qsort(c->asyncs, c->nasync, sizeof(async_ev), cmp_async);
    /* pass 1: each end takes the latest open begin of its id (a stack per id, in place: open
     * begins keep their slot, matched ones get ns = UINT64_MAX as their end's mark) */
    size_t *open = malloc(c->nasync * sizeof(*open));
    uint64_t *end = malloc(c->nasync * sizeof(*end));
    async_tracks at = {NULL, NULL, 0, 0, 0, 0};
    int rc = -1;
    if (open == NULL || end == NULL) {
        goto out;
    }
    for (size_t i = 0; i < c->nasync;) {
        size_t j = i, top = 0;
        while (j < c->nasync && c->asyncs[j].id == c->asyncs[i].id) {
            const async_ev *e = &c->asyncs[j];
            if (e->name != NULL) {
                end[j] = UINT64_MAX; /* open */
                open[top++] = j;
            } else if (top > 0) {
                end[open[--top]] = e->ns;
            } else {
                c->unmatched++;
            }
            j++;
        }
        i = j;
    }
    /* pass 2: slices in the order of their first record (collection order: a stable layout) */
    for (size_t i = 0; i < c->nasync; i++) {
        open[i] = SIZE_MAX;
    }
    for (size_t i = 0; i < c->nasync; i++) {
        if (c->asyncs[i].name != NULL) {
            open[c->asyncs[i].seq] = i;
        }
    }
    for (size_t s = 0; s < c->nasync; s++) {
        size_t i = open[s];
        if (i == SIZE_MAX) {
            continue;
        }
        const async_ev *e = &c->asyncs[i];
        size_t t = async_track(c, &at, e->name);
        size_t si = t == SIZE_MAX ? SIZE_MAX : loupe__mb_slice(c->mb, t);
        if (si == SIZE_MAX) {
            goto out;
        }
        loupe_slice *sl = loupe__mb_slice_at(c->mb, t, si);
        sl->name = e->name;
        sl->start_ns = e->ns;
        uint64_t stop = end[i];
        if (stop == UINT64_MAX) {
            stop = end_ns > e->ns ? end_ns : e->ns;
            sl->flags |= LOUPE_SLICE_TRUNCATED;
        }
        sl->dur_ns = stop > e->ns ? stop - e->ns : 0;
    }
    rc = 0;
out:
    free(open);
    free(end);
    free(at.names);
    free(at.tracks);
    return rc;
}

/* Copies a wrapped one-segment ring oldest-first and discards what a straggler may have
 * overwritten while it was copied (cur/wraps re-read afterwards, as a seqlock reader would). */
static loupe__ev *ring_copy(const collector *c, const loupe__thread *t, size_t *n_out) {
    const loupe__ev *seg = local_ptr(c, t->seg);
    const loupe__ev *cur0 = local_ptr(c, __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE));
    const loupe__ev *lim = local_ptr(c, t->hot.limit);
    uint64_t w0 = __atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE);
    if (seg == NULL || cur0 == NULL || lim == NULL || cur0 < seg || lim < cur0 ||
        lim - seg > (ptrdiff_t)LOUPE__CHUNK_SLOTS) {
        *n_out = 0;
        return malloc(sizeof(loupe__ev)); /* nothing readable */
    }
    size_t cap = (size_t)(lim - seg), pos = (size_t)(cur0 - seg);
    loupe__ev *copy = malloc((cap ? cap : 1) * sizeof(loupe__ev));
    if (copy == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < cap; i++) {
        const loupe__ev *e = &seg[(pos + i) % cap];
        copy[i].a = __atomic_load_n(&e->a, __ATOMIC_RELAXED);
        copy[i].b = __atomic_load_n(&e->b, __ATOMIC_RELAXED);
    }
    const loupe__ev *cur1 = local_ptr(c, __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE));
    uint64_t w1 = __atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE);
    if (cur1 == NULL || cur1 < seg) {
        cur1 = cur0;
    }
    size_t over = (size_t)((w1 - w0) * cap + (size_t)(cur1 - seg)) - pos;
    if (over > cap) {
        over = cap;
    }
    /* The first `over` copied slots may be torn: drop them. */
    memmove(copy, copy + over, (cap - over) * sizeof(loupe__ev));
    *n_out = cap - over;
    return copy;
}

/* The calls the hooks filtered (--depth, the table), on every descriptor of the session's
 * generation: a thread whose every call was filtered never joined the session. */
static void count_filtered(loupe__thread *t, void *arg) {
    collector *c = arg;
    if (__atomic_load_n(&t->fgen, __ATOMIC_RELAXED) == (uint32_t)(c->p->state >> 16)) {
        c->filtered += __atomic_load_n(&t->func_filtered, __ATOMIC_RELAXED);
    }
}

/* The descriptors of the session, oldest registration first (stable thread order). */
typedef struct desc_list {
    loupe__thread **v;
    size_t n, cap;
    uint64_t state;
    int failed;
} desc_list;

static void gather(loupe__thread *t, void *arg) {
    desc_list *l = arg;
    if ((__atomic_load_n(&t->hot.state, __ATOMIC_ACQUIRE) & ~(uint64_t)LOUPE__STATE_NOTSC) !=
        l->state) {
        return; /* recorded nothing in this session */
    }
    if (loupe__grow((void **)&l->v, &l->cap, l->n + 1, sizeof(*l->v)) != 0) {
        l->failed = 1;
        return;
    }
    l->v[l->n++] = t;
}

static int cmp_id(const void *pa, const void *pb) {
    const loupe__thread *a = *(loupe__thread *const *)pa, *b = *(loupe__thread *const *)pb;
    return a->id < b->id ? -1 : (a->id > b->id);
}

/* The spool's chunks of one thread (spool.c), walked before its chunks in memory. */
typedef struct spool_walk {
    collector *c;
    size_t ti;
    walk_state *ws;
    uint64_t n;
} spool_walk;

static int spool_chunk(const loupe__ev *slots, size_t n, void *arg) {
    spool_walk *sw = arg;
    sw->n += n;
    return walk(sw->c, sw->ti, slots, n, 0, sw->ws);
}

/* Walks the chunks t spooled this session: from the spool's own index, or for a region read
 * from outside after its program died, from the file its header names. The events read, or -1. */
static int64_t walk_spooled(collector *c, loupe__thread *t, size_t ti, walk_state *ws) {
    if (t->ring) {
        return 0;
    }
    spool_walk sw = {c, ti, ws, 0};
    uint32_t d = loupe__desc_index(c->rg, t);
    int r = c->foreign ? loupe__spool_each_in(c->rg, d, spool_chunk, &sw)
                       : loupe__spool_each(d, spool_chunk, &sw);
    if (r != 0) {
        return -1;
    }
    return (int64_t)sw.n;
}

/* The spool's metadata: the write error that turned it off, and for a region read after its
 * program died whose spool file is gone, the chunks that were only in it. */
static int spool_metadata(collector *c) {
    const loupe__region_hdr *h = c->rg;
    if (!c->foreign && loupe__spool_error()[0] != 0) {
        return loupe__mb_metadata(c->mb, "loupe_spool_error", loupe__spool_error());
    }
    uint64_t n = __atomic_load_n(&h->spool_chunks, __ATOMIC_ACQUIRE);
    char path[sizeof h->spool_path];
    memcpy(path, h->spool_path, sizeof path);
    path[sizeof path - 1] = 0; /* a dead program's header may hold anything */
    if (c->foreign && n != 0 && access(path, R_OK) != 0) {
        char v[1200];
        snprintf(v, sizeof v, "%llu chunks were spooled to %s and are not in this recovery",
                 (unsigned long long)n, path);
        return loupe__mb_metadata(c->mb, "loupe_spool_missing", v);
    }
    return 0;
}

/* Walks one thread's chain: its chunks in order, the current one up to the published cur, or
 * its packed tail; a one-segment ring oldest-first. Fills the thread's counts. */
static int collect_thread(collector *c, loupe__thread *t, size_t ti) {
    const loupe__collect_params *p = c->p;
    void *rg = c->rg;
    const loupe__region_hdr *h = rg;
    walk_state ws = {0, 0, UINT64_MAX, 0, 0, 0};
    uint64_t wraps = __atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE);
    uint64_t recycled = __atomic_load_n(&t->recycled, __ATOMIC_ACQUIRE);
    uint64_t n = 0, total = 0;
    int r = 0;
    uint32_t tail = __atomic_load_n(&t->tail_chunk, __ATOMIC_ACQUIRE);
    int64_t spooled = walk_spooled(c, t, ti, &ws);
    if (spooled < 0) {
        return -1;
    }
    if (t->ring && wraps > 0) {
        size_t k;
        loupe__ev *copy = ring_copy(c, t, &k);
        if (copy == NULL) {
            return -1;
        }
        const loupe__ev *cur = local_ptr(c, __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE));
        const loupe__ev *seg = local_ptr(c, t->seg), *lim = local_ptr(c, t->hot.limit);
        total = k;
        if (cur != NULL && seg != NULL && lim != NULL && cur >= seg && lim >= seg) {
            total = wraps * (uint64_t)(lim - seg) + (uint64_t)(cur - seg);
        }
        n = k;
        r = walk(c, ti, copy, k, 1, &ws);
        free(copy);
    } else if (tail != LOUPE__NO_CHUNK) {
        if (tail < h->nchunks && t->tail_off <= LOUPE__CHUNK_SLOTS &&
            t->tail_n <= LOUPE__CHUNK_SLOTS - t->tail_off) {
            n = total = t->tail_n;
            r = walk(c, ti, loupe__chunk(rg, tail) + t->tail_off, t->tail_n, recycled != 0, &ws);
        }
    } else {
        uint32_t ch = t->first_chunk;
        for (uint64_t guard = 0;
             ch != LOUPE__NO_CHUNK && ch < h->nchunks && r == 0 && guard < h->nchunks; guard++) {
            const loupe__ev *base = loupe__chunk(rg, ch);
            uint64_t used;
            if (ch == t->cur_chunk) {
                const loupe__ev *cur = local_ptr(c, __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE));
                used = cur != NULL && cur >= base ? (uint64_t)(cur - base) : 0;
            } else {
                used = loupe__meta(rg, ch)->used;
            }
            if (used > LOUPE__CHUNK_SLOTS) {
                used = LOUPE__CHUNK_SLOTS;
            }
            n += used;
            r = walk(c, ti, base, (size_t)used, recycled != 0, &ws);
            if (ch == t->cur_chunk) {
                break;
            }
            ch = __atomic_load_n(&loupe__meta(rg, ch)->next, __ATOMIC_RELAXED);
        }
        total = n;
    }
    n += (uint64_t)spooled;
    total += (uint64_t)spooled;
    if (r != 0) {
        return -1;
    }
    uint64_t exit_ticks = __atomic_load_n(&t->exit_ticks, __ATOMIC_ACQUIRE);
    uint64_t close_ns = exit_ticks != 0 ? to_ns(p, exit_ticks) : p->stop_ns;
    if (close_ns > p->stop_ns) {
        close_ns = p->stop_ns;
    }
    if (c->foreign && exit_ticks == 0) {
        /* The program died: its open zones end at its last sign of life, the keeper's latest
         * clock pair (at most a millisecond before the death), or the thread's last event. */
        const loupe__region_hdr *fh = c->rg;
        uint64_t beat = to_ns(p, __atomic_load_n(&fh->rate_ticks, __ATOMIC_ACQUIRE));
        close_ns = beat > ws.prev ? beat : ws.prev;
    }
    walk_close(c, ti, &ws, close_ns);
    if (ws.prev > c->last_ns) {
        c->last_ns = ws.prev;
    }
    if (c->foreign && close_ns > c->last_ns) {
        c->last_ns = close_ns;
    }
    uint64_t dropped = __atomic_load_n(&t->dropped, __ATOMIC_RELAXED) +
                       __atomic_load_n(&t->reentered, __ATOMIC_RELAXED);
    loupe_model_thread *th = loupe__mb_thread_at(c->mb, ti);
    /* added: a thread that recorded during its own teardown has a second descriptor (the same
     * registry id), folded into this track */
    th->events_recorded += n;
    if (t->ring) {
        uint64_t lost = (wraps > 0 ? total - n : 0) + recycled;
        th->events_dropped += dropped + lost;
        th->capacity_needed += total + recycled + dropped;
    } else {
        th->events_dropped += dropped;
        th->capacity_needed += n + dropped;
    }
    c->reentered += __atomic_load_n(&t->reentered, __ATOMIC_RELAXED);
    c->ring |= t->ring != 0;
    c->cut += ws.cut;
    return 0;
}

int loupe__collect(loupe__mb *mb, const loupe__collect_params *p) {
    /* The preconditions collect.h states: the registry cannot change under the walk, and no
     * thread can start writing a buffer of this session any more. */
    assert(p->foreign || loupe__registry_held());
    assert(p->foreign || !loupe__gate_is_open());
    assert(mb != NULL && p != NULL && p->ticks_per_ns > 0.0);
    assert(p->metadata_count == 0 || p->metadata != NULL);
    collector c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.rg = p->region != NULL ? p->region : loupe__region;
    c.foreign = p->foreign;
    c.maps = c.foreign ? NULL : read_maps(&c.nmaps);
    c.mb = mb;
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
    desc_list l = {NULL, 0, 0, p->state, 0};
    loupe__threads_each_in(c.rg, gather, &l);
    if (l.failed) {
        free(l.v);
        free(c.maps);
        return loupe__err(LOUPE_ENOMEM, "out of memory while collecting the threads' events");
    }
    if (l.n > 1) {
        qsort(l.v, l.n, sizeof(*l.v), cmp_id);
    }
    size_t ti = SIZE_MAX;
    for (size_t i = 0; i < l.n && !failed; i++) {
        loupe__thread *t = l.v[i];
        /* one track per registered thread: a reused tid keeps its own counts and name; the
         * descriptors of one thread (the same id: it recorded during its own exit) share one */
        if (i > 0 && l.v[i - 1]->id == t->id && ti != SIZE_MAX) {
            failed = collect_thread(&c, t, ti) != 0;
            continue;
        }
        ti = loupe__mb_thread_add(c.mb, t->tid);
        if (ti == SIZE_MAX) {
            failed = 1;
            break;
        }
        if (!c.foreign && !__atomic_load_n(&t->name_set, __ATOMIC_ACQUIRE) &&
            !__atomic_load_n(&t->exited, __ATOMIC_ACQUIRE)) {
            /* its name now (pthread_setname_np; the main thread's is the program's comm, as
             * top and Perfetto's process tracks show it, unless it set another) */
            char comm[LOUPE__NAME_MAX];
            loupe__read_comm(t->tid, comm, sizeof comm);
            loupe__mb_thread_name(c.mb, ti, comm);
        } else {
            loupe__mb_thread_name(c.mb, ti, t->name);
        }
        failed = collect_thread(&c, t, ti) != 0;
    }
    free(l.v);
    const loupe__region_hdr *rh = c.rg;
    if (!failed && rh->unregistered != 0) {
        /* events of threads that found no descriptor: counted on a track of their own */
        size_t ui = loupe__mb_thread_add(c.mb, 0);
        if (ui == SIZE_MAX) {
            failed = 1;
        } else {
            loupe__mb_thread_name(c.mb, ui, "(events of threads loupe could not register)");
            loupe__mb_thread_at(c.mb, ui)->events_dropped = rh->unregistered;
            loupe__mb_thread_at(c.mb, ui)->capacity_needed = rh->unregistered;
        }
    }
    if (c.foreign) {
        m->duration_ns = c.last_ns;
    }
    if (!failed && c.reentered != 0) {
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)c.reentered);
        failed = loupe__mb_metadata(c.mb, "loupe_events_reentered", v) != 0;
    }
    if (!failed && c.ring) {
        /* says which zones a drop took (the oldest, not the newest): loupe summary's warning */
        failed = loupe__mb_metadata(c.mb, "loupe_overflow", "keep-last") != 0;
    }
    if (!failed && c.cut != 0) {
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)c.cut);
        failed = loupe__mb_metadata(c.mb, "loupe_strings_cut", v) != 0;
    }
    if (!failed && p->func_filtering) {
        loupe__threads_each_in(c.rg, count_filtered, &c);
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)c.filtered);
        failed = loupe__mb_metadata(c.mb, "loupe_functions_filtered", v) != 0;
    }
    if (!failed) {
        failed = spool_metadata(&c) != 0;
    }
    if (!failed && !c.foreign) {
        /* loupe's fds the program closed or replaced (base/ownfd.h): each was given up and,
         * for the spools and the sampler's wake-up, opened again; said, with the first cause */
        char cause[160], v[200];
        uint64_t n = loupe__fd_lost(cause, sizeof cause);
        if (n != 0) {
            snprintf(v, sizeof v, "%llu (first: %s)", (unsigned long long)n, cause);
            failed = loupe__mb_metadata(c.mb, "loupe_fds_taken_over", v) != 0;
        }
    }
    if (!failed) {
        failed = pair_flows(&c) != 0;
    }
    if (!failed) {
        failed = pair_asyncs(&c, m->duration_ns) != 0;
    }
    m->unmatched_ends = c.unmatched;
    pc_free(&c.names);
    pc_free(&c.funcs);
    pc_free(&c.fdec);
    free(c.maps);
    free(c.stack);
    free(c.outs);
    free(c.ins);
    free(c.asyncs);
    return failed ? loupe__err(LOUPE_ENOMEM, "out of memory while collecting the threads' events")
                  : 0;
}
