/* record.c: the recorder's slow paths: registering a thread (its first event), joining a new
 * session, taking chunks from the session's pool, a full segment (drop and count, wrap the ring
 * or recycle the oldest chunk), dynamic names, arguments, two-slot records (instants, counters,
 * flows), the -finstrument-functions hooks, thread exit and the gate. The fast path is inline in
 * loupe/detail/hot.h; the memory layout is in record.h.
 *
 * Everything reachable from a recording call is async-signal-safe and allocates nothing from
 * malloc: descriptors and chunks come from the region (lock-free tagged stacks and atomic bump
 * cursors), the thread id is a raw gettid, nothing reads with stdio. Each call raises the
 * thread's busy count first: a call that finds it raised (a signal handler, or the program's
 * allocator, re-entering on the same thread) drops its event and counts it.
 *
 * Two-slot (EXT) records: slot 1 = {ts, sub << 8 | flags << 4 | K_EXT}, slot 2 = {value,
 * ref << 4 | K_EXT_DATA} where ref is a pointer to a static string. The second slot has its own
 * kind so that a ring reader can tell it from a first slot. An argument is one slot (K_ARG:
 * {value, key << 8 | type << 4 | K_ARG}, no timestamp); only a key pointer with its top byte
 * set (a tagged pointer, never on x86-64) takes the two-slot EXT_ARG form.
 * Copied strings (dynamic zone names, string arguments) follow their record inline, 15 bytes per
 * K_STR slot. A record never straddles two segments.
 */
#include "record/record.h"
#include "record/names.h"

#include "base/error.h"
#include "record/region.h"
#include "record/sample.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t loupe__state;
__thread loupe__tbuf *loupe__tls __attribute__((tls_model("initial-exec")));
void *loupe__region;

static loupe__session_params params; /* written under the session lock, before the gate opens */

/* A thread registering: whatever registration calls that records again (an instrumented
 * function, the program's allocator) must not register a second time. */
static __thread int registering __attribute__((tls_model("initial-exec")));
/* The region (loupe__region_gen + 1: a fork child's new region may lie at the old address) this
 * thread could not get a descriptor page in (its file system was full): it
 * does not try again there (a system call per event), its events count as unregistered. */
static __thread uint64_t no_desc_page __attribute__((tls_model("initial-exec"))); /* gen + 1 */
/* The thread's registry id, kept after its exit ran (thread_exit): what it records while glibc
 * tears it down (its allocator's zones, say) registers a descriptor with the same id, which the
 * collector folds into the same thread. */
static __thread uint64_t my_id __attribute__((tls_model("initial-exec")));
/* --min-duration when the buffer is full: the innermost dropped function enter's timestamp, and
 * whether no enter was dropped inside it since (a leaf call). Its exit then knows whether the
 * call was shorter than the option, which the take-back would have filtered: counted filtered,
 * not dropped (0.5's first take-back still counted every short call past a full buffer as
 * dropped, and its buffer advice asked for room for them: 404,202 dropped and "needed 404402
 * events" where 600 held every call the option keeps). Owner only; read only while skip_exits
 * says an enter was dropped. */
static __thread uint64_t skip_at __attribute__((tls_model("initial-exec")));
static __thread int skip_leaf __attribute__((tls_model("initial-exec")));
/* A name given by loupe_set_thread_name() before the thread had a descriptor. */
static __thread char pending_name[LOUPE__NAME_MAX] __attribute__((tls_model("initial-exec")));

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* The holder of registry_lock, named by the address of its registry_me (a pthread_t is opaque and
 * has no atomic form; a TLS address is unique per live thread and stays the same in a fork
 * child's forking thread). 0 when free. Atomic: loupe__registry_held() reads it unlocked. */
static __thread char registry_me __attribute__((tls_model("initial-exec")));
static uintptr_t registry_owner;
static int gate_open_flag; /* atomic: see loupe__gate_is_open() */
static pthread_mutex_t tail_lock = PTHREAD_MUTEX_INITIALIZER; /* packing exited threads' tails */

static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

void loupe__registry_lock_take(void) {
    pthread_mutex_lock(&registry_lock);
    __atomic_store_n(&registry_owner, (uintptr_t)&registry_me, __ATOMIC_RELAXED);
}

void loupe__registry_lock_give(void) {
    assert(loupe__registry_held());
    __atomic_store_n(&registry_owner, (uintptr_t)0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&registry_lock);
}

int loupe__registry_lock_try(void) {
    if (pthread_mutex_trylock(&registry_lock) != 0) {
        return 0;
    }
    __atomic_store_n(&registry_owner, (uintptr_t)&registry_me, __ATOMIC_RELAXED);
    return 1;
}

int loupe__registry_held(void) {
    return __atomic_load_n(&registry_owner, __ATOMIC_RELAXED) == (uintptr_t)&registry_me;
}

uint64_t loupe__gettid(void) {
    return (uint64_t)syscall(SYS_gettid);
}

size_t loupe__put_dec(char *buf, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++) {
        buf[i] = tmp[n - 1 - i];
    }
    return n;
}

void loupe__read_comm(uint64_t tid, char *buf, size_t size) {
    char path[64] = "/proc/self/task/";
    size_t n = strlen(path);
    n += loupe__put_dec(path + n, tid);
    memcpy(path + n, "/comm", 6);
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    ssize_t got = read(fd, buf, size - 1);
    close(fd);
    if (got <= 0) {
        buf[0] = 0;
        return;
    }
    buf[got] = 0;
    buf[strcspn(buf, "\n")] = 0;
}

/* ---- lock-free stacks of indices (chunks, descriptors): tag << 32 | (index + 1) ---- */

static void stack_push(uint64_t *head, uint32_t *link_of_item, uint32_t item) {
    uint64_t old = __atomic_load_n(head, __ATOMIC_ACQUIRE), nw;
    do {
        __atomic_store_n(link_of_item, (uint32_t)old, __ATOMIC_RELAXED);
        nw = ((old >> 32) + 1) << 32 | (uint64_t)(item + 1);
    } while (!__atomic_compare_exchange_n(head, &old, nw, 1, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE));
}

/* Pops an index; UINT32_MAX when empty. link(i) returns the address of item i's link. */
static uint32_t stack_pop(uint64_t *head, uint32_t *(*link)(void *region, uint32_t i)) {
    uint64_t old = __atomic_load_n(head, __ATOMIC_ACQUIRE), nw;
    do {
        uint32_t top = (uint32_t)old;
        if (top == 0) {
            return UINT32_MAX;
        }
        uint32_t next = __atomic_load_n(link(loupe__region, top - 1), __ATOMIC_RELAXED);
        nw = ((old >> 32) + 1) << 32 | (uint64_t)next;
    } while (!__atomic_compare_exchange_n(head, &old, nw, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    return (uint32_t)old - 1;
}

static uint32_t *chunk_link(void *region, uint32_t c) {
    return &loupe__meta(region, c)->next;
}

static uint32_t *desc_link(void *region, uint32_t i) {
    return &loupe__desc(region, i)->free_next;
}

/* ---- the pool ---- */

/* Takes a chunk for descriptor index owner within the session's capacity; LOUPE__NO_CHUNK when
 * the session's capacity is used up or the region is full. Populated chunks are preferred: the
 * free stack holds chunks used before, the bump cursor walks chunks the keeper populated. */
static uint32_t chunk_take(uint32_t owner) {
    loupe__region_hdr *h = LOUPE__HDR;
    uint64_t cap = __atomic_load_n(&h->session_chunks, __ATOMIC_RELAXED);
    if (__atomic_fetch_add(&h->chunks_in_use, 1, __ATOMIC_RELAXED) >= cap) {
        __atomic_fetch_sub(&h->chunks_in_use, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&h->pool_empty, 1, __ATOMIC_RELAXED);
        return LOUPE__NO_CHUNK;
    }
    uint32_t c = stack_pop(&h->free_head, chunk_link);
    if (c == UINT32_MAX) {
        /* seq_cst, with the end read after it: loupe__region_fit_as() lowers the end, then reads
         * the cursor, then unmaps what lies past both */
        uint64_t b = __atomic_fetch_add(&h->bump, 1, __ATOMIC_SEQ_CST);
        if (b >= __atomic_load_n(&loupe__chunk_end, __ATOMIC_SEQ_CST)) {
            __atomic_fetch_sub(&h->chunks_in_use, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&h->pool_empty, 1, __ATOMIC_RELAXED);
            return LOUPE__NO_CHUNK;
        }
        c = (uint32_t)b;
        /* past the keeper's populated chunks, a shared region's chunk is backed by its taker
         * (a page the file system cannot hold must never be touched: region.c) */
        if (b >= __atomic_load_n(&h->populated, __ATOMIC_ACQUIRE) && loupe__chunk_back(c) != 0) {
            __atomic_fetch_sub(&h->chunks_in_use, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&h->pool_empty, 1, __ATOMIC_RELAXED);
            return LOUPE__NO_CHUNK; /* not given back: its table entry cannot be written */
        }
    }
    loupe__chunk_meta *m = loupe__meta(loupe__region, c);
    __atomic_store_n(&m->next, LOUPE__NO_CHUNK, __ATOMIC_RELAXED);
    m->used = 0;
    m->tail &= LOUPE__META_ANON;
    __atomic_store_n(&m->owner, owner + 1, __ATOMIC_RELEASE);
    return c;
}

void loupe__chunk_give(uint32_t c) {
    loupe__region_hdr *h = LOUPE__HDR;
    loupe__chunk_meta *m = loupe__meta(loupe__region, c);
    __atomic_store_n(&m->owner, 0, __ATOMIC_RELAXED);
    m->used = 0;
    m->tail &= LOUPE__META_ANON;
    stack_push(&h->free_head, &m->next, c);
    __atomic_fetch_sub(&h->chunks_in_use, 1, __ATOMIC_RELAXED);
}

/* ---- registration ---- */

static void exit_key_make(void);

/* A descriptor for the calling thread, or NULL (every event then counted as unregistered).
 * Async-signal-safe: no lock, no malloc (pthread_setspecific on a key below
 * PTHREAD_KEY_2NDLEVEL_SIZE stores into the thread's own array; the key is made at the first
 * start, in normal context). */
static loupe__thread *thread_register(void) {
    if (registering || loupe__region == NULL || no_desc_page == loupe__region_gen + 1) {
        return NULL;
    }
    registering = 1;
    loupe__region_hdr *h = LOUPE__HDR;
    uint32_t i = stack_pop(&h->desc_free, desc_link);
    int fresh = 0;
    if (i == UINT32_MAX) {
        uint64_t b = __atomic_fetch_add(&h->desc_bump, 1, __ATOMIC_SEQ_CST);
        if (b >= __atomic_load_n(&loupe__desc_end, __ATOMIC_SEQ_CST)) { /* as chunk_take's */
            registering = 0;
            return NULL;
        }
        i = (uint32_t)b;
        fresh = 1;
        if (loupe__region_back(loupe__desc(loupe__region, i), sizeof(loupe__thread)) != 0) {
            /* a shared region whose file system has no room for the descriptor's page (a
             * touch would be a SIGBUS): the thread's events are counted as unregistered */
            no_desc_page = loupe__region_gen + 1;
            registering = 0;
            return NULL;
        }
    }
    loupe__thread *t = loupe__desc(loupe__region, i);
    /* Everything but the links: a recycled descriptor keeps its place in the registry list, and
     * free_next may still be read (atomically) by another thread's pop that will fail its CAS. */
    memset(t, 0, offsetof(loupe__thread, next));
    t->name_set = 0;
    t->keeper_scanned = 0;
    memset(t->name, 0, sizeof t->name);
    /* `free` (not cleared above) is still 1 for a recycled descriptor: walkers of the registry
     * skip it until it is ready, below */
    if (my_id == 0) {
        my_id = __atomic_add_fetch(&h->next_id, 1, __ATOMIC_RELAXED);
    }
    t->id = my_id;
    t->tid = loupe__gettid();
    t->first_chunk = t->cur_chunk = t->tail_chunk = LOUPE__NO_CHUNK;
    if (pending_name[0] != 0) {
        memcpy(t->name, pending_name, sizeof t->name);
        t->name_set = 1;
    }
    if (fresh) { /* push-only list: the collector walks it from any thread */
        uint64_t old = __atomic_load_n(&h->reg_head, __ATOMIC_ACQUIRE);
        do {
            t->next = (uint32_t)old;
        } while (!__atomic_compare_exchange_n(&h->reg_head, &old, (uint64_t)(i + 1), 1,
                                              __ATOMIC_RELEASE, __ATOMIC_ACQUIRE));
    }
    __atomic_store_n(&t->free, 0, __ATOMIC_RELEASE); /* ready: the registry's walkers see it */
    (void)pthread_setspecific(exit_key, t);
    loupe__tls = &t->hot;
    registering = 0;
    loupe__sample_thread_born(); /* a short thread is sampled too: the sampler opens its event now
                                  */
    return t;
}

/* The session a thread's state word names (LOUPE__STATE_NOTSC masked off). */
static uint64_t thread_state(const loupe__tbuf *b) {
    return __atomic_load_n(&b->state, __ATOMIC_RELAXED) & ~(uint64_t)LOUPE__STATE_NOTSC;
}

static loupe__thread *self(void) {
    loupe__tbuf *b = loupe__tls;
    return b ? (loupe__thread *)(void *)b : thread_register();
}

void loupe__threads_each_in(void *region, void (*fn)(loupe__thread *t, void *arg), void *arg) {
    if (region == NULL) {
        return;
    }
    loupe__region_hdr *h = region;
    uint32_t i = (uint32_t)__atomic_load_n(&h->reg_head, __ATOMIC_ACQUIRE);
    /* bounded: a region read after its program died may hold anything */
    for (uint64_t n = 0; i != 0 && i <= h->max_threads && n < h->max_threads; n++) {
        loupe__thread *t = loupe__desc(region, i - 1);
        uint32_t next = t->next;
        if (!__atomic_load_n(&t->free, __ATOMIC_ACQUIRE)) {
            fn(t, arg);
        }
        i = next;
    }
}

void loupe__threads_each(void (*fn)(loupe__thread *t, void *arg), void *arg) {
    loupe__threads_each_in(loupe__region, fn, arg);
}

/* ---- segments ---- */

/* The zones open on t: the ends kept after cur, plus those that did not fit its segment. */
static uint64_t depth_of(const loupe__thread *t) {
    return (t->hot.cur != NULL ? (uint64_t)(t->hot.resv - t->hot.cur) : 0) + t->depth_over;
}

/* Publishes cur and keeps the slots after it for the ends of depth open zones (as many as the
 * segment holds: a ring's segment may be smaller than the depth; keep-first never lets it). */
static void set_cur(loupe__thread *t, loupe__ev *cur, uint64_t depth) {
    uint64_t room = cur != NULL ? (uint64_t)(t->hot.limit - cur) : 0;
    uint64_t kept = depth < room ? depth : room;
    t->depth_over = depth - kept;
    t->hot.resv = cur != NULL ? cur + kept : NULL;
    __atomic_store_n(&t->hot.cur, cur, __ATOMIC_RELEASE);
}

/* Points the thread at chunk c as its new current segment, with room for at most allow slots,
 * with depth zones open. */
static void set_segment(loupe__thread *t, uint32_t c, uint64_t allow, uint64_t depth) {
    loupe__ev *base = loupe__chunk(loupe__region, c);
    t->cur_chunk = c;
    t->seg = base;
    t->hot.limit = base + (allow < LOUPE__CHUNK_SLOTS ? allow : LOUPE__CHUNK_SLOTS);
    set_cur(t, base, depth);
}

/* Joins session s: the thread keeps its current chunk (or takes one) and empties it. The first
 * event's timestamp was taken before this (the caller's). */
static void join_session(loupe__thread *t, uint64_t s) {
    loupe__region_hdr *h = LOUPE__HDR;
    uint32_t me = loupe__desc_index(loupe__region, t);
    t->ring = __atomic_load_n(&params.ring, __ATOMIC_RELAXED);
    t->limit_slots = __atomic_load_n(&params.thread_slots, __ATOMIC_RELAXED);
    t->hot.skip_exits = 0;
    t->used_slots = 0;
    __atomic_store_n(&t->dropped, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->reentered, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->wraps, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->recycled, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->exit_ticks, 0, __ATOMIC_RELAXED);
    t->tail_chunk = LOUPE__NO_CHUNK;
    uint32_t c = t->cur_chunk;
    if (c == LOUPE__NO_CHUNK || c >= h->nchunks) {
        c = chunk_take(me);
    } else {
        loupe__chunk_meta *m = loupe__meta(loupe__region, c);
        __atomic_store_n(&m->next, LOUPE__NO_CHUNK, __ATOMIC_RELAXED);
        m->used = 0;
    }
    t->first_chunk = c;
    if (c == LOUPE__NO_CHUNK) { /* the pool is empty: every event is a counted drop */
        t->cur_chunk = LOUPE__NO_CHUNK;
        t->seg = NULL;
        t->hot.limit = NULL;
        set_cur(t, NULL, 0);
    } else {
        set_segment(t, c, t->limit_slots, 0);
    }
    /* Without the TSC the thread's state never equals the session's: its events all take the
     * slow path, which reads the session's clock (hot.h, LOUPE__STATE_NOTSC). */
    uint64_t notsc = 0;
#if defined(__x86_64__) || defined(__i386__)
    notsc = __atomic_load_n(&loupe__use_tsc, __ATOMIC_RELAXED) ? 0 : LOUPE__STATE_NOTSC;
#endif
    __atomic_store_n(&t->hot.state, s | notsc, __ATOMIC_RELEASE);
    /* A thread joining the session (its first event in it) ends a keeper's long nap: the one
     * place of the record path that may make a system call (hotpath_syscalls.sh). After the
     * chunk is taken and cur set, so that a keeper about to nap sees the change. */
    loupe__keeper_poke();
}

/* Moves the thread to a new chunk (keep-first and keep-last while the pool and the thread's
 * limit allow), or recycles its oldest chunk (keep-last), or wraps its one segment (keep-last
 * with a limit below a chunk). Returns 0 when there is room for need slots now. */
static int next_segment(loupe__thread *t, uint64_t need) {
    uint32_t me = loupe__desc_index(loupe__region, t);
    uint64_t used_here = t->seg ? (uint64_t)(t->hot.cur - t->seg) : 0;
    if (need > LOUPE__CHUNK_SLOTS || t->cur_chunk == LOUPE__NO_CHUNK) {
        return -1;
    }
    uint64_t depth = depth_of(t);
    int wrapped = __atomic_load_n(&t->wraps, __ATOMIC_RELAXED) != 0;
    uint64_t total = t->used_slots + used_here;
    if (!wrapped && total < t->limit_slots && t->limit_slots - total >= need) {
        uint32_t c = chunk_take(me);
        if (c != LOUPE__NO_CHUNK) {
            loupe__meta(loupe__region, t->cur_chunk)->used = (uint32_t)used_here;
            /* release: the spool (spool.c) reads used once it sees next */
            __atomic_store_n(&loupe__meta(loupe__region, t->cur_chunk)->next, c, __ATOMIC_RELEASE);
            t->used_slots = total;
            set_segment(t, c, t->limit_slots - total, depth);
            return 0;
        }
    }
    if (!t->ring) {
        return -1;
    }
    if (t->first_chunk != t->cur_chunk && !wrapped) {
        /* keep-last over chunks: the oldest chunk's events give way to the newest */
        uint32_t old = t->first_chunk;
        loupe__chunk_meta *om = loupe__meta(loupe__region, old);
        t->first_chunk = __atomic_load_n(&om->next, __ATOMIC_RELAXED);
        __atomic_store_n(&t->recycled, t->recycled + om->used, __ATOMIC_RELAXED);
        t->used_slots -= om->used;
        loupe__meta(loupe__region, t->cur_chunk)->used = (uint32_t)used_here;
        __atomic_store_n(&loupe__meta(loupe__region, t->cur_chunk)->next, old, __ATOMIC_RELAXED);
        __atomic_store_n(&om->next, LOUPE__NO_CHUNK, __ATOMIC_RELAXED);
        om->used = 0;
        t->used_slots += used_here;
        uint64_t allow = t->limit_slots > t->used_slots ? t->limit_slots - t->used_slots : 0;
        if (allow < need) {
            allow = LOUPE__CHUNK_SLOTS;
        }
        set_segment(t, old, allow, depth);
        return 0;
    }
    /* keep-last in one segment: a ring. Pad the rest of the lap (stale slots of the previous lap
     * must not be read as events) and start again at the segment's start. */
    if ((uint64_t)(t->hot.limit - t->seg) < need) {
        return -1;
    }
    for (loupe__ev *p = t->hot.cur; p < t->hot.limit; p++) {
        __atomic_store_n(&p->a, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&p->b, (uint64_t)LOUPE__K_PAD, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&t->wraps, t->wraps + 1, __ATOMIC_RELEASE);
    set_cur(t, t->seg, depth);
    return 0;
}

/* Makes room for n slots for an event of the given role (1 begin, 0 other, -1 end) under
 * session s. Returns the first slot, or NULL when the event is dropped (counted). The caller
 * writes the slots and then publishes cur = slot + n. Called inside the busy bracket. */
static int slow_heavy(loupe__thread *t, uint64_t s);
static int joined(loupe__thread *t, uint64_t s);

static loupe__ev *reserve(loupe__thread *t, uint64_t s, unsigned n, int role) {
    if (joined(t, s) != 0) {
        return NULL; /* the session ended meanwhile: after the stop, not counted */
    }
    /* A begin keeps room for its own end and those of the zones open; an end has its room.
     * A ring keeps no room: it overwrites its oldest events instead of dropping new ones. */
    uint64_t need = t->ring ? n : n + (role >= 0 ? depth_of(t) : 0) + (role > 0 ? 1u : 0u);
    if (t->hot.cur != NULL && (uint64_t)(t->hot.limit - t->hot.cur) >= need) {
        return t->hot.cur;
    }
    if (t->hot.cur != NULL && role < 0 && t->hot.cur < t->hot.limit) {
        return t->hot.cur;
    }
    if (slow_heavy(t, s) != 0) {
        return NULL;
    }
    if (next_segment(t, need) == 0) {
        return t->hot.cur;
    }
    /* A dropped begin also drops its end, which will not be written: count both. */
    __atomic_store_n(&t->dropped, t->dropped + n + (role > 0 ? 1u : 0u), __ATOMIC_RELAXED);
    return NULL;
}

/* Publishes the n slots written at e (cur = e + n) for a record that opens (role 1) or closes
 * (role -1) a zone or neither (0). */
static void publish(loupe__thread *t, loupe__ev *e, unsigned n, int role) {
    uint64_t depth = depth_of(t); /* cur is still e here */
    if (role > 0) {
        depth++;
    } else if (role < 0 && depth > 0) {
        depth--;
    }
    set_cur(t, e + n, depth);
}

static void put(loupe__ev *e, uint64_t a, uint64_t b) {
    __atomic_store_n(&e->a, a, __ATOMIC_RELAXED);
    __atomic_store_n(&e->b, b, __ATOMIC_RELAXED);
}

/* Enters the slow path for session s: registers the thread when needed and raises busy (the
 * heavy half, slow_heavy, raises in_slow where the thread leaves its chunk: record.h).
 * Returns the thread, or NULL when the event is not recorded: the session is over (not counted:
 * it is after the stop), no descriptor (counted in the region), or a re-entered call (counted
 * as reentered, n events). */
static loupe__thread *slow_enter(uint64_t s, unsigned n) {
    if (LOUPE__STATE_LEVEL(s) == 0 || __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE) != s) {
        return NULL;
    }
    loupe__thread *t = self();
    if (t == NULL) {
        if (loupe__region != NULL) { /* no descriptor left, or a signal during registration */
            __atomic_fetch_add(&LOUPE__HDR->unregistered, n, __ATOMIC_RELAXED);
        }
        return NULL;
    }
    if (t->hot.busy != 0) {
        if (thread_state(&t->hot) == s) {
            __atomic_fetch_add(&t->reentered, n, __ATOMIC_RELAXED);
        } else {
            /* the interrupted call is this thread's first of the session, before it joined
             * (joining resets the thread's counts): counted with the region's unplaced events */
            __atomic_fetch_add(&LOUPE__HDR->unregistered, n, __ATOMIC_RELAXED);
        }
        return NULL;
    }
    t->hot.busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    return t;
}

/* The heavy half of the slow path, before a thread joins the session or changes chunks (the
 * only writes outside its current chunk): in_slow is raised and the gate read again, Dekker
 * with loupe__gate_close(): both sides store then load with seq_cst, so one of them sees the
 * other (a seq_cst store is a full barrier on x86-64: xchg, ~20 cycles, paid only here).
 * An append into the current chunk needs none of it, as the inline fast path: a straggler's
 * slot past the published cur is never read. 0, or -1 when the session is over (the event is
 * after the stop: not recorded, not counted). */
static int slow_heavy(loupe__thread *t, uint64_t s) {
    if (__atomic_load_n(&t->hot.in_slow, __ATOMIC_RELAXED)) {
        return 0;
    }
    __atomic_store_n(&t->hot.in_slow, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&loupe__state, __ATOMIC_SEQ_CST) == s ? 0 : -1;
}

static void slow_leave(loupe__thread *t) {
    if (__atomic_load_n(&t->hot.in_slow, __ATOMIC_RELAXED)) {
        __atomic_store_n(&t->hot.in_slow, 0, __ATOMIC_RELEASE);
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t->hot.busy = 0;
}

/* Joins session s when the thread has not yet (heavy). 0, or -1 when the session is over. */
static int joined(loupe__thread *t, uint64_t s) {
    if (thread_state(&t->hot) == s) {
        return 0;
    }
    if (slow_heavy(t, s) != 0) {
        return -1;
    }
    join_session(t, s);
    return 0;
}

uint64_t loupe__record_slow(uint64_t s, uint64_t ts, uint64_t b, int role) {
    /* Record only under the session that is active now: an end whose begin belongs to an
     * older session is dropped (that session was collected already). A begin dropped for a
     * re-entered call counts its end too (the zone's end is skipped: its state is 0); a
     * function's enter and exit are each counted where they land. */
    int fn = (b & 15u) == LOUPE__K_FUNC_ENTER || (b & 15u) == LOUPE__K_FUNC_EXIT;
    loupe__thread *t = slow_enter(s, role > 0 && !fn ? 2u : 1u);
    if (t == NULL) {
        return 0;
    }
    loupe__ev *e = reserve(t, s, 1, role);
    if (e == NULL) {
        if (role > 0 && (b & 15u) == LOUPE__K_FUNC_ENTER) {
            t->hot.skip_exits++; /* its exit must not take the room kept for recorded ends */
            skip_at = ts;
            skip_leaf = 1;
        }
        slow_leave(t);
        return 0;
    }
    put(e, ts, b);
    publish(t, e, 1, role);
    slow_leave(t);
    return s;
}

/* Slots needed for a copied string of len bytes. */
static unsigned str_slots(size_t len) {
    return (unsigned)((len + 14) / 15);
}

/* Eight bytes of p, unaligned. */
static uint64_t load8(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "put_str builds the K_STR words for a little-endian host (collect.c reads them with memcpy)"
#endif

/* Writes len bytes of str into the slots at e (str_slots(len) of them): slot k holds bytes
 * 15k..15k+7 in a and 15k+8..15k+14 in b's upper 7 bytes, as collect.c's read_str() takes them
 * apart. A full piece is two unaligned loads (the second overlaps the first by one byte and is
 * shifted); the last piece is gathered a byte at a time, so nothing past str + len is read.
 * Building the words in registers matters: the earlier version copied each piece into a stack
 * buffer with a variable-length memcpy and read it back as two words, and the wide loads that
 * followed the narrow stores missed store forwarding (about half the dynamic zone's cost). */
static void put_str(loupe__ev *e, const char *str, size_t len) {
    size_t off = 0;
    for (; off + 15 <= len; off += 15, e++) {
        uint64_t a = load8(str + off), hi = load8(str + off + 7) >> 8;
        put(e, a, hi << 8 | LOUPE__K_STR);
    }
    if (off < len) {
        const unsigned char *p = (const unsigned char *)str + off;
        size_t n = len - off; /* 1..14 */
        uint64_t a = 0, hi = 0;
        for (size_t i = n; i > 8; i--) {
            hi = hi << 8 | p[i - 1];
        }
        for (size_t i = n < 8 ? n : 8; i > 0; i--) {
            a = a << 8 | p[i - 1];
        }
        put(e, a, hi << 8 | LOUPE__K_STR);
    }
}

/* A copied string's length: cut to LOUPE_MAX_DYN_NAME bytes, and to what fits a segment beside
 * the record's own slots and the ends kept for open zones (cut is set when it was cut: counted
 * in the trace as a cut name, never silent). */
static size_t str_len(const loupe__thread *t, const char *str, size_t len, unsigned head,
                      int *cut) {
    *cut = 0;
    if (str == NULL) {
        return 0;
    }
    uint64_t room = t->limit_slots < LOUPE__CHUNK_SLOTS ? t->limit_slots : LOUPE__CHUNK_SLOTS;
    uint64_t reserved = head + depth_of(t) + 1;
    size_t max = room > reserved ? (size_t)(room - reserved) * 15 : 0;
    if (max > LOUPE_MAX_DYN_NAME) {
        max = LOUPE_MAX_DYN_NAME;
    }
    if (len > max) {
        *cut = 1;
        return max;
    }
    return len;
}

void loupe__begin_dyn(const char *name, size_t len, int level, uint64_t *state_out) {
    *state_out = 0;
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE);
    if (LOUPE__STATE_LEVEL(s) < level) {
        return;
    }
    /* The inline path (hot.h's loupe__push_dyn) did not append: a long name, the thread's first
     * event, a full segment or a re-entered call. */
    uint64_t ts = loupe__now();
    loupe__thread *t = slow_enter(s, 3);
    if (t == NULL) {
        return;
    }
    if (joined(t, s) != 0) { /* before sizing the name: the limit is the session's */
        slow_leave(t);
        return;
    }
    int cut;
    len = str_len(t, name, len, 1, &cut);
    unsigned n = 1 + str_slots(len);
    loupe__ev *e = reserve(t, s, n, 1);
    if (e != NULL) {
        put(e, ts, (uint64_t)len << 4 | (uint64_t)cut << 63 | LOUPE__K_BEGIN_DYN);
        put_str(e + 1, name, len);
        publish(t, e, n, 1);
        *state_out = s;
    }
    slow_leave(t);
}

void loupe__end_dyn(uint64_t s) {
    loupe__tbuf *b = loupe__tls;
    if (b == NULL || thread_state(b) != s) {
        return;
    }
    loupe__push_end(s, LOUPE__K_END);
}

/* A thread's own stack of what it has open (explicit zones, instrumented calls), kept with its
 * descriptor: mmap, not malloc, since the first one may come from a signal handler. NULL when it
 * cannot be mapped (the calls then run without it). */
static void *owner_stack(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p != MAP_FAILED ? p : NULL;
}

/* ---- explicit zones (loupe_zone_begin / loupe_zone_end) ----
 * A scoped zone's context notes, at its begin, how many ends the thread keeps (loupe__open_now),
 * so its end gives back those of deeper zones whose ends never came. An explicit end has only
 * its srcloc: these keep, per thread, the stack of open explicit zones with that same count, and
 * an end that matches a zone below the top closes the ones above it (as the reader does) and
 * passes the count to the end, which gives their kept ends back. 0.4 kept them: 10,000
 * longjmps out of two explicit zones dropped 31,812 of 55,906 events. A begin that was dropped
 * is on the stack too, so that its end is neither written (into a slot an outer zone kept) nor
 * counted a second time (the begin counted it). */

#define XSTACK 256u /* entries: one 4 KiB page */
/* An entry of a begin that was dropped (counted with its end): open holds the ends kept before
 * it, with this bit. Its end is then not written (nor counted again). */
#define XDROPPED (1ull << 63)

typedef struct loupe__xent {
    uint64_t b;    /* the srcloc's address */
    uint64_t open; /* loupe__open_now() right after its begin; XDROPPED | before it, dropped */
} loupe__xent;

_Static_assert(XSTACK * sizeof(loupe__xent) == 4096, "the stack is one page");

/* 1 when the entry's zone was closed by an end that gave its kept end back (a scoped zone's,
 * around it): a zone still open noted no more kept ends than are kept now, kept counting it. */
static int xent_closed(const loupe__xent *x, uint64_t kept) {
    return (x->open & XDROPPED) != 0 ? (x->open & ~XDROPPED) > kept : x->open > kept;
}

uint64_t loupe__zone_begin_x(uint64_t s, const loupe_srcloc *sl) {
    uint64_t b = LOUPE__ADDR(sl);
    uint64_t before = loupe__open_now();
    uint64_t r = loupe__push(s, b, 1);
    loupe__thread *t = (loupe__thread *)(void *)loupe__tls;
    if (t == NULL) {
        return r;
    }
    if (t->xstate != s) {
        t->xstate = s;
        t->xdepth = 0;
    }
    if (t->xs == NULL) {
        t->xs = owner_stack(XSTACK * sizeof(loupe__xent));
    }
    uint32_t d = t->xdepth;
    /* Zones closed meanwhile by a scoped zone's give-back (a longjmp out of an explicit zone
     * inside a LOUPE_ZONE) leave the stack. */
    while (d > 0 && d <= XSTACK && t->xs != NULL && xent_closed(&t->xs[d - 1], before)) {
        d--;
    }
    if (d < XSTACK && t->xs != NULL) {
        t->xs[d] = (loupe__xent){b, r != 0 ? loupe__open_now() : XDROPPED | before};
    }
    t->xdepth = d + 1;
    return r;
}

void loupe__zone_end_x(uint64_t s, const loupe_srcloc *sl) {
    uint64_t b = LOUPE__ADDR(sl);
    uint64_t open = 0; /* 0: nothing given back */
    loupe__thread *t = (loupe__thread *)(void *)loupe__tls;
    if (t != NULL && t->xstate == s && t->xdepth > 0) {
        uint32_t d = t->xdepth;
        if (d > XSTACK || t->xs == NULL) {
            t->xdepth = d - 1; /* beyond the stack: the zone is not known, as before */
        } else {
            for (uint32_t i = d; i-- > 0;) {
                if (t->xs[i].b == b) {
                    open = t->xs[i].open;
                    t->xdepth = i;
                    break;
                }
            }
        }
    }
    if ((open & XDROPPED) != 0) {
        return; /* its begin was dropped and counted this end with it */
    }
    loupe__push_end_open(s, b | LOUPE__K_END, open);
}

/* Writes a two-slot record, followed by a copied string when str is not NULL (its length goes
 * in the value). Arguments and flows carry ts 0: the collector does not read it, and skipping
 * the TSC read halves an argument's cost. */
/* Writes nhead head slots (head[k] = {a, b}), followed by a copied string when str is not NULL:
 * its length and cut flag go in the value (a) of head slot vslot. One path for the two-slot
 * records (arguments with a tagged key, flows) and the one-slot argument record. */
static void slots_write(uint64_t s, uint64_t head[][2], unsigned nhead, unsigned vslot,
                        const char *str, size_t len) {
    loupe__thread *t = slow_enter(s, nhead);
    if (t == NULL) {
        return;
    }
    if (joined(t, s) != 0) {
        slow_leave(t);
        return;
    }
    int cut = 0;
    if (str != NULL) {
        len = str_len(t, str, len, nhead, &cut);
        head[vslot][0] = len | (uint64_t)cut << 63;
    }
    unsigned n = nhead + (str ? str_slots(len) : 0);
    loupe__ev *e = reserve(t, s, n, 0);
    if (e != NULL) {
        for (unsigned k = 0; k < nhead; k++) {
            put(&e[k], head[k][0], head[k][1]);
        }
        if (str != NULL) {
            put_str(&e[nhead], str, len);
        }
        publish(t, e, n, 0);
    }
    slow_leave(t);
}

/* A two-slot record. Arguments and flows carry ts 0: the collector does not read it, and
 * skipping the TSC read halves an argument's cost. */
static void ext_write(uint64_t s, uint64_t ts, unsigned sub, unsigned flags, uint64_t value,
                      uint64_t ref, const char *str, size_t len) {
    uint64_t head[2][2] = {{ts, (uint64_t)sub << 8 | (uint64_t)flags << 4 | LOUPE__K_EXT},
                           {value, ref << 4 | LOUPE__K_EXT_DATA}};
    slots_write(s, head, 2, 1, str, len);
}

void loupe__arg(int type, const char *key, uint64_t bits, const char *str) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE);
    if (LOUPE__STATE_LEVEL(s) == 0) {
        return;
    }
    size_t len = 0;
    if (type == LOUPE_ARG_STRING) { /* copied inline */
        len = strlen(str);
    } else {
        str = NULL;
    }
    uint64_t ref = (uint64_t)(uintptr_t)key;
    if (!LOUPE__KEY_FITS(ref)) { /* a tagged pointer: the two-slot record, whose ref has 60 bits */
        ext_write(s, 0, LOUPE__EXT_ARG, (unsigned)type, bits, ref, str, len);
        return;
    }
    /* The one-slot record (hot.h's loupe__push_arg): {value, key << 8 | type << 4 | K_ARG}; a
     * string's value is its length and cut flag, the string follows in K_STR slots. */
    uint64_t head[1][2] = {{bits, ref << 8 | (uint64_t)type << 4 | LOUPE__K_ARG}};
    slots_write(s, head, 1, 0, str, len);
}

void loupe__ext(int sub, int level, const char *name, uint64_t value) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE);
    if (LOUPE__STATE_LEVEL(s) < level || LOUPE__STATE_LEVEL(s) == 0) {
        return;
    }
    uint64_t ts = sub == LOUPE__EXT_FLOW_OUT || sub == LOUPE__EXT_FLOW_IN ? 0 : loupe__now();
    ext_write(s, ts, (unsigned)sub, 0, value, (uint64_t)(uintptr_t)name, NULL, 0);
}

/* ---- async slices (annotate.h): two-slot records, paired by id in the collector ---- */

/* Whether the session records async slices: the state to record under, else 0. */
static uint64_t async_state(void) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE);
    return LOUPE__STATE_LEVEL(s) >= LOUPE_LEVEL_ASYNC && LOUPE__STATE_LEVEL(s) != 0 ? s : 0;
}

void loupe_async_begin(const char *name, uint64_t id) {
    uint64_t s = async_state();
    if (s != 0) {
        ext_write(s, loupe__now(), LOUPE__EXT_ASYNC_BEGIN, 0, id,
                  (uint64_t)(uintptr_t)(name ? name : ""), NULL, 0);
    }
}

void loupe_async_begin_dyn(const char *name, uint64_t id) {
    uint64_t s = async_state();
    if (s == 0) {
        return;
    }
    uint64_t ts = loupe__now();
    loupe__thread *t = slow_enter(s, 2);
    if (t == NULL) {
        return;
    }
    if (joined(t, s) != 0) {
        slow_leave(t);
        return;
    }
    int cut;
    size_t len = str_len(t, name, name ? strlen(name) : 0, 2, &cut);
    unsigned n = 2 + str_slots(len);
    loupe__ev *e = reserve(t, s, n, 0);
    if (e != NULL) {
        put(&e[0], ts,
            (uint64_t)cut << 28 | (uint64_t)len << 16 | (uint64_t)LOUPE__EXT_ASYNC_BEGIN << 8 |
                LOUPE__ASYNC_DYN << 4 | LOUPE__K_EXT);
        put(&e[1], id, LOUPE__K_EXT_DATA);
        put_str(&e[2], name, len);
        publish(t, e, n, 0);
    }
    slow_leave(t);
}

void loupe_async_end(uint64_t id) {
    uint64_t s = async_state();
    if (s != 0) {
        ext_write(s, loupe__now(), LOUPE__EXT_ASYNC_END, 0, id, 0, NULL, 0);
    }
}

/* ---- thread names ---- */

void loupe_set_thread_name(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n >= LOUPE__NAME_MAX) {
        n = LOUPE__NAME_MAX - 1;
    }
    memcpy(pending_name, name ? name : "", n);
    pending_name[n] = 0;
    loupe__tbuf *b = loupe__tls;
    if (b == NULL) {
        return; /* applied when the thread registers */
    }
    loupe__thread *t = (loupe__thread *)(void *)b;
    loupe__registry_lock_take();
    memcpy(t->name, pending_name, sizeof t->name);
    __atomic_store_n(&t->name_set, 1, __ATOMIC_RELEASE);
    loupe__registry_lock_give();
}

/* ---- thread exit ---- */

/* Copies the thread's current segment into the tail chunk (exited threads' last events, packed)
 * and gives its chunk back: an exited thread keeps only the events it recorded. 0 when packed. */
static int pack_tail(loupe__thread *t, uint64_t used) {
    loupe__region_hdr *h = LOUPE__HDR;
    if (used > LOUPE__CHUNK_SLOTS / 4 || __atomic_load_n(&t->wraps, __ATOMIC_RELAXED) != 0) {
        return -1; /* mostly full, or a ring: kept as it is */
    }
    pthread_mutex_lock(&tail_lock);
    uint32_t tc = (uint32_t)(__atomic_load_n(&h->tail_chunk, __ATOMIC_RELAXED) - 1);
    if (tc == UINT32_MAX ||
        (loupe__meta(loupe__region, tc)->tail & LOUPE__META_TAIL_OFF) + used > LOUPE__CHUNK_SLOTS) {
        uint32_t nc = chunk_take(UINT32_MAX - 1);
        if (nc != LOUPE__NO_CHUNK && (loupe__meta(loupe__region, nc)->tail & LOUPE__META_ANON)) {
            /* in the process's own memory (region.c): packing would take the events out of
             * the file a recovery reads */
            loupe__chunk_give(nc);
            nc = LOUPE__NO_CHUNK;
        }
        if (nc == LOUPE__NO_CHUNK) {
            pthread_mutex_unlock(&tail_lock);
            return -1;
        }
        __atomic_store_n(&loupe__meta(loupe__region, nc)->next, tc,
                         __ATOMIC_RELAXED); /* tail chunks chain, newest first */
        __atomic_store_n(&h->tail_chunk, (uint64_t)nc + 1, __ATOMIC_RELEASE);
        tc = nc;
    }
    loupe__chunk_meta *m = loupe__meta(loupe__region, tc);
    uint32_t off = m->tail & LOUPE__META_TAIL_OFF; /* the flag bit is clear: see above */
    memcpy(loupe__chunk(loupe__region, tc) + off, t->seg, used * sizeof(loupe__ev));
    t->tail_off = off;
    t->tail_n = (uint32_t)used;
    m->tail += (uint32_t)used;
    __atomic_store_n(&t->tail_chunk, tc, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&tail_lock);
    return 0;
}

static pid_t region_pid; /* the process the region's descriptors belong to */

static void thread_exit(void *p) {
    loupe__thread *t = p;
    if (loupe__region == NULL || getpid() != __atomic_load_n(&region_pid, __ATOMIC_RELAXED) ||
        loupe__tls != &t->hot) {
        return; /* a fork child's copy of another process's descriptor */
    }
    uint64_t now = loupe__now();
    t->hot.busy = 1; /* a signal handler recording from here on is counted, not written */
    /* Serialised with the collector and recycling (which walk this chain): the thread belongs
     * to a session until that session was collected, even after its gate closed. Thread exit is
     * never a signal handler's context, so the lock is allowed here. */
    loupe__registry_lock_take();
    loupe__region_hdr *h = LOUPE__HDR;
    uint64_t st = thread_state(&t->hot);
    int in_session = st != 0 && st == __atomic_load_n(&h->state, __ATOMIC_ACQUIRE) &&
                     !__atomic_load_n(&h->stopped, __ATOMIC_ACQUIRE);
    if (in_session) {
        /* Zones the thread left open end when it exited (pthread_exit inside a zone). */
        __atomic_store_n(&t->exit_ticks, now, __ATOMIC_RELAXED);
        if (t->cur_chunk != LOUPE__NO_CHUNK) {
            uint64_t used = (uint64_t)(t->hot.cur - t->seg);
            loupe__meta(loupe__region, t->cur_chunk)->used = (uint32_t)used;
            if (t->cur_chunk == t->first_chunk && pack_tail(t, used) == 0) {
                t->first_chunk = LOUPE__NO_CHUNK;
                uint32_t c = t->cur_chunk;
                t->cur_chunk = LOUPE__NO_CHUNK;
                loupe__chunk_give(c);
            }
        }
        if (!__atomic_load_n(&t->name_set, __ATOMIC_ACQUIRE) && (pid_t)t->tid != getpid()) {
            loupe__read_comm(t->tid, t->name, sizeof t->name); /* its last name */
        }
    } else if (t->cur_chunk != LOUPE__NO_CHUNK) {
        /* not in this session: nothing of it is needed */
        uint32_t c = t->cur_chunk;
        t->cur_chunk = t->first_chunk = LOUPE__NO_CHUNK;
        __atomic_store_n(&t->hot.state, 0, __ATOMIC_RELAXED);
        loupe__chunk_give(c);
    }
    loupe__tls = NULL;
    __atomic_store_n(&t->exited, 1, __ATOMIC_RELEASE);
    loupe__registry_lock_give();
}

static void exit_key_make(void) {
    (void)pthread_key_create(&exit_key, thread_exit);
}

void loupe__rec_tail_lock(int take) {
    if (take) {
        pthread_mutex_lock(&tail_lock);
    } else {
        pthread_mutex_unlock(&tail_lock);
    }
}

/* ---- recycling (after a collection) ---- */

static void recycle_one(loupe__thread *t, void *arg) {
    (void)arg;
    uint32_t me = loupe__desc_index(loupe__region, t);
    int exited = __atomic_load_n(&t->exited, __ATOMIC_ACQUIRE);
    /* every chunk of its chain except the current one of a live thread goes back */
    uint32_t c = t->first_chunk;
    while (c != LOUPE__NO_CHUNK && c < LOUPE__HDR->nchunks) {
        loupe__chunk_meta *m = loupe__meta(loupe__region, c);
        uint32_t next = __atomic_load_n(&m->next, __ATOMIC_RELAXED);
        if (exited || c != t->cur_chunk) {
            if (m->owner == me + 1) {
                loupe__chunk_give(c);
            }
        }
        c = next;
    }
    t->first_chunk = LOUPE__NO_CHUNK;
    if (exited) {
        if (t->cur_chunk != LOUPE__NO_CHUNK &&
            loupe__meta(loupe__region, t->cur_chunk)->owner == me + 1) {
            loupe__chunk_give(t->cur_chunk);
        }
        t->cur_chunk = LOUPE__NO_CHUNK;
        t->tail_chunk = LOUPE__NO_CHUNK;
        __atomic_store_n(&t->free, 1, __ATOMIC_RELEASE);
        stack_push(&LOUPE__HDR->desc_free, &t->free_next, me);
    }
}

void loupe__rec_recycle(void) {
    assert(loupe__registry_held());
    if (loupe__region == NULL) {
        return;
    }
    loupe__threads_each(recycle_one, NULL);
    pthread_mutex_lock(&tail_lock);
    uint32_t tc = (uint32_t)(__atomic_load_n(&LOUPE__HDR->tail_chunk, __ATOMIC_RELAXED) - 1);
    __atomic_store_n(&LOUPE__HDR->tail_chunk, 0, __ATOMIC_RELEASE);
    while (tc != UINT32_MAX && tc != LOUPE__NO_CHUNK) {
        uint32_t next = __atomic_load_n(&loupe__meta(loupe__region, tc)->next, __ATOMIC_RELAXED);
        loupe__chunk_give(tc);
        tc = next;
    }
    pthread_mutex_unlock(&tail_lock);
}

/* ---- what a process that records into its own memory holds at its death ---- */

static void count_memory(loupe__thread *t, void *arg) {
    uint64_t *out = arg;
    uint64_t state = __atomic_load_n(&LOUPE__HDR->state, __ATOMIC_ACQUIRE);
    if ((__atomic_load_n(&t->hot.state, __ATOMIC_ACQUIRE) & ~(uint64_t)LOUPE__STATE_NOTSC) !=
        state) {
        return;
    }
    void *r = loupe__region;
    uint64_t n = 0;
    uint64_t wraps = __atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE);
    uint32_t tail = __atomic_load_n(&t->tail_chunk, __ATOMIC_ACQUIRE);
    const loupe__ev *cur = __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE);
    if (t->ring && wraps != 0 && t->seg != NULL && cur >= t->seg && t->hot.limit >= t->seg) {
        /* a single-segment ring: every event it took, also those it wrote over (all lost
         * now, as the collector counts a ring's overwritten events as dropped) */
        n = wraps * (uint64_t)(t->hot.limit - t->seg) + (uint64_t)(cur - t->seg);
    } else if (tail != LOUPE__NO_CHUNK) {
        n = t->tail_n;
    } else {
        uint32_t c = __atomic_load_n(&t->first_chunk, __ATOMIC_ACQUIRE);
        for (uint64_t guard = 0;
             c != LOUPE__NO_CHUNK && c < LOUPE__HDR->nchunks && guard < LOUPE__HDR->nchunks;
             guard++) {
            if (c == __atomic_load_n(&t->cur_chunk, __ATOMIC_ACQUIRE)) {
                const loupe__ev *base = loupe__chunk(r, c);
                n += cur >= base && cur <= base + LOUPE__CHUNK_SLOTS ? (uint64_t)(cur - base) : 0;
                break;
            }
            uint32_t u = loupe__meta(r, c)->used;
            n += u > LOUPE__CHUNK_SLOTS ? LOUPE__CHUNK_SLOTS : u;
            c = __atomic_load_n(&loupe__meta(r, c)->next, __ATOMIC_RELAXED);
        }
    }
    n += t->ring ? __atomic_load_n(&t->recycled, __ATOMIC_ACQUIRE) : 0; /* chunks reused */
    uint64_t dropped = __atomic_load_n(&t->dropped, __ATOMIC_RELAXED);
    out[0] += n;
    out[1] += dropped;
    out[2] += __atomic_load_n(&t->reentered, __ATOMIC_RELAXED);
    out[3] = n + dropped > out[3] ? n + dropped : out[3]; /* what the busiest thread needed */
    out[4] += n + dropped;
}

int loupe__rec_count_memory(uint64_t out[5]) {
    out[0] = out[1] = out[2] = out[3] = out[4] = 0;
    /* a vfork() or clone() child shares its parent's memory: the session is not its own */
    if (loupe__region == NULL || (pid_t)syscall(SYS_getpid) != region_pid) {
        return -1;
    }
    loupe__threads_each(count_memory, out);
    return 0;
}

/* ---- -finstrument-functions ----
 * GCC/Clang call these around every function of an instrumented program. libloupe itself is not
 * built with -finstrument-functions, and its inline functions carry no_instrument_function, so
 * loupe's own code never records itself. */
void __cyg_profile_func_enter(void *fn, void *site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *site) __attribute__((no_instrument_function));

/* The function filters on the hot path (uftrace -D, -F, -N). Each thread counts, in its
 * descriptor (owner only, so no atomics: a signal handler's calls are balanced, so an interrupted
 * increment still stores the right value), its open instrumented calls (fdepth: --depth) and its
 * open calls to functions that match function_filter (finc); a call deeper than func_depth, or
 * one the table (ftab) filters, is not recorded and is counted (func_filtered). The counters
 * belong to one session generation (fgen): a call stack left open by an earlier session starts
 * again at 0. The table is read-only while the gate is open: an address is looked up by
 * open addressing, without a lock or a system call (async-signal-safe). */
static uint32_t func_depth; /* 0 = no limit; written under the session lock before the gate */
/* --min-duration in clock ticks, 2% under the option (0 = off): a call shorter than this whose
 * enter is still its thread's last slot is taken back at its exit (take_back_short). The 2%
 * covers the error of the start's tick rate (a baseline of 100 us or more: 5e-4 at most); a call
 * within it of the option is recorded and decided at the stop, with the final rate, exactly as
 * before. Written under the session lock before the gate opens. */
static uint64_t func_min_ticks;
static int ftab_on;      /* the table decides (written while the gate is closed) */
static int ftab_include; /* there is a function_filter: only calls inside a match are kept */
static uintptr_t ftab_keys[LOUPE__FTAB_SLOTS]; /* 0 = empty */
static uint8_t ftab_dec[LOUPE__FTAB_SLOTS];
static size_t ftab_used;
static uintptr_t ftab_lo[LOUPE__FTAB_RANGES], ftab_hi[LOUPE__FTAB_RANGES];
static size_t ftab_nranges;
#define FTAB_UNKNOWN 4u /* outside the objects the table was made for: decided at the stop */

static inline __attribute__((always_inline, no_instrument_function)) size_t ftab_slot(uintptr_t a) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing (Knuth 6.4) */
    return (size_t)(h >> 48) & (LOUPE__FTAB_SLOTS - 1);
}

void loupe__ftab_clear(void) {
    __atomic_store_n(&ftab_on, 0, __ATOMIC_RELAXED);
    if (ftab_used != 0) {
        memset(ftab_keys, 0, sizeof ftab_keys); /* 512 KiB: only once used */
    }
    ftab_used = 0;
    ftab_nranges = 0;
}

int loupe__ftab_add(uintptr_t addr, unsigned decision) {
    if (addr == 0 || ftab_used >= LOUPE__FTAB_SLOTS / 2) {
        return -1;
    }
    size_t i = ftab_slot(addr);
    while (ftab_keys[i] != 0 && ftab_keys[i] != addr) {
        i = (i + 1) & (LOUPE__FTAB_SLOTS - 1);
    }
    if (ftab_keys[i] == 0) {
        ftab_used++;
        ftab_keys[i] = addr;
        ftab_dec[i] = 0;
    }
    ftab_dec[i] |= (uint8_t)decision; /* aliases: any of the function's names decides */
    return 0;
}

int loupe__ftab_add_range(uintptr_t lo, uintptr_t hi) {
    if (ftab_nranges >= LOUPE__FTAB_RANGES) {
        return -1;
    }
    ftab_lo[ftab_nranges] = lo;
    ftab_hi[ftab_nranges] = hi;
    ftab_nranges++;
    return 0;
}

void loupe__ftab_enable(int include_mode) {
    /* the ranges sorted by start (insertion: at most LOUPE__FTAB_RANGES, once a session), so
     * that a call outside every match finds its object by binary search: 0.4 scanned them one
     * by one on every such call (--filter 10-14x dearer per call than --depth alone) */
    for (size_t i = 1; i < ftab_nranges; i++) {
        uintptr_t lo = ftab_lo[i], hi = ftab_hi[i];
        size_t j = i;
        while (j > 0 && ftab_lo[j - 1] > lo) {
            ftab_lo[j] = ftab_lo[j - 1];
            ftab_hi[j] = ftab_hi[j - 1];
            j--;
        }
        ftab_lo[j] = lo;
        ftab_hi[j] = hi;
    }
    /* overlapping ranges merged: the search below then needs only the last start <= a */
    size_t w = 0;
    for (size_t i = 0; i < ftab_nranges; i++) {
        if (w > 0 && ftab_lo[i] <= ftab_hi[w - 1]) {
            ftab_hi[w - 1] = ftab_hi[i] > ftab_hi[w - 1] ? ftab_hi[i] : ftab_hi[w - 1];
        } else {
            ftab_lo[w] = ftab_lo[i];
            ftab_hi[w] = ftab_hi[i];
            w++;
        }
    }
    ftab_nranges = w;
    __atomic_store_n(&ftab_include, include_mode, __ATOMIC_RELAXED);
    __atomic_store_n(&ftab_on, 1, __ATOMIC_RELAXED);
}

static inline __attribute__((always_inline, no_instrument_function)) unsigned
ftab_lookup(uintptr_t a) {
    for (size_t i = ftab_slot(a);; i = (i + 1) & (LOUPE__FTAB_SLOTS - 1)) {
        uintptr_t k = ftab_keys[i];
        if (k == a) {
            return ftab_dec[i];
        }
        if (k == 0) {
            break;
        }
    }
    /* the last range starting at or below a (sorted, disjoint: loupe__ftab_enable) */
    size_t lo = 0, hi = ftab_nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ftab_lo[mid] <= a) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo > 0 && a < ftab_hi[lo - 1]) {
        return 0; /* a function of a known object that matches nothing */
    }
    return FTAB_UNKNOWN;
}

/* Whether the table filters a call to fn, at its enter (finc counted up) or its exit (down):
 * the same answer at both ends of a call, as long as calls nest. */
static inline __attribute__((always_inline, no_instrument_function)) int
ftab_skip(loupe__thread *t, void *fn, int enter) {
    unsigned d = ftab_lookup((uintptr_t)fn);
    if (d & FTAB_UNKNOWN) {
        return 0;
    }
    if (d & LOUPE__FD_INCLUDE) {
        if (enter) {
            t->finc++;
        } else if (t->finc > 0) {
            t->finc--;
        }
    }
    int in = (d & LOUPE__FD_INCLUDE) || !ftab_include || t->finc > 0;
    return !in || (d & LOUPE__FD_EXCLUDE);
}

/* Adds 1 to an owner-only counter that the collector reads: one instruction on x86-64 (an add
 * to memory, which a signal handler on this thread cannot split: a load and a store could lose
 * the handler's own counts in between, as a helper saw with a SIGALRM every 20 us whose handler's
 * calls were filtered), without the lock prefix an atomic add would cost. Elsewhere an atomic
 * add. */
static inline __attribute__((always_inline, no_instrument_function)) void count_one(uint64_t *p) {
#if defined(__x86_64__)
    __asm__ volatile("addq $1, %0" : "+m"(*p));
#else
    __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
#endif
}

static inline __attribute__((always_inline, no_instrument_function)) loupe__thread *
func_self(uint64_t s) {
    loupe__tbuf *b = loupe__tls;
    loupe__thread *t = b ? (loupe__thread *)(void *)b : self(); /* hot is the first member */
    if (t == NULL) {
        return NULL; /* no descriptor left (counted by the push) */
    }
    uint32_t gen = (uint32_t)(s >> 16);
    if (t->fgen != gen) { /* fgen and func_filtered: atomic, the collector reads them */
        __atomic_store_n(&t->fgen, gen, __ATOMIC_RELAXED);
        t->fdepth = 0;
        t->finc = 0;
        __atomic_store_n(&t->func_filtered, 0, __ATOMIC_RELAXED);
    }
    return t;
}

/* ---- the thread's stack of open instrumented calls ----
 * A call's exit never comes when a longjmp (or an exception through a clang build's frames,
 * whose exits clang calls only before a return) leaves it. 0.4 then kept the call's end slot for
 * good and nested every later call inside it: 10,000 such errors in a C server's loop dropped
 * 69,084 events, with nonsense nesting, and its filters' depth counters stayed raised. Each
 * thread keeps the calls open on it, innermost last, each with where its frame is (as uftrace
 * keeps a shadow stack of its calls).
 *
 * Where a frame is. The hooks' own CFA (__builtin_dwarf_cfa) is the instrumented function's
 * stack pointer at the hook's call: after its prologue at the enter; at the exit the same, or,
 * when gcc makes the exit hook a tail call after the epilogue, the function's own CFA (then the
 * word below it is the function's return address, the site the compiler passes). The
 * function's own CFA, the stack address just above its return address, is the exact mark.
 * fs_frame finds it at the enter: the word at the offset this function's frame had before
 * (fs_offs, one load to check), else the highest word holding site between the hook's CFA and
 * the open caller's mark (a stale copy of site lower in the frame, such as an earlier call's
 * jmp_buf, is passed over), else the first within LOUPE__FSCAN words when no caller bounds the
 * search. Not found (a frame larger than the search, no site), the hook's CFA stands in: a lower
 * bound of the CFA, marked so. The stack grows down: a live call's CFA is above its stack
 * pointer when it calls, so above every call it makes, each one's CFA and lower bound included.
 * An inlined call's hooks get its caller's return address and stack pointer: the same mark, a
 * different function. Hence:
 *  - At an enter, the calls on top whose frames the new call took are gone: an exact mark below
 *    the new one, or equal with another site (a sibling call from the same frame) or the same
 *    function from the same site (the loop again; the same mark, site and another function is
 *    an inlined call inside it, which stays); a lower bound below. They are taken off, each
 *    recorded one gets an exit marked LOUPE__FUNC_CUT in the end slot its enter kept, and the
 *    collector closes it there, truncated. This is the loop whose setjmp never returns. An enter
 *    takes calls off only below a call that stays open, or within a page above the outermost
 *    one (a setjmp in a caller without hooks): a frame far above every open call (a handler on
 *    an alternate signal stack above the thread's stack, another fiber's stack) takes nothing
 *    off.
 *  - At an exit, gcc's tail-called exit hook gives the exact mark: the call is the innermost of
 *    the function with that exact mark, or else the outermost with a lower bound below it. An
 *    exit hook called from the body (clang, gcc elsewhere) gives the body's stack pointer: the
 *    call is the innermost open call above it (exact) or at or above it (a lower bound), when it
 *    is the function's. The calls above it are gone: each recorded one gets its cut exit. When
 *    none is found (an alloca lowered the stack pointer), the innermost call, if it is the
 *    function's.
 * Calls whose enter was filtered or dropped are kept too, so that leaving them lowers the
 * filters' counters (fdepth, finc) and skip_exits as their exits would have. Past
 * LOUPE__FSTACK open calls the deeper ones are only counted (fsd): their exits run as in 0.4
 * until the stack is that shallow again. x86-64 only (elsewhere the return address need not be
 * on the stack, and the calls run as in 0.4). Owner only and async-signal-safe: a signal
 * handler's calls push above the interrupted ones and pop back to them (fsd is one word, restored
 * by the time the handler returns); a handler that longjmps out leaves its calls, which the
 * next enter or exit takes off. Known limits: an alternate signal stack inside a live frame, and
 * stacks switched by hand (swapcontext coroutines), cut calls that are still open. */

#define LOUPE__FSTACK 4096u    /* entries: 128 KiB of address space, touched only as deep as used */
#define LOUPE__FSCAN 16u       /* words searched for a return address with no caller to bound it */
#define LOUPE__FSCAN_FAR 8192u /* words searched below a caller's mark (64 KiB) */
#define FE_REC 1u              /* the enter was recorded: an end slot is kept for it */
#define FE_DROP 2u             /* the enter was dropped (full buffer): skip_exits counts it */
#define FE_INC 4u              /* a call to a function_filter match: finc counts it */
#define FE_LEAF 8u             /* dropped, and nothing was kept inside it so far (--min-duration) */
#define FE_LOWER 16u           /* at is a lower bound of the frame's CFA (its enter hook's CFA) */
#define FE_BITS 8u             /* the flags' bits below the function's address in b */

typedef struct loupe__fent {
    uintptr_t at;   /* the call's CFA, or a lower bound of it (FE_LOWER) */
    uint64_t b;     /* the function's address << FE_BITS | FE_* */
    uint64_t open;  /* FE_REC: loupe__open_now() after the enter; FE_DROP: the enter's ticks */
    uintptr_t site; /* the return address the hooks were given */
} loupe__fent;

/* By function, where its frame's return address was at its enter: the word's index from the
 * hook's CFA - 8 (low 16 bits) under the function's address (direct-mapped, racy: one word, read
 * and written whole; a stale or colliding entry fails the check of the word it names). */
#define FS_OFFS 4096u
static uint64_t fs_offs[FS_OFFS];

/* The word at p, by inline assembly: it is in the instrumented function's frame, whose locals a
 * sanitizer may have poisoned. */
static inline __attribute__((always_inline, no_instrument_function)) uintptr_t
fs_word(uintptr_t p) {
    uintptr_t v;
#if defined(__x86_64__)
    __asm__("movq (%1), %0" : "=r"(v) : "r"(p));
#else
    v = 0;
    (void)p;
#endif
    return v;
}

/* The search past the cache: the highest word holding site below lim (0: only the first within
 * LOUPE__FSCAN words), noted in the cache. 0 when none is. */
static __attribute__((noinline, no_instrument_function)) uintptr_t
fs_frame_search(uintptr_t base, uintptr_t lim, uint64_t *slot, uint64_t key, uintptr_t site) {
    uintptr_t n = lim > base ? (lim - base) / 8 : LOUPE__FSCAN;
    n = n < LOUPE__FSCAN_FAR ? n : LOUPE__FSCAN_FAR;
    uintptr_t found = UINTPTR_MAX;
    for (uintptr_t i = 0; i < n; i++) {
        if (fs_word(base + i * 8) == site) {
            found = i;
            if (lim <= base) {
                break; /* no caller to bound it: the first */
            }
        }
    }
    if (found == UINTPTR_MAX || found > 0xffffu) {
        return 0;
    }
    __atomic_store_n(slot, key << 16 | found, __ATOMIC_RELAXED);
    return base + found * 8 + 8;
}

/* The instrumented function fn's CFA at its enter, from the enter hook's CFA hc and its return
 * address site, below the open caller's mark lim (0: none); FE_LOWER in *lower when it is not
 * found (hc, a lower bound, is returned). A program that calls the hooks itself passes its own
 * return address (__builtin_return_address(0)), as the compilers do, or NULL, which is not
 * searched for. */
static inline __attribute__((always_inline, no_instrument_function)) uintptr_t
fs_frame(uintptr_t hc, void *fn, void *site, uintptr_t lim, unsigned *lower) {
    *lower = 0;
#if defined(__x86_64__)
    uintptr_t base = (hc - 8) & ~(uintptr_t)7;
    if (site != NULL) {
        uint64_t key = (uint64_t)(uintptr_t)fn & 0xffffffffffffull;
        uint64_t *slot = &fs_offs[(size_t)((key * 0x9E3779B97F4A7C15ull) >> 52) & (FS_OFFS - 1)];
        uint64_t e = __atomic_load_n(slot, __ATOMIC_RELAXED);
        uintptr_t p = base + (e & 0xffffu) * 8;
        if ((e >> 16) == key && (lim == 0 || p + 8 <= lim) && fs_word(p) == (uintptr_t)site) {
            return p + 8;
        }
        uintptr_t got = fs_frame_search(base, lim, slot, key, (uintptr_t)site);
        if (got != 0) {
            return got;
        }
    }
#else
    (void)fn;
    (void)site;
    (void)lim;
#endif
    *lower = FE_LOWER;
    return hc;
}

/* Whether the new call (mark at, exact unless lower, fn << FE_BITS in fb, site) took entry e's
 * frame: e's call is gone. */
static inline __attribute__((always_inline, no_instrument_function)) int
fs_gone(const loupe__fent *e, uintptr_t at, uint64_t fb, uintptr_t site) {
    if (e->b & FE_LOWER) {
        return e->at < at;
    }
    if (e->at != at) {
        return e->at < at;
    }
    /* the same mark: a sibling from the same frame, or the same call again; not a call inlined
     * into e's */
    return e->site != site || (e->b >> FE_BITS) == (fb >> FE_BITS);
}

/* Takes the tracked calls from index j up off t's stack (they are gone), and the untracked ones
 * past LOUPE__FSTACK: each recorded one gets its cut exit in the end slot it kept, innermost
 * first (the collector closes the innermost open call of a function at its exit, so a recursive
 * function's calls are each closed at their own depth), and the filters' counters and
 * skip_exits go down as their exits would have taken them. */
static __attribute__((noinline, no_instrument_function)) void fs_leave(loupe__thread *t, uint64_t s,
                                                                       uint32_t j) {
    uint32_t d = t->fsd, top = d < LOUPE__FSTACK ? d : LOUPE__FSTACK;
    for (uint32_t i = top; i-- > j;) {
        const loupe__fent *e = &t->fs[i];
        if (e->b & FE_REC) {
            loupe__push_end_open(s, (e->b >> FE_BITS) << 4 | LOUPE__FUNC_CUT | LOUPE__K_FUNC_EXIT,
                                 e->open);
        }
        if ((e->b & FE_DROP) && t->hot.skip_exits > 0) {
            t->hot.skip_exits--;
        }
        if ((e->b & FE_INC) && t->finc > 0) {
            t->finc--;
        }
    }
    uint32_t n = d - j; /* every call raised fdepth while the filters were on */
    t->fdepth = t->fdepth > n ? t->fdepth - n : 0;
    t->fsd = j;
}

/* At the enter of fn from site, with the hook's CFA hc: takes the calls gone off t's stack and
 * returns the new call's entry (NULL past LOUPE__FSTACK or without a stack), whose flags the
 * caller adds. */
static inline __attribute__((always_inline, no_instrument_function)) loupe__fent *
fs_enter(loupe__thread *t, uint64_t s, void *fn, void *site, uintptr_t hc) {
#if !defined(__x86_64__)
    return NULL;
#endif
    if (__builtin_expect(t->fstate != s, 0)) {
        t->fstate = s;
        t->fsd = 0;
    }
    loupe__fent *fs = t->fs;
    if (__builtin_expect(fs == NULL, 0)) {
        if ((fs = owner_stack(LOUPE__FSTACK * sizeof(loupe__fent))) == NULL) {
            return NULL; /* no stack: the calls run as in 0.4 */
        }
        t->fs = fs;
        t->fsd = 0;
    }
    uint32_t d = t->fsd;
    uint32_t top = d < LOUPE__FSTACK ? d : LOUPE__FSTACK;
    /* the open caller's exact mark bounds the search: a frame lies below its caller's */
    uintptr_t lim = 0;
    if (top > 0 && !(fs[top - 1].b & FE_LOWER) && fs[top - 1].at > hc &&
        fs[top - 1].at - hc <= LOUPE__FSCAN_FAR * 8) {
        lim = fs[top - 1].at;
    }
    unsigned lower;
    uintptr_t at = fs_frame(hc, fn, site, lim, &lower);
    uint64_t fb = (uint64_t)(uintptr_t)fn << FE_BITS;
    if (top > 0 && __builtin_expect(fs_gone(&fs[top - 1], at, fb, (uintptr_t)site), 0)) {
        uint32_t j = top - 1;
        while (j > 0 && fs_gone(&fs[j - 1], at, fb, (uintptr_t)site)) {
            j--;
        }
        /* a call stays open below, or the new frame is within a page above the outermost (a
         * caller without hooks did the setjmp): the ones from j up are gone */
        if (j > 0 || at - fs[0].at <= 4096) {
            fs_leave(t, s, j);
            d = j;
        }
    }
    t->fsd = d + 1;
    if (d >= LOUPE__FSTACK) {
        return NULL;
    }
    fs[d] = (loupe__fent){at, fb | lower, 0, (uintptr_t)site};
    return &fs[d];
}

/* At fn's exit to site, with the hook's CFA hc: takes its call off t's stack, and the calls
 * above it that are gone, and returns its FE_* flags (its open count or enter ticks in *open),
 * or 0 when the stack does not know the call (FE_REC and FE_DROP both clear: the exit runs as in
 * 0.4). */
static inline __attribute__((always_inline, no_instrument_function)) unsigned
fs_exit(loupe__thread *t, uint64_t s, void *fn, void *site, uintptr_t hc, uint64_t *open) {
    uint32_t d = t->fsd;
    if (t->fstate != s || d == 0 || t->fs == NULL) {
        return 0;
    }
    const loupe__fent *fs = t->fs;
    uint64_t key = (uint64_t)(uintptr_t)fn;
    /* gcc's exit hook called after the epilogue: hc is the function's own CFA */
    int tail = site != NULL && fs_word((hc - 8) & ~(uintptr_t)7) == (uintptr_t)site;
    if (d > LOUPE__FSTACK) {
        const loupe__fent *deep = &fs[LOUPE__FSTACK - 1];
        if (tail ? deep->at < hc : deep->at <= hc && !(deep->b & FE_LOWER)) {
            d = LOUPE__FSTACK; /* a tracked call's exit: the untracked ones are gone */
        } else {
            t->fsd = d - 1; /* an untracked call (deeper than every tracked one) */
            return 0;
        }
    }
    uint32_t m = UINT32_MAX;
    /* hooks called without a site (by hand): the innermost call, if it is the function's */
    for (uint32_t i = site != NULL ? d : 0; i-- > 0;) {
        const loupe__fent *e = &fs[i];
        int lw = (e->b & FE_LOWER) != 0, mine = (e->b >> FE_BITS) == key;
        if (tail) {
            if (lw ? e->at >= hc : e->at > hc) {
                break; /* a caller */
            }
            if (mine && (lw || e->at == hc)) {
                m = i;
                if (!lw) {
                    break; /* the exact mark: the innermost there */
                }
            }
        } else if (lw ? e->at >= hc : e->at > hc) {
            m = mine ? i : UINT32_MAX; /* the innermost open call above the body's pointer */
            break;
        }
    }
    if (m == UINT32_MAX) {
        if ((fs[d - 1].b >> FE_BITS) != key) {
            return 0; /* not a call the stack knows (entered before the session, say) */
        }
        m = d - 1;
    }
    if (m + 1 < t->fsd) {
        fs_leave(t, s, m + 1); /* the calls above m are gone */
    }
    t->fsd = m;
    *open = fs[m].open;
    return (unsigned)(fs[m].b & (FE_REC | FE_DROP | FE_LEAF));
}

/* A call was kept (its end recorded, or counted dropped): the call around it is not a leaf. */
static inline __attribute__((always_inline, no_instrument_function)) void
fs_kept_inside(loupe__thread *t) {
    uint32_t d = t->fsd;
    if (d > 0 && d <= LOUPE__FSTACK && t->fs != NULL) {
        t->fs[d - 1].b &= ~(uint64_t)FE_LEAF;
    }
}

LOUPE_API void __cyg_profile_func_enter(void *fn, void *site) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    if (__builtin_expect(!(s & LOUPE__STATE_FUNC), 1)) {
        return;
    }
    uintptr_t hc = (uintptr_t)__builtin_dwarf_cfa();
    loupe__thread *t = (loupe__thread *)(void *)loupe__tls; /* hot is the first member */
    loupe__fent *fe = t != NULL ? fs_enter(t, s, fn, site, hc) : NULL;
    uint32_t max = __atomic_load_n(&func_depth, __ATOMIC_RELAXED);
    int ft = __atomic_load_n(&ftab_on, __ATOMIC_RELAXED);
    if (max != 0 || ft) {
        loupe__thread *ft_t = func_self(s);
        if (ft_t != NULL) {
            if (t == NULL) {
                t = ft_t; /* the thread's first call made its descriptor */
                fe = fs_enter(t, s, fn, site, hc);
            }
            uint32_t finc = t->finc;
            uint32_t depth = ++t->fdepth;
            int skip = ft && ftab_skip(t, fn, 1);
            if (fe != NULL && t->finc != finc) {
                fe->b |= FE_INC;
            }
            if (skip || (max != 0 && depth > max)) {
                count_one(&t->func_filtered);
                return;
            }
        }
    }
    uint64_t sx = t != NULL ? t->hot.skip_exits : 0;
    uint64_t r = loupe__push(s, (uint64_t)(uintptr_t)fn << 4 | LOUPE__K_FUNC_ENTER, 1);
    if (t == NULL && (t = (loupe__thread *)(void *)loupe__tls) != NULL) {
        fe = fs_enter(t, s, fn, site, hc); /* the thread's first event made its descriptor */
    }
    if (fe == NULL) {
        return;
    }
    if (r != 0) {
        fe->b |= FE_REC;
        fe->open = loupe__open_now();
    } else if (t->hot.skip_exits != sx) {
        fe->b |= FE_DROP | FE_LEAF;
        fe->open = skip_at;
    }
}

/* --min-duration at a call's exit, as uftrace -t decides at record time: a call shorter than
 * min ticks whose enter is still the thread's last slot (nothing was kept inside it: no call, zone,
 * argument, instant or flow) is taken back. cur and resv return to where they were before its
 * enter, so short calls take no buffer, however many there are (0.4 recorded them all and dropped
 * them at the stop: 11 of 31 long calls kept where uftrace -t kept 31); it is counted in
 * func_filtered (loupe_functions_filtered), as a call dropped at the stop was. Only the fast
 * path's case is taken back: the thread's state is the session's (so the timestamps are TSC
 * ticks), the enter is in the current segment, and every open zone's end is kept there
 * (depth_over 0); any other call is recorded and decided at the stop, as before. The keeper may
 * have scanned the enter's slot for names already, and the slot will hold another event: the
 * thread's retract_seq, written after cur, tells it to scan from the chunk in retract_chunk again
 * (names.c). Async-signal-safe: loupe__push's busy guard (a handler that interrupts this finds
 * busy set and drops its own event, counted). 1 when taken back. */
static inline __attribute__((always_inline, no_instrument_function)) int
take_back_short(uint64_t s, void *fn, uint64_t min) {
    loupe__tbuf *b = loupe__tls;
    if (b == NULL || __atomic_load_n(&b->state, __ATOMIC_RELAXED) != s) {
        return 0;
    }
    loupe__thread *t = (loupe__thread *)(void *)b; /* hot is the first member */
    uint32_t busy = b->busy;
    b->busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    loupe__ev *e = b->cur;
    int took = 0;
    uint64_t now;
    /* the clock is read only for a call whose enter is last: a call that kept others inside
     * reads it once, in its end's push */
    if (busy == 0 && e != NULL && e > t->seg && t->depth_over == 0 && b->resv > e &&
        e[-1].b == ((uint64_t)(uintptr_t)fn << 4 | LOUPE__K_FUNC_ENTER) &&
        (now = loupe__tsc()) >= e[-1].a && now - e[-1].a < min) {
        uint32_t seq = t->retract_seq;
        if (t->retract_here != t->cur_chunk) {
            t->retract_here = t->cur_chunk;
            t->retract_here_seq = seq;
        }
        /* Once the keeper has read every take-back made in earlier chunks, the first one it has
         * not read is in this chunk. (Comparing the acknowledgement with seq itself never
         * matched again under a take-back every 100 ns: the keeper's count is always a little
         * behind, so retract_chunk stayed on a chunk long sealed and the spool waited for it.) */
        if ((int32_t)(__atomic_load_n(&t->retract_ack, __ATOMIC_RELAXED) - t->retract_here_seq) >=
            0) {
            __atomic_store_n(&t->retract_chunk, t->cur_chunk, __ATOMIC_RELAXED);
        }
        /* The enter's slot becomes padding: in a ring that wrapped, the slots from cur on are
         * read as its oldest events, and a stale enter there opened a call that never ended
         * (a helper's --keep-last --buffer-events 64 kept one cut-short tiny() and none of the
         * 31 long calls). */
        __atomic_store_n(&e[-1].b, (uint64_t)LOUPE__K_PAD, __ATOMIC_RELAXED);
        b->resv -= 2; /* the enter's slot and its end's, as loupe__push kept them */
        __atomic_store_n(&b->cur, e - 1, __ATOMIC_RELEASE);
        /* after cur: a keeper that reads this count reads the cur taken back, or a later one */
        __atomic_store_n(&t->retract_seq, seq + 1, __ATOMIC_RELEASE);
        (void)func_self(s); /* the counter of this session's generation */
        count_one(&t->func_filtered);
        took = 1;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    b->busy = busy;
    return took;
}

LOUPE_API void __cyg_profile_func_exit(void *fn, void *site) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    if (__builtin_expect(!(s & LOUPE__STATE_FUNC), 1)) {
        return;
    }
    uintptr_t hc = (uintptr_t)__builtin_dwarf_cfa();
    loupe__thread *th = (loupe__thread *)(void *)loupe__tls; /* hot is the first member */
    uint64_t open = 0;
    unsigned fl = th != NULL ? fs_exit(th, s, fn, site, hc, &open) : 0;
    uint32_t max = __atomic_load_n(&func_depth, __ATOMIC_RELAXED);
    int ft = __atomic_load_n(&ftab_on, __ATOMIC_RELAXED);
    if (max != 0 || ft) {
        loupe__thread *ft_t = func_self(s);
        if (ft_t != NULL) {
            uint32_t depth = ft_t->fdepth;
            ft_t->fdepth = depth > 0 ? depth - 1 : 0;
            int skip = ft && ftab_skip(ft_t, fn, 0);
            if (skip || (max != 0 && depth > max)) {
                return; /* its enter was filtered (counted there) */
            }
        }
    }
    loupe__tbuf *t = loupe__tls;
    uint64_t min = __atomic_load_n(&func_min_ticks, __ATOMIC_RELAXED);
    if (t != NULL && t->skip_exits != 0 && !(fl & FE_REC) && t->busy == 0 && thread_state(t) == s) {
        t->skip_exits--; /* its enter was dropped (and counted with it: 2 events) */
        /* A leaf shorter than --min-duration: filtered, as the take-back would have. The stack
         * of open calls knows the call's enter and whether anything inside it was kept; for a
         * call it does not know, the innermost dropped enter's (skip_at, skip_leaf) stand in. */
        int leaf = (fl & FE_DROP) ? (fl & FE_LEAF) != 0 : skip_leaf;
        uint64_t at = (fl & FE_DROP) ? open : skip_at;
        if (min != 0 && leaf && loupe__tsc() - at < min) {
            /* one locked instruction each, which a signal handler's own count cannot split */
            __atomic_fetch_sub(&th->dropped, 2, __ATOMIC_RELAXED);
            (void)func_self(s); /* the counter of this session's generation */
            count_one(&th->func_filtered);
        } else {
            fs_kept_inside(th);
        }
        skip_leaf = 0; /* its caller, if its enter was dropped too, had a call inside */
        return;
    }
    if (min != 0 && take_back_short(s, fn, min)) {
        return;
    }
    if (th != NULL) {
        fs_kept_inside(th);
    }
    loupe__push_end_open(s, (uint64_t)(uintptr_t)fn << 4 | LOUPE__K_FUNC_EXIT, open);
}

/* ---- the session's side ---- */

int loupe__rec_prepare(const loupe__session_params *p) {
    (void)pthread_once(&exit_key_once, exit_key_make);
    /* A larger region replaces loupe__region, which the keeper reads in its passes and its
     * wait: swap it between two passes. */
    loupe__keeper_pause();
    int r = loupe__region_ensure(p->session_slots);
    loupe__keeper_resume();
    if (r != 0) {
        return r;
    }
    __atomic_store_n(&region_pid, getpid(), __ATOMIC_RELAXED);
    loupe__names_reset(); /* an earlier session's addresses may hold other names now */
    loupe__unload_prepare();
    loupe__region_hdr *h = LOUPE__HDR;
    uint64_t chunks = (p->session_slots + LOUPE__CHUNK_SLOTS - 1) / LOUPE__CHUNK_SLOTS;
    if (chunks > h->nchunks) {
        chunks = h->nchunks;
    }
    __atomic_store_n(&params.session_slots, p->session_slots, __ATOMIC_RELAXED);
    /* With the spool, memory is bounded by the session's capacity whatever a thread records:
     * no per-thread limit (a thread's spooled chunks leave the capacity). */
    uint64_t ts = p->thread_slots < p->session_slots ? p->thread_slots : p->session_slots;
    __atomic_store_n(&params.thread_slots, p->spool ? UINT64_MAX : ts, __ATOMIC_RELAXED);
    __atomic_store_n(&params.ring, p->ring, __ATOMIC_RELAXED);
    __atomic_store_n(&func_depth, p->func_depth, __ATOMIC_RELAXED);
    uint64_t min_ticks = 0;
    loupe__clock_init(); /* chooses the clock: loupe__use_tsc is not known before */
    if (p->func_min_ns != 0 && loupe__use_tsc) {
        double v = (double)p->func_min_ns * loupe__ticks_per_ns() * 0.98;
        min_ticks = v >= 1.0 && v < 1e18 ? (uint64_t)v : 0;
    }
    __atomic_store_n(&func_min_ticks, min_ticks, __ATOMIC_RELAXED);
    __atomic_store_n(&h->session_chunks, chunks, __ATOMIC_RELAXED);
    __atomic_store_n(&h->session_slots, p->session_slots, __ATOMIC_RELAXED);
    __atomic_store_n(&h->unregistered, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->pool_empty, 0, __ATOMIC_RELAXED);
    /* the first threads' chunks, now; the keeper adds more as they are taken (keeper.c) */
    loupe__region_populate(chunks < 16 ? chunks : 16);
    loupe__keeper_start();
    return 0;
}

static void wait_slow(loupe__thread *t, void *arg) {
    (void)arg;
    /* Dekker: the gate was closed with a seq_cst store; a slow path raises in_slow with a
     * seq_cst store, then re-reads the gate with a seq_cst load. Bounded: a thread stopped inside
     * the slow path (SIGSTOP, a debugger) costs at most 100 ms, and its last event may then be read
     * half-written (the collector checks every record's kind). */
    for (int i = 0; i < 100000 && __atomic_load_n(&t->hot.in_slow, __ATOMIC_SEQ_CST); i++) {
        if (i > 100) {
            struct timespec d = {0, 1000};
            nanosleep(&d, NULL);
        } else {
            sched_yield();
        }
    }
}

void loupe__gate_close(void) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    __atomic_store_n(&loupe__state, s & ~(uint64_t)0xffff, __ATOMIC_SEQ_CST);
    __atomic_store_n(&gate_open_flag, 0, __ATOMIC_RELAXED);
    if (loupe__region != NULL) {
        __atomic_store_n(&LOUPE__HDR->active, 0, __ATOMIC_RELEASE);
        loupe__threads_each(wait_slow, NULL);
    }
}

int loupe__gate_is_open(void) {
    return __atomic_load_n(&gate_open_flag, __ATOMIC_RELAXED);
}

uint64_t loupe__gate_open(int level, int function_tracing) {
    assert(!loupe__gate_is_open()); /* the previous session closed it */
    assert(level >= 0 && level <= 0xffff);
    __atomic_store_n(&gate_open_flag, 1, __ATOMIC_RELAXED);
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    uint64_t gen = (s >> 16) + 1;
    /* Function zones are INFO-level annotations: a CRITICAL-only session records none. */
    int func = function_tracing && level >= LOUPE_LEVEL_FUNCTION;
    uint64_t n = gen << 16 | (func ? LOUPE__STATE_FUNC : 0) | (uint64_t)level;
    if (loupe__region != NULL) {
        __atomic_store_n(&LOUPE__HDR->state, n, __ATOMIC_RELAXED);
        __atomic_store_n(&LOUPE__HDR->active, 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&loupe__state, n, __ATOMIC_SEQ_CST);
    return n;
}

void loupe__rec_forget_in_child(void) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    __atomic_store_n(&loupe__state, s & ~(uint64_t)0xffff, __ATOMIC_SEQ_CST);
    __atomic_store_n(&gate_open_flag, 0, __ATOMIC_RELAXED);
    loupe__tls = NULL;
    loupe__region_forget();
}
