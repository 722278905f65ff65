/* record.h: the recording layer shared by the recorder (record.c), the region (region.c), the
 * keeper (keeper.c), the collector (collect.c) and the session.
 *
 * Memory: one region per process (region.c), mapped at the first start and kept: a header, a
 * chunk table, an array of thread descriptors and the chunks (64 KiB each, LOUPE__CHUNK_SLOTS
 * 16-byte slots). Under `loupe record` the region is a memfd the parent maps too, so that it can
 * collect what a program recorded after the program died (recover.c). Chunks are handed to
 * threads lock-free from a session-wide pool (a tagged free stack, then a bump cursor);
 * the keeper thread populates chunks ahead of the cursor, so a thread's first event takes a
 * ready chunk instead of faulting in a buffer.
 *
 * Concurrency (the design that keeps the hot path lock-free and async-signal-safe):
 * - Only the owning thread writes its descriptor's hot line, its chunks' slots and its chain.
 *   It publishes cur with a release store after each event.
 * - Registration takes a descriptor from the region (lock-free), reads nothing with stdio and
 *   calls no malloc: a signal handler or the program's own allocator may be the first to record.
 * - A per-thread `busy` count brackets every recording call (fast path too): a call that finds
 *   it set was entered from a signal handler or an allocator that interrupted another call on
 *   the same thread; it drops its event and counts it (reentered), so nesting never corrupts
 *   the slots.
 * - The collector (inside loupe_stop_trace, after closing the gate) reads each chain up to the
 *   published cur. A thread that passed the gate just before it closed may still write a few
 *   slots past that cur: they are never read. The slow path (chunk changes) is bracketed by
 *   in_slow and re-checks the gate after a full fence; the stop waits for in_slow to clear
 *   (Dekker's handshake) before it reads chains.
 * - A live thread keeps its current chunk across sessions (so a straggler only ever writes into
 *   a chunk it owns); everything else goes back to the pool after collection, and exited threads'
 *   descriptors are recycled then.
 */
#ifndef LOUPE_RECORD_RECORD_H
#define LOUPE_RECORD_RECORD_H

#include "base/clock.h"

#include <loupe/annotate.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Sub-kinds of EXT records written only by record.c's slow path (loupe/detail/hot.h has the
 * others). Async slices (annotate.h: loupe_async_begin): slot 1 = {ts, sub << 8 | flags << 4 |
 * K_EXT}, slot 2 = {id, ref << 4 | K_EXT_DATA}. A begin with a static name: flags 0, ref = the
 * name. A begin with a copied name: flags LOUPE__ASYNC_DYN, ref 0, the name's length in bits
 * 16..27 of slot 1's b and its cut flag in bit 28, the name in K_STR slots after slot 2. An end:
 * ref 0. */
enum { LOUPE__EXT_ASYNC_BEGIN = 16, LOUPE__EXT_ASYNC_END = 17 };
#define LOUPE__ASYNC_DYN 1u

/* A K_FUNC_EXIT whose call's exit never came (a longjmp out of it, an exception through a clang
 * build's frames): the thread's stack of open calls (record.c) found it gone at this time, at the
 * next enter or exit below it. The collector closes the call and those above it here, truncated.
 * Bit 63 of b: a code address << 4 leaves it clear (user-space addresses are below 2^56). */
#define LOUPE__FUNC_CUT (1ull << 63)

#define LOUPE__CHUNK_SLOTS 4096u /* 64 KiB: 16 pages, a few µs to populate */
#define LOUPE__NO_CHUNK UINT32_MAX
#define LOUPE__NAME_MAX 64

/* One thread's descriptor, in the region (so a parent process can read it after a death). */
typedef struct loupe__thread {
    loupe__tbuf hot; /* cur, limit, state, resv, skip_exits, busy, in_slow: the fast path's
                        cache line */
    loupe__ev *seg;  /* the first slot of the current segment (chunk) */
    /* --- function tracing's --depth (the -finstrument-functions hooks, owner only) --- */
    uint32_t fdepth; /* instrumented calls open on this thread, while fgen is the session's */
    uint32_t fgen;   /* the low 32 bits of the session generation fdepth counts for */
    /* the hot line is full: 48 + 8 + 8 bytes (asserted below) */
    /* --- written by the owner in the slow path, read by the collector --- */
    uint64_t id;          /* registry id: unique for the process's life, never reused */
    uint64_t tid;         /* OS thread id (gettid) */
    uint32_t first_chunk; /* chain of this session's chunks (LOUPE__NO_CHUNK: none) */
    uint32_t cur_chunk;   /* the chunk cur points into (kept across sessions) */
    uint64_t dropped;     /* events dropped this session: full pool / limit (atomic) */
    uint64_t reentered;   /* events dropped: the call re-entered a recording call (atomic) */
    uint64_t wraps;       /* keep-last: times a single-segment ring wrapped (atomic) */
    uint64_t recycled;    /* keep-last: events in chunks recycled for newer ones (atomic) */
    uint64_t limit_slots; /* this thread's limit for the session (per-thread capacity) */
    uint64_t used_slots;  /* slots in the session's chunks before the current one */
    uint64_t exit_ticks;  /* clock ticks when the thread exited, 0 while it runs (atomic) */
    uint32_t tail_chunk;  /* an exited thread's last events, packed (LOUPE__NO_CHUNK: none) */
    uint32_t tail_off, tail_n;
    int32_t ring;   /* keep-last this session */
    int32_t exited; /* the thread is gone (atomic) */
    uint32_t finc;  /* open calls to functions that match function_filter (owner only) */
    /* --min-duration's calls taken back at their exit (record.c's take_back_short): the owner
     * counts them (retract_seq) and notes the chunk of the first one since the keeper last
     * acknowledged (retract_ack, written by the keeper only), whose slots the keeper's name
     * scan then reads again (names.c): a slot it scanned may hold another event now. */
    uint32_t retract_seq;
    uint64_t func_filtered; /* calls the hooks filtered (--depth, the table), not recorded
                               (owner only; valid while fgen is the session's generation) */
    uint64_t depth_over;    /* open zones whose ends did not fit the segment after hot.resv (a
                               ring's segment smaller than the depth; record.c's set_cur) */
    uint64_t xstate;        /* the session state xdepth counts for (owner only) */
    uint32_t xdepth; /* explicit zones open (loupe_zone_begin; the first LOUPE__XSTACK in xs) */
    uint32_t retract_ack;   /* the retract_seq the keeper's name scan last read (keeper only) */
    uint32_t retract_chunk; /* the chunk of the first call taken back since retract_ack */
    /* owner only: the chunk of the last take-back, and retract_seq before the first one there
     * (every take-back up to it was in an earlier chunk) */
    uint32_t retract_here, retract_here_seq;
    /* --- the links and what follows them are not cleared at registration (record.c) --- */
    uint32_t next;           /* registry list (descriptor index + 1; 0 ends it) */
    uint32_t free_next;      /* free stack link (descriptor index + 1) */
    int32_t free;            /* on the free stack; set to 0 last when it is reused (atomic) */
    uint32_t name_set;       /* loupe_set_thread_name() named it (atomic) */
    uint64_t keeper_scanned; /* slots of this session the keeper scanned for names (keeper.c) */
    struct loupe__xent *xs;  /* the open explicit zones, innermost last (a page of the owner's
                                memory, mapped at its first explicit zone; kept with the
                                descriptor for its next owner; record.c) */
    struct loupe__fent *fs;  /* the open instrumented calls, innermost last (LOUPE__FSTACK
                                entries of the owner's memory, mapped at its first traced call;
                                kept with the descriptor for its next owner; record.c) */
    uint64_t fstate;         /* the session state fsd counts for (owner only) */
    uint32_t fsd;            /* instrumented calls open (the first LOUPE__FSTACK in fs) */
    char name[LOUPE__NAME_MAX];
} __attribute__((aligned(64))) loupe__thread;

_Static_assert(sizeof(loupe__tbuf) <= 48, "the hot fields fit one cache line");
_Static_assert(sizeof(loupe__ev) == 16, "16 bytes per event");
_Static_assert(sizeof(loupe__thread) % 64 == 0, "descriptors are padded to cache lines");
_Static_assert(offsetof(loupe__thread, id) == 64, "the hot line is the first line");

/* Per-chunk bookkeeping, in the region's chunk table. */
typedef struct loupe__chunk_meta {
    uint32_t next;  /* next chunk of the owner's chain, LOUPE__NO_CHUNK at its end */
    uint32_t used;  /* slots written before the owner moved on (the current chunk: see cur) */
    uint32_t owner; /* descriptor index + 1, 0 when in the pool */
    uint32_t tail;  /* a tail chunk (exited threads' packed last events), bump offset; bit 31:
                       LOUPE__META_ANON (kept when the chunk changes hands) */
} loupe__chunk_meta;

/* A chunk of a shared region that lives in the process's own memory (the regions' file system
 * had no room for it when it was first taken): readable by the process, not by a recovery. */
#define LOUPE__META_ANON 0x80000000u
#define LOUPE__META_TAIL_OFF 0x7fffffffu

/* The region's header (the first page). Offsets are from the region's start. */
typedef struct loupe__region_hdr {
    char magic[8]; /* "LOUPERGN" */
    uint32_t version, header_size;
    uint64_t total_size, nchunks, max_threads;
    uint64_t meta_off, desc_off, chunk_off, names_off, names_size;
    uint64_t base_addr; /* the address the recording process mapped the region at */
    uint64_t pid;
    /* the session (written by the session under its lock) */
    uint64_t state;                   /* the session's state word (0: none yet) */
    uint64_t start_ticks, start_mono; /* ts 0 */
    uint64_t origin_unix_ns;
    int32_t use_tsc, active;
    uint64_t rate_ticks, rate_mono; /* the keeper's latest (ticks, mono ns) pair */
    uint64_t session_chunks;        /* the session's capacity, in chunks */
    uint64_t session_slots;         /* the session's capacity in slots (may be < chunks) */
    uint64_t level_flags;
    /* the pool (atomics) */
    uint64_t chunks_in_use; /* chunks owned by threads (the session's capacity bounds it) */
    uint64_t bump;          /* next never-used chunk */
    uint64_t free_head;     /* tagged free stack: tag << 32 | (index + 1) */
    uint64_t populated;     /* chunks [0, populated) are populated */
    uint64_t ahead;         /* the keeper keeps this many chunks populated past bump */
    uint64_t desc_bump;     /* next never-used descriptor */
    uint64_t desc_free;     /* tagged free stack of descriptors */
    uint64_t reg_head;      /* registry list head, descriptor index + 1 (push-only) */
    uint64_t next_id;       /* registry ids */
    uint64_t unregistered;  /* events dropped: no descriptor left (max_threads) */
    uint64_t pool_empty;    /* times a thread found the pool empty */
    uint64_t tail_chunk;    /* the chunk exited threads' tails are packed into (+1; 0 none) */
    /* the name table (written by the keeper only; read at recovery) */
    uint64_t names_count, names_used; /* entries; bytes of the string heap used */
    int32_t stopped;                  /* the session stopped normally (nothing to recover) */
    /* A crash dump holds the region up to its last used chunk only: this is that chunk count + 1
     * (0: the file is the whole region). Written by the fatal-signal handler before the dump. */
    uint32_t dumped;
    /* The samples' spool (sample_spool.h), written by the session's start: the file the sampler
     * thread appends what it drains to ("" = none); a recovery reads the samples from there.
     * (The field was an unused log_dir of the same size: the layout is unchanged.) */
    char samples_path[1024];
    /* The spool (spool.c), written by the keeper: chunks written to spool_path ("" = none) and
     * no longer in the region; a recovery reads them back from there (spool_each_in). */
    uint64_t spool_chunks;
    char spool_path[1024];
    /* The regions' file system (a shared region only, region.c's loupe__region_back): shm_full
     * is set once a page of the file could not be had (tmpfs full: the page would have been a
     * SIGBUS); shm_anon_chunks counts the chunks recorded in the process's own memory since
     * (each marked LOUPE__META_ANON: a recovery after a death cannot read them, and counts their
     * events lost); shm_refused the chunks that could not be handed out at all (their table's
     * page could not be had: the events are dropped and counted on their thread). */
    uint64_t shm_full, shm_anon_chunks, shm_refused;
} loupe__region_hdr;

/* The region layout's version (the header's version field): 2 since the descriptors hold the
 * function filters' counters, 3 since the header ends with the spool's fields, 4 since an
 * argument is one K_ARG slot (loupe/detail/hot.h), 5 since a shared region grows page by page
 * within its file system's room (the header's shm_* fields, LOUPE__META_ANON), 6 since a descriptor
 * holds its stack of open explicit zones, 7 since it holds the taken-back calls' fields
 * (retract_seq, retract_ack, retract_chunk), 8 since it holds its stack of open instrumented
 * calls (fs, fstate, fsd) and a function's exit may carry LOUPE__FUNC_CUT. A region of another
 * version is not read (recover.c
 * says which version it found). */
#define LOUPE__REGION_VERSION 8u

/* The process's region (NULL before the first start). */
extern void *loupe__region;
#define LOUPE__HDR ((loupe__region_hdr *)loupe__region)

static inline loupe__chunk_meta *loupe__meta(void *region, uint32_t c) {
    loupe__region_hdr *h = region;
    return (loupe__chunk_meta *)(void *)((char *)region + h->meta_off) + c;
}
static inline loupe__thread *loupe__desc(void *region, uint32_t i) {
    loupe__region_hdr *h = region;
    return (loupe__thread *)(void *)((char *)region + h->desc_off) + i;
}
static inline loupe__ev *loupe__chunk(void *region, uint32_t c) {
    loupe__region_hdr *h = region;
    return (loupe__ev *)(void *)((char *)region + h->chunk_off) + (size_t)c * LOUPE__CHUNK_SLOTS;
}
static inline uint32_t loupe__desc_index(void *region, const loupe__thread *t) {
    return (uint32_t)(t - loupe__desc(region, 0));
}

/* Session parameters the recorder needs (set by the session before the gate opens). */
typedef struct loupe__session_params {
    uint64_t session_slots; /* the session's capacity, in slots */
    uint64_t thread_slots;  /* each thread's limit, in slots (<= session_slots) */
    int ring;               /* keep-last */
    uint32_t func_depth;    /* function tracing: deepest call recorded per thread, 0 = all */
    uint64_t func_min_ns;   /* function tracing: shorter calls are taken back at their exit */
    int spool;              /* the keeper spools full chunks (spool.c): thread_slots is lifted */
} loupe__session_params;

/* Writes the decimal digits of v into buf (room for 20 bytes; no NUL): their count. No stdio:
 * async-signal-safe. */
size_t loupe__put_dec(char *buf, uint64_t v);

/* What the session holds in the process's memory now, for a process whose region is its own
 * (no room in the regions' file system) that is about to die: out[0] the events its threads
 * took (slots, as the collector counts events_recorded, a keep-last ring's overwritten ones
 * included; not those spooled), out[1] the events dropped for capacity, out[2] those dropped on
 * re-entry, out[3] what its busiest thread needed (taken + dropped) and out[4] what all of them
 * did. 0, or -1 (out all 0) when the region is not the calling process's (a vfork() or clone()
 * child, which shares its parent's memory). Async-signal-safe (reads the region only). */
int loupe__rec_count_memory(uint64_t out[5]);

/* Prepares the region for a session (maps it at the first call, or when shm_fd >= 0 maps that
 * memfd instead: `loupe record`), populates the first chunks and starts the keeper. Called by
 * the session under its lock, before the gate opens. 0, or LOUPE_ENOMEM with the detail naming
 * the size that could not be mapped, errno and the capacity that would fit. */
int loupe__rec_prepare(const loupe__session_params *p);
/* Opens the gate for a new session: returns the new state word. */
uint64_t loupe__gate_open(int level, int function_tracing);
/* Closes the hot path (sets loupe__state to its "not tracing" value, keeping the generation) and
 * waits until no thread is inside the slow path of the closed session. */
void loupe__gate_close(void);
/* After collection: gives the chunks of the session back to the pool (live threads keep their
 * current chunk), recycles the descriptors of exited threads. Call with loupe__registry_lock. */
void loupe__rec_recycle(void);

/* The registry lock serialises the collector, recycling and loupe_set_thread_name; it is never
 * taken by registration or recording. Take it with loupe__registry_lock_take() /
 * loupe__registry_lock_give(), which record the holder so that loupe__registry_held() can assert
 * the "call with the registry lock held" preconditions. */
void loupe__registry_lock_take(void);
void loupe__registry_lock_give(void);
/* Non-zero when the calling thread holds the registry lock (a fork child's forking thread
 * included: it is the same thread there). */
int loupe__registry_held(void);
/* Non-zero between loupe__gate_open() and loupe__gate_close(). The state word cannot tell (a
 * level-0 session's low bits are 0, as a closed gate's): this is a separate flag, for asserts. */
int loupe__gate_is_open(void);
/* Takes the registry lock when it is free: 1 when taken (give it back), 0 when another thread
 * holds it. For the keeper (spool.c), which must not wait for it: the stop takes it while
 * holding the keeper's lock. */
int loupe__registry_lock_try(void);
/* Gives chunk c back to the session's pool (its capacity counts one chunk less). The caller
 * took it out of its owner's chain: the spool (spool.c), recycling. */
void loupe__chunk_give(uint32_t c);
/* Takes (1) or releases (0) the lock that packs exited threads' tails: fork's handlers. */
void loupe__rec_tail_lock(int take);
/* A fork child: closes the gate and forgets the region (it is the parent's, maybe shared):
 * a session the child starts maps a region of its own. */
void loupe__rec_forget_in_child(void);

/* Iterates the registry: calls fn for each descriptor that is not free (of the process's region,
 * or of a region mapped from outside: recover.c). */
void loupe__threads_each(void (*fn)(loupe__thread *t, void *arg), void *arg);
void loupe__threads_each_in(void *region, void (*fn)(loupe__thread *t, void *arg), void *arg);

/* The calling thread's OS id. Async-signal-safe. */
uint64_t loupe__gettid(void);
/* The kernel's name of a thread of this process (/proc/self/task/<tid>/comm, read with raw
 * open/read); "" when gone. Async-signal-safe. */
void loupe__read_comm(uint64_t tid, char *buf, size_t size);

/* Symbol name for a code address (ELF .symtab/.dynsym lookup; "0x..." when unknown). */
void loupe__symbolize(uintptr_t addr, char *buf, size_t size);
void loupe__symbols_reset(void);
/* A C++ symbol demangled (malloc'd: free it), or NULL when it is not mangled or cannot be
 * demangled (no C++ runtime). Allocates and may dlopen libstdc++: not on the hot path. */
char *loupe__demangle(const char *name);
/* The start of the .eh_frame FDE (the function, for compiler-made unwind tables) that holds
 * addr, from the binary-search table of elf's .eh_frame_hdr (PT_GNU_EH_FRAME): elf is an Elf *
 * (libelf), addr an address of the ELF file's own (its load bias taken off). 0 with *start set,
 * or -1 when elf has no such table (or one this does not read) or addr lies before its first
 * function. The caller checks that some FDE covers addr (the table says only where each
 * starts). Any thread, for distinct elf handles (libelf's own rule). */
int loupe__eh_frame_start(void *elf, uint64_t addr, uint64_t *start);
/* Calls fn for every function symbol of the objects loaded now (its address, its name as
 * loupe__symbolize gives it) and range for each object's address range. Not on the hot path
 * (libelf, malloc, a lock): the session's start. */
void loupe__symbols_each(void (*fn)(uintptr_t addr, const char *name, void *arg),
                         void (*range)(uintptr_t lo, uintptr_t hi, void *arg), void *arg);

/* The function filters' table for the -finstrument-functions hooks (record.c): decisions made
 * at the start (session.c) for every function of the objects loaded then, so that filtered calls
 * never reach the buffer; a function of an object loaded later is recorded and decided at the
 * stop (collect.c). Written only while the gate is closed. */
#define LOUPE__FTAB_SLOTS 65536u /* open addressing: at most half of them used */
#define LOUPE__FTAB_RANGES 512u
enum { LOUPE__FD_INCLUDE = 1, LOUPE__FD_EXCLUDE = 2 }; /* a function's decision bits */
/* Empties it and turns it off (every call recorded, the filters applied at the stop). */
void loupe__ftab_clear(void);
/* Adds a function with a non-zero decision, or an object's address range. 0, or -1 when the
 * table is full (then leave it off). */
int loupe__ftab_add(uintptr_t addr, unsigned decision);
int loupe__ftab_add_range(uintptr_t lo, uintptr_t hi);
/* Turns it on for the next session: include_mode when there is a function_filter. */
void loupe__ftab_enable(int include_mode);

/* The keeper thread (keeper.c): populates chunks ahead of demand while a session runs. Starts
 * it when this process has none, and returns once it runs and is named. */
void loupe__keeper_start(void);
/* Ends it and waits for it (pthread_join) when it runs in this process and the caller is not
 * the keeper itself; the next loupe__keeper_start starts another. Called by the session's stop,
 * once the gate is closed, with no keeper lock held (keeper.c says why a stopped program must
 * not keep it). */
void loupe__keeper_end(void);
/* Wakes it for a session that just started. */
void loupe__keeper_kick(void);
/* Ends the keeper's nap early when it backed off (nothing recorded for a while): called when a
 * thread joins a session (its first event there) and by the stop. Async-signal-safe: one relaxed
 * load, and a futex wake (errno kept) only while the keeper naps longer than 1 ms. */
void loupe__keeper_poke(void);
/* The keeper's OS thread id (in this process; after a stop, the last keeper's), 0 before it
 * first runs. Any thread. */
uint64_t loupe__keeper_tid(void);
/* Holds it between two passes (while a stop collects and recycles) and lets it go again. */
void loupe__keeper_pause(void);
/* keeper_pause() without waiting: 1 when the lock was taken (then call keeper_resume()). */
int loupe__keeper_trypause(void);
void loupe__keeper_resume(void);
/* A fork child (the keeper lock held): the child has no keeper; its condition variable is made
 * anew (a waiter of the parent's would block a broadcast in the child). */
void loupe__keeper_forget_in_child(void);

#endif
