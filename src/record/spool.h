/* spool.h: the spool (spool.c): with a session's spool_dir set, the keeper writes every full
 * chunk that no thread writes any more to <spool_dir>/loupe-spool-<pid>.bin and gives it back to
 * the pool, so that a long session's memory stays bounded by its capacity while every event is
 * kept; the collector reads them back at the stop, each thread's before its chunks in memory. */
#ifndef LOUPE_RECORD_SPOOL_H
#define LOUPE_RECORD_SPOOL_H

#include "record/record.h"

#include <stddef.h>
#include <stdint.h>

/* One record of the spool file, followed by the chunk's LOUPE__CHUNK_SLOTS slots (64 KiB). */
typedef struct loupe__spool_rec {
    uint64_t thread_id; /* the registry id of the chunk's thread (loupe__thread.id) */
    uint64_t seq;       /* the record's number in the file, from 0 */
    uint32_t used;      /* slots the thread wrote in the chunk */
    uint32_t desc;      /* the descriptor index of the thread (one per thread and session) */
    uint32_t chunk;     /* the chunk's index in the region (a recovery tells a record the
                           program died before taking out of its chain) */
    uint32_t pad;
} loupe__spool_rec;

/* Opens the spool for a session: creates dir (with parents) and the file
 * dir/loupe-spool-<pid>.bin (O_CLOEXEC, truncated), notes its path in the region's header.
 * dir NULL: no spool. spill: spool only once the session's capacity is half used (down to a
 * quarter), and make the file at the first chunk written (no file, no fd before).
 * budget: the bytes the file may take (0: half the space free in dir now; UINT64_MAX: no
 * limit); the chunk that would pass it turns the spool off, with the budget in the error. Call
 * with the keeper paused and the gate closed. 0, or LOUPE_EIO with the detail "spool_dir
 * <dir>: cannot create <path>: <strerror> (errno N)" or "spool_dir <dir>: cannot open <file>:
 * <strerror> (errno N)". */
int loupe__spool_open(const char *dir, int spill, uint64_t budget);

/* One keeper pass (keeper.c, under the keeper's lock): writes and gives back every chunk at the
 * head of a keep-first thread's chain that the thread has moved on from. Takes the registry lock
 * only when it is free (thread exit and the collector rewrite chains under it): a busy lock
 * skips the pass. A write error (ENOSPC, EFBIG, EIO) turns the spool off for the session; the
 * chunks then stay in memory. Returns the chunks written (the keeper passes again at once while
 * there were some: the threads fill chunks faster than a pass a millisecond drains them). */
uint64_t loupe__spool_pass(void);

/* The collector's side (with the keeper paused): calls fn for each chunk spooled from
 * descriptor desc, in the order it was written, with its slots in a buffer that is valid during
 * the call only. Stops at the first non-zero return of fn and returns it; -1 when reading the
 * file failed (the detail set). */
int loupe__spool_each(uint32_t desc, int (*fn)(const loupe__ev *slots, size_t n, void *arg),
                      void *arg);

/* The same for a region read from outside after its program died (recover.c through the
 * collector): reads the header's spool_path, the records the header counts (spool_chunks), and
 * the one after them when the program died between writing it and counting it (unless that
 * chunk is still the head of its thread's chain in the region: it was not taken out yet).
 * 0 with nothing read when the file is gone; -1 when reading failed (the detail set). */
int loupe__spool_each_in(const void *region, uint32_t desc,
                         int (*fn)(const loupe__ev *slots, size_t n, void *arg), void *arg);

/* Chunks spooled this session; 0 when off. Any thread. */
uint64_t loupe__spool_chunks(void);
/* The events in the chunks spooled so far (their slots, as events_recorded counts them). Async-
 * signal-safe (one load). */
uint64_t loupe__spool_slots(void);
/* Removes the spool file when this process opened it (a death whose spooled events cannot be
 * recovered: a process recording into its own memory, whose region no one can read).
 * Async-signal-safe (raw unlinkat). */
void loupe__spool_unlink_own(void);
/* Non-zero once a write failed this session (the spool is off). Any thread. */
int loupe__spool_failed(void);
/* Whether this session spools (a spool file is open and no write failed): the keeper then never
 * backs off, since only its passes give spooled chunks back to a pool that may be small. */
int loupe__spool_on(void);
/* The spool file's path ("" when off), and the write error that turned it off ("" when none):
 * "write to <file> failed after <n> chunks: <strerror> (errno N)". Valid until the next open. */
const char *loupe__spool_path(void);
const char *loupe__spool_error(void);

/* After the collection (keeper paused): closes the file and removes it. */
void loupe__spool_close(void);

#endif
