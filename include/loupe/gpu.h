/* loupe/gpu.h: in-kernel GPU timelines, host side (plain C, no CUDA needed).
 *
 * A CUDA kernel built with <loupe/cuda/loupe_device.cuh> records named regions into a device
 * buffer of u32 words; the host copies it back and decodes it here: into a loupe_gpu_decoded
 * (traces of events with ns timestamps), into Chrome JSON (Mosaic's layout, one buffer), or onto
 * GPU tracks of the running session (loupe_gpu_session_add). JAX's Mosaic GPU profiler buffers
 * decode too (LOUPE_GPU_LAYOUT_MOSAIC).
 *
 * Buffer layout (all words little-endian u32; docs/gpu.md draws it):
 *   traces = prod(grid) * prod(block) / scope           (scope: 32 = warp, 128 = warpgroup)
 *   trace t = block_linear * traces_per_block + thread_linear / scope owns words [t*E, t*E + E),
 *   block_linear = x + y*gx + z*gx*gy, E = entries_per_trace (header included).
 *   loupe layout, version 1 (H = 9 header words):
 *     0 globaltimer start, low 32 bits     1 %smid        2 attempted (2 x events, not clamped)
 *     3 globaltimer start, high 32 bits    4,5 globaltimer end, low/high
 *     6 %clock at start   7 %clock at end  8 magic LOUPE_GPU_MAGIC | version
 *     9.. {tag, %clock} pairs; tag = id | LOUPE_GPU_TAG_END (end) or | LOUPE_GPU_TAG_INSTANT.
 *   Mosaic layout (jax-ml/jax jax/experimental/mosaic/gpu/profiler.py, H = 3):
 *     0 globaltimer_lo   1 %smid   2 entries used (2 x events)   3.. {tag, %clock} pairs,
 *     tag = id | 1u<<31 for an end (ENTER = 0, EXIT = 1<<31).
 * Clock facts (PTX ISA, "Special Registers"): %clock is a per-SM u32 cycle counter whose rate
 * follows DVFS; %globaltimer is a 64-bit ns timer shared by all SMs (its tick is 32 ns to 1 µs
 * depending on the GPU and driver). So cycles are converted with the rate measured from each
 * launch's (clock, globaltimer) pairs, and traces are aligned to each other by globaltimer only.
 */
#ifndef LOUPE_GPU_H
#define LOUPE_GPU_H

#include <loupe/error.h>
#include <loupe/export.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Format constants shared with loupe_device.cuh (which repeats them: it must not include this
 * header from device code). */
#define LOUPE_GPU_MAGIC 0x4C500000u       /* "LP" in the high half of header word 8 */
#define LOUPE_GPU_VERSION 1u              /* the low half of header word 8 */
#define LOUPE_GPU_HEADER_WORDS 9u         /* H of the loupe layout */
#define LOUPE_GPU_MOSAIC_HEADER_WORDS 3u  /* H of the Mosaic layout */
#define LOUPE_GPU_TAG_END 0x80000000u     /* tag bit 31: a region end (Mosaic's EXIT) */
#define LOUPE_GPU_TAG_INSTANT 0x40000000u /* tag bit 30: an instant (loupe layout only) */
/** Name ids of the loupe layout are below 2^30 (bits 30 and 31 are the kind). */
#define LOUPE_GPU_MAX_NAMES (1u << 30)

typedef enum loupe_gpu_layout {
    LOUPE_GPU_LAYOUT_LOUPE = 0, /* loupe_device.cuh, version 1 */
    LOUPE_GPU_LAYOUT_MOSAIC = 1 /* JAX Mosaic GPU profiler (3-word header, u32 globaltimer) */
} loupe_gpu_layout;

/** What one kernel's buffer holds: chosen on the host, passed to the kernel. */
typedef struct loupe_gpu_spec {
    uint32_t entries_per_trace; /* u32 words per trace, header included (Mosaic's
                                   entries_per_warpgroup) */
    uint32_t scope;             /* threads per trace: 32 (warp) or 128 (warpgroup); 0 = 128 */
    loupe_gpu_layout layout;
} loupe_gpu_spec;

/* ---- names ---------------------------------------------------------------------------- */

/** A table of region names: id i is the i-th name added (ids start at 0). Names are copied.
 * Thread-safety: one thread at a time per table. */
typedef struct loupe_gpu_names loupe_gpu_names;

/** A new table that holds at most max_names names (0 = LOUPE_GPU_MAX_NAMES; larger values are
 * clamped to it). NULL on out-of-memory. Lifetime: until loupe_gpu_names_free(). */
LOUPE_API loupe_gpu_names *loupe_gpu_names_new(uint32_t max_names);
LOUPE_API void loupe_gpu_names_free(loupe_gpu_names *t);
/** Adds a name (or finds it: a name added twice keeps its first id) and stores its id in *id.
 * Errors: LOUPE_EINVALID (NULL), LOUPE_ETOO_MANY_NAMES ("Allocated too many names": the table
 * is full; nothing is added), LOUPE_ENOMEM. */
LOUPE_API int loupe_gpu_names_add(loupe_gpu_names *t, const char *name, uint32_t *id);
/** Adds n names, all or nothing: on any error the table is as before the call.
 * ids may be NULL. Errors as loupe_gpu_names_add(). */
LOUPE_API int loupe_gpu_names_add_many(loupe_gpu_names *t, const char *const *names, size_t n,
                                       uint32_t *ids);
/** The name of an id, or NULL when the table has no such id. Lifetime: the table's. */
LOUPE_API const char *loupe_gpu_names_get(const loupe_gpu_names *t, uint32_t id);
LOUPE_API uint32_t loupe_gpu_names_count(const loupe_gpu_names *t);
/** Reads a names file: one name per line, line i (from 0) is id i; a trailing '\r' is removed.
 * Errors: LOUPE_EIO (path and errno in the detail), LOUPE_ETOO_MANY_NAMES, LOUPE_ENOMEM. */
LOUPE_API int loupe_gpu_names_load(loupe_gpu_names *t, const char *path);

/* ---- decoding ------------------------------------------------------------------------- */

/** Size of a kernel's buffer in bytes: traces x entries_per_trace x 4. 0 when the block size is
 * not a multiple of the scope, a dimension is 0, or the size does not fit in size_t.
 * Thread-safety: any thread. */
LOUPE_API size_t loupe_gpu_buffer_bytes(const loupe_gpu_spec *spec, const uint32_t grid[3],
                                        const uint32_t block[3]);

/** Per-event recording overhead: LOUPE_GPU_OVERHEAD_ESTIMATE (0, the default) = Mosaic's rule:
 * max(0, smallest step between consecutive events of any trace - 1), starting from 12 cycles
 * ("ballpark estimate for H100"); LOUPE_GPU_OVERHEAD_OFF = subtract nothing; > 0 = that many. */
#define LOUPE_GPU_OVERHEAD_ESTIMATE 0
#define LOUPE_GPU_OVERHEAD_OFF (-1)

typedef struct loupe_gpu_decode_options {
    /** Non-zero: any trace that overflowed fails the whole decode with LOUPE_EGPU_OVERFLOW
     * ("Insufficient space to capture a full trace"; the detail names the entries_per_trace that
     * would have held every event), as Mosaic's dump() does. 0: keep every event that fit. */
    int strict;
    /** Cycles subtracted per event (see above). */
    int32_t overhead_cycles;
    /** A backward clock step larger than this many cycles is reported in the warnings; every
     * backward step is clamped to last + 1 cycle. 0 = 10 (Mosaic's threshold). */
    uint32_t backward_warn_cycles;
    /** Cycles per ns when the buffer cannot give it (Mosaic layout; a loupe buffer whose
     * (clock, globaltimer) pairs give a rate outside 0.1..10 GHz). 0 = 1.0 (Mosaic's
     * assumption); otherwise 0.001..1000, else LOUPE_EINVALID. */
    double fallback_ghz;
} loupe_gpu_decode_options;

typedef enum loupe_gpu_event_kind {
    LOUPE_GPU_BEGIN = 0,
    LOUPE_GPU_END = 1,
    LOUPE_GPU_INSTANT = 2
} loupe_gpu_event_kind;

typedef struct loupe_gpu_event {
    uint64_t ts_ns;    /* on the GPU's %globaltimer axis (ns), see loupe_gpu_decoded */
    uint32_t name_id;  /* the tag without its kind bits */
    uint8_t kind;      /* loupe_gpu_event_kind */
    uint8_t synthetic; /* 1: an end the decoder added (an open region closed at the last ts) */
    const char *name;  /* from the names table, or "#<id>" when it has none */
} loupe_gpu_event;

/** One trace: one warp or warpgroup of one block. */
typedef struct loupe_gpu_trace {
    uint32_t index;          /* t (position in the buffer) */
    uint32_t block_linear;   /* x + y*gx + z*gx*gy */
    uint32_t trace_in_block; /* thread_linear / scope */
    uint32_t smid;
    uint64_t gt_start_ns, gt_end_ns; /* globaltimer at start / end (Mosaic: end = last event) */
    uint64_t events_attempted;       /* events the kernel tried to record */
    uint64_t events_recorded;        /* events that fit and were decoded */
    uint64_t events_dropped;         /* attempted - recorded (overflow) */
    int truncated;                   /* non-zero when events were dropped */
    size_t event_count;              /* events[] incl. synthetic ends; B/E properly nested */
    loupe_gpu_event *events;         /* by ts_ns; owned by the decoded result */
} loupe_gpu_trace;

/** A decoded buffer. Lifetime: until loupe_gpu_decoded_free(); names are copied in. */
typedef struct loupe_gpu_decoded {
    loupe_gpu_spec spec;
    uint32_t grid[3], block[3];
    uint32_t traces_per_block;
    size_t trace_count;      /* traces holding data (all-zero, never-written slices are skipped) */
    loupe_gpu_trace *traces; /* sorted by first timestamp, then index */
    size_t traces_empty;     /* slices that were never written (all-zero header) */
    uint64_t events;         /* decoded events, synthetic ends excluded */
    uint64_t events_dropped; /* all traces */
    size_t traces_truncated;
    uint32_t needed_entries;    /* entries_per_trace that would hold every trace: max attempted+H */
    double ghz;                 /* cycles per ns used to convert */
    int ghz_measured;           /* 1: from the buffer's (clock, globaltimer) pairs; 0: fallback */
    uint32_t overhead_cycles;   /* subtracted per event */
    uint64_t backward_steps;    /* clock steps that went backwards (clamped) */
    uint64_t backward_warnings; /* of which larger than backward_warn_cycles */
    uint64_t unmatched_ends;    /* ends that matched no open region: dropped */
    uint64_t unclosed;          /* regions still open at a trace's end (closed there) */
    char *warnings;             /* "" or newline-separated warnings (at most 32 lines kept) */
    void *loupe__priv;
} loupe_gpu_decoded;

/** Decodes a buffer copied back from the device.
 * buffer: n_words u32 words; spec, grid, block: as launched; names may be NULL (ids print as
 * "#<id>"); opts may be NULL (defaults). On success *out is a new result (free it).
 * Errors (detail in loupe_last_error(), exact texts in docs/gpu.md):
 *   LOUPE_EINVALID  a NULL argument, scope not 32/128, a zero dimension, entries_per_trace
 *                   below the header, "Block size is not a multiple of <scope>", a
 *                   fallback_ghz outside 0.001..1000 (other than 0)
 *   LOUPE_EFORMAT   size mismatch, bad magic or version, an odd event count (Mosaic's text)
 *   LOUPE_EGPU_OVERFLOW  strict mode and a trace overflowed (detail names the needed capacity)
 *   LOUPE_ENOMEM
 * Nothing is allocated on error. Thread-safety: any thread (names: read-only during the call). */
LOUPE_API int loupe_gpu_decode(const uint32_t *buffer, size_t n_words, const loupe_gpu_spec *spec,
                               const uint32_t grid[3], const uint32_t block[3],
                               const loupe_gpu_names *names, const loupe_gpu_decode_options *opts,
                               loupe_gpu_decoded **out);
/** Frees a result and everything it owns (events, names, warnings). NULL is allowed. */
LOUPE_API void loupe_gpu_decoded_free(loupe_gpu_decoded *d);

/** Writes one decoded buffer as Chrome JSON in Mosaic's layout: pid = 1 + SM, tid = 1 + trace
 * index, B/E/i events, ts in µs relative to the earliest trace start, plus process/thread names
 * and loss figures in "metadata". A path ending in ".gz" is gzipped. The file is replaced.
 * Errors: LOUPE_EINVALID, LOUPE_EIO (path, errno), LOUPE_ENOMEM. Thread-safety: any thread. */
LOUPE_API int loupe_gpu_write_chrome_json(const loupe_gpu_decoded *d, const char *path);

/* ---- joining a session ---------------------------------------------------------------- */

typedef enum loupe_gpu_tracks {
    LOUPE_GPU_TRACKS_DEFAULT = 0,  /* = LOUPE_GPU_TRACKS_BY_TRACE */
    LOUPE_GPU_TRACKS_BY_SM = 1,    /* "SM <id>"; traces that overlap get extra lines */
    LOUPE_GPU_TRACKS_BY_BLOCK = 2, /* "block <linear>"; extra lines likewise */
    LOUPE_GPU_TRACKS_BY_TRACE = 3  /* "block <b> warpgroup <w>" (or "warp <w>") */
} loupe_gpu_tracks;

typedef struct loupe_gpu_add_options {
    uint32_t device;         /* the GPU index (the "/device:GPU:<n>" process) */
    loupe_gpu_tracks tracks; /* how traces map onto tracks */
    const char *kernel_name; /* names the launch in the track names; NULL = "kernel" */
    /** The launch's earliest block start in CLOCK_REALTIME ns (e.g. CUPTI's kernel start).
     * 0: take it from CUPTI's record of cupti_correlation_id when the session's device tracer
     * saw it; otherwise the launch is placed so that its last event ends at this call (the
     * kernel ended before its buffer was copied back): a lower bound, noted in the metadata. */
    uint64_t launch_start_unix_ns;
    uint32_t cupti_correlation_id;
} loupe_gpu_add_options;

/** Adds a decoded launch to the current session: at loupe_stop_trace() its events become
 * slices and instants on LOUPE_TRACK_GPU tracks (device opts->device), written by every writer.
 * The events are copied; d may be freed after the call. opts may be NULL.
 * Errors: LOUPE_EINVALID, LOUPE_ENOT_STARTED (no session), LOUPE_ENOMEM.
 * Thread-safety: any thread. */
LOUPE_API int loupe_gpu_session_add(const loupe_gpu_decoded *d, const loupe_gpu_add_options *opts);

/** The device tracer's note for the last session started with device_tracer_level 1 (trace.h):
 * "" when CUPTI ran, otherwise why it did not (no CUPTI or no GPU, another CUPTI subscriber
 * such as Nsight, an old CUPTI). The same text is in the trace's "device_tracer" metadata.
 * Lifetime: until the next loupe_start_trace(). Thread-safety: read it while no start runs. */
LOUPE_API const char *loupe_gpu_device_tracer_note(void);

/* ---- timing kernels (the Mosaic GPU profiler's measure()) ------------------------------ */

/** One kernel as CUPTI timed it (CUpti_ActivityKernel10, cupti_activity.h of CUDA 13.0). */
typedef struct loupe_gpu_kernel_timing {
    const char *name;        /* CUPTI's (mangled) kernel name; owned by the result */
    uint64_t start_unix_ns;  /* CUPTI's start, CLOCK_REALTIME ns (loupe registers that clock) */
    uint64_t dur_ns;         /* end - start; 0 when CUPTI had no timing (its 0 timestamps) */
    uint32_t device, stream; /* CUPTI's deviceId and streamId */
    uint32_t correlation_id; /* CUPTI's: increases with the launch order in the process */
    uint32_t grid[3], block[3];
    uint32_t iteration; /* 0-based; an input with LOUPE_GPU_SPLIT_GIVEN, else set by the split */
} loupe_gpu_kernel_timing;

typedef enum loupe_gpu_split {
    /** Mosaic's: the launches are cut into `iterations` equal runs, in launch order; the count
     * must divide and the names repeat in the same order (the errors below). */
    LOUPE_GPU_SPLIT_EVEN = 0,
    /** Each kernel's `iteration` field says which iteration it belongs to (loupe gpu-measure
     * splits by the program's LOUPE_STEP zones); iterations may hold different kernels. */
    LOUPE_GPU_SPLIT_GIVEN = 1
} loupe_gpu_split;

/** warmup: the untimed calls before the measured ones. */
#define LOUPE_GPU_MEASURE_WARMUP_DEFAULT 0 /* one call, as Mosaic's measure() */
#define LOUPE_GPU_MEASURE_NO_WARMUP (-1)

typedef struct loupe_gpu_measure_options {
    /** Timed calls of fn (Mosaic's iterations). Must be >= 1: "iterations=0 must be positive"
     * (Mosaic's ValueError text; a NULL options pointer means 1). */
    int32_t iterations;
    /** Non-zero: keep only the totals per iteration (Mosaic's aggregate=True gives just those);
     * the result's kernels is then NULL. 0: every kernel as well. */
    int aggregate;
    /** Untimed calls first: LOUPE_GPU_MEASURE_WARMUP_DEFAULT (1), LOUPE_GPU_MEASURE_NO_WARMUP, or
     * that many (at most 1000). */
    int32_t warmup;
    /** How the kernels are cut into iterations (loupe_gpu_measure() always splits evenly). */
    loupe_gpu_split split;
} loupe_gpu_measure_options;

/** What a measurement found. Lifetime: until loupe_gpu_measure_result_free(). */
typedef struct loupe_gpu_measure_result {
    uint32_t iterations;
    size_t kernels_per_iteration;     /* even split: launches / iterations; given split: 0 */
    size_t kernel_count;              /* all timed kernels (also when aggregate dropped the list) */
    loupe_gpu_kernel_timing *kernels; /* launch order (correlation id); NULL with aggregate */
    uint64_t *iteration_ns; /* [iterations]: the sum of its kernels' durations (ns; saturates at
                               UINT64_MAX) */
    /** Over the iterations' totals: the smallest, the median (the lower middle of an even count)
     * and the largest, and spread = (max - min) / median ((max - min) / max when the median is
     * 0; 0 when every total is 0). */
    uint64_t min_ns, median_ns, max_ns;
    double spread;
    /** The clock: CUPTI's activity timestamps, which CUPTI takes from the GPU's timer and maps to
     * CLOCK_REALTIME; resolution_ns is the tick those timestamps show (the greatest common
     * divisor of their differences, at most 1 µs; 1 when they show none; 0, unknown, with fewer
     * than two timed kernels, whose start and end show only a duration). */
    const char *clock;
    uint64_t resolution_ns;
    /** "" or newline-separated warnings: a spread above 5% ("iterations spread 7.3% (min ...,
     * median ..., max ...): more than 5%"), a first iteration more than 5% off the median of
     * the others, kernels without timestamps, iterations without a timed kernel ("2 of 6
     * iterations ran no timed kernel: their 0 ns are in the statistics", with
     * LOUPE_GPU_SPLIT_GIVEN). */
    char *warnings;
    void *loupe__priv;
} loupe_gpu_measure_result;

/** Times the GPU kernels fn launches, as the Mosaic GPU profiler's measure(fn, aggregate,
 * iterations) does (jax/experimental/mosaic/gpu/profiler.py): fn(arg) is called `warmup` times
 * untimed, then CUPTI records the kernels (CONCURRENT_KERNEL activity) of `iterations` calls;
 * after them loupe synchronizes the calling thread's CUDA context (cuCtxSynchronize), flushes
 * CUPTI and splits the kernels into iterations in launch order. fn must finish (or synchronize)
 * the work it launches on other threads or contexts before it returns. CUPTI is process-wide:
 * kernels that other threads launch meanwhile are counted too.
 * On success *out is a new result, or NULL when no kernel ran (Mosaic's None).
 * Inside a tracing session the measured kernels are also on its timeline (GPU tracks). When the
 * session's device tracer (device_tracer_level 1) holds CUPTI, the measurement reads the
 * tracer's records of the window instead of subscribing again.
 * Errors (loupe_last_error() texts: Mosaic's word for word where it has one):
 *   LOUPE_EINVALID      fn or out NULL; "iterations=0 must be positive"; a warmup above 1000;
 *                       "The number of kernel launches is not divisible by the number of
 *                       iterations"; "Kernel names are not consistent across iterations"
 *   LOUPE_EUNSUPPORTED  "CUPTI profiling is not supported on this platform" (then why: no
 *                       driver, no libcupti.so, an old CUPTI); another CUPTI subscriber, such as
 *                       Nsight Systems or Nsight Compute (named by CUDA_INJECTION64_PATH when
 *                       set); a CUPTI call that failed (its name and CUPTI's error string)
 *   LOUPE_EALREADY_STARTED  another loupe_gpu_measure() is running in this process
 *   LOUPE_EGPU_OVERFLOW CUPTI dropped activity records: the timings would be incomplete
 *   LOUPE_ENOMEM
 * Thread-safety: any thread, one measurement at a time per process (another one meanwhile gets
 * LOUPE_EALREADY_STARTED); fn runs on the calling thread. Not async-signal-safe (it allocates,
 * locks and calls CUPTI). Units: ns throughout the result. Ownership: *out is the caller's, freed
 * by loupe_gpu_measure_result_free(). */
LOUPE_API int loupe_gpu_measure(void (*fn)(void *arg), void *arg,
                                const loupe_gpu_measure_options *opts,
                                loupe_gpu_measure_result **out);

/** The checks, split and statistics of loupe_gpu_measure() on kernel timings taken already
 * (kernels: n of them, in launch order; copied), e.g. a trace's GPU kernels. *out is NULL when
 * n is 0. With LOUPE_GPU_SPLIT_GIVEN every kernel's iteration must be below opts->iterations.
 * Errors: as loupe_gpu_measure() (LOUPE_EINVALID for the options, the split and an iteration out
 * of range; LOUPE_ENOMEM). Thread-safety: any thread. */
LOUPE_API int loupe_gpu_measure_kernels(const loupe_gpu_kernel_timing *kernels, size_t n,
                                        const loupe_gpu_measure_options *opts,
                                        loupe_gpu_measure_result **out);

/** Frees a result and what it owns. NULL is allowed. */
LOUPE_API void loupe_gpu_measure_result_free(loupe_gpu_measure_result *r);

#ifdef __cplusplus
}
#endif
#endif
