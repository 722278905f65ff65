/* decode.c: the in-kernel timeline decoder (gpu.h). Plain C, no CUDA: the buffer is a copy of
 * device memory, words in little-endian order as the GPU wrote them.
 *
 * Passes: (1) shape and header checks over every trace, before any allocation, so that a bad
 * buffer fails whole; (2) the per-event overhead (Mosaic's rule: min step - 1, from 12);
 * (3) the clock rate, sum of cycles / sum of globaltimer ns over the traces (the %clock chain
 * start → events → end unwrapped step by step as signed 32-bit steps, so a u32 wrap inside a trace
 * is harmless and a small backward step stays small); (4) events: cycles → ns, backward steps
 * clamped to last + 1 cycle, B/E nesting checked with a stack, open regions closed at the last
 * timestamp. Steps must stay below 2^31 cycles (1.2 s at 1.755 GHz) to unwrap.
 */
#include "base/error.h"
#include "gpu/gpu_internal.h"

#include <loupe/gpu.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOSAIC_ODD_MSG                                                                             \
    "Profiler collected an odd number of trace events. This likely indicates memory corruption "   \
    "due to insufficient profiling space. Try again with a larger profiling space."

#define MAX_WARNING_LINES 32

/* ---- strings: id → name, owned by the result ---- */

typedef struct priv {
    uint32_t *ids;
    char **strs;
    size_t cap, count;
    char *warn;
    size_t warn_len, warn_cap;
    unsigned warn_lines;
    uint64_t warn_more;
} priv;

static const char *name_of(priv *p, const loupe_gpu_names *names, uint32_t id) {
    if (p->cap == 0 || (p->count + 1) * 2 > p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 64;
        uint32_t *ni = malloc(nc * sizeof(*ni));
        char **ns = calloc(nc, sizeof(*ns));
        if (ni == NULL || ns == NULL) {
            free(ni);
            free(ns);
            return NULL;
        }
        for (size_t i = 0; i < p->cap; i++) {
            if (p->strs[i] != NULL) {
                size_t j = (size_t)(p->ids[i] * 2654435761u) & (nc - 1);
                while (ns[j] != NULL) {
                    j = (j + 1) & (nc - 1);
                }
                ni[j] = p->ids[i];
                ns[j] = p->strs[i];
            }
        }
        free(p->ids);
        free(p->strs);
        p->ids = ni;
        p->strs = ns;
        p->cap = nc;
    }
    size_t j = (size_t)(id * 2654435761u) & (p->cap - 1);
    while (p->strs[j] != NULL) {
        if (p->ids[j] == id) {
            return p->strs[j];
        }
        j = (j + 1) & (p->cap - 1);
    }
    const char *n = loupe_gpu_names_get(names, id);
    char tmp[16];
    if (n == NULL) {
        snprintf(tmp, sizeof tmp, "#%u", id);
        n = tmp;
    }
    char *copy = strdup(n);
    if (copy == NULL) {
        return NULL;
    }
    p->ids[j] = id;
    p->strs[j] = copy;
    p->count++;
    return copy;
}

static void warn(priv *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(priv *p, const char *fmt, ...) {
    if (p->warn_lines >= MAX_WARNING_LINES) {
        p->warn_more++;
        return;
    }
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : ((size_t)n >= sizeof line ? sizeof line - 1 : (size_t)n);
    if (p->warn_len + len + 2 > p->warn_cap) {
        size_t nc = (p->warn_cap ? p->warn_cap * 2 : 1024) + len;
        char *nw = realloc(p->warn, nc);
        if (nw == NULL) {
            return; /* warnings are best effort; the counters still count */
        }
        p->warn = nw;
        p->warn_cap = nc;
    }
    memcpy(p->warn + p->warn_len, line, len);
    p->warn_len += len;
    p->warn[p->warn_len++] = '\n';
    p->warn[p->warn_len] = 0;
    p->warn_lines++;
}

/* ---- shape ---- */

static int shape(const loupe_gpu_spec *spec, const uint32_t grid[3], const uint32_t block[3],
                 uint32_t *scope, uint64_t *tpb, uint64_t *traces, uint64_t *words) {
    *scope = spec->scope ? spec->scope : 128;
    if (*scope != 32 && *scope != 128) {
        return loupe__err(LOUPE_EINVALID,
                          "Unsupported trace scope: %u (use 32 for a warp, 128 for a warpgroup)",
                          spec->scope);
    }
    if (spec->layout != LOUPE_GPU_LAYOUT_LOUPE && spec->layout != LOUPE_GPU_LAYOUT_MOSAIC) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu: unknown layout %d", (int)spec->layout);
    }
    uint32_t h = spec->layout == LOUPE_GPU_LAYOUT_MOSAIC ? LOUPE_GPU_MOSAIC_HEADER_WORDS
                                                         : LOUPE_GPU_HEADER_WORDS;
    if (spec->entries_per_trace < h) {
        return loupe__err(LOUPE_EINVALID,
                          "entries_per_trace %u is below the %u header words of the %s layout",
                          spec->entries_per_trace, h,
                          spec->layout == LOUPE_GPU_LAYOUT_MOSAIC ? "Mosaic" : "loupe");
    }
    for (int i = 0; i < 3; i++) {
        if (grid[i] == 0 || block[i] == 0) {
            return loupe__err(LOUPE_EINVALID,
                              "grid and block dimensions must be at least 1 "
                              "(grid %u,%u,%u block %u,%u,%u)",
                              grid[0], grid[1], grid[2], block[0], block[1], block[2]);
        }
    }
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads % *scope != 0) {
        return loupe__err(LOUPE_EINVALID, "Block size is not a multiple of %u", *scope);
    }
    *tpb = threads / *scope;
    /* grid product < 2^96 in general: check each step against 2^62. */
    uint64_t blocks = (uint64_t)grid[0] * grid[1];
    if (blocks > (1ull << 62) / grid[2]) {
        return loupe__err(LOUPE_EINVALID, "grid too large");
    }
    blocks *= grid[2];
    if (*tpb != 0 && blocks > (1ull << 62) / *tpb) {
        return loupe__err(LOUPE_EINVALID, "grid too large");
    }
    *traces = blocks * *tpb;
    if (*traces > (1ull << 62) / spec->entries_per_trace) {
        return loupe__err(LOUPE_EINVALID, "grid too large");
    }
    *words = *traces * spec->entries_per_trace;
    return 0;
}

size_t loupe_gpu_buffer_bytes(const loupe_gpu_spec *spec, const uint32_t grid[3],
                              const uint32_t block[3]) {
    if (spec == NULL || grid == NULL || block == NULL) {
        return 0;
    }
    uint32_t scope;
    uint64_t tpb = 0, traces = 0, words = 0;
    if (shape(spec, grid, block, &scope, &tpb, &traces, &words) != 0) {
        return 0;
    }
    if (words > SIZE_MAX / 4) {
        return 0;
    }
    return (size_t)(words * 4);
}

/* ---- decode ---- */

static uint64_t gt64(const uint32_t *w, int lo, int hi) {
    return (uint64_t)w[lo] | ((uint64_t)w[hi] << 32);
}

static int all_zero(const uint32_t *w, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        if (w[i] != 0) {
            return 0;
        }
    }
    return 1;
}

static const char *scope_word(uint32_t scope) {
    return scope == 32 ? "warp" : "warpgroup";
}

static int cmp_trace(const void *a, const void *b) {
    const loupe_gpu_trace *x = a, *y = b;
    if (x->gt_start_ns != y->gt_start_ns) {
        return x->gt_start_ns < y->gt_start_ns ? -1 : 1;
    }
    return x->index < y->index ? -1 : (x->index > y->index);
}

void loupe_gpu_decoded_free(loupe_gpu_decoded *d) {
    if (d == NULL) {
        return;
    }
    priv *p = d->loupe__priv;
    for (size_t i = 0; i < d->trace_count; i++) {
        free(d->traces[i].events);
    }
    free(d->traces);
    if (p != NULL) {
        for (size_t i = 0; i < p->cap; i++) {
            free(p->strs[i]);
        }
        free(p->ids);
        free(p->strs);
        free(p->warn);
        free(p);
    }
    free(d);
}

typedef struct open_region {
    uint32_t id;
} open_region;

int loupe_gpu_decode(const uint32_t *buf, size_t n_words, const loupe_gpu_spec *spec,
                     const uint32_t grid[3], const uint32_t block[3], const loupe_gpu_names *names,
                     const loupe_gpu_decode_options *opts, loupe_gpu_decoded **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (spec == NULL || grid == NULL || block == NULL || out == NULL ||
        (buf == NULL && n_words > 0)) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_decode: NULL argument");
    }
    loupe_gpu_decode_options o = {0};
    if (opts != NULL) {
        o = *opts;
    }
    uint32_t warn_cycles = o.backward_warn_cycles ? o.backward_warn_cycles : 10;
    if (o.fallback_ghz != 0 && !(o.fallback_ghz >= 0.001 && o.fallback_ghz <= 1000.0)) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_gpu_decode: fallback_ghz %g is not a clock rate from 0.001 to "
                          "1000 GHz (0 = the 1 GHz default)",
                          o.fallback_ghz);
    }
    double fallback = o.fallback_ghz != 0 ? o.fallback_ghz : 1.0;
    uint32_t scope;
    uint64_t tpb = 0, ntr = 0, words = 0;
    int r = shape(spec, grid, block, &scope, &tpb, &ntr, &words);
    if (r != 0) {
        return r;
    }
    if ((uint64_t)n_words != words) {
        return loupe__err(LOUPE_EFORMAT,
                          "Buffer size mismatch: %zu words (%zu bytes), expected %llu traces x %u "
                          "entries = %llu words",
                          n_words, n_words * 4, (unsigned long long)ntr, spec->entries_per_trace,
                          (unsigned long long)words);
    }
    const int mosaic = spec->layout == LOUPE_GPU_LAYOUT_MOSAIC;
    const uint32_t E = spec->entries_per_trace;
    const uint32_t H = mosaic ? LOUPE_GPU_MOSAIC_HEADER_WORDS : LOUPE_GPU_HEADER_WORDS;
    const uint32_t cap_words = E - H;

    /* Pass 1: headers. */
    uint64_t nonempty = 0, overflowed = 0, max_attempted = 0, first_over = 0, over_att = 0;
    for (uint64_t t = 0; t < ntr; t++) {
        const uint32_t *w = buf + t * E;
        if (all_zero(w, H)) {
            continue;
        }
        uint64_t b = t / tpb, k = t % tpb;
        if (!mosaic) {
            if ((w[8] & 0xFFFF0000u) != LOUPE_GPU_MAGIC) {
                return loupe__err(LOUPE_EFORMAT,
                                  "Trace %llu (block %llu, %s %llu): bad magic 0x%08x (expected "
                                  "0x%04x%04x: a loupe layout version %u buffer; a JAX buffer "
                                  "needs the Mosaic layout)",
                                  (unsigned long long)t, (unsigned long long)b, scope_word(scope),
                                  (unsigned long long)k, w[8], LOUPE_GPU_MAGIC >> 16,
                                  LOUPE_GPU_VERSION, LOUPE_GPU_VERSION);
            }
            if ((w[8] & 0xFFFFu) != LOUPE_GPU_VERSION) {
                return loupe__err(LOUPE_EFORMAT,
                                  "Trace %llu: layout version %u is not supported (this loupe "
                                  "reads version %u)",
                                  (unsigned long long)t, w[8] & 0xFFFFu, LOUPE_GPU_VERSION);
            }
        }
        uint32_t att = w[2];
        if (att % 2 != 0) {
            return loupe__err(LOUPE_EFORMAT, "%s (trace %llu: %u entries)", MOSAIC_ODD_MSG,
                              (unsigned long long)t, att);
        }
        nonempty++;
        if (att > max_attempted) {
            max_attempted = att;
        }
        if (att > cap_words) {
            if (overflowed++ == 0) {
                first_over = t;
                over_att = att;
            }
        }
    }
    uint64_t needed = max_attempted + H;
    if (overflowed > 0 && o.strict) {
        return loupe__err(LOUPE_EGPU_OVERFLOW,
                          "Insufficient space to capture a full trace: %llu of %llu traces "
                          "overflowed (first: trace %llu recorded %llu of %llu events); "
                          "entries_per_trace %llu would hold every event (now %u)",
                          (unsigned long long)overflowed, (unsigned long long)nonempty,
                          (unsigned long long)first_over, (unsigned long long)(cap_words / 2),
                          (unsigned long long)(over_att / 2), (unsigned long long)needed, E);
    }

    /* Pass 2: overhead. */
    uint32_t ov;
    if (o.overhead_cycles == LOUPE_GPU_OVERHEAD_ESTIMATE) {
        int64_t min = 12; /* Mosaic's initial: "ballpark estimate for H100" */
        for (uint64_t t = 0; t < ntr; t++) {
            const uint32_t *w = buf + t * E;
            if (all_zero(w, H)) {
                continue;
            }
            uint32_t rec = w[2] < cap_words ? w[2] : cap_words;
            const uint32_t *ev = w + H;
            for (uint32_t j = 3; j < rec; j += 2) {
                int64_t d = (int32_t)(ev[j] - ev[j - 2]);
                if (d >= 0 && d < min) {
                    min = d;
                }
            }
        }
        ov = min > 1 ? (uint32_t)(min - 1) : 0;
    } else if (o.overhead_cycles < 0) {
        ov = 0;
    } else {
        ov = (uint32_t)o.overhead_cycles;
    }

    /* Pass 3: the clock rate, from the (clock, globaltimer) pairs of loupe buffers. */
    double ghz = fallback;
    int measured = 0;
    if (!mosaic) {
        double sum_c = 0, sum_ns = 0;
        for (uint64_t t = 0; t < ntr; t++) {
            const uint32_t *w = buf + t * E;
            if (all_zero(w, H)) {
                continue;
            }
            uint64_t g0 = gt64(w, 0, 3), g1 = gt64(w, 4, 5);
            if (g1 <= g0) {
                continue;
            }
            uint32_t rec = w[2] < cap_words ? w[2] : cap_words;
            int64_t acc = 0;
            uint32_t prev = w[6];
            for (uint32_t j = 1; j < rec; j += 2) {
                acc += (int32_t)(w[H + j] - prev);
                prev = w[H + j];
            }
            acc += (int32_t)(w[7] - prev);
            if (acc <= 0) {
                continue;
            }
            sum_c += (double)acc;
            sum_ns += (double)(g1 - g0);
        }
        if (sum_ns > 0) {
            double f = sum_c / sum_ns;
            if (f >= 0.1 && f <= 10.0) {
                ghz = f;
                measured = 1;
            }
        }
    }

    /* Mosaic: 32-bit globaltimer starts, unwrapped around the first trace's (signed steps). */
    uint32_t ref_lo = 0;
    int have_ref = 0;
    int64_t min_diff = 0;
    if (mosaic) {
        for (uint64_t t = 0; t < ntr; t++) {
            const uint32_t *w = buf + t * E;
            if (all_zero(w, H)) {
                continue;
            }
            if (!have_ref) {
                ref_lo = w[0];
                have_ref = 1;
            }
            int64_t d = (int32_t)(w[0] - ref_lo);
            if (d < min_diff) {
                min_diff = d;
            }
        }
    }
    uint64_t mosaic_base = (uint32_t)(ref_lo + (uint32_t)min_diff);

    /* Pass 4: events. */
    loupe_gpu_decoded *d = calloc(1, sizeof(*d));
    priv *p = calloc(1, sizeof(*p));
    open_region *stack = NULL;
    if (d == NULL || p == NULL) {
        free(d);
        free(p);
        return loupe__err(LOUPE_ENOMEM, "loupe_gpu_decode: out of memory");
    }
    d->loupe__priv = p;
    d->spec = *spec;
    d->spec.scope = scope;
    memcpy(d->grid, grid, sizeof d->grid);
    memcpy(d->block, block, sizeof d->block);
    d->traces_per_block = (uint32_t)tpb;
    d->traces_empty = (size_t)(ntr - nonempty);
    d->needed_entries = (uint32_t)(needed > UINT32_MAX ? UINT32_MAX : needed);
    d->ghz = ghz;
    d->ghz_measured = measured;
    d->overhead_cycles = ov;
    d->traces = calloc(nonempty ? (size_t)nonempty : 1, sizeof(loupe_gpu_trace));
    stack = malloc(((size_t)cap_words / 2 + 1) * sizeof(*stack));
    if (d->traces == NULL || stack == NULL) {
        goto oom;
    }
    for (uint64_t t = 0; t < ntr; t++) {
        const uint32_t *w = buf + t * E;
        if (all_zero(w, H)) {
            continue;
        }
        loupe_gpu_trace *tr = &d->traces[d->trace_count++];
        tr->index = (uint32_t)t;
        tr->block_linear = (uint32_t)(t / tpb);
        tr->trace_in_block = (uint32_t)(t % tpb);
        tr->smid = w[1];
        uint32_t att = w[2];
        uint32_t rec = att < cap_words ? att : cap_words;
        tr->events_attempted = att / 2;
        tr->events_recorded = rec / 2;
        tr->events_dropped = tr->events_attempted - tr->events_recorded;
        tr->truncated = tr->events_dropped > 0;
        d->events_dropped += tr->events_dropped;
        d->traces_truncated += tr->truncated != 0;
        d->events += tr->events_recorded;
        uint64_t base;
        uint32_t ref_clock;
        if (mosaic) {
            base = mosaic_base + (uint64_t)((int64_t)(int32_t)(w[0] - ref_lo) - min_diff);
            ref_clock = rec >= 2 ? w[H + 1] : 0;
        } else {
            base = gt64(w, 0, 3);
            ref_clock = w[6];
        }
        tr->gt_start_ns = base;
        size_t nev = (size_t)tr->events_recorded;
        tr->events = calloc(nev * 2 + 1, sizeof(loupe_gpu_event));
        if (tr->events == NULL) {
            goto oom;
        }
        size_t depth = 0, ne = 0;
        int64_t acc = 0, last = -1;
        uint32_t prev = ref_clock;
        uint64_t last_ts = base;
        for (size_t k = 0; k < nev; k++) {
            uint32_t tag = w[H + 2 * k], clk = w[H + 2 * k + 1];
            acc += (int32_t)(clk - prev);
            prev = clk;
            int64_t tc = acc - (int64_t)k * ov;
            if (tc <= last) {
                if (tc < last) {
                    d->backward_steps++;
                    if (last - tc > (int64_t)warn_cycles) {
                        d->backward_warnings++;
                        warn(p,
                             "Profiler clock went significantly backwards in trace %u (SM %u) "
                             "at event %zu: %lld -> %lld cycles",
                             tr->index, tr->smid, k, (long long)last, (long long)tc);
                    }
                }
                tc = last + 1;
            }
            last = tc;
            uint64_t ts = base + (uint64_t)llround((double)tc / ghz);
            last_ts = ts;
            uint32_t kind_bits = mosaic ? (tag & LOUPE_GPU_TAG_END)
                                        : (tag & (LOUPE_GPU_TAG_END | LOUPE_GPU_TAG_INSTANT));
            uint32_t id = tag & ~kind_bits;
            const char *nm = name_of(p, names, id);
            if (nm == NULL) {
                goto oom;
            }
            if (kind_bits == 0) {
                stack[depth++].id = id;
                tr->events[ne++] = (loupe_gpu_event){ts, id, LOUPE_GPU_BEGIN, 0, nm};
            } else if (kind_bits == LOUPE_GPU_TAG_INSTANT) {
                tr->events[ne++] = (loupe_gpu_event){ts, id, LOUPE_GPU_INSTANT, 0, nm};
            } else if (kind_bits == LOUPE_GPU_TAG_END) {
                size_t m = depth;
                while (m > 0 && stack[m - 1].id != id) {
                    m--;
                }
                if (m == 0) {
                    d->unmatched_ends++;
                    warn(p, "Trace %u: end of `%s` without an open region: dropped", tr->index, nm);
                    continue;
                }
                while (depth > m) { /* regions above lost their ends */
                    depth--;
                    d->unclosed++;
                    warn(p, "Trace %u: `%s` was still open at the end of `%s`: closed there",
                         tr->index, name_of(p, names, stack[depth].id), nm);
                    tr->events[ne++] = (loupe_gpu_event){ts, stack[depth].id, LOUPE_GPU_END, 1,
                                                         name_of(p, names, stack[depth].id)};
                }
                depth--;
                tr->events[ne++] = (loupe_gpu_event){ts, id, LOUPE_GPU_END, 0, nm};
            } else { /* both kind bits: not written by loupe_device.cuh */
                d->unmatched_ends++;
                warn(p, "Trace %u: tag 0x%08x has both the end and instant bits: dropped",
                     tr->index, tag);
            }
        }
        /* Open regions end at the last timestamp (expected when the trace was truncated). */
        while (depth > 0) {
            depth--;
            if (!tr->truncated) {
                d->unclosed++;
            }
            tr->events[ne++] = (loupe_gpu_event){last_ts, stack[depth].id, LOUPE_GPU_END, 1,
                                                 name_of(p, names, stack[depth].id)};
        }
        tr->event_count = ne;
        tr->gt_end_ns = mosaic ? last_ts : gt64(w, 4, 5);
        if (tr->gt_end_ns < last_ts) {
            tr->gt_end_ns = last_ts;
        }
        if (tr->truncated) {
            warn(p,
                 "Trace %u (block %u, %s %u, SM %u): %llu of %llu events dropped; "
                 "entries_per_trace %u would hold them",
                 tr->index, tr->block_linear, scope_word(scope), tr->trace_in_block, tr->smid,
                 (unsigned long long)tr->events_dropped, (unsigned long long)tr->events_attempted,
                 d->needed_entries);
        }
    }
    free(stack);
    if (p->warn_more > 0) {
        warn(p, "... %llu more warnings", (unsigned long long)p->warn_more);
        p->warn_more = 0;
    }
    if (p->warn == NULL) {
        p->warn = calloc(1, 1);
        if (p->warn == NULL) {
            loupe_gpu_decoded_free(d);
            return loupe__err(LOUPE_ENOMEM, "loupe_gpu_decode: out of memory");
        }
    }
    d->warnings = p->warn;
    qsort(d->traces, d->trace_count, sizeof(loupe_gpu_trace), cmp_trace);
    *out = d;
    return 0;
oom:
    free(stack);
    loupe_gpu_decoded_free(d);
    return loupe__err(LOUPE_ENOMEM, "loupe_gpu_decode: out of memory");
}

loupe_gpu_decoded *loupe__gpu_decoded_clone(const loupe_gpu_decoded *d) {
    loupe_gpu_decoded *c = calloc(1, sizeof(*c));
    priv *p = calloc(1, sizeof(*p));
    if (c == NULL || p == NULL) {
        free(c);
        free(p);
        return NULL;
    }
    *c = *d;
    c->loupe__priv = p;
    c->trace_count = 0;
    c->warnings = NULL;
    c->traces = calloc(d->trace_count ? d->trace_count : 1, sizeof(loupe_gpu_trace));
    p->warn = strdup(d->warnings != NULL ? d->warnings : "");
    if (c->traces == NULL || p->warn == NULL) {
        loupe_gpu_decoded_free(c);
        return NULL;
    }
    c->warnings = p->warn;
    for (size_t i = 0; i < d->trace_count; i++) {
        const loupe_gpu_trace *s = &d->traces[i];
        loupe_gpu_trace *t = &c->traces[c->trace_count++];
        *t = *s;
        t->events = malloc((s->event_count ? s->event_count : 1) * sizeof(loupe_gpu_event));
        if (t->events == NULL) {
            loupe_gpu_decoded_free(c);
            return NULL;
        }
        for (size_t k = 0; k < s->event_count; k++) {
            /* Names by id: a names table that maps this id to the source's string. */
            t->events[k] = s->events[k];
            const char *nm = NULL;
            size_t j = (size_t)(s->events[k].name_id * 2654435761u);
            if (p->cap > 0) {
                for (j &= p->cap - 1; p->strs[j] != NULL; j = (j + 1) & (p->cap - 1)) {
                    if (p->ids[j] == s->events[k].name_id) {
                        nm = p->strs[j];
                        break;
                    }
                }
            }
            if (nm == NULL) {
                /* Not copied yet: name_of() makes the slot (as "#<id>"), then it gets the name. */
                nm = name_of(p, NULL, s->events[k].name_id);
                if (nm == NULL) {
                    loupe_gpu_decoded_free(c);
                    return NULL;
                }
                /* name_of stored "#<id>": replace it with the source's name. */
                char *copy = strdup(s->events[k].name);
                if (copy == NULL) {
                    loupe_gpu_decoded_free(c);
                    return NULL;
                }
                for (j = (size_t)(s->events[k].name_id * 2654435761u) & (p->cap - 1);
                     p->strs[j] != nm; j = (j + 1) & (p->cap - 1)) {
                }
                free(p->strs[j]);
                p->strs[j] = copy;
                nm = copy;
            }
            t->events[k].name = nm;
        }
    }
    return c;
}
