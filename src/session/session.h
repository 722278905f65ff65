/* session.h: what the session's files share (session.c, recover.c). */
#ifndef LOUPE_SESSION_SESSION_H
#define LOUPE_SESSION_SESSION_H

#include <loupe/model.h>
#include <loupe/trace.h>
#include <stddef.h>

/* Fills a result's counts and per-thread figures from m (the figures in a new array the result
 * owns). 0, or -1 when out of memory (then no figures). res may be NULL. */
int loupe__result_fill(loupe_trace_result *res, const loupe_model *m);

/* The counts and per-thread figures of the trace kept from the last stop, into res (the
 * preload's report when the program stopped its own session). 0, LOUPE_ENO_TRACE, LOUPE_ENOMEM.
 * Exported for libloupe_preload.so; not API. */
LOUPE_API int loupe__kept_counts(loupe_trace_result *res);
/* Sets a metadata pair of loupe's own MPI keys (loupe_mpi_*, loupe_clock_*), which
 * loupe_set_metadata() refuses: for libloupe_mpi.so. Errors as loupe_set_metadata()'s. */
LOUPE_API int loupe__set_metadata_mpi(const char *key, const char *value);
/* Now on the trace's clock as unix-epoch ns (the session's origin plus CLOCK_MONOTONIC since its
 * start), CLOCK_REALTIME with no session: libloupe_mpi.so measures clock offsets with it, so
 * that they correct the origin's own error. Async-signal-safe; any thread. */
LOUPE_API int64_t loupe__trace_unix_ns(void);
/* The active session's origin (unix-epoch ns: what its events' times count from), 0 when none
 * is active: libloupe_mpi.so's timeline base (the earliest rank's). Any thread. */
LOUPE_API int64_t loupe__trace_origin_unix_ns(void);

/* The model kept from the last stop (NULL when none): for tests that look at what the collector
 * built before any writer. Valid until the next start. */
const loupe_model *loupe__kept_model(void);

/* Writes the process's "loupe_cmdline" (cmdline, or /proc/self/cmdline when NULL, NUL separators
 * made spaces) and "loupe_parent_pid" (when not 0) into the builder's metadata: what the merged
 * view of a process tree (src/import/run.c) reads back into processes[].cmdline / parent_pid;
 * and "loupe_clock_base_unix_ns" from $LOUPE_RECORD_CLOCK_BASE_NS (loupe record's start: the
 * tree's timeline base, model/merge.h) when that is a decimal number. 0 or LOUPE_ENOMEM. */
struct loupe__mb;
int loupe__session_process_meta(struct loupe__mb *mb, uint64_t parent_pid, const char *cmdline);

/* The program's name: the basename of /proc/self/exe, in buf. */
const char *loupe__process_name(char *buf, size_t size);

/* Fatal-signal handlers that dump the recording region to <log_dir>/loupe-crash-<pid>.region
 * (crash.c): armed by a start when on is non-zero and the region is not shared with
 * `loupe record` (then nothing is installed), disarmed by the stop. Only default actions are
 * taken over. */
void loupe__crash_arm(const char *log_dir, int on);
void loupe__crash_disarm(void);
/* Under `loupe record`: copies the names the events recorded so far point at into the shared
 * region, for a process about to _exit() (no atexit stop, and the keeper may not have copied the
 * last ones). Waits at most 20 ms for the keeper's lock (a trylock, then nanosleep), then skips
 * the copy; callable from a signal handler that calls _exit() (no allocation: names are read with
 * process_vm_readv; glibc's pthread_mutex_trylock is one compare-and-swap, though POSIX does not
 * list it as async-signal-safe). A no-op without a shared region or a session. */
LOUPE_API void loupe__crash_exit_names(void);
/* At an _exit() of a process under `loupe record` whose region is its own memory (the regions'
 * file system had no room for it when it started): appends one line "events=N dropped=D
 * reentered=R need=T total=S" (loupe__rec_count_memory) to path, a file in loupe record's counts
 * directory, so that its report counts the events that die with the process as lost, not nothing.
 * Nothing for a shared region (recovered) or no session. Async-signal-safe: raw openat/write/close.
 */
LOUPE_API void loupe__crash_exit_memlost(const char *path);

/* Whether this process's last session was collected out of its shared region (the stop's
 * collect ran: the region holds nothing to recover), for the preload's exec from a signal
 * handler during a stop. 0 when no shared region. Async-signal-safe (one atomic load). */
LOUPE_API int loupe__region_collected(void);

/* A Dwfl (returned as void *, for loupe__sample_collect_with(), which ends it) of the files a
 * gone process had mapped (outside.c): one module per file at its load bias, symbols from the
 * files on disk. NULL when libdw is not built in, or no module could be reported. The maps are
 * struct loupe__map (record/sample_spool.h). */
struct loupe__map;
void *loupe__maps_dwfl(const struct loupe__map *maps, size_t nmaps);

#endif
