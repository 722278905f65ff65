/* progress.h: how far a long read has come, for the command line's progress meter (progress.c;
 * cli/util.c draws it). The readers report as they go: loupe_trace_read()'s reading of a file
 * (compressed bytes consumed, of the file's size), the XPlane reader's decoding (bytes of the
 * XSpace decoded, every 65,536 events) and the Perfetto reader's (bytes of the trace, each MiB).
 * Nothing is reported unless a function is set, and a report costs one atomic load then.
 *
 * Thread-safety: loupe__progress_set() from any thread (the CLI sets it once, before it reads);
 * loupe__progress() from any thread, calling the function on that thread. Not async-signal-safe:
 * readers only. */
#ifndef LOUPE_BASE_PROGRESS_H
#define LOUPE_BASE_PROGRESS_H

#include <loupe/export.h>

#include <stdint.h>

/* stage: a static string ("reading", "decoding"); name: the file (valid during the call); done
 * of total bytes (total 0: unknown). */
typedef void (*loupe__progress_fn)(const char *stage, const char *name, uint64_t done,
                                   uint64_t total);

/* Sets the function the readers report to (NULL: none, the default). */
LOUPE_API void loupe__progress_set(loupe__progress_fn fn);

/* Reports to the function set, if any. */
void loupe__progress(const char *stage, const char *name, uint64_t done, uint64_t total);

#endif
