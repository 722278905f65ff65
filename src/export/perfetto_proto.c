/* perfetto_proto.c: the Perfetto native protobuf writer (<host>.pftrace), hand-encoded (no SDK).
 *
 * Field numbers: google/perfetto protos/perfetto/trace/{trace,trace_packet}.proto,
 * track_event/{track_event,track_descriptor,debug_annotation,process_descriptor,
 * thread_descriptor,counter_descriptor}.proto, interned_data/interned_data.proto,
 * clock_snapshot.proto, trace_packet_defaults.proto (google/perfetto protos/perfetto/trace/);
 * proto/perfetto_trace.proto is loupe's subset of them.
 *
 * The stream (one sequence, trusted_packet_sequence_id 1; Perfetto's trace_processor,
 * src/trace_processor/importers/proto/):
 *   1. flags=CLEARED, ClockSnapshot {REALTIME = origin_unix_ns (when known),
 *      BOOTTIME = B, clock 64 = B is_incremental}, where B = origin_unix_ns (0 when unknown).
 *   2. TrackDescriptors: the process (uuid 1), each model track (uuid 2 + index: a thread
 *      track, or for LOUPE_TRACK_GPU a named child of the process), each counter name
 *      (uuid 2 + thread_count + k). Timestamp B, no clock id (trace time, BOOTTIME).
 *   3. flags=NEEDS, trace_packet_defaults {timestamp_clock_id 64}, an INSTANT "loupe_metadata"
 *      (category "loupe") on the process track with dict debug annotations "loupe" (version,
 *      host, clock, tsc_ghz, origin_unix_ns, duration_ns, unmatched_ends, pid), "tracks"
 *      (per track uuid: kind, device, tid, events_recorded, events_dropped, capacity_needed) and
 *      "metadata" (the model's key/value pairs): what the model holds that Perfetto has no field
 *      for, so that the reader gives back the same model.
 *   4. Every event in global time order (a heap merges the tracks and the counters), each its own
 *      packet: flags=NEEDS, timestamp = the delta (ns) since the previous packet on clock 64
 *      (incremental clock: "each TracePacket's timestamp is a delta from the last one
 *      referencing this clock on the sequence", clock_snapshot.proto), new names interned in the
 *      same packet. A slice is a SLICE_BEGIN (name, category, args, flows) and a SLICE_END
 *      (annotation "loupe_flags" when the slice has LOUPE_SLICE_* flags); the END order follows
 *      the model's depths, so each END closes the BEGIN it belongs to. A packet whose time would
 *      go backwards (a model whose slices do not nest) carries an absolute timestamp with
 *      timestamp_clock_id 6 (BOOTTIME) instead and leaves the incremental clock alone.
 *   5. CPU samples, frames, stacks and off-CPU intervals, when the model has them: Perfetto's
 *      profiler packets (PerfSample, interned frames/mappings/callstacks) on sequence 2, written
 *      by perfetto_samples.c.
 *
 * Interning: event names, categories and annotation names, iids from 1 per kind, defined in the
 * packet that first uses them; after 2^18 strings of a kind, new strings are written inline
 * (TrackEvent.name / categories / DebugAnnotation.name), which bounds the table.
 * Memory: the packet buffers (the largest packet), the intern tables (bounded), a stack per track
 * (its depth) and an index of the flows' ends (one entry per end): nothing per event.
 * Flows: the source slice's BEGIN carries flow_ids (field 47), the destination's BEGIN
 * terminating_flow_ids (48), both fixed64, one tag per id (Perfetto's track_event.proto; its
 * decoder reads these unpacked).
 */
#include "base/error.h"
#include "base/hash.h"
#include "base/pb.h"
#include "export/writers.h"

#include <errno.h>
#include <loupe/loupe.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_ID 1         /* TracePacket.trusted_packet_sequence_id (field 10): nonzero */
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

typedef struct tcursor {
    size_t si, ii; /* next slice, next instant */
    size_t *stack; /* open slices (indices) */
    size_t depth, cap;
    size_t fi, fend; /* this track's range of flow ends */
} tcursor;

typedef struct flow_end {
    size_t thread, slice;
    int role; /* 0: destination (terminating_flow_ids), 1: source (flow_ids) */
    uint64_t id;
} flow_end;

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
    uint64_t last; /* model time of the last packet on clock 64 */
    tcursor *cur;
    flow_end *fe;
    size_t fe_count;
    const char **cnames; /* distinct counter names, by track */
    size_t *cproc;       /* per counter track: the process of its first sample (its parent) */
    size_t cname_count;
    itab ctab; /* counter name -> index + 1 */
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

/* The iid of s in interned-data field kind, defining it in this packet's InternedData when new;
 * 0 when the table is full (the caller writes the string inline). */
static uint64_t intern(writer *w, int kind, const char *s) {
    pcache *pc = &w->pc[kind][((uintptr_t)s >> 3) & (PCACHE - 1)];
    if (pc->s == s) {
        return pc->iid;
    }
    itab *t = &w->tabs[kind];
    int added;
    uint64_t iid = itab_get(w, t, s, 1, t->count + 1, &added);
    if (iid != 0) {
        pc->s = s;
        pc->iid = iid;
    }
    if (added) {
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

static void ann_str(writer *w, loupe__pb *b, uint32_t field, const char *name, const char *v) {
    size_t mk = loupe__pb_begin(b, field);
    ann_name(w, b, name);
    loupe__pb_str(b, DA_STRING, v);
    loupe__pb_end(b, mk);
}

static void put_args(writer *w, const loupe_arg *args, uint32_t n) {
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

/* Starts a TrackEvent packet: resets the buffers. */
static void event_begin(writer *w, int type, uint64_t track_uuid) {
    w->ev.len = 0;
    w->in.len = 0;
    loupe__pb_uint(&w->ev, TE_TYPE, (uint64_t)type);
    loupe__pb_uint(&w->ev, TE_TRACK_UUID, track_uuid);
}

static void put_packet(writer *w) {
    uint8_t hdr[11];
    hdr[0] = 0x0A; /* field 1, Trace.packet, length-delimited */
    size_t n = 1 + loupe__pb_put_varint_at(hdr + 1, w->pkt.len);
    loupe__put(w->s, (const char *)hdr, n);
    loupe__put(w->s, (const char *)w->pkt.p, w->pkt.len);
}

/* Wraps the TrackEvent (and its InternedData) into a packet at model time ts and writes it.
 * defaults: also set trace_packet_defaults {timestamp_clock_id 64}. */
static void event_end(writer *w, uint64_t ts, int defaults) {
    loupe__pb *p = &w->pkt;
    p->len = 0;
    if (ts >= w->last) {
        loupe__pb_uint(p, TP_TIMESTAMP, ts - w->last); /* delta on clock 64 */
        w->last = ts;
    } else {
        loupe__pb_uint(p, TP_TIMESTAMP, w->base + ts);
        loupe__pb_uint(p, TP_CLOCK_ID, CLOCK_BOOTTIME);
    }
    loupe__pb_uint(p, TP_SEQ_ID, SEQ_ID);
    loupe__pb_uint(p, TP_SEQ_FLAGS, SEQ_NEEDS);
    if (defaults) {
        size_t mk = loupe__pb_begin(p, TP_DEFAULTS);
        loupe__pb_uint(p, 58, CLOCK_DELTA); /* field 58, TracePacketDefaults.timestamp_clock_id */
        loupe__pb_end(p, mk);
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

/* The pid of process p (processes[0]: the model's). */
static uint64_t process_pid(const loupe_model *m, size_t p) {
    return p == 0 || p >= m->process_count ? m->pid : m->processes[p].pid;
}

static void put_descriptors(writer *w) {
    const loupe_model *m = w->m;
    loupe__pb *p = &w->pkt;
    uint64_t pid = m->pid;
    /* 1: the clock snapshot, clearing the sequence's incremental state. */
    p->len = 0;
    loupe__pb_uint(p, TP_SEQ_ID, SEQ_ID);
    loupe__pb_uint(p, TP_SEQ_FLAGS, SEQ_CLEARED);
    size_t cs = loupe__pb_begin(p, TP_CLOCK_SNAPSHOT);
    if (m->origin_unix_ns != 0) {
        size_t c = loupe__pb_begin(p, 1);        /* field 1, ClockSnapshot.clocks */
        loupe__pb_uint(p, 1, CLOCK_REALTIME);    /* field 1, Clock.clock_id */
        loupe__pb_uint(p, 2, m->origin_unix_ns); /* field 2, Clock.timestamp */
        loupe__pb_end(p, c);
    }
    size_t c = loupe__pb_begin(p, 1);
    loupe__pb_uint(p, 1, CLOCK_BOOTTIME);
    loupe__pb_uint(p, 2, w->base);
    loupe__pb_end(p, c);
    c = loupe__pb_begin(p, 1);
    loupe__pb_uint(p, 1, CLOCK_DELTA);
    loupe__pb_uint(p, 2, w->base);
    loupe__pb_uint(p, 3, 1); /* field 3, Clock.is_incremental */
    loupe__pb_end(p, c);
    loupe__pb_end(p, cs);
    put_packet(w);
    /* 2: the process, the tracks, the counter tracks. */
    p->len = 0;
    loupe__pb_uint(p, TP_TIMESTAMP, w->base);
    loupe__pb_uint(p, TP_SEQ_ID, SEQ_ID);
    size_t td = loupe__pb_begin(p, TP_TRACK_DESCRIPTOR);
    loupe__pb_uint(p, 1, 1);           /* field 1, TrackDescriptor.uuid */
    size_t pd = loupe__pb_begin(p, 3); /* field 3, TrackDescriptor.process */
    loupe__pb_uint(p, 1, pid);         /* field 1, ProcessDescriptor.pid, int32 */
    if (m->process_name[0]) {
        loupe__pb_str(p, 6, m->process_name); /* field 6, ProcessDescriptor.process_name */
    }
    loupe__pb_end(p, pd);
    loupe__pb_end(p, td);
    put_packet(w);
    for (size_t k = 1; k < m->process_count; k++) {
        p->len = 0;
        loupe__pb_uint(p, TP_TIMESTAMP, w->base);
        loupe__pb_uint(p, TP_SEQ_ID, SEQ_ID);
        td = loupe__pb_begin(p, TP_TRACK_DESCRIPTOR);
        loupe__pb_uint(p, 1, process_uuid(w, k));
        pd = loupe__pb_begin(p, 3);
        loupe__pb_uint(p, 1, m->processes[k].pid);
        if (m->processes[k].name[0]) {
            loupe__pb_str(p, 6, m->processes[k].name);
        }
        loupe__pb_end(p, pd);
        loupe__pb_end(p, td);
        put_packet(w);
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        p->len = 0;
        loupe__pb_uint(p, TP_TIMESTAMP, w->base);
        loupe__pb_uint(p, TP_SEQ_ID, SEQ_ID);
        td = loupe__pb_begin(p, TP_TRACK_DESCRIPTOR);
        loupe__pb_uint(p, 1, thread_uuid(t));
        if (th->kind == LOUPE_TRACK_THREAD) {
            size_t d = loupe__pb_begin(p, 4); /* field 4, TrackDescriptor.thread */
            /* field 1, ThreadDescriptor.pid, int32: its process's */
            loupe__pb_uint(p, 1, th->process == 0 ? pid : process_pid(m, th->process));
            loupe__pb_uint(p, 2, th->tid); /* field 2, ThreadDescriptor.tid, int64 */
            if (th->name[0]) {
                loupe__pb_str(p, 5, th->name); /* field 5, ThreadDescriptor.thread_name */
            }
            loupe__pb_end(p, d);
        } else {
            /* A GPU or async track: a named track under its process (field 5, parent_uuid;
             * field 2, name). Its kind, tid and device travel in the "tracks" annotation. */
            loupe__pb_uint(p, 5, process_uuid(w, th->process));
            loupe__pb_str(p, 2, th->name);
        }
        loupe__pb_end(p, td);
        put_packet(w);
    }
    for (size_t k = 0; k < w->cname_count; k++) {
        p->len = 0;
        loupe__pb_uint(p, TP_TIMESTAMP, w->base);
        loupe__pb_uint(p, TP_SEQ_ID, SEQ_ID);
        td = loupe__pb_begin(p, TP_TRACK_DESCRIPTOR);
        loupe__pb_uint(p, 1, thread_uuid(m->thread_count + k));
        loupe__pb_uint(p, 5, process_uuid(w, w->cproc[k])); /* field 5, parent_uuid */
        loupe__pb_str(p, 2, w->cnames[k]);
        size_t cd = loupe__pb_begin(p, 8); /* field 8, TrackDescriptor.counter: {} */
        loupe__pb_end(p, cd);
        loupe__pb_end(p, td);
        put_packet(w);
    }
}

static void put_metadata(writer *w) {
    const loupe_model *m = w->m;
    loupe__pb *b = &w->ev;
    event_begin(w, TYPE_INSTANT, 1);
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
    if (m->metadata_count > 0) {
        a = loupe__pb_begin(b, TE_DEBUG_ANNOTATIONS);
        ann_name(w, b, "metadata");
        for (size_t i = 0; i < m->metadata_count; i++) {
            ann_str(w, b, DA_DICT_ENTRIES, m->metadata[i].key, m->metadata[i].value);
        }
        loupe__pb_end(b, a);
    }
    event_end(w, 0, 1);
}

/* ---- the merge ---- */

/* The model time of track t's next event, and what it is (0 none, 1 END, 2 BEGIN, 3 INSTANT). */
static int thread_next(const writer *w, size_t t, uint64_t *ts) {
    const loupe_model_thread *th = &w->m->threads[t];
    const tcursor *c = &w->cur[t];
    int what = 0;
    uint64_t at = 0;
    if (c->depth > 0 && (c->si >= th->slice_count || c->depth > th->slices[c->si].depth)) {
        const loupe_slice *s = &th->slices[c->stack[c->depth - 1]];
        what = 1;
        at = s->start_ns + s->dur_ns;
    } else if (c->si < th->slice_count) {
        what = 2;
        at = th->slices[c->si].start_ns;
    }
    if (c->ii < th->instant_count && (what == 0 || th->instants[c->ii].ts_ns <= at)) {
        what = 3;
        at = th->instants[c->ii].ts_ns;
    }
    *ts = at;
    return what;
}

static void emit_thread(writer *w, size_t t, int what, uint64_t ts) {
    const loupe_model_thread *th = &w->m->threads[t];
    tcursor *c = &w->cur[t];
    if (what == 1) {
        const loupe_slice *s = &th->slices[c->stack[--c->depth]];
        event_begin(w, TYPE_SLICE_END, thread_uuid(t));
        if (s->flags != 0) {
            ann_u64(w, &w->ev, TE_DEBUG_ANNOTATIONS, "loupe_flags", s->flags);
        }
        event_end(w, ts, 0);
    } else if (what == 2) {
        size_t i = c->si++;
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
        event_begin(w, TYPE_SLICE_BEGIN, thread_uuid(t));
        put_name(w, s->name);
        put_category(w, s->category);
        put_args(w, s->args, s->arg_count);
        while (c->fi < c->fend && w->fe[c->fi].slice == i) {
            const flow_end *f = &w->fe[c->fi++];
            loupe__pb_fixed64(&w->ev, f->role ? TE_FLOW_IDS : TE_TERMINATING_FLOW_IDS, f->id);
        }
        event_end(w, ts, 0);
    } else {
        const loupe_instant *in = &th->instants[c->ii++];
        event_begin(w, TYPE_INSTANT, thread_uuid(t));
        put_name(w, in->name);
        put_args(w, in->args, in->arg_count);
        event_end(w, ts, 0);
    }
}

static void emit_counter(writer *w) {
    const loupe_counter_sample *c = &w->m->counters[w->ci++];
    int added;
    uint64_t k = itab_get(w, &w->ctab, c->name, 0, 0, &added);
    event_begin(w, TYPE_COUNTER, thread_uuid(w->m->thread_count + (size_t)(k - 1)));
    if (c->is_double) {
        loupe__pb_double(&w->ev, TE_DOUBLE_COUNTER, c->d); /* field 44, double */
    } else {
        loupe__pb_int(&w->ev, TE_COUNTER_VALUE, c->i); /* field 30, int64 */
    }
    event_end(w, c->ts_ns, 0);
}

typedef struct hitem {
    uint64_t ts;
    size_t src; /* a thread index, or thread_count for the counters */
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
    if (src < w->m->thread_count) {
        return thread_next(w, src, ts);
    }
    if (w->ci < w->m->counter_count) {
        *ts = w->m->counters[w->ci].ts_ns;
        return 4;
    }
    return 0;
}

static int cmp_flow_end(const void *pa, const void *pb) {
    const flow_end *a = pa, *b = pb;
    if (a->thread != b->thread) {
        return a->thread < b->thread ? -1 : 1;
    }
    if (a->slice != b->slice) {
        return a->slice < b->slice ? -1 : 1;
    }
    return a->role - b->role;
}

static int prepare(writer *w) {
    const loupe_model *m = w->m;
    w->cur = calloc(m->thread_count + 1, sizeof(*w->cur));
    if (w->cur == NULL) {
        return -1;
    }
    if (m->flow_count > 0) {
        w->fe = malloc(2 * m->flow_count * sizeof(*w->fe));
        if (w->fe == NULL) {
            return -1;
        }
        for (size_t i = 0; i < m->flow_count; i++) {
            const loupe_flow *f = &m->flows[i];
            w->fe[w->fe_count++] = (flow_end){f->from_thread, f->from_slice, 1, f->id};
            w->fe[w->fe_count++] = (flow_end){f->to_thread, f->to_slice, 0, f->id};
        }
        qsort(w->fe, w->fe_count, sizeof(*w->fe), cmp_flow_end);
    }
    size_t j = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        w->cur[t].fi = j;
        while (j < w->fe_count && w->fe[j].thread == t) {
            j++;
        }
        w->cur[t].fend = j;
    }
    for (size_t i = 0; i < m->counter_count; i++) {
        int added;
        itab_get(w, &w->ctab, m->counters[i].name, 1, w->cname_count + 1, &added);
        if (added) {
            const char **nn = realloc(w->cnames, (w->cname_count + 1) * sizeof(*nn));
            if (nn == NULL) {
                return -1;
            }
            w->cnames = nn;
            size_t *np = realloc(w->cproc, (w->cname_count + 1) * sizeof(*np));
            if (np == NULL) {
                return -1;
            }
            w->cproc = np;
            w->cproc[w->cname_count] = m->counters[i].process;
            w->cnames[w->cname_count++] = m->counters[i].name;
        } else if (w->oom) {
            return -1;
        } else if (itab_get(w, &w->ctab, m->counters[i].name, 0, 0, &added) == 0) {
            /* more than INTERN_MAX counter names */
            loupe__err(LOUPE_EUNSUPPORTED, "Perfetto writer: more than %u distinct counter names",
                       INTERN_MAX);
            return -2;
        }
    }
    return w->oom ? -1 : 0;
}

static void writer_free(writer *w) {
    loupe__pb_free(&w->pkt);
    loupe__pb_free(&w->ev);
    loupe__pb_free(&w->in);
    for (int k = 0; k <= IN_KINDS; k++) {
        free(w->tabs[k].e);
    }
    free(w->ctab.e);
    if (w->cur != NULL) {
        for (size_t t = 0; t < w->m->thread_count; t++) {
            free(w->cur[t].stack);
        }
    }
    free(w->cur);
    free(w->fe);
    free(w->cnames);
    free(w->cproc);
}

int loupe__write_perfetto_proto(const loupe_model *m, loupe__sink *s) {
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
    size_t nsrc = m->thread_count + 1;
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
        if (top->src < m->thread_count) {
            emit_thread(&w, top->src, top->what, top->ts);
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
