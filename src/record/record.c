/* record.c: the recorder's slow paths: a thread's first event, joining a new session, a full
 * buffer (drop and count, or wrap the ring), dynamic names, two-slot records (arguments, instants,
 * counters, flows) and the -finstrument-functions hooks. The fast path is inline in annotate.h.
 *
 * Two-slot (EXT) records: slot 1 = {ts, sub << 8 | flags << 4 | K_EXT}, slot 2 = {value,
 * ref << 4 | K_EXT_DATA} where ref is a pointer to a static string. The second slot has its own
 * kind so that a ring reader can tell it from a first slot.
 * Copied strings (dynamic zone names, string arguments) follow their record inline, 15 bytes per
 * K_STR slot, so the buffer's capacity is the only limit and a ring recycles them with the rest.
 */
#include "record/record.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

uint64_t loupe__state;
__thread loupe__tbuf *loupe__tls __attribute__((tls_model("initial-exec")));
loupe__session_params loupe__params;
loupe__thread *loupe__threads;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* The holder of registry_lock, named by the address of its registry_me (a pthread_t is opaque and
 * has no atomic form; a TLS address is unique per live thread and stays the same in a fork
 * child's forking thread). 0 when free. Atomic: loupe__registry_held() reads it unlocked. */
static __thread char registry_me __attribute__((tls_model("initial-exec")));
static uintptr_t registry_owner;
static int gate_open_flag; /* atomic: see loupe__gate_is_open() */

void loupe__registry_lock_take(void) {
    pthread_mutex_lock(&registry_lock);
    __atomic_store_n(&registry_owner, (uintptr_t)&registry_me, __ATOMIC_RELAXED);
}

void loupe__registry_lock_give(void) {
    assert(loupe__registry_held());
    __atomic_store_n(&registry_owner, (uintptr_t)0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&registry_lock);
}

int loupe__registry_held(void) {
    return __atomic_load_n(&registry_owner, __ATOMIC_RELAXED) == (uintptr_t)&registry_me;
}

static pthread_key_t exit_key;
/* The buffer of a thread whose buffer could not be mapped: zero slots (base = cur = limit). */
static loupe__ev no_buffer;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

uint64_t loupe__gettid(void) {
    return (uint64_t)syscall(SYS_gettid);
}

static void thread_exit(void *p) {
    loupe__thread *t = p;
    /* Zones the thread left open end when it exited (pthread_exit inside a zone), not at the
     * stop. */
    __atomic_store_n(&t->exit_ticks, loupe__now(), __ATOMIC_RELAXED);
    /* Give back the part of the buffer it never wrote (keep-first: [cur, end) holds nothing;
     * a ring that wrapped holds events everywhere). The collector reads only below cur. */
    if (t->cap != 0 && !(t->ring && t->wraps != 0)) {
        uintptr_t from = ((uintptr_t)t->hot.cur + 4095) & ~(uintptr_t)4095;
        uintptr_t to = (uintptr_t)(t->base + t->cap) & ~(uintptr_t)4095;
        if (to > from) {
            (void)madvise((void *)from, (size_t)(to - from), MADV_DONTNEED);
            /* those pages read as zeros again: not populated any more */
            uint64_t kept = (uint64_t)((loupe__ev *)from - t->base);
            if (kept < t->populated) {
                t->populated = kept;
            }
        }
    }
    loupe__tls = NULL;
    __atomic_store_n(&t->exited, 1, __ATOMIC_RELEASE);
}

void loupe__read_comm(uint64_t tid, char *buf, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%llu/comm", (unsigned long long)tid);
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(buf, (int)size, f) != NULL) {
            buf[strcspn(buf, "\n")] = 0;
        }
        fclose(f);
    }
}

static void make_exit_key(void) {
    (void)pthread_key_create(&exit_key, thread_exit);
}

static void free_thread(loupe__thread *t) {
    if (t->map != NULL) {
        munmap(t->map, t->map_len);
    }
    free(t);
}

void loupe__free_exited(void) {
    assert(loupe__registry_held());
    loupe__thread **pp = &loupe__threads;
    while (*pp != NULL) {
        loupe__thread *t = *pp;
        if (__atomic_load_n(&t->exited, __ATOMIC_ACQUIRE)) {
            *pp = t->next;
            free_thread(t);
        } else {
            pp = &t->next;
        }
    }
}

static loupe__thread *thread_register(void) {
    (void)pthread_once(&exit_key_once, make_exit_key);
    loupe__thread *t = aligned_alloc(64, sizeof(loupe__thread));
    if (t == NULL) {
        return NULL;
    }
    memset(t, 0, sizeof(*t));
    t->tid = loupe__gettid();
    /* A name set with pthread_setname_np() before the first event (loupe_set_thread_name()
     * replaces it). The main thread's comm is the program's: not a thread name. */
    if ((pid_t)t->tid != getpid()) {
        loupe__read_comm(t->tid, t->name, sizeof t->name);
    }
    if (pthread_setspecific(exit_key, t) != 0) {
        free(t);
        return NULL;
    }
    loupe__registry_lock_take();
    t->next = loupe__threads;
    loupe__threads = t;
    loupe__registry_lock_give();
    loupe__tls = &t->hot;
    return t;
}

static loupe__thread *self(void) {
    loupe__tbuf *b = loupe__tls;
    return b ? (loupe__thread *)(void *)b : thread_register();
}

/* Buffers are mapped whole. By default the whole buffer is populated when the thread joins a
 * session (its first event: MADV_POPULATE_WRITE, or touching each page where the kernel lacks
 * it), so the record path never takes a page fault: a first touch costs ~1.5 us per 4 KiB page on
 * the test VM, 6 ns per event or 12 ns per zone (measured with bench/run.sh). A thread that
 * exits gives the unused rest back (thread_exit), so thousands of short threads do not hold
 * capacity x threads until the stop. With lazy_buffers, pages are touched a chunk at a time
 * from the slow path as the fast path reaches the populated limit (page faults, no system
 * call). Pages stay populated while the buffer is reused by later sessions. */
#define LOUPE__CHUNK_SLOTS ((uint64_t)65536) /* 1 MiB */

static void touch(loupe__ev *from, loupe__ev *to) {
    for (char *p = (char *)from; p < (char *)to; p += 4096) {
        __atomic_store_n((uint64_t *)(void *)p, 0, __ATOMIC_RELAXED);
    }
}

/* Populates [from, to) at once: the kernel's MADV_POPULATE_WRITE (Linux 5.14+), else a touch. */
static void populate(loupe__ev *from, loupe__ev *to) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    uintptr_t a = (uintptr_t)from & ~(uintptr_t)4095;
    if (to <= from || madvise((void *)a, (size_t)((uintptr_t)to - a), MADV_POPULATE_WRITE) != 0) {
        touch(from, to);
    }
}

/* Populates up to need more slots past the limit (at least one chunk); 0 when none are left. */
static int extend(loupe__thread *t, uint64_t need) {
    loupe__ev *end = t->base + t->cap;
    if (t->hot.limit >= end) {
        return 0;
    }
    uint64_t add = need > LOUPE__CHUNK_SLOTS ? need : LOUPE__CHUNK_SLOTS;
    uint64_t left = (uint64_t)(end - t->hot.limit);
    loupe__ev *nl = t->hot.limit + (add < left ? add : left);
    touch(t->hot.limit, nl);
    t->populated = (uint64_t)(nl - t->base);
    t->hot.limit = nl;
    return 1;
}

/* Joins session s: sizes the buffer for it (mapped once and reused while the capacity stays the
 * same) and empties it. */
static int join_session(loupe__thread *t, uint64_t s) {
    /* Relaxed atomics: a thread joining just as one session ends and the next starts may read
     * the next session's parameters, which is harmless (its events are discarded anyway). */
    uint64_t cap = __atomic_load_n(&loupe__params.cap, __ATOMIC_RELAXED);
    if (t->cap != cap) {
        if (t->map != NULL) {
            __atomic_store_n(&t->hot.state, 0, __ATOMIC_RELEASE);
            munmap(t->map, t->map_len);
            t->base = NULL;
            t->cap = 0;
        }
        size_t len = cap * sizeof(loupe__ev);
        void *mp = mmap(NULL, len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (mp == MAP_FAILED) {
            /* No memory for a buffer: join with none, so that every event of this thread is
             * counted as dropped (reserve) instead of vanishing. */
            t->map = NULL;
            t->map_len = 0;
            t->base = &no_buffer;
            t->cap = 0;
            t->populated = 0;
            t->ring = 0;
            t->hot.depth = 0;
            t->hot.skip_exits = 0;
            t->hot.limit = &no_buffer;
            __atomic_store_n(&t->dropped, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&t->wraps, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&t->exit_ticks, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&t->hot.cur, &no_buffer, __ATOMIC_RELAXED);
            __atomic_store_n(&t->hot.state, s, __ATOMIC_RELEASE);
            return 0;
        }
        t->map = mp;
        t->map_len = len;
        loupe__ev *m = mp;
        t->base = m;
        t->cap = cap;
        t->populated = 0;
    }
    t->ring = __atomic_load_n(&loupe__params.ring, __ATOMIC_RELAXED);
    t->hot.depth = 0;
    t->hot.skip_exits = 0;
    t->hot.limit = t->base + t->populated;
    if (!__atomic_load_n(&loupe__params.lazy, __ATOMIC_RELAXED)) {
        populate(t->hot.limit, t->base + t->cap);
        t->populated = t->cap;
        t->hot.limit = t->base + t->cap;
    } else if (t->populated == 0) {
        (void)extend(t, 1);
    }
    __atomic_store_n(&t->dropped, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->wraps, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->exit_ticks, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->hot.cur, t->base, __ATOMIC_RELAXED);
    __atomic_store_n(&t->hot.state, s, __ATOMIC_RELEASE);
    return 0;
}

/* Makes room for n slots (1 or 2) for an event of the given role (1 begin, 0 other, -1 end)
 * under session s. Returns the first slot, or NULL when the event is dropped (counted) or the
 * session is gone. The caller writes the slots and then publishes cur = slot + n. */
static loupe__ev *reserve(loupe__thread *t, uint64_t s, unsigned n, int role, uint64_t *ts) {
    if (__atomic_load_n(&t->hot.state, __ATOMIC_RELAXED) != s) {
        if (join_session(t, s) != 0) {
            return NULL;
        }
        /* Joining maps and prefaults the buffer (milliseconds): the event happens after it. */
        *ts = loupe__now();
    }
    loupe__ev *cur = t->hot.cur;
    uint64_t need = n + (role > 0 ? t->hot.depth : 0);
    if (t->cap == 0) { /* no buffer could be mapped: every event is a counted drop */
        __atomic_store_n(&t->dropped, t->dropped + n + (role > 0 ? 1u : 0u), __ATOMIC_RELAXED);
        return NULL;
    }
    while ((uint64_t)(t->hot.limit - cur) < need && extend(t, need)) {
    }
    if (t->ring) {
        if ((uint64_t)(t->hot.limit - cur) < n) {
            /* A record never straddles the wrap: pad the rest of the lap (stale slots of the
             * previous lap must not be read as events). */
            for (loupe__ev *p = cur; p < t->hot.limit; p++) {
                __atomic_store_n(&p->a, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&p->b, (uint64_t)LOUPE__K_PAD, __ATOMIC_RELAXED);
            }
            __atomic_store_n(&t->wraps, t->wraps + 1, __ATOMIC_RELAXED);
            cur = t->base;
        }
        return cur;
    }
    if ((uint64_t)(t->hot.limit - cur) >= need || (role < 0 && cur < t->hot.limit)) {
        return cur;
    }
    /* A dropped begin also drops its end, which will not be written: count both. */
    __atomic_store_n(&t->dropped, t->dropped + n + (role > 0 ? 1u : 0u), __ATOMIC_RELAXED);
    return NULL;
}

static void publish(loupe__thread *t, loupe__ev *e, unsigned n) {
    __atomic_store_n(&t->hot.cur, e + n, __ATOMIC_RELEASE);
}

static void put(loupe__ev *e, uint64_t a, uint64_t b) {
    __atomic_store_n(&e->a, a, __ATOMIC_RELAXED);
    __atomic_store_n(&e->b, b, __ATOMIC_RELAXED);
}

uint64_t loupe__record_slow(uint64_t s, uint64_t ts, uint64_t b, int role) {
    /* Record only under the session that is active now: an end whose begin belongs to an
     * older session is dropped (that session was collected already). */
    if (LOUPE__STATE_LEVEL(s) == 0 || __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE) != s) {
        return 0;
    }
    loupe__thread *t = self();
    if (t == NULL) {
        return 0;
    }
    loupe__ev *e = reserve(t, s, 1, role, &ts);
    if (e == NULL) {
        if (role > 0 && (b & 15u) == LOUPE__K_FUNC_ENTER &&
            __atomic_load_n(&t->hot.state, __ATOMIC_RELAXED) == s) {
            t->hot.skip_exits++; /* its exit must not take the room kept for recorded ends */
        }
        return 0;
    }
    put(e, ts, b);
    if (role > 0) {
        t->hot.depth++;
    } else if (role < 0 && t->hot.depth > 0) {
        t->hot.depth--;
    }
    publish(t, e, 1);
    return s;
}

/* Slots needed for a copied string of len bytes. */
static unsigned str_slots(size_t len) {
    return (unsigned)((len + 14) / 15);
}

/* Writes len bytes of str into the slots at e (str_slots(len) of them). */
static void put_str(loupe__ev *e, const char *str, size_t len) {
    for (size_t off = 0; off < len; off += 15, e++) {
        unsigned char chunk[16] = {0};
        size_t n = len - off < 15 ? len - off : 15;
        memcpy(chunk, str + off, n);
        uint64_t a, hi = 0;
        memcpy(&a, chunk, 8);
        memcpy(&hi, chunk + 8, 7);
        put(e, a, hi << 8 | LOUPE__K_STR);
    }
}

/* A copied string's length: cut to LOUPE_MAX_DYN_NAME and to a quarter of the buffer. */
static size_t str_len(const char *str, size_t len) {
    if (str == NULL) {
        return 0;
    }
    size_t max = (size_t)(__atomic_load_n(&loupe__params.cap, __ATOMIC_RELAXED) / 4) * 15;
    if (len > LOUPE_MAX_DYN_NAME) {
        len = LOUPE_MAX_DYN_NAME;
    }
    return len < max ? len : max;
}

void loupe__begin_dyn(const char *name, size_t len, int level, uint64_t *state_out) {
    *state_out = 0;
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE);
    if (LOUPE__STATE_LEVEL(s) < level) {
        return;
    }
    loupe__thread *t = self();
    if (t == NULL) {
        return;
    }
    uint64_t ts = loupe__now();
    len = str_len(name, len);
    unsigned n = 1 + str_slots(len);
    loupe__ev *e = reserve(t, s, n, 1, &ts);
    if (e == NULL) {
        return;
    }
    put(e, ts, (uint64_t)len << 4 | LOUPE__K_BEGIN_DYN);
    put_str(e + 1, name, len);
    t->hot.depth++;
    publish(t, e, n);
    *state_out = s;
}

void loupe__end_dyn(uint64_t s) {
    loupe__tbuf *b = loupe__tls;
    if (b == NULL || __atomic_load_n(&b->state, __ATOMIC_RELAXED) != s) {
        return;
    }
    (void)loupe__record_slow(s, loupe__now(), LOUPE__K_END, -1);
}

/* Writes a two-slot record, followed by a copied string when str is not NULL (its length goes
 * in the value). Arguments and flows carry ts 0: the collector does not read it, and skipping
 * the TSC read halves an argument's cost. */
static void ext_write(loupe__thread *t, uint64_t s, uint64_t ts, unsigned sub, unsigned flags,
                      uint64_t value, uint64_t ref, const char *str, size_t len) {
    unsigned n = 2 + (str ? str_slots(len) : 0);
    loupe__ev *e = reserve(t, s, n, 0, &ts);
    if (e == NULL) {
        return;
    }
    put(&e[0], ts, (uint64_t)sub << 8 | (uint64_t)flags << 4 | LOUPE__K_EXT);
    put(&e[1], value, ref << 4 | LOUPE__K_EXT_DATA);
    if (str != NULL) {
        put_str(&e[2], str, len);
    }
    publish(t, e, n);
}

void loupe__arg(int type, const char *key, uint64_t bits, const char *str) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE);
    if (LOUPE__STATE_LEVEL(s) == 0) {
        return;
    }
    loupe__thread *t = self();
    if (t == NULL) {
        return;
    }
    size_t len = 0;
    if (type == LOUPE_ARG_STRING) { /* copied inline */
        len = str_len(str, strlen(str));
        bits = len;
    } else {
        str = NULL;
    }
    ext_write(t, s, 0, LOUPE__EXT_ARG, (unsigned)type, bits, (uint64_t)(uintptr_t)key, str, len);
}

void loupe__ext(int sub, int level, const char *name, uint64_t value) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_ACQUIRE);
    if (LOUPE__STATE_LEVEL(s) < level || LOUPE__STATE_LEVEL(s) == 0) {
        return;
    }
    loupe__thread *t = self();
    if (t == NULL) {
        return;
    }
    uint64_t ts = sub == LOUPE__EXT_FLOW_OUT || sub == LOUPE__EXT_FLOW_IN ? 0 : loupe__now();
    ext_write(t, s, ts, (unsigned)sub, 0, value, (uint64_t)(uintptr_t)name, NULL, 0);
}

/* ---- thread names ---- */

void loupe_set_thread_name(const char *name) {
    loupe__thread *t = self();
    if (t == NULL) {
        return;
    }
    loupe__registry_lock_take();
    size_t n = name ? strlen(name) : 0;
    if (n >= sizeof(t->name)) {
        n = sizeof(t->name) - 1;
    }
    memcpy(t->name, name ? name : "", n);
    t->name[n] = 0;
    loupe__registry_lock_give();
}

/* ---- -finstrument-functions ----
 * GCC/Clang call these around every function of an instrumented program. libloupe itself is not
 * built with -finstrument-functions, and its inline functions carry no_instrument_function, so
 * loupe's own code never records itself. */
void __cyg_profile_func_enter(void *fn, void *site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *site) __attribute__((no_instrument_function));

LOUPE_API void __cyg_profile_func_enter(void *fn, void *site) {
    (void)site;
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    if (__builtin_expect(!(s & LOUPE__STATE_FUNC), 1)) {
        return;
    }
    (void)loupe__push(s, (uint64_t)(uintptr_t)fn << 4 | LOUPE__K_FUNC_ENTER, 1);
}

LOUPE_API void __cyg_profile_func_exit(void *fn, void *site) {
    (void)site;
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    if (__builtin_expect(!(s & LOUPE__STATE_FUNC), 1)) {
        return;
    }
    loupe__tbuf *t = loupe__tls;
    if (t != NULL && t->skip_exits != 0 && __atomic_load_n(&t->state, __ATOMIC_RELAXED) == s) {
        t->skip_exits--; /* its enter was dropped (and counted with it) */
        return;
    }
    uint64_t b = (uint64_t)(uintptr_t)fn << 4 | LOUPE__K_FUNC_EXIT;
    uint64_t ts = loupe__now();
    if (t != NULL && __atomic_load_n(&t->state, __ATOMIC_RELAXED) == s && t->cur < t->limit) {
        loupe__ev *e = t->cur;
        __atomic_store_n(&e->a, ts, __ATOMIC_RELAXED);
        __atomic_store_n(&e->b, b, __ATOMIC_RELAXED);
        t->depth -= t->depth ? 1u : 0u;
        __atomic_store_n(&t->cur, e + 1, __ATOMIC_RELEASE);
    } else {
        (void)loupe__record_slow(s, ts, b, -1);
    }
}

/* ---- the gate ---- */

void loupe__gate_close(void) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    __atomic_store_n(&loupe__state, s & ~(uint64_t)0xffff, __ATOMIC_SEQ_CST);
    __atomic_store_n(&gate_open_flag, 0, __ATOMIC_RELAXED);
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
    int func = function_tracing && level >= LOUPE_LEVEL_INFO;
    uint64_t n = gen << 16 | (func ? LOUPE__STATE_FUNC : 0) | (uint64_t)level;
    __atomic_store_n(&loupe__state, n, __ATOMIC_SEQ_CST);
    return n;
}
