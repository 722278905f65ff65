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

#endif
