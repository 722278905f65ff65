/* xplane.c: the XPlane writer: the model as one XSpace (<host>.xplane.pb), the file XProf and
 * TensorBoard's profile plugin open. base/pb.h's protobuf encoding, streamed into the sink;
 * field numbers from openxla/xla:xla/tsl/profiler/protobuf/xplane.proto (proto/xplane.proto);
 * stat names from xla/tsl/profiler/utils/xplane_schema.cc.
 *
 * Layout:
 *   XSpace { planes: "/host:CPU" (id 0), "/device:GPU:<n>" per GPU index (model tracks with kind
 *            LOUPE_TRACK_GPU) of processes[0], then one per (process, device) of the other
 *            processes, numbered after the largest device index, with plane stats
 *            loupe_gpu_process, loupe_gpu_device and pid (XProf keys a device plane by its
 *            number), their lines named "<process name> (<pid>) / <stream>", "/host:metadata",
 * "Task Environment"; hostnames: [host]; warnings: one per thread that dropped events } /host:CPU:
 * one XLine per thread (id = OS tid, name = thread name, or for an unnamed one the name line_name()
 * gives it) and a line "_counters_" holding the counter samples (event name = counter, stat
 * "value"), then one "CPU samples <tid>" line per sampled thread ("CPU samples" at the end of this
 *            file, with the frames' event metadata and the stack table); plane stats
 *            profile_start_time / profile_stop_time (ns since the Unix epoch), events_recorded,
 *            events_dropped, unmatched_ends, loupe_version, clock, tsc_ghz, pid, process_id (int64,
 *            as jax), process_name, and loupe_thread_<tid>_{recorded,dropped,capacity_needed}
 *            per line, _unnamed = 1 for a line named here (GPU planes: theirs).
 *            Threads of other processes than processes[0] and async tracks' lanes: lines of
 *            their own after the largest tid, with loupe_line_<id>_* and loupe_process_<k>_*
 *            plane stats ("processes" below, lines_prepare()).
 *   /host:metadata: loupe_version (str_value) and process_id, where jax writes its versions.
 *   Task Environment: profile_start_time, profile_stop_time (uint64, as XLA writes them),
 *            profile_options (a ProfileOptions, bytes) and the user metadata
 *            (loupe_set_metadata) as str_value stats.
 * Times: line timestamp_ns is relative to the session start, as jax.profiler's post-processed
 * files hold it (jax-ml/jax#26288): xprof computes timestamp_ns * 1000 in
 * int64, which overflows for epoch times (checked with xprof 2.24: events land 2.9e12 µs off).
 * The wall-clock start is profile_start_time. A file of a run of several files (loupe record's
 * process tree, MPI ranks, a capture's hosts: metadata loupe_clock_base_unix_ns) counts its line
 * timestamps from the run's base instead, its clock corrected (loupe__model_timeline_shift(),
 * the host plane's stat loupe_timeline_shift_ns says by how much; the reader takes it off): XProf
 * lines up the files of a run by their times as they are, so its multi-host view of the ranks is
 * aligned where each file counted from its own start put them 13 ms apart (4 Open MPI ranks).
 * Events: offset_ps from the line's timestamp_ns
 * (the line's first event), duration_ps; per line in start order (outer before inner).
 * Metadata: event metadata deduplicated per plane by (name, category, instant, function), ids
 * from 1 in order of first use; its own stats carry what is per name: loupe_category (ref),
 * loupe_instant = 1, loupe_function = 1. Stat metadata deduplicated per plane by name (a bool
 * argument's key gets its own entry, description "loupe:bool"), ids from 1.
 * Arguments: int64_value, uint64_value, double_value, bool as int64_value 0/1 (TraceMe's
 * encoding), strings as ref_value (an XStatMetadata named by the string: XProf resolves it,
 * repeated values are stored once). Per event: loupe_truncated = 1; a step (integer step_num
 * argument) gets XProf's root marker _r = 1 (is_step()); flow ends are XProf's producer and
 * consumer stats _pt/_p and _ct/_c (put_flow_stats(); older loupe files hold loupe_flow_out /
 * loupe_flow_in, which the reader still reads); in a file whose model has no flows, an MPI
 * message end (arg mpi_send_id / mpi_recv_id) also gets XProf's stat flow (put_message_flow()).
 * Strings are valid UTF-8 (protobuf's string type): invalid bytes become U+FFFD, as in JSON.
 *
 * Two passes: the first assigns metadata ids and sizes every line and plane (protobuf prefixes
 * each nested message with its length), the second writes. Memory: the metadata tables and one
 * size per line, not per event. A protobuf message must stay under 2 GiB (INT32_MAX bytes; jax
 * wrote a 0-byte file and reported success): a larger XSpace written to a file is split by time
 * into parts that each fit (write_parts()); into memory it is refused before any byte is
 * written (LOUPE_EUNSUPPORTED).
 */
#include "export/writers.h"

#include "base/b64.h"
#include "base/error.h"
#include "base/hash.h"
#include "base/pb.h"
#include "base/utf8.h"
#include "model/merge.h"
#include "model/tracks.h"

#include <loupe/loupe.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t loupe__xplane_limit = 0x7fffffffu;

/* ---- protobuf encoding: a counting or writing stream ---- */

typedef struct pb {
    loupe__sink *s; /* NULL: count only */
    uint64_t n;     /* bytes emitted (or counted) */
} pb;

/* The encoding is base/pb.h's (loupe__pb_put_*_at, loupe__pb_*_size); this stream only adds
 * the counting mode and the sink. */
static void put_varint(pb *p, uint64_t v) {
    if (p->s == NULL) {
        p->n += loupe__pb_varint_size(v);
        return;
    }
    uint8_t b[10];
    size_t n = loupe__pb_put_varint_at(b, v);
    loupe__put(p->s, (const char *)b, n);
    p->n += n;
}

static void put_tag(pb *p, unsigned field, int wire) {
    put_varint(p, loupe__pb_key(field, wire));
}

static void put_u64f(pb *p, unsigned field, uint64_t v) {
    put_tag(p, field, PB_VARINT);
    put_varint(p, v);
}

static void put_double(pb *p, unsigned field, double d) {
    put_tag(p, field, PB_I64);
    if (p->s == NULL) {
        p->n += 8;
        return;
    }
    uint64_t u;
    memcpy(&u, &d, 8);
    uint8_t b[8];
    loupe__pb_put_fixed64_at(b, u);
    loupe__put(p->s, (const char *)b, 8);
    p->n += 8;
}

static void sink_put(void *ctx, const char *s, size_t n) {
    loupe__put(ctx, s, n);
}

/* A string field: invalid UTF-8 replaced by U+FFFD (base/utf8.h), as in JSON. */
static void put_str(pb *p, unsigned field, const char *str) {
    size_t n = strlen(str);
    size_t len = loupe__utf8_sanitize(str, n, NULL, NULL);
    put_tag(p, field, PB_LEN);
    put_varint(p, len);
    if (p->s != NULL) {
        if (len == n) {
            loupe__put(p->s, str, n);
        } else {
            loupe__utf8_sanitize(str, n, sink_put, p->s);
        }
    }
    p->n += len;
}

static void put_len(pb *p, unsigned field, uint64_t len) {
    put_tag(p, field, PB_LEN);
    put_varint(p, len);
}

/* ---- per-plane metadata tables (open addressing, keyed by interned pointers) ---- */

enum { EM_INSTANT = 1, EM_FUNCTION = 2 };

typedef struct emeta {
    const char *name, *category;
    unsigned kind; /* EM_* bits */
} emeta;

typedef struct smeta {
    const char *name;
    int is_bool;
} smeta;

typedef struct table {
    size_t *slots; /* id (index + 1) or 0 */
    size_t cap;
    void *items; /* emeta or smeta, by id - 1 */
    size_t count, items_cap, item_size;
    emeta last; /* eid(): the last key looked up, and its id (0: none) */
    size_t last_id;
} table;

static uint64_t hash_ptr(const void *a, const void *b, unsigned k) {
    uint64_t h = (uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)(uintptr_t)b + k) * 0xC2B2AE3D27D4EB4Full;
    return h ^ (h >> 29);
}

static uint64_t hash_str(const char *s, unsigned k) {
    uint64_t h = loupe__hash_str(s) ^ ((uint64_t)k * 0x9E3779B97F4A7C15ull);
    return h ^ (h >> 29);
}

static int item_eq(const table *t, size_t idx, const void *key) {
    if (t->item_size == sizeof(emeta)) {
        const emeta *a = (const emeta *)t->items + idx, *b = key;
        return a->name == b->name && a->category == b->category && a->kind == b->kind;
    }
    const smeta *a = (const smeta *)t->items + idx, *b = key;
    return a->is_bool == b->is_bool && strcmp(a->name, b->name) == 0;
}

static uint64_t item_hash(const table *t, const void *key) {
    if (t->item_size == sizeof(emeta)) {
        const emeta *e = key;
        return hash_ptr(e->name, e->category, e->kind);
    }
    const smeta *s = key;
    return hash_str(s->name, (unsigned)s->is_bool);
}

/* The id of key (from 1), added when missing; 0 on out-of-memory. */
static size_t table_id(table *t, const void *key) {
    if ((t->count + 1) * 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 256;
        size_t *ns = calloc(nc, sizeof(*ns));
        if (ns == NULL) {
            return 0;
        }
        for (size_t i = 0; i < t->count; i++) {
            size_t j = (size_t)item_hash(t, (char *)t->items + i * t->item_size) & (nc - 1);
            while (ns[j] != 0) {
                j = (j + 1) & (nc - 1);
            }
            ns[j] = i + 1;
        }
        free(t->slots);
        t->slots = ns;
        t->cap = nc;
    }
    size_t j = (size_t)item_hash(t, key) & (t->cap - 1);
    while (t->slots[j] != 0) {
        if (item_eq(t, t->slots[j] - 1, key)) {
            return t->slots[j];
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (t->count == t->items_cap) {
        size_t nc = t->items_cap ? t->items_cap * 2 : 64;
        void *ni = realloc(t->items, nc * t->item_size);
        if (ni == NULL) {
            return 0;
        }
        t->items = ni;
        t->items_cap = nc;
    }
    memcpy((char *)t->items + t->count * t->item_size, key, t->item_size);
    t->slots[j] = ++t->count;
    return t->count;
}

static void table_free(table *t) {
    free(t->slots);
    free(t->items);
    memset(t, 0, sizeof(*t));
}

/* ---- the writer ---- */

typedef struct flow_end {
    size_t thread, slice;
    uint64_t id;
    int in; /* 0 = out (the source), 1 = in */
} flow_end;

typedef struct plane_spec {
    const char *name;
    int kind;        /* P_HOST, P_GPU, P_META, P_ENV */
    uint32_t device; /* the model's device index (P_GPU) */
    size_t process;  /* the GPU tracks' process (P_GPU) */
} plane_spec;

enum { P_HOST, P_GPU, P_META, P_ENV };

/* Per-thread plane stats: loupe_thread_<tid>_{recorded,dropped,capacity_needed,unnamed}. */
enum { ACCT = 4 };

typedef struct writer {
    const loupe_model *m;
    table em, sm; /* the current plane's tables */
    flow_end *flows;
    size_t nflows;
    uint64_t *line_size; /* per thread (+1: the counters line) */
    int oom;
    int range;           /* a time beyond int64 picoseconds */
    char **acct;         /* per thread: the names of its ACCT plane stats */
    struct xsamples *xs; /* the CPU samples' lines, frames and stack table (NULL: none) */
    /* Processes (lines_prepare()): per thread its first line id (a host thread of processes[0]:
     * its tid) and its line count (an async track: one per lane, others 1); the name of a line
     * of another process or an async track (NULL: line_name()). */
    uint64_t *line_id;
    uint32_t *lanes;
    char **lname;
    char **keys; /* the plane-stat names of process_stats(), malloc'd */
    size_t nkeys;
    uint64_t max_line_id; /* over every thread's lines (GPU tracks: their tid) */
    uint64_t lo, hi;      /* the part being written: the events that start in [lo, hi) ns */
    uint64_t tshift;      /* added to every line's timestamp_ns: the run's timeline (Times) */
} writer;

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void samples_lines(writer *w, pb *p);
static void samples_stats(writer *w, pb *p);
static void samples_emeta(writer *w, pb *p);
static int samples_prepare(writer *w);
static void samples_free(writer *w);

static size_t sid(writer *w, const char *name, int is_bool) {
    smeta k = {name, is_bool};
    size_t id = table_id(&w->sm, &k);
    w->oom |= id == 0;
    return id;
}

static size_t eid(writer *w, const char *name, const char *category, unsigned kind) {
    table *t = &w->em;
    if (t->last_id != 0 && t->last.name == name && t->last.category == category &&
        t->last.kind == kind) {
        return t->last_id; /* runs of the same name: no hash lookup */
    }
    emeta k = {name, category, kind};
    size_t id = table_id(t, &k);
    t->last = k;
    t->last_id = id;
    w->oom |= id == 0;
    return id;
}

/* XStat { metadata_id 1; one value } as a nested message of field `field`. */
typedef struct stat_val {
    int type; /* 2 double, 3 uint64, 4 int64, 7 ref */
    uint64_t u;
    double d;
} stat_val;

static void put_stat(pb *p, unsigned field, uint64_t mid, stat_val v) {
    uint64_t body =
        loupe__pb_uint_size(1, mid) +
        (v.type == 2 ? loupe__pb_fixed64_size(2) : loupe__pb_uint_size((uint32_t)v.type, v.u));
    put_len(p, field, body);
    put_u64f(p, 1, mid);
    if (v.type == 2) {
        put_double(p, 2, v.d);
    } else {
        put_u64f(p, (unsigned)v.type, v.u);
    }
}

static stat_val arg_val(writer *w, const loupe_arg *a) {
    switch (a->type) {
    case LOUPE_ARG_INT64:
        return (stat_val){4, (uint64_t)a->v.i, 0};
    case LOUPE_ARG_UINT64:
        return (stat_val){3, a->v.u, 0};
    case LOUPE_ARG_DOUBLE:
        return (stat_val){2, 0, a->v.d};
    case LOUPE_ARG_BOOL:
        return (stat_val){4, a->v.b ? 1u : 0u, 0};
    case LOUPE_ARG_STRING:
    default:
        return (stat_val){7, sid(w, a->type == LOUPE_ARG_STRING ? a->v.s : "", 0), 0};
    }
}

static void put_args(writer *w, pb *p, unsigned field, const loupe_arg *args, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t key = sid(w, args[i].key, args[i].type == LOUPE_ARG_BOOL);
        put_stat(p, field, key, arg_val(w, &args[i]));
    }
}

/* One XEvent body. */
typedef struct ev {
    uint64_t start_ns, dur_ns;
    const char *name, *category;
    unsigned kind;
    uint32_t flags;
    const loupe_arg *args;
    size_t nargs;
    const flow_end *flows; /* this slice's flow ends */
    size_t nflows;
    int counter; /* counter sample: stat "value" */
    const loupe_counter_sample *cs;
} ev;

static uint64_t ps(writer *w, uint64_t ns) {
    if (ns > (uint64_t)INT64_MAX / 1000) {
        w->range = 1;
        return 0;
    }
    return ns * 1000;
}

/* A step (LOUPE_STEP: a slice with an integer step_num argument) is an XProf step marker: a
 * root event, stat _r (kIsRoot, root level 1) with step_num, as jax's StepTraceAnnotation
 * writes it (xla/tsl/profiler/utils/xplane_schema.cc). XProf's group_events makes every root
 * event a step group (group_id, step_name "<name> <step_num>") and propagates the group to the
 * events it contains and, through _p/_c, to the events it produced; overview_page and
 * input_pipeline_analyzer then take the step times from these markers. A model that already
 * carries an _r argument (read from a foreign file) keeps its own. */
static int is_step(const ev *e) {
    if (e->kind != 0 || e->counter) {
        return 0;
    }
    int step = 0;
    for (size_t i = 0; i < e->nargs; i++) {
        const loupe_arg *a = &e->args[i];
        if (strcmp(a->key, "_r") == 0) {
            return 0;
        }
        step |= strcmp(a->key, "step_num") == 0 &&
                (a->type == LOUPE_ARG_INT64 || a->type == LOUPE_ARG_UINT64);
    }
    return step;
}

/* Flow ends as XProf's producer/consumer stats (xplane_schema.cc kProducerType "_pt",
 * kProducerId "_p", kConsumerType "_ct", kConsumerId "_c"): type 0 (ContextType kGeneric) once
 * per event and side, then one id per flow end (uint64: loupe's flow ids). XProf's
 * group_events connects a producer to the consumers with the same (type, id), and the trace
 * viewer (trace_viewer@) draws them as flow arrows. The reader maps them back to flows. */
static void put_flow_stats(writer *w, pb *p, const ev *e, int in) {
    int typed = 0;
    for (size_t i = 0; i < e->nflows; i++) {
        if (e->flows[i].in != in) {
            continue;
        }
        if (!typed) {
            put_stat(p, 4, sid(w, in ? "_ct" : "_pt", 0), (stat_val){4, 0, 0});
            typed = 1;
        }
        put_stat(p, 4, sid(w, in ? "_c" : "_p", 0), (stat_val){3, e->flows[i].id, 0});
    }
}

/* An MPI message end (libloupe_mpi.so's args mpi_send_id / mpi_recv_id, src/mpi/pmpi.c) as
 * XProf's flow stat, so a rank's own file shows its messages as flows in XProf's trace viewer:
 * stat "flow" (xplane_schema.h StatType::kFlow) holds class XFlow's encoding, a uint64 with the
 * direction in bits 0-1 (kFlowIn 1, kFlowOut 2), the flow id in bits 2-57 (56 bits: loupe's
 * 64-bit message ids are cut to their low 56) and the ContextType in bits 58-63 (0, kGeneric).
 * XProf keeps one flow per event (xplane_to_trace_events' SpecialArguments::flow, the last flow
 * stat wins), so an event with several ends (MPI_Sendrecv, MPI_Waitall) gets the first send, or
 * else the first receive, as its flow; the args keep all of them. The trace viewer's bind_id is
 * a function of the flow id alone, so the flows join across the rank files of one run opened
 * together. Written only while the model has no flows of its own: a merged run (src/model/merge.c)
 * has them as producer/consumer stats, and a second arrow per message would double them. */
static void put_message_flow(writer *w, pb *p, const ev *e) {
    static const char *const keys[2] = {"mpi_send_id", "mpi_recv_id"};
    static const uint64_t dirs[2] = {2u, 1u}; /* XFlow::kFlowOut, XFlow::kFlowIn */
    if (w->m->flow_count > 0) {
        return;
    }
    for (int side = 0; side < 2; side++) {
        for (uint32_t i = 0; i < e->nargs; i++) {
            const loupe_arg *a = &e->args[i];
            if (a->type == LOUPE_ARG_UINT64 && strcmp(a->key, keys[side]) == 0) {
                uint64_t v = ((a->v.u & ((1ull << 56) - 1)) << 2) | dirs[side];
                put_stat(p, 4, sid(w, "flow", 0), (stat_val){3, v, 0});
                return;
            }
        }
    }
}

static void event_body(writer *w, pb *p, const ev *e, uint64_t line_ns) {
    put_u64f(p, 1, eid(w, e->name, e->category, e->kind));
    put_u64f(p, 2, ps(w, e->start_ns - line_ns)); /* oneof: written even when 0 */
    if (e->dur_ns != 0) {
        put_u64f(p, 3, ps(w, e->dur_ns));
    }
    put_args(w, p, 4, e->args, e->nargs);
    if (e->flags & LOUPE_SLICE_TRUNCATED) {
        put_stat(p, 4, sid(w, "loupe_truncated", 0), (stat_val){4, 1, 0});
    }
    if (is_step(e)) {
        put_stat(p, 4, sid(w, "_r", 0), (stat_val){4, 1, 0});
    }
    put_flow_stats(w, p, e, 0);
    put_flow_stats(w, p, e, 1);
    put_message_flow(w, p, e);
    if (e->counter) {
        stat_val v =
            e->cs->is_double ? (stat_val){2, 0, e->cs->d} : (stat_val){4, (uint64_t)e->cs->i, 0};
        put_stat(p, 4, sid(w, "value", 0), v);
        if (e->cs->process != 0) { /* another process's counter; the reader puts it back there */
            put_stat(p, 4, sid(w, "loupe_process", 0), (stat_val){3, e->cs->process, 0});
        }
    }
}

static void put_event(writer *w, pb *p, const ev *e, uint64_t line_ns) {
    if (e->start_ns < w->lo || e->start_ns >= w->hi) {
        return; /* another part's */
    }
    pb c = {NULL, 0};
    event_body(w, &c, e, line_ns);
    if (p->s == NULL) { /* counting: the body once is enough */
        p->n += loupe__pb_len_size(4, c.n);
        return;
    }
    put_len(p, 4, c.n);
    event_body(w, p, e, line_ns);
}

static int cmp_flow_end(const void *pa, const void *pb_) {
    const flow_end *a = pa, *b = pb_;
    if (a->thread != b->thread) {
        return a->thread < b->thread ? -1 : 1;
    }
    if (a->slice != b->slice) {
        return a->slice < b->slice ? -1 : 1;
    }
    return a->in - b->in;
}

/* The first event time of a thread's line: its first slice or instant. */
static uint64_t line_start(const loupe_model_thread *th) {
    uint64_t t = UINT64_MAX;
    if (th->slice_count > 0) {
        t = th->slices[0].start_ns;
    }
    for (size_t i = 0; i < th->instant_count; i++) {
        t = th->instants[i].ts_ns < t ? th->instants[i].ts_ns : t;
    }
    return t == UINT64_MAX ? 0 : t;
}

static uint64_t line_end(const loupe_model_thread *th) {
    uint64_t t = 0;
    for (size_t i = 0; i < th->slice_count; i++) {
        uint64_t e = th->slices[i].start_ns + th->slices[i].dur_ns;
        t = e > t ? e : t;
    }
    for (size_t i = 0; i < th->instant_count; i++) {
        t = th->instants[i].ts_ns > t ? th->instants[i].ts_ns : t;
    }
    return t;
}

/* Every line is named: XProf shows an unnamed line as a bare tid and jax's ProfileData as ''.
 * jax names each thread by its name (the main thread "python"); an unnamed track here is named
 * for what it is: the main thread (tid = pid) by the process name (its comm, /proc/PID/comm),
 * another host thread "thread <tid>", a GPU track "track <tid>". The plane stat
 * loupe_thread_<tid>_unnamed = 1 says the name was given here, so the reader gives the model
 * back its unnamed track. */
static const char *line_name(const loupe_model *m, const loupe_model_thread *th, char *buf,
                             size_t n) {
    if (th->name[0]) {
        return th->name;
    }
    uint64_t pid = m->pid;
    const char *pname = m->process_name;
    if (th->process != 0 && th->process < m->process_count) {
        pid = m->processes[th->process].pid;
        pname = m->processes[th->process].name;
    }
    if (th->kind == LOUPE_TRACK_THREAD && th->tid == pid && pname != NULL && pname[0]) {
        return pname;
    }
    snprintf(buf, n, "%s %llu", th->kind == LOUPE_TRACK_GPU ? "track" : "thread",
             (unsigned long long)th->tid);
    return buf;
}

/* A line of another process than processes[0], or an async track's: its own line ids, names
 * and plane stats (lines_prepare()). GPU tracks stay on their planes. */
/* A track written on a line of its own with loupe_line_<id>_* stats: another process's thread,
 * an async track, or a thread of processes[0] whose tid an earlier thread had (reused: the
 * written tid differs; line ids are tids there, and two threads on one line would merge). */
static int is_special(const loupe_model_thread *th, uint64_t written_tid) {
    return th->kind != LOUPE_TRACK_GPU &&
           (th->process != 0 || th->kind == LOUPE_TRACK_ASYNC || written_tid != th->tid);
}

/* An async track's lane `lane`: the first and last event times of its slices with depth ==
 * lane (its instants go to lane 0). */
static void lane_span(const loupe_model_thread *th, uint32_t lane, uint64_t *t0, uint64_t *t1) {
    uint64_t a = UINT64_MAX, b = 0;
    for (size_t i = 0; i < th->slice_count; i++) {
        const loupe_slice *s = &th->slices[i];
        if (s->depth == lane) {
            a = s->start_ns < a ? s->start_ns : a;
            b = s->start_ns + s->dur_ns > b ? s->start_ns + s->dur_ns : b;
        }
    }
    for (size_t i = 0; lane == 0 && i < th->instant_count; i++) {
        a = th->instants[i].ts_ns < a ? th->instants[i].ts_ns : a;
        b = th->instants[i].ts_ns > b ? th->instants[i].ts_ns : b;
    }
    *t0 = a == UINT64_MAX ? 0 : a;
    *t1 = b;
}

/* XLine body of thread t (of its lane `lane` when async): slices and instants merged in time
 * order (instants after slices that start at the same ns). */
static void line_body(writer *w, pb *p, size_t t, uint32_t lane) {
    const loupe_model_thread *th = &w->m->threads[t];
    int async = th->kind == LOUPE_TRACK_ASYNC;
    uint64_t t0 = line_start(th), end = line_end(th);
    if (async) {
        lane_span(th, lane, &t0, &end);
    }
    put_u64f(p, 1, w->line_id[t] + lane);
    char name[64];
    if (th->kind == LOUPE_TRACK_GPU && th->process != 0 && th->process < w->m->process_count) {
        /* another process's stream, on a device plane of its own: named as its host lines */
        const loupe_model_process *pr = &w->m->processes[th->process];
        char *ln = dup_printf("%s (%llu) / %s", pr->name, (unsigned long long)pr->pid,
                              line_name(w->m, th, name, sizeof name));
        if (ln == NULL) {
            w->oom = 1;
            return;
        }
        put_str(p, 2, ln);
        free(ln);
    } else if (w->lname[t] == NULL) {
        put_str(p, 2, line_name(w->m, th, name, sizeof name));
    } else if (!async) {
        put_str(p, 2, w->lname[t]);
    } else {
        /* "<track> (lane N)": an XLine's events must nest, so each lane is a line */
        size_t n = strlen(w->lname[t]) + 32;
        char *ln = malloc(n);
        if (ln == NULL) {
            w->oom = 1;
            return;
        }
        snprintf(ln, n, "%s (lane %u)", w->lname[t], lane);
        put_str(p, 2, ln);
        free(ln);
    }
    put_u64f(p, 3, t0 + w->tshift);
    if (end > t0) {
        put_u64f(p, 9, ps(w, end - t0));
    }
    /* this thread's flow ends, sorted by slice */
    size_t fe = 0;
    {
        size_t lo = 0, hi = w->nflows;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (w->flows[mid].thread < t) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        fe = lo;
    }
    size_t i = 0, k = 0;
    while (i < th->slice_count || k < th->instant_count) {
        ev e;
        memset(&e, 0, sizeof e);
        if (k >= th->instant_count ||
            (i < th->slice_count && th->slices[i].start_ns <= th->instants[k].ts_ns)) {
            const loupe_slice *s = &th->slices[i];
            e.start_ns = s->start_ns;
            e.dur_ns = s->dur_ns;
            e.name = s->name;
            e.category = loupe_slice_category(w->m, s);
            e.kind = (s->flags & LOUPE_SLICE_FUNCTION) ? EM_FUNCTION : 0;
            e.flags = s->flags;
            e.args = loupe_slice_args(th, i, &e.nargs);
            while (fe < w->nflows && w->flows[fe].thread == t && w->flows[fe].slice < i) {
                fe++;
            }
            size_t f1 = fe;
            while (f1 < w->nflows && w->flows[f1].thread == t && w->flows[f1].slice == i) {
                f1++;
            }
            e.flows = w->flows + fe;
            e.nflows = f1 - fe;
            fe = f1;
            i++;
            if (async && s->depth != lane) {
                continue;
            }
        } else {
            if (async && lane != 0) {
                k++;
                continue;
            }
            const loupe_instant *in = &th->instants[k++];
            e.start_ns = in->ts_ns;
            e.name = in->name;
            e.category = "";
            e.kind = EM_INSTANT;
            e.args = in->args;
            e.nargs = in->arg_count;
        }
        put_event(w, p, &e, t0);
    }
}

static void counters_body(writer *w, pb *p) {
    const loupe_model *m = w->m;
    uint64_t t0 = m->counters[0].ts_ns;
    uint64_t max_id = w->max_line_id;
    /* An id no host thread has: XProf takes the tid from it. */
    put_u64f(p, 1, max_id < (uint64_t)INT64_MAX ? max_id + 1 : 0);
    put_str(p, 2, "_counters_");
    put_u64f(p, 3, t0 + w->tshift);
    for (size_t i = 0; i < m->counter_count; i++) {
        ev e;
        memset(&e, 0, sizeof e);
        e.start_ns = m->counters[i].ts_ns;
        e.name = m->counters[i].name;
        e.category = "";
        e.counter = 1;
        e.cs = &m->counters[i];
        put_event(w, p, &e, t0);
    }
}

static int in_plane(const loupe_model_thread *th, const plane_spec *ps_) {
    return ps_->kind == P_HOST ? th->kind != LOUPE_TRACK_GPU
                               : ps_->kind == P_GPU && th->kind == LOUPE_TRACK_GPU &&
                                     th->device == ps_->device && th->process == ps_->process;
}

static void stat_u64(writer *w, pb *p, const char *name, uint64_t v) {
    put_stat(p, 6, sid(w, name, 0), (stat_val){3, v, 0});
}

static void stat_ref(writer *w, pb *p, const char *name, const char *v) {
    put_stat(p, 6, sid(w, name, 0), (stat_val){7, sid(w, v, 0), 0});
}

/* A str_value (5) plane stat: free text, not a ref (Task Environment reads it back as
 * metadata; jax writes /host:metadata's versions so). */
static void stat_str(writer *w, pb *p, const char *name, const char *v) {
    size_t vl = loupe__utf8_sanitize(v, strlen(v), NULL, NULL);
    size_t mid = sid(w, name, 0);
    put_len(p, 6, loupe__pb_uint_size(1, mid) + loupe__pb_len_size(5, vl));
    put_u64f(p, 1, mid);
    put_str(p, 5, v);
}

/* Task Environment's profile_options: a serialized tensorflow.ProfileOptions as a bytes_value
 * (6), as jax writes it (tsl/profiler/protobuf/profiler_options.proto: version = 5). Only the
 * version: the host and device tracer levels of the session are not in the model, and a
 * guessed level would mislead. */
static void stat_profile_options(writer *w, pb *p) {
    static const unsigned char opts[] = {0x28, 0x01}; /* field 5 (version), varint 1 */
    size_t mid = sid(w, "profile_options", 0);
    put_len(p, 6, loupe__pb_uint_size(1, mid) + loupe__pb_len_size(6, sizeof opts));
    put_u64f(p, 1, mid);
    put_len(p, 6, sizeof opts);
    if (p->s != NULL) {
        loupe__put(p->s, (const char *)opts, sizeof opts);
    }
    p->n += sizeof opts;
}

/* ---- processes: lines of other processes and async tracks ----
 *
 * XProf's trace viewer shows /host:CPU's lines as the threads of one process (one row per line
 * id), so every process's threads go there: a thread of processes[0] keeps line id = tid (the
 * jax-shaped file of a single process is unchanged); a thread of another process, and each lane
 * of an async track (an XLine's events must nest; async slices overlap), gets a line id after
 * the largest tid, named "<process name> (<pid>) / <thread name>" (without the prefix in
 * processes[0]; + " (lane N)" per lane). Plane stats loupe_line_<id>_{pid,process,tid} (and
 * _lane for an async track's lanes) let the reader rebuild (process, tid, kind); with several
 * processes, loupe_process_<k>_{pid,name,host,label,cmdline,parent_pid,rank} keep them, in the
 * model's order (the Chrome writer's loupe_pid_<pid>_* do the same in JSON). */
enum { LK = 4, PK = 7 };

static char *dup_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return NULL;
    }
    char *out = malloc((size_t)n + 1);
    if (out != NULL) {
        va_start(ap, fmt);
        vsnprintf(out, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return out;
}

static int lines_prepare(writer *w) {
    const loupe_model *m = w->m;
    size_t n = m->thread_count;
    w->line_id = calloc(n + 1, sizeof(*w->line_id));
    w->lanes = calloc(n + 1, sizeof(*w->lanes));
    w->lname = calloc(n + 1, sizeof(*w->lname));
    if (w->line_id == NULL || w->lanes == NULL || w->lname == NULL) {
        return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
    }
    size_t nkeys = 0;
    uint64_t max_id = 0;
    uint64_t *wt = loupe__model_written_tids(m, NULL);
    if (wt == NULL) {
        return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
    }
    for (size_t t = 0; t < n; t++) {
        const loupe_model_thread *th = &m->threads[t];
        w->lanes[t] = 1;
        if (!is_special(th, wt[t])) {
            w->line_id[t] = th->tid;
            max_id = th->tid > max_id ? th->tid : max_id;
        }
    }
    uint64_t next = max_id;
    for (size_t t = 0; t < n; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (!is_special(th, wt[t])) {
            continue;
        }
        for (size_t i = 0; th->kind == LOUPE_TRACK_ASYNC && i < th->slice_count; i++) {
            uint32_t d = th->slices[i].depth;
            w->lanes[t] = d >= w->lanes[t] ? d + 1 : w->lanes[t];
        }
        if (next > (uint64_t)INT64_MAX - w->lanes[t] - 1) {
            free(wt);
            return loupe__err(LOUPE_EUNSUPPORTED,
                              "XPlane: no free line id for thread %llu (line ids are int64)",
                              (unsigned long long)th->tid);
        }
        w->line_id[t] = next + 1;
        next += w->lanes[t];
        const loupe_model_process *pr = &m->processes[th->process];
        char buf[64];
        const char *own = th->name[0] ? th->name : line_name(m, th, buf, sizeof buf);
        w->lname[t] = th->process == 0 ? dup_printf("%s", own)
                                       : dup_printf("%s (%llu) / %s", pr->name,
                                                    (unsigned long long)pr->pid, own);
        if (w->lname[t] == NULL) {
            free(wt);
            return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
        }
        nkeys += (size_t)LK * w->lanes[t];
    }
    free(wt);
    w->max_line_id = next;
    size_t np = m->process_count > 1 ? m->process_count : 0;
    nkeys += PK * np;
    if (nkeys == 0) {
        return 0;
    }
    /* the stat names, in the order process_stats() uses them (the tables keep the pointers) */
    if ((w->keys = calloc(nkeys, sizeof(*w->keys))) == NULL) {
        return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
    }
    static const char *const lwhat[LK] = {"pid", "process", "tid", "lane"};
    static const char *const pwhat[PK] = {"pid",     "name",       "host", "label",
                                          "cmdline", "parent_pid", "rank"};
    for (size_t t = 0; t < n; t++) {
        for (uint32_t l = 0; w->lname[t] != NULL && l < w->lanes[t]; l++) {
            for (size_t k = 0; k < LK; k++) {
                w->keys[w->nkeys++] = dup_printf("loupe_line_%llu_%s",
                                                 (unsigned long long)(w->line_id[t] + l), lwhat[k]);
            }
        }
    }
    for (size_t q = 0; q < np; q++) {
        for (size_t k = 0; k < PK; k++) {
            w->keys[w->nkeys++] =
                dup_printf("loupe_process_%llu_%s", (unsigned long long)q, pwhat[k]);
        }
    }
    for (size_t i = 0; i < w->nkeys; i++) {
        if (w->keys[i] == NULL) {
            return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
        }
    }
    return 0;
}

static void lines_free(writer *w) {
    for (size_t t = 0; w->lname != NULL && t < w->m->thread_count; t++) {
        free(w->lname[t]);
    }
    for (size_t i = 0; i < w->nkeys; i++) {
        free(w->keys[i]);
    }
    free(w->keys);
    free(w->lname);
    free(w->lanes);
    free(w->line_id);
}

/* The host plane's stats of lines_prepare(): per special line its pid, process index, tid (and
 * lane), then per process its fields (those unset are left out; rank -1 = not MPI). */
static void process_stats(writer *w, pb *p) {
    const loupe_model *m = w->m;
    size_t k = 0;
    for (size_t t = 0; w->nkeys > 0 && t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        for (uint32_t l = 0; w->lname[t] != NULL && l < w->lanes[t]; l++, k += LK) {
            stat_u64(w, p, w->keys[k], m->processes[th->process].pid);
            stat_u64(w, p, w->keys[k + 1], th->process);
            stat_u64(w, p, w->keys[k + 2], th->tid);
            if (th->kind == LOUPE_TRACK_ASYNC) {
                stat_u64(w, p, w->keys[k + 3], l);
            }
        }
    }
    for (size_t q = 0; k < w->nkeys; q++, k += PK) {
        const loupe_model_process *pr = &m->processes[q];
        stat_u64(w, p, w->keys[k], pr->pid);
        stat_ref(w, p, w->keys[k + 1], pr->name);
        if (pr->host[0]) {
            stat_ref(w, p, w->keys[k + 2], pr->host);
        }
        if (pr->label[0]) {
            stat_ref(w, p, w->keys[k + 3], pr->label);
        }
        if (pr->cmdline[0]) {
            stat_ref(w, p, w->keys[k + 4], pr->cmdline);
        }
        if (pr->parent_pid != 0) {
            stat_u64(w, p, w->keys[k + 5], pr->parent_pid);
        }
        if (pr->rank >= 0) {
            put_stat(p, 6, sid(w, w->keys[k + 6], 0), (stat_val){4, (uint64_t)pr->rank, 0});
        }
    }
}

/* Plane-level stats (field 6). */
static void plane_stats(writer *w, pb *p, const plane_spec *spec) {
    const loupe_model *m = w->m;
    if (spec->kind == P_META) {
        /* jax's /host:metadata: the framework's versions and the process (jaxlib_version,
         * jax_version, process_id); loupe's version stands for the framework's. */
        stat_str(w, p, "loupe_version", LOUPE_VERSION_STRING);
        put_stat(p, 6, sid(w, "process_id", 0), (stat_val){4, m->pid, 0});
        return;
    }
    stat_u64(w, p, "profile_start_time", m->origin_unix_ns);
    stat_u64(w, p, "profile_stop_time", m->origin_unix_ns + m->duration_ns);
    if (spec->kind == P_ENV) {
        stat_profile_options(w, p);
        for (size_t i = 0; i < m->metadata_count; i++) {
            stat_str(w, p, m->metadata[i].key, m->metadata[i].value);
        }
        return;
    }
    uint64_t rec = 0, drop = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        if (in_plane(&m->threads[t], spec)) {
            rec += m->threads[t].events_recorded;
            drop += m->threads[t].events_dropped;
        }
    }
    stat_u64(w, p, "events_recorded", rec);
    stat_u64(w, p, "events_dropped", drop);
    if (spec->kind == P_HOST) {
        stat_ref(w, p, "loupe_version", LOUPE_VERSION_STRING);
        stat_ref(w, p, "clock", m->clock ? m->clock : "");
        put_stat(p, 6, sid(w, "tsc_ghz", 0), (stat_val){2, 0, m->tsc_ghz});
        stat_u64(w, p, "pid", m->pid);
        put_stat(p, 6, sid(w, "process_id", 0), (stat_val){4, m->pid, 0}); /* as jax */
        stat_ref(w, p, "process_name", m->process_name ? m->process_name : "");
        stat_u64(w, p, "unmatched_ends", m->unmatched_ends);
        if (w->tshift != 0) {
            stat_u64(w, p, "loupe_timeline_shift_ns", w->tshift);
        }
        samples_stats(w, p);
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (!in_plane(th, spec)) {
            continue;
        }
        stat_u64(w, p, w->acct[ACCT * t], th->events_recorded);
        stat_u64(w, p, w->acct[ACCT * t + 1], th->events_dropped);
        stat_u64(w, p, w->acct[ACCT * t + 2], th->capacity_needed);
        if (th->name[0] == 0) {
            stat_u64(w, p, w->acct[ACCT * t + 3], 1);
        }
    }
    if (spec->kind == P_HOST) {
        process_stats(w, p);
    }
    if (spec->kind == P_GPU && spec->process != 0 && spec->process < m->process_count) {
        /* another process's device: whose (the reader's loupe_gpu_*), and its pid for a reader
         * of the file alone */
        stat_u64(w, p, "loupe_gpu_process", spec->process);
        stat_u64(w, p, "loupe_gpu_device", spec->device);
        stat_u64(w, p, "pid", m->processes[spec->process].pid);
    }
}

static void emeta_body(writer *w, pb *p, size_t id, const emeta *e) {
    put_u64f(p, 1, id);
    put_str(p, 2, e->name);
    if (e->category[0]) {
        put_stat(p, 5, sid(w, "loupe_category", 0), (stat_val){7, sid(w, e->category, 0), 0});
    }
    if (e->kind & EM_INSTANT) {
        put_stat(p, 5, sid(w, "loupe_instant", 0), (stat_val){4, 1, 0});
    }
    if (e->kind & EM_FUNCTION) {
        put_stat(p, 5, sid(w, "loupe_function", 0), (stat_val){4, 1, 0});
    }
}

static void smeta_body(pb *p, size_t id, const smeta *s) {
    put_u64f(p, 1, id);
    put_str(p, 2, s->name);
    if (s->is_bool) {
        put_str(p, 3, "loupe:bool");
    }
}

/* The XPlane body. In the counting pass (p->s NULL) it assigns the ids and fills line_size. */
static void plane_body(writer *w, pb *p, const plane_spec *spec, int64_t id) {
    const loupe_model *m = w->m;
    put_u64f(p, 1, (uint64_t)id);
    put_str(p, 2, spec->name);
    for (size_t t = 0; t < m->thread_count && (spec->kind == P_HOST || spec->kind == P_GPU); t++) {
        if (!in_plane(&m->threads[t], spec)) {
            continue;
        }
        if (m->threads[t].kind == LOUPE_TRACK_ASYNC) {
            for (uint32_t l = 0; l < w->lanes[t]; l++) { /* sized again: no size per lane kept */
                pb c = {NULL, 0};
                line_body(w, &c, t, l);
                put_len(p, 3, c.n);
                line_body(w, p, t, l);
            }
            continue;
        }
        if (p->s == NULL) {
            pb c = {NULL, 0};
            line_body(w, &c, t, 0);
            w->line_size[t] = c.n;
        }
        put_len(p, 3, w->line_size[t]);
        line_body(w, p, t, 0);
    }
    if (spec->kind == P_HOST && m->counter_count > 0) {
        if (p->s == NULL) {
            pb c = {NULL, 0};
            counters_body(w, &c);
            w->line_size[m->thread_count] = c.n;
        }
        put_len(p, 3, w->line_size[m->thread_count]);
        counters_body(w, p);
    }
    if (spec->kind == P_HOST) {
        samples_lines(w, p);
    }
    plane_stats(w, p, spec);
    /* event metadata first: its stats may add stat metadata */
    for (size_t i = 0; i < w->em.count; i++) {
        const emeta *e = (const emeta *)w->em.items + i;
        pb c = {NULL, 0};
        emeta_body(w, &c, i + 1, e);
        uint64_t entry = loupe__pb_uint_size(1, i + 1) + loupe__pb_len_size(2, c.n);
        put_len(p, 4, entry);
        put_u64f(p, 1, i + 1);
        put_len(p, 2, c.n);
        emeta_body(w, p, i + 1, e);
    }
    if (spec->kind == P_HOST) {
        samples_emeta(w, p); /* before the stat metadata: the frames' stats add to it */
    }
    for (size_t i = 0; i < w->sm.count; i++) {
        const smeta *s = (const smeta *)w->sm.items + i;
        pb c = {NULL, 0};
        smeta_body(&c, i + 1, s);
        uint64_t entry = loupe__pb_uint_size(1, i + 1) + loupe__pb_len_size(2, c.n);
        put_len(p, 5, entry);
        put_u64f(p, 1, i + 1);
        put_len(p, 2, c.n);
        smeta_body(p, i + 1, s);
    }
}

/* XSpace.warnings (3): one per thread that dropped events (jax-ml/jax's XSpace.warnings use). */
static void put_warnings(const loupe_model *m, pb *p) {
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->events_dropped > 0) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "loupe: thread %llu dropped %llu events (buffer_events %llu would have held "
                     "them)",
                     (unsigned long long)th->tid, (unsigned long long)th->events_dropped,
                     (unsigned long long)th->capacity_needed);
            put_str(p, 3, msg);
        }
    }
}

/* ---- the XSpace, whole or in parts ---- */

typedef struct space {
    const plane_spec *planes;
    size_t nplanes;
    table *tables;        /* per plane its event and stat metadata (2 each) */
    uint64_t *plane_size; /* per plane */
    const char *host;
} space;

/* The counting pass over the events in [w->lo, w->hi): assigns the metadata ids, sizes every
 * line and plane; *total = the XSpace's bytes. */
static int space_count(writer *w, space *sp, uint64_t *total) {
    *total = 0;
    for (size_t i = 0; i < sp->nplanes; i++) {
        table_free(&sp->tables[2 * i]);
        table_free(&sp->tables[2 * i + 1]);
        w->em = (table){.item_size = sizeof(emeta)};
        w->sm = (table){.item_size = sizeof(smeta)};
        pb c = {NULL, 0};
        plane_body(w, &c, &sp->planes[i], (int64_t)i);
        sp->tables[2 * i] = w->em;
        sp->tables[2 * i + 1] = w->sm;
        memset(&w->em, 0, sizeof w->em);
        memset(&w->sm, 0, sizeof w->sm);
        sp->plane_size[i] = c.n;
        *total += loupe__pb_len_size(1, c.n);
        if (w->oom) {
            return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
        }
    }
    pb c = {NULL, 0};
    put_str(&c, 4, sp->host);
    put_warnings(w->m, &c);
    *total += c.n;
    if (w->range) {
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "XPlane: a time or duration is beyond int64 picoseconds (106 days)");
    }
    return 0;
}

/* The writing pass, after space_count() over the same window. */
static int space_write(writer *w, space *sp, loupe__sink *s) {
    pb p = {s, 0};
    for (size_t i = 0; i < sp->nplanes; i++) {
        w->em = sp->tables[2 * i];
        w->sm = sp->tables[2 * i + 1];
        put_len(&p, 1, sp->plane_size[i]);
        plane_body(w, &p, &sp->planes[i], (int64_t)i);
        memset(&w->em, 0, sizeof w->em);
        memset(&w->sm, 0, sizeof w->sm);
    }
    put_warnings(w->m, &p);
    put_str(&p, 4, sp->host);
    return w->oom ? loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory") : 0;
}

/* The most bytes of one XSpace: protobuf's 2 GiB, or LOUPE_TEST_XPLANE_PART_BYTES (a test's
 * way to split a small trace; a value that is no positive number is ignored). */
static uint64_t part_limit(void) {
    const char *e = getenv("LOUPE_TEST_XPLANE_PART_BYTES");
    if (e != NULL && e[0] >= '1' && e[0] <= '9') {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end == 0 && v < loupe__xplane_limit) {
            return v;
        }
    }
    return loupe__xplane_limit;
}

/* Part k (from 2) of the file whose temporary is tmp ("<x>.xplane.pb.tmp"): "<x>.part<k>
 * .xplane.pb" (+ ".tmp" when tmp_too). malloc'd; NULL on OOM. */
static char *part_path(const char *tmp, unsigned k, int tmp_too) {
    size_t n = strlen(tmp);
    if (n > 4 && strcmp(tmp + n - 4, ".tmp") == 0) {
        n -= 4;
    }
    if (n > 10 && memcmp(tmp + n - 10, ".xplane.pb", 10) == 0) {
        n -= 10;
    }
    return dup_printf("%.*s.part%u.xplane.pb%s", (int)n, tmp, k, tmp_too ? ".tmp" : "");
}

/* Removes parts from..: those of an earlier write of this file, or this one's after a failure. */
static void remove_parts(const char *path, unsigned from) {
    for (unsigned k = from; k < 100000; k++) {
        char *pp = part_path(path, k, 0);
        int gone = pp == NULL || unlink(pp) != 0;
        free(pp);
        if (gone) {
            return;
        }
    }
}

/* The start times of every event (slices, instants, counters, samples), as a histogram of
 * PART_BUCKETS buckets over [t0, t0 + PART_BUCKETS * width): the parts' boundaries are bucket
 * edges. */
enum { PART_BUCKETS = 1 << 16 };

typedef struct hist {
    uint64_t t0, width, total;
    uint64_t *n;
} hist;

static void hist_span(const loupe_model *m, uint64_t *lo, uint64_t *hi) {
    uint64_t a = UINT64_MAX, b = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        for (size_t i = 0; i < th->slice_count; i++) {
            a = th->slices[i].start_ns < a ? th->slices[i].start_ns : a;
            b = th->slices[i].start_ns > b ? th->slices[i].start_ns : b;
        }
        for (size_t i = 0; i < th->instant_count; i++) {
            a = th->instants[i].ts_ns < a ? th->instants[i].ts_ns : a;
            b = th->instants[i].ts_ns > b ? th->instants[i].ts_ns : b;
        }
    }
    for (size_t i = 0; i < m->counter_count; i++) {
        a = m->counters[i].ts_ns < a ? m->counters[i].ts_ns : a;
        b = m->counters[i].ts_ns > b ? m->counters[i].ts_ns : b;
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        a = m->samples[i].ts_ns < a ? m->samples[i].ts_ns : a;
        b = m->samples[i].ts_ns > b ? m->samples[i].ts_ns : b;
    }
    *lo = a == UINT64_MAX ? 0 : a;
    *hi = b < *lo ? *lo : b;
}

static void hist_add(hist *h, uint64_t t) {
    h->n[(t - h->t0) / h->width]++;
    h->total++;
}

static int hist_build(const loupe_model *m, hist *h) {
    uint64_t lo, hi;
    hist_span(m, &lo, &hi);
    h->t0 = lo;
    h->width = (hi - lo) / PART_BUCKETS + 1;
    h->total = 0;
    h->n = calloc(PART_BUCKETS, sizeof(*h->n));
    if (h->n == NULL) {
        return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        for (size_t i = 0; i < th->slice_count; i++) {
            hist_add(h, th->slices[i].start_ns);
        }
        for (size_t i = 0; i < th->instant_count; i++) {
            hist_add(h, th->instants[i].ts_ns);
        }
    }
    for (size_t i = 0; i < m->counter_count; i++) {
        hist_add(h, m->counters[i].ts_ns);
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        hist_add(h, m->samples[i].ts_ns);
    }
    return 0;
}

/* Boundaries of nparts parts with about as many events each: b[0] = 0, b[nparts] = the end,
 * b[k] the first bucket edge where k / nparts of the events are before it. */
static void hist_cuts(const hist *h, unsigned nparts, uint64_t *b) {
    b[0] = 0;
    uint64_t seen = 0;
    unsigned k = 1;
    for (size_t i = 0; i < PART_BUCKETS && k < nparts; i++) {
        seen += h->n[i];
        while (k < nparts && seen * nparts >= h->total * k) {
            b[k++] = h->t0 + (i + 1) * h->width;
        }
    }
    while (k < nparts) {
        b[k++] = UINT64_MAX;
    }
    b[nparts] = UINT64_MAX;
}

/* A trace over the limit, written to a file: split by time into parts that each fit, part 1
 * into s (the file "<x>.xplane.pb" the caller names), part k into "<x>.part<k>.xplane.pb"
 * (written as .tmp and renamed, like the first). Every event is in exactly one part, the one
 * its start falls in; each part is a whole XSpace (every plane, line and plane stat, the
 * metadata its events use), so XProf opens each one on its own and loupe's reader reads them
 * all back as one trace (src/import/xplane.c). The number of parts: ceil(total / limit), then
 * a quarter more per try until every part fits; none fits (all the events in
 * one bucket, or the planes' fixed part alone over the limit): LOUPE_EUNSUPPORTED. */
static int write_parts(writer *w, space *sp, loupe__sink *s, uint64_t total, uint64_t limit) {
    hist h;
    int rc = hist_build(w->m, &h);
    if (rc != 0) {
        return rc;
    }
    unsigned nparts = (unsigned)((total + limit - 1) / limit), found = 0;
    uint64_t *b = NULL, part = 0;
    /* a quarter more parts per try: a few dozen counting passes at most, not 4096 */
    for (; nparts <= 4096 && rc == 0 && !found; nparts += nparts / 4 + 1) {
        free(b);
        b = malloc((nparts + 1) * sizeof(*b));
        if (b == NULL) {
            rc = loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
            break;
        }
        hist_cuts(&h, nparts, b);
        found = nparts;
        for (unsigned k = 0; k < nparts && rc == 0; k++) {
            w->lo = b[k];
            w->hi = b[k + 1];
            rc = space_count(w, sp, &part);
            if (rc == 0 && part > limit) {
                found = 0;
                break;
            }
        }
    }
    free(h.n);
    if (rc == 0 && !found) {
        rc = loupe__err(LOUPE_EUNSUPPORTED,
                        "XPlane: the XSpace would take %llu bytes; protobuf messages must be "
                        "under 2 GiB (%llu bytes), and no split into at most 4096 parts by time "
                        "has every part under it, so no .xplane.pb is written (the other formats "
                        "hold the whole trace; loupe convert writes them)",
                        (unsigned long long)total, (unsigned long long)limit);
    }
    unsigned written = 1;
    for (unsigned k = 0; k < found && rc == 0; k++) {
        w->lo = b[k];
        w->hi = b[k + 1];
        if ((rc = space_count(w, sp, &part)) != 0) {
            break;
        }
        if (k == 0) {
            rc = space_write(w, sp, s);
            continue;
        }
        char *tmp = part_path(s->path, k + 1, 1), *dst = part_path(s->path, k + 1, 0);
        loupe__sink ps;
        if (tmp == NULL || dst == NULL) {
            rc = loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
        } else if ((rc = loupe__sink_open_file(&ps, tmp, 0)) == 0) {
            rc = space_write(w, sp, &ps);
            if (rc == 0) {
                rc = loupe__sink_close(&ps);
            } else {
                loupe__sink_discard(&ps);
            }
            if (rc == 0 && rename(tmp, dst) != 0) {
                int e = errno;
                rc = loupe__err(LOUPE_EIO, "cannot write %s: rename from %s: %s (errno %d)", dst,
                                tmp, strerror(e), e);
            }
            if (rc != 0) {
                unlink(tmp);
            } else {
                written = k + 1;
            }
        }
        free(tmp);
        free(dst);
    }
    free(b);
    remove_parts(s->path, rc == 0 ? written + 1 : 2); /* a failure leaves no part behind */
    return rc;
}

/* A GPU plane: a process's device. */
typedef struct gpu_key {
    size_t process;
    uint32_t device;
} gpu_key;

static int cmp_gpu_key(const void *pa, const void *pb_) {
    const gpu_key *a = pa, *b = pb_;
    if (a->process != b->process) {
        return a->process < b->process ? -1 : 1;
    }
    return a->device < b->device ? -1 : a->device > b->device;
}

int loupe__write_xplane(const loupe_model *m, loupe__sink *s) {
    writer w;
    memset(&w, 0, sizeof w);
    w.m = m;
    w.tshift = loupe__model_timeline_shift(m);
    int rc = 0;
    /* planes: /host:CPU, /device:GPU:<n> by n, Task Environment */
    size_t nplanes = 0;
    plane_spec *planes = calloc(m->thread_count + 3, sizeof(*planes));
    gpu_key *devs = calloc(m->thread_count + 1, sizeof(*devs));
    char(*gpu_names)[32] = calloc(m->thread_count + 1, sizeof(*gpu_names));
    table *tables = calloc((m->thread_count + 3) * 2, sizeof(table));
    uint64_t *plane_size = calloc(m->thread_count + 3, sizeof(uint64_t));
    w.line_size = calloc(m->thread_count + 1, sizeof(uint64_t));
    w.acct = calloc(ACCT * m->thread_count + 1, sizeof(char *));
    if (planes == NULL || devs == NULL || gpu_names == NULL || tables == NULL ||
        plane_size == NULL || w.line_size == NULL || w.acct == NULL) {
        rc = loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
        goto done;
    }
    if ((rc = lines_prepare(&w)) != 0) {
        goto done;
    }
    for (size_t t = 0; t < ACCT * m->thread_count; t++) {
        static const char *const what[ACCT] = {"recorded", "dropped", "capacity_needed", "unnamed"};
        char k[96];
        /* keyed by line id: a thread of processes[0] by its tid, as before processes */
        snprintf(k, sizeof k, "loupe_thread_%llu_%s", (unsigned long long)w.line_id[t / ACCT],
                 what[t % ACCT]);
        if ((w.acct[t] = strdup(k)) == NULL) {
            rc = loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
            goto done;
        }
    }
    planes[nplanes++] = (plane_spec){"/host:CPU", P_HOST, 0, 0};
    size_t ndev = 0;
    uint32_t max_dev = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->kind == LOUPE_TRACK_GPU) {
            devs[ndev++] = (gpu_key){th->process, th->device};
            max_dev = th->device > max_dev ? th->device : max_dev;
        }
    }
    qsort(devs, ndev, sizeof(*devs), cmp_gpu_key);
    /* processes[0]'s device n is "/device:GPU:n"; another process's devices are numbered after
     * the largest device index (XProf keys a device plane by its number: two planes with one
     * name would be one device), and the plane stats loupe_gpu_process / loupe_gpu_device say
     * whose device it is (gpu_plane_stats()) */
    uint64_t next_num = (uint64_t)max_dev + 1;
    for (size_t i = 0; i < ndev; i++) {
        if (i > 0 && devs[i].process == devs[i - 1].process &&
            devs[i].device == devs[i - 1].device) {
            continue;
        }
        uint64_t num = devs[i].process == 0 ? devs[i].device : next_num++;
        snprintf(gpu_names[i], sizeof gpu_names[i], "/device:GPU:%llu", (unsigned long long)num);
        planes[nplanes++] = (plane_spec){gpu_names[i], P_GPU, devs[i].device, devs[i].process};
    }
    planes[nplanes++] = (plane_spec){"/host:metadata", P_META, 0, 0};
    planes[nplanes++] = (plane_spec){"Task Environment", P_ENV, 0, 0};
    /* flow ends, sorted by (thread, slice) */
    if (m->flow_count > 0) {
        w.flows = malloc(2 * m->flow_count * sizeof(*w.flows));
        if (w.flows == NULL) {
            rc = loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
            goto done;
        }
        for (size_t f = 0; f < m->flow_count; f++) {
            const loupe_flow *fl = &m->flows[f];
            w.flows[w.nflows++] = (flow_end){fl->from_thread, fl->from_slice, fl->id, 0};
            w.flows[w.nflows++] = (flow_end){fl->to_thread, fl->to_slice, fl->id, 1};
        }
        qsort(w.flows, w.nflows, sizeof(*w.flows), cmp_flow_end);
    }
    if ((rc = samples_prepare(&w)) != 0) {
        goto done;
    }
    const char *host = m->host && m->host[0] ? m->host : "localhost";
    space sp = {planes, nplanes, tables, plane_size, host};
    w.lo = 0;
    w.hi = UINT64_MAX;
    uint64_t total = 0;
    if ((rc = space_count(&w, &sp, &total)) != 0) {
        goto done;
    }
    uint64_t limit = part_limit();
    if (total > limit && s->f != NULL && s->path != NULL) {
        rc = write_parts(&w, &sp, s, total, limit);
        goto done;
    }
    if (total > limit) {
        rc = loupe__err(LOUPE_EUNSUPPORTED,
                        "XPlane: the XSpace would take %llu bytes; protobuf messages must be "
                        "under 2 GiB (%llu bytes), so no .xplane.pb is written (the other "
                        "formats hold the whole trace; loupe convert writes them)",
                        (unsigned long long)total, (unsigned long long)limit);
        goto done;
    }
    rc = space_write(&w, &sp, s);
    if (rc == 0 && s->f != NULL && s->path != NULL) {
        remove_parts(s->path, 2); /* an earlier write's parts would be read with this file */
    }
done:
    for (size_t i = 0; tables != NULL && i < (m->thread_count + 3) * 2; i++) {
        table_free(&tables[i]);
    }
    table_free(&w.em);
    table_free(&w.sm);
    for (size_t t = 0; w.acct != NULL && t < ACCT * m->thread_count; t++) {
        free(w.acct[t]);
    }
    free(w.acct);
    lines_free(&w);
    samples_free(&w);
    free(tables);
    free(plane_size);
    free(w.line_size);
    free(w.flows);
    free(planes);
    free(devs);
    free(gpu_names);
    return rc;
}

/* ---- CPU samples (loupe's convention: XProf has no sampled-profile viewer) ----
 *
 * In /host:CPU, after the threads' lines and "_counters_": one XLine per sampled thread, named
 * "CPU samples <tid>" (with " (<thread name>)" when it has one), id max tid + 2 + k (ids no
 * thread line has: XProf's trace viewer makes each line id a row, so a sample line sharing its
 * thread's id would nest its events into the zones). One event per sample, in time order:
 * metadata = the innermost frame (so the trace viewer names the sample by the function it hit),
 * duration = the sampling period (1 µs when unknown), cut at the thread's next sample; stats
 * tid (uint64), cpu (uint64, absent when unknown), stack (ref: "outer;...;inner", the folded
 * form) and loupe_stack (uint64: the leaf's index in loupe_stack_nodes; absent with no stack).
 * Frames: XEventMetadata ids after the zones' (first frame id = zones' count + 1, in the model's
 * frame order), name = function, stats loupe_frame (int64: the frame index), file (ref), line
 * (int64), inlined (int64 1), module (ref), module_offset (uint64), each only when set; a sample
 * with no stack has the metadata after the frames, named "[no stack]". Plane stats:
 * loupe_sample_period_ns, loupe_samples_lost (uint64), loupe_stack_nodes (bytes: per node in
 * order the varints parent + 1 (0 = outermost) and frame index) and loupe_off_cpu (bytes: per
 * thread with intervals the varints line id (its tid in processes[0]), count, then start_ns and
 * dur_ns per interval) and, when an interval's kind is known, loupe_off_cpu_kinds (bytes: one per
 * interval of loupe_off_cpu, in its order: the loupe_off_cpu_kind, 0 unknown, 1 waiting, 2
 * preempted; a stat of its own so that loupe_off_cpu reads as before). Each of the three is a
 * str_value holding the base64 (RFC 4648 §4) of those bytes, since 0.5: jax's ProfileData reads
 * every stat as text (stat_b64); the reader takes 0.4's bytes_values too. */

typedef struct xsamples {
    size_t *order;   /* sample indices by (thread, ts) */
    size_t *line_at; /* per sample line: its first entry in order (nlines + 1 entries) */
    size_t nlines;
    uint64_t *line_size;
    char **stack;         /* per stack node: "outer;...;inner", malloc'd (NULL until needed) */
    uint32_t *path;       /* stack_str()'s work list */
    unsigned char *nodes; /* loupe_stack_nodes */
    size_t nodes_len;
    unsigned char *off; /* loupe_off_cpu */
    size_t off_len;
    unsigned char *kinds; /* loupe_off_cpu_kinds */
    size_t nkinds;
    int any_kind; /* an interval of a known kind: loupe_off_cpu_kinds is written */
    uint64_t line_id0;
    size_t fbase; /* frame f's metadata id is fbase + 1 + f */
} xsamples;

typedef struct sample_key {
    size_t thread;
    uint64_t ts_ns;
    size_t index;
} sample_key;

static int cmp_sample_key(const void *pa, const void *pb_) {
    const sample_key *a = pa, *b = pb_;
    if (a->thread != b->thread) {
        return a->thread < b->thread ? -1 : 1;
    }
    if (a->ts_ns != b->ts_ns) {
        return a->ts_ns < b->ts_ns ? -1 : 1;
    }
    return a->index < b->index ? -1 : a->index > b->index;
}

/* loupe_stack_nodes' parent: index + 1, 0 for the outermost frame. */
static uint64_t node_parent(const loupe_stack_node *sn) {
    return sn->parent == UINT32_MAX ? 0 : (uint64_t)sn->parent + 1u;
}

static size_t varints_at(unsigned char *dst, size_t at, uint64_t v) {
    if (dst == NULL) {
        return at + loupe__pb_varint_size(v);
    }
    return at + loupe__pb_put_varint_at(dst + at, v);
}

/* The stack string of node k: its parent's, ";", its function (memoised per node; the nodes
 * without one are built outermost first, through xs->path). NULL on OOM. */
static const char *stack_str(writer *w, uint32_t k) {
    xsamples *xs = w->xs;
    const loupe_model *m = w->m;
    size_t n = 0;
    for (uint32_t top = k; top != UINT32_MAX && top < m->stack_node_count &&
                           xs->stack[top] == NULL && n < m->stack_node_count;
         top = m->stack_nodes[top].parent) {
        xs->path[n++] = top;
    }
    for (size_t i = n; i-- > 0;) {
        uint32_t node = xs->path[i];
        uint32_t par = m->stack_nodes[node].parent;
        const char *up = par < m->stack_node_count ? xs->stack[par] : NULL;
        uint32_t fi = m->stack_nodes[node].frame;
        const char *fn = fi < m->frame_count ? m->frames[fi].function : "";
        size_t pl = up != NULL ? strlen(up) + 1 : 0, fl = strlen(fn);
        char *str = malloc(pl + fl + 1);
        if (str == NULL) {
            w->oom = 1;
            return NULL;
        }
        if (up != NULL) {
            memcpy(str, up, pl - 1);
            str[pl - 1] = ';';
        }
        memcpy(str + pl, fn, fl + 1);
        xs->stack[node] = str;
    }
    return xs->stack[k];
}

static int samples_prepare(writer *w) {
    const loupe_model *m = w->m;
    if (m->sample_count == 0 && m->frame_count == 0 && m->sample_period_ns == 0 &&
        m->samples_lost == 0) {
        return 0;
    }
    xsamples *xs = calloc(1, sizeof *xs);
    if (xs == NULL) {
        return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
    }
    w->xs = xs;
    xs->order = malloc((m->sample_count + 1) * sizeof(size_t));
    xs->line_at = malloc((m->sample_count + 1) * sizeof(size_t));
    xs->line_size = calloc(m->sample_count + 1, sizeof(uint64_t));
    xs->stack = calloc(m->stack_node_count + 1, sizeof(char *));
    xs->path = malloc((m->stack_node_count + 1) * sizeof(uint32_t));
    sample_key *keys = malloc((m->sample_count + 1) * sizeof(sample_key));
    if (xs->order == NULL || xs->line_at == NULL || xs->line_size == NULL || xs->stack == NULL ||
        xs->path == NULL || keys == NULL) {
        free(keys);
        return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        keys[i] = (sample_key){m->samples[i].thread, m->samples[i].ts_ns, i};
    }
    qsort(keys, m->sample_count, sizeof(sample_key), cmp_sample_key);
    for (size_t i = 0; i < m->sample_count; i++) {
        xs->order[i] = keys[i].index;
    }
    free(keys);
    for (size_t i = 0; i < m->sample_count; i++) {
        if (i == 0 || m->samples[xs->order[i]].thread != m->samples[xs->order[i - 1]].thread) {
            xs->line_at[xs->nlines++] = i;
        }
    }
    xs->line_at[xs->nlines] = m->sample_count;
    uint64_t max_id = w->max_line_id;
    xs->line_id0 = max_id < (uint64_t)INT64_MAX - m->sample_count - 2 ? max_id + 2 : 0;
    for (uint32_t k = 0; k < m->stack_node_count; k++) {
        const loupe_stack_node *sn = &m->stack_nodes[k];
        xs->nodes_len = varints_at(NULL, xs->nodes_len, node_parent(sn));
        xs->nodes_len = varints_at(NULL, xs->nodes_len, sn->frame);
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->off_cpu_count == 0 || th->kind == LOUPE_TRACK_GPU) {
            continue;
        }
        xs->off_len = varints_at(NULL, xs->off_len, w->line_id[t]);
        xs->off_len = varints_at(NULL, xs->off_len, th->off_cpu_count);
        for (size_t i = 0; i < th->off_cpu_count; i++) {
            xs->off_len = varints_at(NULL, xs->off_len, th->off_cpu[i].start_ns);
            xs->off_len = varints_at(NULL, xs->off_len, th->off_cpu[i].dur_ns);
            xs->any_kind |= th->off_cpu[i].kind != LOUPE_OFF_CPU_UNKNOWN;
        }
        xs->nkinds += th->off_cpu_count;
    }
    xs->nodes = malloc(xs->nodes_len + 1);
    xs->off = malloc(xs->off_len + 1);
    xs->kinds = malloc(xs->nkinds + 1);
    if (xs->nodes == NULL || xs->off == NULL || xs->kinds == NULL) {
        return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
    }
    size_t at = 0;
    for (uint32_t k = 0; k < m->stack_node_count; k++) {
        at = varints_at(xs->nodes, at, node_parent(&m->stack_nodes[k]));
        at = varints_at(xs->nodes, at, m->stack_nodes[k].frame);
    }
    at = 0;
    size_t nk = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        if (th->off_cpu_count == 0 || th->kind == LOUPE_TRACK_GPU) {
            continue;
        }
        at = varints_at(xs->off, at, w->line_id[t]);
        at = varints_at(xs->off, at, th->off_cpu_count);
        for (size_t i = 0; i < th->off_cpu_count; i++) {
            at = varints_at(xs->off, at, th->off_cpu[i].start_ns);
            at = varints_at(xs->off, at, th->off_cpu[i].dur_ns);
            xs->kinds[nk++] = (unsigned char)th->off_cpu[i].kind;
        }
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        uint32_t k = m->samples[i].stack;
        if (k < m->stack_node_count && stack_str(w, k) == NULL) {
            return loupe__err(LOUPE_ENOMEM, "XPlane writer: out of memory");
        }
    }
    return 0;
}

static void samples_free(writer *w) {
    xsamples *xs = w->xs;
    if (xs == NULL) {
        return;
    }
    for (size_t k = 0; xs->stack != NULL && k < w->m->stack_node_count; k++) {
        free(xs->stack[k]);
    }
    free(xs->stack);
    free(xs->path);
    free(xs->order);
    free(xs->line_at);
    free(xs->line_size);
    free(xs->nodes);
    free(xs->off);
    free(xs->kinds);
    free(xs);
    w->xs = NULL;
}

static void sample_event(writer *w, pb *p, size_t i, uint64_t next_ns, int has_next,
                         uint64_t line_ns) {
    const loupe_model *m = w->m;
    const loupe_sample *s = &m->samples[i];
    int stacked = s->stack < m->stack_node_count;
    uint64_t frame = stacked ? m->stack_nodes[s->stack].frame : m->frame_count;
    uint64_t dur = m->sample_period_ns != 0 ? m->sample_period_ns : 1000;
    if (has_next && next_ns - s->ts_ns < dur) {
        dur = next_ns - s->ts_ns;
    }
    put_u64f(p, 1, w->xs->fbase + 1 + frame);
    put_u64f(p, 2, ps(w, s->ts_ns - line_ns));
    if (dur != 0) {
        put_u64f(p, 3, ps(w, dur));
    }
    put_stat(p, 4, sid(w, "tid", 0), (stat_val){3, m->threads[s->thread].tid, 0});
    if (w->lname[s->thread] != NULL) { /* another process's thread: the tid alone is ambiguous */
        put_stat(p, 4, sid(w, "loupe_line", 0), (stat_val){3, w->line_id[s->thread], 0});
    }
    if (s->cpu != UINT32_MAX) {
        put_stat(p, 4, sid(w, "cpu", 0), (stat_val){3, s->cpu, 0});
    }
    if (stacked) {
        put_stat(p, 4, sid(w, "stack", 0), (stat_val){7, sid(w, w->xs->stack[s->stack], 0), 0});
        put_stat(p, 4, sid(w, "loupe_stack", 0), (stat_val){3, s->stack, 0});
    }
}

static void sample_line_body(writer *w, pb *p, size_t l) {
    const loupe_model *m = w->m;
    xsamples *xs = w->xs;
    size_t a = xs->line_at[l], b = xs->line_at[l + 1];
    const loupe_sample *first = &m->samples[xs->order[a]];
    const loupe_model_thread *th = &m->threads[first->thread];
    uint64_t t0 = first->ts_ns;
    put_u64f(p, 1, xs->line_id0 + l);
    char name[160];
    snprintf(name, sizeof name, th->name[0] ? "CPU samples %llu (%s)" : "CPU samples %llu",
             (unsigned long long)th->tid, th->name);
    put_str(p, 2, name);
    put_u64f(p, 3, t0 + w->tshift);
    uint64_t end = m->samples[xs->order[b - 1]].ts_ns;
    if (end > t0) {
        put_u64f(p, 9, ps(w, end - t0));
    }
    for (size_t j = a; j < b; j++) {
        size_t i = xs->order[j];
        if (m->samples[i].ts_ns < w->lo || m->samples[i].ts_ns >= w->hi) {
            continue; /* another part's */
        }
        int has_next = j + 1 < b;
        uint64_t next_ns = has_next ? m->samples[xs->order[j + 1]].ts_ns : 0;
        pb c = {NULL, 0};
        sample_event(w, &c, i, next_ns, has_next, t0);
        put_len(p, 4, c.n);
        if (p->s != NULL) {
            sample_event(w, p, i, next_ns, has_next, t0);
        } else {
            p->n += c.n;
        }
    }
}

static void samples_lines(writer *w, pb *p) {
    xsamples *xs = w->xs;
    if (xs == NULL) {
        return;
    }
    xs->fbase = w->em.count; /* the zones' metadata are all assigned by now */
    for (size_t l = 0; l < xs->nlines; l++) {
        if (p->s == NULL) {
            pb c = {NULL, 0};
            sample_line_body(w, &c, l);
            xs->line_size[l] = c.n;
        }
        put_len(p, 3, xs->line_size[l]);
        sample_line_body(w, p, l);
    }
}

/* A binary payload as a str_value (5) of its base64 (base/b64.h): jax's ProfileData decodes
 * every stat's bytes as UTF-8, and raised UnicodeDecodeError on these as bytes_values (loupe
 * 0.4 wrote them so; the reader takes both). */
static void stat_b64(writer *w, pb *p, const char *name, const unsigned char *b, size_t n) {
    size_t mid = sid(w, name, 0), el = loupe__b64_len(n);
    put_len(p, 6, loupe__pb_uint_size(1, mid) + loupe__pb_len_size(5, el));
    put_u64f(p, 1, mid);
    put_len(p, 5, el);
    if (p->s != NULL) {
        char buf[4096];
        for (size_t i = 0; i < n; i += 3072) {
            size_t k = n - i < 3072 ? n - i : 3072;
            loupe__b64_encode(buf, b + i, k);
            loupe__put(p->s, buf, loupe__b64_len(k));
        }
    }
    p->n += el;
}

static void samples_stats(writer *w, pb *p) {
    xsamples *xs = w->xs;
    if (xs == NULL) {
        return;
    }
    stat_u64(w, p, "loupe_sample_period_ns", w->m->sample_period_ns);
    stat_u64(w, p, "loupe_samples_lost", w->m->samples_lost);
    if (xs->line_id0 != 0) {
        /* the first samples line's id: the reader takes a line for samples by its id, so a
         * thread that is named "CPU samples ..." stays a thread (found by fuzz_xplane) */
        stat_u64(w, p, "loupe_samples_line0", xs->line_id0);
    }
    stat_b64(w, p, "loupe_stack_nodes", xs->nodes, xs->nodes_len);
    if (xs->off_len > 0) {
        stat_b64(w, p, "loupe_off_cpu", xs->off, xs->off_len);
    }
    if (xs->any_kind) {
        stat_b64(w, p, "loupe_off_cpu_kinds", xs->kinds, xs->nkinds);
    }
}

static void frame_body(writer *w, pb *p, size_t id, size_t f) {
    const loupe_model *m = w->m;
    put_u64f(p, 1, id);
    if (f >= m->frame_count) {
        put_str(p, 2, "[no stack]");
        return;
    }
    const loupe_frame *fr = &m->frames[f];
    put_str(p, 2, fr->function);
    put_stat(p, 5, sid(w, "loupe_frame", 0), (stat_val){4, f, 0});
    if (fr->file[0]) {
        put_stat(p, 5, sid(w, "file", 0), (stat_val){7, sid(w, fr->file, 0), 0});
    }
    if (fr->line != 0) {
        put_stat(p, 5, sid(w, "line", 0), (stat_val){4, fr->line, 0});
    }
    if (fr->inlined) {
        put_stat(p, 5, sid(w, "inlined", 0), (stat_val){4, 1, 0});
    }
    if (fr->module[0]) {
        put_stat(p, 5, sid(w, "module", 0), (stat_val){7, sid(w, fr->module, 0), 0});
    }
    if (fr->module_offset != 0) {
        put_stat(p, 5, sid(w, "module_offset", 0), (stat_val){3, fr->module_offset, 0});
    }
}

/* The frames' metadata and "[no stack]" (written also when no sample uses it: the ids stay
 * fbase + 1 + f either way). */
static void samples_emeta(writer *w, pb *p) {
    xsamples *xs = w->xs;
    if (xs == NULL) {
        return;
    }
    for (size_t f = 0; f <= w->m->frame_count; f++) {
        size_t id = xs->fbase + 1 + f;
        pb c = {NULL, 0};
        frame_body(w, &c, id, f);
        uint64_t entry = loupe__pb_uint_size(1, id) + loupe__pb_len_size(2, c.n);
        put_len(p, 4, entry);
        put_u64f(p, 1, id);
        put_len(p, 2, c.n);
        frame_body(w, p, id, f);
    }
}
