/* xplane.c: the XPlane reader: an XSpace (<host>.xplane.pb, from loupe or jax.profiler) into the
 * trace model. The bounded protobuf decoder of base/pb.h over the bytes in memory; field numbers
 * from proto/xplane.proto (formats.md §3.1). What loupe's writer puts where: src/export/xplane.c.
 *
 * What is read:
 * - Planes "/host:CPU" (tracks of kind LOUPE_TRACK_THREAD) and "/device:GPU:<n>" (kind
 *   LOUPE_TRACK_GPU, device n): one track per XLine (tid = line id, name = line name; lines
 *   sharing an id in a plane are one track). A host line named "_counters_" holds counter
 *   samples (event name, stat "value"). "Task Environment": its str_value stats are metadata.
 *   Other planes (/host:metadata, /host:python-tracer, ...) are skipped.
 * - Events: start = line timestamp_ns + offset_ps / 1000, duration_ps / 1000 (ns, truncated);
 *   name = the event metadata's name; stats become args (int64, uint64, double, str and ref
 *   values as strings, bytes as lowercase hex), metadata stats first. loupe's own stats map back:
 *   loupe_instant / loupe_category / loupe_function (event metadata), loupe_truncated and
 *   loupe_flow_out / loupe_flow_in (events), "loupe:bool" stat metadata (bool args).
 * - Plane stats of a loupe file (loupe_version present): profile_start_time (origin),
 *   profile_stop_time (duration), pid, process_name, clock, tsc_ghz, unmatched_ends and
 *   loupe_thread_<tid>_{recorded,dropped,capacity_needed}. XSpace.hostnames[0] is the host.
 * - Times: a loupe file's are relative to the session start already; any other file's are made
 *   relative to its earliest event (or kept when profile_start_time says they are relative).
 *
 * Rejected (LOUPE_EFORMAT, the detail names the byte offset in the file): a varint longer than
 * 10 bytes or cut short, a length that runs past its message, wire types 3, 4, 6, 7 (groups and
 * invalid), a field of the wrong wire type where loupe reads it, a nested message in a place
 * that is not one, an event whose metadata id is not defined, an offset or duration that is
 * negative or beyond 2^62 ns. Nothing is allocated from a length claim before it is checked
 * against the bytes that are there.
 */
#include "base/array.h"
#include "base/error.h"
#include "base/pb.h"
#include "import/readers.h"
#include "model/builder.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_LIMIT ((int64_t)1 << 62)

typedef struct span {
    const unsigned char *p;
    size_t n;
    size_t off; /* offset of p in the file */
} span;

typedef struct field {
    unsigned num, wt;
    uint64_t v; /* varint / fixed value */
    span sub;   /* WT_LEN payload */
    size_t off; /* offset of the tag */
} field;

typedef struct rd {
    const char *path;
    const unsigned char *base;
    int rc;
    int quiet; /* sniffing: no error detail */
} rd;

static int fail(rd *r, size_t off, const char *what) {
    if (r->rc == 0 && r->quiet) {
        r->rc = LOUPE_EFORMAT;
    } else if (r->rc == 0) {
        r->rc = loupe__err(LOUPE_EFORMAT, "%s: XPlane: offset %zu: %s", r->path, off, what);
    }
    return r->rc;
}

/* The next field of s: 1, 0 at the end, or an error code (negative). The decoding is base/pb.h's
 * (loupe__pbr_field); the words of each error are this reader's. */
static int next(rd *r, span *s, field *f) {
    loupe__pbr c = {s->p, s->p + s->n, r->base};
    loupe__pbf g = {0};
    loupe__pbe e;
    int k = loupe__pbr_field(&c, &g, &e);
    size_t used = (size_t)(c.p - s->p);
    s->p = c.p;
    s->n -= used;
    s->off += used;
    if (k == 0) {
        return 0;
    }
    f->off = g.offset;
    if (k < 0) {
        char what[128];
        switch (e.code) {
        case LOUPE__PB_ECUT:
            return fail(r, e.at,
                        !e.in_tag && (g.wire == PB_I64 || g.wire == PB_I32)
                            ? "fixed-size value cut short"
                            : "varint cut short by the end of its message");
        case LOUPE__PB_E64:
            return fail(r, e.at, "varint longer than 64 bits");
        case LOUPE__PB_EFIELD0:
        case LOUPE__PB_ERANGE:
            return fail(r, e.at, "field number 0 or out of range");
        case LOUPE__PB_ELEN:
            snprintf(what, sizeof what,
                     "length %llu runs past the end of its message (%zu bytes left)",
                     (unsigned long long)e.len, e.left);
            return fail(r, e.at, what);
        default:
            snprintf(what, sizeof what, "wire type %u (field %u) is not supported",
                     (unsigned)g.wire, (unsigned)g.field);
            return fail(r, e.at, what);
        }
    }
    f->num = g.field;
    f->wt = (unsigned)g.wire;
    f->v = g.v;
    if (g.wire == PB_LEN) {
        f->sub = (span){g.data, g.len, (size_t)(g.data - r->base)};
    }
    return 1;
}

static int want(rd *r, const field *f, unsigned wt) {
    if (f->wt != wt) {
        char what[80];
        snprintf(what, sizeof what, "field %u has wire type %u, expected %u", f->num, f->wt, wt);
        return fail(r, f->off, what);
    }
    return 0;
}

/* ---- plane metadata ---- */

typedef struct stat {
    int64_t mid;
    int type; /* 2 double, 3 uint64, 4 int64, 5 str, 6 bytes, 7 ref; 0 none */
    uint64_t u;
    span str;
    size_t off;
} stat;

typedef struct smeta {
    int64_t id;
    span name;
    int is_bool;
} smeta;

typedef struct emeta {
    int64_t id;
    span name;
    span stats;    /* the XEventMetadata itself: its stats (field 5) are read per use */
    unsigned kind; /* 1 instant, 2 function */
    const char *category;
    const char *iname; /* interned name */
} emeta;

typedef struct plane {
    smeta *sm;
    size_t nsm, sm_cap;
    emeta *em;
    size_t nem, em_cap;
} plane;

static int cmp_sm(const void *a, const void *b) {
    int64_t x = ((const smeta *)a)->id, y = ((const smeta *)b)->id;
    return x < y ? -1 : x > y;
}

static int cmp_em(const void *a, const void *b) {
    int64_t x = ((const emeta *)a)->id, y = ((const emeta *)b)->id;
    return x < y ? -1 : x > y;
}

/* The last entry with this id (a map: the last one wins); NULL when none. */
static const smeta *find_sm(const plane *pl, int64_t id) {
    size_t lo = 0, hi = pl->nsm;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pl->sm[mid].id <= id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo > 0 && pl->sm[lo - 1].id == id ? &pl->sm[lo - 1] : NULL;
}

static emeta *find_em(plane *pl, int64_t id) {
    size_t lo = 0, hi = pl->nem;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pl->em[mid].id <= id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo > 0 && pl->em[lo - 1].id == id ? &pl->em[lo - 1] : NULL;
}

static int read_stat(rd *r, span s, stat *st) {
    memset(st, 0, sizeof *st);
    st->off = s.off;
    field f;
    int k;
    while ((k = next(r, &s, &f)) == 1) {
        if (f.num == 1) {
            if (want(r, &f, 0) != 0) {
                return r->rc;
            }
            st->mid = (int64_t)f.v;
        } else if (f.num >= 2 && f.num <= 7) {
            if (want(r, &f, f.num == 2 ? 1u : (f.num == 5 || f.num == 6) ? 2u : 0u) != 0) {
                return r->rc;
            }
            st->type = (int)f.num;
            st->u = f.v;
            st->str = f.sub;
        }
    }
    return k < 0 ? k : 0;
}

/* Map entry {key 1, value 2}: the value span. */
static int map_value(rd *r, span s, span *val) {
    field f;
    int k;
    *val = (span){s.p, 0, s.off};
    while ((k = next(r, &s, &f)) == 1) {
        if (f.num == 2) {
            if (want(r, &f, 2) != 0) {
                return r->rc;
            }
            *val = f.sub;
        }
    }
    return k;
}

static int read_smeta(rd *r, span s, plane *pl) {
    span v;
    if (map_value(r, s, &v) < 0) {
        return r->rc;
    }
    smeta m = {0, {v.p, 0, v.off}, 0};
    field f;
    int k;
    while ((k = next(r, &v, &f)) == 1) {
        if (f.num == 1 && want(r, &f, 0) == 0) {
            m.id = (int64_t)f.v;
        } else if (f.num == 2 && want(r, &f, 2) == 0) {
            m.name = f.sub;
        } else if (f.num == 3 && want(r, &f, 2) == 0) {
            m.is_bool = f.sub.n == 10 && memcmp(f.sub.p, "loupe:bool", 10) == 0;
        }
        if (r->rc) {
            return r->rc;
        }
    }
    if (k < 0) {
        return k;
    }
    if (loupe__grow((void **)&pl->sm, &pl->sm_cap, pl->nsm + 1, sizeof(smeta)) != 0) {
        return loupe__err(LOUPE_ENOMEM, "%s: out of memory", r->path);
    }
    pl->sm[pl->nsm++] = m;
    return 0;
}

static int read_emeta(rd *r, span s, plane *pl) {
    span v;
    if (map_value(r, s, &v) < 0) {
        return r->rc;
    }
    emeta m;
    memset(&m, 0, sizeof m);
    m.name = (span){v.p, 0, v.off};
    m.stats = v;
    field f;
    int k;
    while ((k = next(r, &v, &f)) == 1) {
        if (f.num == 1 && want(r, &f, 0) == 0) {
            m.id = (int64_t)f.v;
        } else if (f.num == 2 && want(r, &f, 2) == 0) {
            m.name = f.sub;
        } else if (f.num == 5) {
            want(r, &f, 2);
        }
        if (r->rc) {
            return r->rc;
        }
    }
    if (k < 0) {
        return k;
    }
    if (loupe__grow((void **)&pl->em, &pl->em_cap, pl->nem + 1, sizeof(emeta)) != 0) {
        return loupe__err(LOUPE_ENOMEM, "%s: out of memory", r->path);
    }
    pl->em[pl->nem++] = m;
    return 0;
}

/* By id, for binary search (a duplicate id: one of its entries is used). */
static void sort_meta(plane *pl) {
    if (pl->nsm > 1) {
        qsort(pl->sm, pl->nsm, sizeof(smeta), cmp_sm);
    }
    if (pl->nem > 1) {
        qsort(pl->em, pl->nem, sizeof(emeta), cmp_em);
    }
}

/* ---- building the model ---- */

typedef struct flow_end {
    uint64_t id;
    size_t thread, slice;
    int in;
    size_t order;
} flow_end;

typedef struct track {
    int gpu;
    uint32_t device;
    uint64_t tid;
    size_t index; /* in the builder */
} track;

typedef struct reader {
    rd r;
    loupe__mb *mb;
    loupe_model *m;
    int is_loupe;
    track *tracks;
    size_t ntracks, tracks_cap;
    size_t *tslot; /* (gpu, device, tid) -> track index + 1, open addressing */
    size_t tslot_cap;
    flow_end *flows;
    size_t nflows, flows_cap;
    loupe_arg *args;
    size_t args_cap;
    int have_time;
    uint64_t min_ns, max_ns;
} reader;

static int oom(reader *x) {
    return x->r.rc = loupe__err(LOUPE_ENOMEM, "%s: out of memory reading the XPlane", x->r.path);
}

static const char *intern(reader *x, span s) {
    return loupe__mb_strn(x->mb, (const char *)s.p, s.n);
}

static size_t track_hash(int gpu, uint32_t device, uint64_t tid) {
    uint64_t h = tid ^ ((uint64_t)device << 1 | (uint64_t)(gpu != 0)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h;
}

/* The slot of (gpu, device, tid) in x->tslot: its track, or the empty slot for it. */
static size_t track_slot(const reader *x, int gpu, uint32_t device, uint64_t tid) {
    size_t j = track_hash(gpu, device, tid) & (x->tslot_cap - 1);
    while (x->tslot[j] != 0) {
        const track *t = &x->tracks[x->tslot[j] - 1];
        if (t->gpu == gpu && t->device == device && t->tid == tid) {
            break;
        }
        j = (j + 1) & (x->tslot_cap - 1);
    }
    return j;
}

/* The builder's thread for (plane kind, device, tid); a track per triple, also when a host
 * thread and a GPU track share a tid (so not the builder's tid lookup). A hash: a hostile file
 * with 1e6 lines must not cost 1e12 comparisons. */
static size_t track_of(reader *x, int gpu, uint32_t device, uint64_t tid) {
    if ((x->ntracks + 1) * 2 > x->tslot_cap) {
        size_t nc = x->tslot_cap ? x->tslot_cap * 2 : 64;
        size_t *nt = calloc(nc, sizeof(*nt));
        if (nt == NULL) {
            oom(x);
            return SIZE_MAX;
        }
        free(x->tslot);
        x->tslot = nt;
        x->tslot_cap = nc;
        for (size_t i = 0; i < x->ntracks; i++) {
            const track *t = &x->tracks[i];
            x->tslot[track_slot(x, t->gpu, t->device, t->tid)] = i + 1;
        }
    }
    size_t j = track_slot(x, gpu, device, tid);
    if (x->tslot[j] != 0) {
        return x->tracks[x->tslot[j] - 1].index;
    }
    size_t idx = loupe__mb_thread_add(x->mb, tid);
    if (idx == SIZE_MAX ||
        loupe__grow((void **)&x->tracks, &x->tracks_cap, x->ntracks + 1, sizeof(track)) != 0) {
        oom(x);
        return SIZE_MAX;
    }
    loupe_model_thread *th = loupe__mb_thread_at(x->mb, idx);
    th->kind = gpu ? LOUPE_TRACK_GPU : LOUPE_TRACK_THREAD;
    th->device = device;
    x->tracks[x->ntracks++] = (track){gpu, device, tid, idx};
    x->tslot[j] = x->ntracks;
    return idx;
}

static void hex(char *out, span s) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < s.n; i++) {
        out[2 * i] = d[s.p[i] >> 4];
        out[2 * i + 1] = d[s.p[i] & 15];
    }
    out[2 * s.n] = 0;
}

/* A stat as a model arg (key and string values interned). 0, or an error. */
static int stat_arg(reader *x, const plane *pl, const stat *st, loupe_arg *a) {
    const smeta *km = find_sm(pl, st->mid);
    if (km == NULL) {
        return fail(&x->r, st->off, "a stat's metadata_id is not in the plane's stat_metadata");
    }
    a->key = intern(x, km->name);
    switch (st->type) {
    case 2: {
        double d;
        memcpy(&d, &st->u, 8);
        a->type = LOUPE_ARG_DOUBLE;
        a->v.d = d;
        break;
    }
    case 3:
        a->type = LOUPE_ARG_UINT64;
        a->v.u = st->u;
        break;
    case 4:
        if (km->is_bool) {
            a->type = LOUPE_ARG_BOOL;
            a->v.b = st->u != 0;
        } else {
            a->type = LOUPE_ARG_INT64;
            a->v.i = (int64_t)st->u;
        }
        break;
    case 7: {
        const smeta *vm = find_sm(pl, (int64_t)st->u);
        if (vm == NULL) {
            return fail(&x->r, st->off, "a ref_value names no stat_metadata");
        }
        a->type = LOUPE_ARG_STRING;
        a->v.s = intern(x, vm->name);
        break;
    }
    case 6: {
        if (st->str.n > ((size_t)1 << 28)) {
            return fail(&x->r, st->off, "bytes_value over 256 MiB");
        }
        char *h = malloc(2 * st->str.n + 1);
        if (h == NULL) {
            return oom(x);
        }
        hex(h, st->str);
        a->type = LOUPE_ARG_STRING;
        a->v.s = loupe__mb_str(x->mb, h);
        free(h);
        break;
    }
    case 5:
    default:
        a->type = LOUPE_ARG_STRING;
        a->v.s = intern(x, st->str);
        break;
    }
    return loupe__mb_failed(x->mb) ? oom(x) : 0;
}

static int key_is(const plane *pl, int64_t mid, const char *name) {
    const smeta *m = find_sm(pl, mid);
    size_t n = strlen(name);
    return m != NULL && m->name.n == n && memcmp(m->name.p, name, n) == 0;
}

/* Reads an event metadata's own stats once: kind, category; the others become args. */
static int prepare_emeta(reader *x, const plane *pl, emeta *em) {
    if (em->iname != NULL) {
        return 0;
    }
    em->iname = intern(x, em->name);
    em->category = loupe__mb_str(x->mb, "");
    span s = em->stats;
    field f;
    int k;
    while ((k = next(&x->r, &s, &f)) == 1) {
        if (f.num != 5) {
            continue;
        }
        stat st;
        if (read_stat(&x->r, f.sub, &st) != 0) {
            return x->r.rc;
        }
        if (key_is(pl, st.mid, "loupe_instant")) {
            em->kind |= 1;
        } else if (key_is(pl, st.mid, "loupe_function")) {
            em->kind |= 2;
        } else if (key_is(pl, st.mid, "loupe_category")) {
            loupe_arg a;
            if (stat_arg(x, pl, &st, &a) != 0) {
                return x->r.rc;
            }
            em->category = a.type == LOUPE_ARG_STRING ? a.v.s : em->category;
        }
    }
    return k < 0 ? k : (loupe__mb_failed(x->mb) ? oom(x) : 0);
}

/* Adds the event metadata's non-loupe stats to x->args (foreign files: XProf shows them). */
static int meta_args(reader *x, const plane *pl, const emeta *em, uint32_t *n) {
    span s = em->stats;
    field f;
    int k;
    while ((k = next(&x->r, &s, &f)) == 1) {
        if (f.num != 5) {
            continue;
        }
        stat st;
        if (read_stat(&x->r, f.sub, &st) != 0) {
            return x->r.rc;
        }
        if (key_is(pl, st.mid, "loupe_instant") || key_is(pl, st.mid, "loupe_function") ||
            key_is(pl, st.mid, "loupe_category")) {
            continue;
        }
        if (loupe__grow((void **)&x->args, &x->args_cap, *n + 1, sizeof(loupe_arg)) != 0) {
            return oom(x);
        }
        if (stat_arg(x, pl, &st, &x->args[*n]) != 0) {
            return x->r.rc;
        }
        (*n)++;
    }
    return k < 0 ? k : 0;
}

static int add_flow(reader *x, uint64_t id, size_t thread, size_t slice, int in) {
    if (loupe__grow((void **)&x->flows, &x->flows_cap, x->nflows + 1, sizeof(flow_end)) != 0) {
        return oom(x);
    }
    x->flows[x->nflows] = (flow_end){id, thread, slice, in, x->nflows};
    x->nflows++;
    return 0;
}

static int read_event(reader *x, plane *pl, span s, size_t t, int64_t line_ns, int counters) {
    int64_t mid = 0;
    uint64_t off_ps = 0, dur_ps = 0;
    span stats = s;
    size_t ev_off = s.off;
    field f;
    int k;
    while ((k = next(&x->r, &s, &f)) == 1) {
        if (f.num == 1 || f.num == 2 || f.num == 3) {
            if (want(&x->r, &f, 0) != 0) {
                return x->r.rc;
            }
            if (f.num == 1) {
                mid = (int64_t)f.v;
            } else if (f.num == 2) {
                off_ps = f.v;
            } else {
                dur_ps = f.v;
            }
        } else if (f.num == 4 && want(&x->r, &f, 2) != 0) {
            return x->r.rc;
        }
    }
    if (k < 0) {
        return k;
    }
    if ((int64_t)off_ps < 0 || (int64_t)dur_ps < 0) {
        return fail(&x->r, ev_off, "negative offset_ps or duration_ps");
    }
    emeta *em = find_em(pl, mid);
    if (em == NULL) {
        return fail(&x->r, ev_off, "an event's metadata_id is not in the plane's event_metadata");
    }
    if (prepare_emeta(x, pl, em) != 0) {
        return x->r.rc;
    }
    int64_t start = line_ns + (int64_t)(off_ps / 1000);
    int64_t dur = (int64_t)(dur_ps / 1000);
    if (start < 0 || start >= NS_LIMIT || dur >= NS_LIMIT) {
        return fail(&x->r, ev_off, "event time beyond 2^62 ns or before 0");
    }
    uint32_t n = 0;
    if (!x->is_loupe && meta_args(x, pl, em, &n) != 0) {
        return x->r.rc;
    }
    int truncated = 0;
    size_t nflow0 = x->nflows;
    stat value;
    int have_value = 0;
    while ((k = next(&x->r, &stats, &f)) == 1) {
        if (f.num != 4) {
            continue;
        }
        stat st;
        if (read_stat(&x->r, f.sub, &st) != 0) {
            return x->r.rc;
        }
        if (counters && key_is(pl, st.mid, "value")) {
            value = st;
            have_value = 1;
            continue;
        }
        if (x->is_loupe && key_is(pl, st.mid, "loupe_truncated")) {
            truncated = st.u != 0;
            continue;
        }
        if (x->is_loupe &&
            (key_is(pl, st.mid, "loupe_flow_out") || key_is(pl, st.mid, "loupe_flow_in"))) {
            if (add_flow(x, st.u, t, 0, key_is(pl, st.mid, "loupe_flow_in")) != 0) {
                return x->r.rc;
            }
            continue;
        }
        if (loupe__grow((void **)&x->args, &x->args_cap, n + 1u, sizeof(loupe_arg)) != 0) {
            return oom(x);
        }
        if (stat_arg(x, pl, &st, &x->args[n]) != 0) {
            return x->r.rc;
        }
        n++;
    }
    if (k < 0) {
        return k;
    }
    uint64_t ts = (uint64_t)start;
    if (!x->have_time || ts < x->min_ns) {
        x->min_ns = ts;
    }
    if (!x->have_time || ts + (uint64_t)dur > x->max_ns) {
        x->max_ns = ts + (uint64_t)dur;
    }
    x->have_time = 1;
    if (counters) {
        loupe_counter_sample c = {.ts_ns = ts, .name = em->iname};
        if (have_value && value.type == 2) {
            c.is_double = 1;
            memcpy(&c.d, &value.u, 8);
        } else if (have_value && value.type == 3) {
            c.i = (int64_t)value.u;
        } else if (have_value) {
            c.i = (int64_t)value.u;
        }
        return loupe__mb_counter(x->mb, &c) != 0 ? oom(x) : 0;
    }
    if (em->kind & 1) {
        return loupe__mb_instant(x->mb, t, ts, em->iname, x->args, n) != 0 ? oom(x) : 0;
    }
    size_t sl = loupe__mb_slice(x->mb, t);
    if (sl == SIZE_MAX) {
        return oom(x);
    }
    loupe_slice *p = loupe__mb_slice_at(x->mb, t, sl);
    p->start_ns = ts;
    p->dur_ns = (uint64_t)dur;
    p->name = em->iname;
    p->category = em->category;
    p->flags =
        (truncated ? LOUPE_SLICE_TRUNCATED : 0u) | ((em->kind & 2) ? LOUPE_SLICE_FUNCTION : 0u);
    if (n > 0 && loupe__mb_slice_args(x->mb, t, sl, x->args, n) != 0) {
        return oom(x);
    }
    for (size_t i = nflow0; i < x->nflows; i++) {
        x->flows[i].slice = sl;
    }
    return 0;
}

static int read_line(reader *x, plane *pl, span s, int gpu, uint32_t device) {
    span body = s;
    uint64_t id = 0;
    int64_t ts = 0;
    span name = {s.p, 0, s.off};
    field f;
    int k;
    while ((k = next(&x->r, &s, &f)) == 1) {
        if ((f.num == 1 || f.num == 3) && want(&x->r, &f, 0) == 0) {
            if (f.num == 1) {
                id = f.v;
            } else {
                ts = (int64_t)f.v;
            }
        } else if (f.num == 2 && want(&x->r, &f, 2) == 0) {
            name = f.sub;
        } else if (f.num == 4) {
            want(&x->r, &f, 2);
        }
        if (x->r.rc) {
            return x->r.rc;
        }
    }
    if (k < 0) {
        return k;
    }
    if (ts < 0 || ts >= NS_LIMIT) {
        return fail(&x->r, body.off, "line timestamp_ns before 0 or beyond 2^62 ns");
    }
    int counters = !gpu && name.n == 10 && memcmp(name.p, "_counters_", 10) == 0;
    size_t t = SIZE_MAX;
    if (!counters) {
        t = track_of(x, gpu, device, id);
        if (t == SIZE_MAX) {
            return x->r.rc;
        }
        if (name.n > 0) {
            loupe__mb_thread_name(x->mb, t, intern(x, name));
        }
    }
    while ((k = next(&x->r, &body, &f)) == 1) {
        if (f.num == 4 && read_event(x, pl, f.sub, t, ts, counters) != 0) {
            return x->r.rc;
        }
    }
    return k < 0 ? k : 0;
}

static int span_is(span s, const char *str) {
    size_t n = strlen(str);
    return s.n == n && memcmp(s.p, str, n) == 0;
}

static int plane_u64(reader *x, const plane *pl, const stat *st, const char *name, uint64_t *out) {
    if (!key_is(pl, st->mid, name)) {
        return 0;
    }
    (void)x;
    *out = st->u;
    return 1;
}

/* loupe_thread_<tid>_<what> on a plane: the tracks' loss accounting. */
static int thread_stat(reader *x, const plane *pl, const stat *st, int gpu, uint32_t device) {
    const smeta *km = find_sm(pl, st->mid);
    static const char pre[] = "loupe_thread_";
    if (km == NULL || km->name.n <= sizeof(pre) - 1 || km->name.n > 90 ||
        memcmp(km->name.p, pre, sizeof(pre) - 1) != 0) {
        return 0;
    }
    char k[96];
    memcpy(k, km->name.p, km->name.n);
    k[km->name.n] = 0;
    char *end;
    errno = 0;
    const char *num = k + sizeof(pre) - 1;
    if (*num < '0' || *num > '9') {
        return 0;
    }
    uint64_t tid = strtoull(num, &end, 10);
    if (errno != 0 || *end != '_') {
        return 0;
    }
    end++;
    int which = strcmp(end, "recorded") == 0          ? 0
                : strcmp(end, "dropped") == 0         ? 1
                : strcmp(end, "capacity_needed") == 0 ? 2
                                                      : -1;
    if (which < 0) {
        return 0;
    }
    size_t t = track_of(x, gpu, device, tid);
    if (t == SIZE_MAX) {
        return -1;
    }
    loupe_model_thread *th = loupe__mb_thread_at(x->mb, t);
    uint64_t *dst = which == 0   ? &th->events_recorded
                    : which == 1 ? &th->events_dropped
                                 : &th->capacity_needed;
    *dst = st->u;
    return 1;
}

enum { PL_SKIP, PL_HOST, PL_GPU, PL_ENV };

static int read_plane(reader *x, span s, int pass) {
    plane pl;
    memset(&pl, 0, sizeof pl);
    span body = s;
    span name = {s.p, 0, s.off};
    field f;
    int k;
    /* first: name and metadata (fields may come in any order) */
    while ((k = next(&x->r, &s, &f)) == 1) {
        if (f.num == 2 && want(&x->r, &f, 2) == 0) {
            name = f.sub;
        } else if (f.num == 4 && want(&x->r, &f, 2) == 0) {
            read_emeta(&x->r, f.sub, &pl);
        } else if (f.num == 5 && want(&x->r, &f, 2) == 0) {
            read_smeta(&x->r, f.sub, &pl);
        } else if ((f.num == 3 || f.num == 6) && want(&x->r, &f, 2) != 0) {
            break;
        }
        if (x->r.rc) {
            break;
        }
    }
    int kind = PL_SKIP;
    uint32_t device = 0;
    if (span_is(name, "/host:CPU")) {
        kind = PL_HOST;
    } else if (span_is(name, "Task Environment")) {
        kind = PL_ENV;
    } else if (name.n > 12 && name.n < 24 && memcmp(name.p, "/device:GPU:", 12) == 0) {
        char num[16];
        memcpy(num, name.p + 12, name.n - 12);
        num[name.n - 12] = 0;
        char *end;
        unsigned long v = strtoul(num, &end, 10);
        if (*end == 0 && num[0] >= '0' && num[0] <= '9' && v <= UINT32_MAX) {
            kind = PL_GPU;
            device = (uint32_t)v;
        }
    }
    sort_meta(&pl);
    /* pass 0: plane stats of the host plane (is this loupe's file? the origin);
     * pass 1: lines and the other stats */
    while (x->r.rc == 0 && kind != PL_SKIP && (k = next(&x->r, &body, &f)) == 1) {
        if (f.num == 3 && pass == 1 && kind != PL_ENV) {
            read_line(x, &pl, f.sub, kind == PL_GPU, device);
        } else if (f.num == 6) {
            stat st;
            if (read_stat(&x->r, f.sub, &st) != 0) {
                break;
            }
            loupe_model *m = x->m;
            uint64_t v;
            if (pass == 0 && kind == PL_HOST) {
                if (key_is(&pl, st.mid, "loupe_version")) {
                    x->is_loupe = 1;
                } else if (plane_u64(x, &pl, &st, "profile_start_time", &v)) {
                    m->origin_unix_ns = v;
                } else if (plane_u64(x, &pl, &st, "profile_stop_time", &v)) {
                    m->duration_ns = v; /* minus the start at the end */
                }
                continue;
            }
            if (pass == 0) {
                continue;
            }
            if (kind == PL_ENV) {
                if (st.type == 5) {
                    loupe_arg a;
                    if (stat_arg(x, &pl, &st, &a) == 0 &&
                        loupe__mb_metadata(x->mb, a.key, a.v.s) != 0) {
                        oom(x);
                    }
                }
                continue;
            }
            if (!x->is_loupe) {
                continue;
            }
            int tsr = thread_stat(x, &pl, &st, kind == PL_GPU, device);
            if (tsr < 0) {
                break;
            }
            if (tsr > 0 || kind != PL_HOST) {
                continue;
            }
            loupe_arg a;
            if (plane_u64(x, &pl, &st, "pid", &m->pid) ||
                plane_u64(x, &pl, &st, "unmatched_ends", &m->unmatched_ends)) {
                continue;
            }
            if (key_is(&pl, st.mid, "tsc_ghz") && st.type == 2) {
                memcpy(&m->tsc_ghz, &st.u, 8);
            } else if (key_is(&pl, st.mid, "clock") && stat_arg(x, &pl, &st, &a) == 0) {
                m->clock = a.type == LOUPE_ARG_STRING ? a.v.s : m->clock;
            } else if (key_is(&pl, st.mid, "process_name") && stat_arg(x, &pl, &st, &a) == 0) {
                m->process_name = a.type == LOUPE_ARG_STRING ? a.v.s : m->process_name;
            }
        }
    }
    free(pl.sm);
    free(pl.em);
    return x->r.rc;
}

static int cmp_flow(const void *pa, const void *pb) {
    const flow_end *a = pa, *b = pb;
    if (a->id != b->id) {
        return a->id < b->id ? -1 : 1;
    }
    if (a->in != b->in) {
        return a->in - b->in;
    }
    return a->order < b->order ? -1 : (a->order > b->order);
}

/* Pairs each flow's out end with its in ends (the k-th out with the k-th in). */
static int link_flows(reader *x) {
    qsort(x->flows, x->nflows, sizeof(flow_end), cmp_flow);
    for (size_t i = 0; i < x->nflows;) {
        size_t j = i;
        while (j < x->nflows && x->flows[j].id == x->flows[i].id) {
            j++;
        }
        size_t outs = i, ins = i;
        while (ins < j && !x->flows[ins].in) {
            ins++;
        }
        size_t nout = ins - outs, nin = j - ins;
        for (size_t q = 0; q < nout && q < nin; q++) {
            const flow_end *a = &x->flows[outs + q], *b = &x->flows[ins + q];
            if (loupe__mb_flow(x->mb, a->id, a->thread, a->slice, b->thread, b->slice) != 0) {
                return oom(x);
            }
        }
        i = j;
    }
    return 0;
}

int loupe__xplane_read_mem(const char *path, char *buf, size_t n, loupe_model **out) {
    *out = NULL;
    reader x;
    memset(&x, 0, sizeof x);
    x.r.path = path;
    x.r.base = (const unsigned char *)buf;
    x.mb = loupe__mb_new();
    if (x.mb == NULL) {
        free(buf);
        return loupe__err(LOUPE_ENOMEM, "%s: out of memory", path);
    }
    x.m = loupe__mb_model(x.mb);
    x.m->clock = loupe__mb_str(x.mb, "");
    for (int pass = 0; pass < 2 && x.r.rc == 0; pass++) {
        span s = {(const unsigned char *)buf, n, 0};
        field f;
        int k;
        int host_seen = 0;
        while ((k = next(&x.r, &s, &f)) == 1) {
            if (f.num == 1) {
                if (want(&x.r, &f, 2) != 0 || read_plane(&x, f.sub, pass) != 0) {
                    break;
                }
            } else if (f.num == 4 && pass == 1 && !host_seen) {
                if (want(&x.r, &f, 2) != 0) {
                    break;
                }
                x.m->host = intern(&x, f.sub);
                host_seen = 1;
            } else if (f.num >= 2 && f.num <= 4 && want(&x.r, &f, 2) != 0) {
                break;
            }
        }
    }
    if (x.r.rc == 0) {
        loupe_model *m = x.m;
        /* a loupe file's times are relative to its origin; others start at their first event */
        uint64_t o = !x.is_loupe && x.have_time ? x.min_ns : 0;
        if (x.is_loupe && m->duration_ns >= m->origin_unix_ns) {
            m->duration_ns -= m->origin_unix_ns;
        } else {
            m->duration_ns = x.have_time ? x.max_ns - x.min_ns : 0;
        }
        for (size_t t = 0; t < m->thread_count; t++) {
            loupe_model_thread *th = loupe__mb_thread_at(x.mb, t);
            uint64_t count = 0;
            for (size_t i = 0; i < th->slice_count; i++) {
                th->slices[i].start_ns -= o;
                count += 2;
            }
            for (size_t i = 0; i < th->instant_count; i++) {
                th->instants[i].ts_ns -= o;
                count++;
            }
            if (!x.is_loupe) {
                th->events_recorded = count;
            }
        }
        for (size_t i = 0; i < m->counter_count; i++) {
            m->counters[i].ts_ns -= o;
        }
        if (x.nflows > 0) {
            link_flows(&x);
        }
        if (m->host == NULL) {
            m->host = loupe__mb_str(x.mb, "");
        }
        if (m->process_name == NULL) {
            m->process_name = loupe__mb_str(x.mb, "");
        }
        if (loupe__mb_failed(x.mb) && x.r.rc == 0) {
            oom(&x);
        }
    }
    free(x.tracks);
    free(x.tslot);
    free(x.flows);
    free(x.args);
    free(buf);
    if (x.r.rc != 0) {
        loupe__mb_abort(x.mb);
        return x.r.rc;
    }
    *out = loupe__mb_finish(x.mb);
    return *out != NULL ? 0 : loupe__err(LOUPE_ENOMEM, "%s: out of memory", path);
}

/* Does this look like an XSpace? Its first field is planes (1), errors (2), warnings (3) or
 * hostnames (4), length-delimited, and the first plane's fields (in its first 4 KiB) are XPlane's
 * (1..6) with their wire types. JSON starts with '{', '[', whitespace or a BOM; a Perfetto trace
 * has TracePacket fields (timestamp 8, trusted_packet_sequence_id 10, ...) in its first field 1. */
int loupe__xplane_sniff(const char *buf, size_t n) {
    rd r = {"sniff", (const unsigned char *)buf, 0, 1};
    span s = {(const unsigned char *)buf, n, 0};
    field f;
    if (next(&r, &s, &f) != 1 || f.wt != 2 || f.num > 4) {
        return 0;
    }
    if (f.num != 1) {
        return 1;
    }
    static const unsigned char plane_wt[7] = {9, 0, 2, 2, 2, 2, 2};
    span p = f.sub;
    int cut = p.n > 4096;
    p.n = cut ? 4096 : p.n;
    int fields = 0;
    for (;;) {
        field g;
        int k = next(&r, &p, &g);
        if (k == 0) {
            return 1;
        }
        if (k < 0) {
            return cut && fields > 0; /* a field crossing the 4 KiB cut */
        }
        if (g.num > 6 || plane_wt[g.num] != g.wt) {
            return 0;
        }
        fields++;
    }
}
