/* capture.h: the session as the profiler server (src/server/) runs it: a capture records like
 * loupe_start_trace() but hands the collected model to its caller instead of writing a run
 * directory. It shares the session lock and state with trace.h's sessions: a capture while a
 * local trace runs fails without touching it, and the reverse. */
#ifndef LOUPE_CORE_CAPTURE_H
#define LOUPE_CORE_CAPTURE_H

#include <loupe/export.h>

#include <loupe/model.h>
#include <stddef.h>
#include <stdint.h>

/* Session states, as loupe__session_state() reports them. */
enum { LOUPE__IDLE = 0, LOUPE__TRACING = 1, LOUPE__CAPTURING = 2 };

/* The CPU sampling rate of a capture unless its request says otherwise: `loupe record`'s
 * (trace.h LOUPE_SAMPLING_RECORD_HZ), so that a capture and a recording of one program compare. */
#define LOUPE__CAPTURE_SAMPLING_HZ 999u

/* Most metadata keys a capture request adds (the loupe_clock_* family). */
#define LOUPE__CAPTURE_META_MAX 8

/* What a capture records. Zero means: host level 0 (nothing), no device tracer, no sampling. */
typedef struct loupe__capture_opts {
    int level;            /* host tracer level: 0 = record nothing, 1..3 */
    int device_level;     /* 0 off, 1 or 2: CUPTI when it can run (its problems: a trace note) */
    uint32_t sampling_hz; /* CPU sampling (sample.h, default stacks), 0 off; at most 100000.
                             Never at level 0: a capture of nothing samples nothing. */
    /* metadata the trace carries besides the process's own (loupe_set_metadata): keys of the
     * loupe_clock_ family only (the capture's clock offset, measured by the client); copied,
     * and they replace a process key of the same name */
    const loupe_kv *metadata;
    size_t metadata_count; /* at most LOUPE__CAPTURE_META_MAX */
} loupe__capture_opts;

/* Starts a capture with *o. Returns 0, or LOUPE_EALREADY_STARTED with the detail saying whether
 * a local trace or another capture runs, or LOUPE_EINVALID (a level, rate or key out of range),
 * LOUPE_ENOMEM. Sampling that the process does not allow (perf_event_paranoid, seccomp) never
 * fails the capture: the trace's loupe_sampling metadata says why. Thread-safety: any thread. */
LOUPE_API int loupe__capture_start(const loupe__capture_opts *o);

/* Ends the capture started by loupe__capture_start() and collects it into *out (caller frees with
 * loupe_model_free()). Returns 0, LOUPE_ENOT_STARTED (no capture runs), LOUPE_ENOMEM. */
LOUPE_API int loupe__capture_stop(loupe_model **out);

/* LOUPE__IDLE, LOUPE__TRACING or LOUPE__CAPTURING. Thread-safety: any thread. */
LOUPE_API int loupe__session_state(void);

#endif
