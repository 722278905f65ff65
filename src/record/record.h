/* record.h: per-thread recording state shared by the recorder, the session and the collector.
 *
 * Concurrency (the design that keeps the hot path lock-free):
 * - Only the owning thread writes its buffer's slots, cur, depth, and (when it joins a new
 *   session) state/base/limit. It publishes cur with a release store after each event.
 * - The collector (inside loupe_stop_trace, after closing the gate) reads [base, cur) with
 *   an acquire load of cur. A thread that passed the gate just before it closed may still write
 *   a few events past that cur: they are never read (keep-first) or are detected and discarded
 *   (keep-last: cur and wraps are re-read after the copy, a seqlock-style check).
 * - Slots are written and read as relaxed atomics so that such a straggler is not a data race.
 * - Buffers live until their thread exits; an exited thread's buffer is freed by the next stop
 *   (after its events were collected) or start, under the registry lock.
 */
#ifndef LOUPE_RECORD_RECORD_H
#define LOUPE_RECORD_RECORD_H

#include "base/clock.h"

#include <loupe/annotate.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loupe__thread {
    loupe__tbuf hot; /* cur, limit, state, depth: the fast path's cache line */
    char pad_hot[64 - sizeof(loupe__tbuf)];
    loupe__ev *base; /* the mapping's start (map) */
    void *map;
    size_t map_len;
    uint64_t cap;        /* slots */
    uint64_t dropped;    /* events dropped this session (atomic) */
    uint64_t wraps;      /* keep-last: times the ring wrapped this session (atomic) */
    int ring;            /* keep-last policy for this session */
    uint64_t populated;  /* slots whose pages were touched (they stay so across sessions) */
    uint64_t exit_ticks; /* atomic: clock ticks when the thread exited, 0 while it runs */
    uint64_t tid;
    char name[64];
    int exited; /* atomic: the thread is gone; its buffer is freed after collection */
    struct loupe__thread *next;
} __attribute__((aligned(64))) loupe__thread;

_Static_assert(sizeof(loupe__tbuf) <= 64, "the hot fields fit one cache line");
_Static_assert(sizeof(loupe__ev) == 16, "16 bytes per event");
_Static_assert(sizeof(loupe__thread) % 64 == 0, "per-thread state is padded to cache lines");

/* Session parameters the recorder needs (set by the session under its lock before the gate
 * opens; read by threads when they join the session). */
typedef struct loupe__session_params {
    uint64_t cap; /* slots per thread */
    int ring;     /* keep-last */
    int lazy;     /* populate buffers as they fill instead of at the first event */
} loupe__session_params;

extern loupe__session_params loupe__params; /* written under the session lock, before the gate */

/* The registry of thread buffers, under the registry lock: take it with
 * loupe__registry_lock_take() / loupe__registry_lock_give(), which record the holder so that
 * loupe__registry_held() can assert the "call with the registry lock held" preconditions
 * (two relaxed atomic stores per lock: never on the hot path, only at a thread's first event,
 * a thread name, a start and a stop). */
extern loupe__thread *loupe__threads;
void loupe__registry_lock_take(void);
void loupe__registry_lock_give(void);
/* Non-zero when the calling thread holds the registry lock (a fork child's forking thread
 * included: it is the same thread there). */
int loupe__registry_held(void);

/* Frees the buffers of exited threads. Call with the registry lock held (asserted). */
void loupe__free_exited(void);

/* Closes the hot path (sets loupe__state to its "not tracing" value, keeping the generation).
 * Called by the session with its lock held (and by a fork child). */
void loupe__gate_close(void);
/* Opens it for a new session: returns the new state word. The gate must be closed (asserted):
 * two sessions never share one. */
uint64_t loupe__gate_open(int level, int function_tracing);
/* Non-zero between loupe__gate_open() and loupe__gate_close(). The state word cannot tell (a
 * level-0 session's low bits are 0, as a closed gate's): this is a separate flag, for asserts. */
int loupe__gate_is_open(void);

/* The calling thread's OS id. */
uint64_t loupe__gettid(void);
/* The kernel's name of a thread of this process (/proc/self/task/<tid>/comm); "" when gone. */
void loupe__read_comm(uint64_t tid, char *buf, size_t size);

/* Symbol name for a code address (ELF .symtab/.dynsym lookup; "0x..." when unknown). */
void loupe__symbolize(uintptr_t addr, char *buf, size_t size);
void loupe__symbols_reset(void);

#endif
