/* loupe/detail/hot.h: what the inline fast path of loupe/annotate.h needs. NOT API: every name
 * here may change in any release (docs/ABI.md); include loupe/annotate.h, never this file.
 *
 * The slot format: a thread records into its own buffer of 16-byte slots; src/record/record.c
 * writes the slow-path records and src/record/collect.c reads them all at the stop.
 */
#ifndef LOUPE_DETAIL_HOT_H
#define LOUPE_DETAIL_HOT_H

#include <loupe/export.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Conversions that are plain casts in C and, in C++, a function template (so that a C++ user's
 * -Wold-style-cast and -Wuseless-cast stay quiet whatever the argument's type: g++ does not flag
 * a cast inside a template instantiation as useless). */
#ifdef __cplusplus
} /* extern "C" */
namespace loupe {
namespace detail {
template <typename R, typename T> constexpr R conv(T v) noexcept {
    return static_cast<R>(v);
}
template <typename T> inline uintptr_t addr(const T *p) noexcept {
    return reinterpret_cast<uintptr_t>(p);
}
} // namespace detail
} // namespace loupe
extern "C" {
#define LOUPE__CONV(T, v) (::loupe::detail::conv<T>(v))
#define LOUPE__ADDR(p) (::loupe::detail::conv<uint64_t>(::loupe::detail::addr(p)))
#define LOUPE__NULL nullptr
#else
#define LOUPE__CONV(T, v) ((T)(v))
#define LOUPE__ADDR(p) ((uint64_t)(uintptr_t)(p))
#define LOUPE__NULL NULL
#endif

/* One 16-byte buffer slot. a = timestamp (or payload), b = kind in bits 0..3 | payload. */
typedef struct loupe__ev {
    uint64_t a;
    uint64_t b;
} loupe__ev;

enum {
    LOUPE__K_BEGIN = 0,     /* a = ts, b = srcloc pointer */
    LOUPE__K_END = 1,       /* a = ts, b = srcloc pointer | 1, or 1 for the end of a dynamic zone */
    LOUPE__K_BEGIN_DYN = 2, /* a = ts, b = name length << 4 | 2; the name follows in STR slots */
    LOUPE__K_FUNC_ENTER = 3, /* a = ts, b = code address << 4 | 3 */
    LOUPE__K_FUNC_EXIT = 4,  /* a = ts, b = code address << 4 | 4 (bit 63: cut, record.h) */
    LOUPE__K_EXT = 5,        /* two slots: see src/record/record.c */
    LOUPE__K_PAD = 6,        /* an unused slot before a ring wraps */
    LOUPE__K_EXT_DATA = 7,   /* the second slot of an EXT record */
    LOUPE__K_STR = 8,        /* 15 bytes of a copied string: a = bytes 0..7, b = bytes 8..14 << 8 */
    LOUPE__K_ARG = 9         /* an argument in one slot: a = value, b = key << 8 | type << 4 | 9 */
};

/* Whether a key pointer fits the 56 bits of a K_ARG slot's b. Always on x86-64, whose user-space
 * addresses are below 2^47 (2^56 with 5-level paging: the Linux kernel's
 * Documentation/arch/x86/x86_64/5level-paging.rst); elsewhere a tagged pointer (AArch64's top-byte
 * tags, MTE's in bits 56..59) takes the slow path, which writes the two-slot EXT_ARG record. */
#if defined(__x86_64__)
#define LOUPE__KEY_FITS(k) 1
#else
#define LOUPE__KEY_FITS(k) (((k) >> 56) == 0)
#endif

/* Sub-kinds of an EXT record (bits 8..15 of its first slot's b). */
enum {
    LOUPE__EXT_ARG =
        1, /* the two-slot argument: written only for a key that does not fit a K_ARG */
    LOUPE__EXT_INSTANT = 2,
    LOUPE__EXT_COUNTER_I64 = 3,
    LOUPE__EXT_COUNTER_F64 = 4,
    LOUPE__EXT_FLOW_OUT = 5,
    LOUPE__EXT_FLOW_IN = 6
};

/* A thread's buffer header; the first cache line holds everything the fast path touches. */
typedef struct loupe__tbuf {
    loupe__ev *cur;      /* next free slot (published with a release store) */
    loupe__ev *limit;    /* one past the last slot */
    uint64_t state;      /* the session state word this buffer is recording for */
    loupe__ev *resv;     /* cur + the ends kept for the zones open on this thread (at most limit):
                            a begin needs resv + 2 <= limit (its slot and its end's), an end
                            needs cur < resv (the slot its begin kept), so an end updates no
                            count; src/record/record.c keeps the rest of the depth when a
                            ring's segment is smaller than it */
    uint64_t skip_exits; /* function enters dropped while open: their exits are not written */
    uint32_t busy;       /* recording calls in progress on this thread: one that finds it set was
                            entered from a signal handler (or an allocator) inside another, and
                            drops its event and counts it */
    uint32_t in_slow;    /* in the slow path: a stop waits for it to clear */
} loupe__tbuf;

/* Session state word: generation << 16 | flags << 8 | level (0 = not tracing). */
#define LOUPE__STATE_LEVEL(s) (LOUPE__CONV(int, (s)&0xffu))
#define LOUPE__STATE_FUNC 0x100u /* function tracing on */
/* In a thread's state word only (never in loupe__state): the session's clock is not the TSC, so
 * the thread's state never equals the session's and every event takes the slow path, which reads
 * the clock the session uses. This keeps the test of loupe__use_tsc off the fast path (on the
 * 2-core VM of docs/performance.md it cost 0.5 ns a zone: a load and a branch before each
 * rdtsc). */
#define LOUPE__STATE_NOTSC 0x8000u

LOUPE_API extern uint64_t loupe__state;
LOUPE_API extern int loupe__use_tsc;
LOUPE_API extern __thread loupe__tbuf *loupe__tls __attribute__((tls_model("initial-exec")));

LOUPE_API uint64_t loupe__now_slow(void);
LOUPE_API uint64_t loupe__record_slow(uint64_t s, uint64_t a, uint64_t b, int role);
LOUPE_API void loupe__begin_dyn(const char *name, size_t len, int level, uint64_t *state_out);
LOUPE_API void loupe__end_dyn(uint64_t state);
LOUPE_API void loupe__arg(int type, const char *key, uint64_t bits, const char *str);
LOUPE_API void loupe__ext(int sub, int level, const char *name, uint64_t value);

#define LOUPE__INLINE static inline __attribute__((always_inline, no_instrument_function))

LOUPE__INLINE uint64_t loupe__now(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_expect(loupe__use_tsc, 1)) {
        return __builtin_ia32_rdtsc();
    }
#endif
    return loupe__now_slow();
}

/* A prefetch for writing of the slots 1 KiB (64 slots) past e: the chunks are populated ahead by
 * the keeper, so the lines a thread writes next were last written (zeroed) by the kernel and are no
 * longer in any cache; without it every other 64-byte line costs a read-for-ownership miss that
 * stalls the stores (bench/: +3 ns per static zone, +8 ns for a zone with two arguments). A
 * prefetch never faults, also past the end of a chunk or of the region. */
#define LOUPE__PREFETCH_AHEAD(e) __builtin_prefetch((e) + 64, 1, 3)

/* The fast path's timestamp: read only after the thread's state matched the session's, which
 * says that the session's clock is the TSC (LOUPE__STATE_NOTSC). */
LOUPE__INLINE uint64_t loupe__tsc(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return loupe__now_slow();
#endif
}

/* The session state word, read on every annotation (one relaxed load). */
LOUPE__INLINE uint64_t loupe__state_now(void) {
    return __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
}

/* Room for n more slots at r, the thread's resv read into a local (LOUPE__ADDR: integer
 * compares, so that the no-chunk state, all three pointers NULL, needs no pointer arithmetic on
 * NULL). The callers then store r + n back: with `t->resv += n` instead, gcc 12 reloads resv for
 * a read-modify-write of memory after the relaxed atomic stores of the slots (it cannot tell
 * that they do not alias), one more load and a store-forwarding step per event. With this and
 * loupe__push_ext's two exits, a zone with two arguments went from 1.45x to 1.37x the rdtsc
 * floor and a static zone from 1.12x to 1.09x (docs/performance.md, "0.3: the hot path"). */
#define LOUPE__ROOM_AT(r, t, n) (LOUPE__ADDR(r) + (n)*16u <= LOUPE__ADDR((t)->limit))

/* Appends a begin (of a zone or a function) for session state s; returns s when recorded, 0 when
 * dropped. A begin needs room for its own end and the ends of the zones open (keep-first keeps
 * recorded zones whole): two slots at resv.
 * Signal safety: busy is raised before cur and resv are read and lowered after cur is published
 * (compiler fences order them against a signal handler on this thread, which is all that can
 * interleave). A handler that interrupts this sequence finds busy set and drops its event,
 * counted, in the slow path; one that runs before the raise or after the lowering records
 * normally, nested inside whatever zone is open. */
LOUPE__INLINE uint64_t loupe__push(uint64_t s, uint64_t b, int is_begin) {
    (void)is_begin; /* always a begin (the parameter is kept for the callers' form) */
    loupe__tbuf *t = loupe__tls;
    if (__builtin_expect(t != LOUPE__NULL && __atomic_load_n(&t->state, __ATOMIC_RELAXED) == s,
                         1)) {
        uint64_t ts = loupe__tsc();
        uint32_t busy = t->busy;
        t->busy = 1;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        loupe__ev *e = t->cur;
        loupe__ev *r = t->resv;
        if (__builtin_expect(busy == 0 && LOUPE__ROOM_AT(r, t, 2), 1)) {
            LOUPE__PREFETCH_AHEAD(e);
            __atomic_store_n(&e->a, ts, __ATOMIC_RELAXED); /* a plain store on x86-64 */
            __atomic_store_n(&e->b, b, __ATOMIC_RELAXED);
            t->resv = r + 2;
            __atomic_store_n(&t->cur, e + 1, __ATOMIC_RELEASE);
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
            t->busy = 0;
            return s;
        }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        t->busy = busy;
        return loupe__record_slow(s, ts, b, 1);
    }
    return loupe__record_slow(s, loupe__now(), b, 1);
}

/* Appends a two-slot (EXT) record for session state s inline (timed: with a timestamp, else
 * ts 0): {ts, sub << 8 | flags << 4 |
 * K_EXT}, {value, ref << 4 | K_EXT_DATA} (the layout src/record/record.c writes too), when the
 * thread's current segment has room beside the ends of its open zones. Returns 0 when it did not
 * append (the thread's first event, a full segment, a re-entered call): the caller then takes
 * the slow path, which records the event or counts it. */
LOUPE__INLINE int loupe__push_ext(uint64_t s, int timed, unsigned sub, unsigned flags,
                                  uint64_t value, uint64_t ref) {
    loupe__tbuf *t = loupe__tls;
    if (__builtin_expect(t == LOUPE__NULL || __atomic_load_n(&t->state, __ATOMIC_RELAXED) != s,
                         0)) {
        return 0;
    }
    uint64_t ts = timed ? loupe__tsc() : 0;
    uint32_t busy = t->busy;
    t->busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    loupe__ev *e = t->cur;
    loupe__ev *r = t->resv;
    if (__builtin_expect(busy == 0 && LOUPE__ROOM_AT(r, t, 2), 1)) {
        LOUPE__PREFETCH_AHEAD(e);
        __atomic_store_n(&e[0].a, ts, __ATOMIC_RELAXED);
        __atomic_store_n(&e[0].b,
                         LOUPE__CONV(uint64_t, sub) << 8 | LOUPE__CONV(uint64_t, flags) << 4 |
                             LOUPE__K_EXT,
                         __ATOMIC_RELAXED);
        __atomic_store_n(&e[1].a, value, __ATOMIC_RELAXED);
        __atomic_store_n(&e[1].b, ref << 4 | LOUPE__K_EXT_DATA, __ATOMIC_RELAXED);
        t->resv = r + 2;
        __atomic_store_n(&t->cur, e + 2, __ATOMIC_RELEASE);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        t->busy = 0;
        return 1;
    }
    /* Two exits, as loupe__push's: with one exit (t->busy = ok ? 0 : busy) gcc 12 laid the
     * appending path out as a taken branch away from the check, one more taken branch per
     * argument. */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t->busy = busy;
    return 0;
}

/* Appends a one-slot argument record for session state s inline: {value, key << 8 | type << 4 |
 * K_ARG} (the layout src/record/record.c writes too; no timestamp: an argument attaches to the
 * innermost zone open). One slot instead of the EXT record's two: half the stores and the
 * cursor moved by one (docs/performance.md, "0.3: one-slot arguments"). Returns 0 when it did
 * not append (the thread's first event, a full segment, a re-entered call, a key that does not
 * fit): the caller then takes the slow path, which records the argument or counts it. */
LOUPE__INLINE int loupe__push_arg(uint64_t s, unsigned type, uint64_t value, uint64_t key) {
    loupe__tbuf *t = loupe__tls;
    if (__builtin_expect(t == LOUPE__NULL || __atomic_load_n(&t->state, __ATOMIC_RELAXED) != s ||
                             !LOUPE__KEY_FITS(key),
                         0)) {
        return 0;
    }
    uint32_t busy = t->busy;
    t->busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    loupe__ev *e = t->cur;
    loupe__ev *r = t->resv;
    if (__builtin_expect(busy == 0 && LOUPE__ROOM_AT(r, t, 1), 1)) {
        LOUPE__PREFETCH_AHEAD(e);
        __atomic_store_n(&e->a, value, __ATOMIC_RELAXED);
        __atomic_store_n(&e->b, key << 8 | LOUPE__CONV(uint64_t, type) << 4 | LOUPE__K_ARG,
                         __ATOMIC_RELAXED);
        t->resv = r + 1;
        __atomic_store_n(&t->cur, e + 1, __ATOMIC_RELEASE);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        t->busy = 0;
        return 1;
    }
    /* two exits, as loupe__push_ext's */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t->busy = busy;
    return 0;
}

/* One argument of a zone recorded with its arguments (LOUPE_ZONE_ARGS): the key (static
 * lifetime), its LOUPE_ARG_* type and the value's 64 bits. */
typedef struct loupe__argv {
    const char *key;
    uint64_t bits;
    unsigned type;
} loupe__argv;

/* The most arguments loupe__push_args writes with a begin (LOUPE_ZONE_ARGS's 1..4 pairs). */
#define LOUPE__ARGS_MAX 4u

/* Appends a zone's begin and its n arguments a0..a(n-1) (1 <= n <= LOUPE__ARGS_MAX, a constant
 * after inlining) for session state s in one sequence: one state test, one busy guard, one room
 * check for the 1 + n slots and the end's, one publication of cur. The slots are those that
 * loupe__push and n loupe__push_arg calls would write ({ts, srcloc}, then {value, key << 8 |
 * type << 4 | K_ARG} each), so the collector reads them as it reads the separate calls'. Perfetto's
 * TRACE_EVENT("cat", "name", "k1", v1, ...) takes its arguments inline the same way
 * (include/perfetto/tracing/track_event.h). Returns s when recorded, 0 when the begin was not.
 * When the inline sequence cannot append (the thread's first event, a full segment, a
 * re-entered call, a key that does not fit), the begin and each argument take the slow paths
 * one by one, exactly as the separate calls would: recorded, or dropped and counted each. The
 * signal safety is loupe__push's: a handler that interrupts the sequence finds busy set. */
/* Writes argument x into slot p (K_ARG). */
LOUPE__INLINE void loupe__put_arg(loupe__ev *p, loupe__argv x) {
    __atomic_store_n(&p->a, x.bits, __ATOMIC_RELAXED);
    __atomic_store_n(&p->b,
                     LOUPE__ADDR(x.key) << 8 | LOUPE__CONV(uint64_t, x.type) << 4 | LOUPE__K_ARG,
                     __ATOMIC_RELAXED);
}

/* Records argument x through the slow path (recorded, or dropped and counted). */
LOUPE__INLINE void loupe__arg_slow(loupe__argv x) {
    loupe__arg(LOUPE__CONV(int, x.type), x.key, x.bits, LOUPE__NULL);
}

/* The arguments are passed by value, not as an array: with an array gcc 12 built it on the
 * stack on every call, tracing or not (six stores before the state test). Those past n are
 * not read. */
LOUPE__INLINE uint64_t loupe__push_args(uint64_t s, uint64_t b, unsigned n, loupe__argv a0,
                                        loupe__argv a1, loupe__argv a2, loupe__argv a3) {
    loupe__tbuf *t = loupe__tls;
    int fits = LOUPE__KEY_FITS(LOUPE__ADDR(a0.key)) &&
               (n < 2 || LOUPE__KEY_FITS(LOUPE__ADDR(a1.key))) &&
               (n < 3 || LOUPE__KEY_FITS(LOUPE__ADDR(a2.key))) &&
               (n < 4 || LOUPE__KEY_FITS(LOUPE__ADDR(a3.key)));
    uint64_t ts, got;
    if (__builtin_expect(
            t != LOUPE__NULL && __atomic_load_n(&t->state, __ATOMIC_RELAXED) == s && fits, 1)) {
        ts = loupe__tsc();
        uint32_t busy = t->busy;
        t->busy = 1;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        loupe__ev *e = t->cur;
        loupe__ev *r = t->resv;
        if (__builtin_expect(busy == 0 && LOUPE__ROOM_AT(r, t, n + 2), 1)) {
            LOUPE__PREFETCH_AHEAD(e);
            if (n + 1 > 4) { /* the record spans more than one 64-byte line */
                LOUPE__PREFETCH_AHEAD(e + 4);
            }
            __atomic_store_n(&e->a, ts, __ATOMIC_RELAXED);
            __atomic_store_n(&e->b, b, __ATOMIC_RELAXED);
            loupe__put_arg(e + 1, a0);
            if (n > 1) {
                loupe__put_arg(e + 2, a1);
            }
            if (n > 2) {
                loupe__put_arg(e + 3, a2);
            }
            if (n > 3) {
                loupe__put_arg(e + 4, a3);
            }
            t->resv = r + n + 2; /* its 1 + n slots and its end's */
            __atomic_store_n(&t->cur, e + 1 + n, __ATOMIC_RELEASE);
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
            t->busy = 0;
            return s;
        }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        t->busy = busy;
    } else {
        ts = loupe__now();
    }
    got = loupe__record_slow(s, ts, b, 1);
    loupe__arg_slow(a0);
    if (n > 1) {
        loupe__arg_slow(a1);
    }
    if (n > 2) {
        loupe__arg_slow(a2);
    }
    if (n > 3) {
        loupe__arg_slow(a3);
    }
    return got;
}

/* The ends the calling thread keeps now for its open zones (resv - cur, in slots): what a scoped
 * zone's begin notes in its context (loupe_zone_ctx.open), so that its end can give back the
 * ends of deeper zones that never came. 0 without a buffer. */
LOUPE__INLINE uint64_t loupe__open_now(void) {
    loupe__tbuf *t = loupe__tls;
    return t != LOUPE__NULL ? (LOUPE__ADDR(t->resv) - LOUPE__ADDR(t->cur)) / 16u : 0;
}

/* Appends an end (of a zone or a function) for session state s into the slot its begin kept
 * (cur < resv); as loupe__push otherwise. open is loupe__open_now() right after the zone's
 * begin (0: not known): when more ends are kept than that now, the zones begun inside this one
 * never ended (a longjmp, an exception through C frames, an error path) and their kept ends
 * are given back, so that skipped ends never use up a thread's buffer (the reader closes those
 * zones at this end, marked truncated). It reads loupe__tls again rather than taking the
 * buffer from the zone's context (0.3 ns a zone in bench/): a zone open across fork() ends in
 * the child, whose loupe__tls is NULL because the parent's region is unmapped there
 * (loupe__region_forget), so a kept pointer would fault. */
LOUPE__INLINE void loupe__push_end_open(uint64_t s, uint64_t b, uint64_t open) {
    loupe__tbuf *t = loupe__tls;
    if (__builtin_expect(t != LOUPE__NULL && __atomic_load_n(&t->state, __ATOMIC_RELAXED) == s,
                         1)) {
        uint64_t ts = loupe__tsc();
        uint32_t busy = t->busy;
        t->busy = 1;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        loupe__ev *e = t->cur;
        loupe__ev *r = t->resv;
        if (__builtin_expect(busy == 0 && LOUPE__ADDR(e) < LOUPE__ADDR(r), 1)) {
            __atomic_store_n(&e->a, ts, __ATOMIC_RELAXED);
            __atomic_store_n(&e->b, b, __ATOMIC_RELAXED);
            /* after this end, open - 1 ends are still owed (those of the zones around it) */
            if (__builtin_expect(open != 0 && (LOUPE__ADDR(r) - LOUPE__ADDR(e)) / 16u > open, 0)) {
                t->resv = e + open;
            }
            __atomic_store_n(&t->cur, e + 1, __ATOMIC_RELEASE);
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
            t->busy = 0;
            return;
        }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        t->busy = busy;
        (void)loupe__record_slow(s, ts, b, -1);
        return;
    }
    (void)loupe__record_slow(s, loupe__now(), b, -1);
}

LOUPE__INLINE void loupe__push_end(uint64_t s, uint64_t b) {
    loupe__push_end_open(s, b, 0);
}

/* The longest dynamic name the inline path copies (8 slots); longer ones take the slow path
 * (loupe__begin_dyn), which also cuts a name to what a segment holds. */
#define LOUPE__DYN_FAST_MAX 120u

/* Eight bytes at p, unaligned. */
LOUPE__INLINE uint64_t loupe__load8(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Appends the begin of a zone with a copied name for session state s inline: {ts, len << 4 |
 * K_BEGIN_DYN}, then the name in K_STR slots, 15 bytes each (slot k: bytes 15k..15k+7 in a,
 * 15k+8..15k+14 in the upper 7 bytes of b, as src/record/record.c's put_str writes them; the
 * words are built in registers, a full piece with two overlapping loads, the last piece a byte
 * at a time so that nothing past name + len is read; little-endian, as the x86-64 and AArch64
 * hosts loupe runs on). Returns s when recorded, 0 when it did not append (a name longer than
 * LOUPE__DYN_FAST_MAX, the thread's first event, a full segment, a re-entered call): the caller
 * then takes the slow path, which records the event or counts it. */
LOUPE__INLINE uint64_t loupe__push_dyn(uint64_t s, const char *name, size_t len) {
    loupe__tbuf *t = loupe__tls;
    if (__builtin_expect(len > LOUPE__DYN_FAST_MAX || t == LOUPE__NULL ||
                             __atomic_load_n(&t->state, __ATOMIC_RELAXED) != s,
                         0)) {
        return 0;
    }
    uint64_t ts = loupe__tsc();
    uint32_t busy = t->busy;
    t->busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    loupe__ev *e = t->cur;
    loupe__ev *r = t->resv;
    size_t n = 1 + (len + 14) / 15;
    if (__builtin_expect(busy != 0 || !LOUPE__ROOM_AT(r, t, n + 1), 0)) {
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        t->busy = busy;
        return 0;
    }
    LOUPE__PREFETCH_AHEAD(e);
    __atomic_store_n(&e->a, ts, __ATOMIC_RELAXED);
    __atomic_store_n(&e->b, LOUPE__CONV(uint64_t, len) << 4 | LOUPE__K_BEGIN_DYN, __ATOMIC_RELAXED);
    loupe__ev *p = e + 1;
    size_t off = 0;
    for (; off + 15 <= len; off += 15, p++) {
        uint64_t hi = loupe__load8(name + off + 7) >> 8;
        __atomic_store_n(&p->a, loupe__load8(name + off), __ATOMIC_RELAXED);
        __atomic_store_n(&p->b, hi << 8 | LOUPE__K_STR, __ATOMIC_RELAXED);
    }
    if (off < len) {
        const unsigned char *q =
            LOUPE__CONV(const unsigned char *, LOUPE__CONV(const void *, name + off));
        size_t k = len - off; /* 1..14 */
        uint64_t a = 0, hi = 0;
        for (size_t i = k; i > 8; i--) {
            hi = hi << 8 | q[i - 1];
        }
        for (size_t i = k < 8 ? k : 8; i > 0; i--) {
            a = a << 8 | q[i - 1];
        }
        __atomic_store_n(&p->a, a, __ATOMIC_RELAXED);
        __atomic_store_n(&p->b, hi << 8 | LOUPE__K_STR, __ATOMIC_RELAXED);
    }
    t->resv = r + n + 1; /* its n slots and its end's */
    __atomic_store_n(&t->cur, e + n, __ATOMIC_RELEASE);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t->busy = 0;
    return s;
}

#ifdef __cplusplus
}
#endif
#endif
