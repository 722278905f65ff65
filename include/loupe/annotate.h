/* loupe/annotate.h: annotations (TraceAnnotation, StepTraceAnnotation, annotate_function).
 *
 * Zones:     { LOUPE_ZONE("load"); ... }                 scoped, static name, ends at the brace
 *            LOUPE_ZONE_L(LOUPE_LEVEL_VERBOSE, "inner")  with a host tracer level
 *            LOUPE_ZONE_DYN(name_buffer)                 dynamic name, copied at the call
 *            loupe_zone_begin(&srcloc) / loupe_zone_end(&srcloc)   explicit calls
 * Steps:     { LOUPE_STEP("train", step); ... }          a zone with a `step_num` argument
 * Arguments: LOUPE_ARG_I64("bytes", n) (also _U64, _F64, _BOOL, _STR) attach to the innermost
 *            zone open on the calling thread.
 * Instants:  LOUPE_INSTANT("checkpoint")       Counters: LOUPE_COUNTER_I64("queue", n), _F64
 * Flows:     LOUPE_FLOW_OUT(id) in the producer's zone, LOUPE_FLOW_IN(id) in the consumer's:
 *            an arrow from one zone to the other, across threads.
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
 * Thread-safety: every call records on the calling thread's own buffer; any thread, lock-free,
 * no allocation after the thread's first event, no system call. When the buffer is full the
 * event is dropped and counted (or overwrites the oldest, per the session's overflow policy).
 * Not async-signal-safe: do not record from a signal handler that may interrupt a recording call.
 *
 * Nesting: zones on one thread must end in the reverse order of their begins. An end that matches
 * a zone deeper in the stack closes the zones above it there (they lost their ends: an early
 * return, a longjmp) and marks them truncated; an end that matches no open zone is counted
 * (loupe_trace_result.unmatched_ends) and ignored. Neither corrupts the nesting of other zones.
 * Arguments attach to the innermost zone that was recorded: an argument inside a zone filtered
 * out by its level goes to the enclosing recorded zone.
 * Names of static zones are read at the stop: a zone recorded in a shared library that is
 * dlclose()d before the stop is named "(unloaded)" (its srcloc is gone with the library).
 */
#ifndef LOUPE_ANNOTATE_H
#define LOUPE_ANNOTATE_H

#include <loupe/export.h>
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

/* ---- internals the inline fast path needs (not API: may change) ---- */

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
    LOUPE__K_FUNC_EXIT = 4,  /* a = ts, b = code address << 4 | 4 */
    LOUPE__K_EXT = 5,        /* two slots: see src/record/record.c */
    LOUPE__K_PAD = 6,        /* an unused slot before a ring wraps */
    LOUPE__K_EXT_DATA = 7,   /* the second slot of an EXT record */
    LOUPE__K_STR = 8         /* 15 bytes of a copied string: a = bytes 0..7, b = bytes 8..14 << 8 */
};

/* A thread's buffer header; the first cache line holds everything the fast path touches. */
typedef struct loupe__tbuf {
    loupe__ev *cur;      /* next free slot (published with a release store) */
    loupe__ev *limit;    /* one past the last slot */
    uint64_t state;      /* the session state word this buffer is recording for */
    uint64_t depth;      /* zones open on this thread (keep-first reserves room for their ends) */
    uint64_t skip_exits; /* function enters dropped while open: their exits are not written */
} loupe__tbuf;

/* Session state word: generation << 16 | flags << 8 | level (0 = not tracing). */
#define LOUPE__STATE_LEVEL(s) ((int)((s)&0xffu))
#define LOUPE__STATE_FUNC 0x100u /* function tracing on */

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

/* Appends one slot for session state s; returns s when recorded, 0 when dropped. */
LOUPE__INLINE uint64_t loupe__push(uint64_t s, uint64_t b, int is_begin) {
    loupe__tbuf *t = loupe__tls;
    uint64_t ts = loupe__now();
    if (__builtin_expect(t != NULL && __atomic_load_n(&t->state, __ATOMIC_RELAXED) == s &&
                             t->cur + t->depth < t->limit,
                         1)) {
        loupe__ev *e = t->cur;
        __atomic_store_n(&e->a, ts, __ATOMIC_RELAXED); /* a plain store on x86-64 */
        __atomic_store_n(&e->b, b, __ATOMIC_RELAXED);
        t->depth += is_begin ? 1u : 0u;
        __atomic_store_n(&t->cur, e + 1, __ATOMIC_RELEASE);
        return s;
    }
    return loupe__record_slow(s, ts, b, is_begin);
}

/** Begins a zone at srcloc (explicit form). Returns the session state it was recorded under, or
 * 0 when it was not recorded; pass that to loupe_zone_end_state() or use loupe_zone_end(). */
LOUPE__INLINE uint64_t loupe_zone_begin(const loupe_srcloc *sl) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) < sl->level, 1)) {
        return 0;
    }
    return loupe__push(s, (uint64_t)(uintptr_t)sl, 1);
}

/** Ends the zone begun with loupe_zone_begin(sl) under state s (its return value); nothing when s
 * is 0 (the begin was not recorded). */
LOUPE__INLINE void loupe_zone_end_state(const loupe_srcloc *sl, uint64_t s) {
    if (s != 0) {
        loupe__tbuf *t = loupe__tls;
        uint64_t ts = loupe__now();
        if (__builtin_expect(t != NULL && __atomic_load_n(&t->state, __ATOMIC_RELAXED) == s &&
                                 t->cur < t->limit,
                             1)) {
            loupe__ev *e = t->cur;
            __atomic_store_n(&e->a, ts, __ATOMIC_RELAXED);
            __atomic_store_n(&e->b, (uint64_t)(uintptr_t)sl | LOUPE__K_END, __ATOMIC_RELAXED);
            t->depth -= t->depth ? 1u : 0u;
            __atomic_store_n(&t->cur, e + 1, __ATOMIC_RELEASE);
        } else {
            (void)loupe__record_slow(s, ts, (uint64_t)(uintptr_t)sl | LOUPE__K_END, -1);
        }
    }
}

/** Ends the innermost zone begun with loupe_zone_begin(sl), if a session records it. */
LOUPE__INLINE void loupe_zone_end(const loupe_srcloc *sl) {
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
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
} loupe_zone_ctx;

LOUPE__INLINE void loupe__zone_cleanup(loupe_zone_ctx *z) {
    loupe_zone_end_state(z->sl, z->state);
}

/** Begins a zone whose name is copied now into the thread's buffer (15 bytes per 16-byte event
 * after the begin; names are cut at LOUPE_MAX_DYN_NAME bytes).
 * Returns a context for loupe_zone_end_dyn(). */
LOUPE__INLINE loupe_zone_ctx loupe_zone_begin_dyn(const char *name, int level) {
    loupe_zone_ctx z = {NULL, 0};
    uint64_t s = __atomic_load_n(&loupe__state, __ATOMIC_RELAXED);
    if (__builtin_expect(LOUPE__STATE_LEVEL(s) < level, 1)) {
        return z;
    }
    loupe__begin_dyn(name, name ? strlen(name) : 0, level, &z.state);
    return z;
}

/** Ends a zone begun with loupe_zone_begin_dyn(). */
LOUPE__INLINE void loupe_zone_end_dyn(loupe_zone_ctx z) {
    if (z.state != 0) {
        loupe__end_dyn(z.state);
    }
}

LOUPE__INLINE void loupe__zone_dyn_cleanup(loupe_zone_ctx *z) {
    loupe_zone_end_dyn(*z);
}

#define LOUPE__EXT_ARG 1
#define LOUPE__EXT_INSTANT 2
#define LOUPE__EXT_COUNTER_I64 3
#define LOUPE__EXT_COUNTER_F64 4
#define LOUPE__EXT_FLOW_OUT 5
#define LOUPE__EXT_FLOW_IN 6

/** Attaches a typed argument to the innermost open zone on this thread. key: static lifetime;
 * a string value is copied. Recorded when a session at any level is active. */
LOUPE__INLINE void loupe_arg_i64(const char *key, int64_t v) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        loupe__arg(1, key, (uint64_t)v, NULL);
    }
}
LOUPE__INLINE void loupe_arg_u64(const char *key, uint64_t v) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        loupe__arg(2, key, v, NULL);
    }
}
LOUPE__INLINE void loupe_arg_f64(const char *key, double v) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        loupe__arg(3, key, bits, NULL);
    }
}
LOUPE__INLINE void loupe_arg_bool(const char *key, int v) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        loupe__arg(4, key, v ? 1u : 0u, NULL);
    }
}
LOUPE__INLINE void loupe_arg_str(const char *key, const char *v) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        loupe__arg(5, key, 0, v ? v : "");
    }
}

/** An instant event on this thread's track (name: static lifetime). */
LOUPE__INLINE void loupe_instant_record(const char *name, int level) {
    if (__builtin_expect(
            LOUPE__STATE_LEVEL(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED)) >= level, 0)) {
        loupe__ext(LOUPE__EXT_INSTANT, level, name, 0);
    }
}
/** A sample of a process-wide counter track (name: static lifetime). */
LOUPE__INLINE void loupe_counter_i64(const char *name, int64_t v) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        loupe__ext(LOUPE__EXT_COUNTER_I64, 1, name, (uint64_t)v);
    }
}
LOUPE__INLINE void loupe_counter_f64(const char *name, double v) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        loupe__ext(LOUPE__EXT_COUNTER_F64, 1, name, bits);
    }
}
/** Flow ends: id links the innermost zone on the producing thread (out) to the innermost zone
 * on the consuming thread (in). Ids are the caller's; use each once per trace. */
LOUPE__INLINE void loupe_flow_out(uint64_t id) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        loupe__ext(LOUPE__EXT_FLOW_OUT, 1, NULL, id);
    }
}
LOUPE__INLINE void loupe_flow_in(uint64_t id) {
    if (__builtin_expect(__atomic_load_n(&loupe__state, __ATOMIC_RELAXED) & 0xffu, 0)) {
        loupe__ext(LOUPE__EXT_FLOW_IN, 1, NULL, id);
    }
}

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

#if defined(LOUPE_DISABLE)
#define LOUPE_ZONE(name)
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
#elif defined(__cplusplus)
namespace loupe {
/** RAII zone (C++): records the begin in the constructor, the end in the destructor. */
class Zone {
  public:
    explicit Zone(const loupe_srcloc *sl) : sl_(sl), s_(loupe_zone_begin(sl)) {}
    ~Zone() {
        loupe_zone_end_state(sl_, s_);
    }
    Zone(const Zone &) = delete;
    Zone &operator=(const Zone &) = delete;

  private:
    const loupe_srcloc *sl_;
    uint64_t s_;
};
class DynZone {
  public:
    explicit DynZone(const char *name, int level = LOUPE_LEVEL_INFO)
        : z_(loupe_zone_begin_dyn(name, level)) {}
    ~DynZone() {
        loupe_zone_end_dyn(z_);
    }
    DynZone(const DynZone &) = delete;
    DynZone &operator=(const DynZone &) = delete;

  private:
    loupe_zone_ctx z_;
};
} // namespace loupe
#define LOUPE__ZONE_ID(id, level, name)                                                            \
    LOUPE__SL(id, (level), name);                                                                  \
    ::loupe::Zone LOUPE__CAT(loupe__z_, id)(&LOUPE__CAT(loupe__sl_, id))
#define LOUPE_ZONE_L(level, name) LOUPE__ZONE_ID(__COUNTER__, level, name)
#define LOUPE_ZONE_DYN(name) ::loupe::DynZone LOUPE__CAT(loupe__z_, __COUNTER__)((name))
#else
#define LOUPE__ZONE_ID(id, level, name)                                                            \
    LOUPE__SL(id, (level), name);                                                                  \
    loupe_zone_ctx LOUPE__CAT(loupe__z_, id)                                                       \
        __attribute__((cleanup(loupe__zone_cleanup), unused)) = {                                  \
            &LOUPE__CAT(loupe__sl_, id), loupe_zone_begin(&LOUPE__CAT(loupe__sl_, id))}
#define LOUPE_ZONE_L(level, name) LOUPE__ZONE_ID(__COUNTER__, level, name)
#define LOUPE_ZONE_DYN(name)                                                                       \
    loupe_zone_ctx LOUPE__CAT(loupe__z_, __COUNTER__)                                              \
        __attribute__((cleanup(loupe__zone_dyn_cleanup), unused)) =                                \
            loupe_zone_begin_dyn((name), LOUPE_LEVEL_INFO)
#endif

#if !defined(LOUPE_DISABLE)
/** A scoped zone with a static name at LOUPE_LEVEL_INFO. */
#define LOUPE_ZONE(name) LOUPE_ZONE_L(LOUPE_LEVEL_INFO, name)
/** A step zone (StepTraceAnnotation): a scoped zone named `name` with argument step_num. */
#define LOUPE_STEP(name, step_num)                                                                 \
    LOUPE_ZONE_L(LOUPE_LEVEL_CRITICAL, name);                                                      \
    loupe_arg_i64("step_num", (int64_t)(step_num))
#define LOUPE_ARG_I64(key, v) loupe_arg_i64((key), (int64_t)(v))
#define LOUPE_ARG_U64(key, v) loupe_arg_u64((key), (uint64_t)(v))
#define LOUPE_ARG_F64(key, v) loupe_arg_f64((key), (double)(v))
#define LOUPE_ARG_BOOL(key, v) loupe_arg_bool((key), (v) ? 1 : 0)
#define LOUPE_ARG_STR(key, v) loupe_arg_str((key), (v))
#define LOUPE_INSTANT(name) loupe_instant_record((name), LOUPE_LEVEL_INFO)
#define LOUPE_COUNTER_I64(name, v) loupe_counter_i64((name), (int64_t)(v))
#define LOUPE_COUNTER_F64(name, v) loupe_counter_f64((name), (double)(v))
#define LOUPE_FLOW_OUT(id) loupe_flow_out((uint64_t)(id))
#define LOUPE_FLOW_IN(id) loupe_flow_in((uint64_t)(id))
#endif

#endif
