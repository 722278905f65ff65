/* perfetto_proto.c: the Perfetto native protobuf writer (<host>.pftrace), hand-encoded (no SDK).
 *
 * Field numbers: google/perfetto protos/perfetto/trace/{trace,trace_packet}.proto,
 * track_event/{track_event,track_descriptor,debug_annotation,process_descriptor,
 * thread_descriptor,counter_descriptor}.proto, interned_data/interned_data.proto,
 * clock_snapshot.proto, trace_packet_defaults.proto (google/perfetto protos/perfetto/trace/);
 * proto/perfetto_trace.proto is loupe's subset of them.
 *
 * The stream (Perfetto's trace_processor, src/trace_processor/importers/proto/, reads it; its
 * sequence rules are proto_trace_reader.cc's). One packet sequence (trusted_packet_sequence_id)
 * for the descriptors, the metadata and the counters (1), one for the CPU samples (2), and one
 * per writer track (SEQ_TRACK0 + v: each model track, each lane of an async track), as the
 * Perfetto SDK gives each thread its own sequence, so that the sequence implies what its events
 * leave out:
 *   1. Sequence 1: flags=CLEARED, ClockSnapshot {REALTIME = origin_unix_ns (when known),
 *      BOOTTIME = B, clock 64 = B is_incremental}, where B = origin_unix_ns (0 when unknown).
 *   2. TrackDescriptors (sequence 1, timestamp B on the trace clock): the processes (uuid 1 for
 *      processes[0], then after the counters'; pid, cmdline as one element, name), each model
 *      track (uuid 2 + index: a thread track, or for GPU and async tracks a named child of its
 *      process), each counter track (2 + thread_count + k: one per (process, name), under that
 *      process), each async lane (after the processes': a child of its async track, the way the
 *      SDK's async tracks nest in Perfetto's UI).
 *   3. Each writer track's sequence: flags=CLEARED, trace_packet_defaults {timestamp_clock_id
 *      64, track_event_defaults {track_uuid}} and its ClockSnapshot (clock 64 is sequence-scoped).
 *   4. Sequence 1: flags=NEEDS, trace_packet_defaults {timestamp_clock_id 64}, an INSTANT
 *      "loupe_metadata" (category "loupe") on the process track with dict debug annotations
 *      "loupe" (version, host, clock, tsc_ghz, origin_unix_ns, duration_ns, unmatched_ends, pid),
 *      "tracks" (per track uuid: kind, device, tid, events_recorded, events_dropped,
 *      capacity_needed), "processes" (per process uuid: host, label, parent_pid, rank) and
 *      "metadata" (the model's key/value pairs): what the model holds that Perfetto has no field
 *      for, so that the reader gives back the same model.
 *   5. Every event in global time order (a heap merges the writer tracks and the counters), each
 *      its own packet on its track's sequence: timestamp = the delta (ns) since the sequence's
 *      previous packet on clock 64 (incremental clock: "each TracePacket's timestamp is a delta
 *      from the last one referencing this clock on the sequence", clock_snapshot.proto), the
 *      sequence id, flags=NEEDS on the sequence's first event packet only, new names interned
 *      in the same packet, and a TrackEvent without track_uuid (the default). A slice is a
 *      SLICE_BEGIN (name, category, args, flows) and a SLICE_END (nothing else, or the
 *      annotation "loupe_flags" when the slice has LOUPE_SLICE_* flags); on a model track the
 *      END order follows the model's depths, so each END closes the BEGIN it belongs to; a lane's
 *      slices do not overlap. Counters are on sequence 1 with their track_uuid. A packet whose
 *      time would go backwards on its sequence (a model whose slices do not nest) carries an
 *      absolute timestamp with timestamp_clock_id 6 (BOOTTIME) instead and leaves the
 *      incremental clock alone.
 *   6. CPU samples, frames, stacks and off-CPU intervals, when the model has them: Perfetto's
 *      profiler packets (PerfSample, interned frames/mappings/callstacks) on sequence 2, written
 *      by perfetto_samples.c.
 *
 * Interning: event names, categories and annotation names, one iid per string for the whole
 * file (from 1 per kind), defined on each sequence in the packet that first uses it there (a bit
 * per iid and sequence says so); after 2^18 strings of a kind, new strings are written inline
 * (TrackEvent.name / categories / DebugAnnotation.name), which bounds the table.
 * Memory: the packet buffers (the largest packet), the intern tables (bounded), per writer track
 * a stack (its depth) and its defined-iid bits (at most 2^18 / 8 bytes per kind), an index of
 * the async tracks' slices by lane (one entry per async slice) and of the flows' ends (one per
 * end): nothing per event of a thread track.
 * Flows: the source slice's BEGIN carries flow_ids (field 47), the destination's BEGIN
 * terminating_flow_ids (48), both fixed64, one tag per id (Perfetto's track_event.proto; its
 * decoder reads these unpacked).
 * Compression (the default; LOUPE_PERFETTO_COMPRESS=0 turns it off): the whole stream above,
 * samples included, goes out in TracePacket.compressed_packets chunks of about 512 KiB of
 * packets (see "compressed_packets" near the end of this file).
 */
#include "base/error.h"
#include "base/hash.h"
#include "base/pb.h"
#include "base/perfetto.h"
#include "export/writers.h"

#include <assert.h>
#include <errno.h>
#include <loupe/loupe.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SEQ_MAIN 1       /* descriptors, metadata, counters (trusted_packet_sequence_id) */
#define SEQ_TRACK0 3     /* the sequence of writer track v is SEQ_TRACK0 + v (2: the samples') */
#define CLOCK_BOOTTIME 6 /* BuiltinClock BOOTTIME */
#define CLOCK_REALTIME 1 /* BuiltinClock REALTIME */
#define CLOCK_DELTA 64   /* a sequence-scoped custom clock (64..127), incremental */
#define SEQ_CLEARED 1    /* SequenceFlags SEQ_INCREMENTAL_STATE_CLEARED */
#define SEQ_NEEDS 2      /* SequenceFlags SEQ_NEEDS_INCREMENTAL_STATE */
#define INTERN_MAX (1u << 18)

/* TracePacket fields (trace_packet.proto) */
enum {
    TP_CLOCK_SNAPSHOT = 6,   /* ClockSnapshot */
    TP_TIMESTAMP = 8,        /* uint64 */
    TP_SEQ_ID = 10,          /* uint32 trusted_packet_sequence_id */
    TP_TRACK_EVENT = 11,     /* TrackEvent */
    TP_INTERNED_DATA = 12,   /* InternedData */
    TP_SEQ_FLAGS = 13,       /* uint32 sequence_flags */
    TP_CLOCK_ID = 58,        /* uint32 timestamp_clock_id */
    TP_DEFAULTS = 59,        /* TracePacketDefaults */
    TP_TRACK_DESCRIPTOR = 60 /* TrackDescriptor */
};

/* TrackEvent fields (track_event.proto) */
enum {
    TE_CATEGORY_IIDS = 3,        /* repeated uint64, unpacked */
    TE_DEBUG_ANNOTATIONS = 4,    /* repeated DebugAnnotation */
    TE_TYPE = 9,                 /* enum Type */
    TE_NAME_IID = 10,            /* uint64 */
    TE_TRACK_UUID = 11,          /* uint64 */
    TE_CATEGORIES = 22,          /* repeated string */
    TE_NAME = 23,                /* string */
    TE_COUNTER_VALUE = 30,       /* int64 */
    TE_DOUBLE_COUNTER = 44,      /* double */
    TE_FLOW_IDS = 47,            /* repeated fixed64, unpacked */
    TE_TERMINATING_FLOW_IDS = 48 /* repeated fixed64, unpacked */
};
enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2, TYPE_INSTANT = 3, TYPE_COUNTER = 4 };

/* DebugAnnotation fields (debug_annotation.proto) */
enum {
    DA_NAME_IID = 1,
    DA_BOOL = 2,
    DA_UINT = 3,
    DA_INT = 4,
    DA_DOUBLE = 5,
    DA_STRING = 6,
    DA_NAME = 10,
    DA_DICT_ENTRIES = 11
};

/* InternedData fields (interned_data.proto); each entry is {iid 1, name 2}. */
enum { IN_CATEGORIES = 1, IN_NAMES = 2, IN_ANNOTATION_NAMES = 3, IN_KINDS = 3 };

typedef struct ientry {
    const char *s;
    uint64_t hash, iid;
} ientry;

typedef struct itab {
    ientry *e;
    size_t cap, count;
} itab;

/* A packet sequence's incremental state as the writer left it. */
typedef struct seqst {
    uint32_t id;
    int needs_done;              /* SEQ_NEEDS written (on its first event packet) */
    uint64_t last;               /* model time of its last packet on clock 64 */
    uint8_t *def[IN_KINDS + 1];  /* a bit per global iid: defined on this sequence */
    size_t defcap[IN_KINDS + 1]; /* bytes */
} seqst;

/* A writer track: a model track, or one lane of an async track (its own Perfetto track, a
 * child of the async track's), with its own sequence while there are few enough of them (see
 * put_sequences). */
typedef struct vtrack {
    size_t thread;
    int is_lane;
    size_t si, end; /* next slice and end: indices into the track's slices, or a lane's range of
                     * w->lidx */
    size_t ii;      /* next instant (lane 0 and plain tracks only) */
    size_t *stack;  /* open slices (indices into the track's slices) */
    size_t depth, cap;
    size_t fi, fend; /* this track's range of flow ends */
    seqst *q;        /* its sequence: w->tseq[v % w->tseq_count] */
    uint64_t uuid;   /* its events' track_uuid: 0 when it is its sequence's default track */
} vtrack;

typedef struct flow_end {
    size_t vt, slice;
    int role; /* 0: destination (terminating_flow_ids), 1: source (flow_ids) */
    uint64_t id;
} flow_end;

/* A counter track: (process, name). */
typedef struct centry {
    const char *name;
    size_t process;
    uint64_t hash;
    size_t k1; /* index + 1 */
} centry;

/* A direct-mapped cache of string pointer -> iid in front of the hash table: the model's strings
 * are interned (equal strings share a pointer), so most events skip hashing their name. */
#define PCACHE 256
typedef struct pcache {
    const char *s;
    uint64_t iid;
} pcache;

typedef struct writer {
    const loupe_model *m;
    pcache pc[IN_KINDS + 1][PCACHE];
    char scratch[32]; /* a formatted key (written inline: the intern tables keep pointers) */
    loupe__sink *s;
    loupe__pb pkt, ev, in; /* the packet, its TrackEvent, its InternedData */
    itab tabs[IN_KINDS + 1];
    uint64_t base; /* B: the BOOTTIME and clock-64 value of model time 0 */
    seqst main;    /* sequence 1 */
    seqst *q;      /* the sequence of the packet being built */
    vtrack *vt;
    size_t vt_count;
    seqst *tseq; /* the writer tracks' sequences, SEQ_TRACK0 + i */
    size_t tseq_count;
    size_t *vt_base; /* per model track: its first writer track */
    size_t *lidx;    /* async tracks' slice indices, by (track, lane, index) */
    flow_end *fe;
    size_t fe_count;
    const char **cnames; /* counter tracks' names and processes, by k */
    size_t *cproc;
    size_t cname_count;
    centry *ctab;
    size_t ctab_cap;
    size_t ci; /* next counter sample */
    int oom;
} writer;

/* Looks s up; when missing and add is set, adds it with value *val (when the table has room).
 * Returns the value, or 0 when missing (and not added). */
static uint64_t itab_get(writer *w, itab *t, const char *s, int add, uint64_t val, int *added) {
    *added = 0;
    uint64_t h = loupe__hash_str(s);
    if (t->cap > 0) {
        for (size_t j = h & (t->cap - 1);; j = (j + 1) & (t->cap - 1)) {
            ientry *e = &t->e[j];
            if (e->s == NULL) {
                break;
            }
            if (e->hash == h && (e->s == s || strcmp(e->s, s) == 0)) {
                return e->iid;
            }
        }
    }
    if (!add || t->count >= INTERN_MAX) {
        return 0;
    }
    if ((t->count + 1) * 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 256;
        ientry *ne = calloc(nc, sizeof(*ne));
        if (ne == NULL) {
            w->oom = 1;
            return 0;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (t->e[i].s != NULL) {
                size_t j = t->e[i].hash & (nc - 1);
                while (ne[j].s != NULL) {
                    j = (j + 1) & (nc - 1);
                }
                ne[j] = t->e[i];
            }
        }
        free(t->e);
        t->e = ne;
        t->cap = nc;
    }
    size_t j = h & (t->cap - 1);
    while (t->e[j].s != NULL) {
        j = (j + 1) & (t->cap - 1);
    }
    t->e[j] = (ientry){s, h, val};
    t->count++;
    *added = 1;
    return val;
}

/* The iid of s in interned-data field kind (global iids, from 1 per kind), defining it in this
 * packet's InternedData when the packet's sequence has not had it yet (interned data is
 * per sequence); 0 when the table is full (the caller writes the string inline). */
static uint64_t intern(writer *w, int kind, const char *s) {
    pcache *pc = &w->pc[kind][((uintptr_t)s >> 3) & (PCACHE - 1)];
    uint64_t iid;
    if (pc->s == s) {
        iid = pc->iid;
    } else {
        itab *t = &w->tabs[kind];
        int added;
        iid = itab_get(w, t, s, 1, t->count + 1, &added);
        if (iid == 0) {
            return 0;
        }
        pc->s = s;
        pc->iid = iid;
    }
    seqst *q = w->q;
    size_t byte = (size_t)(iid >> 3);
    if (byte >= q->defcap[kind]) {
        size_t nc = q->defcap[kind] ? q->defcap[kind] : 16;
        while (nc <= byte) {
            nc *= 2;
        }
        uint8_t *nd = realloc(q->def[kind], nc);
        if (nd == NULL) {
            w->oom = 1;
            return 0;
        }
        memset(nd + q->defcap[kind], 0, nc - q->defcap[kind]);
        q->def[kind] = nd;
        q->defcap[kind] = nc;
    }
    uint8_t bit = (uint8_t)(1u << (iid & 7));
    if ((q->def[kind][byte] & bit) == 0) {
        q->def[kind][byte] |= bit;
        size_t mk = loupe__pb_begin(&w->in, (uint32_t)kind);
        loupe__pb_uint(&w->in, 1, iid); /* field 1, EventName/EventCategory/...Name.iid */
        loupe__pb_str(&w->in, 2, s);    /* field 2, .name */
        loupe__pb_end(&w->in, mk);
    }
    return iid;
}

/* DebugAnnotation name: name_iid (field 1) or, past the intern limit, name (field 10). */
static void ann_name(writer *w, loupe__pb *b, const char *name) {
    uint64_t iid = intern(w, IN_ANNOTATION_NAMES, name);
    if (iid != 0) {
        loupe__pb_uint(b, DA_NAME_IID, iid);
    } else {
        loupe__pb_str(b, DA_NAME, name);
    }
}

static void ann_u64(writer *w, loupe__pb *b, uint32_t field, const char *name, uint64_t v) {
    size_t mk = loupe__pb_begin(b, field);
    ann_name(w, b, name);
    loupe__pb_uint(b, DA_UINT, v);
    loupe__pb_end(b, mk);
}

static void ann_i64(writer *w, loupe__pb *b, uint32_t field, const char *name, int64_t v) {
    size_t mk = loupe__pb_begin(b, field);
    ann_name(w, b, name);
    loupe__pb_int(b, DA_INT, v);
    loupe__pb_end(b, mk);
}

static void ann_str(writer *w, loupe__pb *b, uint32_t field, const char *name, const char *v) {
    size_t mk = loupe__pb_begin(b, field);
    ann_name(w, b, name);
    loupe__pb_str(b, DA_STRING, v);
    loupe__pb_end(b, mk);
}

static void put_args(writer *w, const loupe_arg *args, size_t n) {
    for (uint32_t i = 0; i < n; i++) {
        const loupe_arg *a = &args[i];
        size_t mk = loupe__pb_begin(&w->ev, TE_DEBUG_ANNOTATIONS);
        ann_name(w, &w->ev, a->key);
        switch (a->type) {
        case LOUPE_ARG_INT64:
            loupe__pb_int(&w->ev, DA_INT, a->v.i); /* field 4, int64 */
            break;
        case LOUPE_ARG_UINT64:
            loupe__pb_uint(&w->ev, DA_UINT, a->v.u); /* field 3, uint64 */
            break;
        case LOUPE_ARG_DOUBLE:
            loupe__pb_double(&w->ev, DA_DOUBLE, a->v.d); /* field 5, double */
            break;
        case LOUPE_ARG_BOOL:
            loupe__pb_uint(&w->ev, DA_BOOL, a->v.b ? 1 : 0); /* field 2, bool */
            break;
        case LOUPE_ARG_STRING:
        default:
            loupe__pb_str(&w->ev, DA_STRING, a->type == LOUPE_ARG_STRING ? a->v.s : "");
            break;
        }
        loupe__pb_end(&w->ev, mk);
    }
}

static void put_name(writer *w, const char *name) {
    uint64_t iid = intern(w, IN_NAMES, name);
    if (iid != 0) {
        loupe__pb_uint(&w->ev, TE_NAME_IID, iid);
    } else {
        loupe__pb_str(&w->ev, TE_NAME, name);
    }
}

static void put_category(writer *w, const char *cat) {
    if (cat == NULL || cat[0] == 0) {
        return;
    }
    uint64_t iid = intern(w, IN_CATEGORIES, cat);
    if (iid != 0) {
        loupe__pb_uint(&w->ev, TE_CATEGORY_IIDS, iid); /* one tag per element: unpacked */
    } else {
        loupe__pb_str(&w->ev, TE_CATEGORIES, cat);
    }
}

/* Starts a TrackEvent packet on sequence q: resets the buffers. track_uuid 0: the sequence's
 * default (track_event_defaults), left out. */
static void event_begin(writer *w, seqst *q, int type, uint64_t track_uuid) {
    w->q = q;
    w->ev.len = 0;
    w->in.len = 0;
    loupe__pb_uint(&w->ev, TE_TYPE, (uint64_t)type);
    if (track_uuid != 0) {
        loupe__pb_uint(&w->ev, TE_TRACK_UUID, track_uuid);
    }
}

static void put_packet(writer *w) {
    uint8_t hdr[11];
    hdr[0] = 0x0A; /* field 1, Trace.packet, length-delimited */
    size_t n = 1 + loupe__pb_put_varint_at(hdr + 1, w->pkt.len);
    loupe__put(w->s, (const char *)hdr, n);
    loupe__put(w->s, (const char *)w->pkt.p, w->pkt.len);
}

/* Wraps the TrackEvent (and its InternedData) into a packet at model time ts on w->q and writes
 * it. The timestamp is the delta on the sequence's clock 64 (its default clock); a time before
 * the sequence's last is absolute on BOOTTIME instead. The sequence's first event packet says
 * SEQ_NEEDS_INCREMENTAL_STATE; the others leave sequence_flags out: the state they need is
 * never lost in a file (no packet is dropped after the sequence's CLEARED packet). */
static void event_end(writer *w, uint64_t ts) {
    loupe__pb *p = &w->pkt;
    seqst *q = w->q;
    p->len = 0;
    if (ts >= q->last) {
        loupe__pb_uint(p, TP_TIMESTAMP, ts - q->last); /* delta on clock 64 */
        q->last = ts;
    } else {
        loupe__pb_uint(p, TP_TIMESTAMP, w->base + ts);
        loupe__pb_uint(p, TP_CLOCK_ID, CLOCK_BOOTTIME);
    }
    loupe__pb_uint(p, TP_SEQ_ID, q->id);
    if (!q->needs_done) {
        loupe__pb_uint(p, TP_SEQ_FLAGS, SEQ_NEEDS);
        q->needs_done = 1;
    }
    if (w->in.len > 0) {
        loupe__pb_bytes(p, TP_INTERNED_DATA, w->in.p, w->in.len);
    }
    loupe__pb_bytes(p, TP_TRACK_EVENT, w->ev.p, w->ev.len);
    put_packet(w);
}

static uint64_t thread_uuid(size_t t) {
    return 2 + (uint64_t)t;
}

/* The uuid of process p's track: 1 for processes[0], after the threads' and counters' for the
 * others. */
static uint64_t process_uuid(const writer *w, size_t p) {
    if (p == 0 || p >= w->m->process_count) {
        return 1;
    }
    return 2 + (uint64_t)w->m->thread_count + (uint64_t)w->cname_count + (uint64_t)(p - 1);
}

/* The uuid of writer track v: its model track's, or for a lane the lane's own, after the
 * processes'. */
static uint64_t vt_uuid(const writer *w, size_t v) {
    if (!w->vt[v].is_lane) {
        return thread_uuid(w->vt[v].thread);
    }
    size_t procs = w->m->process_count > 0 ? w->m->process_count - 1 : 0;
    return 2 + (uint64_t)w->m->thread_count + (uint64_t)w->cname_count + (uint64_t)procs +
           (uint64_t)v;
}

/* The pid of process p (processes[0]: the model's). */
static uint64_t process_pid(const loupe_model *m, size_t p) {
    return p == 0 || p >= m->process_count ? m->pid : m->processes[p].pid;
}

static void clock_entry(loupe__pb *p, uint64_t id, uint64_t ts, int incremental) {
    size_t c = loupe__pb_begin(p, 1); /* field 1, ClockSnapshot.clocks */
    loupe__pb_uint(p, 1, id);         /* field 1, Clock.clock_id */
    loupe__pb_uint(p, 2, ts);         /* field 2, Clock.timestamp */
    if (incremental) {
        loupe__pb_uint(p, 3, 1); /* field 3, Clock.is_incremental */
    }
    loupe__pb_end(p, c);
}

/* A sequence's first packet: CLEARED, a ClockSnapshot (clock 64 = B, incremental) and, for a
 * track's sequence, trace_packet_defaults {timestamp_clock_id 64, track_event_defaults
 * {track_uuid}} (the main sequence gets its defaults after its descriptors, whose timestamps
 * are on the trace clock). */
static void put_sequence_start(writer *w, const seqst *q, uint64_t track_uuid) {
    const loupe_model *m = w->m;
    loupe__pb *p = &w->pkt;
    p->len = 0;
    loupe__pb_uint(p, TP_SEQ_ID, q->id);
    loupe__pb_uint(p, TP_SEQ_FLAGS, SEQ_CLEARED);
    if (track_uuid != 0) {
        size_t d = loupe__pb_begin(p, TP_DEFAULTS);
        loupe__pb_uint(p, 58, CLOCK_DELTA); /* field 58, TracePacketDefaults.timestamp_clock_id */
        size_t te = loupe__pb_begin(p, 11); /* field 11, TracePacketDefaults.track_event_defaults */
        loupe__pb_uint(p, 11, track_uuid);  /* field 11, TrackEventDefaults.track_uuid */
        loupe__pb_end(p, te);
        loupe__pb_end(p, d);
    }
    size_t cs = loupe__pb_begin(p, TP_CLOCK_SNAPSHOT);
    if (m->origin_unix_ns != 0 && q->id == SEQ_MAIN) {
        clock_entry(p, CLOCK_REALTIME, m->origin_unix_ns, 0);
    }
    clock_entry(p, CLOCK_BOOTTIME, w->base, 0);
    clock_entry(p, CLOCK_DELTA, w->base, 1);
    loupe__pb_end(p, cs);
    put_packet(w);
}

/* A ProcessDescriptor track: pid (field 1, int32), cmdline (2: the model's whole command line
 * as one element), process_name (6). */
static void put_process(writer *w, uint64_t uuid, uint64_t pid, const char *name,
                        const char *cmdline) {
    loupe__pb *p = &w->pkt;
    p->len = 0;
    loupe__pb_uint(p, TP_TIMESTAMP, w->base);
    loupe__pb_uint(p, TP_SEQ_ID, SEQ_MAIN);
    size_t td = loupe__pb_begin(p, TP_TRACK_DESCRIPTOR);
    loupe__pb_uint(p, 1, uuid);        /* field 1, TrackDescriptor.uuid */
    size_t pd = loupe__pb_begin(p, 3); /* field 3, TrackDescriptor.process */
    loupe__pb_uint(p, 1, pid);
    if (cmdline != NULL && cmdline[0]) {
        loupe__pb_str(p, 2, cmdline);
    }
    if (name != NULL && name[0]) {
        loupe__pb_str(p, 6, name);
    }
    loupe__pb_end(p, pd);
    loupe__pb_end(p, td);
    put_packet(w);
}

/* A named track under parent (field 5, parent_uuid; field 2, name), a counter track when
 * counter is set (field 8, TrackDescriptor.counter: {}). */
static void put_named(writer *w, uint64_t uuid, uint64_t parent, const char *name, int counter) {
    loupe__pb *p = &w->pkt;
    p->len = 0;
    loupe__pb_uint(p, TP_TIMESTAMP, w->base);
    loupe__pb_uint(p, TP_SEQ_ID, SEQ_MAIN);
    size_t td = loupe__pb_begin(p, TP_TRACK_DESCRIPTOR);
    loupe__pb_uint(p, 1, uuid);
    loupe__pb_uint(p, 5, parent);
    loupe__pb_str(p, 2, name);
    if (counter) {
        size_t cd = loupe__pb_begin(p, 8);
        loupe__pb_end(p, cd);
    }
    loupe__pb_end(p, td);
    put_packet(w);
}

static void put_descriptors(writer *w) {
    const loupe_model *m = w->m;
    loupe__pb *p = &w->pkt;
    uint64_t pid = m->pid;
    /* 1: the clock snapshot, clearing the main sequence's incremental state. */
    put_sequence_start(w, &w->main, 0);
    /* 2: the processes, the tracks, the counter tracks, the async tracks' lanes. */
    put_process(w, 1, pid, m->process_name, m->process_count > 0 ? m->processes[0].cmdline : "");
    for (size_t k = 1; k < m->process_count; k++) {
        put_process(w, process_uuid(w, k), m->processes[k].pid, m->processes[k].name,
                    m->processes[k].cmdline);
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->kind != LOUPE_TRACK_THREAD) {
            /* A GPU or async track: a named track under its process. Its kind, tid and device
             * travel in the "tracks" annotation. */
            put_named(w, thread_uuid(t), process_uuid(w, th->process), th->name, 0);
            continue;
        }
        p->len = 0;
        loupe__pb_uint(p, TP_TIMESTAMP, w->base);
        loupe__pb_uint(p, TP_SEQ_ID, SEQ_MAIN);
        size_t td = loupe__pb_begin(p, TP_TRACK_DESCRIPTOR);
        loupe__pb_uint(p, 1, thread_uuid(t));
        size_t d = loupe__pb_begin(p, 4); /* field 4, TrackDescriptor.thread */
        /* field 1, ThreadDescriptor.pid, int32: its process's */
        loupe__pb_uint(p, 1, th->process == 0 ? pid : process_pid(m, th->process));
        loupe__pb_uint(p, 2, th->tid); /* field 2, ThreadDescriptor.tid, int64 */
        if (th->name[0]) {
            loupe__pb_str(p, 5, th->name); /* field 5, ThreadDescriptor.thread_name */
        }
        loupe__pb_end(p, d);
        loupe__pb_end(p, td);
        put_packet(w);
    }
    for (size_t k = 0; k < w->cname_count; k++) {
        put_named(w, thread_uuid(m->thread_count + k), process_uuid(w, w->cproc[k]), w->cnames[k],
                  1);
    }
    /* An async track's lanes: child tracks of the async track, as the Perfetto SDK's async
     * tracks nest in its UI (track_descriptor.proto: parent_uuid); the reader folds them back
     * into the one async track. */
    for (size_t v = 0; v < w->vt_count; v++) {
        if (w->vt[v].is_lane) {
            const loupe_model_thread *th = &m->threads[w->vt[v].thread];
            put_named(w, vt_uuid(w, v), thread_uuid(w->vt[v].thread), th->name, 0);
        }
    }
    /* 3: each writer track's sequence: cleared, its clock, its first track as the default. */
    for (size_t i = 0; i < w->tseq_count; i++) {
        put_sequence_start(w, &w->tseq[i], vt_uuid(w, i));
    }
}

static void put_metadata(writer *w) {
    const loupe_model *m = w->m;
    loupe__pb *b = &w->ev;
    event_begin(w, &w->main, TYPE_INSTANT, 1);
    put_name(w, "loupe_metadata");
    put_category(w, "loupe");
    size_t a = loupe__pb_begin(b, TE_DEBUG_ANNOTATIONS);
    ann_name(w, b, "loupe");
    ann_str(w, b, DA_DICT_ENTRIES, "version", LOUPE_VERSION_STRING);
    ann_str(w, b, DA_DICT_ENTRIES, "host", m->host);
    ann_str(w, b, DA_DICT_ENTRIES, "clock", m->clock);
    size_t d = loupe__pb_begin(b, DA_DICT_ENTRIES);
    ann_name(w, b, "tsc_ghz");
    loupe__pb_double(b, DA_DOUBLE, m->tsc_ghz);
    loupe__pb_end(b, d);
    ann_u64(w, b, DA_DICT_ENTRIES, "pid", m->pid);
    ann_u64(w, b, DA_DICT_ENTRIES, "origin_unix_ns", m->origin_unix_ns);
    ann_u64(w, b, DA_DICT_ENTRIES, "duration_ns", m->duration_ns);
    ann_u64(w, b, DA_DICT_ENTRIES, "unmatched_ends", m->unmatched_ends);
    loupe__pb_end(b, a);
    a = loupe__pb_begin(b, TE_DEBUG_ANNOTATIONS);
    ann_name(w, b, "tracks");
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        snprintf(w->scratch, sizeof w->scratch, "%llu", (unsigned long long)thread_uuid(t));
        d = loupe__pb_begin(b, DA_DICT_ENTRIES);
        loupe__pb_str(b, DA_NAME, w->scratch);
        ann_u64(w, b, DA_DICT_ENTRIES, "kind", (uint64_t)th->kind);
        ann_u64(w, b, DA_DICT_ENTRIES, "device", th->device);
        ann_u64(w, b, DA_DICT_ENTRIES, "tid", th->tid);
        ann_u64(w, b, DA_DICT_ENTRIES, "events_recorded", th->events_recorded);
        ann_u64(w, b, DA_DICT_ENTRIES, "events_dropped", th->events_dropped);
        ann_u64(w, b, DA_DICT_ENTRIES, "capacity_needed", th->capacity_needed);
        loupe__pb_end(b, d);
    }
    loupe__pb_end(b, a);
    /* Per process (by its track's uuid): what ProcessDescriptor has no field for. */
    a = loupe__pb_begin(b, TE_DEBUG_ANNOTATIONS);
    ann_name(w, b, "processes");
    for (size_t k = 0; k < m->process_count; k++) {
        const loupe_model_process *pr = &m->processes[k];
        snprintf(w->scratch, sizeof w->scratch, "%llu", (unsigned long long)process_uuid(w, k));
        d = loupe__pb_begin(b, DA_DICT_ENTRIES);
        loupe__pb_str(b, DA_NAME, w->scratch);
        ann_str(w, b, DA_DICT_ENTRIES, "host", pr->host != NULL ? pr->host : "");
        ann_str(w, b, DA_DICT_ENTRIES, "label", pr->label != NULL ? pr->label : "");
        ann_u64(w, b, DA_DICT_ENTRIES, "parent_pid", pr->parent_pid);
        ann_i64(w, b, DA_DICT_ENTRIES, "rank", pr->rank);
        loupe__pb_end(b, d);
    }
    loupe__pb_end(b, a);
    if (m->metadata_count > 0) {
        a = loupe__pb_begin(b, TE_DEBUG_ANNOTATIONS);
        ann_name(w, b, "metadata");
        for (size_t i = 0; i < m->metadata_count; i++) {
            ann_str(w, b, DA_DICT_ENTRIES, m->metadata[i].key, m->metadata[i].value);
        }
        loupe__pb_end(b, a);
    }
    /* The main sequence's defaults: its later timestamps are on clock 64. */
    loupe__pb *p = &w->pkt;
    p->len = 0;
    loupe__pb_uint(p, TP_TIMESTAMP, 0); /* model time 0 = B, the clock's snapshot value */
    loupe__pb_uint(p, TP_SEQ_ID, SEQ_MAIN);
    loupe__pb_uint(p, TP_SEQ_FLAGS, SEQ_NEEDS);
    w->main.needs_done = 1;
    size_t mk = loupe__pb_begin(p, TP_DEFAULTS);
    loupe__pb_uint(p, 58, CLOCK_DELTA);
    loupe__pb_end(p, mk);
    if (w->in.len > 0) {
        loupe__pb_bytes(p, TP_INTERNED_DATA, w->in.p, w->in.len);
    }
    loupe__pb_bytes(p, TP_TRACK_EVENT, w->ev.p, w->ev.len);
    put_packet(w);
}

/* ---- the merge ---- */

/* The slice at position pos of writer track c. */
static size_t vt_slice(const writer *w, const vtrack *c, size_t pos) {
    return c->is_lane ? w->lidx[pos] : pos;
}

/* The model time of writer track v's next event, and what it is (0 none, 1 END, 2 BEGIN,
 * 3 INSTANT). On a plain track the END order follows the model's depths, so each END closes the
 * BEGIN it belongs to; in a lane (slices that do not overlap) a slice ends before the next
 * begins. */
static int vt_next(const writer *w, size_t v, uint64_t *ts) {
    const vtrack *c = &w->vt[v];
    const loupe_model_thread *th = &w->m->threads[c->thread];
    int what = 0;
    uint64_t at = 0;
    const loupe_slice *nx = c->si < c->end ? &th->slices[vt_slice(w, c, c->si)] : NULL;
    if (c->depth > 0) {
        const loupe_slice *s = &th->slices[c->stack[c->depth - 1]];
        uint64_t e = s->start_ns + s->dur_ns;
        if (nx == NULL || (c->is_lane ? e <= nx->start_ns : c->depth > nx->depth)) {
            what = 1;
            at = e;
        }
    }
    if (what == 0 && nx != NULL) {
        what = 2;
        at = nx->start_ns;
    }
    if (c->ii < th->instant_count && (what == 0 || th->instants[c->ii].ts_ns <= at)) {
        what = 3;
        at = th->instants[c->ii].ts_ns;
    }
    *ts = at;
    return what;
}

static void emit_vt(writer *w, size_t v, int what, uint64_t ts) {
    vtrack *c = &w->vt[v];
    const loupe_model_thread *th = &w->m->threads[c->thread];
    if (what == 1) {
        const loupe_slice *s = &th->slices[c->stack[--c->depth]];
        event_begin(w, c->q, TYPE_SLICE_END, c->uuid);
        /* HAS_ARGS is the model's own mark (the args themselves say it) */
        uint32_t flags = s->flags & ~(uint32_t)LOUPE_SLICE_HAS_ARGS;
        if (flags != 0) {
            ann_u64(w, &w->ev, TE_DEBUG_ANNOTATIONS, "loupe_flags", flags);
        }
        event_end(w, ts);
    } else if (what == 2) {
        size_t i = vt_slice(w, c, c->si++);
        const loupe_slice *s = &th->slices[i];
        if (c->depth == c->cap) {
            size_t nc = c->cap ? c->cap * 2 : 16;
            size_t *ns = realloc(c->stack, nc * sizeof(*ns));
            if (ns == NULL) {
                w->oom = 1;
                return;
            }
            c->stack = ns;
            c->cap = nc;
        }
        c->stack[c->depth++] = i;
        event_begin(w, c->q, TYPE_SLICE_BEGIN, c->uuid);
        put_name(w, s->name);
        put_category(w, loupe_slice_category(w->m, s));
        size_t nargs;
        const loupe_arg *args = loupe_slice_args(th, i, &nargs);
        put_args(w, args, nargs);
        while (c->fi < c->fend && w->fe[c->fi].slice == i) {
            const flow_end *f = &w->fe[c->fi++];
            loupe__pb_fixed64(&w->ev, f->role ? TE_FLOW_IDS : TE_TERMINATING_FLOW_IDS, f->id);
        }
        event_end(w, ts);
    } else {
        const loupe_instant *in = &th->instants[c->ii++];
        event_begin(w, c->q, TYPE_INSTANT, c->uuid);
        put_name(w, in->name);
        put_args(w, in->args, in->arg_count);
        event_end(w, ts);
    }
}

static uint64_t ckey_hash(const char *name, size_t process) {
    return loupe__hash_str(name) ^ ((uint64_t)process * 0x9E3779B97F4A7C15ull);
}

/* The counter track of (process, name): its index + 1, added when add is set and it is missing
 * (*added then 1); 0 when missing or out of memory (w->oom). */
static size_t ctab_get(writer *w, const char *name, size_t process, int add, int *added) {
    *added = 0;
    uint64_t h = ckey_hash(name, process);
    if (w->ctab_cap > 0) {
        for (size_t j = h & (w->ctab_cap - 1);; j = (j + 1) & (w->ctab_cap - 1)) {
            const centry *e = &w->ctab[j];
            if (e->name == NULL) {
                break;
            }
            if (e->hash == h && e->process == process &&
                (e->name == name || strcmp(e->name, name) == 0)) {
                return e->k1;
            }
        }
    }
    if (!add) {
        return 0;
    }
    if ((w->cname_count + 1) * 2 > w->ctab_cap) {
        size_t nc = w->ctab_cap ? w->ctab_cap * 2 : 64;
        centry *ne = calloc(nc, sizeof(*ne));
        if (ne == NULL) {
            w->oom = 1;
            return 0;
        }
        for (size_t i = 0; i < w->ctab_cap; i++) {
            if (w->ctab[i].name != NULL) {
                size_t j = w->ctab[i].hash & (nc - 1);
                while (ne[j].name != NULL) {
                    j = (j + 1) & (nc - 1);
                }
                ne[j] = w->ctab[i];
            }
        }
        free(w->ctab);
        w->ctab = ne;
        w->ctab_cap = nc;
    }
    const char **nn = realloc(w->cnames, (w->cname_count + 1) * sizeof(*nn));
    if (nn == NULL) {
        w->oom = 1;
        return 0;
    }
    w->cnames = nn;
    size_t *np = realloc(w->cproc, (w->cname_count + 1) * sizeof(*np));
    if (np == NULL) {
        w->oom = 1;
        return 0;
    }
    w->cproc = np;
    size_t j = h & (w->ctab_cap - 1);
    while (w->ctab[j].name != NULL) {
        j = (j + 1) & (w->ctab_cap - 1);
    }
    w->cnames[w->cname_count] = name;
    w->cproc[w->cname_count] = process;
    w->ctab[j] = (centry){name, process, h, ++w->cname_count};
    *added = 1;
    return w->cname_count;
}

static void emit_counter(writer *w) {
    const loupe_counter_sample *c = &w->m->counters[w->ci++];
    int added;
    size_t k1 = ctab_get(w, c->name, c->process, 0, &added);
    event_begin(w, &w->main, TYPE_COUNTER, thread_uuid(w->m->thread_count + (k1 - 1)));
    if (c->is_double) {
        loupe__pb_double(&w->ev, TE_DOUBLE_COUNTER, c->d); /* field 44, double */
    } else {
        loupe__pb_int(&w->ev, TE_COUNTER_VALUE, c->i); /* field 30, int64 */
    }
    event_end(w, c->ts_ns);
}

typedef struct hitem {
    uint64_t ts;
    size_t src; /* a writer track, or vt_count for the counters */
    int what;
} hitem;

static int hless(const hitem *a, const hitem *b) {
    return a->ts < b->ts || (a->ts == b->ts && a->src < b->src);
}

static void sift_down(hitem *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        if (l < n && hless(&h[l], &h[s])) {
            s = l;
        }
        if (r < n && hless(&h[r], &h[s])) {
            s = r;
        }
        if (s == i) {
            return;
        }
        hitem t = h[i];
        h[i] = h[s];
        h[s] = t;
        i = s;
    }
}

static int src_next(const writer *w, size_t src, uint64_t *ts) {
    if (src < w->vt_count) {
        return vt_next(w, src, ts);
    }
    if (w->ci < w->m->counter_count) {
        *ts = w->m->counters[w->ci].ts_ns;
        return 4;
    }
    return 0;
}

static int cmp_flow_end(const void *pa, const void *pb) {
    const flow_end *a = pa, *b = pb;
    if (a->vt != b->vt) {
        return a->vt < b->vt ? -1 : 1;
    }
    if (a->slice != b->slice) {
        return a->slice < b->slice ? -1 : 1;
    }
    return a->role - b->role;
}

/* The lanes of async track th: 1 + its deepest slice's depth (the builder's lane), at least 1. */
static size_t lanes_of(const loupe_model_thread *th) {
    size_t n = 1;
    for (size_t i = 0; i < th->slice_count; i++) {
        if ((size_t)th->slices[i].depth + 1 > n) {
            n = (size_t)th->slices[i].depth + 1;
        }
    }
    return n;
}

/* The writer track of (thread t, slice i). */
static size_t vt_of(const writer *w, size_t t, size_t i) {
    const loupe_model_thread *th = &w->m->threads[t];
    return w->vt_base[t] + (th->kind == LOUPE_TRACK_ASYNC ? th->slices[i].depth : 0);
}

static int prepare(writer *w) {
    const loupe_model *m = w->m;
    w->vt_base = calloc(m->thread_count + 1, sizeof(*w->vt_base));
    if (w->vt_base == NULL) {
        return -1;
    }
    size_t nvt = 0, nasync = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        w->vt_base[t] = nvt;
        if (th->kind == LOUPE_TRACK_ASYNC) {
            nvt += lanes_of(th);
            nasync += th->slice_count;
        } else {
            nvt++;
        }
    }
    w->vt_base[m->thread_count] = nvt;
    w->vt = calloc(nvt + 1, sizeof(*w->vt));
    w->lidx = malloc((nasync + 1) * sizeof(*w->lidx));
    if (w->vt == NULL || w->lidx == NULL) {
        return -1;
    }
    w->vt_count = nvt;
    /* One sequence per writer track, as the Perfetto SDK gives each thread one, up to the limit
     * loupe's reader shares (base/perfetto.h, less sequences 1 and 2); past it, track v shares
     * sequence v % count and, but for the first on it, names its track in every event. */
    size_t nseq = nvt < LOUPE__PERFETTO_MAX_SEQUENCES - 2 ? nvt : LOUPE__PERFETTO_MAX_SEQUENCES - 2;
    w->tseq = calloc(nseq + 1, sizeof(*w->tseq));
    if (w->tseq == NULL) {
        return -1;
    }
    w->tseq_count = nseq;
    for (size_t i = 0; i < nseq; i++) {
        w->tseq[i].id = (uint32_t)(SEQ_TRACK0 + i);
    }
    size_t li = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        size_t b = w->vt_base[t], lanes = w->vt_base[t + 1] - b;
        for (size_t l = 0; l < lanes; l++) {
            vtrack *c = &w->vt[b + l];
            c->thread = t;
            c->q = &w->tseq[(b + l) % nseq];
            c->ii = l == 0 ? 0 : th->instant_count; /* instants: lane 0's */
            if (th->kind != LOUPE_TRACK_ASYNC) {
                c->end = th->slice_count;
                continue;
            }
            /* a lane's slices, in model order (a counting pass per lane) */
            c->is_lane = 1;
            c->si = li;
            for (size_t i = 0; i < th->slice_count; i++) {
                if (th->slices[i].depth == l) {
                    w->lidx[li++] = i;
                }
            }
            c->end = li;
        }
    }
    w->main.id = SEQ_MAIN;
    if (m->flow_count > 0) {
        w->fe = malloc(2 * m->flow_count * sizeof(*w->fe));
        if (w->fe == NULL) {
            return -1;
        }
        for (size_t i = 0; i < m->flow_count; i++) {
            const loupe_flow *f = &m->flows[i];
            w->fe[w->fe_count++] =
                (flow_end){vt_of(w, f->from_thread, f->from_slice), f->from_slice, 1, f->id};
            w->fe[w->fe_count++] =
                (flow_end){vt_of(w, f->to_thread, f->to_slice), f->to_slice, 0, f->id};
        }
        qsort(w->fe, w->fe_count, sizeof(*w->fe), cmp_flow_end);
    }
    size_t j = 0;
    for (size_t v = 0; v < nvt; v++) {
        w->vt[v].fi = j;
        while (j < w->fe_count && w->fe[j].vt == v) {
            j++;
        }
        w->vt[v].fend = j;
    }
    for (size_t i = 0; i < m->counter_count; i++) {
        int added;
        if (ctab_get(w, m->counters[i].name, m->counters[i].process, 1, &added) == 0) {
            return -1;
        }
        if (added && w->cname_count > INTERN_MAX) {
            loupe__err(LOUPE_EUNSUPPORTED, "Perfetto writer: more than %u counter tracks",
                       INTERN_MAX);
            return -2;
        }
    }
    for (size_t v = w->tseq_count; v < nvt; v++) { /* uuids: after the counters' count */
        w->vt[v].uuid = vt_uuid(w, v);
    }
    return w->oom ? -1 : 0;
}

static void seq_free(seqst *q) {
    for (int k = 0; k <= IN_KINDS; k++) {
        free(q->def[k]);
    }
}

static void writer_free(writer *w) {
    loupe__pb_free(&w->pkt);
    loupe__pb_free(&w->ev);
    loupe__pb_free(&w->in);
    for (int k = 0; k <= IN_KINDS; k++) {
        free(w->tabs[k].e);
    }
    free(w->ctab);
    if (w->vt != NULL) {
        for (size_t v = 0; v < w->vt_count; v++) {
            free(w->vt[v].stack);
        }
    }
    for (size_t i = 0; i < w->tseq_count; i++) {
        seq_free(&w->tseq[i]);
    }
    free(w->tseq);
    seq_free(&w->main);
    free(w->vt);
    free(w->vt_base);
    free(w->lidx);
    free(w->fe);
    free(w->cnames);
    free(w->cproc);
}

/* ---- compressed_packets: the stream above, deflated in chunks ----
 *
 * What Perfetto's tracing service writes with TraceConfig.compression_type =
 * COMPRESSION_TYPE_DEFLATE (google/perfetto src/tracing/service/zlib_compressor.cc): a
 * TracePacket whose only field is compressed_packets (50, bytes) = a zlib stream (deflateInit's
 * format: RFC 1950 header and Adler-32) of a serialized Trace, i.e. whole packets each with its
 * Trace.packet tag and length. traced compresses every packet of a read batch, its own ones
 * included, so nothing stays outside. The trace processor inflates each chunk and reads its
 * packets as if they stood in the file (proto_trace_tokenizer.cc), sequences and incremental
 * state carrying across chunks. The writer's packets go into a layer of their own (zsink) that
 * finds packet boundaries in the bytes it receives and deflates whole packets once it holds
 * ZCHUNK bytes of them (traced's batches are of that order), so the writers above stay
 * unchanged and the samples' packets are compressed too. */
#define ZCHUNK ((size_t)512 << 10)
#define ZLEVEL 1         /* see docs/performance.md: level 1 keeps the write above 15 M events/s */
#define TP_COMPRESSED 50 /* TracePacket.compressed_packets, bytes */

typedef struct zsink {
    loupe__sink s; /* first: its write callback gets &zs->s */
    loupe__sink *out;
    z_stream z;
    uint8_t *raw;          /* whole packets not yet deflated, then the start of the next one */
    size_t len, cap, scan; /* scan: where the next packet's tag is */
    uint8_t *zout;
    size_t zcap;
} zsink;

/* Deflates raw[0, n) (whole packets) into one compressed_packets packet in zs->out. */
static int zs_emit(zsink *zs, size_t n) {
    size_t bound = (size_t)deflateBound(&zs->z, (uLong)n) + 16;
    if (bound > zs->zcap) {
        uint8_t *nb = realloc(zs->zout, bound);
        if (nb == NULL) {
            return LOUPE_ENOMEM;
        }
        zs->zout = nb;
        zs->zcap = bound;
    }
    zs->z.next_in = zs->raw;
    zs->z.avail_in = (uInt)n;
    zs->z.next_out = zs->zout;
    zs->z.avail_out = (uInt)zs->zcap;
    int zr = deflate(&zs->z, Z_FINISH); /* the bound holds all of it: one call */
    size_t clen = zs->zcap - zs->z.avail_out;
    deflateReset(&zs->z);
    if (zr != Z_STREAM_END) {
        return LOUPE_ENOMEM;
    }
    uint8_t tag[8], hdr[24];
    size_t t = loupe__pb_put_varint_at(tag, TP_COMPRESSED << 3 | 2); /* 2 bytes */
    size_t clen_n = loupe__pb_put_varint_at(tag + t, clen);
    size_t h = 0;
    hdr[h++] = 0x0A; /* Trace.packet */
    h += loupe__pb_put_varint_at(hdr + h, t + clen_n + clen);
    memcpy(hdr + h, tag, t + clen_n);
    h += t + clen_n;
    loupe__put(zs->out, (const char *)hdr, h);
    loupe__put(zs->out, (const char *)zs->zout, clen);
    return 0;
}

/* The sink callback: keeps the bytes, deflates whole packets once there are ZCHUNK of them. */
static int zs_write(loupe__sink *s, const void *p, size_t n) {
    zsink *zs = (zsink *)s;
    if (zs->cap - zs->len < n) {
        size_t nc = zs->cap ? zs->cap : ZCHUNK + 65536;
        while (nc - zs->len < n) {
            nc *= 2;
        }
        uint8_t *nb = realloc(zs->raw, nc);
        if (nb == NULL) {
            return LOUPE_ENOMEM;
        }
        zs->raw = nb;
        zs->cap = nc;
    }
    memcpy(zs->raw + zs->len, p, n);
    zs->len += n;
    for (;;) {
        /* Every packet here is 0x0A, a varint length, the bytes (this file and
         * perfetto_samples.c write nothing else). */
        if (zs->scan >= zs->len) {
            break;
        }
        assert(zs->raw[zs->scan] == 0x0A);
        size_t at = zs->scan + 1, plen = 0;
        unsigned shift = 0;
        while (at < zs->len && (zs->raw[at] & 0x80)) {
            plen |= (size_t)(zs->raw[at++] & 0x7F) << shift;
            shift += 7;
        }
        if (at >= zs->len) {
            break;
        }
        plen |= (size_t)zs->raw[at++] << shift;
        if (zs->len - at < plen) {
            break;
        }
        zs->scan = at + plen;
        if (zs->scan >= ZCHUNK) {
            int r = zs_emit(zs, zs->scan);
            if (r != 0) {
                return r;
            }
            memmove(zs->raw, zs->raw + zs->scan, zs->len - zs->scan);
            zs->len -= zs->scan;
            zs->scan = 0;
        }
    }
    return 0;
}

/* 0 = packets as they are (LOUPE_PERFETTO_COMPRESS=0), else compressed_packets. */
static int want_compress(void) {
    const char *e = getenv("LOUPE_PERFETTO_COMPRESS");
    return e == NULL || strcmp(e, "0") != 0;
}

static int write_plain(const loupe_model *m, loupe__sink *s) {
    writer w;
    memset(&w, 0, sizeof w);
    w.m = m;
    w.s = s;
    w.base = m->origin_unix_ns;
    int r = prepare(&w);
    if (r != 0) {
        writer_free(&w);
        return r == -2 ? LOUPE_EUNSUPPORTED /* detail set */
                       : loupe__err(LOUPE_ENOMEM, "Perfetto writer: out of memory");
    }
    put_descriptors(&w);
    put_metadata(&w);
    size_t nsrc = w.vt_count + 1;
    hitem *heap = malloc(nsrc * sizeof(*heap));
    if (heap == NULL) {
        writer_free(&w);
        return loupe__err(LOUPE_ENOMEM, "Perfetto writer: out of memory");
    }
    size_t n = 0;
    for (size_t src = 0; src < nsrc; src++) {
        uint64_t ts;
        int what = src_next(&w, src, &ts);
        if (what != 0) {
            heap[n++] = (hitem){ts, src, what};
        }
    }
    for (size_t i = n / 2; i-- > 0;) {
        sift_down(heap, n, i);
    }
    while (n > 0 && !w.oom && s->err == 0) {
        hitem *top = &heap[0];
        if (top->src < w.vt_count) {
            emit_vt(&w, top->src, top->what, top->ts);
        } else {
            emit_counter(&w);
        }
        top->what = src_next(&w, top->src, &top->ts);
        if (top->what == 0) {
            heap[0] = heap[--n];
        }
        sift_down(heap, n, 0);
    }
    free(heap);
    int oom = w.oom || w.pkt.oom || w.ev.oom || w.in.oom;
    writer_free(&w);
    if (oom) {
        return loupe__err(LOUPE_ENOMEM, "Perfetto writer: out of memory");
    }
    return loupe__write_perfetto_samples(m, s, w.base); /* samples: their own sequence */
}

int loupe__write_perfetto_proto(const loupe_model *m, loupe__sink *s) {
    if (!want_compress()) {
        return write_plain(m, s);
    }
    zsink *zs = calloc(1, sizeof(*zs));
    if (zs == NULL || deflateInit(&zs->z, ZLEVEL) != Z_OK) {
        free(zs);
        return loupe__err(LOUPE_ENOMEM, "Perfetto writer: out of memory");
    }
    zs->s.path = s->path;
    zs->s.write = zs_write;
    zs->out = s;
    int r = write_plain(m, &zs->s);
    if (r == 0) {
        loupe__sink_flush(&zs->s);
        if (zs->s.err == 0 && zs->len > 0) {
            zs->s.err = zs_emit(zs, zs->len); /* whole packets: the writers finished theirs */
        }
        if (zs->s.err != 0) {
            r = loupe__err(LOUPE_ENOMEM, "Perfetto writer: out of memory (compressing)");
        }
    }
    deflateEnd(&zs->z);
    free(zs->raw);
    free(zs->zout);
    free(zs);
    return r;
}
