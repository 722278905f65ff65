/* loupe/model.h: the trace model, the one shape every door in and out of loupe shares.
 *
 * The collector builds a model at loupe_stop_trace(); readers build one from a file; writers and
 * `loupe summary` walk one. A model is an immutable snapshot once built: a process with threads
 * (tracks); each thread holds its slices in start order (a parent before its children, so depth
 * follows from the order), their arguments beside them (slice_args: loupe_slice_args()), its
 * instants; the process holds counters, flows and metadata, and the model the slices'
 * categories (loupe_slice_category()).
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
    LOUPE_SLICE_FUNCTION = 1 << 1,  /* from -finstrument-functions */
    /* The slice has arguments (loupe_slice_args()). Set by the model when it is built; the
     * builder ignores it where a reader or the collector sets it, and writers do not write it. */
    LOUPE_SLICE_HAS_ARGS = 1 << 2
};

/** A zone, once recorded: a slice on its thread's track. 32 bytes (since 0.4.0; 56 before): a
 * trace holds one per zone, so this is the model's memory per event x 2. The arguments live
 * beside the slices, in the track's slice_args (loupe_slice_args()), and the category is an
 * index into the model's categories (loupe_slice_category()). */
typedef struct loupe_slice {
    uint64_t start_ns;
    uint64_t dur_ns;
    const char *name;
    uint32_t depth;    /* 0 = top level on its track */
    uint16_t flags;    /* LOUPE_SLICE_* */
    uint16_t category; /* index into loupe_model.categories; 0 = none ("") */
} loupe_slice;

/** The arguments of one slice of a track (loupe_model_thread.slice_args). */
typedef struct loupe_slice_arglist {
    size_t slice;    /* index into the track's slices */
    size_t count;    /* >= 1 */
    loupe_arg *args; /* count entries, owned by the model */
} loupe_slice_arglist;

typedef struct loupe_instant {
    uint64_t ts_ns;
    const char *name;
    uint32_t arg_count;
    loupe_arg *args;
} loupe_instant;

/** What a track stands for. */
typedef enum loupe_track_kind {
    LOUPE_TRACK_THREAD = 0, /* a host thread (tid = OS thread id) */
    LOUPE_TRACK_GPU = 1,    /* a GPU track (device = GPU index; tid = a per-device track id) */
    /* Slices that may overlap (Perfetto's async tracks, Chrome JSON's b/e events; loupe's async
     * slices, begun and ended by id on any threads): depth is the lane a slice was put in (the
     * lowest free one, in start order), not a nesting level. tid = the track's own id. */
    LOUPE_TRACK_ASYNC = 2
} loupe_track_kind;

/** Why a thread was off the CPU during an interval (loupe_interval.kind). */
typedef enum loupe_off_cpu_kind {
    /* Not known: a trace written before loupe told the kinds apart, a foreign one, or a kernel
     * older than Linux 4.17 (which has no PERF_RECORD_MISC_SWITCH_OUT_PREEMPT bit). */
    LOUPE_OFF_CPU_UNKNOWN = 0,
    /* Switched out voluntarily: blocked on a lock, I/O or a condition, or sleeping (the
     * kernel's PERF_RECORD_SWITCH switch-out record without the preempt bit). */
    LOUPE_OFF_CPU_WAITING = 1,
    /* Switched out while runnable (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT set on the switch-out,
     * linux/perf_event.h; what `perf sched` calls preemption): the thread wanted the CPU and
     * another task had it (a loaded machine, a CPU shared with another thread). */
    LOUPE_OFF_CPU_PREEMPTED = 2
} loupe_off_cpu_kind;

/** A time interval on a track (ns from the origin). kind: for an off-CPU interval
 * (loupe_model_thread.off_cpu), why the thread was off the CPU. */
typedef struct loupe_interval {
    uint64_t start_ns;
    uint64_t dur_ns;
    loupe_off_cpu_kind kind;
} loupe_interval;

/** One track (a host thread, a GPU track or an async track): slices nested properly, except on
 * an async track. A track belongs to the process processes[process]; (process, tid, kind) is
 * its key: two processes' tracks never merge. */
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
    size_t process;           /* index into loupe_model.processes */
    /* When the thread was off the CPU (switched out: blocked, sleeping, preempted), from the
     * kernel's context-switch records when sampling saw them; by start_ns, never overlapping;
     * each interval's kind says waiting or preempted (two intervals that touch have different
     * kinds: the builder joins those of one kind). 0 / NULL when unknown (then nothing is known
     * about on- vs. off-CPU time). */
    size_t off_cpu_count;
    loupe_interval *off_cpu;
    /* Overlap siblings. A THREAD or GPU track's slices nest properly: a slice that begins inside
     * another and ends after it (foreign Chrome "X" events; CUDA kernels on one stream overlapping
     * under programmatic dependent launch) is moved, whole, with the slices nested in it, to a
     * sibling track: the same process, kind and device, its own tid (one no other track has), and
     * the name "<name> (overlap N)" ("(overlap N)" when the track is unnamed), N = 1, 2, ...
     * sibling = N and sibling_of = the index of the track it was split from; 0 and 0 on every
     * other track. A reader's model gets the same marks back from the names (the builder matches
     * "<name> (overlap N)" to a track named <name> of the same process, kind and device), so the
     * marks survive every format. Busy time over a track and its siblings is the union of their
     * top-level slices (loupe summary). */
    uint32_t sibling;
    size_t sibling_of;
    /* The arguments of the slices that have any (those with LOUPE_SLICE_HAS_ARGS), by slice
     * ascending, one entry per slice: read them with loupe_slice_args(). 0 / NULL when none. */
    size_t slice_arg_count;
    loupe_slice_arglist *slice_args;
} loupe_model_thread;

/** A sample of a process-scoped counter track. */
typedef struct loupe_counter_sample {
    uint64_t ts_ns;
    const char *name;
    int is_double; /* value in d when non-zero, in i otherwise */
    int64_t i;
    double d;
    size_t process; /* index into loupe_model.processes */
} loupe_counter_sample;

/** A process of the trace. processes[0] is the model's own (the one loupe_model.pid,
 * process_name and host describe); a run of several processes (a process tree, MPI ranks) read
 * as one model has one entry per process. */
typedef struct loupe_model_process {
    uint64_t pid;        /* the OS pid; 0 when unknown */
    const char *name;    /* "" when unknown */
    const char *host;    /* "" when unknown */
    const char *label;   /* how to show it beside its name ("rank 3"); "" when none */
    const char *cmdline; /* the command line, arguments separated by spaces; "" when unknown */
    uint64_t parent_pid; /* 0 when unknown */
    int64_t rank;        /* the MPI rank; -1 when not an MPI process */
} loupe_model_process;

/** A code location of a sampled call stack (interned: every distinct location once). */
typedef struct loupe_frame {
    const char *function;   /* symbol (demangled when C++); "" when unknown */
    const char *file;       /* source file; "" when unknown */
    uint32_t line;          /* source line; 0 when unknown */
    uint32_t inlined;       /* non-zero: inlined into the function of its parent stack node */
    const char *module;     /* the ELF file (path) or "[kernel]"; "" when unknown */
    uint64_t module_offset; /* the address relative to the module's load base; 0 when unknown */
} loupe_frame;

/** A node of the call-stack tree (Perfetto's interned callstacks): a frame and its caller. A
 * sample's stack is its leaf node; the parents lead to the outermost frame. */
typedef struct loupe_stack_node {
    uint32_t parent; /* index into stack_nodes; UINT32_MAX at the outermost frame */
    uint32_t frame;  /* index into frames */
} loupe_stack_node;

/** A CPU sample: where a thread was when the sampling clock fired. */
typedef struct loupe_sample {
    uint64_t ts_ns;
    size_t thread;  /* index into threads */
    uint32_t stack; /* leaf index into stack_nodes; UINT32_MAX when no stack was taken */
    uint32_t cpu;   /* the CPU it ran on; UINT32_MAX when unknown */
} loupe_sample;

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
    size_t process_count; /* >= 1 in a finished model */
    loupe_model_process *processes;
    /* CPU samples (by ts_ns) and the interned frames and stack tree they point into. */
    size_t sample_count;
    loupe_sample *samples;
    size_t frame_count;
    loupe_frame *frames;
    size_t stack_node_count;
    loupe_stack_node *stack_nodes;
    uint64_t sample_period_ns; /* the sampling period; 0 when unknown or no samples */
    uint64_t samples_lost;     /* samples the kernel or loupe lost (counted, not in samples) */
    /* The distinct slice categories (loupe_slice.category indexes them; read them with
     * loupe_slice_category()): categories[0] = "" (none), then each once, at most 65535 more
     * (a reader's 65536th distinct category is dropped to none, with a warning). */
    size_t category_count;
    const char **categories;
    void *loupe__arena; /* private: the storage every pointer above points into */
} loupe_model;

/** The arguments of slice `slice` of track `th` (th->slices[slice]): *count entries, NULL and
 * *count = 0 when it has none (or `slice` is past th->slice_count). count may not be NULL.
 * O(1) for a slice without arguments (its LOUPE_SLICE_HAS_ARGS flag is clear), O(log n) over the
 * track's slice_args otherwise (a binary search).
 * Lifetime: the array and its strings belong to the model, valid until loupe_model_free().
 * Thread-safety: any thread (the model is read-only). */
LOUPE_API const loupe_arg *loupe_slice_args(const loupe_model_thread *th, size_t slice,
                                            size_t *count);

/** The category of slice s of model m (m->categories[s->category]): "" when it has none or
 * when the index is past m->category_count (a model built by hand). Never NULL. O(1).
 * Lifetime: the model's string storage, until loupe_model_free().
 * Thread-safety: any thread (the model is read-only). */
LOUPE_API const char *loupe_slice_category(const loupe_model *m, const loupe_slice *s);

/** Frees a model and everything it owns. NULL is allowed. */
LOUPE_API void loupe_model_free(loupe_model *m);

/** Events recorded / dropped over every thread. */
LOUPE_API uint64_t loupe_model_events_recorded(const loupe_model *m);
LOUPE_API uint64_t loupe_model_events_dropped(const loupe_model *m);

/** The counts of a model that a report of a recording gives (what `loupe record` says at the
 * end, per process): zero-initialised by loupe_model_counts_of(). */
typedef struct loupe_model_counts {
    /** Events recorded and dropped, over every thread. */
    uint64_t events_recorded, events_dropped;
    /** CPU samples kept, and lost to a full ring (samples_lost). */
    uint64_t samples, samples_lost;
    /** Of events_dropped: recording calls re-entered (metadata loupe_events_reentered), and lost
     * with a death past the regions' file system (loupe_recover_shm_lost). */
    uint64_t events_reentered, shm_lost;
    /** Function-tracing calls filtered out (metadata loupe_functions_filtered). */
    uint64_t functions_filtered;
    /** The busiest thread's capacity_needed, and the session's: every thread's rounded up to
     * whole chunks of LOUPE_CHUNK_EVENTS (each thread holds whole chunks of the session). */
    uint64_t capacity_needed, session_needed;
    /** The program's threads that recorded: THREAD tracks (not siblings of an overlap split),
     * not named "loupe-*" (loupe's own), with an event or a CPU sample. */
    size_t threads;
    /** Of events_dropped: GPU activity records lost (the GPU tracks' events_dropped: CUPTI
     * dropped them, or they had no timestamps or began outside the session; the trace's
     * "device_tracer" metadata says which). No capacity of loupe's would have kept them. */
    uint64_t gpu_lost;
} loupe_model_counts;

/** Fills *out from m (NULL m or out: nothing). O(threads + samples + metadata); allocates a
 * byte per thread while it runs (without it, a thread's samples alone do not count it).
 * Thread-safety: any thread (the model is read-only). */
LOUPE_API void loupe_model_counts_of(const loupe_model *m, loupe_model_counts *out);

/** The clock correction of model m at its time t_ns (ns from its origin): the ns to add to put
 * that time on its run's reference clock (rank 0's in an MPI run, the capturing machine's in a
 * `loupe capture`), from its metadata loupe_clock_offset_* (docs/mpi.md); 0 when it has none.
 * With a second measurement (loupe_clock_offset_end_ns at loupe_clock_offset_end_at_ns) the
 * offset drifts linearly between the two and is the nearer one's outside them, except when the
 * two differ by no more than their uncertainties together
 * (loupe_clock_offset_start_uncertainty_ns + loupe_clock_offset_end_uncertainty_ns; an older
 * file's loupe_clock_sync_round_trip_ns / 2 and loupe_clock_offset_uncertainty_ns stand in):
 * then the difference may be all error, and the offset is constant, the measurement's with the
 * smaller uncertainty (their mean on a tie). What `loupe summary RUN` and `--by-rank` apply.
 * NULL gives 0. Thread-safety: any thread (the model is read-only). */
LOUPE_API int64_t loupe_model_clock_offset(const loupe_model *m, uint64_t t_ns);

#ifdef __cplusplus
}
#endif
#endif
