/* pprof.c: the model's CPU samples as pprof's profile.proto (github.com/google/pprof,
 * proto/profile.proto; the field numbers are in ../shared/reference/formats.md §6), which
 * `go tool pprof`, Pyroscope, Parca and Cloud Profiler read. docs/formats.md says what goes where.
 *
 * The Profile message is streamed field by field into the sink: a top-level repeated field may
 * come in any order and interleave with others (the protobuf encoding concatenates them), so every
 * Function and Location is written the moment it is first needed, each Sample right after the
 * Locations it names, the Mappings once every offset is known, and the string table last (its
 * entries keep their index order; entry 0 is "", as pprof requires). One message is held at a time;
 * memory is the intern tables: O(distinct strings + frames + stack nodes + (stack, thread) pairs),
 * never O(samples).
 *
 * What the model gives and pprof wants:
 * - Sample types [samples/count, cpu/nanoseconds, off_cpu/nanoseconds]; period_type
 *   cpu/nanoseconds, period the sampling period. A sample is one (leaf stack, thread) pair with
 *   its count, count * period and 0; default_sample_type "cpu" ("samples" when the period is
 *   unknown: then the cpu values are 0).
 * - Off-CPU time (the kernel's context switches, loupe_model_thread.off_cpu) as one sample per
 *   thread and kind, values 0, 0 and the kind's total ns, on a one-frame stack "[off-CPU:
 * waiting]",
 *   "[off-CPU: preempted]" or "[off-CPU]" (the kind unknown): no stack is taken at a switch, so
 *   the where is not known, only the how long. `go tool pprof -sample_index=off_cpu` shows it.
 * - A Location per distinct code address and inline stack: the model keeps an address's frames as
 *   stack nodes, the inlined calls innermost first (loupe_frame.inlined) and then the function
 *   they are inlined into; those become one Location whose Lines are in the same order (pprof:
 *   the last Line is the caller the others were inlined into). address = the module offset.
 * - A Function per (name, module): the name as loupe summary keys it (the symbol, else
 *   "<module>+0x<offset>", else "[unknown]"); filename the first source file seen for it.
 * - A Mapping per module (the ELF path or "[kernel]"): memory_start 0, memory_limit one past the
 *   largest offset seen, file_offset 0, and the build-id (hex) read from the file on disk when
 *   the profile is written (the model keeps no build-ids; a file changed since the run gives its
 *   new id, and one that is gone gives none). has_functions etc. say what the frames hold, so that
 *   pprof does not symbolise again.
 * - Labels per sample: "thread" (the thread's name, when it has one), "tid" and "pid" (numbers).
 * - time_nanos the wall-clock start, duration_nanos the traced time; comments: the writer, the
 *   samples lost, and the 16 processes with the most samples.
 */
#include "export/writers.h"

#include "base/elf_id.h"
#include "base/error.h"
#include "base/hash.h"
#include "base/pb.h"
#include "export/tables.h"

#include <inttypes.h>
#include <loupe/version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Profile's fields (profile.proto). */
enum {
    P_SAMPLE_TYPE = 1,
    P_SAMPLE = 2,
    P_MAPPING = 3,
    P_LOCATION = 4,
    P_FUNCTION = 5,
    P_STRING_TABLE = 6,
    P_TIME_NANOS = 9,
    P_DURATION_NANOS = 10,
    P_PERIOD_TYPE = 11,
    P_PERIOD = 12,
    P_COMMENT = 13,
    P_DEFAULT_SAMPLE_TYPE = 14
};

#define MAX_INLINE_GROUP 64u /* frames of one Location: an inline stack deeper is cut there */

typedef struct mapping {
    uint32_t file;    /* string index */
    uint64_t max_off; /* the largest module offset seen */
    int has_functions, has_filenames, has_lines, has_inline;
} mapping;

typedef struct pw {
    const loupe_model *m;
    loupe__sink *s;
    loupe__pb b;
    int oom;
    loupe__strtab strs;      /* the string table, in index order */
    loupe__u64map functions; /* (name << 32 | module) string indices -> function id */
    uint32_t nfunctions;
    loupe__u64map modules; /* module string index -> mapping id */
    mapping *maps;
    uint32_t nmaps, maps_cap;
    /* Locations: per stack node its Location id (0: not yet) and the node after its group */
    uint32_t *node_loc, *node_next;
    uint32_t nlocs;
    uint32_t *loc_node; /* per Location id: the first node of its group (for comparing) */
    uint64_t *loc_hash;
    uint32_t loc_cap;
    uint32_t *loc_slot; /* chain hash -> Location id */
    size_t loc_slot_cap;
    uint32_t synthetic[5]; /* Locations of "[no stack]" and the off-CPU kinds, 0: not yet */
    uint32_t *fname;       /* per frame: its function's name (string index), 0: not yet */
} pw;

static int oom(pw *w) {
    w->oom = 1;
    return -1;
}

/* oom() for the functions that return an id: 0, no id. */
static uint32_t oom0(pw *w) {
    w->oom = 1;
    return 0;
}

static void flush(pw *w) {
    if (w->b.oom) {
        w->oom = 1;
    } else {
        loupe__put(w->s, (const char *)w->b.p, w->b.len);
    }
    w->b.len = 0;
}

/* The string table index of the n bytes at p, added when new; 0 ("") on out-of-memory (with
 * w->oom set, so the writer fails). */
static uint32_t str_n(pw *w, const char *p, size_t n) {
    uint32_t i = loupe__strtab_add(&w->strs, p, n);
    w->oom |= w->strs.oom;
    return i;
}

static uint32_t str(pw *w, const char *s) {
    return str_n(w, s, strlen(s));
}

/* The function's name of frame f as loupe summary keys it. */
static uint32_t frame_name(pw *w, uint32_t f) {
    if (f >= w->m->frame_count) {
        return str(w, "[unknown]");
    }
    if (w->fname[f] != 0) {
        return w->fname[f];
    }
    const loupe_frame *fr = &w->m->frames[f];
    uint32_t ix;
    if (fr->function[0] != 0) {
        ix = str(w, fr->function);
    } else if (fr->module[0] != 0) {
        size_t n = strlen(fr->module) + 24;
        char *t = malloc(n);
        if (t == NULL) {
            return oom0(w);
        }
        snprintf(t, n, "%s+0x%" PRIx64, fr->module, fr->module_offset);
        ix = str(w, t);
        free(t);
    } else {
        ix = str(w, "[unknown]");
    }
    w->fname[f] = ix;
    return ix;
}

/* The Function id of (name, module) (string indices), written when new with file as its
 * filename. */
static uint32_t function_id(pw *w, uint32_t name, uint32_t module, uint32_t file) {
    uint64_t key = (uint64_t)name << 32 | module;
    uint32_t id = loupe__u64map_get(&w->functions, key);
    if (id != 0 || w->oom) {
        return id;
    }
    id = ++w->nfunctions;
    if (loupe__u64map_put(&w->functions, key, id) != 0) {
        return oom0(w);
    }
    size_t mk = loupe__pb_begin(&w->b, P_FUNCTION);
    loupe__pb_uint(&w->b, 1, id);
    loupe__pb_int(&w->b, 2, name);
    loupe__pb_int(&w->b, 3, name);
    if (file != 0) {
        loupe__pb_int(&w->b, 4, file);
    }
    loupe__pb_end(&w->b, mk);
    flush(w);
    return id;
}

/* The Mapping id of module (a string index; 0 for "": no mapping), made when new. */
static uint32_t mapping_of(pw *w, uint32_t module) {
    if (module == 0 || w->oom) {
        return 0;
    }
    uint32_t id = loupe__u64map_get(&w->modules, module);
    if (id != 0) {
        return id;
    }
    if (w->nmaps == w->maps_cap) {
        uint32_t nc = w->maps_cap ? w->maps_cap * 2 : 16;
        mapping *nm = realloc(w->maps, nc * sizeof(*nm));
        if (nm == NULL) {
            return oom0(w);
        }
        w->maps = nm;
        w->maps_cap = nc;
    }
    w->maps[w->nmaps] = (mapping){.file = module};
    id = ++w->nmaps;
    if (loupe__u64map_put(&w->modules, module, id) != 0) {
        return oom0(w);
    }
    return id;
}

static uint32_t group_of(const loupe_model *m, uint32_t k, uint32_t *next) {
    return loupe__stack_group(m, k, MAX_INLINE_GROUP, next);
}

static uint64_t group_hash(const loupe_model *m, uint32_t k, uint32_t n) {
    uint64_t h = LOUPE__FNV_OFFSET;
    for (uint32_t i = 0; i < n; i++, k = m->stack_nodes[k].parent) {
        h = (h ^ m->stack_nodes[k].frame) * LOUPE__FNV_PRIME;
    }
    return h ^ n;
}

static int group_same(const loupe_model *m, uint32_t a, uint32_t b, uint32_t n) {
    uint32_t nb;
    if (group_of(m, b, &nb) != n) {
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (m->stack_nodes[a].frame != m->stack_nodes[b].frame) {
            return 0;
        }
        a = m->stack_nodes[a].parent;
        b = m->stack_nodes[b].parent;
    }
    return 1;
}

static int grow_loc_slots(pw *w) {
    size_t nc = w->loc_slot_cap ? w->loc_slot_cap * 2 : 1024;
    uint32_t *ns = calloc(nc, sizeof(*ns));
    if (ns == NULL) {
        return -1;
    }
    for (uint32_t id = 1; id <= w->nlocs; id++) {
        if (w->loc_node[id] == UINT32_MAX) {
            continue; /* a synthetic Location: never looked up by chain */
        }
        size_t j = (size_t)w->loc_hash[id] & (nc - 1);
        while (ns[j] != 0) {
            j = (j + 1) & (nc - 1);
        }
        ns[j] = id;
    }
    free(w->loc_slot);
    w->loc_slot = ns;
    w->loc_slot_cap = nc;
    return 0;
}

/* A new Location id with node as its group's first node (UINT32_MAX: synthetic). */
static uint32_t new_loc(pw *w, uint32_t node, uint64_t hash) {
    if (w->nlocs + 2 > w->loc_cap) {
        uint32_t nc = w->loc_cap ? w->loc_cap * 2 : 1024;
        uint32_t *nn = realloc(w->loc_node, nc * sizeof(*nn));
        if (nn == NULL) {
            return oom0(w);
        }
        w->loc_node = nn;
        uint64_t *nh = realloc(w->loc_hash, nc * sizeof(*nh));
        if (nh == NULL) {
            return oom0(w);
        }
        w->loc_hash = nh;
        w->loc_cap = nc;
    }
    uint32_t id = ++w->nlocs;
    w->loc_node[id] = node;
    w->loc_hash[id] = hash;
    return id;
}

/* The Location of stack node k's group (written when new); sets *next. 0 on out-of-memory. */
static uint32_t location_of(pw *w, uint32_t k, uint32_t *next) {
    const loupe_model *m = w->m;
    if (w->node_loc[k] != 0) {
        *next = w->node_next[k];
        return w->node_loc[k];
    }
    uint32_t n = group_of(m, k, next);
    uint64_t h = group_hash(m, k, n);
    if ((w->nlocs + 1) * 2 > w->loc_slot_cap && grow_loc_slots(w) != 0) {
        return oom0(w);
    }
    size_t j = (size_t)h & (w->loc_slot_cap - 1);
    for (; w->loc_slot[j] != 0; j = (j + 1) & (w->loc_slot_cap - 1)) {
        uint32_t id = w->loc_slot[j];
        if (w->loc_hash[id] == h && group_same(m, k, w->loc_node[id], n)) {
            w->node_loc[k] = id;
            w->node_next[k] = *next;
            return id;
        }
    }
    /* New: the functions first (each its own top-level message), then the Location. */
    uint32_t fids[MAX_INLINE_GROUP], lines[MAX_INLINE_GROUP], module = 0;
    uint64_t address = 0;
    int inlined = 0;
    uint32_t c = k;
    for (uint32_t i = 0; i < n; i++, c = m->stack_nodes[c].parent) {
        uint32_t f = m->stack_nodes[c].frame;
        const loupe_frame *fr = f < m->frame_count ? &m->frames[f] : NULL;
        uint32_t mod = fr != NULL ? str(w, fr->module) : 0;
        uint32_t file = fr != NULL ? str(w, fr->file) : 0;
        fids[i] = function_id(w, frame_name(w, f), mod, file);
        lines[i] = fr != NULL ? fr->line : 0;
        if (i == 0 && fr != NULL) {
            module = mod;
            address = fr->module_offset;
        }
        inlined |= fr != NULL && fr->inlined != 0 && i + 1 < n;
        if (mod != 0 && mod == module && fr != NULL) {
            uint32_t mid = mapping_of(w, mod);
            if (mid != 0) {
                mapping *mp = &w->maps[mid - 1];
                mp->has_functions |= fr->function[0] != 0;
                mp->has_filenames |= fr->file[0] != 0;
                mp->has_lines |= fr->line != 0;
            }
        }
    }
    uint32_t mid = mapping_of(w, module);
    if (mid != 0) {
        mapping *mp = &w->maps[mid - 1];
        mp->max_off = address > mp->max_off ? address : mp->max_off;
        mp->has_inline |= inlined;
    }
    uint32_t id = new_loc(w, k, h);
    if (w->oom) {
        return 0;
    }
    w->loc_slot[j] = id;
    size_t mk = loupe__pb_begin(&w->b, P_LOCATION);
    loupe__pb_uint(&w->b, 1, id);
    if (mid != 0) {
        loupe__pb_uint(&w->b, 2, mid);
    }
    loupe__pb_uint(&w->b, 3, address);
    for (uint32_t i = 0; i < n; i++) {
        size_t lk = loupe__pb_begin(&w->b, 4);
        loupe__pb_uint(&w->b, 1, fids[i]);
        if (lines[i] != 0) {
            loupe__pb_int(&w->b, 2, lines[i]);
        }
        loupe__pb_end(&w->b, lk);
    }
    loupe__pb_end(&w->b, mk);
    flush(w);
    w->node_loc[k] = id;
    w->node_next[k] = *next;
    return id;
}

/* A one-frame Location of a function named name (no mapping); slot: its cache in synthetic[]. */
static uint32_t synthetic_loc(pw *w, int slot, const char *name) {
    if (w->synthetic[slot] != 0) {
        return w->synthetic[slot];
    }
    uint32_t fid = function_id(w, str(w, name), 0, 0);
    uint32_t id = new_loc(w, UINT32_MAX, 0);
    if (w->oom) {
        return 0;
    }
    size_t mk = loupe__pb_begin(&w->b, P_LOCATION);
    loupe__pb_uint(&w->b, 1, id);
    size_t lk = loupe__pb_begin(&w->b, 4);
    loupe__pb_uint(&w->b, 1, fid);
    loupe__pb_end(&w->b, lk);
    loupe__pb_end(&w->b, mk);
    flush(w);
    w->synthetic[slot] = id;
    return id;
}

static void label_str(pw *w, uint32_t key, uint32_t value) {
    size_t mk = loupe__pb_begin(&w->b, 3);
    loupe__pb_int(&w->b, 1, key);
    loupe__pb_int(&w->b, 2, value);
    loupe__pb_end(&w->b, mk);
}

static void label_num(pw *w, uint32_t key, uint64_t value) {
    size_t mk = loupe__pb_begin(&w->b, 3);
    loupe__pb_int(&w->b, 1, key);
    loupe__pb_int(&w->b, 3, (int64_t)value);
    loupe__pb_end(&w->b, mk);
}

typedef struct agg {
    uint32_t leaf;
    uint32_t thread; /* UINT32_MAX: no thread (an index past the model's) */
    uint64_t count;
} agg;

/* Writes one Sample: the location ids in ids[0..n), the three values, the thread's labels. */
static void put_sample(pw *w, const uint32_t *ids, size_t n, uint64_t count, uint64_t cpu_ns,
                       uint64_t off_ns, uint32_t thread) {
    const loupe_model *m = w->m;
    uint32_t kthread = str(w, "thread"), ktid = str(w, "tid"), kpid = str(w, "pid");
    uint32_t tname = 0;
    const loupe_model_thread *th = thread < m->thread_count ? &m->threads[thread] : NULL;
    if (th != NULL && th->name != NULL && th->name[0] != 0) {
        tname = str(w, th->name);
    }
    size_t mk = loupe__pb_begin(&w->b, P_SAMPLE);
    for (size_t i = 0; i < n; i++) {
        loupe__pb_uint(&w->b, 1, ids[i]);
    }
    loupe__pb_int(&w->b, 2, (int64_t)count);
    loupe__pb_int(&w->b, 2, (int64_t)cpu_ns);
    loupe__pb_int(&w->b, 2, (int64_t)off_ns);
    if (th != NULL) {
        if (tname != 0) {
            label_str(w, kthread, tname);
        }
        label_num(w, ktid, th->tid);
        if (th->process < m->process_count && m->processes[th->process].pid != 0) {
            label_num(w, kpid, m->processes[th->process].pid);
        }
    }
    loupe__pb_end(&w->b, mk);
    flush(w);
}

static void value_type(pw *w, uint32_t field, const char *type, const char *unit) {
    uint32_t t = str(w, type), u = str(w, unit);
    size_t mk = loupe__pb_begin(&w->b, field);
    loupe__pb_int(&w->b, 1, t);
    loupe__pb_int(&w->b, 2, u);
    loupe__pb_end(&w->b, mk);
    flush(w);
}

static void put_int(pw *w, uint32_t field, int64_t v) {
    loupe__pb_int(&w->b, field, v);
    flush(w);
}

static void comment(pw *w, const char *text) {
    put_int(w, P_COMMENT, str(w, text));
}

static int has_off_cpu(const loupe_model *m) {
    for (size_t t = 0; t < m->thread_count; t++) {
        if (m->threads[t].off_cpu_count != 0) {
            return 1;
        }
    }
    return 0;
}

/* The samples, aggregated by (leaf, thread) in order of first appearance, each after its
 * Locations. */
static int put_samples(pw *w) {
    const loupe_model *m = w->m;
    loupe__u64map ix = {0};
    agg *a = NULL;
    size_t na = 0, acap = 0;
    for (size_t i = 0; i < m->sample_count; i++) {
        const loupe_sample *s = &m->samples[i];
        uint32_t leaf = s->stack < m->stack_node_count ? s->stack : UINT32_MAX;
        uint32_t th = s->thread < m->thread_count ? (uint32_t)s->thread : UINT32_MAX;
        uint64_t key = (uint64_t)leaf << 32 | th;
        uint32_t v = loupe__u64map_get(&ix, key);
        if (v != 0) {
            a[v - 1].count++;
            continue;
        }
        if (na == acap) {
            size_t nc = acap ? acap * 2 : 1024;
            agg *nn = realloc(a, nc * sizeof(*nn));
            if (nn == NULL) {
                goto fail;
            }
            a = nn;
            acap = nc;
        }
        a[na] = (agg){leaf, th, 1};
        if (loupe__u64map_put(&ix, key, (uint32_t)++na) != 0) {
            goto fail;
        }
    }
    loupe__u64map_free(&ix);
    memset(&ix, 0, sizeof ix);
    size_t ids_cap = 64;
    uint32_t *ids = malloc(ids_cap * sizeof(*ids));
    if (ids == NULL) {
        goto fail;
    }
    uint64_t period = m->sample_period_ns;
    for (size_t i = 0; i < na && !w->oom; i++) {
        size_t n = 0;
        if (a[i].leaf == UINT32_MAX) {
            ids[n++] = synthetic_loc(w, 0, "[no stack]");
        }
        size_t depth = 0;
        for (uint32_t k = a[i].leaf; k < m->stack_node_count && depth <= m->stack_node_count;
             depth++) {
            uint32_t next;
            uint32_t id = location_of(w, k, &next);
            if (w->oom) {
                break;
            }
            if (n == ids_cap) {
                size_t nc = ids_cap * 2;
                uint32_t *nn = realloc(ids, nc * sizeof(*nn));
                if (nn == NULL) {
                    free(ids);
                    goto fail;
                }
                ids = nn;
                ids_cap = nc;
            }
            ids[n++] = id;
            k = next;
        }
        put_sample(w, ids, n, a[i].count, a[i].count * period, 0, a[i].thread);
    }
    free(ids);
    free(a);
    return w->oom ? -1 : 0;
fail:
    loupe__u64map_free(&ix);
    free(a);
    return oom(w);
}

/* Per thread and off-CPU kind, one sample of the kind's total time. */
static void put_off_cpu(pw *w) {
    static const char *const names[] = {"[off-CPU]", "[off-CPU: waiting]", "[off-CPU: preempted]"};
    const loupe_model *m = w->m;
    for (size_t t = 0; t < m->thread_count && !w->oom; t++) {
        const loupe_model_thread *th = &m->threads[t];
        uint64_t sum[3] = {0, 0, 0};
        for (size_t i = 0; i < th->off_cpu_count; i++) {
            unsigned k = (unsigned)th->off_cpu[i].kind;
            sum[k < 3 ? k : 0] += th->off_cpu[i].dur_ns;
        }
        for (int k = 0; k < 3; k++) {
            if (sum[k] != 0) {
                uint32_t id = synthetic_loc(w, 2 + k, names[k]);
                put_sample(w, &id, 1, 0, 0, sum[k], (uint32_t)t);
            }
        }
    }
}

static void put_mapping(pw *w, uint32_t i) {
    const mapping *mp = &w->maps[i];
    const char *file = loupe__strtab_at(&w->strs, mp->file, NULL);
    /* the build-id the run saw (the trace's), else the file's as it is now */
    char hex[130];
    size_t n = loupe__ran_build_id(w->m, file, hex, sizeof hex) ? strlen(hex) / 2 : 0;
    if (n == 0 && file[0] == '/') {
        unsigned char id[64];
        n = loupe__elf_build_id(file, id, sizeof id);
        for (size_t k = 0; k < n; k++) {
            snprintf(hex + 2 * k, 3, "%02x", id[k]);
        }
        hex[2 * n] = 0;
    }
    uint32_t bid = n != 0 ? str(w, hex) : 0;
    size_t mk = loupe__pb_begin(&w->b, P_MAPPING);
    loupe__pb_uint(&w->b, 1, i + 1);
    loupe__pb_uint(&w->b, 3, mp->max_off + 1);
    loupe__pb_int(&w->b, 5, mp->file);
    if (bid != 0) {
        loupe__pb_int(&w->b, 6, bid);
    }
    loupe__pb_uint(&w->b, 7, mp->has_functions != 0);
    loupe__pb_uint(&w->b, 8, mp->has_filenames != 0);
    loupe__pb_uint(&w->b, 9, mp->has_lines != 0);
    loupe__pb_uint(&w->b, 10, mp->has_inline != 0);
    loupe__pb_end(&w->b, mk);
    flush(w);
}

/* The mapping of the program itself (loupe__main_module); UINT32_MAX when none. */
static uint32_t main_mapping(pw *w) {
    const char *mod = loupe__main_module(w->m);
    uint32_t id = mod != NULL ? loupe__u64map_get(&w->modules, str(w, mod)) : 0;
    return id != 0 ? id - 1 : UINT32_MAX;
}

/* Samples per process (an array of m->process_count + 1; the last counts samples of no known
 * process), or NULL on out-of-memory. */
static uint64_t *samples_per_process(const loupe_model *m) {
    uint64_t *n = calloc(m->process_count + 1, sizeof(*n));
    for (size_t i = 0; n != NULL && i < m->sample_count; i++) {
        size_t t = m->samples[i].thread;
        size_t p = t < m->thread_count ? m->threads[t].process : m->process_count;
        n[p < m->process_count ? p : m->process_count]++;
    }
    return n;
}

/* The Mappings, the program's first: pprof takes the first as the main binary ("File:" in its
 * reports). */
static void put_mappings(pw *w) {
    uint32_t first = w->oom ? UINT32_MAX : main_mapping(w);
    if (first != UINT32_MAX) {
        put_mapping(w, first);
    }
    for (uint32_t i = 0; i < w->nmaps && !w->oom; i++) {
        if (i != first) {
            put_mapping(w, i);
        }
    }
}

/* The comments: the writer, the samples, and the processes that have samples (the busiest 16:
 * pprof prints every comment atop each report). */
static void put_comments(pw *w, const uint64_t *per_process) {
    const loupe_model *m = w->m;
    char line[512];
    snprintf(line, sizeof line, "written by loupe %s", loupe_version());
    comment(w, line);
    snprintf(line, sizeof line, "%zu CPU samples every %" PRIu64 " ns, %" PRIu64 " lost",
             m->sample_count, m->sample_period_ns, m->samples_lost);
    comment(w, line);
    size_t with = 0, shown = 0;
    for (size_t p = 0; per_process != NULL && p < m->process_count; p++) {
        with += per_process[p] != 0;
    }
    /* the busiest first: 16 passes over the processes, each taking the next largest count */
    uint64_t below = UINT64_MAX;
    while (per_process != NULL && shown < 16 && shown < with) {
        uint64_t top = 0;
        for (size_t p = 0; p < m->process_count; p++) {
            top = per_process[p] < below && per_process[p] > top ? per_process[p] : top;
        }
        for (size_t p = 0; p < m->process_count && shown < 16; p++) {
            if (per_process[p] != top) {
                continue;
            }
            const loupe_model_process *pr = &m->processes[p];
            snprintf(line, sizeof line, "process %" PRIu64 " %.200s%s%.100s: %" PRIu64 " sample%s",
                     pr->pid, pr->name != NULL ? pr->name : "",
                     pr->host != NULL && pr->host[0] ? " on " : "",
                     pr->host != NULL ? pr->host : "", top, top == 1 ? "" : "s");
            comment(w, line);
            shown++;
        }
        below = top;
    }
    if (with > shown) {
        snprintf(line, sizeof line, "and %zu more processes with samples", with - shown);
        comment(w, line);
    }
}

static void put_string_table(pw *w) {
    for (uint32_t i = 0; i < w->strs.count && !w->oom; i++) {
        size_t n;
        const char *p = loupe__strtab_at(&w->strs, i, &n);
        loupe__pb_bytes(&w->b, P_STRING_TABLE, p, n);
        if (w->b.len >= 60000) {
            flush(w);
        }
    }
    flush(w);
}

int loupe__write_pprof(const loupe_model *m, loupe__sink *s) {
    if (m->sample_count == 0 && !has_off_cpu(m)) {
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "the trace holds no CPU samples, and a pprof profile is made of them: "
                          "record with sampling on (loupe record samples at 999 Hz unless "
                          "--no-sample; loupe_trace_options.sampling_hz)");
    }
    pw w = {.m = m, .s = s};
    w.fname = calloc(m->frame_count + 1, sizeof(*w.fname));
    w.node_loc = calloc(m->stack_node_count + 1, sizeof(*w.node_loc));
    w.node_next = calloc(m->stack_node_count + 1, sizeof(*w.node_next));
    if (w.fname == NULL || w.node_loc == NULL || w.node_next == NULL) {
        w.oom = 1;
    }
    (void)str_n(&w, "", 0); /* string 0 */
    int by_time = m->sample_period_ns != 0;
    value_type(&w, P_SAMPLE_TYPE, "samples", "count");
    value_type(&w, P_SAMPLE_TYPE, "cpu", "nanoseconds");
    value_type(&w, P_SAMPLE_TYPE, "off_cpu", "nanoseconds");
    if (!w.oom) {
        (void)put_samples(&w);
    }
    put_off_cpu(&w);
    uint64_t *per_process = samples_per_process(m);
    w.oom |= per_process == NULL;
    put_mappings(&w);
    if (m->origin_unix_ns != 0) {
        put_int(&w, P_TIME_NANOS, (int64_t)m->origin_unix_ns);
    }
    put_int(&w, P_DURATION_NANOS, (int64_t)m->duration_ns);
    value_type(&w, P_PERIOD_TYPE, "cpu", "nanoseconds");
    put_int(&w, P_PERIOD, (int64_t)m->sample_period_ns);
    put_comments(&w, per_process);
    free(per_process);
    put_int(&w, P_DEFAULT_SAMPLE_TYPE, str(&w, by_time ? "cpu" : "samples"));
    put_string_table(&w);
    int failed = w.oom;
    loupe__pb_free(&w.b);
    loupe__strtab_free(&w.strs);
    loupe__u64map_free(&w.functions);
    loupe__u64map_free(&w.modules);
    free(w.maps);
    free(w.node_loc);
    free(w.node_next);
    free(w.loc_node);
    free(w.loc_hash);
    free(w.loc_slot);
    free(w.fname);
    return failed ? loupe__err(LOUPE_ENOMEM, "out of memory writing the pprof profile") : 0;
}
