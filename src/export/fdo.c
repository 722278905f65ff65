/* fdo.c: a compiler's sample profile from the model's CPU samples (loupe/fdo.h): LLVM's text
 * sample profile, for clang's -fprofile-sample-use (clang's user manual, "Using Sampling
 * Profilers"; llvm/ProfileData/SampleProf.h and SampleProfReader.cpp for the text layout), as
 * AutoFDO's create_llvm_prof and llvm-profgen make from perf's LBR records, here from plain IP
 * samples and call stacks.
 *
 * The text layout, one function per top-level record, indented one space per inline level:
 *   name:total:head
 *    offset[.discriminator]: samples [callee:count ...]
 *    offset[.discriminator]: inlined_callee:total
 *     offset[.discriminator]: samples ...
 * offset = the line minus the line the function starts on (its DW_AT_decl_line), cut to 16 bits
 * as LLVM's FunctionSamples::getOffset does; the discriminator is the base one, decoded from the
 * prefix encoding that -fdebug-info-for-profiling folds duplication factors and copy ids into
 * (llvm/Support/Discriminator.h, getUnsignedFromPrefixEncoding), as the compiler compares it.
 *
 * The model keeps demangled names and no start lines, so each sampled address of the module is
 * looked up again in the module's own DWARF (libdw, the file on disk, its separate debug file
 * from /usr/lib/debug/.build-id when there is one; never debuginfod): the scopes at the address
 * (dwarf_getscopes: the function and the inlined calls in it), each one's linkage name (the
 * mangled name the compiler keys on; DW_AT_name for C), start line, and for an inlined call its
 * call line and discriminator; the line and discriminator of the address itself. A sample adds
 * its count to its function's total and to the body line of its innermost inlined call; each
 * caller -> callee edge of its stack (both in the module) adds it to the caller's call line as a
 * call target. Head samples (calls into the function) are not observable without branch records:
 * each function's head is the samples on its first line (offset 0), at least 1, so no sampled
 * function looks never entered. Samples on line-0 instructions (compiler-generated code with no
 * line) are left out and counted, as are those whose address has no DWARF; a sample left out adds
 * to no call target either.
 */
#include "export/writers.h"

#include "base/array.h"
#include "base/error.h"
#include "base/hash.h"
#include "export/tables.h"

#include <loupe/fdo.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LOUPE_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

/* DW_AT_GNU_discriminator: the discriminator of an inlined call's call site, as LLVM writes it
 * on DW_TAG_inlined_subroutine (llvm/BinaryFormat/Dwarf.def: 0x2136; not in elfutils' dwarf.h). */
#define AT_GNU_DISCRIMINATOR 0x2136u
#define MAX_SCOPES 64u /* inline levels kept at one address */
#define MAX_GROUP 64u  /* frames of one address in the model */
#define NONE UINT32_MAX

/* What one address resolves to: its function scopes outermost first. */
typedef struct scope {
    uint32_t name;  /* string index of the linkage name */
    uint32_t start; /* the line the function starts on */
    uint32_t call;  /* for scope i > 0: the line in scope i - 1 it was inlined at */
    uint32_t call_disc;
} scope;

typedef struct resolved {
    uint32_t first, n; /* scopes[first .. first + n) */
    uint32_t line, disc;
    int ok; /* 0: no DWARF for the address */
} resolved;

/* One address range of an out-of-line function, with its compile unit. libdw's own lookups do
 * not serve: clang writes no .debug_aranges (dwfl_module_addrdie finds no CU in its output), and
 * dwarf_getscopes follows an inlined call to its abstract definition's scopes, not to the
 * function it was inlined into. So every function's ranges are listed once, and an address
 * descends from its function through the inlined calls whose ranges hold it. */
typedef struct fnrange {
    Dwarf_Addr lo, hi;
    Dwarf_Die fn, cu;
} fnrange;

/* A node of the profile tree: a function (parent NONE) or an inlined call in one. */
typedef struct pnode {
    uint32_t name, parent;
    uint32_t site; /* in the parent: offset << 16 | discriminator (both 16 bits) */
    uint64_t total, head;
} pnode;

/* An entry of the one hash table: a child node (kind 0), a body line (1) or a call target (2). */
typedef struct pent {
    uint32_t kind, node, site, name; /* name: the child's or the callee's; 0 for a body line */
    uint64_t count;                  /* body / target count; child: the node index */
} pent;

typedef struct fw {
    const loupe_model *m;
    const char *module;
    Dwfl *dwfl;
    Dwfl_Module *mod;
    Dwarf_Addr low;
    Dwarf_Addr dwbias; /* the module's DWARF addresses are dwfl's minus this */
    fnrange *fns;      /* every function's address ranges, by lo */
    size_t nfns, fns_cap;
    loupe__strtab strs;
    loupe__u64map addr_ix; /* (offset << 1 | is_return) -> resolved index + 1 */
    resolved *res;
    size_t nres, res_cap;
    scope *scopes;
    size_t nscopes, scopes_cap;
    pnode *nodes;
    size_t nnodes, nodes_cap;
    pent *ents;
    size_t nents, ents_cap;
    uint32_t *slot; /* hash of an entry's key -> index + 1 */
    size_t slot_cap;
    int oom;
    loupe_fdo_stats st;
} fw;

static uint32_t str(fw *w, const char *s) {
    uint32_t i = loupe__strtab_add(&w->strs, s, strlen(s));
    w->oom |= w->strs.oom;
    return i;
}

/* LLVM's base discriminator of an encoded one (getUnsignedFromPrefixEncoding). */
static uint32_t base_discriminator(uint32_t u) {
    if (u & 1u) {
        return 0;
    }
    u >>= 1;
    return (u & 0x20u) ? (((u >> 1) & 0xfe0u) | (u & 0x1fu)) : (u & 0x1fu);
}

/* The name a compiler keys a function on, interned: DW_AT_linkage_name (following
 * abstract_origin and specification); for an out-of-line function without one (gcc writes none
 * for a static C++ function) its ELF symbol's name when that is mangled (_Z...), cut before a
 * clone's suffix (.constprop.0, .part.1, .cold) as LLVM's getCanonicalFnName does; else
 * DW_AT_name; "" when none. */
static uint32_t linkage_name(fw *w, Dwarf_Die *d, int out_of_line) {
    Dwarf_Attribute a;
    const char *n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_linkage_name, &a));
    if (n == NULL) {
        n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_MIPS_linkage_name, &a));
    }
    Dwarf_Addr lowpc;
    if (n == NULL && out_of_line && dwarf_lowpc(d, &lowpc) == 0) {
        const char *sym = dwfl_module_addrname(w->mod, lowpc + w->dwbias);
        if (sym != NULL && strncmp(sym, "_Z", 2) == 0) {
            uint32_t i = loupe__strtab_add(&w->strs, sym, strcspn(sym, "."));
            w->oom |= w->strs.oom;
            return i;
        }
    }
    if (n == NULL) {
        n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_name, &a));
    }
    return str(w, n != NULL ? n : "");
}

static uint32_t udata(Dwarf_Die *d, unsigned attr) {
    Dwarf_Attribute a;
    Dwarf_Word v = 0;
    if (dwarf_attr(d, attr, &a) == NULL || dwarf_formudata(&a, &v) != 0) {
        return 0;
    }
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static int cmp_fn(const void *pa, const void *pb) {
    const fnrange *a = pa, *b = pb;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Lists the ranges of the functions under d (a CU, namespace or type; depth bounds hostile
 * nesting). -1 on out-of-memory. */
static int list_fns(fw *w, Dwarf_Die *d, Dwarf_Die *cu, int depth) {
    Dwarf_Die c;
    if (depth > 32 || dwarf_child(d, &c) != 0) {
        return 0;
    }
    do {
        int tag = dwarf_tag(&c);
        if (tag == DW_TAG_subprogram) {
            Dwarf_Addr base, lo, hi;
            for (ptrdiff_t o = 0; (o = dwarf_ranges(&c, o, &base, &lo, &hi)) > 0;) {
                if (loupe__grow((void **)&w->fns, &w->fns_cap, w->nfns + 1, sizeof(*w->fns)) != 0) {
                    return -1;
                }
                w->fns[w->nfns++] = (fnrange){lo, hi, c, *cu};
            }
        } else if (tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
                   tag == DW_TAG_structure_type || tag == DW_TAG_union_type ||
                   tag == DW_TAG_module) {
            if (list_fns(w, &c, cu, depth + 1) != 0) {
                return -1;
            }
        }
    } while (dwarf_siblingof(&c, &c) == 0);
    return 0;
}

/* Lists every function's ranges (once). -1 on out-of-memory. */
static int fn_table(fw *w) {
    Dwarf *dw = dwfl_module_getdwarf(w->mod, &w->dwbias);
    if (dw == NULL) {
        return 0; /* no DWARF: every address counts as without it */
    }
    Dwarf_CU *cu = NULL;
    Dwarf_Die cudie;
    uint8_t type;
    while (dwarf_get_units(dw, cu, &cu, NULL, &type, &cudie, NULL) == 0) {
        if ((type == DW_UT_compile || type == DW_UT_partial) &&
            list_fns(w, &cudie, &cudie, 0) != 0) {
            return -1;
        }
    }
    qsort(w->fns, w->nfns, sizeof(*w->fns), cmp_fn);
    return 0;
}

/* The function range holding DWARF address a, NULL when none. */
static const fnrange *fn_of(const fw *w, Dwarf_Addr a) {
    size_t lo = 0, hi = w->nfns;
    while (lo < hi) { /* past the last range starting at or before a */
        size_t mid = lo + (hi - lo) / 2;
        if (w->fns[mid].lo <= a) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    for (size_t i = lo; i-- > 0 && lo - i <= 64;) { /* nested or overlapping ranges are rare */
        if (a < w->fns[i].hi) {
            return &w->fns[i];
        }
    }
    return NULL;
}

/* The inlined call directly in d (through lexical blocks) whose ranges hold a: 1 and *out, or 0. */
static int inlined_at(Dwarf_Die *d, Dwarf_Addr a, Dwarf_Die *out, int depth) {
    Dwarf_Die c;
    if (depth > 64 || dwarf_child(d, &c) != 0) {
        return 0;
    }
    do {
        int tag = dwarf_tag(&c);
        if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
             tag == DW_TAG_try_block || tag == DW_TAG_catch_block) &&
            dwarf_haspc(&c, a) == 1) {
            if (tag == DW_TAG_inlined_subroutine) {
                *out = c;
                return 1;
            }
            if (inlined_at(&c, a, out, depth + 1)) {
                return 1;
            }
        }
    } while (dwarf_siblingof(&c, &c) == 0);
    return 0;
}

/* Resolves the module offset off (a return address when ret: the call is the byte before it):
 * the index of its entry in w->res (which a later call may move), NONE on out-of-memory. */
static uint32_t resolve(fw *w, uint64_t off, int ret) {
    uint64_t key = off << 1 | (uint64_t)(ret != 0);
    uint32_t ix = loupe__u64map_get(&w->addr_ix, key);
    if (ix != 0) {
        return ix - 1;
    }
    if (loupe__grow((void **)&w->res, &w->res_cap, w->nres + 1, sizeof(*w->res)) != 0) {
        w->oom = 1;
        return NONE;
    }
    resolved *r = &w->res[w->nres];
    *r = (resolved){(uint32_t)w->nscopes, 0, 0, 0, 0};
    Dwarf_Addr a = w->low + off - (ret ? 1 : 0) - w->dwbias;
    const fnrange *fr = fn_of(w, a);
    /* the function, then the inlined calls that hold a, outermost first */
    Dwarf_Die chain[MAX_SCOPES];
    uint32_t np = 0;
    if (fr != NULL) {
        chain[np++] = fr->fn;
        while (np < MAX_SCOPES && inlined_at(&chain[np - 1], a, &chain[np], 0)) {
            np++;
        }
    }
    Dwarf_Die cu = fr != NULL ? fr->cu : (Dwarf_Die){0};
    if (np > 0 && loupe__grow((void **)&w->scopes, &w->scopes_cap, w->nscopes + np,
                              sizeof(*w->scopes)) == 0) {
        for (uint32_t k = 0; k < np; k++) {
            Dwarf_Die *d = &chain[k];
            int start = 0;
            (void)dwarf_decl_line(d, &start);
            scope s = {linkage_name(w, d, k == 0), start > 0 ? (uint32_t)start : 0, 0, 0};
            if (k > 0) {
                s.call = udata(d, DW_AT_call_line);
                s.call_disc = base_discriminator(udata(d, AT_GNU_DISCRIMINATOR));
            }
            w->scopes[w->nscopes++] = s;
        }
        r->n = np;
        Dwarf_Line *dl = dwarf_getsrc_die(&cu, a);
        int lineno = 0;
        unsigned disc = 0;
        if (dl != NULL && dwarf_lineno(dl, &lineno) == 0) {
            r->line = lineno > 0 ? (uint32_t)lineno : 0;
            if (dwarf_linediscriminator(dl, &disc) == 0) {
                r->disc = base_discriminator(disc);
            }
        }
        r->ok = 1;
    }
    if (loupe__u64map_put(&w->addr_ix, key, (uint32_t)++w->nres) != 0) {
        w->oom = 1;
    }
    return (uint32_t)(w->nres - 1);
}

static uint64_t ent_hash(uint32_t kind, uint32_t node, uint32_t site, uint32_t name) {
    uint64_t h = LOUPE__FNV_OFFSET;
    uint32_t v[4] = {kind, node, site, name};
    for (int i = 0; i < 4; i++) {
        h = (h ^ v[i]) * LOUPE__FNV_PRIME;
        h ^= h >> 29;
    }
    return h;
}

/* The entry (kind, node, site, name), made (count 0) when new; NULL on out-of-memory. */
static pent *entry(fw *w, uint32_t kind, uint32_t node, uint32_t site, uint32_t name) {
    if ((w->nents + 1) * 2 > w->slot_cap) {
        size_t nc = w->slot_cap ? w->slot_cap * 2 : 1024;
        uint32_t *ns = calloc(nc, sizeof(*ns));
        if (ns == NULL) {
            w->oom = 1;
            return NULL;
        }
        for (size_t i = 0; i < w->nents; i++) {
            const pent *e = &w->ents[i];
            size_t j = (size_t)ent_hash(e->kind, e->node, e->site, e->name) & (nc - 1);
            while (ns[j] != 0) {
                j = (j + 1) & (nc - 1);
            }
            ns[j] = (uint32_t)i + 1;
        }
        free(w->slot);
        w->slot = ns;
        w->slot_cap = nc;
    }
    size_t j = (size_t)ent_hash(kind, node, site, name) & (w->slot_cap - 1);
    for (; w->slot[j] != 0; j = (j + 1) & (w->slot_cap - 1)) {
        pent *e = &w->ents[w->slot[j] - 1];
        if (e->kind == kind && e->node == node && e->site == site && e->name == name) {
            return e;
        }
    }
    if (loupe__grow((void **)&w->ents, &w->ents_cap, w->nents + 1, sizeof(*w->ents)) != 0) {
        w->oom = 1;
        return NULL;
    }
    w->ents[w->nents] = (pent){kind, node, site, name, 0};
    w->slot[j] = (uint32_t)++w->nents;
    return &w->ents[w->nents - 1];
}

static uint32_t new_node(fw *w, uint32_t name, uint32_t parent, uint32_t site) {
    if (loupe__grow((void **)&w->nodes, &w->nodes_cap, w->nnodes + 1, sizeof(*w->nodes)) != 0) {
        w->oom = 1;
        return NONE;
    }
    w->nodes[w->nnodes] = (pnode){name, parent, site, 0, 0};
    return (uint32_t)w->nnodes++;
}

/* The top-level node of function name (parent NONE, site 0). */
static uint32_t top_node(fw *w, uint32_t name) {
    pent *e = entry(w, 0, NONE, 0, name);
    if (e == NULL) {
        return NONE;
    }
    if (e->count == 0) {
        uint32_t n = new_node(w, name, NONE, 0);
        if (n == NONE) {
            return NONE;
        }
        e = entry(w, 0, NONE, 0, name); /* the table may have moved */
        e->count = (uint64_t)n + 1;
    }
    return (uint32_t)(e->count - 1);
}

static uint32_t child_node(fw *w, uint32_t parent, uint32_t site, uint32_t name) {
    pent *e = entry(w, 0, parent, site, name);
    if (e == NULL) {
        return NONE;
    }
    if (e->count == 0) {
        uint32_t n = new_node(w, name, parent, site);
        if (n == NONE) {
            return NONE;
        }
        e = entry(w, 0, parent, site, name);
        e->count = (uint64_t)n + 1;
    }
    return (uint32_t)(e->count - 1);
}

static uint32_t site_of(uint32_t line, uint32_t start, uint32_t disc) {
    return ((line - start) & 0xffffu) << 16 | (disc & 0xffffu);
}

/* The node of the innermost scope of r, adding count to each level's total on the way when
 * add_total (a sample's own address); NONE when a level cannot be placed (a call line 0). */
static uint32_t walk_scopes(fw *w, const resolved *r, uint64_t count, int add_total) {
    const scope *s = &w->scopes[r->first];
    uint32_t node = top_node(w, s[0].name);
    for (uint32_t k = 0; node != NONE; k++) {
        if (add_total) {
            w->nodes[node].total += count;
        }
        if (k + 1 == r->n) {
            return node;
        }
        if (s[k + 1].call == 0) {
            return NONE;
        }
        node = child_node(w, node, site_of(s[k + 1].call, s[k].start, s[k + 1].call_disc),
                          s[k + 1].name);
    }
    return NONE;
}

static int is_module(const fw *w, uint32_t node) {
    const loupe_model *m = w->m;
    uint32_t f = m->stack_nodes[node].frame;
    return f < m->frame_count && strcmp(m->frames[f].module, w->module) == 0;
}

static uint64_t offset_of(const fw *w, uint32_t node) {
    return w->m->frames[w->m->stack_nodes[node].frame].module_offset;
}

/* One distinct leaf stack with count samples. */
static void add_stack(fw *w, uint32_t leaf, uint64_t count) {
    const loupe_model *m = w->m;
    uint32_t next;
    if (!is_module(w, leaf)) {
        w->st.samples_elsewhere += count;
        return;
    }
    (void)loupe__stack_group(m, leaf, MAX_GROUP, &next);
    uint32_t ri = resolve(w, offset_of(w, leaf), 0);
    if (ri == NONE) {
        return;
    }
    const resolved *r = &w->res[ri];
    int placed = 0;
    if (!r->ok) {
        w->st.samples_no_debug_info += count;
    } else if (r->line == 0) {
        w->st.samples_line0 += count;
    } else {
        uint32_t node = walk_scopes(w, r, count, 1);
        if (node == NONE) {
            w->st.samples_line0 += count;
        } else {
            const scope *in = &w->scopes[r->first + r->n - 1];
            pent *e = entry(w, 1, node, site_of(r->line, in->start, r->disc), 0);
            if (e != NULL) {
                e->count += count;
                w->st.samples_used += count;
                placed = 1;
            }
        }
    }
    if (!placed) {
        /* a sample left out of the bodies is left out of the call edges too: a call target's
         * count then never holds samples its callee's total leaves out (a helper's lz4 profile
         * had 2,839 in a target against 2,462 in the callee, the difference on line 0) */
        return;
    }
    /* the call edges: callee = the function (outermost scope) of the address below */
    uint32_t callee = ri;
    size_t depth = 0;
    for (uint32_t k = next; k < m->stack_node_count && depth <= m->stack_node_count && !w->oom;
         depth++) {
        uint32_t after;
        (void)loupe__stack_group(m, k, MAX_GROUP, &after);
        uint32_t ci = is_module(w, k) ? resolve(w, offset_of(w, k), 1) : NONE;
        const resolved *caller = ci != NONE ? &w->res[ci] : NULL;
        if (caller != NULL && caller->ok && caller->line != 0 && callee != NONE &&
            w->res[callee].ok) {
            uint32_t node = walk_scopes(w, caller, count, 0);
            if (node != NONE) {
                const scope *in = &w->scopes[caller->first + caller->n - 1];
                uint32_t target = w->scopes[w->res[callee].first].name;
                pent *e = entry(w, 2, node, site_of(caller->line, in->start, caller->disc), target);
                if (e != NULL) {
                    e->count += count;
                }
            }
        }
        callee = ci;
        k = after;
    }
}

/* ---- output ---- */

typedef struct outbuf {
    char *p;
    size_t len, cap;
    int oom;
} outbuf;

static void out(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(outbuf *o, const char *fmt, ...) {
    if (o->oom) {
        return;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = 1;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t nc = o->cap ? o->cap * 2 : 65536;
        while (nc - o->len <= (size_t)n) {
            nc *= 2;
        }
        char *np = realloc(o->p, nc);
        if (np == NULL) {
            o->oom = 1;
            return;
        }
        o->p = np;
        o->cap = nc;
    }
}

/* Entries sorted by (node, site, kind, name): each node's lines in offset order. */
static int cmp_ent(const void *pa, const void *pb) {
    const pent *a = pa, *b = pb;
    if (a->node != b->node) {
        return a->node < b->node ? -1 : 1;
    }
    if (a->site != b->site) {
        return a->site < b->site ? -1 : 1;
    }
    if (a->kind != b->kind) {
        return a->kind > b->kind ? -1 : 1; /* targets, then bodies, then children */
    }
    return (a->name > b->name) - (a->name < b->name);
}

static void put_site(outbuf *o, int indent, uint32_t site) {
    out(o, "%*s%u", indent, "", site >> 16);
    if ((site & 0xffffu) != 0) {
        out(o, ".%u", site & 0xffffu);
    }
    out(o, ":");
}

/* Writes node n's lines (its entries are ents[first[n] .. first[n + 1])) at indent. */
static void put_node(fw *w, outbuf *o, const size_t *first, uint32_t n, int indent) {
    const pent *e = w->ents + first[n], *end = w->ents + first[n + 1];
    while (e < end) {
        uint32_t site = e->site;
        /* a body line with its call targets (those sort before the body of the same site) */
        const pent *t = e;
        uint64_t body = 0;
        int any = 0;
        for (const pent *x = e; x < end && x->site == site && x->kind != 0; x++) {
            body += x->kind == 1 ? x->count : 0;
            any = 1;
        }
        if (any) {
            put_site(o, indent, site);
            out(o, " %llu", (unsigned long long)body);
            for (; t < end && t->site == site && t->kind == 2; t++) {
                out(o, " %s:%llu", loupe__strtab_at(&w->strs, t->name, NULL),
                    (unsigned long long)t->count);
            }
            out(o, "\n");
        }
        while (e < end && e->site == site && e->kind != 0) {
            e++;
        }
        for (; e < end && e->site == site && e->kind == 0; e++) {
            uint32_t c = (uint32_t)(e->count - 1);
            put_site(o, indent, site);
            out(o, " %s:%llu\n", loupe__strtab_at(&w->strs, w->nodes[c].name, NULL),
                (unsigned long long)w->nodes[c].total);
            put_node(w, o, first, c, indent + 1);
        }
    }
}

static int cmp_top(const void *pa, const void *pb, void *arg) {
    const fw *w = arg;
    const pnode *a = &w->nodes[*(const uint32_t *)pa], *b = &w->nodes[*(const uint32_t *)pb];
    if (a->total != b->total) {
        return a->total > b->total ? -1 : 1;
    }
    return strcmp(loupe__strtab_at(&w->strs, a->name, NULL),
                  loupe__strtab_at(&w->strs, b->name, NULL));
}

static int emit(fw *w, outbuf *o) {
    /* entries of the top-level node table (kind 0, node NONE) sort last; the rest by node */
    qsort(w->ents, w->nents, sizeof(*w->ents), cmp_ent);
    size_t *first = calloc(w->nnodes + 2, sizeof(*first));
    uint32_t *tops = malloc((w->nnodes + 1) * sizeof(*tops));
    if (first == NULL || tops == NULL) {
        free(first);
        free(tops);
        return -1;
    }
    size_t e = 0;
    for (uint32_t n = 0; n <= w->nnodes; n++) {
        first[n] = e;
        while (e < w->nents && w->ents[e].node == n) {
            e++;
        }
    }
    first[w->nnodes + 1] = e;
    size_t ntop = 0;
    for (uint32_t n = 0; n < w->nnodes; n++) {
        if (w->nodes[n].parent == NONE && (w->nodes[n].total > 0 || first[n + 1] > first[n])) {
            tops[ntop++] = n;
        }
    }
    qsort_r(tops, ntop, sizeof(*tops), cmp_top, w);
    for (size_t i = 0; i < ntop; i++) {
        uint32_t n = tops[i];
        /* head: the samples on the function's first line, at least 1 */
        uint64_t head = 0;
        for (size_t k = first[n]; k < first[n + 1]; k++) {
            head += w->ents[k].kind == 1 && (w->ents[k].site >> 16) == 0 ? w->ents[k].count : 0;
        }
        out(o, "%s:%llu:%llu\n", loupe__strtab_at(&w->strs, w->nodes[n].name, NULL),
            (unsigned long long)w->nodes[n].total, (unsigned long long)(head > 0 ? head : 1));
        put_node(w, o, first, n, 1);
        w->st.functions++;
    }
    free(first);
    free(tops);
    return o->oom ? -1 : 0;
}

static void fw_free(fw *w) {
    if (w->dwfl != NULL) {
        dwfl_end(w->dwfl);
    }
    loupe__strtab_free(&w->strs);
    loupe__u64map_free(&w->addr_ix);
    free(w->res);
    free(w->scopes);
    free(w->nodes);
    free(w->ents);
    free(w->slot);
    free(w->fns);
}

/* The samples whose leaf frame is in module. */
static size_t leaves_in(const loupe_model *m, const char *module) {
    size_t n = 0;
    for (size_t i = 0; i < m->sample_count; i++) {
        uint32_t leaf = m->samples[i].stack;
        uint32_t f = leaf < m->stack_node_count ? m->stack_nodes[leaf].frame : UINT32_MAX;
        n += f < m->frame_count && strcmp(m->frames[f].module, module) == 0;
    }
    return n;
}

/* The build-id (hex) of the module's file as it is now. 1 with now set, 0 when it has none. */
static int disk_build_id(Dwfl_Module *mod, char *now, size_t size) {
    const unsigned char *bits = NULL;
    GElf_Addr vaddr;
    Dwarf_Addr bias;
    int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len <= 0 && dwfl_module_getelf(mod, &bias) != NULL) {
        len = dwfl_module_build_id(mod, &bits, &vaddr);
    }
    if (len <= 0 || (size_t)len * 2 + 1 > size) {
        return 0;
    }
    for (int k = 0; k < len; k++) {
        snprintf(now + 2 * k, size - 2 * (size_t)k, "%02x", bits[k]);
    }
    return 1;
}

/* The distinct modules of the samples' leaf frames, "a, b, c" (cut at size), for a message. */
static void module_list(const loupe_model *m, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = 0;
    const char *last = NULL;
    for (size_t i = 0; i < m->sample_count && len + 8 < size; i++) {
        uint32_t leaf = m->samples[i].stack;
        uint32_t f = leaf < m->stack_node_count ? m->stack_nodes[leaf].frame : UINT32_MAX;
        const char *mod = f < m->frame_count ? m->frames[f].module : NULL;
        if (mod == NULL || mod[0] == 0 || mod == last) {
            continue;
        }
        last = mod;
        size_t ml = strlen(mod);
        int seen = 0; /* already listed: a whole entry of buf */
        for (const char *p = strstr(buf, mod); p != NULL && !seen; p = strstr(p + 1, mod)) {
            seen = (p == buf || p[-1] == ' ') && (p[ml] == ',' || p[ml] == 0);
        }
        if (!seen) {
            int k = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", mod);
            len = k > 0 && (size_t)k < size - len ? len + (size_t)k : size - 1;
        }
    }
    if (buf[0] == 0) {
        snprintf(buf, size, "none (no sample has a module)");
    }
}

static char *debuginfo_path;
static const Dwfl_Callbacks offline_callbacks = {
    /* local files only: the file itself, or /usr/lib/debug/.build-id/ (never debuginfod) */
    .find_debuginfo = dwfl_build_id_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};
#endif /* LOUPE_HAVE_LIBDW */

int loupe_fdo_profile(const loupe_model *m, const loupe_fdo_options *o, char **out_text,
                      size_t *out_len, loupe_fdo_stats *stats) {
    if (m == NULL || out_text == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_fdo_profile: %s is NULL",
                          m == NULL ? "the model" : "out");
    }
    *out_text = NULL;
    if (out_len != NULL) {
        *out_len = 0;
    }
    loupe_fdo_format format = o != NULL ? o->format : LOUPE_FDO_LLVM_TEXT;
    if (format != LOUPE_FDO_LLVM_TEXT) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_fdo_profile: format %d is not LOUPE_FDO_LLVM_TEXT (the one "
                          "format written so far)",
                          (int)format);
    }
#ifndef LOUPE_HAVE_LIBDW
    (void)stats;
    return loupe__err(LOUPE_EUNSUPPORTED,
                      "loupe_fdo_profile: this loupe was built without libdw (elfutils), which "
                      "reads the line tables a sample profile is made from");
#else
    if (m->sample_count == 0) {
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "the trace holds no CPU samples, and a sample profile is made of them: "
                          "record with sampling on (loupe record samples at 999 Hz unless "
                          "--no-sample; loupe_trace_options.sampling_hz), and long enough: a "
                          "sample comes per period of CPU time (1 ms at 999 Hz), so a program "
                          "that ran for less gets none");
    }
    const char *module = o != NULL && o->module != NULL ? o->module : loupe__main_module(m);
    char resolved_path[PATH_MAX];
    if (o != NULL && o->module != NULL) {
        /* the trace names modules as the kernel mapped them: absolute, links resolved */
        if (realpath(o->module, resolved_path) == NULL) {
            return loupe__err(LOUPE_EIO, "cannot read %s for its line tables: %s", o->module,
                              strerror(errno));
        }
        module = resolved_path;
    } else if (module == NULL || module[0] != '/') {
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "no program module found in the trace's samples (none of its frames "
                          "names an ELF file): name one with loupe_fdo_options.module "
                          "(loupe convert --module PATH)");
    }
    if (leaves_in(m, module) == 0) {
        char mods[1024];
        module_list(m, mods, sizeof mods);
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "none of the trace's %zu samples is in %s; the modules its samples are "
                          "in: %s",
                          m->sample_count, module, mods);
    }
    fw w = {.m = m, .module = module};
    w.st.samples = m->sample_count;
    snprintf(w.st.module, sizeof w.st.module, "%s", module);
    w.dwfl = dwfl_begin(&offline_callbacks);
    w.mod = w.dwfl != NULL ? dwfl_report_offline(w.dwfl, module, module, -1) : NULL;
    if (w.dwfl != NULL) {
        dwfl_report_end(w.dwfl, NULL, NULL);
    }
    if (w.mod == NULL) {
        int r = loupe__err(LOUPE_EIO, "cannot read %s for its line tables: %s", module,
                           w.dwfl != NULL ? dwfl_errmsg(-1) : "out of memory");
        fw_free(&w);
        return r;
    }
    (void)dwfl_module_info(w.mod, NULL, &w.low, NULL, NULL, NULL, NULL, NULL);
    char ran[130], now[130];
    if (loupe__ran_build_id(m, module, ran, sizeof ran) && disk_build_id(w.mod, now, sizeof now) &&
        strcmp(ran, now) != 0) {
        int r = loupe__err(LOUPE_EINVALID,
                           "%s is not the file the run sampled: its build-id is %s, the run's was "
                           "%s (rebuilt since?), so the profile's lines would be another build's: "
                           "record the program again",
                           module, now, ran);
        fw_free(&w);
        return r;
    }
    if (fn_table(&w) != 0) {
        w.oom = 1;
    }
    /* the samples by distinct leaf stack */
    loupe__u64map ix = {0};
    uint64_t *counts = NULL;
    uint32_t *leaves = NULL;
    size_t nl = 0, cap = 0;
    for (size_t i = 0; i < m->sample_count && !w.oom; i++) {
        uint32_t leaf = m->samples[i].stack;
        if (leaf >= m->stack_node_count) {
            w.st.samples_elsewhere++;
            continue;
        }
        uint32_t v = loupe__u64map_get(&ix, leaf);
        if (v != 0) {
            counts[v - 1]++;
            continue;
        }
        if (nl == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            uint64_t *nc1 = realloc(counts, nc * sizeof(*nc1));
            if (nc1 != NULL) {
                counts = nc1;
            }
            uint32_t *nc2 = nc1 != NULL ? realloc(leaves, nc * sizeof(*nc2)) : NULL;
            if (nc2 == NULL) {
                w.oom = 1;
                break;
            }
            leaves = nc2;
            cap = nc;
        }
        leaves[nl] = leaf;
        counts[nl] = 1;
        if (loupe__u64map_put(&ix, leaf, (uint32_t)++nl) != 0) {
            w.oom = 1;
        }
    }
    for (size_t i = 0; i < nl && !w.oom; i++) {
        add_stack(&w, leaves[i], counts[i]);
    }
    loupe__u64map_free(&ix);
    free(counts);
    free(leaves);
    outbuf ob = {0};
    if (!w.oom && w.st.samples_used == 0) {
        int r = loupe__err(LOUPE_EUNSUPPORTED,
                           "none of the %zu samples could be placed on a line of %s (%llu in it "
                           "without DWARF line tables, %llu on line 0, %llu in other modules): "
                           "build it with -g or -gline-tables-only",
                           m->sample_count, module, (unsigned long long)w.st.samples_no_debug_info,
                           (unsigned long long)w.st.samples_line0,
                           (unsigned long long)w.st.samples_elsewhere);
        fw_free(&w);
        return r;
    }
    if (w.oom || emit(&w, &ob) != 0) {
        free(ob.p);
        fw_free(&w);
        return loupe__err(LOUPE_ENOMEM, "out of memory making the sample profile of %s", module);
    }
    if (stats != NULL) {
        *stats = w.st;
    }
    fw_free(&w);
    *out_text = ob.p != NULL ? ob.p : calloc(1, 1);
    if (out_len != NULL) {
        *out_len = ob.len;
    }
    return *out_text != NULL ? 0 : loupe__err(LOUPE_ENOMEM, "out of memory");
#endif
}

int loupe__write_llvm_prof(const loupe_model *m, loupe__sink *s) {
    char *text = NULL;
    size_t len = 0;
    int r = loupe_fdo_profile(m, NULL, &text, &len, NULL);
    if (r == 0) {
        loupe__put(s, text, len);
    }
    free(text);
    return r;
}
