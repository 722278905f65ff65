/* loupe/model.h: the trace model, the one shape every door in and out of loupe shares.
 *
 * The collector builds a model at loupe_stop_trace(); readers build one from a file; writers and
 * `loupe summary` walk one. A model is an immutable snapshot once built: a process with threads
 * (tracks); each thread holds its slices in start order (a parent before its children, so depth
 * follows from the order), its instants; the process holds counters, flows and metadata.
 *
 * Units: every timestamp and duration is in nanoseconds relative to the trace origin
 * (origin_unix_ns, the session start as wall-clock time).
 * Strings: every `const char *` points into the model's own string storage (interned: equal
 * strings share one pointer). Lifetime: until loupe_model_free().
 * Thread-safety: a model may be read from any number of threads; building one is single-threaded.
 */
#ifndef LOUPE_MODEL_H
#define LOUPE_MODEL_H

#include <loupe/export.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loupe_arg_type {
    LOUPE_ARG_INT64 = 1,
    LOUPE_ARG_UINT64 = 2,
    LOUPE_ARG_DOUBLE = 3,
    LOUPE_ARG_BOOL = 4,
    LOUPE_ARG_STRING = 5
} loupe_arg_type;

/** A typed argument of a slice or instant. */
typedef struct loupe_arg {
    const char *key;
    loupe_arg_type type;
    union {
        int64_t i;
        uint64_t u;
        double d;
        int b;
        const char *s;
    } v;
} loupe_arg;

enum {
    LOUPE_SLICE_TRUNCATED = 1 << 0, /* still open at the stop (or its end was lost); ended there */
    LOUPE_SLICE_FUNCTION = 1 << 1   /* from -finstrument-functions */
};

/** A zone, once recorded: a slice on its thread's track. */
typedef struct loupe_slice {
    uint64_t start_ns;
    uint64_t dur_ns;
    const char *name;
    const char *category; /* "" when none */
    uint32_t depth;       /* 0 = top level on its track */
    uint32_t flags;       /* LOUPE_SLICE_* */
    uint32_t arg_count;
    loupe_arg *args; /* arg_count entries, owned by the model */
} loupe_slice;

typedef struct loupe_instant {
    uint64_t ts_ns;
    const char *name;
    uint32_t arg_count;
    loupe_arg *args;
} loupe_instant;

/** What a track stands for. */
typedef enum loupe_track_kind {
    LOUPE_TRACK_THREAD = 0, /* a host thread (tid = OS thread id) */
    LOUPE_TRACK_GPU = 1     /* a GPU track (device = GPU index; tid = a per-device track id) */
} loupe_track_kind;

/** One track (a host thread, or a GPU track): properly nested slices. */
typedef struct loupe_model_thread {
    uint64_t tid;
    loupe_track_kind kind;
    uint32_t device;  /* GPU index for LOUPE_TRACK_GPU, 0 otherwise */
    const char *name; /* "" when unnamed */
    size_t slice_count;
    loupe_slice *slices; /* by start_ns ascending; for equal starts, parents first */
    size_t instant_count;
    loupe_instant *instants;
    uint64_t events_recorded;
    uint64_t events_dropped;
    uint64_t capacity_needed; /* 0 when unknown (a trace loupe did not write) */
} loupe_model_thread;

/** A sample of a process-scoped counter track. */
typedef struct loupe_counter_sample {
    uint64_t ts_ns;
    const char *name;
    int is_double; /* value in d when non-zero, in i otherwise */
    int64_t i;
    double d;
} loupe_counter_sample;

/** A flow arrow from a slice to a slice (on any threads). Indices into threads[] and their
 * slices[]. */
typedef struct loupe_flow {
    uint64_t id;
    size_t from_thread, from_slice;
    size_t to_thread, to_slice;
} loupe_flow;

typedef struct loupe_kv {
    const char *key;
    const char *value;
} loupe_kv;

typedef struct loupe_model {
    uint64_t pid;
    const char *process_name;
    const char *host;
    uint64_t origin_unix_ns; /* wall-clock time of ts 0; 0 when unknown */
    uint64_t duration_ns;    /* the traced wall time (session start to stop) */
    const char *clock;       /* "tsc" or "monotonic" (or what a reader found) */
    double tsc_ghz;          /* TSC frequency used, 0 when not the TSC */
    size_t thread_count;
    loupe_model_thread *threads;
    size_t counter_count;
    loupe_counter_sample *counters; /* by ts_ns */
    size_t flow_count;
    loupe_flow *flows;
    size_t metadata_count;
    loupe_kv *metadata;
    uint64_t unmatched_ends;  /* ends without a begin or out of order: ignored, counted */
    uint64_t truncated_zones; /* slices with LOUPE_SLICE_TRUNCATED */
    /* What a reader dropped, repaired or doubted, one sentence each, naming the input and where
     * ("x.json: byte 120: the input ends inside event 2; 2 events read, the rest (30 bytes)
     * dropped"). At most 65 (the 65th says how many more there were). 0 / NULL for a model from
     * loupe_stop_trace() or a clean file. Owned by the model (strings in its storage). */
    size_t warning_count;
    const char **warnings;
    void *loupe__arena;       /* private: the storage every pointer above points into */
} loupe_model;

/** Frees a model and everything it owns. NULL is allowed. */
LOUPE_API void loupe_model_free(loupe_model *m);

/** Events recorded / dropped over every thread. */
LOUPE_API uint64_t loupe_model_events_recorded(const loupe_model *m);
LOUPE_API uint64_t loupe_model_events_dropped(const loupe_model *m);

#ifdef __cplusplus
}
#endif
#endif
