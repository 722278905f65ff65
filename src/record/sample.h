/* sample.h: CPU sampling (sample.c): per-thread perf_event_open ring buffers read by a sampler
 * thread, off the hot path, and turned into the model's samples, frames, stacks and off-CPU
 * intervals at the stop. */
#ifndef LOUPE_RECORD_SAMPLE_H
#define LOUPE_RECORD_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

struct loupe__mb;

/* How call stacks are taken (loupe_trace_options.sampling_stacks). */
enum {
    LOUPE__STACKS_DWARF =
        0,                  /* a copied user stack unwound with libdw (frame pointers without it) */
    LOUPE__STACKS_FP = 1,   /* the kernel's frame-pointer callchain */
    LOUPE__STACKS_NONE = 2, /* the sampled address only */
};

/* Starts sampling every thread of the process at hz (task-clock), or says why it cannot: it
 * never fails the session. origin_mono_ns is the session's ts 0 (CLOCK_MONOTONIC). When the
 * region is shared with `loupe record` (loupe__region_shared()), the sampler thread also spools
 * what it drains (sample_spool.h) to <region file>.samples, or for loupe record's memfd to
 * spool_dir/loupe-samples-<pid>.bin (spool_dir NULL: no spool then), and notes the path in the
 * region's header for a recovery. Returns 0 when sampling runs, -1 when it is unavailable
 * (loupe__sample_note() says why; one line was printed on stderr). Called by the session under
 * its lock, before the gate opens. */
int loupe__sample_start(uint32_t hz, int stacks, uint64_t origin_mono_ns, const char *spool_dir);
/* Stops the sampler thread after a last drain and closes the events; the samples stay for
 * loupe__sample_collect(). A no-op when sampling did not run. */
void loupe__sample_stop(void);
/* The sampler thread's OS thread id while sampling runs, else 0. Any thread. */
uint64_t loupe__sample_tid(void);
/* Adds the session's samples (symbolised now), off-CPU intervals, the loss count and the
 * "loupe_sampling" metadata to mb, then frees them. Host threads the collector added are found
 * by tid in process 0; threads that never recorded get a track of their own (named from the
 * kernel). 0, or LOUPE_ENOMEM (mb failed). */
int loupe__sample_collect(struct loupe__mb *mb, uint64_t stop_ns);
/* loupe__sample_collect() with the modules of another process: dwfl (a Dwfl *, or NULL for
 * raw addresses) has the modules the caller reported (src/session/outside.c: a process that
 * ran under perf events opened from outside, already gone); the call ends it (dwfl_end). */
int loupe__sample_collect_with(struct loupe__mb *mb, uint64_t stop_ns, void *dwfl);
/* fork(): the prepare handler holds the sampler's task table steady (the sampler thread opens
 * and closes events only under its lock) and the parent handler lets it go; the child closes
 * the parent's perf event fds and the sampler's eventfd, forgets the table and the samples, and
 * releases the lock the forking thread took. The child has no sampler thread; a session it
 * starts opens events for its own threads. Called by the session's atfork handlers only. */
/* A thread registered (record.c's thread_register): wakes the sampler thread into a scan now,
 * so that a thread shorter than the 10 ms scan interval is sampled. Any thread,
 * async-signal-safe: one write(2) to an eventfd, no lock, no allocation, errno kept; nothing
 * when no sampler runs. */
void loupe__sample_thread_born(void);
/* A Dwfl_Callbacks.find_debuginfo that looks only in local files (dwfl_build_id_find_debuginfo's
 * /usr/lib/debug/.build-id/), never debuginfod: libdw's fallback would load libcurl and OpenSSL
 * into the traced program. Declared with libdwfl.h's types by its users. */
/* Reads a perf_event mmap ring's records from data_tail to data_head (Linux's
 * perf_event_mmap_page protocol: acquire head, release tail), calling fn for each whole record;
 * one that wraps around the ring's end is copied into scratch (at least 64 KiB: a record's size
 * is a u16) first. The ring's owner only: not thread-safe for one ring. */
void loupe__perf_ring_drain(void *base, unsigned char *scratch,
                            void (*fn)(void *ctx, const unsigned char *rec, size_t size),
                            void *ctx);
void loupe__sample_fork_prepare(void);
void loupe__sample_fork_parent(void);
void loupe__sample_forget_in_child(void);
/* Frees the session's samples unread (a collection that failed). */
void loupe__sample_discard(void);
/* Benchmarks and tests (bench/symbolize.c): adds one sample as if the sampler thread had drained
 * it, for the next loupe__sample_collect(): pcs innermost first (the first is the sampled
 * address, the others return addresses), n <= 128; ts in CLOCK_MONOTONIC ns, kept when it lies
 * within [origin_mono_ns, origin_mono_ns + the collect's stop_ns]. Not while sampling runs.
 * 0, or -1 when memory ran out. */
int loupe__sample_inject(uint64_t origin_mono_ns, uint64_t tid, uint64_t ts, uint32_t cpu,
                         const uint64_t *pcs, uint32_t n);
/* A recovery (recover.c through sample_spool.c): empties the store and sets what the next
 * loupe__sample_collect_with() reads from a session gone with its process: its rate, ts 0 and
 * note. Then the spool's records are added: samples with loupe__sample_inject(), intervals
 * (CLOCK_MONOTONIC ns, a loupe_off_cpu_kind), thread names (the kernel's comm, 16 bytes with
 * its NUL) and the lost count (added). 0, or -1 when memory ran out. Not while sampling runs. */
void loupe__sample_restore(uint32_t hz, uint64_t origin_mono_ns, const char *note);
int loupe__sample_inject_off(uint64_t tid, uint64_t start, uint64_t end, unsigned kind);
int loupe__sample_inject_name(uint64_t tid, const char comm[16]);
void loupe__sample_inject_lost(uint64_t lost);
/* Tests (test_sample_accuracy): 1 when the sampler has an event open on thread tid, else 0.
 * Any thread; takes the task table's lock. */
int loupe__sample_watching(uint64_t tid);
/* "off", "999 Hz task-clock, dwarf stacks", "unavailable: ...": the last session's state. */
const char *loupe__sample_note(void);

#endif
