/* loupe/annotate.h: annotations (TraceAnnotation, StepTraceAnnotation, annotate_function).
 *
 * Zones:     { LOUPE_ZONE("load"); ... }                 scoped, static name, ends at the brace
 *            LOUPE_ZONE_L(LOUPE_LEVEL_VERBOSE, "inner")  with a host tracer level
 *            LOUPE_ZONE_DYN(name_buffer)                 dynamic name, copied at the call
 *            loupe_zone_begin(&srcloc) / loupe_zone_end(&srcloc)   explicit calls
 *            LOUPE_ZONE_ARGS("copy", "bytes", n, "k2", v2)  with 1..4 arguments, in one call
 * Steps:     { LOUPE_STEP("train", step); ... }          a zone with a `step_num` argument
 * Arguments: LOUPE_ARG_I64("bytes", n) (also _U64, _F64, _BOOL, _STR) attach to the innermost
 *            zone open on the calling thread.
 * Instants:  LOUPE_INSTANT("checkpoint")       Counters: LOUPE_COUNTER_I64("queue", n), _F64
 * Flows:     LOUPE_FLOW_OUT(id) in the producer's zone, LOUPE_FLOW_IN(id) in the consumer's:
 *            an arrow from one zone to the other, across threads.
 * Async:     LOUPE_ASYNC_BEGIN("request", id) ... LOUPE_ASYNC_END(id), on any threads: a slice
 *            begun on one thread and ended on another, matched by id (loupe_async_begin).
 *
 * Each annotation has a level (LOUPE_LEVEL_INFO unless given) and is recorded only while a session
 * is active with a host tracer level >= it. Not tracing, a zone costs one relaxed atomic load and
 * a not-taken branch. With LOUPE_DISABLE defined before including loupe, every macro compiles to
 * nothing (arguments are not evaluated). Otherwise the LOUPE_ARG_* and LOUPE_COUNTER_* values are
 * evaluated on every call, tracing or not: keep expensive ones behind loupe_is_tracing().
 * A scoped zone is a declaration: in C it cannot directly follow a `case` label or be the
 * unbraced body of an `if`; put it in a block.
 *
 * Lifetimes: names, keys and srclocs given as `const char *` to the static forms must outlive the
 * session's stop (string literals do); the _DYN forms and string argument values are copied.
 * Thread-safety: every call records on the calling thread's own memory; any thread, lock-free.
 * A thread's first event in a session takes a 64 KiB chunk from the session's pool (prepared
 * ahead by loupe's keeper thread: a few µs, no malloc, no lock, one gettid); later events make
 * no system call and allocate nothing, except that a thread that fills a chunk takes the next
 * (lock-free). When the session's capacity or the thread's limit is used up the event is
 * dropped and counted (or the thread's oldest events give way, per the overflow policy).
 * Signal-safety: every call is async-signal-safe and reentrant. A signal handler (or an
 * allocator the program replaced, or an instrumented function loupe calls) that records on a
 * thread outside a recording call records normally, its zones nested inside the zone open
 * there; one that interrupts a recording call on the same thread has its events dropped and
 * counted (the trace's "loupe_events_reentered"; a zone's begin counts its end too), never
 * written over another event. A thread's first event may come from a handler.
 *
 * Nesting: zones on one thread must end in the reverse order of their begins. An end that matches
 * a zone deeper in the stack closes the zones above it there (they lost their ends: an early
 * return, a longjmp) and marks them truncated; an end that matches no open zone is counted
 * (loupe_trace_result.unmatched_ends) and ignored. Neither corrupts the nesting of other zones.
 * The end of a zone also gives back the slots the skipped ends kept (each begin keeps one for
 * its end), so skipped ends never fill a thread's buffer: a scoped zone's (LOUPE_ZONE*,
 * loupe::Zone) from what its context noted at the begin, an explicit loupe_zone_end()'s from
 * the thread's stack of open explicit zones (256 deep: zones begun deeper than that keep their
 * skipped ends' slots until the session ends).
 * Arguments attach to the innermost zone that was recorded: an argument inside a zone filtered
 * out by its level goes to the enclosing recorded zone.
 * Names of static zones are read at the stop: a zone recorded in a shared library that is
 * dlclose()d before the stop is named "(unloaded)" (its srcloc is gone with the library).
 */
#ifndef LOUPE_ANNOTATE_H
#define LOUPE_ANNOTATE_H

#include <loupe/detail/hot.h>
#include <loupe/export.h>
#include <loupe/model.h>
#include <loupe/trace.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A static source location: what a zone's begin records a pointer to (Tracy's TracyCZone).
 * 16-byte aligned: the low 4 bits of its address carry the event kind. */
typedef struct __attribute__((aligned(16))) loupe_srcloc {
    const char *name;
    const char *function;
    const char *file;
    uint32_t line;
    int32_t level;
} loupe_srcloc;

/** The level of each annotation kind: an annotation is recorded while the session's host tracer
 * level is >= its level (loupe/trace.h). Zones and instants take theirs from the call (the macros
 * without _L use LOUPE_LEVEL_INFO); the others are fixed: */
enum {
    LOUPE_LEVEL_STEP = LOUPE_LEVEL_CRITICAL,    /* LOUPE_STEP zones: seen at every level */
    LOUPE_LEVEL_ZONE = LOUPE_LEVEL_INFO,        /* LOUPE_ZONE, LOUPE_ZONE_DYN, LOUPE_INSTANT */
    LOUPE_LEVEL_FUNCTION = LOUPE_LEVEL_INFO,    /* -finstrument-functions calls */
    LOUPE_LEVEL_COUNTER = LOUPE_LEVEL_CRITICAL, /* counters: recorded at every level */
    LOUPE_LEVEL_FLOW = LOUPE_LEVEL_CRITICAL,    /* flow ends: recorded at every level */
    LOUPE_LEVEL_ASYNC = LOUPE_LEVEL_INFO,       /* async slices (begin and end) */
    LOUPE_LEVEL_ARG = LOUPE_LEVEL_CRITICAL      /* arguments: recorded at every level, attached to
                                                   the innermost zone that was recorded */
};

/* The explicit zones' begin and end, out of line (src/record/record.c): each keeps the zone on
 * the thread's stack of open explicit zones (LOUPE__XSTACK deep), so that an end that closes
 * zones above its own (their ends skipped) gives back the ends they kept. */
LOUPE_API uint64_t loupe__zone_begin_x(uint64_t s, const loupe_srcloc *sl);
LOUPE_API void loupe__zone_end_x(uint64_t s, const loupe_srcloc *sl);

/* A scoped zone's begin (LOUPE_ZONE*, loupe::Zone): its context keeps what the end needs. */
LOUPE__INLINE uint64_t loupe__zone_begin_scoped(const loupe_srcloc *sl) {
    uint64_t s = loupe__state_now();
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) < sl->level, 1)) {
        return 0;
    }
    return loupe__push(s, LOUPE__ADDR(sl), 1);
}

/** Begins a zone at srcloc (explicit form). Returns the session state it was recorded under, or
 * 0 when it was not recorded; pass that to loupe_zone_end_state() or use loupe_zone_end().
 * Not tracing (or the level filters it out): the three instructions of a zone, inline; tracing:
 * one call into the library, which records the begin and notes the zone on the thread's stack of
 * open explicit zones (the 256 innermost are kept: an end beyond that depth gives nothing
 * back). */
LOUPE__INLINE uint64_t loupe_zone_begin(const loupe_srcloc *sl) {
    uint64_t s = loupe__state_now();
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) < sl->level, 1)) {
        return 0;
    }
    return loupe__zone_begin_x(s, sl);
}

/** Ends the zone begun with loupe_zone_begin(sl) under state s (its return value); nothing when s
 * is 0 (the begin was not recorded). When sl is not the innermost open explicit zone, the end
 * closes the zones above it (see "Nesting" above) and gives back the ends they kept. */
LOUPE__INLINE void loupe_zone_end_state(const loupe_srcloc *sl, uint64_t s) {
    if (s != 0) {
        loupe__zone_end_x(s, sl);
    }
}

/** Ends the innermost zone begun with loupe_zone_begin(sl), if a session records it. */
LOUPE__INLINE void loupe_zone_end(const loupe_srcloc *sl) {
    uint64_t s = loupe__state_now();
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) < sl->level, 1)) {
        return;
    }
    loupe_zone_end_state(sl, s);
}

/** A scoped-zone context (the C cleanup attribute's variable). */
/** The longest dynamic name or string argument kept, in bytes; longer ones are cut. */
#define LOUPE_MAX_DYN_NAME 4095

typedef struct loupe_zone_ctx {
    const loupe_srcloc *sl;
    uint64_t state; /* 0 when not recorded */
    uint64_t open;  /* the ends the thread kept right after the begin (0: not known): the end
                       gives back those of deeper zones whose ends a longjmp skipped */
} loupe_zone_ctx;

/* The context of a scoped zone begun at sl under state s (loupe_zone_begin's return value). */
LOUPE__INLINE loupe_zone_ctx loupe__zone_ctx_make(const loupe_srcloc *sl, uint64_t s) {
    loupe_zone_ctx z = {sl, s, s != 0 ? loupe__open_now() : 0};
    return z;
}

LOUPE__INLINE void loupe__zone_cleanup(loupe_zone_ctx *z) {
    if (z->state != 0) {
        loupe__push_end_open(z->state, LOUPE__ADDR(z->sl) | LOUPE__K_END, z->open);
    }
}

/** Begins a zone whose name is copied now into the thread's buffer (15 bytes per 16-byte event
 * after the begin; names are cut at LOUPE_MAX_DYN_NAME bytes).
 * Returns a context for loupe_zone_end_dyn(). */
LOUPE__INLINE loupe_zone_ctx loupe_zone_begin_dyn(const char *name, int level) {
    loupe_zone_ctx z = {LOUPE__NULL, 0, 0};
    uint64_t s = loupe__state_now();
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) < level, 1)) {
        return z;
    }
    if (name != LOUPE__NULL) {
        size_t len = strlen(name);
        z.state = loupe__push_dyn(s, name, len);
        if (__builtin_expect(z.state == 0, 0)) {
            loupe__begin_dyn(name, len, level, &z.state);
        }
    } else {
        loupe__begin_dyn(name, 0, level, &z.state);
    }
    z.open = z.state != 0 ? loupe__open_now() : 0;
    return z;
}

/** Ends a zone begun with loupe_zone_begin_dyn(). */
LOUPE__INLINE void loupe_zone_end_dyn(loupe_zone_ctx z) {
    if (z.state != 0) {
        /* inline, as a static zone's end (programs built against 0.2's first headers call
         * loupe__end_dyn, which does the same) */
        loupe__push_end_open(z.state, LOUPE__K_END, z.open);
    }
}

LOUPE__INLINE void loupe__zone_dyn_cleanup(loupe_zone_ctx *z) {
    loupe_zone_end_dyn(*z);
}

/* Whether the session records annotations of this level now: a relaxed load and a compare. */
LOUPE__INLINE int loupe__on(int level) {
    return LOUPE__STATE_LEVEL(loupe__state_now()) >= level;
}

/** Attaches a typed argument to the innermost recorded zone open on this thread.
 * key: static lifetime; a string value is copied (cut at LOUPE_MAX_DYN_NAME bytes).
 * Level: LOUPE_LEVEL_ARG (recorded whenever the session records anything). */
/* The inline path of the typed arguments: the slot when the thread has room, else the slow
 * path (the same record, or a counted drop). */
LOUPE__INLINE void loupe__arg_fast(int type, const char *key, uint64_t bits) {
    uint64_t s = loupe__state_now();
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) >= LOUPE_LEVEL_ARG, 0)) {
        if (!loupe__push_arg(s, LOUPE__CONV(unsigned, type), bits, LOUPE__ADDR(key))) {
            loupe__arg(type, key, bits, LOUPE__NULL);
        }
    }
}
LOUPE__INLINE void loupe_arg_i64(const char *key, int64_t v) {
    loupe__arg_fast(LOUPE_ARG_INT64, key, LOUPE__CONV(uint64_t, v));
}
LOUPE__INLINE void loupe_arg_u64(const char *key, uint64_t v) {
    loupe__arg_fast(LOUPE_ARG_UINT64, key, v);
}
LOUPE__INLINE void loupe_arg_f64(const char *key, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    loupe__arg_fast(LOUPE_ARG_DOUBLE, key, bits);
}
LOUPE__INLINE void loupe_arg_bool(const char *key, int v) {
    loupe__arg_fast(LOUPE_ARG_BOOL, key, v ? 1u : 0u);
}
LOUPE__INLINE void loupe_arg_str(const char *key, const char *v) {
    if (__builtin_expect(loupe__on(LOUPE_LEVEL_ARG), 0)) {
        loupe__arg(LOUPE_ARG_STRING, key, 0, v ? v : "");
    }
}

/* The begin of LOUPE_ZONE_ARGS: the zone at sl with its n arguments (a0..a(n-1)) in one inline
 * sequence (loupe__push_args). Not tracing: the three instructions of a zone (load the state
 * word, test the level, branch). A session whose level filters the zone out still records the
 * arguments, attached to the enclosing recorded zone, as LOUPE_ZONE followed by LOUPE_ARG_*
 * would. Returns the state for the end, 0 when the begin was not recorded. */
LOUPE__INLINE uint64_t loupe__zone_begin_args(const loupe_srcloc *sl, unsigned n, loupe__argv a0,
                                              loupe__argv a1, loupe__argv a2, loupe__argv a3) {
    uint64_t s = loupe__state_now();
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) < LOUPE_LEVEL_ARG, 1)) {
        return 0;
    }
    if (LOUPE__STATE_LEVEL(s) < sl->level) {
        loupe__arg_fast(LOUPE__CONV(int, a0.type), a0.key, a0.bits);
        if (n > 1) {
            loupe__arg_fast(LOUPE__CONV(int, a1.type), a1.key, a1.bits);
        }
        if (n > 2) {
            loupe__arg_fast(LOUPE__CONV(int, a2.type), a2.key, a2.bits);
        }
        if (n > 3) {
            loupe__arg_fast(LOUPE__CONV(int, a3.type), a3.key, a3.bits);
        }
        return 0;
    }
    return loupe__push_args(s, LOUPE__ADDR(sl), n, a0, a1, a2, a3);
}

/* The unused arguments of a LOUPE_ZONE_ARGS with fewer than 4. */
LOUPE__INLINE loupe__argv loupe__argv_none(void) {
    loupe__argv r = {LOUPE__NULL, 0, 0};
    return r;
}

/* The 64 bits of each argument type LOUPE_ZONE_ARGS takes (C: picked by _Generic). */
LOUPE__INLINE loupe__argv loupe__argv_i64(const char *key, int64_t v) {
    loupe__argv r = {key, LOUPE__CONV(uint64_t, v), LOUPE_ARG_INT64};
    return r;
}
LOUPE__INLINE loupe__argv loupe__argv_u64(const char *key, uint64_t v) {
    loupe__argv r = {key, v, LOUPE_ARG_UINT64};
    return r;
}
LOUPE__INLINE loupe__argv loupe__argv_f64(const char *key, double v) {
    loupe__argv r = {key, 0, LOUPE_ARG_DOUBLE};
    memcpy(&r.bits, &v, sizeof r.bits);
    return r;
}
LOUPE__INLINE loupe__argv loupe__argv_bool(const char *key, int v) {
    loupe__argv r = {key, v ? 1u : 0u, LOUPE_ARG_BOOL};
    return r;
}

/** An instant event on this thread's track at the given level (name: static lifetime). */
LOUPE__INLINE void loupe_instant_record(const char *name, int level) {
    if (__builtin_expect(loupe__on(level), 0)) {
        loupe__ext(LOUPE__EXT_INSTANT, level, name, 0);
    }
}
/* The inline path of counters and flows (ts 0 for a flow: it attaches to the open zone). */
LOUPE__INLINE void loupe__ext_fast(unsigned sub, int level, const char *name, uint64_t value,
                                   int timed) {
    uint64_t s = loupe__state_now();
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) >= level, 0)) {
        if (!loupe__push_ext(s, timed, sub, 0, value, LOUPE__ADDR(name))) {
            loupe__ext(LOUPE__CONV(int, sub), level, name, value);
        }
    }
}
/** A sample of a process-wide counter track (name: static lifetime). Level: LOUPE_LEVEL_COUNTER.
 */
LOUPE__INLINE void loupe_counter_i64(const char *name, int64_t v) {
    loupe__ext_fast(LOUPE__EXT_COUNTER_I64, LOUPE_LEVEL_COUNTER, name, LOUPE__CONV(uint64_t, v), 1);
}
LOUPE__INLINE void loupe_counter_f64(const char *name, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    loupe__ext_fast(LOUPE__EXT_COUNTER_F64, LOUPE_LEVEL_COUNTER, name, bits, 1);
}
/** Flow ends: id links the innermost zone on the producing thread (out) to the innermost zone
 * on the consuming thread (in). Ids are the caller's; use each once per trace.
 * Level: LOUPE_LEVEL_FLOW. */
LOUPE__INLINE void loupe_flow_out(uint64_t id) {
    loupe__ext_fast(LOUPE__EXT_FLOW_OUT, LOUPE_LEVEL_FLOW, LOUPE__NULL, id, 0);
}
LOUPE__INLINE void loupe_flow_in(uint64_t id) {
    loupe__ext_fast(LOUPE__EXT_FLOW_IN, LOUPE_LEVEL_FLOW, LOUPE__NULL, id, 0);
}

/** Async slices: a slice that begins on one thread and ends on any thread (the same or another),
 * matched by id: a request handed from thread to thread, a transfer a callback completes (the
 * model of NVTX's nvtxRangeStartEx / nvtxRangeEnd and of Perfetto's async tracks). At the stop
 * the collector pairs each end with the latest unended begin of its id, at any thread, by time,
 * and puts the slice on a process-level async track (LOUPE_TRACK_ASYNC) named after the slice:
 * one track per name, whose slices may overlap (each gets a lane, loupe_slice.depth). Slices of
 * one name with different ids may overlap freely; a begin with an id already open nests a
 * second slice of that id (ended first by the next end).
 * An end whose id has no begin open (never begun, already ended, or its begin was dropped) is
 * counted (loupe_trace_result.unmatched_ends) and ignored; a slice still open at the stop ends
 * there, flagged LOUPE_SLICE_TRUNCATED (loupe_trace_result.truncated_zones). Ids are the
 * caller's (any 64-bit value; reuse one only after its slice ended).
 * Timestamps come from the recording threads' clocks (one clock for the process: the TSC or
 * CLOCK_MONOTONIC), so an end recorded after its begin on another thread is never before it.
 * Level: LOUPE_LEVEL_ASYNC (recorded when the session's host tracer level is >= INFO).
 * Lifetime: loupe_async_begin's name must outlive the session's stop (a string literal);
 * loupe_async_begin_dyn copies it now (cut at LOUPE_MAX_DYN_NAME bytes, counted in the trace's
 * "loupe_strings_cut"). NULL is read as "".
 * Cost: a function call and two 16-byte records in the calling thread's buffer (plus 15 bytes
 * of name per record for the _dyn form); no lock, no allocation, no system call after the
 * thread's first event; a full buffer drops the event and counts it, like a zone's.
 * Thread-safety: any thread, lock-free; each call records on the calling thread's own buffer.
 * Signal-safety: async-signal-safe and reentrant, as the other calls here (one that interrupts
 * a recording call on the same thread is dropped and counted in "loupe_events_reentered"; a
 * dropped begin makes its end an unmatched one). */
LOUPE_API void loupe_async_begin(const char *name, uint64_t id);
LOUPE_API void loupe_async_begin_dyn(const char *name, uint64_t id);
LOUPE_API void loupe_async_end(uint64_t id);

#ifdef __cplusplus
}
#endif

/* ---- macros ---- */
#define LOUPE__CAT2(a, b) a##b
#define LOUPE__CAT(a, b) LOUPE__CAT2(a, b)
/* Unique names per use (__COUNTER__), so that several zones fit on one line. `"" name` makes a
 * name that is not a string literal a compile error: the srcloc is static, so a variable name
 * would be read once and kept for every later call (use LOUPE_ZONE_DYN for those). */
#define LOUPE__SL(id, lvl, name)                                                                   \
    static const loupe_srcloc LOUPE__CAT(loupe__sl_, id) = {"" name, __func__, __FILE__, __LINE__, \
                                                            (lvl)}

/* LOUPE_ZONE_ARGS's pairs: the argument count picks LOUPE__ARGS_<count> (an odd count, or more
 * than 8, names no macro: a compile error). */
#define LOUPE__PICK(_1, _2, _3, _4, _5, _6, _7, _8, n, ...) n
#define LOUPE__COUNT(...) LOUPE__PICK(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define LOUPE__NPAIRS(...) (LOUPE__CONV(unsigned, LOUPE__COUNT(__VA_ARGS__)) / 2u)
#define LOUPE__ARGS_MAP(...) LOUPE__CAT(LOUPE__ARGS_, LOUPE__COUNT(__VA_ARGS__))(__VA_ARGS__)
#define LOUPE__ARGS_2(k1, v1) LOUPE__ARGV(k1, v1)
#define LOUPE__ARGS_4(k1, v1, k2, v2) LOUPE__ARGV(k1, v1), LOUPE__ARGV(k2, v2)
#define LOUPE__ARGS_6(k1, v1, k2, v2, k3, v3) LOUPE__ARGS_4(k1, v1, k2, v2), LOUPE__ARGV(k3, v3)
/* C: the unused arguments after the pairs, each with its leading comma (4 in all). */
#define LOUPE__PAD(...) LOUPE__CAT(LOUPE__PAD_, LOUPE__COUNT(__VA_ARGS__))
#define LOUPE__PAD_2 , loupe__argv_none(), loupe__argv_none(), loupe__argv_none()
#define LOUPE__PAD_4 , loupe__argv_none(), loupe__argv_none()
#define LOUPE__PAD_6 , loupe__argv_none()
#define LOUPE__PAD_8
#define LOUPE__ARGS_8(k1, v1, k2, v2, k3, v3, k4, v4)                                              \
    LOUPE__ARGS_4(k1, v1, k2, v2), LOUPE__ARGS_4(k3, v3, k4, v4)

#if defined(LOUPE_DISABLE)
#define LOUPE_ZONE(name)
#define LOUPE_ZONE_ARGS(name, ...)
#define LOUPE_ZONE_L(level, name)
#define LOUPE_ZONE_DYN(name)
#define LOUPE_STEP(name, step_num)
#define LOUPE_ARG_I64(key, v)
#define LOUPE_ARG_U64(key, v)
#define LOUPE_ARG_F64(key, v)
#define LOUPE_ARG_BOOL(key, v)
#define LOUPE_ARG_STR(key, v)
#define LOUPE_INSTANT(name)
#define LOUPE_COUNTER_I64(name, v)
#define LOUPE_COUNTER_F64(name, v)
#define LOUPE_FLOW_OUT(id)
#define LOUPE_FLOW_IN(id)
#define LOUPE_ASYNC_BEGIN(name, id)
#define LOUPE_ASYNC_BEGIN_DYN(name, id)
#define LOUPE_ASYNC_END(id)
#elif defined(__cplusplus)
#include <type_traits>
namespace loupe {
/** RAII zone (C++): records the begin in the constructor, the end in the destructor. */
class Zone {
  public:
    explicit Zone(const loupe_srcloc *sl)
        : sl_(sl), s_(loupe__zone_begin_scoped(sl)), open_(s_ != 0 ? loupe__open_now() : 0) {}
    /** A zone with its arguments (LOUPE_ZONE_ARGS): n of detail::arg()'s values, 1..4. */
    template <typename... A>
    Zone(const loupe_srcloc *sl, unsigned n, A... a)
        : sl_(sl),
          s_(begin_args(sl, n, a..., loupe__argv_none(), loupe__argv_none(), loupe__argv_none())),
          open_(s_ != 0 ? loupe__open_now() : 0) {
        static_assert(sizeof...(A) >= 1 && sizeof...(A) <= LOUPE__ARGS_MAX,
                      "LOUPE_ZONE_ARGS takes 1 to 4 key, value pairs");
    }
    ~Zone() {
        if (s_ != 0) {
            loupe__push_end_open(s_, LOUPE__ADDR(sl_) | LOUPE__K_END, open_);
        }
    }
    Zone(const Zone &) = delete;
    Zone &operator=(const Zone &) = delete;

  private:
    /* The first four of the arguments (the real ones, then the padding). */
    template <typename... R>
    static uint64_t begin_args(const loupe_srcloc *sl, unsigned n, loupe__argv a0, loupe__argv a1,
                               loupe__argv a2, loupe__argv a3, R...) noexcept {
        return loupe__zone_begin_args(sl, n, a0, a1, a2, a3);
    }
    const loupe_srcloc *sl_;
    uint64_t s_;
    uint64_t open_; /* loupe_zone_ctx.open */
};
class DynZone {
  public:
    explicit DynZone(const char *name, int level = LOUPE_LEVEL_ZONE)
        : z_(loupe_zone_begin_dyn(name, level)) {}
    ~DynZone() {
        loupe_zone_end_dyn(z_);
    }
    DynZone(const DynZone &) = delete;
    DynZone &operator=(const DynZone &) = delete;

  private:
    loupe_zone_ctx z_;
};
namespace detail {
/* LOUPE_ZONE_ARGS's value types: signed integers are INT64, unsigned ones UINT64, floating
 * point DOUBLE, bool BOOL (as C's _Generic below picks them). */
inline loupe__argv arg(const char *k, bool v) noexcept {
    return loupe__argv_bool(k, v ? 1 : 0);
}
inline loupe__argv arg(const char *k, double v) noexcept {
    return loupe__argv_f64(k, v);
}
inline loupe__argv arg(const char *k, float v) noexcept {
    return loupe__argv_f64(k, static_cast<double>(v));
}
inline loupe__argv arg(const char *k, long double v) noexcept {
    return loupe__argv_f64(k, static_cast<double>(v));
}
template <typename T> inline loupe__argv arg(const char *k, T v) noexcept {
    static_assert(std::is_integral<T>::value || std::is_enum<T>::value,
                  "LOUPE_ZONE_ARGS values are integers, floating point or bool");
    return std::is_signed<T>::value ? loupe__argv_i64(k, static_cast<int64_t>(v))
                                    : loupe__argv_u64(k, static_cast<uint64_t>(v));
}
} // namespace detail
} // namespace loupe
#define LOUPE__ZONE_ID(id, level, name)                                                            \
    LOUPE__SL(id, (level), name);                                                                  \
    ::loupe::Zone LOUPE__CAT(loupe__z_, id)(&LOUPE__CAT(loupe__sl_, id))
#define LOUPE__ARGV(k, v) ::loupe::detail::arg((k), (v))
#define LOUPE__ZONE_ARGS_ID(id, name, ...)                                                         \
    LOUPE__SL(id, LOUPE_LEVEL_ZONE, name);                                                         \
    ::loupe::Zone LOUPE__CAT(loupe__z_, id)(                                                       \
        &LOUPE__CAT(loupe__sl_, id), LOUPE__NPAIRS(__VA_ARGS__), LOUPE__ARGS_MAP(__VA_ARGS__))
#define LOUPE_ZONE_L(level, name) LOUPE__ZONE_ID(__COUNTER__, level, name)
#define LOUPE_ZONE_DYN(name) ::loupe::DynZone LOUPE__CAT(loupe__z_, __COUNTER__)((name))
#else
#define LOUPE__ZONE_ID(id, level, name)                                                            \
    LOUPE__SL(id, (level), name);                                                                  \
    loupe_zone_ctx LOUPE__CAT(loupe__z_, id)                                                       \
        __attribute__((cleanup(loupe__zone_cleanup), unused)) = loupe__zone_ctx_make(              \
            &LOUPE__CAT(loupe__sl_, id), loupe__zone_begin_scoped(&LOUPE__CAT(loupe__sl_, id)))
#define LOUPE_ZONE_L(level, name) LOUPE__ZONE_ID(__COUNTER__, level, name)
/* C11 _Generic picks each value's type (the controlling expression is not evaluated; the value
 * is, once, as the call's argument). Pointers and structs match no entry: a compile error. */
#define LOUPE__ARGV(k, v)                                                                          \
    _Generic((v), _Bool                                                                            \
             : loupe__argv_bool, float                                                             \
             : loupe__argv_f64, double                                                             \
             : loupe__argv_f64, long double                                                        \
             : loupe__argv_f64, unsigned char                                                      \
             : loupe__argv_u64, unsigned short                                                     \
             : loupe__argv_u64, unsigned int                                                       \
             : loupe__argv_u64, unsigned long                                                      \
             : loupe__argv_u64, unsigned long long                                                 \
             : loupe__argv_u64, char                                                               \
             : loupe__argv_i64, signed char                                                        \
             : loupe__argv_i64, short                                                              \
             : loupe__argv_i64, int                                                                \
             : loupe__argv_i64, long                                                               \
             : loupe__argv_i64, long long                                                          \
             : loupe__argv_i64)((k), (v))
#define LOUPE__ZONE_ARGS_ID(id, name, ...)                                                         \
    LOUPE__SL(id, LOUPE_LEVEL_ZONE, name);                                                         \
    loupe_zone_ctx LOUPE__CAT(loupe__z_, id)                                                       \
        __attribute__((cleanup(loupe__zone_cleanup), unused)) = loupe__zone_ctx_make(              \
            &LOUPE__CAT(loupe__sl_, id),                                                           \
            loupe__zone_begin_args(&LOUPE__CAT(loupe__sl_, id), LOUPE__NPAIRS(__VA_ARGS__),        \
                                   LOUPE__ARGS_MAP(__VA_ARGS__) LOUPE__PAD(__VA_ARGS__)))
#define LOUPE_ZONE_DYN(name)                                                                       \
    loupe_zone_ctx LOUPE__CAT(loupe__z_, __COUNTER__)                                              \
        __attribute__((cleanup(loupe__zone_dyn_cleanup), unused)) =                                \
            loupe_zone_begin_dyn((name), LOUPE_LEVEL_ZONE)
#endif

#if !defined(LOUPE_DISABLE)
/** A scoped zone with a static name at LOUPE_LEVEL_INFO. */
#define LOUPE_ZONE(name) LOUPE_ZONE_L(LOUPE_LEVEL_ZONE, name)
/** A scoped zone with a static name at LOUPE_LEVEL_INFO and 1 to 4 arguments given inline:
 * LOUPE_ZONE_ARGS("copy", "bytes", n, "ratio", r). Each key is a `const char *` of static
 * lifetime (a string literal), each value an integer (signed: LOUPE_ARG_INT64, unsigned:
 * LOUPE_ARG_UINT64), a floating-point value (LOUPE_ARG_DOUBLE) or a bool (C: _Bool; BOOL);
 * strings are not taken (use LOUPE_ARG_STR after the zone). Every value is evaluated once,
 * tracing or not.
 * It records what LOUPE_ZONE(name) followed by one LOUPE_ARG_* per pair records (the same
 * slots: 1 + n events of buffer_events and the end's), with one state test, one re-entry guard
 * and one room check for them all instead of 1 + n (Perfetto's TRACE_EVENT takes its arguments
 * the same way). Drops are the separate calls': when the begin cannot be written (buffer full,
 * a re-entered call from a signal handler) the begin and each argument are dropped and counted
 * as they would be one by one (an argument then attaches to the enclosing recorded zone, or is
 * counted); when the session's level filters the zone out, its arguments attach to the
 * enclosing recorded zone.
 * Not tracing: three instructions, as LOUPE_ZONE. Cost tracing: docs/performance.md.
 * Thread-safety and signal-safety: as every call here (the top of this file). */
#define LOUPE_ZONE_ARGS(name, ...) LOUPE__ZONE_ARGS_ID(__COUNTER__, name, __VA_ARGS__)
/** A step zone (StepTraceAnnotation): a scoped zone named `name` with argument step_num. */
#define LOUPE_STEP(name, step_num)                                                                 \
    LOUPE_ZONE_L(LOUPE_LEVEL_STEP, name);                                                          \
    loupe_arg_i64("step_num", LOUPE__CONV(int64_t, step_num))
#define LOUPE_ARG_I64(key, v) loupe_arg_i64((key), LOUPE__CONV(int64_t, v))
#define LOUPE_ARG_U64(key, v) loupe_arg_u64((key), LOUPE__CONV(uint64_t, v))
#define LOUPE_ARG_F64(key, v) loupe_arg_f64((key), LOUPE__CONV(double, v))
#define LOUPE_ARG_BOOL(key, v) loupe_arg_bool((key), (v) ? 1 : 0)
#define LOUPE_ARG_STR(key, v) loupe_arg_str((key), (v))
#define LOUPE_INSTANT(name) loupe_instant_record((name), LOUPE_LEVEL_ZONE)
#define LOUPE_COUNTER_I64(name, v) loupe_counter_i64((name), LOUPE__CONV(int64_t, v))
#define LOUPE_COUNTER_F64(name, v) loupe_counter_f64((name), LOUPE__CONV(double, v))
#define LOUPE_FLOW_OUT(id) loupe_flow_out(LOUPE__CONV(uint64_t, id))
#define LOUPE_FLOW_IN(id) loupe_flow_in(LOUPE__CONV(uint64_t, id))
/** An async slice with a static name (a string literal: `"" name` refuses anything else). */
#define LOUPE_ASYNC_BEGIN(name, id) loupe_async_begin("" name, LOUPE__CONV(uint64_t, id))
#define LOUPE_ASYNC_BEGIN_DYN(name, id) loupe_async_begin_dyn((name), LOUPE__CONV(uint64_t, id))
#define LOUPE_ASYNC_END(id) loupe_async_end(LOUPE__CONV(uint64_t, id))
#endif

#endif
