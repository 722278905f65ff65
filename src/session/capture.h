/* capture.h: the session as the profiler server (src/server/) runs it: a capture records like
 * loupe_start_trace() but hands the collected model to its caller instead of writing a run
 * directory. It shares the session lock and state with trace.h's sessions: a capture while a
 * local trace runs fails without touching it, and the reverse. */
#ifndef LOUPE_CORE_CAPTURE_H
#define LOUPE_CORE_CAPTURE_H

#include <loupe/model.h>

/* Session states, as loupe__session_state() reports them. */
enum { LOUPE__IDLE = 0, LOUPE__TRACING = 1, LOUPE__CAPTURING = 2 };

/* Starts a capture at host tracer level (0 = record nothing, 1..3) and device tracer level
 * (0 off, 1 or 2: CUPTI, when it can run; its problems are a note in the trace). Returns 0, or
 * LOUPE_EALREADY_STARTED with the detail saying whether a local trace or another capture runs,
 * or LOUPE_EINVALID. Thread-safety: any thread. */
int loupe__capture_start(int level, int device_level);

/* Ends the capture started by loupe__capture_start() and collects it into *out (caller frees with
 * loupe_model_free()). Returns 0, LOUPE_ENOT_STARTED (no capture runs), LOUPE_ENOMEM. */
int loupe__capture_stop(loupe_model **out);

/* LOUPE__IDLE, LOUPE__TRACING or LOUPE__CAPTURING. Thread-safety: any thread. */
int loupe__session_state(void);

#endif
