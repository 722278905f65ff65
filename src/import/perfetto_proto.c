/* perfetto_proto.c: the Perfetto native protobuf reader (.pftrace) into the trace model.
 *
 * A bounded hand-written decoder (base/pb.h): every length is checked against the bytes that
 * remain, nothing is allocated from a length claim, and any malformed input (garbage varints,
 * truncated messages, lengths past the end, wire types that do not match a known field) is
 * LOUPE_EFORMAT with the file offset of the bad bytes. The file is read whole (at most 4 GiB).
 *
 * What is read (field numbers: see src/export/perfetto_proto.c and google/perfetto
 * protos/perfetto/trace/):
 * - Sequences as trace_processor reads them (Perfetto's trace_processor,
 * src/trace_processor/importers/proto/): per trusted_packet_sequence_id, interned data and defaults
 * belong to the generation started by the last CLEARED flag (or incremental_state_cleared);
 * interned data before the first clear is skipped, packets marked NEEDS_INCREMENTAL_STATE while the
 * state is invalid (no clear yet, or after previous_packet_dropped) are skipped; NEEDS with
 * sequence id 0 is an error; the first definition of an iid wins.
 * - Clocks: no clock id or BOOTTIME (6) is trace time; a sequence-scoped clock 64..127 goes
 *   through the sequence's last ClockSnapshot (offset to its BOOTTIME reading), incremental ones
 *   adding each packet's delta; another builtin clock with a snapshot is converted the same way,
 *   without one it is taken as trace time (the newest trace_processor does so too).
 * - TrackDescriptors: process (pid, cmdline joined with spaces, process_name), thread (tid,
 *   thread_name: one model track each), counter (a counter track: its samples become model
 *   counters named by the track, in its parent's process), any other named track (a model
 *   track of its own; loupe's GPU and async tracks); a named track's child tracks (loupe's
 *   async lanes) put their events on that track's model track.
 * - TrackEvents: SLICE_BEGIN / SLICE_END (a stack per track; an END with nothing open, or
 *   earlier than its BEGIN, is counted in unmatched_ends; a BEGIN still open at the end closes at
 *   the last timestamp, LOUPE_SLICE_TRUNCATED), INSTANT, COUNTER (int64 or double); name by iid
 *   or inline, categories joined with ","; debug annotations as typed args (bool, uint, int,
 *   double, string, pointer as uint, legacy JSON as string; dicts and arrays are skipped); flows:
 *   flow_ids (47, and the deprecated 36) link the previous event carrying the id to this one,
 *   terminating_flow_ids (48, 42) end the id. Only slice BEGINs are flow ends in the model.
 * - loupe's own "loupe_metadata" instant on the process track (see the writer) restores the
 *   model fields Perfetto has no place for: host, clock, tsc_ghz, origin, duration, per-track
 *   kind/device/tid and loss accounting, per-process host/label/parent_pid/rank, and the
 *   metadata pairs. Model times are relative to its origin_unix_ns (the writer's clock base);
 *   in other files to the earliest timestamp.
 * - Speed: the common cases skip the general paths: 1-byte tags with 1-byte values (next()),
 *   interned strings by iid in a per-sequence array, small sequence ids by index, the last track
 *   of each sequence cached. Nothing is allocated per event but the model's own arrays (and the
 *   joined string of an event with several categories).
 * - compressed_packets (TracePacket 50, what traced writes with COMPRESSION_TYPE_DEFLATE and
 *   loupe by default): inflated (zlib or gzip) under the limits of a gzipped file and read as
 *   the file's own packets, one level deep (see do_compressed).
 * - CPU samples: PerfSample packets and the interned frames, mappings and callstacks they use
 *   (see "CPU samples" at the end of this file).
 */
#include "base/array.h"
#include "base/error.h"
#include "base/pb.h"
#include "base/perfetto.h"
#include "base/progress.h"
#include "import/readers.h"
#include "model/builder.h"

#include <errno.h>
#include <stddef.h>
#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define MAX_FILE ((uint64_t)4 << 30)
#define MAX_SEQS LOUPE__PERFETTO_MAX_SEQUENCES
#define DENSE_IIDS ((uint64_t)1 << 20) /* per sequence and kind: 8 MiB of pointers at most */
#define DIRECT_SEQS 4096               /* sequence ids looked up by index below this */

/* ---- a map of (a, b) -> (v1, v2), open addressing ---- */

typedef struct mentry {
    uint64_t a, b, v1, v2;
    int used, live;
} mentry;

typedef struct map {
    mentry *e;
    size_t cap, count;
} map;

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

static mentry *map_find(const map *m, uint64_t a, uint64_t b) {
    if (m->cap == 0) {
        return NULL;
    }
    for (size_t j = mix(a, b) & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
        mentry *e = &m->e[j];
        if (!e->used) {
            return NULL;
        }
        if (e->a == a && e->b == b) {
            return e;
        }
    }
}

/* The entry for (a, b), added (not live) when missing; NULL on out-of-memory. */
static mentry *map_put(map *m, uint64_t a, uint64_t b) {
    mentry *e = map_find(m, a, b);
    if (e != NULL) {
        return e;
    }
    if ((m->count + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        mentry *ne = calloc(nc, sizeof(*ne));
        if (ne == NULL) {
            return NULL;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->e[i].used) {
                size_t j = mix(m->e[i].a, m->e[i].b) & (nc - 1);
                while (ne[j].used) {
                    j = (j + 1) & (nc - 1);
                }
                ne[j] = m->e[i];
            }
        }
        free(m->e);
        m->e = ne;
        m->cap = nc;
    }
    size_t j = mix(a, b) & (m->cap - 1);
    while (m->e[j].used) {
        j = (j + 1) & (m->cap - 1);
    }
    e = &m->e[j];
    *e = (mentry){a, b, 0, 0, 1, 0};
    m->count++;
    return e;
}

/* ---- reader state ---- */

enum { TK_PROCESS = 1, TK_THREAD, TK_COUNTER, TK_OTHER };

typedef struct track {
    uint64_t uuid;
    int kind;
    size_t thread; /* model thread index, SIZE_MAX when none yet */
    const char *name;
    uint64_t tid;
    size_t process; /* the model process: its own (a process track) or its parent's */
    size_t *stack;  /* open slices */
    size_t depth, cap;
    /* from loupe's "tracks" annotation */
    int has_meta;
    uint64_t m_kind, m_device, m_tid, m_rec, m_drop, m_cap;
    int has_pid; /* a thread track's ThreadDescriptor pid: its samples' (pid, tid) key */
    uint64_t pid;
    /* A child of a named track (loupe's async lanes): index + 1 of that track, whose model
     * thread this one's events go to; 0 otherwise. */
    size_t lane_of;
} track;

/* A clock a sequence's ClockSnapshot named (ids 1..127 but BOOTTIME's 6, which is the trace
 * clock): its snapshot value and, for an incremental one, its last value on the sequence. */
typedef struct clockref {
    uint32_t id;
    int incremental;
    uint64_t snap, last;
} clockref;

#define SEQ_CLOCKS 4 /* clocks a sequence holds inline (loupe's and the SDK's use 1 to 3) */

typedef struct seq {
    uint32_t id;
    uint32_t gen;
    int valid;
    int has_clock_default, has_track_default;
    uint32_t clock_default;
    uint64_t track_default;
    int has_boot;
    uint64_t boot_snap;
    /* Its clocks, SEQ_CLOCKS inline and the rest in more (at most 126 in all): a few bytes per
     * sequence, where a table by id took 4 KiB (70,000 sequences read 286 MB before the
     * refusal of the 65,537th). */
    clockref clocks[SEQ_CLOCKS];
    clockref *more;
    uint32_t nclocks;
    /* The current generation's interned strings by iid, for iids below DENSE_IIDS (writers give
     * iids from 1 up, so they are dense): an array index instead of a hash per event. The map
     * r->interned holds them too, and every iid above. */
    const char **dense[4]; /* by InternedData field 1..3 */
    size_t dense_cap[4], dense_count[4];
    /* the last track an event of this sequence named: uuid -> index + 1 into r->trk */
    uint64_t last_uuid;
    size_t last_trk;
} seq;

typedef struct reader {
    const char *name;
    const uint8_t *base;
    size_t progress_at; /* the file's bytes read at the last progress report (each MiB) */
    loupe__mb *mb;
    loupe_model *m;
    seq **seqs;
    size_t seq_count, seq_cap;
    map interned; /* (iid, seq<<40 | gen<<4 | kind) -> string */
    map tracks;   /* (uuid, 0) -> index into trk */
    map flows;    /* (flow id, 0) -> (thread, slice) when live */
    map seqmap;   /* (sequence id, 1) -> index into seqs */
    size_t last_seq;
    uint32_t seq_direct[DIRECT_SEQS]; /* sequence id -> index + 1 into seqs, for small ids */
    size_t dense_budget;              /* bytes the dense intern tables may still take */
    track *trk;
    size_t trk_count, trk_cap;
    loupe_arg *args;
    size_t arg_cap;
    uint64_t *fids, *tfids;
    size_t fid_cap, tfid_cap;
    uint64_t last_ts, min_ts, max_ts;
    int any_ts;
    int loupe_meta;
    uint64_t origin, unmatched_meta;
    map prof; /* samples: (iid, seq<<40 | gen<<8 | kind) -> what the iid stands for */
    /* compressed_packets: the inflated chunk (reused; the model copies what it keeps), the
     * bytes inflated so far and the limits (see do_compressed) */
    int depth;
    uint8_t *zbuf;
    size_t zcap;
    uint64_t ztotal, zmax;
    int zmax_env;
} reader;

static int read_trace(reader *r, const uint8_t *buf, size_t n);
static int do_compressed(reader *r, const loupe__pbf *cf);

static int do_profile_interned(reader *r, const loupe__pbf *idf, size_t si, const seq *s);
static int do_perf_sample(reader *r, const loupe__pbf *pf, uint64_t ts, size_t si, const seq *s);
static int do_samples_meta(reader *r, const loupe__pbf *events, size_t nev, size_t si,
                           const seq *s);

static int ferr(reader *r, size_t off, const char *what, const char *where) {
    return loupe__err(LOUPE_EFORMAT, "%s: Perfetto protobuf: offset %zu: %s (in %s)", r->name, off,
                      what, where);
}

static int oom(reader *r) {
    return loupe__err(LOUPE_ENOMEM, "%s: out of memory reading the Perfetto trace", r->name);
}

/* Reads the next field of p into *f: 1, 0 at the end, or -1 with *rc set. Inlined: the callers
 * copy *f right after (a call in between made those copies wait on its stores: a quarter of the
 * read time of a 20 M-event file, perf annotate). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int
next(reader *r, loupe__pbr *p, loupe__pbf *f, const char *where, int *rc) {
    /* The fast path, for most fields of a track event: a 1-byte tag (field 1..15) with a 1-byte
     * varint, or with a 1-byte length that fits what remains. Anything else, every error
     * included, takes loupe__pbr_next's full checks. */
    const uint8_t *q = p->p;
    if (p->end - q >= 2 && q[0] >= 8 && q[0] < 0x80 && q[1] < 0x80) {
        int wire = q[0] & 7;
        if (wire == PB_VARINT) {
            f->offset = (size_t)(q - p->base);
            f->field = (uint32_t)(q[0] >> 3);
            f->wire = PB_VARINT;
            f->v = q[1];
            p->p = q + 2;
            return 1;
        }
        if (wire == PB_LEN && (ptrdiff_t)q[1] <= p->end - q - 2) {
            f->offset = (size_t)(q - p->base);
            f->field = (uint32_t)(q[0] >> 3);
            f->wire = PB_LEN;
            f->data = q + 2;
            f->len = q[1];
            p->p = q + 2 + q[1];
            return 1;
        }
    }
    size_t off = 0;
    const char *what = NULL;
    int k = loupe__pbr_next(p, f, &off, &what);
    if (k < 0) {
        *rc = ferr(r, off, what, where);
    }
    return k;
}

static loupe__pbr sub(const reader *r, const loupe__pbf *f) {
    return (loupe__pbr){f->data, f->data + f->len, r->base};
}

/* Checks that f has the wire type the schema gives its field. */
static int want(reader *r, const loupe__pbf *f, int wire, const char *where) {
    if (f->wire != wire) {
        char what[96];
        snprintf(what, sizeof what, "field %u has wire type %d, expected %d", f->field, f->wire,
                 wire);
        return ferr(r, f->offset, what, where);
    }
    return 0;
}

static const char *str(reader *r, const loupe__pbf *f) {
    return loupe__mb_strn(r->mb, (const char *)f->data, f->len);
}

static seq *get_seq(reader *r, uint32_t id, size_t *idx, int *rc) {
    if (r->seq_count > 0 && r->seqs[r->last_seq]->id == id) {
        *idx = r->last_seq;
        return r->seqs[r->last_seq];
    }
    if (id < DIRECT_SEQS && r->seq_direct[id] != 0) {
        *idx = r->last_seq = r->seq_direct[id] - 1;
        return r->seqs[r->last_seq];
    }
    mentry *e = map_find(&r->seqmap, id, 1);
    if (e != NULL) {
        *idx = r->last_seq = (size_t)e->v1;
        return r->seqs[r->last_seq];
    }
    if (r->seq_count >= MAX_SEQS) {
        *rc = loupe__err(LOUPE_EFORMAT, "%s: more than %d packet sequences", r->name, MAX_SEQS);
        return NULL;
    }
    if (r->seq_count == r->seq_cap) {
        size_t nc = r->seq_cap ? r->seq_cap * 2 : 16;
        seq **ns = realloc(r->seqs, nc * sizeof(*ns));
        if (ns == NULL) {
            *rc = oom(r);
            return NULL;
        }
        r->seqs = ns;
        r->seq_cap = nc;
    }
    seq *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        *rc = oom(r);
        return NULL;
    }
    s->id = id;
    e = map_put(&r->seqmap, id, 1);
    if (e == NULL) {
        free(s);
        *rc = oom(r);
        return NULL;
    }
    e->v1 = r->seq_count;
    if (id < DIRECT_SEQS) {
        r->seq_direct[id] = (uint32_t)r->seq_count + 1;
    }
    *idx = r->last_seq = r->seq_count;
    r->seqs[r->seq_count++] = s;
    return s;
}

static track *get_track(reader *r, uint64_t uuid, int *rc) {
    mentry *e = map_find(&r->tracks, uuid, 0);
    if (e != NULL) {
        return &r->trk[e->v1];
    }
    if (loupe__grow((void **)&r->trk, &r->trk_cap, r->trk_count + 1, sizeof(track)) != 0) {
        *rc = oom(r);
        return NULL;
    }
    e = map_put(&r->tracks, uuid, 0);
    if (e == NULL) {
        *rc = oom(r);
        return NULL;
    }
    e->v1 = r->trk_count;
    track *t = &r->trk[r->trk_count++];
    memset(t, 0, sizeof(*t));
    t->uuid = uuid;
    t->thread = SIZE_MAX;
    t->name = "";
    return t;
}

/* The model thread of a track, made on first use. */
static size_t track_thread(reader *r, track *t, int *rc) {
    if (t->thread != SIZE_MAX) {
        return t->thread;
    }
    /* Not the builder's tid lookup: a GPU track may share its tid with a host thread. */
    size_t i = loupe__mb_thread_add(r->mb, 0);
    if (i == SIZE_MAX) {
        *rc = oom(r);
        return SIZE_MAX;
    }
    loupe_model_thread *th = loupe__mb_thread_at(r->mb, i);
    th->tid = t->kind == TK_THREAD ? t->tid : t->uuid;
    th->kind = LOUPE_TRACK_THREAD;
    th->process = t->process;
    loupe__mb_thread_name(r->mb, i, t->name);
    t->thread = i;
    return i;
}

/* ---- packets ---- */

/* Records iid's string in the sequence's dense table of kind (grown by doubling up to
 * DENSE_IIDS) when that keeps the tables within their budget: a table grows only to twice its
 * defined entries plus 64, and all tables together to dense_budget bytes (8 times the file, at
 * least 64 MiB), so a hostile file cannot make the reader allocate far more than it holds; an
 * iid left out is found in the map. Nonzero on out-of-memory. */
static int dense_put(reader *r, seq *s, unsigned kind, uint64_t iid, const char *str) {
    s->dense_count[kind]++;
    if (iid >= s->dense_cap[kind]) {
        size_t nc = s->dense_cap[kind] ? s->dense_cap[kind] : 64;
        while (nc <= iid) {
            nc *= 2;
        }
        size_t grow = (nc - s->dense_cap[kind]) * sizeof(const char *);
        if (iid >= 2 * s->dense_count[kind] + 64 || grow > r->dense_budget) {
            return 0; /* sparse, or over budget: the map has it */
        }
        r->dense_budget -= grow;
        const char **nd = realloc(s->dense[kind], nc * sizeof(*nd));
        if (nd == NULL) {
            return -1;
        }
        memset(nd + s->dense_cap[kind], 0, (nc - s->dense_cap[kind]) * sizeof(*nd));
        s->dense[kind] = nd;
        s->dense_cap[kind] = nc;
    }
    s->dense[kind][iid] = str;
    return 0;
}

static int do_interned(reader *r, const loupe__pbf *idf, size_t si, seq *s) {
    loupe__pbr p = sub(r, idf);
    loupe__pbf f = {0};
    int rc = 0, k;
    while ((k = next(r, &p, &f, "InternedData", &rc)) > 0) {
        /* field 1 event_categories, 2 event_names, 3 debug_annotation_names: {iid 1, name 2};
         * others are skipped. */
        if (f.field < 1 || f.field > 3) {
            continue;
        }
        if ((rc = want(r, &f, PB_LEN, "InternedData")) != 0) {
            return rc;
        }
        loupe__pbr q = sub(r, &f);
        loupe__pbf g = {0};
        uint64_t iid = 0;
        const char *name = NULL;
        while ((k = next(r, &q, &g, "interned entry", &rc)) > 0) {
            if (g.field == 1) {
                if ((rc = want(r, &g, PB_VARINT, "interned entry")) != 0) {
                    return rc;
                }
                iid = g.v;
            } else if (g.field == 2) {
                if ((rc = want(r, &g, PB_LEN, "interned entry")) != 0) {
                    return rc;
                }
                name = str(r, &g);
            }
        }
        if (k < 0) {
            return rc;
        }
        if (iid == 0) {
            return ferr(r, f.offset, "interned entry without an iid", "InternedData");
        }
        mentry *e =
            map_put(&r->interned, iid, ((uint64_t)si << 40) | ((uint64_t)s->gen << 4) | f.field);
        if (e == NULL) {
            return oom(r);
        }
        if (!e->live) { /* the first definition wins */
            e->live = 1;
            e->v1 = (uint64_t)(uintptr_t)(name != NULL ? name : "");
            if (iid < DENSE_IIDS &&
                dense_put(r, s, f.field, iid, (const char *)(uintptr_t)e->v1) != 0) {
                return oom(r);
            }
        }
    }
    return k < 0 ? rc : 0;
}

static const char *lookup(reader *r, size_t si, const seq *s, unsigned kind, uint64_t iid) {
    if (iid < s->dense_cap[kind] && s->dense[kind][iid] != NULL) {
        return s->dense[kind][iid];
    }
    mentry *e = map_find(&r->interned, iid, ((uint64_t)si << 40) | ((uint64_t)s->gen << 4) | kind);
    return e != NULL && e->live ? (const char *)(uintptr_t)e->v1 : NULL;
}

/* The sequence's clock id, or NULL when its snapshots named none. */
static clockref *find_clock(seq *s, uint64_t id) {
    for (uint32_t i = 0; i < s->nclocks && i < SEQ_CLOCKS; i++) {
        if (s->clocks[i].id == id) {
            return &s->clocks[i];
        }
    }
    for (uint32_t i = SEQ_CLOCKS; i < s->nclocks; i++) {
        if (s->more[i - SEQ_CLOCKS].id == id) {
            return &s->more[i - SEQ_CLOCKS];
        }
    }
    return NULL;
}

/* A new clock slot (ids are 1..127, so at most 127 of them); NULL on out-of-memory. */
static clockref *add_clock(seq *s) {
    if (s->nclocks < SEQ_CLOCKS) {
        return &s->clocks[s->nclocks++];
    }
    if (s->more == NULL && (s->more = calloc(128 - SEQ_CLOCKS, sizeof(*s->more))) == NULL) {
        return NULL;
    }
    return &s->more[s->nclocks++ - SEQ_CLOCKS];
}

static int do_clock_snapshot(reader *r, const loupe__pbf *cf, seq *s) {
    loupe__pbr p = sub(r, cf);
    loupe__pbf f = {0};
    int rc = 0, k;
    while ((k = next(r, &p, &f, "ClockSnapshot", &rc)) > 0) {
        if (f.field != 1) {
            continue;
        }
        if ((rc = want(r, &f, PB_LEN, "ClockSnapshot")) != 0) {
            return rc;
        }
        loupe__pbr q = sub(r, &f);
        loupe__pbf g = {0};
        uint64_t id = 0, ts = 0, incr = 0;
        while ((k = next(r, &q, &g, "ClockSnapshot.Clock", &rc)) > 0) {
            if (g.field >= 1 && g.field <= 3) {
                if ((rc = want(r, &g, PB_VARINT, "ClockSnapshot.Clock")) != 0) {
                    return rc;
                }
                if (g.field == 1) {
                    id = g.v;
                } else if (g.field == 2) {
                    ts = g.v;
                } else {
                    incr = g.v;
                }
            }
        }
        if (k < 0) {
            return rc;
        }
        if (id == 6) {
            s->has_boot = 1;
            s->boot_snap = ts;
        } else if (id > 0 && id < 128) {
            clockref *c = find_clock(s, id);
            if (c == NULL && (c = add_clock(s)) == NULL) {
                return oom(r);
            }
            *c = (clockref){(uint32_t)id, incr != 0, ts, ts};
        }
    }
    return k < 0 ? rc : 0;
}

/* Trace time of a packet's timestamp on clock id. */
static uint64_t to_trace_time(seq *s, uint64_t clock, uint64_t ts) {
    clockref *c;
    if (clock == 0 || clock == 6 || (c = find_clock(s, clock)) == NULL) {
        return ts;
    }
    uint64_t v = ts;
    if (c->incremental) {
        v = c->last + ts;
        c->last = v;
    }
    return s->has_boot ? v - c->snap + s->boot_snap : v;
}

static int do_defaults(reader *r, const loupe__pbf *df, seq *s) {
    loupe__pbr p = sub(r, df);
    loupe__pbf f = {0};
    int rc = 0, k;
    s->has_clock_default = 0;
    s->has_track_default = 0;
    while ((k = next(r, &p, &f, "TracePacketDefaults", &rc)) > 0) {
        if (f.field == 58) { /* timestamp_clock_id */
            if ((rc = want(r, &f, PB_VARINT, "TracePacketDefaults")) != 0) {
                return rc;
            }
            s->has_clock_default = 1;
            s->clock_default = (uint32_t)f.v;
        } else if (f.field == 11) { /* track_event_defaults {track_uuid 11} */
            if ((rc = want(r, &f, PB_LEN, "TracePacketDefaults")) != 0) {
                return rc;
            }
            loupe__pbr q = sub(r, &f);
            loupe__pbf g = {0};
            while ((k = next(r, &q, &g, "TrackEventDefaults", &rc)) > 0) {
                if (g.field == 11) {
                    if ((rc = want(r, &g, PB_VARINT, "TrackEventDefaults")) != 0) {
                        return rc;
                    }
                    s->has_track_default = 1;
                    s->track_default = g.v;
                }
            }
            if (k < 0) {
                return rc;
            }
        }
    }
    return k < 0 ? rc : 0;
}

static int do_descriptor(reader *r, const loupe__pbf *df) {
    loupe__pbr p = sub(r, df);
    loupe__pbf f = {0}, proc = {0}, thr = {0};
    int rc = 0, k, has_uuid = 0, has_proc = 0, has_thr = 0, has_counter = 0;
    uint64_t uuid = 0, parent = 0;
    const char *name = NULL;
    while ((k = next(r, &p, &f, "TrackDescriptor", &rc)) > 0) {
        switch (f.field) {
        case 5: /* parent_uuid: a track under a process track belongs to that process */
            if ((rc = want(r, &f, PB_VARINT, "TrackDescriptor")) != 0) {
                return rc;
            }
            parent = f.v;
            break;
        case 1: /* uuid */
            if ((rc = want(r, &f, PB_VARINT, "TrackDescriptor")) != 0) {
                return rc;
            }
            uuid = f.v;
            has_uuid = 1;
            break;
        case 2: /* name */
            if ((rc = want(r, &f, PB_LEN, "TrackDescriptor")) != 0) {
                return rc;
            }
            name = str(r, &f);
            break;
        case 3: /* process */
        case 4: /* thread */
        case 8: /* counter */
            if ((rc = want(r, &f, PB_LEN, "TrackDescriptor")) != 0) {
                return rc;
            }
            if (f.field == 3) {
                proc = f;
                has_proc = 1;
            } else if (f.field == 4) {
                thr = f;
                has_thr = 1;
            } else {
                has_counter = 1;
            }
            break;
        default:
            break;
        }
    }
    if (k < 0) {
        return rc;
    }
    if (!has_uuid) {
        return 0;
    }
    size_t parent_process = 0, lane_of = 0;
    if (parent != 0) {
        track *pt = get_track(r, parent, &rc);
        if (pt == NULL) {
            return rc;
        }
        parent_process = pt->kind == TK_PROCESS && pt->process != SIZE_MAX ? pt->process : 0;
        if (pt->kind == TK_OTHER && pt->thread != SIZE_MAX && pt->lane_of == 0) {
            /* a child of a named track: its lanes, as loupe writes an async track's */
            lane_of = (size_t)(pt - r->trk) + 1;
            parent_process = pt->process;
        }
    }
    track *t = get_track(r, uuid, &rc);
    if (t == NULL) {
        return rc;
    }
    t->process = parent_process;
    if (has_proc) {
        loupe__pbr q = sub(r, &proc);
        loupe__pbf g = {0};
        const char *pname = NULL;
        char *cmd = NULL;
        size_t cmd_len = 0;
        t->process = SIZE_MAX;
        t->kind = TK_PROCESS;
        while ((k = next(r, &q, &g, "ProcessDescriptor", &rc)) > 0) {
            if (g.field == 1 && (rc = want(r, &g, PB_VARINT, "ProcessDescriptor")) == 0) {
                /* int32 in Perfetto's schema; loupe's writer puts any uint64 pid there */
                uint64_t pid = g.v <= UINT32_MAX ? (uint32_t)g.v : g.v;
                if (r->m->pid == 0) {
                    r->m->pid = pid;
                }
                if ((t->process = loupe__mb_process(r->mb, pid)) == SIZE_MAX) {
                    return oom(r);
                }
            } else if (g.field == 6 && (rc = want(r, &g, PB_LEN, "ProcessDescriptor")) == 0) {
                if (r->m->process_name[0] == 0) {
                    r->m->process_name = str(r, &g);
                }
                pname = str(r, &g);
            } else if (g.field == 2 && (rc = want(r, &g, PB_LEN, "ProcessDescriptor")) == 0) {
                /* cmdline, repeated: joined with spaces (loupe writes its one string whole) */
                char *nc = realloc(cmd, cmd_len + g.len + 2);
                if (nc == NULL) {
                    free(cmd);
                    return oom(r);
                }
                cmd = nc;
                if (cmd_len > 0) {
                    cmd[cmd_len++] = ' ';
                }
                memcpy(cmd + cmd_len, g.data, g.len);
                cmd_len += g.len;
                cmd[cmd_len] = 0;
            }
            if (rc != 0) {
                free(cmd);
                return rc;
            }
        }
        if (t->process == SIZE_MAX) {
            t->process = 0; /* no pid: the model's own */
        }
        if (k >= 0 && pname != NULL) {
            loupe__mb_process_at(r->mb, t->process)->name = pname;
        }
        if (k >= 0 && cmd != NULL) {
            loupe__mb_process_at(r->mb, t->process)->cmdline = loupe__mb_str(r->mb, cmd);
        }
        free(cmd);
        return k < 0 ? rc : 0;
    }
    if (has_thr) {
        loupe__pbr q = sub(r, &thr);
        loupe__pbf g = {0};
        const char *tname = NULL;
        uint64_t tid = 0;
        while ((k = next(r, &q, &g, "ThreadDescriptor", &rc)) > 0) {
            if (g.field == 1 && (rc = want(r, &g, PB_VARINT, "ThreadDescriptor")) == 0) {
                t->pid = (uint32_t)g.v; /* int32 */
                t->has_pid = 1;
                uint64_t pid = g.v <= UINT32_MAX ? (uint32_t)g.v : g.v;
                if ((t->process = loupe__mb_process(r->mb, pid)) == SIZE_MAX) {
                    return oom(r);
                }
            } else if (g.field == 2 && (rc = want(r, &g, PB_VARINT, "ThreadDescriptor")) == 0) {
                tid = g.v;
            } else if (g.field == 5 && (rc = want(r, &g, PB_LEN, "ThreadDescriptor")) == 0) {
                tname = str(r, &g);
            }
            if (rc != 0) {
                return rc;
            }
        }
        if (k < 0) {
            return rc;
        }
        t->kind = TK_THREAD;
        t->tid = tid;
        if (tname != NULL) {
            t->name = tname;
        }
        size_t i = track_thread(r, t, &rc);
        if (i == SIZE_MAX) {
            return rc;
        }
        loupe__mb_thread_at(r->mb, i)->tid = tid;
        loupe__mb_thread_name(r->mb, i, t->name);
        return 0;
    }
    if (name != NULL) {
        t->name = name;
    }
    if (has_counter) {
        t->kind = TK_COUNTER;
        return 0;
    }
    t->kind = TK_OTHER;
    if (lane_of != 0) {
        t->lane_of = lane_of;
        t->thread = r->trk[lane_of - 1].thread;
        return 0;
    }
    size_t i = track_thread(r, t, &rc);
    if (i == SIZE_MAX) {
        return rc;
    }
    loupe__mb_thread_name(r->mb, i, t->name);
    return 0;
}

/* One DebugAnnotation into *a; returns 1 when it is a scalar arg, 0 when skipped. */
static int annotation(reader *r, const loupe__pbf *af, size_t si, const seq *s, loupe_arg *a,
                      loupe__pbf *dict, int *rc) {
    loupe__pbr p = sub(r, af);
    loupe__pbf f = {0};
    int k, have = 0;
    a->key = "";
    dict->len = 0;
    dict->data = NULL;
    while ((k = next(r, &p, &f, "DebugAnnotation", rc)) > 0) {
        int wire = f.field == 5 ? PB_I64 : (f.field == 6 || f.field >= 8) ? PB_LEN : PB_VARINT;
        if (f.field > 12 && f.field != 17) {
            continue;
        }
        if (f.field == 17) {
            wire = PB_VARINT;
        }
        if ((*rc = want(r, &f, wire, "DebugAnnotation")) != 0) {
            return -1;
        }
        switch (f.field) {
        case 1: { /* name_iid */
            const char *n = lookup(r, si, s, 3, f.v);
            a->key = n != NULL ? n : "";
            break;
        }
        case 10: /* name */
            a->key = str(r, &f);
            break;
        case 2: /* bool_value */
            a->type = LOUPE_ARG_BOOL;
            a->v.b = f.v != 0;
            have = 1;
            break;
        case 3: /* uint_value */
        case 7: /* pointer_value */
            a->type = LOUPE_ARG_UINT64;
            a->v.u = f.v;
            have = 1;
            break;
        case 4: /* int_value */
            a->type = LOUPE_ARG_INT64;
            a->v.i = (int64_t)f.v;
            have = 1;
            break;
        case 5: /* double_value */
            a->type = LOUPE_ARG_DOUBLE;
            memcpy(&a->v.d, &f.v, sizeof(double));
            have = 1;
            break;
        case 6: /* string_value */
        case 9: /* legacy_json_value */
            a->type = LOUPE_ARG_STRING;
            a->v.s = str(r, &f);
            have = 1;
            break;
        case 11: /* dict_entries: handed to the caller (the first one marks the range) */
            if (dict->data == NULL) {
                *dict = *af;
            }
            break;
        default:
            break;
        }
    }
    if (k < 0) {
        return -1;
    }
    return have;
}

static int add_arg(reader *r, uint32_t *n, const loupe_arg *a) {
    if (loupe__grow((void **)&r->args, &r->arg_cap, (size_t)*n + 1, sizeof(loupe_arg)) != 0) {
        return oom(r);
    }
    r->args[(*n)++] = *a;
    return 0;
}

static int push_id(reader *r, uint64_t **arr, size_t *cap, size_t *n, uint64_t v) {
    if (loupe__grow((void **)arr, cap, *n + 1, sizeof(uint64_t)) != 0) {
        return oom(r);
    }
    (*arr)[(*n)++] = v;
    return 0;
}

/* One entry of the "processes" dict: the process of the track whose uuid is key gets the
 * fields ProcessDescriptor has no place for (host, label, parent_pid, rank). */
static int process_meta(reader *r, const loupe__pbf *f, const char *key, size_t si, const seq *s) {
    char *endp;
    errno = 0;
    unsigned long long uuid = strtoull(key, &endp, 10);
    if (key[0] == 0 || *endp != 0 || errno != 0) {
        return 0;
    }
    mentry *e = map_find(&r->tracks, uuid, 0);
    if (e == NULL || r->trk[e->v1].kind != TK_PROCESS) {
        return 0;
    }
    loupe_model_process *pr = loupe__mb_process_at(r->mb, r->trk[e->v1].process);
    loupe__pbr q = sub(r, f);
    loupe__pbf g = {0};
    int rc = 0, k;
    while ((k = next(r, &q, &g, "DebugAnnotation", &rc)) > 0) {
        loupe_arg v;
        loupe__pbf d;
        if (g.field != 11) {
            continue;
        }
        if (annotation(r, &g, si, s, &v, &d, &rc) < 0) {
            return rc;
        }
        if (strcmp(v.key, "host") == 0 && v.type == LOUPE_ARG_STRING) {
            pr->host = v.v.s;
        } else if (strcmp(v.key, "label") == 0 && v.type == LOUPE_ARG_STRING) {
            pr->label = v.v.s;
        } else if (strcmp(v.key, "parent_pid") == 0 && v.type == LOUPE_ARG_UINT64) {
            pr->parent_pid = v.v.u;
        } else if (strcmp(v.key, "rank") == 0 && v.type == LOUPE_ARG_INT64) {
            pr->rank = v.v.i;
        }
    }
    return k < 0 ? rc : 0;
}

/* loupe's metadata instant: the dicts "loupe", "tracks", "processes", "metadata". */
static int do_meta(reader *r, const loupe__pbf *events, size_t nev, size_t si, const seq *s) {
    int rc = 0;
    r->loupe_meta = 1;
    for (size_t e = 0; e < nev; e++) {
        loupe_arg top;
        loupe__pbf dict = {0};
        if (annotation(r, &events[e], si, s, &top, &dict, &rc) < 0) {
            return rc;
        }
        loupe__pbr p = sub(r, &events[e]);
        loupe__pbf f = {0};
        int k;
        while ((k = next(r, &p, &f, "DebugAnnotation", &rc)) > 0) {
            if (f.field != 11) {
                continue;
            }
            loupe_arg a;
            loupe__pbf d2;
            if (annotation(r, &f, si, s, &a, &d2, &rc) < 0) {
                return rc;
            }
            if (strcmp(top.key, "loupe") == 0) {
                if (strcmp(a.key, "host") == 0 && a.type == LOUPE_ARG_STRING) {
                    r->m->host = a.v.s;
                } else if (strcmp(a.key, "clock") == 0 && a.type == LOUPE_ARG_STRING) {
                    r->m->clock = a.v.s;
                } else if (strcmp(a.key, "tsc_ghz") == 0 && a.type == LOUPE_ARG_DOUBLE) {
                    r->m->tsc_ghz = a.v.d;
                } else if (a.type == LOUPE_ARG_UINT64) {
                    if (strcmp(a.key, "pid") == 0) {
                        r->m->pid = a.v.u;
                    } else if (strcmp(a.key, "origin_unix_ns") == 0) {
                        r->origin = a.v.u;
                    } else if (strcmp(a.key, "duration_ns") == 0) {
                        r->m->duration_ns = a.v.u;
                    } else if (strcmp(a.key, "unmatched_ends") == 0) {
                        r->unmatched_meta = a.v.u;
                    }
                }
            } else if (strcmp(top.key, "processes") == 0) {
                if ((rc = process_meta(r, &f, a.key, si, s)) != 0) {
                    return rc;
                }
            } else if (strcmp(top.key, "metadata") == 0 && a.type == LOUPE_ARG_STRING) {
                if (loupe__mb_metadata(r->mb, a.key, a.v.s) != 0) {
                    return oom(r);
                }
            } else if (strcmp(top.key, "tracks") == 0) {
                char *endp;
                errno = 0;
                unsigned long long uuid = strtoull(a.key, &endp, 10);
                if (a.key[0] == 0 || *endp != 0 || errno != 0) {
                    continue;
                }
                track *t = get_track(r, uuid, &rc);
                if (t == NULL) {
                    return rc;
                }
                t->has_meta = 1;
                loupe__pbr q = sub(r, &f);
                loupe__pbf g = {0};
                while ((k = next(r, &q, &g, "DebugAnnotation", &rc)) > 0) {
                    loupe_arg v;
                    loupe__pbf d3;
                    if (g.field != 11) {
                        continue;
                    }
                    if (annotation(r, &g, si, s, &v, &d3, &rc) < 0) {
                        return rc;
                    }
                    if (v.type != LOUPE_ARG_UINT64) {
                        continue;
                    }
                    if (strcmp(v.key, "kind") == 0) {
                        t->m_kind = v.v.u;
                    } else if (strcmp(v.key, "device") == 0) {
                        t->m_device = v.v.u;
                    } else if (strcmp(v.key, "tid") == 0) {
                        t->m_tid = v.v.u;
                    } else if (strcmp(v.key, "events_recorded") == 0) {
                        t->m_rec = v.v.u;
                    } else if (strcmp(v.key, "events_dropped") == 0) {
                        t->m_drop = v.v.u;
                    } else if (strcmp(v.key, "capacity_needed") == 0) {
                        t->m_cap = v.v.u;
                    }
                }
                if (k < 0) {
                    return rc;
                }
            }
        }
        if (k < 0) {
            return rc;
        }
    }
    return 0;
}

static int flow_end(reader *r, uint64_t id, size_t th, size_t slice, int terminating) {
    mentry *e = map_put(&r->flows, id, 0);
    if (e == NULL) {
        return oom(r);
    }
    if (e->live && loupe__mb_flow(r->mb, id, (size_t)e->v1, (size_t)e->v2, th, slice) != 0) {
        return oom(r);
    }
    e->live = !terminating;
    e->v1 = th;
    e->v2 = slice;
    return 0;
}

#define MAX_ANNOTATIONS_PER_EVENT 4096

static int do_track_event(reader *r, const loupe__pbf *ef, uint64_t ts, size_t si, seq *s) {
    loupe__pbr p = sub(r, ef);
    loupe__pbf f = {0};
    int rc = 0, k;
    uint64_t type = 0, uuid = 0, cval = 0;
    int has_uuid = 0, has_cval = 0, cdouble = 0;
    const char *name = NULL;
    char *cats = NULL;
    const char *cat1 = NULL; /* the first category (interned) */
    size_t cats_len = 0;
    size_t nfid = 0, ntfid = 0;
    uint32_t nargs = 0;
    loupe__pbf ann[64];
    size_t nann = 0;
    while ((k = next(r, &p, &f, "TrackEvent", &rc)) > 0) {
        const char *cat = NULL;
        switch (f.field) {
        case 9:  /* type */
        case 11: /* track_uuid */
        case 10: /* name_iid */
        case 30: /* counter_value */
            if ((rc = want(r, &f, PB_VARINT, "TrackEvent")) != 0) {
                goto out;
            }
            if (f.field == 9) {
                type = f.v;
            } else if (f.field == 11) {
                uuid = f.v;
                has_uuid = 1;
            } else if (f.field == 10) {
                name = lookup(r, si, s, 2, f.v);
            } else {
                cval = f.v;
                has_cval = 1;
                cdouble = 0;
            }
            break;
        case 44: /* double_counter_value */
            if ((rc = want(r, &f, PB_I64, "TrackEvent")) != 0) {
                goto out;
            }
            cval = f.v;
            has_cval = 1;
            cdouble = 1;
            break;
        case 23: /* name */
            if ((rc = want(r, &f, PB_LEN, "TrackEvent")) != 0) {
                goto out;
            }
            name = str(r, &f);
            break;
        case 3:  /* category_iids: unpacked only (a packed run is skipped, as Perfetto does) */
        case 22: /* categories */
            if (f.field == 3 && f.wire == PB_VARINT) {
                cat = lookup(r, si, s, 1, f.v);
            } else if (f.field == 22 && f.wire == PB_LEN) {
                cat = str(r, &f);
            }
            break;
        case 4: /* debug_annotations: parsed after the loop */
            if ((rc = want(r, &f, PB_LEN, "TrackEvent")) != 0) {
                goto out;
            }
            if (nann < sizeof ann / sizeof ann[0]) {
                ann[nann] = f;
            }
            nann++;
            break;
        case 47: /* flow_ids, fixed64 */
        case 48: /* terminating_flow_ids, fixed64 */
        case 36: /* flow_ids_old, uint64 */
        case 42: /* terminating_flow_ids_old, uint64 */
            if (f.wire == ((f.field == 47 || f.field == 48) ? PB_I64 : PB_VARINT)) {
                if (f.field == 47 || f.field == 36) {
                    rc = push_id(r, &r->fids, &r->fid_cap, &nfid, f.v);
                } else {
                    rc = push_id(r, &r->tfids, &r->tfid_cap, &ntfid, f.v);
                }
                if (rc != 0) {
                    goto out;
                }
            }
            break;
        default:
            break;
        }
        if (cat != NULL && cat1 == NULL && cats == NULL) {
            cat1 = cat; /* the common case: one category, no copy */
        } else if (cat != NULL) {
            if (cats == NULL) { /* a second one: start the joined string with the first */
                size_t n1 = strlen(cat1);
                if ((cats = malloc(n1 + 1)) == NULL) {
                    rc = oom(r);
                    goto out;
                }
                memcpy(cats, cat1, n1 + 1);
                cats_len = n1;
            }
            size_t n = strlen(cat);
            char *nc = realloc(cats, cats_len + n + 2);
            if (nc == NULL) {
                rc = oom(r);
                goto out;
            }
            cats = nc;
            if (cats_len > 0) {
                cats[cats_len++] = ',';
            }
            memcpy(cats + cats_len, cat, n + 1);
            cats_len += n;
        }
    }
    if (k < 0) {
        goto out;
    }
    if (!has_uuid) {
        uuid = s->has_track_default ? s->track_default : 0;
    }
    track *t;
    if (s->last_trk != 0 && s->last_uuid == uuid) {
        t = &r->trk[s->last_trk - 1]; /* a sequence's events are mostly on one track */
    } else {
        if ((t = get_track(r, uuid, &rc)) == NULL) {
            goto out;
        }
        s->last_uuid = uuid;
        s->last_trk = (size_t)(t - r->trk) + 1;
    }
    if (name == NULL) {
        name = "";
    }
    /* one category: the interned string itself; several: joined (then interned) */
    const char *category = cats != NULL ? loupe__mb_str(r->mb, cats) : cat1 != NULL ? cat1 : "";
    if (type == 3 && t->kind == TK_PROCESS && strcmp(name, "loupe_metadata") == 0 &&
        strcmp(category, "loupe") == 0) {
        if (nann > sizeof ann / sizeof ann[0]) {
            rc = ferr(r, ef->offset, "too many metadata annotations", "TrackEvent");
            goto out;
        }
        rc = do_meta(r, ann, nann, si, s);
        goto out;
    }
    if (type == 3 && t->kind == TK_PROCESS && strcmp(name, "loupe_samples") == 0) {
        rc = do_samples_meta(r, ann, nann < sizeof ann / sizeof ann[0] ? nann : 0, si, s);
        goto out;
    }
    /* Scalar annotations become args (all of them: re-walk when more than ann[] holds). */
    {
        loupe__pbr q = sub(r, ef);
        loupe__pbf g = {0};
        size_t seen = 0;
        while (seen < nann && (k = next(r, &q, &g, "TrackEvent", &rc)) > 0) {
            if (g.field != 4) {
                continue;
            }
            seen++;
            loupe_arg a;
            loupe__pbf dict = {0};
            int have = annotation(r, &g, si, s, &a, &dict, &rc);
            if (have < 0) {
                goto out;
            }
            if (have && (rc = add_arg(r, &nargs, &a)) != 0) {
                goto out;
            }
        }
        if (k < 0) {
            goto out;
        }
    }
    r->any_ts = 1;
    if (ts < r->min_ts) {
        r->min_ts = ts;
    }
    if (ts > r->max_ts) {
        r->max_ts = ts;
    }
    if (type == 4) { /* COUNTER */
        if (t->kind == TK_COUNTER && has_cval) {
            loupe_counter_sample c = {ts, t->name, cdouble, (int64_t)cval, 0.0, t->process};
            if (cdouble) {
                memcpy(&c.d, &cval, sizeof(double));
                c.i = 0;
            }
            if (loupe__mb_counter(r->mb, &c) != 0) {
                rc = oom(r);
            }
        }
        goto out;
    }
    if (t->kind == TK_COUNTER || (type != 1 && type != 2 && type != 3)) {
        goto out;
    }
    size_t th = track_thread(r, t, &rc);
    if (th == SIZE_MAX) {
        goto out;
    }
    if (type == 1) { /* SLICE_BEGIN */
        size_t i = loupe__mb_slice(r->mb, th);
        if (i == SIZE_MAX) {
            rc = oom(r);
            goto out;
        }
        loupe_slice *sl = loupe__mb_slice_at(r->mb, th, i);
        sl->start_ns = ts;
        /* interned already: by the builder (str(): inline or InternedData names), or "" */
        sl->name = name;
        loupe__mb_slice_category(r->mb, th, i, category);
        if (nargs > 0 && loupe__mb_slice_args(r->mb, th, i, r->args, nargs) != 0) {
            rc = oom(r);
            goto out;
        }
        if (loupe__grow((void **)&t->stack, &t->cap, t->depth + 1, sizeof(size_t)) != 0) {
            rc = oom(r);
            goto out;
        }
        t->stack[t->depth++] = i;
        for (size_t j = 0; j < ntfid && rc == 0; j++) {
            rc = flow_end(r, r->tfids[j], th, i, 1);
        }
        for (size_t j = 0; j < nfid && rc == 0; j++) {
            rc = flow_end(r, r->fids[j], th, i, 0);
        }
    } else if (type == 2) { /* SLICE_END */
        if (t->depth == 0 || loupe__mb_slice_at(r->mb, th, t->stack[t->depth - 1])->start_ns > ts) {
            r->m->unmatched_ends++;
            goto out;
        }
        size_t i = t->stack[--t->depth];
        loupe_slice *sl = loupe__mb_slice_at(r->mb, th, i);
        sl->dur_ns = ts - sl->start_ns;
        for (uint32_t j = 0; j < nargs && rc == 0; j++) {
            const loupe_arg *a = &r->args[j];
            if (strcmp(a->key, "loupe_flags") == 0 && a->type == LOUPE_ARG_UINT64) {
                loupe__mb_slice_at(r->mb, th, i)->flags = (uint16_t)a->v.u;
            } else if (loupe__mb_slice_add_arg(r->mb, th, i, a) != 0) {
                rc = oom(r);
            }
        }
    } else if (loupe__mb_instant(r->mb, th, ts, name, r->args, nargs) != 0) {
        rc = oom(r);
    }
out:
    free(cats);
    return rc;
}

static int do_packet(reader *r, const loupe__pbf *pf) {
    loupe__pbr p = sub(r, pf);
    loupe__pbf f = {0}, te = {0}, idata = {0}, defaults = {0}, desc = {0}, clk = {0}, perf = {0};
    loupe__pbf comp = {0};
    int has_comp = 0;
    int rc = 0, k;
    int has_ts = 0, has_clock = 0, has_te = 0, has_id = 0, has_def = 0, has_desc = 0, has_clk = 0;
    int cleared = 0, dropped = 0;
    uint64_t ts = 0, clock = 0, seq_id = 0, flags = 0;
    while ((k = next(r, &p, &f, "TracePacket", &rc)) > 0) {
        int wire = -1;
        switch (f.field) {
        case 8:  /* timestamp */
        case 10: /* trusted_packet_sequence_id */
        case 13: /* sequence_flags */
        case 41: /* incremental_state_cleared */
        case 42: /* previous_packet_dropped */
        case 58: /* timestamp_clock_id */
            wire = PB_VARINT;
            break;
        case 6:  /* clock_snapshot */
        case 11: /* track_event */
        case 12: /* interned_data */
        case 59: /* trace_packet_defaults */
        case 60: /* track_descriptor */
        case 66: /* perf_sample */
        case 50: /* compressed_packets */
            wire = PB_LEN;
            break;
        default:
            continue;
        }
        if ((rc = want(r, &f, wire, "TracePacket")) != 0) {
            return rc;
        }
        switch (f.field) {
        case 8:
            ts = f.v;
            has_ts = 1;
            break;
        case 10:
            seq_id = f.v;
            has_id = 1;
            break;
        case 13:
            flags = f.v;
            break;
        case 41:
            cleared = f.v != 0;
            break;
        case 42:
            dropped = f.v != 0;
            break;
        case 58:
            clock = f.v;
            has_clock = 1;
            break;
        case 6:
            clk = f;
            has_clk = 1;
            break;
        case 11:
            te = f;
            has_te = 1;
            break;
        case 12:
            idata = f;
            break;
        case 59:
            defaults = f;
            has_def = 1;
            break;
        case 60:
            desc = f;
            has_desc = 1;
            break;
        case 66:
            perf = f;
            break;
        case 50:
            comp = f;
            has_comp = 1;
            break;
        default:
            break;
        }
    }
    if (k < 0) {
        return rc;
    }
    if (has_comp) {
        /* the packet stands for the packets inside; its other fields are ignored, as
         * trace_processor's tokenizer does (a traced packet has no others) */
        return do_compressed(r, &comp);
    }
    if (flags & 1) {
        cleared = 1;
    }
    if ((flags & 2) && (!has_id || seq_id == 0)) {
        return ferr(r, pf->offset, "SEQ_NEEDS_INCREMENTAL_STATE with sequence id 0", "TracePacket");
    }
    size_t si;
    seq *s = get_seq(r, (uint32_t)seq_id, &si, &rc);
    if (s == NULL) {
        return rc;
    }
    if (dropped) {
        s->valid = 0;
    }
    if (cleared) {
        s->gen++;
        s->valid = 1;
        s->has_clock_default = 0;
        s->has_track_default = 0;
        /* A new generation: nothing interned yet. The tables go (not cleared in place: a file of
         * many clears would then cost their size each time). */
        for (unsigned kd = 1; kd <= 3; kd++) {
            r->dense_budget += s->dense_cap[kd] * sizeof(*s->dense[kd]);
            free(s->dense[kd]);
            s->dense[kd] = NULL;
            s->dense_cap[kd] = 0;
            s->dense_count[kd] = 0;
        }
    }
    if ((flags & 2) && !s->valid) {
        return 0; /* packet_skipped_seq_needs_incremental_state_invalid */
    }
    if (has_clk && (rc = do_clock_snapshot(r, &clk, s)) != 0) {
        return rc;
    }
    if (has_def && s->valid && (rc = do_defaults(r, &defaults, s)) != 0) {
        return rc;
    }
    if (idata.data != NULL && s->valid && (rc = do_interned(r, &idata, si, s)) != 0) {
        return rc;
    }
    if (idata.data != NULL && s->valid && (rc = do_profile_interned(r, &idata, si, s)) != 0) {
        return rc;
    }
    if (has_ts) {
        if (!has_clock && s->has_clock_default) {
            clock = s->clock_default;
        }
        r->last_ts = to_trace_time(s, clock, ts);
    }
    if (has_desc && (rc = do_descriptor(r, &desc)) != 0) {
        return rc;
    }
    if (has_te) {
        return do_track_event(r, &te, r->last_ts, si, s);
    }
    if (perf.data != NULL) {
        return do_perf_sample(r, &perf, r->last_ts, si, s);
    }
    return 0;
}

/* Closes open slices, applies loupe's track metadata and makes times relative. */
static int finish(reader *r) {
    uint64_t base = r->loupe_meta ? r->origin : (r->any_ts ? r->min_ts : 0);
    r->m->origin_unix_ns = r->loupe_meta ? r->origin : 0;
    r->m->unmatched_ends += r->unmatched_meta;
    for (size_t i = 0; i < r->trk_count; i++) {
        track *t = &r->trk[i];
        if (t->thread == SIZE_MAX) {
            continue;
        }
        while (t->depth > 0) {
            loupe_slice *sl = loupe__mb_slice_at(r->mb, t->thread, t->stack[--t->depth]);
            sl->dur_ns = r->max_ts > sl->start_ns ? r->max_ts - sl->start_ns : 0;
            sl->flags |= LOUPE_SLICE_TRUNCATED;
        }
    }
    /* then (a lane's slices are its parent's: all closed before any is rebased) */
    for (size_t i = 0; i < r->trk_count; i++) {
        track *t = &r->trk[i];
        if (t->thread == SIZE_MAX || t->lane_of != 0) {
            continue; /* its slices are its parent's track's: rebased there */
        }
        loupe_model_thread *th = loupe__mb_thread_at(r->mb, t->thread);
        if (t->has_meta) {
            th->kind = t->m_kind == LOUPE_TRACK_GPU     ? LOUPE_TRACK_GPU
                       : t->m_kind == LOUPE_TRACK_ASYNC ? LOUPE_TRACK_ASYNC
                                                        : LOUPE_TRACK_THREAD;
            th->device = (uint32_t)t->m_device;
            th->tid = t->m_tid;
            th->events_recorded = t->m_rec;
            th->events_dropped = t->m_drop;
            th->capacity_needed = t->m_cap;
        }
        for (size_t j = 0; j < th->slice_count; j++) {
            th->slices[j].start_ns =
                th->slices[j].start_ns > base ? th->slices[j].start_ns - base : 0;
        }
        for (size_t j = 0; j < th->instant_count; j++) {
            th->instants[j].ts_ns = th->instants[j].ts_ns > base ? th->instants[j].ts_ns - base : 0;
        }
    }
    for (size_t j = 0; j < r->m->counter_count; j++) {
        loupe_counter_sample *c = &r->m->counters[j];
        c->ts_ns = c->ts_ns > base ? c->ts_ns - base : 0;
    }
    for (size_t j = 0; j < r->m->sample_count; j++) {
        loupe_sample *sm = &r->m->samples[j];
        sm->ts_ns = sm->ts_ns > base ? sm->ts_ns - base : 0;
    }
    if (!r->loupe_meta && r->any_ts) {
        r->m->duration_ns = r->max_ts - r->min_ts;
    }
    return 0;
}

static int read_bytes(const char *name, const uint8_t *buf, size_t n, loupe_model **out);

static void reader_free(reader *r) {
    for (size_t i = 0; i < r->seq_count; i++) {
        for (unsigned kd = 1; kd <= 3; kd++) {
            free(r->seqs[i]->dense[kd]);
        }
        free(r->seqs[i]->more);
        free(r->seqs[i]);
    }
    free(r->seqs);
    free(r->interned.e);
    free(r->tracks.e);
    free(r->flows.e);
    free(r->seqmap.e);
    free(r->prof.e);
    for (size_t i = 0; i < r->trk_count; i++) {
        free(r->trk[i].stack);
    }
    free(r->trk);
    free(r->args);
    free(r->fids);
    free(r->tfids);
    free(r->zbuf);
}

int loupe__perfetto_proto_sniff(const char *text, size_t n) {
    const uint8_t *buf = (const uint8_t *)text;
    size_t window = n < 65536 ? n : 65536;
    loupe__pbr p = {buf, buf + n, buf};
    int packets = 0;
    while (p.p < buf + window) {
        loupe__pbf f = {0};
        size_t off;
        const char *what;
        if (*p.p != 0x0A) {
            return 0;
        }
        if (loupe__pbr_next(&p, &f, &off, &what) != 1) {
            /* a packet that runs past the bytes sniffed: the file goes on (the reader checks
             * the rest), unless it is the first and the file is no longer than what was read */
            return packets > 0 || n >= 65536;
        }
        if (f.data + f.len <= buf + window) {
            loupe__pbr q = {f.data, f.data + f.len, buf};
            loupe__pbf g = {0};
            int k;
            while ((k = loupe__pbr_next(&q, &g, &off, &what)) > 0) {
            }
            if (k < 0) {
                return 0;
            }
        }
        packets++;
    }
    return packets > 0;
}

int loupe__perfetto_proto_read_mem(const char *name, char *text, size_t n, loupe_model **out) {
    int rc = read_bytes(name, (const uint8_t *)text, n, out);
    free(text);
    return rc;
}

/* The packets of a serialized Trace: the file, or an inflated compressed_packets. */
static int read_trace(reader *r, const uint8_t *buf, size_t n) {
    const uint8_t *saved = r->base;
    r->base = buf; /* offsets in errors are into buf */
    loupe__pbr p = {buf, buf + n, buf};
    loupe__pbf f = {0};
    int rc = 0, k;
    while ((k = next(r, &p, &f, "Trace", &rc)) > 0) {
        if (f.field != 1) {
            continue; /* Trace has only field 1, packet; others are skipped as unknown */
        }
        if ((rc = want(r, &f, PB_LEN, "Trace")) != 0) {
            break;
        }
        if ((rc = do_packet(r, &f)) != 0) {
            break;
        }
        if (loupe__mb_failed(r->mb)) {
            rc = oom(r);
            break;
        }
        if (r->depth == 0 && (size_t)(p.p - buf) - r->progress_at >= ((size_t)1 << 20)) {
            r->progress_at = (size_t)(p.p - buf);
            loupe__progress("decoding", r->name, r->progress_at, n);
        }
    }
    r->base = saved;
    return rc;
}

/* The limits on what compressed_packets inflate to, those of a gzipped file in read.c: each
 * chunk at most 64 times its compressed size (at least 64 MiB: DEFLATE expands up to ~1032:1,
 * traces 5 to 50 times, and the writer's chunks hold 512 KiB), all of them together at most
 * 4 GiB; LOUPE_READ_MAX_BYTES, when set, replaces both. */
#define ZRATIO 64
#define ZFLOOR ((uint64_t)64 << 20)

static void zlimits(reader *r) {
    const char *e = getenv("LOUPE_READ_MAX_BYTES");
    char *end;
    unsigned long long v = e != NULL && *e != 0 && *e != '-' ? strtoull(e, &end, 10) : 0;
    r->zmax_env = v != 0 && *end == 0; /* read.c refuses a bad value before any reader runs */
    r->zmax = r->zmax_env ? (uint64_t)v : MAX_FILE;
}

static int zerr(reader *r, const loupe__pbf *cf, const char *what) {
    return loupe__err(LOUPE_EFORMAT,
                      "%s: Perfetto protobuf: offset %zu: compressed_packets (%zu bytes): %s",
                      r->name, cf->offset, cf->len, what);
}

/* TracePacket.compressed_packets (50): a zlib stream of a serialized Trace, inflated into
 * r->zbuf under the limits above and read as the file's own packets; one level only (traced
 * never nests them). Errors name the chunk's offset in the file; errors inside it also name
 * the offset in the inflated bytes. */
static int inflate_chunk(reader *r, const loupe__pbf *cf, int partial, size_t *inflated);

static int do_compressed(reader *r, const loupe__pbf *cf) {
    size_t out = 0;
    int rc = inflate_chunk(r, cf, 0, &out);
    if (rc != 0) {
        return rc;
    }
    char name[512];
    snprintf(name, sizeof name, "%s (compressed_packets at offset %zu, inflated)", r->name,
             cf->offset);
    const char *saved = r->name;
    r->name = name;
    r->depth = 1;
    rc = read_trace(r, r->zbuf, out);
    r->depth = 0;
    r->name = saved;
    return rc;
}

/* Inflates the chunk cf into r->zbuf[0, *inflated). partial: the file ends inside the chunk
 * (read_cut), so a zlib stream that stops early is what is expected, not an error. */
static int inflate_chunk(reader *r, const loupe__pbf *cf, int partial, size_t *inflated) {
    *inflated = 0;
    if (r->depth > 0) {
        return zerr(r, cf, "nested inside another compressed_packets (one level only)");
    }
    uint64_t limit = r->zmax - r->ztotal;
    if (!r->zmax_env) {
        uint64_t ratio = (uint64_t)cf->len * ZRATIO;
        ratio = ratio < ZFLOOR ? ZFLOOR : ratio;
        limit = ratio < limit ? ratio : limit;
    }
    if (cf->len > UINT32_MAX) {
        return zerr(r, cf, "over 4 GiB");
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK) { /* zlib (traced's) or gzip, as trace_processor */
        return oom(r);
    }
    z.next_in = (Bytef *)(uintptr_t)cf->data;
    z.avail_in = (uInt)cf->len;
    size_t out = 0;
    int zr = Z_OK, rc = 0;
    while (rc == 0) {
        if (out == r->zcap) {
            uint64_t nc = r->zcap < ((size_t)1 << 20) ? (uint64_t)1 << 20 : (uint64_t)r->zcap * 2;
            nc = nc > limit + 1 ? limit + 1 : nc; /* one byte over the limit says it is over */
            uint8_t *nb = nc <= SIZE_MAX ? realloc(r->zbuf, (size_t)nc) : NULL;
            if (nb == NULL) {
                rc = oom(r);
                break;
            }
            r->zbuf = nb;
            r->zcap = (size_t)nc;
        }
        size_t room = r->zcap - out;
        z.next_out = r->zbuf + out;
        z.avail_out = room > UINT32_MAX ? UINT32_MAX : (uInt)room;
        uInt before = z.avail_out;
        zr = inflate(&z, Z_NO_FLUSH);
        out += before - z.avail_out;
        if ((uint64_t)out > limit) {
            char what[400];
            snprintf(what, sizeof what,
                     "inflates to more than %llu bytes%s; loupe stops there (a zlib bomb?). "
                     "Set LOUPE_READ_MAX_BYTES to a larger number of bytes to read it",
                     (unsigned long long)limit,
                     r->zmax_env ? ""
                                 : " (64 times its size, at least 64 MiB; at most 4 GiB for all "
                                   "of them)");
            rc = zerr(r, cf, what);
            break;
        }
        if (zr == Z_STREAM_END) {
            if (z.avail_in != 0) {
                rc = zerr(r, cf, "bytes after the end of its zlib stream");
            }
            break;
        }
        if (zr == Z_MEM_ERROR) {
            rc = oom(r);
        } else if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT || zr == Z_STREAM_ERROR) {
            char what[160];
            snprintf(what, sizeof what, "zlib: %s", z.msg != NULL ? z.msg : "invalid data");
            rc = zerr(r, cf, what);
        } else if (z.avail_in == 0 && z.avail_out != 0 && partial) {
            break; /* all the bytes the file holds */
        } else if (z.avail_in == 0 && z.avail_out != 0) {
            char what[120];
            snprintf(what, sizeof what, "the zlib stream is cut short (after %zu bytes inflated)",
                     out);
            rc = zerr(r, cf, what);
        }
    }
    inflateEnd(&z);
    if (rc != 0) {
        return rc;
    }
    r->ztotal += out;
    *inflated = out;
    return 0;
}

/* ---- a file cut short ----
 *
 * A .pftrace cut short (a copy stopped, a disk filled, a program killed while a tracer wrote)
 * ends inside its last top-level field: the tag, the length or the bytes of a TracePacket run
 * past the end. Protobuf has no resynchronisation point, but the top level is a plain sequence
 * of length-delimited packets, so every packet before the cut is whole and is read; and when the
 * cut packet is a compressed_packets chunk (traced and loupe write them: a zlib stream of whole
 * packets), the packets that its bytes inflate to in full are read too. The model says what was
 * lost and where (a warning; loupe summary prints it on stderr and in --json). */

/* The file buf[0, n) is cut inside the top-level field at `at` (whole_prefix), after `before`
 * whole packets: reads what the cut packet's compressed_packets inflate to in whole packets,
 * then sets warn to what was lost. Returns 0 or a LOUPE_E* code (nothing at all to read
 * included). */
static int read_cut(reader *r, const uint8_t *buf, size_t n, size_t at, size_t before, char *warn,
                    size_t warn_cap) {
    size_t end, data;
    uint32_t field;
    uint64_t len;
    (void)loupe__pb_cut_field(buf, n, at, &end, &field, &data, &len);
    /* the cut field of the cut packet: a compressed_packets chunk is worth inflating */
    size_t zat = 0, zdata = n, inner = data;
    uint64_t zlen = 0;
    int chunk = 0;
    while (field == 1 && data < n && inner < n) {
        uint32_t f2;
        int k = loupe__pb_cut_field(buf, n, inner, &end, &f2, &zdata, &zlen);
        if (k == 1) {
            inner = end;
            continue;
        }
        chunk = k == 0 && f2 == 50 && zdata < n; /* TracePacket.compressed_packets */
        zat = inner;
        break;
    }
    size_t inflated = 0, got = 0;
    if (chunk) {
        loupe__pbf cf = {0};
        cf.offset = zat;
        cf.data = buf + zdata;
        cf.len = n - zdata;
        int rc = inflate_chunk(r, &cf, 1, &inflated);
        if (rc != 0) {
            return rc;
        }
        size_t whole = loupe__pb_whole_prefix(r->zbuf, inflated, &got);
        char name[512];
        snprintf(name, sizeof name, "%s (compressed_packets at offset %zu, inflated)", r->name,
                 zat);
        const char *saved = r->name;
        r->name = name;
        r->depth = 1;
        rc = read_trace(r, r->zbuf, whole);
        r->depth = 0;
        r->name = saved;
        if (rc != 0) {
            return rc;
        }
    }
    char where[160];
    if (chunk) {
        snprintf(where, sizeof where,
                 "inside the compressed_packets at offset %zu (%llu bytes "
                 "announced, %zu there)",
                 zat, (unsigned long long)zlen, n - zdata);
    } else if (data < n) {
        snprintf(where, sizeof where,
                 "inside the TracePacket at offset %zu (%llu bytes "
                 "announced, %zu there)",
                 at, (unsigned long long)len, n - data);
    } else {
        snprintf(where, sizeof where, "inside the header of the field at offset %zu", at);
    }
    if (before == 0 && got == 0) {
        return loupe__err(LOUPE_EFORMAT,
                          "%s: Perfetto protobuf: the file is cut short: it ends at byte %zu, %s, "
                          "before any whole packet: nothing to read",
                          r->name, n, where);
    }
    if (chunk) {
        snprintf(warn, warn_cap,
                 "%s: Perfetto protobuf: the file is cut short: it ends at byte %zu, %s: read "
                 "the file before offset %zu (top-level packets: %zu) and the chunk's first %zu "
                 "inflated bytes (whole packets: %zu); the rest of the file is lost",
                 r->name, n, where, at, before, inflated, got);
    } else {
        snprintf(warn, warn_cap,
                 "%s: Perfetto protobuf: the file is cut short: it ends at byte %zu, %s: read "
                 "the file before offset %zu (top-level packets: %zu); the rest of the file is "
                 "lost",
                 r->name, n, where, at, before);
    }
    return 0;
}

static int read_bytes(const char *name, const uint8_t *buf, size_t n, loupe_model **out) {
    *out = NULL;
    reader r;
    memset(&r, 0, sizeof r);
    r.name = name;
    r.base = buf;
    r.dense_budget = n < ((size_t)8 << 20) ? (size_t)64 << 20 : 8 * n;
    r.min_ts = UINT64_MAX;
    if (n == 0) {
        return loupe__err(LOUPE_EFORMAT, "%s: empty file (not a Perfetto protobuf trace)", name);
    }
    if (buf[0] != 0x0A) {
        return loupe__err(LOUPE_EFORMAT,
                          "%s: offset 0: first byte 0x%02X, not a Perfetto protobuf trace (a "
                          "Trace starts with 0x0A, field 1 TracePacket)",
                          name, buf[0]);
    }
    r.mb = loupe__mb_new();
    if (r.mb == NULL) {
        return oom(&r);
    }
    r.m = loupe__mb_model(r.mb);
    zlimits(&r);
    size_t before;
    size_t whole = loupe__pb_whole_prefix(buf, n, &before);
    char warn[1024] = "";
    int rc = read_trace(&r, buf, whole);
    if (rc == 0 && whole < n) {
        rc = read_cut(&r, buf, n, whole, before, warn, sizeof warn);
    }
    if (rc == 0) {
        rc = finish(&r);
    }
    reader_free(&r);
    if (rc != 0) {
        loupe__mb_abort(r.mb);
        return rc;
    }
    *out = loupe__mb_finish(r.mb);
    if (*out == NULL) {
        return loupe__err(LOUPE_ENOMEM, "%s: out of memory reading the Perfetto trace", name);
    }
    if (warn[0] != 0 && (rc = loupe__model_warn(*out, "%s", warn)) != 0) {
        loupe_model_free(*out);
        *out = NULL;
        return rc;
    }
    return 0;
}

int loupe__perfetto_proto_read_file(const char *path, loupe_model **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        return loupe__err(LOUPE_EIO, "%s: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return loupe__err(LOUPE_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > MAX_FILE) {
        fclose(f);
        return loupe__err(LOUPE_EFORMAT, "%s: %llu bytes; loupe reads traces of at most 4 GiB",
                          path, (unsigned long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        fclose(f);
        return loupe__err(LOUPE_ENOMEM, "%s: cannot allocate %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int e = ferror(f) ? errno : 0;
    fclose(f);
    if (got != n) {
        free(buf);
        return loupe__err(LOUPE_EIO, "%s: short read (%zu of %zu bytes): %s", path, got, n,
                          e ? strerror(e) : "file changed");
    }
    return loupe__perfetto_proto_read_mem(path, (char *)buf, n, out);
}

/* ---- CPU samples (the packets perfetto_samples.c writes; Perfetto's traced_perf's) ----
 *
 * InternedData function_names (5) and mapping_paths (17) are InternedString {iid 1, str 2};
 * mappings (19) {iid 1, path_string_ids 7: joined with a '/' before each, as trace_processor
 * does}; frames (6) {iid 1, function_name_id 2, mapping_id 3, rel_pc 4}; callstacks (7)
 * {iid 1, frame_ids 2, outermost first}. Read in that order whatever the order in the message
 * (a callstack may use a frame of the same packet). PerfSample (TracePacket 66): cpu 1, pid 2,
 * tid 3, callstack_iid 4; its thread is the thread track with that (pid, tid) (sample_track();
 * else a thread of that pid's process). A frame, mapping or callstack iid that was never defined is
 * a stack cut there, counted in one warning. loupe's "loupe_samples" instant restores period,
 * losses, the frames' file/line/inlined and the off-CPU intervals. */

enum { PK_FUNC = 5, PK_FRAME = 6, PK_STACK = 7, PK_PATH = 17, PK_MAPPING = 19, PK_EXTRA = 100 };

typedef struct fextra {
    const char *file, *module;
    uint32_t line, inlined;
} fextra;

static uint64_t pkey(size_t si, const seq *s, unsigned kind) {
    return ((uint64_t)si << 40) | ((uint64_t)s->gen << 8) | kind;
}

static mentry *pget(reader *r, size_t si, const seq *s, unsigned kind, uint64_t iid) {
    mentry *e = map_find(&r->prof, iid, pkey(si, s, kind));
    return e != NULL && e->live ? e : NULL;
}

/* Scans an interned message {iid 1, ...}: fills iid, a string field 2 (as str) and the repeated
 * varint field rep (into r->fids) and the scalars 2, 3, 4 (into v[2..4]). */
static int prof_entry(reader *r, const loupe__pbf *f, uint64_t *iid, uint64_t v[5], const char **s2,
                      uint32_t rep, size_t *nrep) {
    loupe__pbr q = sub(r, f);
    loupe__pbf g = {0};
    int rc = 0, k;
    size_t cap = 0;
    *iid = 0;
    *nrep = 0;
    while ((k = next(r, &q, &g, "interned profile entry", &rc)) > 0) {
        if (g.field == rep && rep != 0) {
            if ((rc = want(r, &g, PB_VARINT, "interned profile entry")) != 0) {
                return rc;
            }
            cap = r->fid_cap;
            if (push_id(r, &r->fids, &cap, nrep, g.v) != 0) {
                return LOUPE_ENOMEM;
            }
            r->fid_cap = cap;
        } else if (g.field == 2 && s2 != NULL) {
            if ((rc = want(r, &g, PB_LEN, "interned profile entry")) != 0) {
                return rc;
            }
            *s2 = str(r, &g);
        } else if (g.field >= 1 && g.field <= 4) {
            if ((rc = want(r, &g, PB_VARINT, "interned profile entry")) != 0) {
                return rc;
            }
            if (g.field == 1) {
                *iid = g.v;
            } else {
                v[g.field] = g.v;
            }
        }
    }
    if (k < 0) {
        return rc;
    }
    return *iid == 0 ? ferr(r, f->offset, "interned entry without an iid", "InternedData") : 0;
}

static int do_profile_interned(reader *r, const loupe__pbf *idf, size_t si, const seq *s) {
    static const unsigned order[] = {PK_FUNC, PK_PATH, PK_MAPPING, PK_FRAME, PK_STACK};
    int rc = 0, k;
    for (size_t pass = 0; pass < sizeof order / sizeof order[0]; pass++) {
        loupe__pbr p = sub(r, idf);
        loupe__pbf f = {0};
        while ((k = next(r, &p, &f, "InternedData", &rc)) > 0) {
            if (f.field != order[pass]) {
                continue;
            }
            if ((rc = want(r, &f, PB_LEN, "InternedData")) != 0) {
                return rc;
            }
            uint64_t iid, v[5] = {0, 0, 0, 0, 0};
            const char *s2 = NULL;
            size_t nrep = 0;
            unsigned kind = order[pass];
            uint32_t rep = kind == PK_MAPPING ? 7 : kind == PK_STACK ? 2 : 0;
            int str2 = kind == PK_FUNC || kind == PK_PATH;
            if ((rc = prof_entry(r, &f, &iid, v, str2 ? &s2 : NULL, rep, &nrep)) != 0) {
                return rc;
            }
            mentry *e = map_put(&r->prof, iid, pkey(si, s, kind));
            if (e == NULL) {
                return oom(r);
            }
            if (e->live) {
                continue; /* the first definition wins */
            }
            e->live = 1;
            if (str2) {
                e->v1 = (uint64_t)(uintptr_t)(s2 != NULL ? s2 : "");
            } else if (kind == PK_MAPPING) {
                size_t len = 0;
                for (size_t i = 0; i < nrep; i++) {
                    mentry *c = pget(r, si, s, PK_PATH, r->fids[i]);
                    len += 1 + (c != NULL ? strlen((const char *)(uintptr_t)c->v1) : 0);
                }
                char *path = loupe__mb_alloc(r->mb, len + 1);
                if (path == NULL) {
                    return oom(r);
                }
                len = 0;
                for (size_t i = 0; i < nrep; i++) {
                    mentry *c = pget(r, si, s, PK_PATH, r->fids[i]);
                    const char *comp = c != NULL ? (const char *)(uintptr_t)c->v1 : "";
                    path[len++] = '/';
                    memcpy(path + len, comp, strlen(comp));
                    len += strlen(comp);
                }
                path[len] = 0;
                e->v1 = (uint64_t)(uintptr_t)loupe__mb_str(r->mb, path);
            } else if (kind == PK_FRAME) {
                mentry *fn = v[2] != 0 ? pget(r, si, s, PK_FUNC, v[2]) : NULL;
                mentry *mp = v[3] != 0 ? pget(r, si, s, PK_MAPPING, v[3]) : NULL;
                mentry *ex = pget(r, si, s, PK_EXTRA, iid);
                const fextra *x = ex != NULL ? (const fextra *)(uintptr_t)ex->v1 : NULL;
                loupe_frame fr = {fn != NULL ? (const char *)(uintptr_t)fn->v1 : "",
                                  x != NULL ? x->file : "",
                                  x != NULL ? x->line : 0,
                                  x != NULL ? x->inlined : 0,
                                  mp != NULL ? (const char *)(uintptr_t)mp->v1 : "",
                                  v[4]};
                if (x != NULL && x->module != NULL) {
                    fr.module = x->module;
                }
                uint32_t idx = loupe__mb_frame(r->mb, &fr);
                if (idx == UINT32_MAX) {
                    return oom(r);
                }
                e->v1 = idx;
            } else { /* PK_STACK */
                uint32_t node = UINT32_MAX;
                for (size_t i = 0; i < nrep; i++) {
                    mentry *fe = pget(r, si, s, PK_FRAME, r->fids[i]);
                    if (fe == NULL) {
                        continue; /* an undefined frame: skipped, the stack goes on */
                    }
                    uint32_t n = loupe__mb_stack(r->mb, node, (uint32_t)fe->v1);
                    if (n == UINT32_MAX) {
                        return oom(r);
                    }
                    node = n;
                }
                e->v1 = node;
            }
        }
        if (k < 0) {
            return rc;
        }
    }
    return 0;
}

/* The thread of a sample of (pid, tid): the thread track with that tid whose ThreadDescriptor
 * has that pid, else one with that tid and no pid (or any, when the sample has no pid: 0);
 * never another process's thread that shares the tid. SIZE_MAX when none (*rc 0) or on OOM. */
static size_t sample_track(reader *r, uint64_t pid, uint64_t tid, int *rc) {
    track *loose = NULL;
    for (size_t i = 0; i < r->trk_count; i++) {
        track *t = &r->trk[i];
        if (t->kind != TK_THREAD || t->tid != tid) {
            continue;
        }
        if (pid != 0 && t->has_pid && t->pid == pid) {
            return track_thread(r, t, rc);
        }
        if (loose == NULL && (pid == 0 || !t->has_pid)) {
            loose = t;
        }
    }
    return loose != NULL ? track_thread(r, loose, rc) : SIZE_MAX;
}

static int do_perf_sample(reader *r, const loupe__pbf *pf, uint64_t ts, size_t si, const seq *s) {
    loupe__pbr p = sub(r, pf);
    loupe__pbf f = {0};
    int rc = 0, k;
    uint64_t v[5] = {0, 0, 0, 0, 0};
    int has_cpu = 0;
    while ((k = next(r, &p, &f, "PerfSample", &rc)) > 0) {
        if (f.field < 1 || f.field > 4) {
            continue;
        }
        if ((rc = want(r, &f, PB_VARINT, "PerfSample")) != 0) {
            return rc;
        }
        v[f.field] = f.v;
        has_cpu |= f.field == 1;
    }
    if (k < 0) {
        return rc;
    }
    size_t th = sample_track(r, v[2], v[3], &rc);
    if (rc != 0) {
        return rc;
    }
    if (th == SIZE_MAX) {
        size_t proc = loupe__mb_process(r->mb, v[2]);
        th = proc == SIZE_MAX ? SIZE_MAX : loupe__mb_thread_in(r->mb, proc, v[3]);
        if (th == SIZE_MAX) {
            return oom(r);
        }
    }
    uint32_t stack = UINT32_MAX;
    if (v[4] != 0) {
        mentry *e = pget(r, si, s, PK_STACK, v[4]);
        if (e != NULL) {
            stack = (uint32_t)e->v1;
        } else if (loupe__mb_warn(r->mb,
                                  "%s: Perfetto protobuf: offset %zu: PerfSample callstack_iid "
                                  "%llu was never defined on its sequence; the sample is kept "
                                  "without a stack",
                                  r->name, pf->offset, (unsigned long long)v[4]) != 0) {
            return oom(r);
        }
    }
    r->any_ts = 1;
    if (ts < r->min_ts) {
        r->min_ts = ts;
    }
    if (ts > r->max_ts) {
        r->max_ts = ts;
    }
    if (loupe__mb_sample(r->mb, th, ts, stack, has_cpu ? (uint32_t)v[1] : UINT32_MAX) != 0) {
        return oom(r);
    }
    return 0;
}

/* Calls fn on each dict entry of annotation af (a DebugAnnotation with dict_entries). */
static int each_entry(reader *r, const loupe__pbf *af, size_t si, const seq *s,
                      int (*fn)(reader *r, const loupe__pbf *ef, const loupe_arg *a, size_t si,
                                const seq *s, void *ctx),
                      void *ctx) {
    loupe__pbr q = sub(r, af);
    loupe__pbf g = {0};
    int rc = 0, k;
    while ((k = next(r, &q, &g, "DebugAnnotation", &rc)) > 0) {
        if (g.field != 11) {
            continue;
        }
        loupe_arg a;
        loupe__pbf d;
        if (annotation(r, &g, si, s, &a, &d, &rc) < 0) {
            return rc;
        }
        if ((rc = fn(r, &g, &a, si, s, ctx)) != 0) {
            return rc;
        }
    }
    return k < 0 ? rc : 0;
}

static int extra_field(reader *r, const loupe__pbf *ef, const loupe_arg *a, size_t si, const seq *s,
                       void *ctx) {
    (void)ef, (void)si, (void)s, (void)r;
    fextra *x = ctx;
    if (strcmp(a->key, "file") == 0 && a->type == LOUPE_ARG_STRING) {
        x->file = a->v.s;
    } else if (strcmp(a->key, "module") == 0 && a->type == LOUPE_ARG_STRING) {
        x->module = a->v.s;
    } else if (strcmp(a->key, "line") == 0 && a->type == LOUPE_ARG_UINT64) {
        x->line = (uint32_t)a->v.u;
    } else if (strcmp(a->key, "inlined") == 0 && a->type == LOUPE_ARG_UINT64) {
        x->inlined = (uint32_t)a->v.u;
    }
    return 0;
}

static int decimal(const char *k, uint64_t *out) {
    char *endp;
    errno = 0;
    unsigned long long v = strtoull(k, &endp, 10);
    *out = v;
    return k[0] != 0 && *endp == 0 && errno == 0;
}

static int frame_extra(reader *r, const loupe__pbf *ef, const loupe_arg *a, size_t si, const seq *s,
                       void *ctx) {
    (void)ctx;
    uint64_t iid;
    if (!decimal(a->key, &iid)) {
        return 0;
    }
    fextra *x = loupe__mb_alloc(r->mb, sizeof(*x));
    mentry *e = x != NULL ? map_put(&r->prof, iid, pkey(si, s, PK_EXTRA)) : NULL;
    if (e == NULL) {
        return oom(r);
    }
    x->file = "";
    int rc = each_entry(r, ef, si, s, extra_field, x);
    if (rc == 0 && !e->live) {
        e->live = 1;
        e->v1 = (uint64_t)(uintptr_t)x;
    }
    return rc;
}

/* ctx of off_cpu_interval: the thread and the kind its dict names */
typedef struct off_ctx {
    size_t thread;
    unsigned kind;
} off_ctx;

static int off_cpu_interval(reader *r, const loupe__pbf *ef, const loupe_arg *a, size_t si,
                            const seq *s, void *ctx) {
    (void)ef, (void)si, (void)s;
    uint64_t start;
    if (!decimal(a->key, &start) || a->type != LOUPE_ARG_UINT64) {
        return 0;
    }
    const off_ctx *oc = ctx;
    return loupe__mb_off_cpu_kind(r->mb, oc->thread, start, a->v.u, oc->kind) != 0 ? oom(r) : 0;
}

/* ctx: the kind (a loupe_off_cpu_kind) of the dict: "off_cpu", "off_cpu_waiting" or
 * "off_cpu_preempted" (src/export/perfetto_samples.c) */
static int off_cpu_track(reader *r, const loupe__pbf *ef, const loupe_arg *a, size_t si,
                         const seq *s, void *ctx) {
    uint64_t uuid;
    int rc = 0;
    if (!decimal(a->key, &uuid)) {
        return 0;
    }
    track *t = get_track(r, uuid, &rc);
    size_t th = t != NULL ? track_thread(r, t, &rc) : SIZE_MAX;
    if (th == SIZE_MAX) {
        return rc;
    }
    off_ctx oc = {th, *(const unsigned *)ctx};
    return each_entry(r, ef, si, s, off_cpu_interval, &oc);
}

static int samples_field(reader *r, const loupe__pbf *ef, const loupe_arg *a, size_t si,
                         const seq *s, void *ctx) {
    (void)ef, (void)si, (void)s, (void)ctx;
    if (a->type == LOUPE_ARG_UINT64 && strcmp(a->key, "period_ns") == 0) {
        r->m->sample_period_ns = a->v.u;
    } else if (a->type == LOUPE_ARG_UINT64 && strcmp(a->key, "lost") == 0) {
        r->m->samples_lost = a->v.u;
    }
    return 0;
}

static int do_samples_meta(reader *r, const loupe__pbf *events, size_t nev, size_t si,
                           const seq *s) {
    int rc = 0;
    unsigned kinds[3] = {LOUPE_OFF_CPU_UNKNOWN, LOUPE_OFF_CPU_WAITING, LOUPE_OFF_CPU_PREEMPTED};
    for (size_t e = 0; e < nev && rc == 0; e++) {
        loupe_arg top;
        loupe__pbf dict = {0};
        if (annotation(r, &events[e], si, s, &top, &dict, &rc) < 0) {
            return rc;
        }
        if (strcmp(top.key, "samples") == 0) {
            rc = each_entry(r, &events[e], si, s, samples_field, NULL);
        } else if (strcmp(top.key, "frames") == 0) {
            rc = each_entry(r, &events[e], si, s, frame_extra, NULL);
        } else if (strcmp(top.key, "off_cpu") == 0) {
            rc = each_entry(r, &events[e], si, s, off_cpu_track, &kinds[0]);
        } else if (strcmp(top.key, "off_cpu_waiting") == 0) {
            rc = each_entry(r, &events[e], si, s, off_cpu_track, &kinds[1]);
        } else if (strcmp(top.key, "off_cpu_preempted") == 0) {
            rc = each_entry(r, &events[e], si, s, off_cpu_track, &kinds[2]);
        }
    }
    return rc;
}
