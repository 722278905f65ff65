/* tracks.h: the model's own conventions for tracks that are not OS threads, shared by every door
 * that builds or writes them (the GPU sources build them, the writers map them to their formats).
 */
#ifndef LOUPE_MODEL_TRACKS_H
#define LOUPE_MODEL_TRACKS_H

#include <stdint.h>

/* Chrome JSON pid of GPU device n: above Linux's pid_max (2^22, kernel/pid.c PID_MAX_LIMIT), so
 * never a host pid. */
#define LOUPE__GPU_PID_BASE 1000000000ull
/* Model tids of GPU tracks: bit 40 set, the device in bits 32..39, a per-device track number
 * below: never an OS thread id, so host and GPU tracks never share a tid in the builder. */
#define LOUPE__GPU_TID(device, n) ((1ull << 40) | ((uint64_t)(device) << 32) | (uint64_t)(n))

/* The tid each track is written with, for formats that key a thread by (process, tid) (Chrome
 * JSON, XPlane lines): a THREAD track's own, unless an earlier track of the same process has that
 * tid (the kernel reused it after the first thread exited): then a fresh one above every host tid
 * of the model, so the two stay two tracks; the writer puts the real tid beside it and the reader
 * gives it back. A new array of m->thread_count entries (free it), NULL on out-of-memory;
 * *reused (may be NULL): the tracks renumbered. */
#include <stddef.h>
struct loupe_model;
uint64_t *loupe__model_written_tids(const struct loupe_model *m, size_t *reused);

#endif
