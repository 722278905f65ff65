/* gpu_internal.h: what the rest of libloupe calls in src/gpu/ (the loupe__gpu_ prefix). */
#ifndef LOUPE_GPU_INTERNAL_H
#define LOUPE_GPU_INTERNAL_H

#include "model/tracks.h"

#include <stdint.h>

struct loupe__mb;

/* Adds the GPU tracks of the session (loupe_gpu_session_add, CUPTI) to the model under
 * construction and forgets them. origin_unix_ns: the model's ts 0. 0, or LOUPE_ENOMEM (detail
 * set) on out-of-memory or when mb is NULL (the builder already failed): they are forgotten all
 * the same. */
int loupe__gpu_collect(struct loupe__mb *mb, uint64_t origin_unix_ns, uint64_t stop_ns);
/* A deep copy of a decoded buffer (names copied); NULL on out-of-memory. */
struct loupe_gpu_decoded *loupe__gpu_decoded_clone(const struct loupe_gpu_decoded *d);
/* The session opens the GPU join at its start (dropping what an earlier session left) and
 * closes it at its stop, before collecting: loupe_gpu_session_add() succeeds only in between.
 * Thread-safety: any thread (the join's own lock). */
void loupe__gpu_session_open(void);
void loupe__gpu_session_close(void);

/* CUPTI (cupti.c): the device tracer of the session. */
/* Starts it for a session at device_tracer_level level (0: nothing). Never fails the session:
 * problems become a note in the trace metadata (and the detail of loupe_last_error()). */
void loupe__cupti_start(int level);
/* Flushes and stops it; its records stay until loupe__gpu_collect(). */
void loupe__cupti_stop(void);
/* The host (CLOCK_REALTIME ns) start of the kernel with this CUPTI correlation id in the
 * current session, 0 when unknown. */
uint64_t loupe__cupti_kernel_start_unix(uint32_t correlation_id);
/* Adds the CUPTI records (kernels, memcpys, memsets per device and stream) that start inside the
 * session [origin, origin + stop_ns] and the notes to the model, then forgets them. 0, or
 * LOUPE_ENOMEM (detail set). */
int loupe__cupti_collect(struct loupe__mb *mb, uint64_t origin_unix_ns, uint64_t stop_ns);

/* measure.c: checks loupe_gpu_measure_options (NULL: the defaults) and gives the iterations and
 * the warm-up calls to make. 0, or LOUPE_EINVALID with Mosaic's text. */
struct loupe_gpu_measure_options;
int loupe__gpu_measure_check(const struct loupe_gpu_measure_options *o, int32_t *iterations,
                             int32_t *warmup);

#endif
