/* xplane.c: the XPlane reader: an XSpace (<host>.xplane.pb, from loupe or jax.profiler) into the
 * trace model. The bounded protobuf decoder of base/pb.h over the bytes in memory; field numbers
 * from proto/xplane.proto (openxla/xla xla/tsl/profiler/protobuf/xplane.proto). What loupe's writer
 * puts where: src/export/xplane.c.
 *
 * What is read:
 * - Planes "/host:CPU" (tracks of kind LOUPE_TRACK_THREAD) and "/device:GPU:<n>" (kind
 *   LOUPE_TRACK_GPU, device n): one track per XLine (tid = line id, name = line name; lines
 *   sharing an id in a plane are one track). A host line named "_counters_" holds counter
 *   samples (event name, stat "value"); in a loupe file, lines "CPU samples ..." hold the CPU
 *   samples ("CPU samples" at the end of this file). "Task Environment": its str_value stats are
 *   metadata.
 *   Other planes (/host:metadata, /host:python-tracer, ...) are skipped.
 * - Events: start = line timestamp_ns + offset_ps / 1000, duration_ps / 1000 (ns, truncated);
 *   name = the event metadata's name; stats become args (int64, uint64, double, str and ref
 *   values as strings, bytes as lowercase hex), metadata stats first. loupe's own stats map back:
 *   loupe_instant / loupe_category / loupe_function (event metadata), loupe_truncated and
 *   loupe_flow_out / loupe_flow_in (events), "loupe:bool" stat metadata (bool args). XProf's
 *   conventions, as jax and loupe write them: _p / _c with _pt / _ct are flows (flow_stat(),
 *   one producer to each of its consumers), _r = 1 beside step_num is a step (the root marker
 *   is dropped: drop_step_root()); loupe_thread_<tid>_unnamed gives a track back its "" name.
 * - Plane stats of a loupe file (loupe_version present): profile_start_time (origin),
 *   profile_stop_time (duration), pid, process_name, clock, tsc_ghz, unmatched_ends and
 *   loupe_thread_<line id>_{recorded,dropped,capacity_needed}. XSpace.hostnames[0] is the host.
 *   loupe_process_<k>_* give the processes (in order), loupe_line_<id>_{process,tid,lane} a
 *   line's (process, tid) and, with _lane, that it is a lane of an async track (the lanes of one
 *   (process, tid) are one LOUPE_TRACK_ASYNC track); the line's name loses the writer's
 *   "<process> (<pid>) / " prefix and " (lane N)" suffix (own_name()). A counter event's
 *   loupe_process and a sample's loupe_line stat say whose they are.
 * - A GPU plane's loupe_gpu_process / loupe_gpu_device stats (a loupe file's other processes'
 *   devices) put its tracks in that process with that device (gpu_owner()); its lines' names
 *   lose the "<process> (<pid>) / " prefix.
 * - A split trace (src/export/xplane.c write_parts()): given <x>.xplane.pb, the parts
 *   <x>.part2.xplane.pb, <x>.part3... beside it (until one is missing) are read with it, each
 *   pass over every part in turn, into the same tracks: one trace (parts_list()).
 * - Times: a loupe file's are relative to the session start already, less the host plane's
 *   loupe_timeline_shift_ns where a run's base put them later (src/export/xplane.c, Times); any
 *   other file's are made relative to its earliest event (or kept when profile_start_time says
 *   they are relative).
 *
 * Rejected (LOUPE_EFORMAT, the detail names the byte offset in the file): a varint longer than
 * 10 bytes or cut short, a length that runs past its message, wire types 3, 4, 6, 7 (groups and
 * invalid), a field of the wrong wire type where loupe reads it, a nested message in a place
 * that is not one, an event whose metadata id is not defined, an offset or duration that is
 * negative or beyond 2^62 ns. Nothing is allocated from a length claim before it is checked
 * against the bytes that are there.
 */
#include "base/array.h"
#include "base/b64.h"
#include "base/error.h"
#include "base/progress.h"
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

/* The next field of s on the fast path, for the shapes nearly every field has: a 1-byte tag
 * (field 1..15), wire type 0 with a varint of at most 9 bytes, or wire type 2 with a length that
 * fits in s. 1 with *f set, 0 at the end, -1 (s untouched) for anything else, which nextf()
 * hands to next(): the full decoder reads every case and words every error, so a hostile file
 * meets exactly the same checks. (The generic decoder's state and error structs per field were
 * a third of the read's time.) */
static inline int next_fast(span *s, field *f) {
    const unsigned char *p = s->p, *end = p + s->n;
    if (p == end) {
        return 0;
    }
    unsigned tag = *p++;
    unsigned wt = tag & 7;
    if (tag >= 0x80 || tag < 8 || (wt != 0 && wt != 2)) {
        return -1;
    }
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (p == end || shift >= 63) {
            return -1;
        }
        unsigned c = *p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) {
            break;
        }
    }
    f->num = tag >> 3;
    f->wt = wt;
    f->v = v;
    f->off = s->off;
    if (wt == 2) {
        if (v > (uint64_t)(end - p)) {
            return -1;
        }
        f->sub = (span){p, (size_t)v, s->off + (size_t)(p - s->p)};
        p += v;
    }
    size_t used = (size_t)(p - s->p);
    s->p = p;
    s->n -= used;
    s->off += used;
    return 1;
}

static inline int nextf(rd *r, span *s, field *f) {
    int k = next_fast(s, f);
    return k >= 0 ? k : next(r, s, f);
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
    /* ids 1..n in order (loupe's writer and XLA's assign them so): the entry at id - 1 */
    if (id >= 1 && (uint64_t)id <= pl->nsm && pl->sm[id - 1].id == id &&
        ((uint64_t)id == pl->nsm || pl->sm[id].id != id)) {
        return &pl->sm[id - 1];
    }
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
    if (id >= 1 && (uint64_t)id <= pl->nem && pl->em[id - 1].id == id &&
        ((uint64_t)id == pl->nem || pl->em[id].id != id)) {
        return &pl->em[id - 1]; /* ids 1..n in order, as in find_sm() */
    }
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
    while ((k = nextf(r, &s, &f)) == 1) {
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
    int gpu; /* 0 host thread, 1 GPU track, 2 async track, 3 a loupe host line (tid: its id) */
    uint32_t device;
    size_t process;
    uint64_t tid;
    size_t index; /* in the builder */
} track;

/* A loupe file's host line of another process or an async track's lane: its
 * loupe_line_<id>_{pid,process,tid,lane} plane stats (src/export/xplane.c lines_prepare()). */
typedef struct lmap {
    uint64_t id, process, tid, lane;
    unsigned have; /* 1 process, 2 tid, 4 lane */
} lmap;

/* loupe_process_<k>_* plane stats: the model's processes in order. */
typedef struct rproc {
    uint64_t pid, parent_pid;
    int64_t rank;
    const char *name, *host, *label, *cmdline;
} rproc;

typedef struct reader {
    rd r;
    /* progress (base/progress.h): the parts' bytes, those of the parts before this one, events
     * read */
    uint64_t progress_total, progress_base, progress_events;
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
    uint64_t env_start_ns;  /* Task Environment's profile_start_time (0: none) */
    uint64_t tshift;        /* loupe_timeline_shift_ns: taken off every line's timestamp_ns */
    uint64_t samples_line0; /* loupe_samples_line0: the first samples line's id (0: by name) */
    struct rsamples *rs;    /* the CPU samples' tables (samples_*() below); NULL when none */
    lmap *lines;            /* by id once pass 0 is done */
    size_t nlines, lines_cap;
    rproc *procs;
    size_t nprocs, procs_cap;
} reader;

static int samples_plane_stat(reader *x, const plane *pl, const stat *st);
static int samples_is_line(const reader *x, uint64_t id, const unsigned char *name, size_t n);
static int samples_line(reader *x, plane *pl, span s, int64_t line_ns);
static int samples_plane_end(reader *x, plane *pl);
static int samples_finish(reader *x);
static void samples_free(reader *x);

static int oom(reader *x) {
    return x->r.rc = loupe__err(LOUPE_ENOMEM, "%s: out of memory reading the XPlane", x->r.path);
}

static const char *intern(reader *x, span s) {
    return loupe__mb_strn(x->mb, (const char *)s.p, s.n);
}

static size_t track_hash(int gpu, uint32_t device, size_t process, uint64_t tid) {
    uint64_t h = tid ^
                 ((uint64_t)device << 2 | (gpu == 2   ? 2u
                                           : gpu != 0 ? 1u
                                                      : 0u)) *
                     0x9e3779b97f4a7c15ull ^
                 (uint64_t)process * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)h;
}

/* The slot of (gpu, device, process, tid) in x->tslot: its track, or the empty slot for it. */
static size_t track_slot(const reader *x, int gpu, uint32_t device, size_t process, uint64_t tid) {
    size_t j = track_hash(gpu, device, process, tid) & (x->tslot_cap - 1);
    while (x->tslot[j] != 0) {
        const track *t = &x->tracks[x->tslot[j] - 1];
        if (t->gpu == gpu && t->device == device && t->process == process && t->tid == tid) {
            break;
        }
        j = (j + 1) & (x->tslot_cap - 1);
    }
    return j;
}

/* The builder's thread for (plane kind, device, tid); a track per triple, also when a host
 * thread and a GPU track share a tid (so not the builder's tid lookup). A hash: a hostile file
 * with 1e6 lines must not cost 1e12 comparisons. */
static size_t track_in(reader *x, int gpu, uint32_t device, size_t process, uint64_t tid) {
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
            x->tslot[track_slot(x, t->gpu, t->device, t->process, t->tid)] = i + 1;
        }
    }
    size_t j = track_slot(x, gpu, device, process, tid);
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
    th->kind = gpu == 1 ? LOUPE_TRACK_GPU : gpu == 2 ? LOUPE_TRACK_ASYNC : LOUPE_TRACK_THREAD;
    th->device = device;
    th->process = process;
    x->tracks[x->ntracks++] = (track){gpu, device, process, tid, idx};
    x->tslot[j] = x->ntracks;
    return idx;
}

static size_t track_of(reader *x, int gpu, uint32_t device, uint64_t tid) {
    return track_in(x, gpu != 0, device, 0, tid);
}

/* A GPU plane's device and process: "/device:GPU:<n>" is processes[0]'s device n unless the
 * plane stats loupe_gpu_process / loupe_gpu_device of a loupe file name another process's
 * (src/export/xplane.c numbers those after the largest device). */
typedef struct gpu_plane {
    uint32_t device;
    size_t process;
} gpu_plane;

/* A host line's map entry (loupe_line_<id>_* stats), NULL when it has none. */
static const lmap *line_map(const reader *x, uint64_t id) {
    size_t lo = 0, hi = x->nlines;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->lines[mid].id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < x->nlines && x->lines[lo].id == id ? &x->lines[lo] : NULL;
}

/* The track of host line `id`: (process, tid, kind) from its map entry, else process 0's
 * thread tid = id (jax's files, loupe's processes[0]). */
static size_t host_track(reader *x, uint64_t id, const lmap **pm) {
    const lmap *lm = line_map(x, id);
    *pm = lm;
    if (lm == NULL) {
        return track_in(x, 0, 0, 0, id);
    }
    if (lm->have & 4) {
        return track_in(x, 2, 0, (size_t)lm->process, lm->tid);
    }
    /* a host thread: one per line, since two threads of a process may have had one tid (a
     * reused tid: the writer gives the later its own line) */
    size_t idx = track_in(x, 3, 0, (size_t)lm->process, id);
    if (idx != SIZE_MAX) {
        loupe__mb_thread_at(x->mb, idx)->tid = lm->tid;
    }
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
    while ((k = nextf(&x->r, &s, &f)) == 1) {
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

/* XProf's producer/consumer stats (xla/tsl/profiler/utils/xplane_schema.cc: _pt/_p producer
 * type/id, _ct/_c consumer type/id), written by jax (ThreadpoolListener, PjRt) and by loupe:
 * each _p / _c is a flow end, its type from the event's _pt / _ct (0 when absent). 1 when st
 * was one of them, 0 when not, or an error. */
static int flow_stat(reader *x, const plane *pl, const stat *st, size_t t, int64_t *ptype,
                     int64_t *ctype) {
    if (key_is(pl, st->mid, "_pt") || key_is(pl, st->mid, "_ct")) {
        *(key_is(pl, st->mid, "_pt") ? ptype : ctype) = (int64_t)st->u;
        return 1;
    }
    int in = key_is(pl, st->mid, "_c");
    if (!in && !key_is(pl, st->mid, "_p")) {
        return 0;
    }
    return add_flow(x, st->u, t, 0, in) != 0 ? x->r.rc : 1;
}

/* The model's flow id of an XProf flow end: XProf matches (type, id), so a type other than
 * ContextType kGeneric (0, what loupe writes) goes into the top byte: jax's threadpool regions
 * (type 15) and its PjRt events (type 0) with the same id stay apart. */
static void flow_types(reader *x, size_t from, int64_t ptype, int64_t ctype) {
    for (size_t i = from; i < x->nflows; i++) {
        uint64_t type = (uint64_t)(x->flows[i].in ? ctype : ptype);
        x->flows[i].id ^= type << 56;
    }
}

/* A step marker (stat _r = 1, root level 1, next to an integer step_num: jax's
 * StepTraceAnnotation and loupe's LOUPE_STEP) is a step in the model: the zone with its
 * step_num argument, as LOUPE_STEP records it; the writer gives it its _r again. Any other _r
 * (another root level, a root without step_num) stays an argument. */
static void drop_step_root(loupe_arg *args, uint32_t *n) {
    uint32_t root = UINT32_MAX;
    int step = 0;
    for (uint32_t i = 0; i < *n; i++) {
        if (strcmp(args[i].key, "_r") == 0 && args[i].type == LOUPE_ARG_INT64 && args[i].v.i == 1) {
            root = i;
        }
        step |= strcmp(args[i].key, "step_num") == 0 &&
                (args[i].type == LOUPE_ARG_INT64 || args[i].type == LOUPE_ARG_UINT64);
    }
    if (root != UINT32_MAX && step) {
        memmove(args + root, args + root + 1, (*n - root - 1) * sizeof(*args));
        (*n)--;
    }
}

static int read_event(reader *x, plane *pl, span s, size_t t, int64_t line_ns, int counters) {
    int64_t mid = 0;
    uint64_t off_ps = 0, dur_ps = 0;
    span stats = s;
    size_t ev_off = s.off;
    int have_stats = 0;
    field f;
    int k;
    while ((k = nextf(&x->r, &s, &f)) == 1) {
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
        } else if (f.num == 4) {
            if (want(&x->r, &f, 2) != 0) {
                return x->r.rc;
            }
            have_stats = 1;
        }
    }
    if (k < 0) {
        return k;
    }
    if (!have_stats) {
        stats.n = 0; /* nothing for the stats loop below to walk again */
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
    int64_t ptype = 0, ctype = 0;
    stat value;
    int have_value = 0;
    uint64_t cproc = 0; /* a counter's process (loupe_process; 0 when absent) */
    while ((k = nextf(&x->r, &stats, &f)) == 1) {
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
        if (counters && x->is_loupe && key_is(pl, st.mid, "loupe_process")) {
            cproc = st.u < x->nprocs ? st.u : 0;
            continue;
        }
        if (x->is_loupe && key_is(pl, st.mid, "flow")) {
            continue; /* an MPI message end's XProf flow, written from its args (kept) */
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
        int fr = counters ? 0 : flow_stat(x, pl, &st, t, &ptype, &ctype);
        if (fr < 0) {
            return fr;
        }
        if (fr > 0) {
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
    flow_types(x, nflow0, ptype, ctype);
    drop_step_root(x->args, &n);
    uint64_t ts = (uint64_t)start;
    if (!x->have_time || ts < x->min_ns) {
        x->min_ns = ts;
    }
    if (!x->have_time || ts + (uint64_t)dur > x->max_ns) {
        x->max_ns = ts + (uint64_t)dur;
    }
    x->have_time = 1;
    if (counters) {
        loupe_counter_sample c = {.ts_ns = ts, .name = em->iname, .process = (size_t)cproc};
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
        x->nflows = nflow0; /* a flow binds slices: an instant's ends have nowhere to go */
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
    loupe__mb_slice_category(x->mb, t, sl, em->category);
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

/* The track's own name in a mapped line's name: without the writer's "<process name> (<pid>) / "
 * (another process's) and " (lane N)" (an async track's lane), where they are there. */
static void strip_process(const reader *x, uint64_t process, span *name) {
    if (process != 0 && process < x->nprocs) {
        const rproc *pr = &x->procs[process];
        char pre[96];
        int n = snprintf(pre, sizeof pre, " (%llu) / ", (unsigned long long)pr->pid);
        size_t nl = strlen(pr->name);
        if (n > 0 && name->n >= nl + (size_t)n && memcmp(name->p, pr->name, nl) == 0 &&
            memcmp(name->p + nl, pre, (size_t)n) == 0) {
            name->p += nl + (size_t)n;
            name->n -= nl + (size_t)n;
        }
    }
}

static void own_name(reader *x, const lmap *lm, span *name) {
    strip_process(x, lm->process, name);
    if (lm->have & 4) {
        char suf[48];
        int n = snprintf(suf, sizeof suf, " (lane %llu)", (unsigned long long)lm->lane);
        if (n > 0 && name->n >= (size_t)n &&
            memcmp(name->p + name->n - (size_t)n, suf, (size_t)n) == 0) {
            name->n -= (size_t)n;
        }
    }
}

static int read_line(reader *x, plane *pl, span s, int gpu, const gpu_plane *gp) {
    span body = s;
    uint64_t id = 0;
    int64_t ts = 0;
    span name = {s.p, 0, s.off};
    field f;
    int k;
    while ((k = nextf(&x->r, &s, &f)) == 1) {
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
    if ((uint64_t)ts < x->tshift) {
        return fail(&x->r, body.off, "line timestamp_ns before the file's loupe_timeline_shift_ns");
    }
    ts -= (int64_t)x->tshift;
    if (!gpu && samples_is_line(x, id, name.p, name.n)) {
        return samples_line(x, pl, body, ts);
    }
    int counters = !gpu && name.n == 10 && memcmp(name.p, "_counters_", 10) == 0;
    size_t t = SIZE_MAX;
    if (!counters) {
        const lmap *lm = NULL;
        t = gpu ? track_in(x, 1, gp->device, gp->process, id) : host_track(x, id, &lm);
        if (t == SIZE_MAX) {
            return x->r.rc;
        }
        if (lm != NULL) {
            own_name(x, lm, &name);
        } else if (gpu) {
            strip_process(x, gp->process, &name); /* another process's device plane */
        }
        if (name.n > 0) {
            loupe__mb_thread_name(x->mb, t, intern(x, name));
        }
    }
    while ((k = nextf(&x->r, &body, &f)) == 1) {
        if (f.num == 4 && read_event(x, pl, f.sub, t, ts, counters) != 0) {
            return x->r.rc;
        }
        if ((++x->progress_events & 0xffffu) == 0) {
            loupe__progress("decoding", x->r.path, x->progress_base + f.sub.off, x->progress_total);
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
static int thread_stat(reader *x, const plane *pl, const stat *st, int gpu, const gpu_plane *gp) {
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
                : strcmp(end, "unnamed") == 0         ? 3
                                                      : -1;
    if (which < 0) {
        return 0;
    }
    const lmap *lm = NULL;
    size_t t = gpu ? track_in(x, 1, gp->device, gp->process, tid) : host_track(x, tid, &lm);
    if (t == SIZE_MAX) {
        return -1;
    }
    if (which == 3) { /* the writer named an unnamed track (src/export/xplane.c line_name) */
        if (st->u != 0) {
            loupe__mb_thread_name(x->mb, t, "");
        }
        return 1;
    }
    loupe_model_thread *th = loupe__mb_thread_at(x->mb, t);
    uint64_t *dst = which == 0   ? &th->events_recorded
                    : which == 1 ? &th->events_dropped
                                 : &th->capacity_needed;
    *dst = st->u;
    return 1;
}

/* loupe_line_<id>_<what> and loupe_process_<k>_<what> on the host plane (pass 0): 1 when st
 * was one, 0 when not, -1 on OOM. */
static int process_stat(reader *x, const plane *pl, const stat *st) {
    const smeta *km = find_sm(pl, st->mid);
    static const char lpre[] = "loupe_line_", ppre[] = "loupe_process_";
    if (km == NULL || km->name.n > 90) {
        return 0;
    }
    char k[96];
    memcpy(k, km->name.p, km->name.n);
    k[km->name.n] = 0;
    int is_line = strncmp(k, lpre, sizeof lpre - 1) == 0;
    if (!is_line && strncmp(k, ppre, sizeof ppre - 1) != 0) {
        return 0;
    }
    const char *num = k + (is_line ? sizeof lpre : sizeof ppre) - 1;
    if (*num < '0' || *num > '9') {
        return 0;
    }
    char *end;
    errno = 0;
    uint64_t id = strtoull(num, &end, 10);
    if (errno != 0 || *end != '_') {
        return 0;
    }
    const char *what = end + 1;
    if (is_line) {
        int which = strcmp(what, "process") == 0 ? 1
                    : strcmp(what, "tid") == 0   ? 2
                    : strcmp(what, "lane") == 0  ? 4
                                                 : 0;
        if (which == 0) {
            return strcmp(what, "pid") == 0; /* the process index says which */
        }
        if (x->nlines == 0 || x->lines[x->nlines - 1].id != id) {
            if (loupe__grow((void **)&x->lines, &x->lines_cap, x->nlines + 1, sizeof(lmap)) != 0) {
                oom(x);
                return -1;
            }
            x->lines[x->nlines++] = (lmap){id, 0, id, 0, 0};
        }
        lmap *lm = &x->lines[x->nlines - 1];
        uint64_t *dst = which == 1 ? &lm->process : which == 2 ? &lm->tid : &lm->lane;
        *dst = st->u;
        lm->have |= (unsigned)which;
        return 1;
    }
    if (id >= 65536) { /* more processes than any run loupe records: not one of the writer's */
        return 0;
    }
    if (id >= x->nprocs) {
        if (loupe__grow((void **)&x->procs, &x->procs_cap, (size_t)id + 1, sizeof(rproc)) != 0) {
            oom(x);
            return -1;
        }
        for (size_t q = x->nprocs; q <= id; q++) {
            x->procs[q] = (rproc){0, 0, -1, "", "", "", ""};
        }
        x->nprocs = (size_t)id + 1;
    }
    rproc *pr = &x->procs[id];
    loupe_arg a;
    const char **sdst = strcmp(what, "name") == 0      ? &pr->name
                        : strcmp(what, "host") == 0    ? &pr->host
                        : strcmp(what, "label") == 0   ? &pr->label
                        : strcmp(what, "cmdline") == 0 ? &pr->cmdline
                                                       : NULL;
    if (sdst != NULL) {
        if (stat_arg(x, pl, st, &a) == 0 && a.type == LOUPE_ARG_STRING) {
            *sdst = a.v.s;
        }
    } else if (strcmp(what, "pid") == 0) {
        pr->pid = st->u;
    } else if (strcmp(what, "parent_pid") == 0) {
        pr->parent_pid = st->u;
    } else if (strcmp(what, "rank") == 0) {
        pr->rank = (int64_t)st->u;
    } else {
        return 0;
    }
    return 1;
}

static int cmp_lmap(const void *pa, const void *pb) {
    const lmap *a = pa, *b = pb;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* After pass 0: the processes in the model's order, and the line map sorted by id (a line id
 * whose process is not one of them goes to processes[0], with a warning). */
static int processes_setup(reader *x) {
    if (!x->is_loupe) {
        x->nlines = 0;
        x->nprocs = 0;
        return 0;
    }
    for (size_t q = 0; q < x->nprocs; q++) {
        const rproc *pr = &x->procs[q];
        size_t i =
            q == 0 ? loupe__mb_process(x->mb, pr->pid) : loupe__mb_process_add(x->mb, pr->pid);
        if (i == SIZE_MAX) {
            return oom(x);
        }
        loupe_model_process *mp = loupe__mb_process_at(x->mb, i);
        mp->name = loupe__mb_str(x->mb, pr->name);
        mp->host = loupe__mb_str(x->mb, pr->host);
        mp->label = loupe__mb_str(x->mb, pr->label);
        mp->cmdline = loupe__mb_str(x->mb, pr->cmdline);
        mp->parent_pid = pr->parent_pid;
        mp->rank = pr->rank;
    }
    if (x->nlines > 1) {
        qsort(x->lines, x->nlines, sizeof(lmap), cmp_lmap);
    }
    uint64_t bad = 0;
    for (size_t i = 0; i < x->nlines; i++) {
        lmap *lm = &x->lines[i];
        if (lm->process != 0 && lm->process >= x->nprocs) {
            lm->process = 0;
            bad++;
        }
    }
    if (bad > 0) {
        loupe__mb_warn(x->mb,
                       "%s: XPlane: %llu lines name a process the file does not list; read "
                       "into the first process",
                       x->r.path, (unsigned long long)bad);
    }
    return 0;
}

enum { PL_SKIP, PL_HOST, PL_GPU, PL_ENV };

/* A loupe GPU plane's loupe_gpu_process / loupe_gpu_device stats (the plane's own fields only,
 * before its lines are read); a process the file does not list stays processes[0], warned. */
static int gpu_owner(reader *x, const plane *pl, span body, gpu_plane *gp) {
    field f;
    int k;
    uint64_t proc = 0;
    while ((k = next(&x->r, &body, &f)) == 1) {
        if (f.num != 6) {
            continue;
        }
        stat st;
        if (want(&x->r, &f, 2) != 0 || read_stat(&x->r, f.sub, &st) != 0) {
            return x->r.rc;
        }
        if (key_is(pl, st.mid, "loupe_gpu_process")) {
            proc = st.u;
        } else if (key_is(pl, st.mid, "loupe_gpu_device")) {
            gp->device = st.u <= UINT32_MAX ? (uint32_t)st.u : gp->device;
        }
    }
    if (k < 0) {
        return k;
    }
    if (proc >= x->nprocs && proc != 0) {
        loupe__mb_warn(x->mb,
                       "%s: XPlane: a GPU plane names process %llu, which the file does not "
                       "list; read into the first process",
                       x->r.path, (unsigned long long)proc);
        proc = 0;
    }
    gp->process = (size_t)proc;
    return 0;
}

static int read_plane(reader *x, span s, int pass) {
    plane pl;
    memset(&pl, 0, sizeof pl);
    span body = s;
    span name = {s.p, 0, s.off};
    field f;
    int k;
    /* first: name and metadata (fields may come in any order) */
    while ((k = nextf(&x->r, &s, &f)) == 1) {
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
    gpu_plane gp = {device, 0};
    if (kind == PL_GPU && pass == 1 && x->is_loupe && gpu_owner(x, &pl, body, &gp) != 0) {
        kind = PL_SKIP;
    }
    /* pass 0: plane stats of the host plane (is this loupe's file? the origin);
     * pass 1: lines and the other stats */
    while (x->r.rc == 0 && kind != PL_SKIP && (k = nextf(&x->r, &body, &f)) == 1) {
        if (f.num == 3 && pass == 1 && kind != PL_ENV) {
            read_line(x, &pl, f.sub, kind == PL_GPU, &gp);
        } else if (f.num == 6) {
            stat st;
            if (read_stat(&x->r, f.sub, &st) != 0) {
                break;
            }
            loupe_model *m = x->m;
            uint64_t v;
            if (pass == 0 && kind == PL_HOST) {
                int sr = samples_plane_stat(x, &pl, &st);
                if (sr < 0) {
                    break;
                }
                if (sr > 0) {
                    continue;
                }
                sr = process_stat(x, &pl, &st);
                if (sr < 0) {
                    break;
                }
                if (sr > 0) {
                    continue;
                }
                if (key_is(&pl, st.mid, "loupe_version")) {
                    x->is_loupe = 1;
                } else if (plane_u64(x, &pl, &st, "profile_start_time", &v)) {
                    m->origin_unix_ns = v;
                } else if (plane_u64(x, &pl, &st, "profile_stop_time", &v)) {
                    m->duration_ns = v; /* minus the start at the end */
                } else if (plane_u64(x, &pl, &st, "loupe_timeline_shift_ns", &v)) {
                    x->tshift = v < (uint64_t)NS_LIMIT ? v : (uint64_t)NS_LIMIT;
                }
                continue;
            }
            if (pass == 0) {
                if (kind == PL_ENV && plane_u64(x, &pl, &st, "profile_start_time", &v)) {
                    x->env_start_ns = v;
                }
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
            int tsr = thread_stat(x, &pl, &st, kind == PL_GPU, &gp);
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
    if (x->r.rc == 0 && pass == 1 && kind == PL_HOST) {
        samples_plane_end(x, &pl);
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
        /* one producer, several consumers (XProf: every consumer of the id joins the
         * producer's group): one flow to each */
        for (size_t q = 0; q < nin && (q < nout || nout == 1); q++) {
            const flow_end *a = &x->flows[outs + (nout == 1 ? 0 : q)], *b = &x->flows[ins + q];
            if (loupe__mb_flow(x->mb, a->id, a->thread, a->slice, b->thread, b->slice) != 0) {
                return oom(x);
            }
        }
        i = j;
    }
    return 0;
}

/* The parts of a split trace (src/export/xplane.c write_parts()): "<x>.part<k>.xplane.pb"
 * beside "<x>.xplane.pb", k from 2 while they are there. */
typedef struct part {
    const char *path;
    char *buf;
    size_t n;
} part;

static char *part_name(const char *path, unsigned k) {
    size_t n = strlen(path);
    if (n <= 10 || strcmp(path + n - 10, ".xplane.pb") != 0) {
        return NULL;
    }
    char *out = malloc(n + 32);
    if (out != NULL) {
        snprintf(out, n + 32, "%.*s.part%u.xplane.pb", (int)(n - 10), path, k);
    }
    return out;
}

/* The whole file at path into *out: 0, 1 when there is none, or an error code. */
static int slurp(const char *path, char **out, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return errno == ENOENT ? 1 : loupe__err(LOUPE_EIO, "%s: %s", path, strerror(errno));
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (loupe__grow((void **)&buf, &cap, len + 65536, 1) != 0) {
            free(buf);
            fclose(f);
            return loupe__err(LOUPE_ENOMEM, "%s: out of memory", path);
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) {
            break;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return loupe__err(LOUPE_EIO, "%s: read error", path);
    }
    *out = buf;
    *n = len;
    return 0;
}

static void parts_free(part *v, size_t n) {
    for (size_t i = 1; i < n; i++) { /* v[0] is the caller's */
        free((void *)(uintptr_t)v[i].path);
        free(v[i].buf);
    }
    free(v);
}

/* v[0] = the file itself, then its parts; *count. */
static int parts_list(const char *path, char *buf, size_t n, part **out, size_t *count) {
    part *v = NULL;
    size_t nv = 0, cap = 0;
    int rc = 0;
    for (unsigned k = 1; rc == 0; k++) {
        part p = {path, buf, n};
        char *own = NULL;
        if (k > 1) {
            p.path = own = part_name(path, k);
            if (own == NULL) {
                break; /* no parts: not a .xplane.pb name */
            }
            int r = slurp(own, &p.buf, &p.n);
            if (r != 0) {
                free(own);
                rc = r < 0 ? r : 0;
                break;
            }
        }
        if (loupe__grow((void **)&v, &cap, nv + 1, sizeof *v) != 0) {
            if (k > 1) {
                free(own);
                free(p.buf);
            }
            rc = loupe__err(LOUPE_ENOMEM, "%s: out of memory", path);
            break;
        }
        v[nv++] = p;
    }
    *out = v;
    *count = nv;
    return rc;
}

/* An XSpace cut short (a copy that stopped, a full disk) ends inside its last top-level field
 * (base/pb.h's loupe__pb_whole_prefix): the planes before it are whole and are read, with a
 * warning (*warn, malloc'd) naming the cut. Nothing of the cut plane is: an XPlane's lines come
 * before its event and stat metadata (the order of xplane.proto's fields, which TensorFlow's
 * and loupe's writers follow), so its events would have neither names nor stats. A cut that
 * leaves no whole plane is an error (x->r.rc). */
static void cut_part(reader *x, part *p, char **warn) {
    const uint8_t *b = (const uint8_t *)p->buf;
    size_t fields;
    size_t whole = loupe__pb_whole_prefix(b, p->n, &fields);
    if (whole == p->n) {
        return;
    }
    size_t planes = 0, at = 0, end, data;
    uint32_t fnum;
    uint64_t len;
    while (at < whole && loupe__pb_cut_field(b, whole, at, &end, &fnum, &data, &len) == 1) {
        planes += fnum == 1;
        at = end;
    }
    (void)loupe__pb_cut_field(b, p->n, whole, &end, &fnum, &data, &len);
    char where[200];
    if (data >= p->n) {
        snprintf(where, sizeof where, "inside the header of the field at offset %zu", whole);
    } else {
        snprintf(where, sizeof where, "inside %s at offset %zu (%llu bytes announced, %zu there)",
                 fnum == 1 ? "the XPlane" : "an XSpace field", whole, (unsigned long long)len,
                 p->n - data);
    }
    if (planes == 0) {
        x->r.rc = loupe__err(LOUPE_EFORMAT,
                             "%s: XPlane: the file is cut short: it ends at byte %zu, %s, before "
                             "any whole plane: nothing to read (an XPlane's event and stat names "
                             "come after its lines)",
                             p->path, p->n, where);
        return;
    }
    char msg[700];
    snprintf(msg, sizeof msg,
             "%s: XPlane: the file is cut short: it ends at byte %zu, %s: read the file before "
             "offset %zu (whole planes: %zu); the rest of the file is lost (an XPlane's event "
             "and stat names come after its lines, so nothing of a cut plane is read)",
             p->path, p->n, where, whole, planes);
    *warn = malloc(strlen(msg) + 1);
    if (*warn == NULL) {
        oom(x);
        return;
    }
    memcpy(*warn, msg, strlen(msg) + 1);
    p->n = whole;
}

int loupe__xplane_read_mem(const char *path, char *buf, size_t n, loupe_model **out) {
    *out = NULL;
    reader x;
    memset(&x, 0, sizeof x);
    x.r.path = path;
    x.r.base = (const unsigned char *)buf;
    part *parts = NULL;
    size_t nparts = 0;
    int prc = parts_list(path, buf, n, &parts, &nparts);
    x.mb = prc == 0 ? loupe__mb_new() : NULL;
    if (x.mb == NULL) {
        parts_free(parts, nparts);
        free(buf);
        return prc != 0 ? prc : loupe__err(LOUPE_ENOMEM, "%s: out of memory", path);
    }
    x.m = loupe__mb_model(x.mb);
    x.m->clock = loupe__mb_str(x.mb, "");
    int host_seen = 0;
    char **warns = nparts > 0 ? calloc(nparts, sizeof *warns) : NULL;
    if (nparts > 0 && warns == NULL) {
        oom(&x);
    }
    for (size_t q = 0; q < nparts && x.r.rc == 0; q++) {
        cut_part(&x, &parts[q], &warns[q]); /* a part cut short: read as far as it is valid */
        x.progress_total += parts[q].n;
    }
    for (int pass = 0; pass < 2 && x.r.rc == 0; pass++) {
        if (pass == 1 && processes_setup(&x) != 0) {
            break;
        }
        /* a split trace's parts one after the other: each a whole XSpace whose events are
         * another time range of the same tracks (the tracks are keyed across them) */
        x.progress_base = 0;
        for (size_t q = 0; q < nparts && x.r.rc == 0; x.progress_base += parts[q++].n) {
            x.r.path = parts[q].path;
            x.r.base = (const unsigned char *)parts[q].buf;
            span s = {(const unsigned char *)parts[q].buf, parts[q].n, 0};
            field f;
            int k;
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
    }
    x.r.path = path;
    if (x.r.rc == 0) {
        loupe_model *m = x.m;
        /* a loupe file's times are relative to its origin; others start at their first event */
        uint64_t o = !x.is_loupe && x.have_time ? x.min_ns : 0;
        /* another tool's file (jax): its wall-clock origin from the session start that tsl
         * writes in Task Environment (SetSessionTimestamps, unix-epoch ns), so that a run
         * directory's merge can place it; its events are relative to that start (jax since
         * 0.5, jax-ml/jax#26288) or, in older files, unix-epoch ns themselves */
        if (!x.is_loupe && x.have_time && x.env_start_ns != 0 && m->origin_unix_ns == 0) {
            m->origin_unix_ns = x.min_ns < x.env_start_ns ? x.env_start_ns + x.min_ns : x.min_ns;
        }
        if (x.is_loupe && m->duration_ns >= m->origin_unix_ns) {
            m->duration_ns -= m->origin_unix_ns;
        } else {
            m->duration_ns = x.have_time ? x.max_ns - x.min_ns : 0;
        }
        /* a loupe file's times need no shift and its counts are its own: no pass over every
         * event (it was a tenth of the read) */
        for (size_t t = 0; t < m->thread_count && (o != 0 || !x.is_loupe); t++) {
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
        samples_finish(&x);
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
    free(x.lines);
    free(x.procs);
    free(x.flows);
    free(x.args);
    samples_free(&x);
    parts_free(parts, nparts);
    free(buf);
    int rc = x.r.rc;
    if (rc != 0) {
        loupe__mb_abort(x.mb);
    } else if ((*out = loupe__mb_finish(x.mb)) == NULL) {
        rc = loupe__err(LOUPE_ENOMEM, "%s: out of memory", path);
    }
    for (size_t q = 0; q < nparts && warns != NULL; q++) {
        if (rc == 0 && warns[q] != NULL && (rc = loupe__model_warn(*out, "%s", warns[q])) != 0) {
            loupe_model_free(*out);
            *out = NULL;
        }
        free(warns[q]);
    }
    free(warns);
    return rc;
}

/* Does this look like an XSpace? Its first field is planes (1), errors (2), warnings (3) or
 * hostnames (4), length-delimited, and the first plane's fields (in its first 4 KiB) are XPlane's
 * (1..6) with their wire types. JSON starts with '{', '[', whitespace or a BOM; a Perfetto trace
 * has TracePacket fields (timestamp 8, trusted_packet_sequence_id 10, ...) in its first field 1. */
/* A varint at b[*i..n); -1 when cut or overlong. */
static int sniff_varint(const unsigned char *b, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (unsigned shift = 0; shift < 64 && *i < n; shift += 7) {
        unsigned char c = b[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            return 0;
        }
    }
    return -1;
}

int loupe__xplane_sniff(const char *buf, size_t n) {
    rd r = {"sniff", (const unsigned char *)buf, 0, 1};
    /* The first field's header by hand: a plane is often longer than the bytes sniffed (jax's
     * first plane holds every event), so its body is looked at as far as it was read. */
    const unsigned char *b = (const unsigned char *)buf;
    size_t i = 0;
    uint64_t tag, len;
    if (sniff_varint(b, n, &i, &tag) != 0 || (tag & 7) != 2 || (tag >> 3) == 0 || (tag >> 3) > 4 ||
        sniff_varint(b, n, &i, &len) != 0) {
        return 0;
    }
    if ((tag >> 3) != 1) {
        return len <= n - i || n >= 4096; /* hostnames or tables: whole, or cut by the sniff */
    }
    static const unsigned char plane_wt[7] = {9, 0, 2, 2, 2, 2, 2};
    size_t avail = n - i;
    int cut = len > 4096 || len > avail;
    span p = {b + i, (size_t)(len < avail ? len : avail), 0};
    p.n = p.n > 4096 ? 4096 : p.n;
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

/* ---- CPU samples (loupe's convention, src/export/xplane.c says what goes where) ----
 *
 * The host plane's stats loupe_stack_nodes, loupe_off_cpu (with loupe_off_cpu_kinds when
 * written: one kind byte per interval; without it, or past its end, the kind is unknown),
 * loupe_sample_period_ns and
 * loupe_samples_lost (pass 0), the frames from the event metadata with a loupe_frame stat, and
 * the lines named "CPU samples ..." of a loupe file that has loupe_stack_nodes: each event a
 * sample of the thread its tid stat names, at its start, its stack the loupe_stack node. A
 * frame index, parent or stack node that refers to nothing, or a sample without a tid, is
 * warned about (the sample is kept without a stack, or dropped without a thread), never guessed.
 */

typedef struct rsamples {
    span nodes, off, kinds; /* the bytes of loupe_stack_nodes, loupe_off_cpu(_kinds) */
    int have_nodes;
    int built;      /* the frames and nodes are in the builder */
    uint32_t *fmap; /* file frame index -> builder frame */
    size_t nf;
    uint32_t *nmap; /* file node index -> builder node */
    size_t nn;
    uint64_t no_tid, bad_stack;
    unsigned char *decoded[3]; /* the base64 str_values decoded (nodes, off, kinds), or NULL */
} rsamples;

static rsamples *rsamp(reader *x) {
    if (x->rs == NULL && (x->rs = calloc(1, sizeof(rsamples))) == NULL) {
        oom(x);
    }
    return x->rs;
}

/* 1 when st is one of the samples' plane stats (kept), 0 when not, -1 on OOM. */
static int samples_plane_stat(reader *x, const plane *pl, const stat *st) {
    int nodes = key_is(pl, st->mid, "loupe_stack_nodes"),
        off = key_is(pl, st->mid, "loupe_off_cpu"),
        kinds = key_is(pl, st->mid, "loupe_off_cpu_kinds");
    if (key_is(pl, st->mid, "loupe_sample_period_ns")) {
        x->m->sample_period_ns = st->u;
        return 1;
    }
    if (key_is(pl, st->mid, "loupe_samples_lost")) {
        x->m->samples_lost = st->u;
        return 1;
    }
    if (key_is(pl, st->mid, "loupe_samples_line0")) {
        x->samples_line0 = st->u;
        return 1;
    }
    if (!nodes && !off && !kinds) {
        return 0;
    }
    rsamples *rs = rsamp(x);
    if (rs == NULL) {
        return -1;
    }
    span v = st->type == 6 ? st->str : (span){NULL, 0, st->off};
    if (st->type == 5) {
        /* since 0.5: the bytes' base64 (the writer's stat_b64); 0.4 wrote bytes_values */
        int k = nodes ? 0 : off ? 1 : 2;
        free(rs->decoded[k]);
        rs->decoded[k] = malloc(st->str.n / 4 * 3 + 1);
        if (rs->decoded[k] == NULL) {
            return oom(x);
        }
        size_t dn = loupe__b64_decode(rs->decoded[k], st->str.p, st->str.n);
        if (dn == (size_t)-1) {
            return fail(&x->r, st->off,
                        nodes ? "loupe_stack_nodes: not base64"
                        : off ? "loupe_off_cpu: not base64"
                              : "loupe_off_cpu_kinds: not base64");
        }
        v = (span){rs->decoded[k], dn, st->off};
    }
    if (nodes) {
        rs->nodes = v;
        rs->have_nodes = 1;
    } else if (kinds) {
        rs->kinds = v;
    } else {
        rs->off = v;
    }
    return 1;
}

/* A samples line: named "CPU samples ...", in a loupe file with a stack table, and (since 0.5,
 * which writes loupe_samples_line0) at or after the first samples line's id, so that a thread
 * named like one stays a thread. */
static int samples_is_line(const reader *x, uint64_t id, const unsigned char *name, size_t n) {
    static const char pre[] = "CPU samples";
    return x->is_loupe && x->rs != NULL && x->rs->have_nodes && n >= sizeof(pre) - 1 &&
           memcmp(name, pre, sizeof(pre) - 1) == 0 &&
           (x->samples_line0 == 0 || id >= x->samples_line0);
}

/* A frame from an event metadata with a loupe_frame stat: 1 with *fi and *fr set, 0 when it
 * is no frame, negative on an error. */
static int frame_of(reader *x, const plane *pl, const emeta *em, uint64_t *fi, loupe_frame *fr) {
    int is_frame = 0;
    memset(fr, 0, sizeof *fr);
    fr->function = intern(x, em->name);
    fr->file = fr->module = "";
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
        loupe_arg a;
        if (key_is(pl, st.mid, "loupe_frame")) {
            is_frame = 1;
            *fi = st.u;
        } else if (key_is(pl, st.mid, "line")) {
            fr->line = (uint32_t)st.u;
        } else if (key_is(pl, st.mid, "inlined")) {
            fr->inlined = st.u != 0;
        } else if (key_is(pl, st.mid, "module_offset")) {
            fr->module_offset = st.u;
        } else if (key_is(pl, st.mid, "file") || key_is(pl, st.mid, "module")) {
            if (stat_arg(x, pl, &st, &a) != 0) {
                return x->r.rc;
            }
            const char *v = a.type == LOUPE_ARG_STRING ? a.v.s : "";
            *(key_is(pl, st.mid, "file") ? &fr->file : &fr->module) = v;
        }
    }
    return k < 0 ? k : is_frame;
}

/* The frames and the stack tree into the builder, once per file. */
static int samples_build(reader *x, plane *pl) {
    rsamples *rs = x->rs;
    if (rs->built) {
        return 0;
    }
    rs->built = 1;
    rs->nf = pl->nem;
    rs->fmap = malloc((rs->nf + 1) * sizeof(uint32_t));
    rs->nmap = malloc((rs->nodes.n / 2 + 1) * sizeof(uint32_t));
    if (rs->fmap == NULL || rs->nmap == NULL) {
        return oom(x);
    }
    for (size_t i = 0; i < rs->nf; i++) {
        rs->fmap[i] = UINT32_MAX;
    }
    for (size_t i = 0; i < pl->nem; i++) {
        uint64_t fi = 0;
        loupe_frame fr;
        int k = frame_of(x, pl, &pl->em[i], &fi, &fr);
        if (k < 0) {
            return x->r.rc;
        }
        if (k == 0) {
            continue;
        }
        if (fi >= rs->nf) {
            loupe__mb_warn(x->mb, "%s: XPlane: frame index %llu is beyond the %zu event metadata",
                           x->r.path, (unsigned long long)fi, rs->nf);
            continue;
        }
        rs->fmap[fi] = loupe__mb_frame(x->mb, &fr);
    }
    loupe__pbr c = {rs->nodes.p, rs->nodes.p + rs->nodes.n, x->r.base};
    while (c.p < c.end) {
        uint64_t parent, frame;
        if (loupe__pbr_varint(&c, &parent) != 0 || loupe__pbr_varint(&c, &frame) != 0) {
            return fail(&x->r, rs->nodes.off, "loupe_stack_nodes: a varint cut short or too long");
        }
        uint32_t up = UINT32_MAX, fb = frame < rs->nf ? rs->fmap[frame] : UINT32_MAX;
        if (parent > rs->nn || fb == UINT32_MAX) {
            loupe__mb_warn(x->mb,
                           "%s: XPlane: stack node %zu names %s %llu, which is not there; the "
                           "samples with this stack have none",
                           x->r.path, rs->nn, parent > rs->nn ? "parent" : "frame",
                           (unsigned long long)(parent > rs->nn ? parent - 1 : frame));
            rs->nmap[rs->nn++] = UINT32_MAX;
            continue;
        }
        if (parent > 0) {
            up = rs->nmap[parent - 1];
        }
        rs->nmap[rs->nn++] =
            parent > 0 && up == UINT32_MAX ? UINT32_MAX : loupe__mb_stack(x->mb, up, fb);
    }
    return loupe__mb_failed(x->mb) ? oom(x) : 0;
}

static int sample_event(reader *x, plane *pl, span s, int64_t line_ns) {
    uint64_t off_ps = 0, tid = 0, cpu = UINT32_MAX, stack = UINT64_MAX, line = 0;
    int have_tid = 0, have_line = 0;
    size_t ev_off = s.off;
    field f;
    int k;
    while ((k = nextf(&x->r, &s, &f)) == 1) {
        if (f.num == 2 && want(&x->r, &f, 0) == 0) {
            off_ps = f.v;
        } else if (f.num == 4 && want(&x->r, &f, 2) == 0) {
            stat st;
            if (read_stat(&x->r, f.sub, &st) != 0) {
                return x->r.rc;
            }
            if (key_is(pl, st.mid, "tid")) {
                tid = st.u;
                have_tid = 1;
            } else if (key_is(pl, st.mid, "cpu")) {
                cpu = st.u < UINT32_MAX ? st.u : UINT32_MAX;
            } else if (key_is(pl, st.mid, "loupe_stack")) {
                stack = st.u;
            } else if (key_is(pl, st.mid, "loupe_line")) { /* the thread's line: its process */
                line = st.u;
                have_line = 1;
            }
        }
        if (x->r.rc) {
            return x->r.rc;
        }
    }
    if (k < 0) {
        return k;
    }
    int64_t ts = line_ns + (int64_t)(off_ps / 1000);
    if ((int64_t)off_ps < 0 || ts >= NS_LIMIT) {
        return fail(&x->r, ev_off, "a sample's time is negative or beyond 2^62 ns");
    }
    rsamples *rs = x->rs;
    if (!have_tid) {
        rs->no_tid++;
        return 0;
    }
    uint32_t node = UINT32_MAX;
    if (stack != UINT64_MAX) {
        node = stack < rs->nn ? rs->nmap[stack] : UINT32_MAX;
        rs->bad_stack += node == UINT32_MAX;
    }
    const lmap *lm = NULL;
    size_t t = have_line ? host_track(x, line, &lm) : track_of(x, 0, 0, tid);
    if (t == SIZE_MAX) {
        return x->r.rc;
    }
    return loupe__mb_sample(x->mb, t, (uint64_t)ts, node, (uint32_t)cpu) != 0 ? oom(x) : 0;
}

static int samples_line(reader *x, plane *pl, span s, int64_t line_ns) {
    if (samples_build(x, pl) != 0) {
        return x->r.rc;
    }
    field f;
    int k;
    while ((k = nextf(&x->r, &s, &f)) == 1) {
        if (f.num == 4 && (want(&x->r, &f, 2) != 0 || sample_event(x, pl, f.sub, line_ns) != 0)) {
            return x->r.rc;
        }
    }
    return k < 0 ? k : 0;
}

/* Frames that no sample line brought in (a model with frames but no samples). */
static int samples_plane_end(reader *x, plane *pl) {
    if (x->is_loupe && x->rs != NULL && x->rs->have_nodes) {
        return samples_build(x, pl);
    }
    return 0;
}

static int samples_finish(reader *x) {
    rsamples *rs = x->rs;
    if (rs == NULL || !x->is_loupe || x->r.rc != 0) {
        return x->r.rc;
    }
    if (rs->no_tid > 0) {
        loupe__mb_warn(x->mb, "%s: XPlane: %llu samples without a tid stat dropped", x->r.path,
                       (unsigned long long)rs->no_tid);
    }
    if (rs->bad_stack > 0) {
        loupe__mb_warn(x->mb,
                       "%s: XPlane: %llu samples name a stack node that loupe_stack_nodes does "
                       "not hold or could not resolve; kept without a stack",
                       x->r.path, (unsigned long long)rs->bad_stack);
    }
    loupe__pbr c = {rs->off.p, rs->off.p + rs->off.n, x->r.base};
    size_t nk = 0; /* intervals read: the index into loupe_off_cpu_kinds */
    while (c.p != NULL && c.p < c.end) {
        uint64_t tid, n;
        if (loupe__pbr_varint(&c, &tid) != 0 || loupe__pbr_varint(&c, &n) != 0 ||
            n > (uint64_t)(c.end - c.p) / 2) {
            return fail(&x->r, rs->off.off, "loupe_off_cpu: cut short or a count past its end");
        }
        const lmap *lm = NULL; /* keyed by line id: = tid in processes[0] */
        size_t t = host_track(x, tid, &lm);
        if (t == SIZE_MAX) {
            return x->r.rc;
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t start, dur;
            if (loupe__pbr_varint(&c, &start) != 0 || loupe__pbr_varint(&c, &dur) != 0) {
                return fail(&x->r, rs->off.off, "loupe_off_cpu: a varint cut short or too long");
            }
            unsigned kind = nk < rs->kinds.n ? rs->kinds.p[nk] : LOUPE_OFF_CPU_UNKNOWN;
            nk++;
            if (loupe__mb_off_cpu_kind(x->mb, t, start, dur, kind) != 0) {
                return oom(x);
            }
        }
    }
    if (rs->kinds.n != 0 && rs->kinds.n != nk &&
        loupe__mb_warn(x->mb,
                       "%s: XPlane: loupe_off_cpu_kinds has %zu kinds for %zu off-CPU "
                       "intervals; the intervals past its end are of unknown kind",
                       x->r.path, rs->kinds.n, nk) != 0) {
        return oom(x);
    }
    return 0;
}

static void samples_free(reader *x) {
    if (x->rs != NULL) {
        free(x->rs->fmap);
        free(x->rs->nmap);
        for (int k = 0; k < 3; k++) {
            free(x->rs->decoded[k]);
        }
        free(x->rs);
        x->rs = NULL;
    }
}
